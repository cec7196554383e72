/* SPDX-License-Identifier: MIT */
/*
 * alloc.h - a first-fit allocator of unit ranges (private to arena/; the
 * arena calls it with DMAR_ARENA_UNIT-byte units).
 *
 * It hands out runs of consecutive unit numbers [first, first + n) and
 * knows nothing of the memory they stand for, so its state is position
 * independent: it can be rebuilt from (first, n) pairs or, later, kept in
 * the arena itself.  No per-allocation metadata is kept; the caller gives
 * the length back on release.
 *
 * Thread-safe: one mutex around each call.
 */
#ifndef DMAR_ARENA_ALLOC_H
#define DMAR_ARENA_ALLOC_H

#include <stdint.h>

struct dmar_alloc;

/* An allocator of units [0, units).  0, -EINVAL (units 0), -ENOMEM. */
int dmar_alloc_new(struct dmar_alloc **out, uint64_t units);
void dmar_alloc_free(struct dmar_alloc *al); /* NULL-safe */

/* Reserve n (> 0) consecutive units, the lowest-numbered run that fits;
 * *first gets its first unit.  0, -EINVAL (n 0), or -ENOSPC when no free
 * run of n exists (even if n units are free in pieces). */
int dmar_alloc_get(struct dmar_alloc *al, uint64_t n, uint64_t *first);

/* Give back [first, first + n).  0, or -EINVAL (and nothing changes) when
 * the range is out of bounds or not wholly reserved: a double free or a
 * wrong length, which the caller must treat as a bug. */
int dmar_alloc_put(struct dmar_alloc *al, uint64_t first, uint64_t n);

/* Reserve exactly [first, first + n) (rebuilding the map from what is known
 * to be in use).  0, -EINVAL (n 0 or out of bounds), or -EEXIST (some unit
 * of it is reserved already; nothing changes). */
int dmar_alloc_claim(struct dmar_alloc *al, uint64_t first, uint64_t n);

/* Units reserved in a and not in b (*only_a), in b and not in a (*only_b),
 * and the lowest unit where they differ (*first, UINT64_MAX if none).  a
 * and b manage the same number of units. */
void dmar_alloc_diff(struct dmar_alloc *a, struct dmar_alloc *b, uint64_t *only_a, uint64_t *only_b,
		     uint64_t *first);

uint64_t dmar_alloc_used(struct dmar_alloc *al);  /* units reserved now */
uint64_t dmar_alloc_units(const struct dmar_alloc *al); /* units managed */

/* Check the group summaries, class bounds and counters against the bitmap
 * (for tests; reads everything):
 * 0 or -EUCLEAN. */
int dmar_alloc_check(struct dmar_alloc *al);

#endif /* DMAR_ARENA_ALLOC_H */
