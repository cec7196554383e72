/* SPDX-License-Identifier: MIT */
/*
 * arena.h - a preallocated RAM region with an allocator and a
 * content-addressed, refcounted chunk store inside it.
 *
 * Everything a mounted dmarfs holds lives in its arena: raw extents (file
 * bytes written but not yet encoded) and chunk payloads (encoded once, shared
 * by every file that contains them).  The arena has a hard size: when it is
 * full, allocations fail with -ENOSPC and succeed again once space is freed.
 *
 * Backing, best first (dmar_arena_backing() says which was used):
 *   1. hugetlb pages (2 MiB, or 1 GiB with pagesize=1G): memfd_create with
 *      MFD_HUGETLB, every page allocated up front with fallocate from the
 *      kernel's pool (vm.nr_hugepages; see scripts/dmar-hugepages), so a
 *      short pool is an error now rather than a SIGBUS on some later write.
 *      Page sizes come from libhugetlbfs.  Without strict, a short 1 GiB
 *      pool falls back to 2 MiB hugetlb pages before anything else.
 *   2. transparent huge pages with MADV_HUGEPAGE: a memfd where shmem THP
 *      is on (/sys/kernel/mm/transparent_hugepage/shmem_enabled), else
 *      anonymous memory where only anonymous THP is (.../enabled), as on
 *      a default Debian kernel.  THP is best effort: describe() reports
 *      how much the kernel really gave after populate.
 *   3. normal pages, in a memfd.
 * With strict set, a failure to get the requested huge pages is an error
 * (-ENOMEM with a message) instead of a fallback.  All references inside
 * the arena are offsets from its base, never pointers.  (A /dev/dmar_arena
 * kernel-module backing slots in as a fourth source.)
 *
 * Named arenas.  With opts.name the arena is a file in a memory filesystem
 * (hugetlbfs for hugetlb pages, tmpfs otherwise: arena/rundir.h) that
 * outlives the process: a crash, a kill -9 or an OOM kill of the daemon
 * leaves it, and the next dmar_arena_new of the same name maps the same
 * memory instead of new memory (dmar_arena_attached() is then true).  Its
 * first DMAR_ARENA_META_MIN bytes are a superblock (name, size, backing,
 * the journal's root: journal.h), checked at every attach.  The arena's
 * allocator and chunk table live in the process, not in the arena: after
 * an attach they start empty but for the superblock, and the caller
 * rebuilds them from its journal, claiming what its records say is in use
 * (dmar_arena_claim, dmar_store_adopt) before it allocates anything.
 * Without a name the arena is a memfd (or anonymous THP memory) that dies
 * with the process, with no superblock.
 *
 * Offsets returned by the allocator are relative to dmar_arena_base().
 * All functions are thread-safe unless noted.
 */
#ifndef DMAR_ARENA_H
#define DMAR_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/error.h"
#include "codec/hash.h"

enum dmar_backing {
	DMAR_BACKING_HUGETLB = 1,
	DMAR_BACKING_THP = 2,
	DMAR_BACKING_NORMAL = 3,
	DMAR_BACKING_KMOD = 4, /* an arena of the dmar_arena kernel module (kmod/) */
};

/* Which memory a named arena may take. */
enum dmar_backing_want {
	DMAR_WANT_AUTO = 0, /* the kernel module's when /dev/dmar_arena opens, else as MEMORY */
	DMAR_WANT_KMOD,     /* the kernel module's, or fail */
	DMAR_WANT_MEMORY,   /* hugetlb, THP or normal pages in a memory filesystem */
};

struct dmar_arena_opts {
	uint64_t size;      /* bytes, rounded up to the page size of the backing used */
	uint64_t pagesize;  /* wanted huge page size: 0 = default (2 MiB), the base page
			     * size (4096) = no huge pages, else one of the hugetlb
			     * sizes the kernel offers */
	bool strict;        /* fail rather than fall back to a lesser backing */
	bool populate;      /* fault every page in now (fast first writes, memory
			     * committed); hugetlb memory is allocated up front anyway */
	/* Named arenas; ignored when name is NULL. */
	const char *name;   /* 1..128 of [A-Za-z0-9._@+-], not starting with '.' */
	bool fresh;         /* discard an arena of that name (unless in use) first */
	bool keep;          /* recorded for dmar_arena_list: the owner keeps it at exit */
	const char *owner;  /* recorded for dmar_arena_list: e.g. the mountpoint;
			     * NULL on an attach leaves the last owner's record */
	enum dmar_backing_want want; /* a new named arena's backing; an existing one keeps its own */
};

/* Bytes at the start of a named arena that its superblock holds. */
#define DMAR_ARENA_META_MIN 4096

