/* SPDX-License-Identifier: MIT */
/*
 * ns.h - the namespace of a mount: inodes, their names and attributes,
 * below both front ends (fs.c: the FUSE operations; node.c: the REST API).
 *
 * Every change to the namespace goes through the ns_* operations here.
 * Each checks its arguments, changes the tree, and records the change in
 * the arena's journal (persist.h) before it returns, so that a mount
 * attached after a crash shows every change that returned.  The front ends
 * only translate: a FUSE request or an HTTP request in, -errno out.
 *
 * Locking (the order is the list's):
 *   i->encode_mu  one encoder of a file at a time (ns_encode);
 *   fs->busy   rwlock: shared by the background work that moves chunk
 *              references outside the locks below -- an encode step
 *              (prepare to commit: its chunks are in the store, held by
 *              no file yet) and the owners' ticks (expiry) -- exclusive
 *              for the check (check.h), which must see none in flight;
 *   fs->ckpt   rwlock: shared around a change recorded without fs->ns (a
 *              file's contents or attributes), exclusive for a checkpoint
 *              (persist.c), which needs every record in one log;
 *   fs->ns     mutex: the names (directory entries), nlink, nlookup, the
 *              inode lists and counts, and the order of their records;
 *   i->lock    each inode's rwlock: its attributes and contents;
 *   the journal's own mutex, then the arena's locks.
 * A thread holding an inode lock never waits for fs->ns or fs->ckpt.
 */
#ifndef DMARFS_NS_H
#define DMARFS_NS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "dir.h"
#include "file.h"
#include "codec/error.h"

struct dmar_journal;
struct fuse_session;
struct dmarfs_node;
struct dmarfs_remote;

#define INODE_LOCAL 0x4c4f434cu /* "LOCL" */
#define XATTR_PREFIX "user.dmar."
/* The root directory's inode number. */
#define NS_ROOT_INO 1

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
	pthread_mutex_t encode_mu; /* one encoder at a time (fs.c), taken before lock */
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
	struct inode *hnext;  /* persist.c's replay table */
	uint64_t ckpt_stamp;  /* persist.c: written by the checkpoint of that stamp; fs->ns */
	uint64_t last_write; /* CLOCK_MONOTONIC seconds, atomic */
};

struct dmarfs_config {
	struct dmar_fsctx ctx;  /* arena, chunker, encoding */
	uint64_t nr_inodes;
	mode_t root_mode;
	uid_t root_uid;
	gid_t root_gid;
	struct dmar_journal *journal; /* the arena's (NULL: nothing is recorded) */
	bool writeback;         /* the FUSE front end asks for the kernel's writeback cache */
};

struct dmarfs {
	struct dmarfs_config cfg;
	pthread_rwlock_t busy;
	pthread_rwlock_t ckpt;
	pthread_mutex_t ns;
	struct inode *root;
	uint64_t next_ino;   /* protected by ns */
	uint64_t inodes;     /* protected by ns */
	/* Files written to and not encoded since: the idle encoder's work
	 * list.  Each listed inode holds a lookup reference.  Protected by
	 * ns; idle_cond (with ns) wakes the encoder thread for a closed file
	 * or to stop. */
	struct inode *idle_head;
	size_t idle_queued;   /* how many are listed: the encode backlog */
	pthread_cond_t idle_cond;
	pthread_t idle_thread;
	bool idle_running, idle_stop, idle_kick; /* kick: a close queued a file */
	struct inode *grave;  /* see ns_inode_maybe_free; protected by ns */
	/* Every live inode, linked or not: an unlinked one the kernel still
	 * knows (an open file, an expired dentry's) is in no directory, and
	 * its FORGET may never come before unmount; teardown frees this
	 * list.  Protected by ns. */
	struct inode *all;
	size_t ngrave;
	struct fuse_session *se;      /* for cache notifications; set before mounting */
	/* The kernel caches attributes for long (fs_i.h): a change it did not
	 * make itself -- an encode changing st_blocks, an API commit changing
	 * a directory -- is told through this, with no lock held.  NULL: no
	 * kernel to tell (unit tests). */
	void (*attr_changed)(struct dmarfs *fs, struct inode *i);
	struct dmarfs_node *node;     /* node.c: the REST API and the peers, or NULL */
	struct dmarfs_remote *remote; /* remote.c: the @PEER paths, or NULL */
	struct dmar_content_index *own_index; /* cfg.ctx.index when dmarfs_new made it */
	/* persist.c: journal bytes after the last checkpoint (atomic), and
	 * the first failure to record, for the log (protected by ns). */
	uint64_t ckpt_bytes;
	int record_err;
	/* persist.c: the buffer of the last big record, kept for the next
	 * (a commit's of a 1 GiB file is 2 MiB, which fresh pages would cost
	 * more than writing it).  Protected by rec_mu. */
	pthread_mutex_t rec_mu;
	uint8_t *rec_spare;
	size_t rec_spare_cap;
	bool forget_warned; /* a FORGET of more lookups than counted was logged */
	bool replaying;       /* persist.c's attach: contents hold nothing yet */
	struct {
		void (*refs)(void *ctx, const struct dmar_file_refs *r);
		void (*tick)(void *ctx);
		size_t (*shed)(void *ctx);
		void *ctx;
	} owners[4];
	int nowners;
};

