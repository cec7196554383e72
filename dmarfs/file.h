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

#include "arena/arena.h"
#include "codec/bytepack.h"
#include "codec/chunker.h"
#include "codec/hash.h"
#include "net/wire.h"

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
	uint64_t max_size; /* a file may not grow past this (-EFBIG); 0: no limit */
};

struct dmar_extent;
struct dmar_xtab;
struct dmar_dur;

/* Ranges changed since the last sync a file tracks before it merges the
 * nearest two (a sync records the extents of each: see below). */
#define DMAR_FILE_CHG_MAX 8

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
	/* Durability: the states the journal may show, and RAW space they
	 * may reference (NULL until the first sync); the ranges changed
	 * since the last sync, sorted and disjoint. */
	struct dmar_dur *dur;
	uint64_t chg[DMAR_FILE_CHG_MAX][2];
	unsigned nchg;
};

void dmar_file_init(struct dmar_file *f);
/* Drop every extent (references, allocations): an empty file. */
void dmar_file_clear(struct dmar_file *f, struct dmar_fsctx *c);
/* Drop everything, the durable states too (the file is gone from the
 * journal): f is as after dmar_file_init. */
void dmar_file_destroy(struct dmar_file *f, struct dmar_fsctx *c);

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
/* Make dst's [doff, doff+len) share src's [soff, soff+len): no bytes are
 * copied for encoded data, RAW bytes are (so encode src first: the caller
 * can sync between encode steps, file.c cannot).  Returns the bytes
 * copied (less than len at src's EOF) or -errno.  A copy of all of an
 * encoded src into an empty dst (cp of a whole file) shares src's extent
 * table itself: one reference, whatever the file's size. */
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

/*
 * ---- durability: what the journal says a file holds ----
 *
 * A sync records a file's state in the journal (dmarfs/persist.c): the
 * extents of the ranges changed since the last sync, as they are now.
 * Until the next sync the recorded state is what a crash brings back, so
 * everything it shows must stay where it is:
 *  - its chunks: the state holds a reference on each (one reference on
 *    the file's extent table when the file has no RAW extent, which
 *    costs nothing until the file's next change copies the table);
 *  - its RAW allocations: the live file may write into them in place (a
 *    crash then shows those bytes new or old, as a disk does for a block
 *    written since the last fsync), but space it gives back goes to a
 *    pending list instead of the arena.
 * A sync whose record is in the journal drops the states before it and
 * releases what was pending when it began.
 */
struct dmar_file_sync;
/* An extent as a record shows it (kind DMAR_REXT_*). */
enum { DMAR_REXT_HOLE = 0, DMAR_REXT_RAW = 1, DMAR_REXT_CHUNK = 2 };
struct dmar_rext {
	uint64_t len;
	uint8_t kind;
	uint8_t enc;        /* CHUNK: enum dmar_chunk_enc */
	uint32_t skip;      /* CHUNK: first byte of the chunk shown; RAW: of the allocation */
	uint64_t aoff;      /* RAW: allocation; CHUNK: payload */
	uint64_t acap;      /* RAW: allocation bytes */
	uint32_t clen;      /* CHUNK: chunk bytes */
	uint32_t stored;    /* CHUNK: payload bytes */
	struct dmar_id id;  /* CHUNK */
};
/* Begin a sync of f (held exclusively until dmar_file_sync_end): full
 * records all of f, else only the ranges changed since the last sync (all
 * of f at its first).  0 and *out, -ENOMEM.  Then the record: */
int dmar_file_sync_begin(struct dmar_file *f, struct dmar_fsctx *c, bool full, struct dmar_file_sync **out);
/* Whether anything changed since the last sync (a first sync always). */
bool dmar_file_sync_needed(const struct dmar_file *f);
/* The k-th range to record (k < count): [*lo, *hi) and its extents, in
 * order, by index [*first, *first + *n) for dmar_file_sync_ext. */
unsigned dmar_file_sync_ranges(const struct dmar_file_sync *s);
void dmar_file_sync_range(const struct dmar_file_sync *s, unsigned k, uint64_t *lo, uint64_t *hi, size_t *first,
			  size_t *n);
void dmar_file_sync_ext(const struct dmar_file *f, size_t i, struct dmar_rext *x);
/* End it: with recorded (the record is in the journal) the older states
 * go and the pending space is released; without, everything is kept for
 * the next sync.  f held exclusively; frees s. */
void dmar_file_sync_end(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_file_sync *s, bool recorded);

/* Replay (an attached arena, nothing allocated yet): set f's size, then
 * make [lo, hi) the n extents x (lo <= hi <= size, their lengths adding up
 * to hi - lo).  Only bookkeeping: no reference taken, no space claimed.
 * 0, -EINVAL (a record that does not add up), -ENOMEM. */