struct dmar_arena;

/* Returns 0, -EINVAL (size 0 or too large, or a pagesize this machine does
 * not have: err lists the ones it has; a bad name), -ENOMEM (no memory, or
 * strict and no huge pages: err says which pool was short and by how much),
 * -EBUSY (the named arena is in use by another process), -EUCLEAN (the
 * named arena's superblock is damaged or of another version: err says
 * what; nothing is changed), or another -errno from open/memfd_create/mmap
 * (-EMFILE...).  On attach, o->size and o->pagesize are ignored: the
 * arena's own stand.  err may be NULL. */
int dmar_arena_new(struct dmar_arena **out, const struct dmar_arena_opts *o, struct dmar_error *err);
/* NULL-safe.  An anonymous arena's memory is gone; a named one's stays
 * for the next attach unless dmar_arena_remove was called. */
void dmar_arena_free(struct dmar_arena *a);

/* A named arena that existed before this dmar_arena_new. */
bool dmar_arena_attached(const struct dmar_arena *a);
/* The file of a named arena, or NULL. */
const char *dmar_arena_path(const struct dmar_arena *a);
/* Remove a named arena's name: its memory is freed at dmar_arena_free
 * (tmpfs semantics: umount without keep).  0 or -errno. */
int dmar_arena_remove(struct dmar_arena *a);
/* After an attach: mark [off, off + len) as in use, as the caller's records
 * say it is.  0, -EINVAL (not inside the arena, or off not a multiple of
 * DMAR_ARENA_UNIT), -EEXIST (some of it is claimed already: two owners
 * of the same bytes, a damaged journal). */
int dmar_arena_claim(struct dmar_arena *a, uint64_t off, uint64_t len);
/* After an attach the caller refuses (its records do not add up): what
 * it claimed is not to be trusted, so from now on releases of space are
 * ignored, and the teardown of whatever the caller built leaves the arena
 * as it is for dmar_arena_free. */
void dmar_arena_abandon(struct dmar_arena *a);

/* Every named arena on this machine (rundir.h), in no set order: fn is
 * called with each; a non-zero return stops the walk and is returned. */
struct dmar_arena_info {
	char name[136];
	char path[4096];
	bool valid;           /* the superblock checks; else error says why */
	char error[160];
	uint64_t size;        /* bytes */
	uint64_t resident;    /* bytes of memory the file holds now */
	enum dmar_backing backing;
	uint64_t pagesize;
	int64_t created;      /* unix seconds */
	bool in_use;          /* a process has it attached now */
	bool keep;            /* its owner keeps it when it exits */
	int64_t pid;          /* the process that attached it last */
	int64_t since;        /* when */
	char owner[256];      /* its dmar_arena_opts.owner */
};
int dmar_arena_list(int (*fn)(void *ctx, const struct dmar_arena_info *i), void *ctx);
/* Free the named arena name: 0, -ENOENT, -EBUSY (in use), -errno; err says. */
int dmar_arena_drop(const char *name, struct dmar_error *err);

/* These never change after dmar_arena_new. */
uint8_t *dmar_arena_base(const struct dmar_arena *a);
uint64_t dmar_arena_size(const struct dmar_arena *a); /* bytes, >= opts.size */
enum dmar_backing dmar_arena_backing(const struct dmar_arena *a);
/* The hugetlb page size, the THP size (2 MiB on x86-64; what THP aims for,
 * not a promise), or the base page size. */
uint64_t dmar_arena_pagesize(const struct dmar_arena *a);
/* Starts with "hugetlb 2 MiB pages", "transparent huge pages" or "normal
 * 4 KiB pages", then how ("memfd", "anonymous memory: shmem THP is off",
 * what populate got), then, after "; fell back because: ", why each better
 * backing was not used ("not enough free 2 MiB huge pages: 0 free (0
 * reserved) of 0 in the pool, 512 needed (raise vm.nr_hugepages...)"). */
const char *dmar_arena_describe(const struct dmar_arena *a);
/* Buffer size that holds any describe() string with its NUL (it can pass
 * 255 bytes when several fallbacks are explained). */
#define DMAR_ARENA_DESCRIBE_MAX 576
/* The memfd behind the arena, or -1 for anonymous memory.  Owned by the
 * arena; dup() it to keep it past dmar_arena_free. */
int dmar_arena_fd(const struct dmar_arena *a);
/* Bytes mapped by huge pages now: the size for hugetlb, measured from
 * /proc/self/smaps for THP (0 if unreadable), 0 for normal pages.  Reads
 * smaps, so it costs a walk of this process's mappings: for reports, not
 * for hot paths. */
uint64_t dmar_arena_huge_bytes(const struct dmar_arena *a);

