/* SPDX-License-Identifier: MIT */
/*
 * wire.h - what crosses the wire between nodes, byte by byte.
 *
 * docs/rest-api.md is the normative description; this header is its C
 * mirror.  Two binary bodies carry the bulk of a transfer (JSON carries the
 * rest); all integers are little-endian.
 *
 * Recipe (Content-Type: application/x-dmar-recipe): a file as an ordered
 * list of chunk ranges and holes.
 *     header  48 bytes
 *        0  4  magic "DMRC"
 *        4  2  version (1)
 *        6  2  flags (0)
 *        8  8  size: logical bytes, the sum of the entries' lengths
 *       16  4  mode: permission bits (st_mode & 07777)
 *       20  4  reserved, zero
 *       24  8  mtime, seconds since the epoch (signed)
 *       32  4  mtime, nanoseconds (< 10^9)
 *       36  4  n: number of entries (<= DMAR_RECIPE_MAX_ENTRIES)
 *       40  8  reserved, zero
 *     n entries, 48 bytes each
 *        0 32  chunk id (SHA-256 of the whole chunk); zero for a hole
 *       32  8  len: bytes of the file this entry covers (> 0)
 *       40  4  skip: first byte of the chunk the entry shows (0 for a hole)
 *       44  4  kind: 0 chunk range, 1 hole
 *     trailer 32 bytes: the recipe id, SHA-256(header || content id),
 *             where the content id is the SHA-256 of the n entries
 *   The content id names what the file holds, whatever its name, mode or
 *   mtime: a node that holds a file with that content id can make another
 *   one from it without the entries (X-Dmar-Content, docs/rest-api.md),
 *   and the recipe id still binds the header to it.
 *   A chunk entry shows bytes [skip, skip + len) of its chunk: a file that
 *   was partly rewritten or assembled by copy_file_range can show part of
 *   a chunk, and the whole chunk travels.
 *
 * Short recipe (Content-Type: application/x-dmar-recipe-short): the same
 * file with each chunk named by the first idlen bytes of its id, for a
 * commit to a node that holds most of the chunks (a new version of a file
 * it has, a file it holds under another name).  The receiver completes
 * each prefix from its chunk store and checks the result against the full
 * recipe's id, which the short one carries; a prefix it cannot complete
 * (no chunk, or more than one) is reported, never guessed.
 *     header  80 bytes
 *        0  4  magic "DMRS"
 *        4  2  version (1)
 *        6  1  idlen: bytes of each id prefix (8..32)
 *        7  1  reserved, zero
 *        8 40  size, mode, reserved, mtime, nanoseconds, n, reserved:
 *              as in the recipe header
 *       48 32  recipe id: the trailer of the full recipe
 *     n entries, each a tag byte, then:
 *        tag 0 chunk range from the chunk's start (skip 0):
 *              idlen bytes of the id, ULEB128 len
 *        tag 1 hole: ULEB128 len
 *        tag 2 chunk range with skip > 0: idlen bytes, ULEB128 len,
 *              ULEB128 skip
 *     ULEB128: 7 bits a byte, least significant first, the high bit set on
 *     every byte but the last, in the fewest bytes (no trailing zero
 *     groups).  The same limits as the recipe's apply; nothing may follow
 *     the last entry.  No checksum of its own: the completed recipe must
 *     hash to the recipe id.
 *
 * Chunk batch (Content-Type: application/x-dmar-chunks): chunks with their
 * payloads, for upload and for download.
 *     header  16 bytes: magic "DMCB", version u16 (1), flags u16 (0),
 *                       count u32, reserved u32 (0)
 *     count records, each a 44-byte header then its payload:
 *        0 32  id: SHA-256 of the decoded chunk
 *       32  1  enc: 0 raw, 1 zstd (one magicless zstd frame, no dictionary)
 *       33  3  reserved, zero
 *       36  4  len: decoded bytes (1..DMAR_WIRE_CHUNK_MAX)
 *       40  4  stored: payload bytes (raw: == len; zstd: 1..ZSTD_compressBound(len))
 *       44     payload
 *   Nothing may follow the last record.
 *   An upload (POST /v1/chunks) may carry the whole batch compressed:
 *   Content-Encoding: zstd, one standard zstd frame (magic included,
 *   window <= 8 MiB) that decodes to the batch above, its records then
 *   usually raw.  The receiver decodes it as it arrives, at most 4 x its
 *   body limit of decoded bytes (413 beyond); any other Content-Encoding is
 *   415.  Senders use it for batches of mostly compressible chunks.
 *
 * Id list (application/octet-stream): n ids of 32 bytes back to back.
 *
 * Every parser here takes untrusted bytes: it checks each field against
 * the bytes really present and the limits below, never allocates more than
 * those limits allow, and says what was wrong in a struct dmar_error.
 */
