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

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "arena.h"

struct dmar_region {
	uint8_t *base;             /* mapping start, aligned to pagesize */
	uint64_t size;             /* mapped bytes, a multiple of pagesize */
	int fd;                    /* memfd or arena file, or -1 for anonymous memory */
	enum dmar_backing backing;
	uint64_t pagesize;         /* hugetlb page size, THP PMD size, or base page size */
	bool attached;             /* an existing arena file was mapped */
	bool named;                /* path is (or, after publish, will be) the file's name */
	bool linked;               /* named: the name exists (attached, or published) */
	char path[PATH_MAX];       /* named: DIR/NAME.arena (rundir.h) */
	char desc[DMAR_ARENA_DESCRIBE_MAX]; /* see dmar_arena_describe() */
};

/* Map a region for o (size > 0 checked by the caller).  Without o->name, a
 * memfd (or anonymous memory) that dies with the process.  With it, the
 * arena file of that name is mapped if one exists (attached is then set;
 * o->size is ignored: the file's size stands), unless o->fresh, which
 * removes it first; else a new, still unnamed file (O_TMPFILE) in the
 * directory of the backing chosen, which dmar_region_publish names.  The
 * file is locked (flock) while mapped: a second open of a name in use is
 * -EBUSY.  Returns 0, -EINVAL (pagesize not offered by the kernel, size
 * too large, a bad name), -ENOMEM (no memory, or strict and the huge page
 * pool is short: err says by how much), -EBUSY, or another -errno from
 * open/memfd_create/mmap.  On failure *r is left with fd -1 and base NULL. */
int dmar_region_open(struct dmar_region *r, const struct dmar_arena_opts *o,
		     struct dmar_error *err);
/* Give a new named region its name (once its contents are valid): 0, or
 * -EEXIST (another arena of that name appeared meanwhile), -errno. */
int dmar_region_publish(struct dmar_region *r);
/* Remove a named region's name: its memory goes with the last close. */
int dmar_region_unlink(struct dmar_region *r);
void dmar_region_close(struct dmar_region *r); /* safe on a failed or closed region */

/* The arena file NAME.arena in any arena directory: 0 and path, or -ENOENT. */
int dmar_region_find(const char *name, char path[PATH_MAX]);

/* Bytes of the region mapped by huge pages now: all of it for hugetlb,
 * measured from /proc/self/smaps for THP (0 where that cannot be read),
 * 0 for normal pages. */
uint64_t dmar_region_huge_bytes(const struct dmar_region *r);

#endif /* DMAR_ARENA_REGION_H */
