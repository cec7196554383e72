/* SPDX-License-Identifier: MIT */
/*
 * fs.h - the dmarfs filesystem's FUSE front end: the low-level operations
 * over the namespace (ns.h) and the contents of files (file.h) in an
 * arena, and the @PEER paths of a node wrapped around them (remote.c).
 */
#ifndef DMARFS_FS_H
#define DMARFS_FS_H

#define FUSE_USE_VERSION 314

/* Read-ahead asked of the kernel in INIT and set on the mount's bdi (the
 * kernel's 128 KiB default halves sequential reads with small buffers). */
#define DMARFS_READAHEAD (1u << 20)
#include <fuse_lowlevel.h>

#include "ns.h"

/* The operations to mount with: the local ones, wrapped by the @PEER
 * paths when the mount is a node (dmarfs_remote_new). */
const struct fuse_lowlevel_ops *dmarfs_ops(void);
/* After fuse_session_mount: the session reads and writes /dev/fuse
 * through fs.c, which asks the kernel for FUSE_HANDLE_KILLPRIV_V2 (see
 * fs.c).  0 or -errno. */
int dmarfs_session_io(struct fuse_session *se);
/* The session, for cache notifications (after fuse_session_new). */
void dmarfs_set_session(struct dmarfs *fs, struct fuse_session *se);
/* After the session ends, before dmarfs_free: stop the idle encoder and
 * drop the @PEER paths. */
void dmarfs_stop(struct dmarfs *fs);

struct dmarfs_node;
struct dmar_error;
/* Show the node's peers as @PEER directories in the root, or with view
 * (a peer's name) make the whole mount a view of that peer.  Call before
 * mounting; dmarfs_stop undoes it.  0, -EINVAL (unknown view peer), -ENOMEM. */
int dmarfs_remote_new(struct dmarfs *fs, struct dmarfs_node *node, const char *view, struct dmar_error *err);
void dmarfs_remote_free(struct dmarfs *fs);
/* Attach the node (its REST API acts on this filesystem). */
void dmarfs_set_node(struct dmarfs *fs, struct dmarfs_node *node);

#endif /* DMARFS_FS_H */
