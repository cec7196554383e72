/* SPDX-License-Identifier: MIT */
/*
 * rundir.h - where named arenas live (private to arena/).
 *
 * A named arena is a file in a memory filesystem, so that it outlives the
 * daemon that made it (a crash, an OOM kill, an upgrade) and the next mount
 * of the same name finds it.  The files sit under one run directory:
 *
 *   root:     /run/dmarfs, with filesystems of our own mounted under it
 *             on first use:
 *               shm/                 tmpfs, huge=within_size (transparent
 *                                    huge pages whatever shmem_enabled says,
 *                                    unless it says deny)
 *               hugetlb-2048kB/      hugetlbfs, pagesize=2M
 *               hugetlb-1048576kB/   hugetlbfs, pagesize=1G
 *   others:   $XDG_RUNTIME_DIR/dmarfs, else /dev/shm/dmarfs-UID, whose shm/
 *             is a plain directory (no mount rights), and for huge pages a
 *             directory dmarfs-UID in a hugetlbfs mount libhugetlbfs finds.
 *   DMARFS_RUNDIR=DIR in the environment: DIR instead, for root too, and
 *             as for others: nothing is mounted there.
 *
 * An arena file is NAME.arena in one of these directories.  Every directory
 * holding arenas must be on tmpfs or hugetlbfs: an arena on a disk would be
 * neither memory nor fast.
 */
#ifndef DMAR_ARENA_RUNDIR_H
#define DMAR_ARENA_RUNDIR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/error.h"

/* The directory for arenas of hugetlb pages of size ps (ps > 4096) or, with
 * ps 0, of shmem pages; made (and mounted, for root) when create is set.
 * 0 with out set, -ENOENT (absent and not create), or -errno with err. */
int dmar_rundir_dir(uint64_t ps, bool create, char out[PATH_MAX], struct dmar_error *err);

/* Call fn for every directory that may hold arenas now (none is made);
 * stops at fn's first non-zero return and returns it. */
int dmar_rundir_each(int (*fn)(void *ctx, const char *dir), void *ctx);

/* Names of arenas: 1 to 128 of [A-Za-z0-9._@+-], not starting with '.'. */
bool dmar_rundir_name_ok(const char *name);

#endif /* DMAR_ARENA_RUNDIR_H */