#ifndef DMAR_WIRE_H
#define DMAR_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "hash.h"

#define DMAR_RECIPE_MAGIC "DMRC"
#define DMAR_RECIPE_VERSION 1
#define DMAR_RECIPE_HDR_SIZE 48
#define DMAR_RECIPE_ENTRY_SIZE 48
#define DMAR_RECIPE_TRAILER_SIZE 32
/* 16 Mi entries: a 512 GiB file of 32 KiB chunks, a 768 MiB recipe. */
#define DMAR_RECIPE_MAX_ENTRIES (1u << 24)
#define DMAR_RECIPE_MAX_SIZE (1ull << 62)

#define DMAR_BATCH_MAGIC "DMCB"
#define DMAR_BATCH_VERSION 1
#define DMAR_BATCH_HDR_SIZE 16
#define DMAR_BATCH_REC_SIZE 44
/* The largest chunk the artifact format allows (2^DMAR_CHUNK_LOG2_MAX). */
#define DMAR_WIRE_CHUNK_MAX (4u << 20)

enum dmar_recipe_kind { DMAR_RECIPE_CHUNK = 0, DMAR_RECIPE_HOLE = 1 };

struct dmar_recipe_entry {
	struct dmar_id id; /* zero for a hole */
	uint64_t len;
	uint32_t skip;
	uint32_t kind; /* enum dmar_recipe_kind */
};

struct dmar_recipe {
	uint64_t size;
	uint32_t mode;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	size_t n;
	struct dmar_recipe_entry *e; /* malloc'd, n entries */
};

/* Bytes of a recipe with n entries. */
size_t dmar_recipe_wire_size(size_t n);
/* The recipe id of a recipe with r's header fields, n entries and
 * content id cid. */
void dmar_recipe_id_of(const struct dmar_recipe *r, size_t n, const struct dmar_id *cid, struct dmar_id *rid);
/* r's recipe id and content id (either may be NULL), without writing
 * the recipe out: 0 or -ENOMEM. */
int dmar_recipe_ids(const struct dmar_recipe *r, struct dmar_id *rid, struct dmar_id *cid);
/* Write r (which must satisfy the rules parse checks) into out, which has
 * dmar_recipe_wire_size(r->n) bytes; the trailer is computed here.  If id
 * is not NULL it gets the recipe id (the trailer). */
void dmar_recipe_write(const struct dmar_recipe *r, uint8_t *out, struct dmar_id *id);
/*
 * Parse len bytes of untrusted input into r (r->e malloc'd; free with
 * dmar_recipe_free).  Checks: magic, version, zero flags and reserved
 * fields, exact length for n, the trailer, every entry (known kind,
 * len > 0, a chunk's skip + len <= DMAR_WIRE_CHUNK_MAX, a hole's id and
 * skip zero), sizes adding up to size without overflow, mode & ~07777 == 0,
 * nanoseconds < 10^9.  Returns 0, -EBADMSG (err says which field or entry),
 * or -ENOMEM.  r is written only on success.
 */
int dmar_recipe_parse(const void *buf, size_t len, struct dmar_recipe *r, struct dmar_error *err);
/* The same, and *cid the recipe's content id (which checking the trailer
 * computes anyway; written only on success). */
int dmar_recipe_parse_cid(const void *buf, size_t len, struct dmar_recipe *r, struct dmar_id *cid,
			  struct dmar_error *err);
void dmar_recipe_free(struct dmar_recipe *r); /* frees r->e; NULL-safe */
/* The header of a recipe (is_short false) or short recipe in len bytes
 * of untrusted input, checked as the parsers check it (a recipe's length
 * too, not its entries or trailer): r's fields with r->n and no entries
 * (r->e NULL), *id the recipe id it names.  0 or -EBADMSG. */
int dmar_recipe_head_parse(const void *buf, size_t len, bool is_short, struct dmar_recipe *r, struct dmar_id *id,
			   struct dmar_error *err);
