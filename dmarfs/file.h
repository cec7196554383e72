/* SPDX-License-Identifier: MIT */
/*
 * file.h - the contents of a regular file in the arena.
 *
 * A file is an ordered list of extents covering [0, size):
 *   HOLE   zeros, no memory (sparse files, truncate up, punched holes);
 *   RAW    bytes in an arena allocation: where writes land, fast and
 *          unencoded ("move bytes when it is convenient");
 *   CHUNK  a range of a chunk in the arena's chunk store, shared by every
 *          extent and file that holds the same content.
 * Writes replace exactly the bytes they cover with RAW extents (a chunk
 * that is partly overwritten stays shared for the rest), so rewriting a
 * region of a big encoded file costs work proportional to the region.
 * dmar_file_encode turns runs of RAW extents into chunks: content-defined
 * cut, SHA-256, dedup against the store, optional zstd.
 *
 * Not thread-safe: the caller holds the inode's lock (shared for read and
 * stat, exclusive for the rest).
 */
#ifndef DMARFS_FILE_H
#define DMARFS_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "arena.h"
#include "bytepack.h"
#include "chunker.h"
#include "hash.h"
#include "wire.h"

enum dmar_encode_mode {
	DMAR_ENCODE_NONE = 0,  /* keep RAW extents, never chunk */
	DMAR_ENCODE_DEDUP = 1, /* chunk + dedup, payloads stored raw (reads in place) */
	DMAR_ENCODE_ZSTD = 2,  /* chunk + dedup + zstd (with the byte pack if any) */
};

struct dmar_content_index;

/* What every file of one mount shares. */
struct dmar_fsctx {
	struct dmar_arena *arena;
	struct dmar_chunker chunker;
	enum dmar_encode_mode encode;
	int level;
	struct dmar_bytepack *pack; /* optional */
	struct dmar_content_index *index; /* optional: see dmar_file_publish */
};

struct dmar_extent;
struct dmar_xtab;

struct dmar_file {
	uint64_t size;
	struct dmar_extent *ext; /* sorted by offset, contiguous, covering [0, size) */
	size_t n, cap;
	bool dirty;              /* has RAW extents not yet encoded */
	uint64_t gen;            /* bumped by every change of the extents */
	/* dmar_file_stats of generation stats_gen - 1 (0: none): a stat of a
	 * 1 GiB file is not a walk over its 32768 extents each time.  Written
	 * by readers under the inode's shared lock, so atomic; all of them
	 * compute the same figures for one gen, which changes only under the
	 * exclusive lock. */
	_Atomic uint64_t stats_gen;
	_Atomic uint64_t stats[6];
	/* Not NULL: ext is this extent table's, shared read-only with other
	 * files of the same content (n as ext, cap 0); the file's first
	 * change copies it (copy on write).  See dmar_file_share. */
	struct dmar_xtab *tab;
};

void dmar_file_init(struct dmar_file *f);
/* Drop every extent (references, allocations). */
void dmar_file_clear(struct dmar_file *f, struct dmar_fsctx *c);

/* Read up to len bytes at off without copying: fills up to max iovecs
 * pointing into the arena (valid while the caller holds the inode lock and
 * the file does not change); holes point at a shared zero page, compressed chunks are decoded
 * into scratch (which needs len bytes).  Returns the iovec count and sets
 * *got to the bytes covered (0 at EOF), or -errno. */
int dmar_file_read_iov(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, size_t len, struct iovec *iov,
		       int max, uint8_t *scratch, size_t *got);
/* Write len bytes at off (the file grows as needed), the bytes coming
 * from copy, called in order for pieces that add up to len (straight from
 * the FUSE request's pipe).  Room is made first: -ENOSPC leaves the file
 * as it was; a copy error after that leaves the range partly written. */
int dmar_file_write_with(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, size_t len,
			 int (*copy)(void *ctx, uint8_t *dst, size_t len), void *ctx);
/* Set the size: shrinking drops extents, growing adds a hole. */
int dmar_file_truncate(struct dmar_file *f, struct dmar_fsctx *c, uint64_t size);
/* Reserve memory for [off, off+len) (holes become zeroed RAW); with
 * keep_size the size does not change.  -ENOSPC if it does not fit. */
int dmar_file_allocate(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len, bool keep_size);
/* Make [off, off+len) a hole, freeing what it held (size unchanged). */
int dmar_file_punch(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len);
/* Make dst's [doff, doff+len) share src's [soff, soff+len) (which is
 * encoded first if dirty): no bytes are copied for encoded data.  Returns
 * the bytes copied (less than len at src's EOF) or -errno.  A copy of all
 * of an encoded src into an empty dst (cp of a whole file) shares src's
 * extent table itself: one reference, whatever the file's size. */
ssize_t dmar_file_share(struct dmar_file *dst, struct dmar_file *src, struct dmar_fsctx *c, uint64_t doff,
			uint64_t soff, uint64_t len);
/* Encode all RAW extents into chunks (step by step, as below). */
int dmar_file_encode(struct dmar_file *f, struct dmar_fsctx *c);

