/* SPDX-License-Identifier: MIT */
/*
 * persist.h - a mount's state in its arena's journal (arena/journal.h):
 * what is recorded when, its replay after an attach, and checkpoints.
 *
 * The promise (docs/mount.md, "Durability"): after the daemon dies (kill
 * -9, an OOM kill, a crash) and the arena is attached again,
 *  - every change to names and attributes whose call returned is there:
 *    create, mkdir, mknod, symlink, link, unlink, rmdir, rename, chmod,
 *    chown, utimes, truncate, setxattr, removexattr, and files committed
 *    through the REST API;
 *  - every file holds the contents it had at its last sync: close,
 *    fsync, fdatasync, 5 s without writes (the idle encoder), truncate
 *    without an open descriptor, or a checkpoint.  Bytes written since
 *    are lost, but for bytes rewritten in place in a file never encoded
 *    (encode=none, or an arena too full to encode), which may show old
 *    or new, as a disk shows a block written since the last fsync;
 *  - a directory is never torn, a name never points at half a file.
 * What the records do not hold (open files, lookups, transfers being
 * staged) starts empty: an unlinked file still open is gone.
 *
 * What is recorded: each namespace change as it happens (ns.c, with
 * fs->ns held, so records follow the order of the changes); a file's
 * contents at a sync, as the extents of the ranges changed since the last
 * one (file.h).  A checkpoint writes the whole tree as it is into a new
 * log and switches to it, when the log has grown past twice what the
 * last checkpoint wrote (and 4 MiB): replay then reads about the live
 * state, not the history.
 *
 * With no journal (cfg.journal NULL: tests of an anonymous arena)
 * nothing is recorded and every call here returns 0.
 */
#ifndef DMARFS_PERSIST_H
#define DMARFS_PERSIST_H

#include <stdbool.h>

#include "ns.h"
#include "codec/error.h"

/* Namespace records, ns held.  0, -ENOSPC (no room in the arena for the
 * record: the caller undoes its change), -ENOMEM.  A removal may use the
 * journal's spare segment. */
int persist_make(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, struct timespec t);
int persist_link(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, struct timespec t);
int persist_remove(struct dmarfs *fs, struct inode *d, const char *name, struct timespec t);
/* whiteout (or NULL): a new inode that takes name in d as the rename
 * leaves it, in the same record. */
int persist_rename(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
		   unsigned flags, struct inode *whiteout, struct timespec t);
/* A new file (nobody else can reach it yet) named name in d, replacing
 * what is there with replace: its attributes, contents and name in one
 * record (a file whose extents do not fit one record gets its name in
 * the last one). */
int persist_commit(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, bool replace,
		   struct timespec t);

/* i's attributes, or one of its xattrs set (value) or removed: fs->ckpt
 * held shared and i->lock exclusive. */
int persist_attr(struct dmarfs *fs, struct inode *i);
int persist_xattr(struct dmarfs *fs, struct inode *i, const char *name, const void *value, size_t len,
		  bool remove);

/* Sync i: record its contents and attributes if they changed since its
 * last sync.  Takes fs->ckpt shared and i->lock exclusive (_locked: the
 * caller holds both).  0, -ENOSPC, -ENOMEM (nothing recorded: the next
 * sync tries again). */
int persist_sync(struct dmarfs *fs, struct inode *i);
int persist_sync_locked(struct dmarfs *fs, struct inode *i);

/* Checkpoint when the log has grown enough (or with force, now): takes
 * fs->ckpt exclusive and fs->ns for the time it writes the tree.  0
 * (nothing to do), 1 (done), -ENOSPC (no room for the new log: the old
 * one stays), -ENOMEM. */
int persist_checkpoint(struct dmarfs *fs, bool force);

struct persist_stats {
	uint64_t records;  /* journal records read */
	uint64_t bytes;    /* their bytes */
	uint64_t inodes;   /* in the tree attached */
	uint64_t files;    /* regular files among them */
	uint64_t chunks;   /* distinct chunks adopted */
	double seconds;    /* replay and claims */
};
/* Rebuild fs (new, empty) from its attached arena's journal: the tree,
 * every file's contents, the chunk store and the allocator.  -EUCLEAN
 * (err says which record or extent does not add up: nothing is changed in
 * the arena, the attach must be refused), -ENOMEM. */
int persist_attach(struct dmarfs *fs, struct persist_stats *st, struct dmar_error *err);

#endif /* DMARFS_PERSIST_H */