/* A malloc'd copy of the ids of r's chunk entries, in order (*n of them;
 * room for one at least, so an empty list is no NULL), or NULL. */
struct dmar_id *dmar_recipe_chunk_ids(const struct dmar_recipe *r, size_t *n);

/* ---- short recipes ---- */

#define DMAR_RECIPE_SHORT_MAGIC "DMRS"
#define DMAR_RECIPE_SHORT_HDR_SIZE 80
#define DMAR_RECIPE_SHORT_IDLEN_MIN 8
/* What senders use: 2^64 prefixes, against chunk counts in the millions. */
#define DMAR_RECIPE_SHORT_IDLEN 8

/* An upper bound on the bytes of a short recipe with n entries. */
size_t dmar_recipe_short_max_size(size_t n);
/* Write r as a short recipe with idlen-byte prefixes (8..32), carrying
 * id, the id of r's full recipe (dmar_recipe_write); out has
 * dmar_recipe_short_max_size(r->n) bytes.  Returns the bytes written. */
size_t dmar_recipe_short_write(const struct dmar_recipe *r, const struct dmar_id *id, unsigned idlen, uint8_t *out);
/* Its 80-byte header alone (r->n entries said, none written): the body
 * of a content-only commit (docs/rest-api.md, X-Dmar-Content). */
void dmar_recipe_short_head_write(const struct dmar_recipe *r, const struct dmar_id *id, unsigned idlen, uint8_t *out);
/*
 * Parse len bytes of untrusted input: r as dmar_recipe_parse gives it, but
 * each chunk entry's id holds only the first *idlen bytes (the rest zero);
 * *id the full recipe's id.  The checks of dmar_recipe_parse, plus tags,
 * canonical ULEB128, skip > 0 exactly for tag 2, no bytes left over.
 * Returns 0, -EBADMSG (err says what and which entry), or -ENOMEM.
 */
int dmar_recipe_short_parse(const void *buf, size_t len, struct dmar_recipe *r, struct dmar_id *id, unsigned *idlen,
			    struct dmar_error *err);

/* ---- chunk batches ---- */

enum dmar_wire_enc { DMAR_WIRE_RAW = 0, DMAR_WIRE_ZSTD = 1 };

struct dmar_wire_chunk {
	struct dmar_id id;
	uint8_t enc;    /* enum dmar_wire_enc */
	uint32_t len;   /* decoded bytes */
	uint32_t stored;
	const uint8_t *payload; /* stored bytes */
	/* Set by a chunk source that already tried zstd on this raw chunk
	 * and kept it raw (it saved under 1/16): the push then sends it as it
	 * is without probing it again.  Not on the wire. */
	bool tried;
};

/* Write the 16-byte batch header / a record's 44-byte header. */
void dmar_batch_write_header(uint8_t out[DMAR_BATCH_HDR_SIZE], uint32_t count);
void dmar_batch_write_record(uint8_t out[DMAR_BATCH_REC_SIZE], const struct dmar_wire_chunk *c);

/*
 * An incremental batch parser: feed it the body as it arrives, in pieces
 * of any size; it calls fn once for each complete record, in order.
 * c->payload points into the fed data when the record arrived in one
 * piece, else into one of the parser's two buffers of at most
 * DMAR_BATCH_REC_SIZE + ZSTD_compressBound(DMAR_WIRE_CHUNK_MAX) bytes
 * each; the payloads of every record delivered during a feed stay valid
 * until the next call on the parser (feed, finish, free), as long as the
 * caller keeps the fed data, so the records of one feed can be verified
 * together after it returns (dmar_wire_chunks_verify).  The record's fields are checked (enc, reserved bytes, len and
 * stored within limits) before fn sees it; the payload is NOT verified
 * against the id: that is dmar_wire_chunk_verify's job.  max_count bounds
 * the header's count (-EBADMSG above it).
 */
struct dmar_batch_parser;
typedef int (*dmar_batch_fn)(void *ctx, const struct dmar_wire_chunk *c);
int dmar_batch_parser_new(struct dmar_batch_parser **out, uint32_t max_count, dmar_batch_fn fn, void *ctx);
/* 0, -EBADMSG (malformed: err says what and which record; bytes after
 * the last record count as malformed), -ENOMEM, or fn's negative return
 * (parsing stops; later feeds return the same error). */