/* ---- allocator: DMAR_ARENA_UNIT granularity ---- */
#define DMAR_ARENA_UNIT 512

/* Reserve len bytes (rounded up to units) at the lowest offset where they
 * fit; *off gets the offset, a multiple of DMAR_ARENA_UNIT.  0, -EINVAL (len
 * 0), or -ENOSPC when no contiguous run of that size is free (also when
 * enough units are free but only in pieces).  Offset 0 is a valid result.
 * Fast when the arena has room; worst case reads the whole bitmap (32 KiB
 * per GiB of arena). */
int dmar_arena_alloc(struct dmar_arena *a, uint64_t len, uint64_t *off);
/* Space that can be given back on demand (a node's staged uploads): when
 * a dmar_arena_alloc finds no room, fn is called (in the allocating
 * thread, no arena lock held: it may release, never allocate) and, if it
 * says it gave anything back (non-zero), the allocation is tried again.
 * One reclaimer per arena; set it before the arena is shared. */
void dmar_arena_set_reclaim(struct dmar_arena *a, size_t (*fn)(void *ctx), void *ctx);
/* The same for the arena's own metadata (a named arena's journal): may
 * use the last DMAR_ARENA_META_RESERVE bytes (dmar_arena_reserve), which
 * dmar_arena_alloc leaves alone, so that records of what the data does --
 * a close, a removal -- find room when the data has filled the arena. */
int dmar_arena_alloc_meta(struct dmar_arena *a, uint64_t len, uint64_t *off);
/* Bytes kept back for metadata: 0 for an anonymous arena, else 1/64 of
 * the size, at least 256 KiB and at most 64 MiB. */
uint64_t dmar_arena_reserve(const struct dmar_arena *a);
/* Give back a reservation made with exactly this (off, len); len 0 does
 * nothing.  Releasing what is not reserved (a double release, a wrong len)
 * is a caller bug that would hand the same bytes to two owners, so it
 * aborts, as free() does on a double free. */
void dmar_arena_release(struct dmar_arena *a, uint64_t off, uint64_t len);
/* Bytes reserved now (rounded to units); the total is dmar_arena_size(). */
uint64_t dmar_arena_used(const struct dmar_arena *a);

/* ---- chunk store ---- */

/* How a chunk payload is kept.  RAW payloads are the chunk's bytes and can
 * be read in place; ZSTD payloads are one zstd frame (magicless, as in the
 * artifact format) compressed with or without the mount's byte pack. */
enum dmar_chunk_enc { DMAR_CHUNK_RAW = 0, DMAR_CHUNK_ZSTD = 1, DMAR_CHUNK_ZSTD_PACK = 2 };

struct dmar_chunk_info {
	uint64_t off;        /* payload offset in the arena */
	uint32_t stored_len; /* payload bytes */
	uint32_t len;        /* chunk (decoded) bytes */
	uint8_t enc;         /* enum dmar_chunk_enc */
	uint32_t refs;
};

/*
 * Add one reference to chunk id.  If the store holds it already, only the
 * count grows (the payload is not looked at) and *added is false.
 * Otherwise payload (stored_len bytes, encoding enc, decoding to len bytes)
 * is copied into the arena and *added is true.  added may be NULL and is
 * written only on success.  The caller guarantees id is the SHA-256 of the
 * decoded bytes (the store does not hash).  Returns 0, -EINVAL (a new chunk
 * with len or stored_len 0, an unknown enc, or RAW with stored_len != len),
 * -ENOSPC (arena full: nothing changed), -ENOMEM (table growth failed:
 * nothing changed), -EOVERFLOW (2^32 - 1 references already).
 */
int dmar_store_ref(struct dmar_arena *a, const struct dmar_id *id, uint8_t enc, uint32_t len,
		   const void *payload, uint32_t stored_len, bool *added);
/* Add a reference to a chunk already held: 0, -ENOENT or -EOVERFLOW. */
int dmar_store_ref_existing(struct dmar_arena *a, const struct dmar_id *id);
/* Drop one reference; when none is left the chunk leaves the store and its
 * payload space is released (its bytes may be reused at once).
 * 0 or -ENOENT. */
int dmar_store_unref(struct dmar_arena *a, const struct dmar_id *id);
/* After an attach (see above): add one reference to chunk id whose payload
 * the caller's records put at off (stored_len bytes, enc, decoding to len).
 * The store takes it where it is, copying and allocating nothing; the
 * first reference claims the space (as dmar_arena_claim).  If the store
 * holds id already, the records must agree on where.  0, -EINVAL (bad
 * enc or lengths, or not inside the arena), -EUCLEAN (another location
 * for an id held, or space claimed by something else), -ENOMEM,
 * -EOVERFLOW. */