#define ENTRY_INO(e) ((struct inode *)(e)->ino)

/* Holders of chunk references and arena space outside the tree (node.c's
 * staged uploads, remote.c's copies of peers' files): the consistency
 * check (check.h) asks each for what it holds (refs), the idle thread
 * calls tick (may be NULL) about once a second, for expiries, and an
 * allocation that finds the arena full calls shed (may be NULL), which
 * gives back what can go (abandoned uploads, copies nobody has open) and
 * says how much went, before the allocation fails with ENOSPC.  shed runs
 * on the allocating thread, which may hold inode locks: it must only try
 * its own locks.  Register before the mount serves; they must outlive its
 * session. */
void ns_add_owner(struct dmarfs *fs, void (*refs)(void *ctx, const struct dmar_file_refs *r),
		  void (*tick)(void *ctx), size_t (*shed)(void *ctx), void *ctx);
/* The owners' ticks (no lock held). */
void ns_tick(struct dmarfs *fs);

/* A timing the tests shorten: the positive integer in the environment
 * variable env (DMARFS_STAGE_SECONDS...), else dflt; read once, into
 * *once (a static of the caller's, 0 at first). */
uint64_t ns_env_knob(const char *env, uint64_t dflt, uint64_t *once);

/* A new, empty filesystem over cfg's arena: 0, -ENOMEM. */
int dmarfs_new(struct dmarfs **out, const struct dmarfs_config *cfg);
void dmarfs_free(struct dmarfs *fs); /* NULL-safe; frees every inode */

struct timespec ns_now(void);

/* ---- inodes and lookup references (ns held) ---- */

/* A new inode (nlink 0, no name) numbered ino, or the next number with
 * ino 0.  NULL when nr_inodes is reached or out of memory. */
struct inode *ns_inode_new(struct dmarfs *fs, uint64_t ino, mode_t mode, uid_t uid, gid_t gid);
/* Free i when no name and no lookup is left (an open file's contents
 * stay until its last close). */
void ns_inode_maybe_free(struct dmarfs *fs, struct inode *i);
/* Drop n lookup references (what the kernel's FORGET does). */
void ns_forget_locked(struct dmarfs *fs, struct inode *i, uint64_t n);
/* The same taking ns. */
void ns_forget(struct dmarfs *fs, struct inode *i, uint64_t n);
/* nlink, taking ns. */
nlink_t ns_nlink(struct dmarfs *fs, struct inode *i);

/* ---- reading (i->lock held, shared is enough) ---- */

void ns_fill_stat(const struct inode *i, struct stat *st);
/* st_size alone, without the walk over a file's extents st_blocks costs. */
off_t ns_inode_size(const struct inode *i);

/* ---- changes: each takes the locks it needs; 0 or -errno ---- */

