/* SPDX-License-Identifier: MIT */
/*
 * check.h - does a mount's arena add up?
 *
 * Every byte the arena's allocator has reserved must have exactly one
 * owner: the superblock, a journal segment, a chunk payload of the store,
 * a file's RAW extent, or RAW space a durable state still shows (file.h);
 * and every chunk's reference count must be the number of references its
 * holders hold: files' extents, extent tables, durable states, and the
 * owners outside the tree (ns_add_owner: staged uploads, remote copies).
 * Leaked space is a bug even when nothing else notices it, so the tests
 * run this after every scenario (getfattr -n user.dmar.check on the
 * mount's root, or dmar check).
 *
 * The check stops namespace changes, syncs and the background work (encode
 * steps, the owners' expiry) while it runs (fs->busy, fs->ckpt, fs->ns),
 * but not writes, uploads or the release of a file: run it on a quiet
 * mount, or the figures of a busy one may be off by what was in flight.
 */
#ifndef DMARFS_CHECK_H
#define DMARFS_CHECK_H

#include "ns.h"

/* 0 when it all adds up, -EUCLEAN when not, -ENOMEM.  *report (malloc'd,
 * also on -EUCLEAN) is one line of key=value figures, "state=ok" or
 * "state=bad" first, then a line "problem: ..." when there is one. */
int dmarfs_check(struct dmarfs *fs, char **report);

#endif /* DMARFS_CHECK_H */