/* One step of that, in two parts, so that the long one needs only a
 * shared lock: prepare reads the file (cuts, hashes and stores the chunks
 * of about 8 MiB of its first RAW run: *plan is NULL when there is nothing
 * to do; -ENOSPC when not even one chunk fits); commit, under the
 * exclusive lock, swaps the chunks in and frees the RAW memory they
 * replace, or returns -EAGAIN (dropping the plan) if the file changed
 * since prepare.  Either way commit frees the plan.  Repeat until prepare
 * gives no plan: each step needs room for its own chunks only, so a file
 * encodes in about its size plus one step.  A step stops early with the
 * chunks it could store when the arena fills up; the rest stays RAW. */
struct dmar_encode_plan;
int dmar_file_encode_prepare(const struct dmar_file *f, struct dmar_fsctx *c, struct dmar_encode_plan **plan);
int dmar_file_encode_commit(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_encode_plan *plan);

struct dmar_file_stats {
	uint64_t logical;   /* size */
	uint64_t raw;       /* bytes in RAW extents */
	uint64_t chunked;   /* bytes in CHUNK extents */
	uint64_t holes;
	uint64_t chunks;    /* CHUNK extents */
	uint64_t stored;    /* arena bytes this file's extents point at (shared ones counted fully) */
};
void dmar_file_stats(const struct dmar_file *f, struct dmar_fsctx *c, struct dmar_file_stats *st);
/* Bytes from off to the next data (SEEK_DATA) or hole (SEEK_HOLE). */
int dmar_file_seek(const struct dmar_file *f, uint64_t off, bool data, uint64_t *out);

/* The two system calls as the FUSE handlers of local and remote files
 * both take them, the arguments unchecked:
 * fallocate(2): mode 0 or FALLOC_FL_KEEP_SIZE reserves (dmar_file_allocate),
 * FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE punches, other modes are
 * -EOPNOTSUPP; a negative off or a len <= 0 is -EINVAL. */
int dmar_file_fallocate(struct dmar_file *f, struct dmar_fsctx *c, int mode, int64_t off, int64_t len);
/* lseek(2) with SEEK_DATA or SEEK_HOLE (else -EINVAL): *out, or -ENXIO
 * for a negative off or one at or past the end. */
int dmar_file_lseek(const struct dmar_file *f, int64_t off, int whence, uint64_t *out);

/* ---- recipes: what a node ships (net/wire.h) ---- */

/* f as a recipe (size and entries; mode and mtime are the caller's): every
 * extent must be a hole or a chunk range, so encode first (-EAGAIN if RAW
 * extents remain).  r->e is malloc'd (dmar_recipe_free). */
int dmar_file_recipe(const struct dmar_file *f, struct dmar_recipe *r);
/* Replace f's contents by r's, taking a reference on every chunk, all or
 * nothing.  -ENODATA if the store lacks chunks: f is unchanged and, if
 * missing is not NULL, *missing (malloc'd) and *nmissing list them.
 * -EINVAL if an entry shows bytes beyond its chunk's length, -ENOMEM. */
int dmar_file_from_recipe(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_recipe *r,
			  struct dmar_id **missing, size_t *nmissing);
/*
 * Content ids (net/wire.h: the SHA-256 of a recipe's entries).  A mount's
 * index (c->index) maps the content ids it has seen to the extent tables
 * that hold them, so that a peer's commit of content this node holds
 * under another name is a table reference (dmar_file_from_content)
 * rather than a recipe of 32768 entries completed, checked and
 * referenced chunk by chunk.  The index does not keep a table alive: the
 * last file to drop one takes it out.
 */
struct dmar_content_index *dmar_content_index_new(void); /* NULL on ENOMEM */
/* Every table must be gone (every file cleared) first. */
void dmar_content_index_free(struct dmar_content_index *x);
/* f's content id if it is known (f shares a published table). */
bool dmar_file_content_known(const struct dmar_file *f, struct dmar_id *cid);
/* Record that f (all chunks and holes, as after dmar_file_from_recipe or
 * a successful dmar_file_recipe; the caller holds f exclusively) has
 * content id cid, the one its recipe gives: f's extents become a shared
 * table, in c->index under cid unless another table is there.  0, -EAGAIN
 * (RAW extents), -ENOMEM. */
int dmar_file_publish(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_id *cid);
/* f's content id: the known one (*known true), else computed from r, f's
 * recipe, and published on f (the caller holds f exclusively) so that
 * the next ship of f or of a copy of it knows it.  0 or -ENOMEM. */
int dmar_file_content_id(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_recipe *r,
			 struct dmar_id *cid, bool *known);
/* Replace f's contents by those of the published table with content id
 * cid and size bytes: 0, or -ENOENT if c's index has none (f unchanged). */
int dmar_file_from_content(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_id *cid, uint64_t size);

/* Chunk id of c's store in wire form: raw or zstd frames point into the
 * arena (valid while the caller holds a reference); a byte-pack chunk is
 * decoded into *buf (malloc'd, else NULL), since a peer may lack the pack.
 * 0, -ENOENT, -ENOMEM, -EIO. */
int dmar_fsctx_chunk_wire(struct dmar_fsctx *c, const struct dmar_id *id, struct dmar_wire_chunk *w, uint8_t **buf);
/* Store a chunk that came from the wire and was verified (decoded: its
 * w->len bytes), adding one reference: 0, -ENOSPC, -ENOMEM. */
int dmar_fsctx_chunk_put(struct dmar_fsctx *c, const struct dmar_wire_chunk *w, const uint8_t *decoded);

#endif /* DMARFS_FILE_H */
