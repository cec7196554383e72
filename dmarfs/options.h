/* SPDX-License-Identifier: MIT */
/*
 * options.h - dmarfs mount options, in the style of tmpfs and hugetlbfs.
 * docs/mount-options.md and the man page describe each one.
 */
#ifndef DMARFS_OPTIONS_H
#define DMARFS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "file.h"
#include "arena/arena.h"

struct dmarfs_opts {
	char *source;        /* NAME: the fsname shown by mount(8) */
	char *mountpoint;
	uint64_t size;       /* arena bytes (0 until dmarfs_opts_defaults: see size_given) */
	bool size_given;     /* size= was there: an arena attached must be that size */
	bool keep;           /* the arena outlives umount */
	bool fresh;          /* start empty, discarding an arena left under NAME */
	bool stale;          /* the mount point is a dead FUSE mount (ENOTCONN) */
	uint64_t nr_inodes;
	bool nr_inodes_given;
	mode_t mode;         /* of the root directory */
	uid_t uid;
	gid_t gid;
	uint64_t pagesize;   /* 0 default, 4096 none */
	bool strict;
	enum dmar_backing_want backing; /* backing=: a new arena's memory */
	enum dmar_encode_mode encode;
	int level;
	char *bytepack;
	char *node;          /* node=NAME; a node when any of node/listen/peers/view is given */
	char *listen, *peers, *token, *tls_cert, *tls_key, *tls_ca;
	char *view;          /* view=PEER: the mount shows that peer's files */
	bool foreground, debug, allow_other, private, ro;
	bool writeback;      /* the kernel's writeback cache (fs.c op_init says what it changes) */
	unsigned threads;    /* most FUSE worker threads */
	uint64_t max_file_size; /* a file's size at most (0 until dmarfs_opts_defaults) */
	uint64_t mem_max;    /* a node's memory outside the arena, at most (likewise) */
	char *fuse_opts;     /* generic options passed to the kernel/libfuse */
};

/* Parse argv as `dmarfs NAME MOUNTPOINT [-o OPTS] [-f] [-d]`.  Unknown
 * options are an error.  Returns 0, 1 (help or version printed: exit 0),
 * or -EINVAL (message printed). */
int dmarfs_opts_parse(int argc, char **argv, struct dmarfs_opts *o);
/* Fill in what depends on the arena: size (half of RAM for a new arena
 * without size=; arena_size for one attached) and nr_inodes. */
void dmarfs_opts_defaults(struct dmarfs_opts *o, uint64_t arena_size);
void dmarfs_opts_free(struct dmarfs_opts *o);

#endif /* DMARFS_OPTIONS_H */
