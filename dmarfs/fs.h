/* SPDX-License-Identifier: MIT */
/*
 * fs.h - the dmarfs filesystem: inodes, directories and the FUSE
 * low-level operations over a file's contents (file.h) in an arena.
 */
#ifndef DMARFS_FS_H
#define DMARFS_FS_H

#define FUSE_USE_VERSION 314

/* Read-ahead asked of the kernel in INIT and set on the mount's bdi (the
 * kernel's 128 KiB default halves sequential reads with small buffers). */
#define DMARFS_READAHEAD (1u << 20)
#include <fuse_lowlevel.h>

#include "file.h"

struct dmarfs;

struct dmarfs_config {
	struct dmar_fsctx ctx;  /* arena, chunker, encoding */
	uint64_t nr_inodes;
	mode_t root_mode;
	uid_t root_uid;
	gid_t root_gid;
};

int dmarfs_new(struct dmarfs **out, const struct dmarfs_config *cfg);
/* The operations to mount with: the local ones, wrapped by the @PEER
 * paths when the mount is a node (dmarfs_remote_new). */
void dmarfs_free(struct dmarfs *fs); /* NULL-safe; frees every inode */
const struct fuse_lowlevel_ops *dmarfs_ops(void);
/* The session, for cache notifications (after fuse_session_new). */
void dmarfs_set_session(struct dmarfs *fs, struct fuse_session *se);

struct dmarfs_node;
struct dmar_error;
/* Show the node's peers as @PEER directories in the root, or with view
 * (a peer's name) make the whole mount a view of that peer.  Call before
 * mounting; dmarfs_free undoes it.  0, -EINVAL (unknown view peer), -ENOMEM. */
int dmarfs_remote_new(struct dmarfs *fs, struct dmarfs_node *node, const char *view, struct dmar_error *err);
void dmarfs_remote_free(struct dmarfs *fs);
/* Attach the node (its REST API acts on this filesystem). */
void dmarfs_set_node(struct dmarfs *fs, struct dmarfs_node *node);

#endif /* DMARFS_FS_H */
