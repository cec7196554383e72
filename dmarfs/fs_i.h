/* SPDX-License-Identifier: MIT */
/*
 * fs_i.h - what the FUSE front end's two layers share: fs.c (the local
 * operations) and remote.c (the @PEER paths that wrap them).
 */
#ifndef DMARFS_FS_I_H
#define DMARFS_FS_I_H

#include <stdbool.h>
#include <stdint.h>

#include "fs.h"
#include "ns.h"

/* Names and attributes cached by the kernel for a day: it makes every
 * change itself (so it knows), but for those of the REST API and of the
 * encoder, which notify it (node.c inval, ns.h attr_changed).  A second
 * made `git status` on a mount 5.7 x slower: an lstat per file each became
 * a GETATTR round trip once the second was out. */
#define ATTR_TIMEOUT 86400.0
#define ENTRY_TIMEOUT 86400.0

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
/* Fill buf (size bytes, *used of them taken) with d's entries from
 * cookie off on, "." and ".." first; false when buf is full.  fs->ns
 * held: remote.c lists the root's @PEER entries after these in the same
 * hold. */
bool fs_list_dir(fuse_req_t req, struct inode *d, char *buf, size_t size, size_t *used, off_t off);

#endif /* DMARFS_FS_I_H */