int dmar_store_adopt(struct dmar_arena *a, const struct dmar_id *id, uint8_t enc, uint32_t len, uint64_t off,
		     uint32_t stored_len);
/* Look a chunk up: 0 and *info, or -ENOENT.  The payload, at
 * dmar_arena_base(a) + info->off, stays valid while the caller holds a
 * reference to the chunk; info->refs is a snapshot. */
int dmar_store_lookup(struct dmar_arena *a, const struct dmar_id *id, struct dmar_chunk_info *info);

/* The shortest id prefix dmar_store_resolve takes: the store places a
 * chunk by its id's first 8 bytes. */
#define DMAR_STORE_PREFIX_MIN 8
/* Complete an id known by its first idlen bytes (DMAR_STORE_PREFIX_MIN to
 * 32; the rest of *id is ignored): 0 and *id the one held chunk's id,
 * -ENOENT if none is held, -ENOTUNIQ if more than one is (*id unchanged),
 * -EINVAL for a bad idlen.  Prefixes name chunks in short recipes
 * (net/wire.h), where the recipe's id checks the completed whole. */
int dmar_store_resolve(struct dmar_arena *a, struct dmar_id *id, unsigned idlen);
/* The same for n ids: state[i] 0 (ids[i] completed), 1 (none held) or 2
 * (several).  0, or -EINVAL for a bad idlen. */
int dmar_store_resolve_many(struct dmar_arena *a, struct dmar_id *ids, size_t n, unsigned idlen, uint8_t *state);
/* dmar_store_ref_existing and dmar_store_lookup for each of n ids at once
 * (a recipe's worth, faster than one by one): info[i] is the chunk's,
 * with a reference taken, or all zero (refs 0) where ids[i] is not held or
 * is at the reference limit (no reference taken). */
void dmar_store_ref_many(struct dmar_arena *a, const struct dmar_id *ids, size_t n, struct dmar_chunk_info *info);
/* dmar_store_ref_many, all or nothing: 0 with every reference taken, or
 * -ENOENT (an id not held, or at the reference limit) with none taken. */
int dmar_store_ref_all(struct dmar_arena *a, const struct dmar_id *ids, size_t n, struct dmar_chunk_info *info);
/* dmar_store_unref for each of n ids; ids not held are skipped. */
void dmar_store_unref_many(struct dmar_arena *a, const struct dmar_id *ids, size_t n);

struct dmar_store_stats {
	uint64_t chunks;       /* distinct chunks held */
	uint64_t refs;         /* references to them */
	uint64_t stored_bytes; /* payload bytes */
	uint64_t chunk_bytes;  /* decoded bytes of the distinct chunks */
};
/* A consistent snapshot of the four counters. */
void dmar_store_stats(struct dmar_arena *a, struct dmar_store_stats *st);
/* fn for every chunk held, with the store locked: fn must not call the
 * store.  For checks, not hot paths. */
void dmar_store_each(struct dmar_arena *a, void (*fn)(void *ctx, const struct dmar_id *id,
						       const struct dmar_chunk_info *info),
		     void *ctx);

/* ---- consistency ---- */

/*
 * Does the arena's space add up?  The check rebuilds the allocator's map
 * from the owners of space alone: the superblock, every chunk payload of
 * the store, and whatever the caller's owners() claims (its raw extents,
 * its journal's segments...), and compares it with the allocator's.
 * Space reserved and owned by nobody is leaked; space owned and not
 * reserved could be handed out twice; space claimed twice has two owners.
 * The caller keeps the arena still meanwhile (no allocation or release).
 * 0 when all adds up, -EUCLEAN (rep says what), -ENOMEM.
 */
struct dmar_arena_check;
/* From owners(): [off, off + len) is in use, as `what` ("raw extent"...). */
void dmar_arena_check_claim(struct dmar_arena_check *c, uint64_t off, uint64_t len, const char *what);
struct dmar_arena_report {
	uint64_t used;       /* bytes the allocator has reserved */
	uint64_t owned;      /* bytes the owners account for (in units) */
	uint64_t chunks;     /* distinct chunks of the store */
	uint64_t chunk_bytes; /* their payload bytes (in units) */
	uint64_t leaked;     /* reserved, owned by nobody */
	uint64_t unreserved; /* owned, not reserved */
	uint64_t doubled;    /* claimed by two owners */
	char problem[200];   /* the first problem found, in words, or "" */
};
int dmar_arena_check(struct dmar_arena *a, void (*owners)(void *ctx, struct dmar_arena_check *c), void *ctx,
		     struct dmar_arena_report *rep);

#endif /* DMAR_ARENA_H */
