/* SPDX-License-Identifier: MIT */
/*
 * wire.h - what crosses the wire between nodes, byte by byte.
 *
 * docs/rest-api.md is the normative description; this header is its C
 * mirror.  Two binary bodies carry the bulk of a transfer (JSON carries the
 * rest); all integers are little-endian.
 *
 * Recipes (full and short) are codec/recipe.h's: a node commits a file
 * by its recipe.
 *
 * Chunk batch (Content-Type: application/x-dmar-chunks): chunks with their
 * payloads, for upload and for download.
 *     header  16 bytes: magic "DMCB", version u16 (1), flags u16 (0),
 *                       count u32, reserved u32 (0)
 *     count records, each a 44-byte header then its payload:
 *        0 32  id: SHA-256 of the decoded chunk
 *       32  1  enc: 0 raw, 1 zstd (one magicless zstd frame, no dictionary),
 *                   2 zstd over the bytes grouped at width 2, 3 at width 4
 *                   (codec/bgroup.h: the frame decodes to the grouped form)
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
 * Tree commit (POST /v1/tree, Content-Type: application/x-dmar-tree): many
 * names made at once -- directories, files from recipes, symlinks -- with
 * the chunks their files need that the node may lack, in one request.
 *     header  16 bytes: magic "DMTR", version u16 (1), flags u16 (0),
 *                       count u32 (1..DMAR_TREE_OPS_MAX), ops_len u32
 *                       (bytes of the op records, 16..DMAR_TREE_OPS_BYTES_MAX)
 *     ops_len bytes: count op records, each
 *        0  1  kind: 1 directory, 2 file, 3 symlink
 *        1  1  flags: bit 0 no-replace (file, symlink); the others zero
 *        2  2  path_len: 1..4095
 *        4  4  mode: a directory's permission bits (0..07777); else 0
 *        8  4  data_len: file: its recipe (dmar_recipe_write, full form);
 *                        symlink: the target (1..4095 bytes, no NUL);
 *                        directory: 0
 *       12  4  reserved, zero
 *       16     path (an API path, dmar_wire_path_check; not the root),
 *              then data, then zero bytes to a multiple of 8
 *     then a chunk batch (the form above; count may be 0).
 *   The whole body may be one zstd frame (Content-Encoding: zstd), as an
 *   upload may: across its small files it compresses like a tar.
 *   The node stores each chunk as it arrives (verified), then makes the
 *   names in order, each on its own as the single-name endpoints would
 *   (a directory that exists is made already); the answer says which
 *   failed.
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

#include "codec/compress.h"
#include "codec/error.h"
#include "codec/hash.h"
#include "codec/recipe.h"

#define DMAR_BATCH_MAGIC "DMCB"
#define DMAR_BATCH_VERSION 1
#define DMAR_BATCH_HDR_SIZE 16
#define DMAR_BATCH_REC_SIZE 44
/* The largest chunk a batch carries: the largest a recipe shows. */
#define DMAR_WIRE_CHUNK_MAX DMAR_RECIPE_CHUNK_MAX

/* ---- chunk batches ---- */

enum dmar_wire_enc { DMAR_WIRE_RAW = 0, DMAR_WIRE_ZSTD = 1, DMAR_WIRE_ZSTD_G2 = 2, DMAR_WIRE_ZSTD_G4 = 3 };

/* A zstd encoding's chunk-frame form (codec/compress.h), or DMAR_ZX_RAW
 * for raw and unknown encodings. */
static inline enum dmar_zx dmar_wire_enc_zx(uint8_t enc)
{
	return enc == DMAR_WIRE_ZSTD ? DMAR_ZX_PLAIN
	       : enc == DMAR_WIRE_ZSTD_G2 ? DMAR_ZX_G2
	       : enc == DMAR_WIRE_ZSTD_G4 ? DMAR_ZX_G4 : DMAR_ZX_RAW;
}

/* The encoding of a chunk frame of form zx (not DMAR_ZX_RAW). */
static inline uint8_t dmar_wire_zx_enc(enum dmar_zx zx)
{
	return zx == DMAR_ZX_G2 ? DMAR_WIRE_ZSTD_G2 : zx == DMAR_ZX_G4 ? DMAR_WIRE_ZSTD_G4 : DMAR_WIRE_ZSTD;
}

/* Scratch a decoder of one chunk needs (dmar_wire_chunk_verify): the
 * decoded bytes, and the grouped form they are joined from. */
#define DMAR_WIRE_SCRATCH (2u * DMAR_WIRE_CHUNK_MAX)

struct dmar_wire_chunk {
	struct dmar_id id;
	uint8_t enc;    /* enum dmar_wire_enc */
	uint32_t len;   /* decoded bytes */
	uint32_t stored;
	const uint8_t *payload; /* stored bytes */
	/* Set by a chunk source whose compress policy (codec/compress.h)
	 * already judged this raw chunk and kept it raw: the push then sends
	 * it as it is without probing it again.  Not on the wire. */
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
 * c->id.  For zstd, scratch (2 * c->len bytes: DMAR_WIRE_SCRATCH serves
 * any chunk) receives the decoded bytes at its start; dctx
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

/* ---- tree commits ---- */

#define DMAR_TREE_MAGIC "DMTR"
#define DMAR_TREE_VERSION 1
#define DMAR_TREE_HDR_SIZE 16
#define DMAR_TREE_OP_SIZE 16
#define DMAR_TREE_OPS_MAX 16384
#define DMAR_TREE_OPS_BYTES_MAX (16u << 20)
#define DMAR_TREE_PATH_MAX 4095

enum dmar_tree_kind { DMAR_TREE_DIR = 1, DMAR_TREE_FILE = 2, DMAR_TREE_SYMLINK = 3 };
#define DMAR_TREE_NOREPLACE 1u

struct dmar_tree_op {
	uint8_t kind;  /* enum dmar_tree_kind */
	uint8_t flags; /* DMAR_TREE_NOREPLACE */
	uint32_t mode; /* DMAR_TREE_DIR: permission bits */
	char path[DMAR_TREE_PATH_MAX + 1]; /* NUL-terminated */
	const uint8_t *data; /* recipe or symlink target (not NUL-terminated) */
	size_t data_len;
};

/* Bytes of an op record with these lengths, padding included. */
size_t dmar_tree_op_size(size_t path_len, size_t data_len);
void dmar_tree_write_header(uint8_t out[DMAR_TREE_HDR_SIZE], uint32_t count, uint32_t ops_len);
/* Write op's record at out (dmar_tree_op_size bytes); how many. */
size_t dmar_tree_write_op(uint8_t *out, const struct dmar_tree_op *op);
/* The header: 0 with *count and *ops_len, or -EBADMSG with err. */
int dmar_tree_header_parse(const uint8_t in[DMAR_TREE_HDR_SIZE], uint32_t *count, uint32_t *ops_len,
			   struct dmar_error *err);
/* The op record at *pos of the len bytes at ops into *op (data pointing
 * into ops), *pos moved past it: 0, or -EBADMSG with err naming the record
 * (index k) and what is wrong.  Checks every field: kind, flags, reserved
 * bytes and padding zero, the path by dmar_wire_path_check (not the
 * root), the mode, data_len for the kind (a file's is only bounded here:
 * its recipe is the commit's to parse). */
int dmar_tree_op_parse(const uint8_t *ops, size_t len, size_t *pos, uint32_t k, struct dmar_tree_op *op,
		       struct dmar_error *err);

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