/* name in d, with a lookup reference taken on *out.  -ENOENT, -ENOTDIR. */
int ns_lookup(struct dmarfs *fs, struct inode *d, const char *name, struct inode **out);

/* Make name in d: a regular file, directory, symlink (target), device,
 * FIFO or socket, owned by uid and by gid (or d's group where d is
 * set-group-ID, whose directories inherit the bit).  *out gets it with a
 * lookup reference.  -ENOTDIR, -ENOENT (d was removed), -EEXIST,
 * -ENAMETOOLONG, -ENOSPC (no inode left, or no room to record it),
 * -ENOMEM. */
int ns_make(struct dmarfs *fs, struct inode *d, const char *name, mode_t mode, dev_t rdev, const char *target,
	    uid_t uid, gid_t gid, struct inode **out);
/* Another name for i (not a directory).  -EPERM, -ENOENT, -EEXIST, -ENOSPC. */
int ns_link(struct dmarfs *fs, struct inode *i, struct inode *d, const char *name, struct inode **out);

enum ns_kind { NS_FILE, NS_DIR, NS_ANY };
/* Remove name from d: NS_FILE as unlink(2) (-EISDIR for a directory),
 * NS_DIR as rmdir(2) (-ENOTDIR, -ENOTEMPTY), NS_ANY either (an empty
 * directory or anything else).  -ENOENT. */
int ns_remove(struct dmarfs *fs, struct inode *d, const char *name, enum ns_kind kind);
/* rename(2) with RENAME_NOREPLACE, RENAME_EXCHANGE or RENAME_WHITEOUT
 * (name becomes a whiteout, a character device 0:0 owned by uid/gid, in
 * the same step): -EINVAL (flags, or a directory into itself), -ENOENT,
 * -EEXIST, -ENOTDIR, -EISDIR, -ENOTEMPTY, -ENOSPC. */
int ns_rename(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
	      unsigned flags, uid_t uid, gid_t gid);

/* setattr(2)'s changes, those of set (NS_SET_*). */
enum {
	NS_SET_MODE = 1 << 0,
	NS_SET_UID = 1 << 1,
	NS_SET_GID = 1 << 2,
	NS_SET_SIZE = 1 << 3,
	NS_SET_ATIME = 1 << 4,
	NS_SET_MTIME = 1 << 5,
	NS_SET_ATIME_NOW = 1 << 7,
	NS_SET_MTIME_NOW = 1 << 8,
	NS_SET_CTIME = 1 << 10,
	NS_SET_BY_ROOT = 1 << 30, /* not a change: the caller is root (CAP_FSETID) */
};
struct ns_attr {
	unsigned set;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint64_t size;
	struct timespec atime, mtime, ctime;
};
/* Apply a to i; *st its attributes after.  A size change of a file with
 * no open file descriptor is recorded at once (no close will).  A chown
 * of a regular file, and a size change by a caller other than root
 * (ns_kill_priv), clear its set-ID bits unless the mode is set in the
 * same call.  -EISDIR, -EINVAL (size of a non-file), -ENOSPC, -EFBIG. */
int ns_setattr(struct dmarfs *fs, struct inode *i, const struct ns_attr *a, struct stat *st);

/*
 * The VFS's "kill privileges", which the kernel leaves to the filesystem
 * (fs.c asks for FUSE_HANDLE_KILLPRIV_V2, so that it need not ask for
 * security.capability before every write): after a write or truncate of
 * regular file i by a caller other than root, or a chown (chown true) by
 * anyone, set-user-ID goes, and set-group-ID where group execute is on;
 * after any of them security.capability goes.  No lock held; cheap when
 * there is nothing to kill.
 */
void ns_kill_priv(struct dmarfs *fs, struct inode *i, bool by_root, bool chown);

