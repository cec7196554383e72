/* SPDX-License-Identifier: MIT */
/*
 * fs_i.h - the filesystem's internals, shared by fs.c (the local FUSE
 * operations), node.c (the REST API acting on the same namespace) and
 * remote.c (the @PEER paths that wrap the local operations).
 */
#ifndef DMARFS_FS_I_H
#define DMARFS_FS_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "dir.h"
#include "fs.h"

#define INODE_LOCAL 0x4c4f434cu /* "LOCL" */

#define ATTR_TIMEOUT 1.0
#define ENTRY_TIMEOUT 1.0
#define XATTR_PREFIX "user.dmar."

struct xattr {
	char *name;
	void *value;
	size_t len;
};


struct inode {
	uint32_t kind;        /* INODE_LOCAL: remote.c's inodes have another kind */
	uint64_t st_ino;
	uint64_t nlookup;    /* protected by fs->ns */
	nlink_t nlink;       /* protected by fs->ns */
	pthread_rwlock_t lock;
	/* the rest: protected by lock */
	mode_t mode;
	uid_t uid;
	gid_t gid;
	dev_t rdev;
	struct timespec atime, mtime, ctime;
	unsigned opens;
	struct xattr *xa;
	size_t nxa;
	/* directories (entries protected by fs->ns) */
	struct inode *parent;
	struct dmar_dir dir;
	/* regular files */
	struct dmar_file f;
	/* symlinks */
	char *target;
	/* idle encoding */
	bool queued;         /* on fs->idle_head: atomic hint, set under ns */
	struct inode *idle_next; /* protected by fs->ns */
	struct inode *all_prev, *all_next; /* fs->all: every inode not yet in the grave; fs->ns */
	uint64_t last_write; /* CLOCK_MONOTONIC seconds, atomic */
};

struct dmarfs {
	struct dmarfs_config cfg;
	pthread_mutex_t ns;
	struct inode *root;
	uint64_t next_ino;   /* protected by ns */
	uint64_t inodes;     /* protected by ns */
	/* Files written to and not encoded since: the idle encoder's work
	 * list.  Each listed inode holds a lookup reference.  Protected by
	 * ns; idle_cond (with ns) wakes the encoder thread to stop. */
	struct inode *idle_head;
	pthread_cond_t idle_cond;
	pthread_t idle_thread;
	bool idle_running, idle_stop;
	struct inode *grave;  /* see fs_fs_inode_maybe_free; protected by ns */
	/* Every live inode, linked or not: an unlinked one the kernel still
	 * knows (an open file, an expired dentry's) is in no directory, and
	 * its FORGET may never come before unmount; teardown frees this
	 * list.  Protected by ns. */
	struct inode *all;
	size_t ngrave;
	struct fuse_session *se;      /* for cache notifications; set before mounting */
	struct dmarfs_node *node;     /* node.c: the REST API and the peers, or NULL */
	struct dmarfs_remote *remote; /* remote.c: the @PEER paths, or NULL */
	struct dmar_content_index *own_index; /* cfg.ctx.index when dmarfs_new made it */
};

#define ENTRY_INO(e) ((struct inode *)(e)->ino)

struct timespec fs_now(void);
/* ns held.  NULL when nr_inodes is reached or out of memory. */
struct inode *fs_inode_new(struct dmarfs *fs, mode_t mode, uid_t uid, gid_t gid);
/* ns held: free i when no name and no lookup is left. */
void fs_inode_maybe_free(struct dmarfs *fs, struct inode *i);
/* ns held: drop n lookups. */
void fs_forget_one(struct dmarfs *fs, struct inode *i, uint64_t n);
/* i->lock held (shared is enough). */
void fs_fill_stat(const struct inode *i, struct stat *st);
/* st_size alone: what fs_fill_stat gives, without the walk over a
 * regular file's extents that st_blocks costs.  i->lock held. */
off_t fs_inode_size(const struct inode *i);
/* ns held. */
struct dmar_dirent *fs_dir_find(struct inode *d, const char *name);
int fs_dir_add(struct inode *d, const char *name, struct inode *i);
void fs_unlink_entry(struct dmarfs *fs, struct inode *d, struct dmar_dirent *e);
/* Takes d->lock: ns may be held. */
void fs_touch_dir(struct inode *d);
/* Takes ns. */
nlink_t fs_get_nlink(struct dmarfs *fs, struct inode *i);
/* Encode i's RAW extents with c (takes i->lock, step by step): 0 when
 * none was left at the last look, -EAGAIN when writes made tries plans
 * stale, -ENOSPC when not even one chunk fitted, -ENOMEM. */
int fs_encode_with(struct inode *i, struct dmar_fsctx *c, int tries);
/* The same with the mount's context; with retry, 3 tries, else 1. */
void fs_encode_inode(struct dmarfs *fs, struct inode *i, bool retry);
/* Reply to a read of f: the caller holds f's lock (shared is enough)
 * until this returns, since the reply points into the arena. */
void fs_reply_read(fuse_req_t req, struct dmar_file *f, struct dmar_fsctx *c, size_t size, off_t off);
/* Reply to an lseek with dmar_file_lseek's result r and offset out. */
static inline void fs_reply_lseek(fuse_req_t req, int r, uint64_t out)
{
	if (r)
		fuse_reply_err(req, -r);
	else
		fuse_reply_lseek(req, (off_t)out);
}
/* A per-thread buffer of at least size bytes for decoded reads. */
uint8_t *fs_read_scratch(size_t size);
/* A dmar_file_write_with copy callback reading a struct fuse_bufvec. */
int fs_copy_bufvec(void *ctx, uint8_t *dst, size_t len);
/* The local operations, which remote.c wraps. */
const struct fuse_lowlevel_ops *fs_local_ops(void);

/* Readdir cookies of the root's @PEER entries start here. */
#define FS_PEER_COOKIE (1ull << 62)
/* remote.c: append the @PEER entries with cookies above off to a readdir
 * reply of the root (ns held). */
/* This host changed something at a peer (a ship, mkdir, remove): the
 * directory listings the remote paths keep no longer hold. */
void dmarfs_remote_changed(struct dmarfs *fs);
void dmarfs_remote_root_entries(struct dmarfs *fs, fuse_req_t req, char *buf, size_t size, size_t *used,
				uint64_t off);

#endif /* DMARFS_FS_I_H */
