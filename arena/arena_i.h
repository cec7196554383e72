/* SPDX-License-Identifier: MIT */
/*
 * arena_i.h - how an arena is put together (private to arena/).
 *
 * region.c maps the memory, alloc.c hands out units of it, store.c keeps
 * the chunk table; arena.c composes them and is the only place that knows
 * all three.  The store reaches the allocator and the base through here.
 */
#ifndef DMAR_ARENA_I_H
#define DMAR_ARENA_I_H

#include "alloc.h"
#include "arena.h"
#include "region.h"

struct dmar_store;

struct dmar_arena {
	struct dmar_region region; /* fixed after dmar_arena_new */
	struct dmar_alloc *alloc;  /* locks itself */
	struct dmar_store *store;  /* locks itself */
};

/* The chunk table of an arena: 0 or -ENOMEM. */
int dmar_store_create(struct dmar_store **out);
/* Frees the table only; the payloads go with the region. NULL-safe. */
void dmar_store_destroy(struct dmar_store *s);

#endif /* DMAR_ARENA_I_H */
