/* SPDX-License-Identifier: MIT */
/*
 * recipe.h - a file as an ordered list of chunk ranges and holes: what a
 * node needs, besides the chunks, to build the file, and what names its
 * content.  The byte forms are normative here and in docs/rest-api.md;
 * all integers are little-endian.
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
 * Recipe delta (Content-Type: application/x-dmar-recipe-delta): a new
 * version of a file as edits of the recipe of the version the receiver
 * holds at the same path (the base, named by its content id), for a
 * commit whose recipe mostly repeats the base's: a 1 GiB file with 16
 * regions rewritten is 2.5 KB of edits against 350 KB of short recipe.
 * The receiver applies it only to a file whose content id is the base's.
 *     header  96 bytes
 *        0  4  magic "DMRD"
 *        4  2  version (1)
 *        6  2  flags (0)
 *        8 40  size, mode, reserved, mtime, nanoseconds, n, reserved of
 *              the new recipe: as in the recipe header
 *       48 32  base content id
 *       80  4  base n: the entries of the base recipe
 *       84  4  m: number of edits
 *       88  8  reserved, zero
 *     m edits, in order of at, none overlapping the one before
 *        0  4  at: the first base entry the edit replaces
 *        4  4  del: base entries it removes (at + del <= base n)
 *        8  4  ins: new entries it puts there, which follow
 *       12  4  reserved, zero
 *       ins entries, 48 bytes each, as in the recipe
 *     trailer 32 bytes: SHA-256 of every byte before it
 *   The result, the base's entries with each edit applied, must have n
 *   entries covering size bytes, as a recipe's.
 *
 * Every parser here takes untrusted bytes: it checks each field against
 * the bytes really present and the limits below, never allocates more than
 * those limits allow, and says what was wrong in a struct dmar_error.
 *
 * The artifact's file id (format.h) is another hash, of a chunk list
 * without holes or ranges, fixed by the .dmar format; the content id here
 * names a file on the mount and on the wire.
 */
#ifndef DMAR_RECIPE_H
#define DMAR_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "format.h"
#include "hash.h"

#define DMAR_RECIPE_MAGIC "DMRC"
#define DMAR_RECIPE_VERSION 1
#define DMAR_RECIPE_HDR_SIZE 48
#define DMAR_RECIPE_ENTRY_SIZE 48
#define DMAR_RECIPE_TRAILER_SIZE 32
/* 16 Mi entries: a 512 GiB file of 32 KiB chunks, a 768 MiB recipe. */
#define DMAR_RECIPE_MAX_ENTRIES (1u << 24)
#define DMAR_RECIPE_MAX_SIZE (1ull << 62)

/* The largest chunk an entry may show: the largest the artifact format
 * allows. */
#define DMAR_RECIPE_CHUNK_MAX (1u << DMAR_CHUNK_LOG2_MAX)

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
 * len > 0, a chunk's skip + len <= DMAR_RECIPE_CHUNK_MAX, a hole's id and
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

/* ---- recipe deltas ---- */

#define DMAR_RECIPE_DELTA_MAGIC "DMRD"
#define DMAR_RECIPE_DELTA_HDR_SIZE 96
#define DMAR_RECIPE_DELTA_EDIT_SIZE 16

struct dmar_recipe_edit {
	uint32_t at, del, ins;
	uint32_t first; /* its first entry in the delta's entries */
};

struct dmar_recipe_delta {
	struct dmar_recipe head; /* the new recipe's fields and n; e NULL */
	struct dmar_id base;     /* the base's content id */
	uint32_t base_n;
	uint32_t m;
	struct dmar_recipe_edit *edits;  /* malloc'd, m of them */
	struct dmar_recipe_entry *e;     /* malloc'd, every inserted entry */
	size_t ne;
};

/*
 * The delta that makes r from base (whose content id is base_cid): *out
 * malloc'd, *len its bytes.  Entries equal in kind, id, len and skip are
 * kept; a run that differs is found again within a window, and after a
 * rewritten region longer than that, about where it would resume in
 * place.  -E2BIG when the delta would carry more than max_ins new
 * entries (then a short recipe says it in fewer bytes), -ENOMEM.
 */
int dmar_recipe_delta_make(const struct dmar_recipe *base, const struct dmar_id *base_cid,
			   const struct dmar_recipe *r, size_t max_ins, uint8_t **out, size_t *len);
/*
 * Parse len bytes of untrusted input into d (free with
 * dmar_recipe_delta_free): magic, version, zero flags and reserved
 * fields, the header's fields as a recipe's, the trailer, edits in order
 * and within base n, the inserted entries as a recipe's, a result of n
 * entries, no bytes left over.  0, -EBADMSG (err says what), -ENOMEM.
 */
int dmar_recipe_delta_parse(const void *buf, size_t len, struct dmar_recipe_delta *d, struct dmar_error *err);
/* The new recipe: base (which must have d->base_n entries) with d's
 * edits applied, checked to cover its size.  0, -EBADMSG, -ENOMEM; r->e
 * malloc'd. */
int dmar_recipe_delta_apply(const struct dmar_recipe_delta *d, const struct dmar_recipe *base, struct dmar_recipe *r,
			    struct dmar_error *err);
void dmar_recipe_delta_free(struct dmar_recipe_delta *d); /* NULL-safe */

#endif /* DMAR_RECIPE_H */
