/* SPDX-License-Identifier: MIT */
/*
 * region.h - the memory behind an arena: one mapping of the best backing
 * the machine can give (private to arena/; the contract is arena.h).
 *
 * Chosen once at open and never changed: hugetlb pages from the kernel's
 * pool (tried at the wanted size, then smaller huge page sizes unless
 * strict), transparent huge pages (a memfd when shmem THP is on, anonymous
 * memory when only anonymous THP is), then normal pages in a memfd.
 */
#ifndef DMAR_ARENA_REGION_H
#define DMAR_ARENA_REGION_H

#include <stdint.h>

#include "arena.h"

struct dmar_region {
	uint8_t *base;             /* mapping start, aligned to pagesize */
	uint64_t size;             /* mapped bytes, a multiple of pagesize */
	int fd;                    /* memfd, or -1 for anonymous memory */
	enum dmar_backing backing;
	uint64_t pagesize;         /* hugetlb page size, THP PMD size, or base page size */
	char desc[DMAR_ARENA_DESCRIBE_MAX]; /* see dmar_arena_describe() */
};

/* Map a region for o (size > 0 checked by the caller).  Returns 0, -EINVAL
 * (pagesize not offered by the kernel, size too large), -ENOMEM (no
 * memory, or strict and the huge page pool is short: err says by how
 * much), or another -errno from memfd_create/mmap.  On failure *r is left
 * with fd -1 and base NULL. */
int dmar_region_open(struct dmar_region *r, const struct dmar_arena_opts *o,
		     struct dmar_error *err);
void dmar_region_close(struct dmar_region *r); /* safe on a failed or closed region */

/* Bytes of the region mapped by huge pages now: all of it for hugetlb,
 * measured from /proc/self/smaps for THP (0 where that cannot be read),
 * 0 for normal pages. */
uint64_t dmar_region_huge_bytes(const struct dmar_region *r);

#endif /* DMAR_ARENA_REGION_H */