/* Extended attributes: user.* stored, user.dmar.* the read-only views of
 * a file's encoding (and, on the root, the mount's check: persist.h).
 * set: -EOPNOTSUPP (not user.*), -EPERM (user.dmar.*), -E2BIG (> 64 KiB),
 * -EEXIST / -ENODATA (XATTR_CREATE / XATTR_REPLACE), -ENOSPC.
 * get: the value's length, copied to buf when cap >= it (cap 0: length
 * only), -ERANGE, -ENODATA.  list: the same for the NUL-separated names. */
int ns_setxattr(struct dmarfs *fs, struct inode *i, const char *name, const void *value, size_t size, int flags);
int ns_removexattr(struct dmarfs *fs, struct inode *i, const char *name);
ssize_t ns_getxattr(struct dmarfs *fs, struct inode *i, const char *name, void *buf, size_t cap);
ssize_t ns_listxattr(struct dmarfs *fs, struct inode *i, char *buf, size_t cap);
/* An xattr value of len bytes answered as get answers it (the front
 * end's own values use it too). */
ssize_t ns_xattr_value(const void *v, size_t len, void *buf, size_t cap);

/* ---- paths (the REST API) ---- */

/* Walk path ("a/b/c", checked by the wire layer) from the root to its
 * parent directory (held: ns_forget it) and last component (a 256-byte
 * buffer; "" for the root itself).  -ENOENT, -ENOTDIR. */
int ns_walk_parent(struct dmarfs *fs, const char *path, struct inode **d, char *leaf);
/* path's inode, held.  -ENOENT, -ENOTDIR. */
int ns_walk(struct dmarfs *fs, const char *path, struct inode **out);
/* Link the new file i (made with ns_inode_new, nlink 0, contents built)
 * as name in d, replacing a file there unless noreplace (-EEXIST), never
 * a directory (-EISDIR): in one step, recorded with its contents.
 * -ENOENT (d was removed), -ENOSPC. */
int ns_commit_file(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, bool noreplace);

/* ---- encoding: the one driver of every encode (close, idle, REST) ---- */

/* Encode i's RAW extents with c (takes i->encode_mu and i->lock, step by
 * step, syncing each step of a file the journal holds): 0 when none was
 * left at the last look, or once the unmount began (idle_stop: the rest
 * stays RAW), -EAGAIN when writes made tries plans stale,
 * -ENOSPC when not even one chunk fitted, -ENOMEM. */
int ns_encode(struct dmarfs *fs, struct inode *i, struct dmar_fsctx *c, int tries);
/* i's content id in *cid and, when rc is not NULL, its recipe (rc->e
 * malloc'd): the known id, else computed from the recipe and published on
 * i as named here (file.h: not sent).  The hash runs under the shared
 * lock; a change meanwhile (another generation) leaves i unnamed.  0,
 * -EAGAIN (i holds bytes not encoded yet), -ENOMEM. */
int ns_content_id(struct inode *i, struct dmar_fsctx *c, struct dmar_recipe *rc, struct dmar_id *cid);
/* Before a copy shares i's chunks (dmar_file_share would encode i itself,
 * in one go, without a sync between steps): encode it, if it needs it. */
void ns_encode_source(struct dmarfs *fs, struct inode *i);
/* Before an answer that shows what encoding gives (user.dmar.*, a REST
 * stat): encode i now if it is closed and has pending writes (idle.h: the
 * encode of a closed file runs in the background).  A file still open is
 * left to the idle rule. */
void ns_settle(struct dmarfs *fs, struct inode *i);

/* ---- what persist.c replays through (ns held; no record is made) ---- */

/* The tree changes of ns_make/ns_link, ns_remove, ns_rename, done at time
 * t, as the live operations do them after their checks. */
int ns_apply_link(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, struct timespec t,
		  bool touch);
void ns_apply_remove(struct dmarfs *fs, struct inode *d, struct dmar_dirent *e, struct timespec t);
int ns_apply_rename(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
		    unsigned flags, struct timespec t);
/* Set or remove one xattr of i (i->lock held): 0, -ENOMEM, -ENODATA. */
int ns_xattr_set_locked(struct inode *i, const char *name, const void *value, size_t size);
int ns_xattr_remove_locked(struct inode *i, const char *name);

#endif /* DMARFS_NS_H */