int dmar_batch_parser_feed(struct dmar_batch_parser *p, const void *data, size_t len, struct dmar_error *err);
/* At the end of the body: 0 if exactly count records arrived, else
 * -EBADMSG ("truncated: 3 of 10 records"). */
int dmar_batch_parser_finish(struct dmar_batch_parser *p, struct dmar_error *err);
uint32_t dmar_batch_parser_count(const struct dmar_batch_parser *p); /* header's count, 0 before it */
void dmar_batch_parser_free(struct dmar_batch_parser *p); /* NULL-safe */

/*
 * Check that c's payload decodes to exactly c->len bytes whose SHA-256 is
 * c->id.  For zstd, scratch (c->len bytes) receives the decoded bytes; dctx
 * is the caller's (one per thread).  *decoded gets the decoded bytes (the
 * payload itself for raw).  Returns 0, or -EILSEQ with err naming the
 * chunk ("chunk 3f2a...: hash mismatch", "...: zstd frame corrupt", "...:
 * decodes to 100 bytes, declared 4096").
 */
struct ZSTD_DCtx_s;
int dmar_wire_chunk_verify(const struct dmar_wire_chunk *c, struct ZSTD_DCtx_s *dctx, uint8_t *scratch,
			   const uint8_t **decoded, struct dmar_error *err);

/*
 * Verify n raw chunks at once: the checks of dmar_wire_chunk_verify for
 * each, the payloads hashed with dmar_hash_many (with SHA-NI two side by
 * side, about 1.7x the throughput of one at a time).  ok[i] tells whether
 * c[i] is a raw chunk (stored == len) whose payload's SHA-256 is its id;
 * err gets the message of the first that is not (as
 * dmar_wire_chunk_verify words it).  Returns how many are not.
 */
size_t dmar_wire_chunks_verify(const struct dmar_wire_chunk *c, size_t n, bool *ok, struct dmar_error *err);

/* ---- names shared by server and client ---- */

/*
 * A path in the API names something below a node's root: components
 * separated by single '/', each a name dmar_wire_name_check accepts, the
 * whole at most 4095 bytes.  "" is the root.  A trailing '/' is allowed.
 * 0 or -EINVAL with err saying why.
 */
int dmar_wire_path_check(const char *path, struct dmar_error *err); /* NULL: -EINVAL */
/*
 * The name policy of the API: the n bytes at name are 1..255 bytes of
 * valid UTF-8 (JSON carries them), no control character (0x00-0x1f,
 * 0x7f), not "." or "..", and at_root, not starting with '@' (a mount
 * shows its peers there as @NAME).  0 or -EINVAL with err (may be NULL)
 * saying why.
 */
int dmar_wire_name_check(const char *name, size_t n, bool at_root, struct dmar_error *err);

/*
 * X-Dmar-Upload names the chunks a sender uploads for one transfer: 16 hex
 * digits of a random non-zero id, the same on every POST /v1/chunks of the
 * transfer.  Make one with dmar_wire_upload_new (0 or -errno), write it
 * with "%016" PRIx64; dmar_wire_upload_parse takes exactly that form
 * (0, or -EINVAL for anything else, 0 included).
 */
int dmar_wire_upload_new(uint64_t *id);
int dmar_wire_upload_parse(const char *s, uint64_t *id);

/* "ENOSPC" for -ENOSPC (or ENOSPC); "EIO" for anything unnamed (0 too).
 * The names are those of the table behind dmar_wire_http_status. */
const char *dmar_wire_errno_name(int e);
/* -ENOSPC for "ENOSPC"; -EIO for an unknown or NULL name. */
int dmar_wire_errno_from_name(const char *name);
/* The HTTP status an error answers with (e or -e): 404 ENOENT, 409
 * EEXIST/ENOTEMPTY/EMLINK/ENODATA (missing chunks), 507 ENOSPC/EDQUOT, 403
 * EACCES/EPERM/EROFS, 400 EINVAL/EBADMSG/ENOTDIR/EISDIR/ENAMETOOLONG/EXDEV,
 * 413 EFBIG/E2BIG, 401 EKEYREJECTED, 422 EILSEQ (a chunk does not match its
 * id), 503 EAGAIN/ENOMEM, 501 ENOTSUP, 502 ECONNREFUSED/EHOSTUNREACH (a
 * peer), 504 ETIMEDOUT, 500 EIO and the rest. */
int dmar_wire_http_status(int e);

#endif /* DMAR_WIRE_H */
