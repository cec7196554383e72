/* SPDX-License-Identifier: MIT */
/*
 * fs.h - the dmarfs filesystem: inodes, directories and the FUSE
 * low-level operations over a file's contents (file.h) in an arena.
 */
#ifndef DMARFS_FS_H
#define DMARFS_FS_H

#define FUSE_USE_VERSION 314
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
void dmarfs_free(struct dmarfs *fs); /* NULL-safe; frees every inode */
const struct fuse_lowlevel_ops *dmarfs_ops(void);

#endif /* DMARFS_FS_H */
