/* SPDX-License-Identifier: MIT */
/*
 * An arena is a region (region.c), a unit allocator over it (alloc.c) and
 * a chunk store (store.c).  This file only composes them and converts
 * between bytes and DMAR_ARENA_UNIT units.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "arena_i.h"

int dmar_arena_new(struct dmar_arena **out, const struct dmar_arena_opts *o, struct dmar_error *err)
{
	struct dmar_arena *a;
	int r;

	if (!o || !o->size)
		return dmar_error_set(err, -EINVAL, "arena size must be > 0");
	a = calloc(1, sizeof(*a));
	if (!a)
		return dmar_error_errno(err, -ENOMEM, "arena");
	r = dmar_region_open(&a->region, o, err);
	if (r < 0) {
		free(a);
		return r;
	}
	/* Region sizes are page multiples, so the units cover all of it. */
	r = dmar_alloc_new(&a->alloc, a->region.size / DMAR_ARENA_UNIT);
	if (r == 0)
		r = dmar_store_create(&a->store);
	if (r < 0) {
		dmar_arena_free(a);
		return dmar_error_errno(err, r, "arena metadata");
	}
	*out = a;
	return 0;
}

void dmar_arena_free(struct dmar_arena *a)
{
	if (!a)
		return;
	dmar_store_destroy(a->store);
	dmar_alloc_free(a->alloc);
	dmar_region_close(&a->region);
	free(a);
}

uint8_t *dmar_arena_base(const struct dmar_arena *a)
{
	return a->region.base;
}

uint64_t dmar_arena_size(const struct dmar_arena *a)
{
	return a->region.size;
}

enum dmar_backing dmar_arena_backing(const struct dmar_arena *a)
{
	return a->region.backing;
}

uint64_t dmar_arena_pagesize(const struct dmar_arena *a)
{
	return a->region.pagesize;
}

const char *dmar_arena_describe(const struct dmar_arena *a)
{
	return a->region.desc;
}

int dmar_arena_fd(const struct dmar_arena *a)
{
	return a->region.fd;
}

uint64_t dmar_arena_huge_bytes(const struct dmar_arena *a)
{
	return dmar_region_huge_bytes(&a->region);
}

int dmar_arena_alloc(struct dmar_arena *a, uint64_t len, uint64_t *off)
{
	uint64_t u;
	int r;

	if (!len)
		return -EINVAL;
	if (len > a->region.size)
		return -ENOSPC;
	r = dmar_alloc_get(a->alloc, (len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT, &u);
	if (r < 0)
		return r;
	*off = u * DMAR_ARENA_UNIT;
	return 0;
}

void dmar_arena_release(struct dmar_arena *a, uint64_t off, uint64_t len)
{
	if (!len)
		return;
	/* A range that is not reserved as a whole means two owners think
	 * they hold it; carrying on would hand the same bytes out twice. */
	if (off % DMAR_ARENA_UNIT ||
	    dmar_alloc_put(a->alloc, off / DMAR_ARENA_UNIT,
			   (len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT) < 0)
		abort();
}

uint64_t dmar_arena_used(const struct dmar_arena *a)
{
	return dmar_alloc_used(a->alloc) * DMAR_ARENA_UNIT;
}
