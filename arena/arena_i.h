/* SPDX-License-Identifier: MIT */
/*
 * arena_i.h - how an arena is put together (private to arena/).
 *
 * region.c maps the memory, alloc.c hands out units of it, store.c keeps
 * the chunk table, journal.c the log of whoever uses the arena;
 * arena.c composes them and is the only place that knows all of them.
 * The store and the journal reach the allocator, the base and the
 * superblock through here.
 */
#ifndef DMAR_ARENA_I_H
#define DMAR_ARENA_I_H

#include <stdatomic.h>

#include "alloc.h"
#include "arena.h"
#include "region.h"

struct dmar_store;

/*
 * The superblock of a named arena: its first DMAR_SB_BYTES, little-endian
 * (docs/format.md, "Arena files").  The head is written once, when the
 * arena is made, and checked (crc) at every attach.  The rest changes, in
 * pieces that each carry their own check, so that a process killed while
 * writing one leaves the other intact: two journal roots (the one with the
 * higher gen and a good crc is current; journal.c writes the other), and
 * the owner, which dmar arenas shows.
 */
#define DMAR_SB_MAGIC "DMARENA"
#define DMAR_SB_VERSION 1
#define DMAR_SB_BYTES 4096
#define DMAR_SB_KEEP 1u

struct dmar_sb_root {
	uint64_t gen;       /* 0: never written */
	uint64_t head;      /* offset of the journal's first segment */
	uint64_t first_seq; /* the sequence number of its first record */
	uint64_t spare;
	uint32_t crc;       /* CRC-32C of the fields above */
	uint32_t pad;
};

struct dmar_sb_owner {
	int64_t pid;        /* of the daemon that attached it last */
	int64_t since;      /* when (unix seconds) */
	uint32_t flags;     /* DMAR_SB_KEEP */
	uint32_t pad;
	char mountpoint[256];
	uint32_t crc;
	uint32_t pad2;
};

struct dmar_sb {
	char magic[8];      /* DMAR_SB_MAGIC */
	uint32_t version;
	uint32_t unit;      /* DMAR_ARENA_UNIT */
	uint64_t size;      /* bytes, the file's size */
	uint64_t pagesize;
	uint32_t backing;   /* enum dmar_backing when made */
	uint32_t pad;
	int64_t created;    /* unix seconds */
	uint8_t uuid[16];
	char name[136];
	uint32_t crc;       /* CRC-32C of the fields above */
	uint32_t pad2;
	struct dmar_sb_root root[2];
	struct dmar_sb_owner owner;
};
_Static_assert(sizeof(struct dmar_sb) <= DMAR_SB_BYTES, "superblock too large");

struct dmar_arena {
	struct dmar_region region; /* fixed after dmar_arena_new */
	struct dmar_alloc *alloc;  /* locks itself */
	struct dmar_store *store;  /* locks itself */
	struct dmar_sb *sb;        /* named arenas: at the base; NULL otherwise */
	uint64_t reserve_units;    /* kept back for dmar_arena_alloc_meta */
	size_t (*reclaim)(void *ctx); /* dmar_arena_set_reclaim */
	void *reclaim_ctx;
	atomic_bool abandoned;     /* dmar_arena_abandon */
};

/* The chunk table of an arena: 0 or -ENOMEM. */
int dmar_store_create(struct dmar_store **out);
/* Frees the table only; the payloads go with the region. NULL-safe. */
void dmar_store_destroy(struct dmar_store *s);

#endif /* DMAR_ARENA_I_H */