int dmar_file_replay(struct dmar_file *f, uint64_t size, uint64_t lo, uint64_t hi, const struct dmar_rext *x,
		     size_t n);
/* Replay: forget f's extents (nothing of them was claimed). */
void dmar_file_forget(struct dmar_file *f);
/* After replay: claim what f shows (adopting its chunks into the store,
 * its RAW allocations in the arena) and make it f's durable state.
 * -EUCLEAN (two owners of the same bytes, a chunk in two places), -EINVAL
 * (an extent outside the arena), -ENOMEM.  Then, once every file is
 * activated, dmar_file_activate_copies: RAW pieces that replay left
 * sharing one allocation each get their own. */
int dmar_file_activate(struct dmar_file *f, struct dmar_fsctx *c);
int dmar_file_activate_copies(struct dmar_file *f, struct dmar_fsctx *c);

/* For consistency checks (f held): every reference f holds.  raw: arena
 * space it owns; chunk: a chunk reference it holds itself; table: an
 * extent table it holds a reference on (its chunk references are the
 * table's: dmar_file_table_ids). */
struct dmar_file_refs {
	void (*raw)(void *ctx, uint64_t off, uint64_t len);
	void (*chunk)(void *ctx, const struct dmar_id *id);
	void (*table)(void *ctx, const struct dmar_xtab *t);
	void *ctx;
};
void dmar_file_refs(const struct dmar_file *f, const struct dmar_file_refs *r);
void dmar_file_table_ids(const struct dmar_xtab *t, void (*fn)(void *ctx, const struct dmar_id *id), void *ctx);

/* ---- recipes: what a node ships (net/wire.h) ---- */

/* f as a recipe (size and entries; mode and mtime are the caller's): every
 * extent must be a hole or a chunk range, so encode first (-EAGAIN if RAW
 * extents remain).  r->e is malloc'd (dmar_recipe_free). */
int dmar_file_recipe(const struct dmar_file *f, struct dmar_recipe *r);
/* Replace f's contents by r's, taking a reference on every chunk, all or
 * nothing.  -ENODATA if the store lacks chunks: f is unchanged and, if
 * missing is not NULL, *missing (malloc'd) and *nmissing list them.
 * -EINVAL if an entry shows bytes beyond its chunk's length, -ENOMEM. */
/* Give back the room the last RAW extent keeps for appends (up to 1 MiB,
 * so that a sequential writer fills one allocation): at a file's last
 * close, where a file left RAW (encode=none, or no room to encode) must
 * not hold it.  f exclusively locked. */
void dmar_file_trim(struct dmar_file *f, struct dmar_fsctx *c);
/* Daemon memory a file of n extents takes for them (outside the arena). */
size_t dmar_file_extent_bytes(size_t n);
int dmar_file_from_recipe(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_recipe *r,
			  struct dmar_id **missing, size_t *nmissing);
/*
 * Complete ids known by their first idlen bytes (a short recipe's, in
 * order) from f's chunks, where f has that prefix at about the same place
 * in its own order: a new version of a file repeats the old one's ids but
 * for the rewritten regions, so this is a walk along both with a little
 * slack, not a lookup per id.  Completed: ids[k] the full id, state[k] =
 * 0; the others are left as they are.  Returns how many were completed.
 * A prefix completed here to another chunk than the sender meant is
 * caught where every completion is: the recipe id no longer matches.
 * f locked (shared is enough).
 */
size_t dmar_file_complete_ids(const struct dmar_file *f, struct dmar_id *ids, size_t n, unsigned idlen,
			      uint8_t *state);
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
/* f's content id if it is known (f shares a published table); *sent (may
 * be NULL) whether that content was shipped or received. */
bool dmar_file_content_known(const struct dmar_file *f, struct dmar_id *cid, bool *sent);
/* Record that f (all chunks and holes, as after dmar_file_from_recipe or
 * a successful dmar_file_recipe; the caller holds f exclusively) has
 * content id cid, the one its recipe gives: f's extents become a shared
 * table, in c->index under cid unless another table is there.  sent: the
 * content is shipped or was received (a peer likely holds it), rather
 * than named where it was encoded.  0, -EAGAIN (RAW extents), -ENOMEM. */
int dmar_file_publish(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_id *cid, bool sent);
/* f's content id for a ship of f: the known one, else computed from r,
 * f's recipe; published on f as sent (the caller holds f exclusively), so
 * that the next ship of f or of a copy of it knows a peer may hold it.
 * *known: it was sent before.  0 or -ENOMEM. */
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
