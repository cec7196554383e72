/* SPDX-License-Identifier: MIT */
/*
 * The FUSE low-level operations, shaped like libfuse's passthrough_ll:
 * a fuse_ino_t is the address of our struct inode (the root is
 * FUSE_ROOT_ID), and the kernel's lookup count keeps it alive.  Changes
 * to names and attributes are thin shells over the namespace (ns.h);
 * data operations (read, write, the encode at close) are here, over a
 * file's contents (file.h), and end in a sync (persist.h) where the
 * durability promise says so: at every close (FLUSH: close(2) waits for
 * it), fsync, and the idle encode.  Locking is ns.h's.
 */
#include "config.h"

#include <errno.h>
#include <linux/fuse.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "dir.h"
#include "fs_i.h"
#include "idle.h"
#include "persist.h"

static struct dmarfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct inode *INO(fuse_req_t req, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? FS(req)->root : (struct inode *)(uintptr_t)ino;
}

static fuse_ino_t NODEID(struct dmarfs *fs, struct inode *i)
{
	return i == fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)i;
}

/* The entry of i, whose lookup reference the caller took for the kernel.
 * A nodeid is the inode's address, which a later inode may get once this
 * one is freed; the generation, its inode number (never reused within a
 * mount), makes each (nodeid, generation) pair name one inode, as the
 * protocol asks: a kernel that still knew the old one would see it stale
 * (fuse_iget) instead of taking the new one for it.  The root's is the
 * kernel's own, 0. */
static void fill_entry(struct dmarfs *fs, struct inode *i, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = NODEID(fs, i);
	e->generation = i == fs->root ? 0 : i->st_ino;
	e->attr_timeout = ATTR_TIMEOUT;
	e->entry_timeout = ENTRY_TIMEOUT;
	pthread_rwlock_rdlock(&i->lock);
	ns_fill_stat(i, &e->attr);
	pthread_rwlock_unlock(&i->lock);
	e->attr.st_nlink = ns_nlink(fs, i);
}

/* Reply to a lookup-like request with i (held for the kernel), or r. */
static void reply_entry_or(fuse_req_t req, int r, struct inode *i)
{
	struct dmarfs *fs = FS(req);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	struct fuse_entry_param e;
	fill_entry(fs, i, &e);
	if (fuse_reply_entry(req, &e) != 0)
		ns_forget(fs, i, 1); /* the kernel never got it */
}

/* ---- request counts ----------------------------------------------------- */

/* FUSE requests of the local operations, by kind, since the mount: what
 * a workload costs in round trips, read from the root's
 * user.dmar.requests ("lookup=N getattr=N ... total=N").  One mount per
 * daemon, so the counts are the process's. */
#define FS_OPS(X) \
	X(LOOKUP, lookup) \
	X(FORGET, forget) \
	X(GETATTR, getattr) \
	X(SETATTR, setattr) \
	X(READLINK, readlink) \
	X(MKNOD, mknod) \
	X(MKDIR, mkdir) \
	X(UNLINK, unlink) \
	X(RMDIR, rmdir) \
	X(SYMLINK, symlink) \
	X(RENAME, rename) \
	X(LINK, link) \
	X(OPEN, open) \
	X(READ, read) \
	X(WRITE, write) \
	X(FLUSH, flush) \
	X(RELEASE, release) \
	X(FSYNC, fsync) \
	X(OPENDIR, opendir) \
	X(READDIR, readdir) \
	X(STATFS, statfs) \
	X(SETXATTR, setxattr) \
	X(GETXATTR, getxattr) \
	X(LISTXATTR, listxattr) \
	X(REMOVEXATTR, removexattr) \
	X(CREATE, create) \
	X(FALLOCATE, fallocate) \
	X(COPY_FILE_RANGE, copy_file_range) \
	X(LSEEK, lseek)
enum fs_op {
#define X(up, low) FSOP_##up,
	FS_OPS(X)
#undef X
	FSOP_N
};
static const char *const op_names[FSOP_N] = {
#define X(up, low) [FSOP_##up] = #low,
	FS_OPS(X)
#undef X
};
static _Atomic uint64_t nreq[FSOP_N];

static void count_req(enum fs_op k)
{
	atomic_fetch_add_explicit(&nreq[k], 1, memory_order_relaxed);
}

/* The counts as one line; its length, as snprintf's. */
static int requests_line(char *out, size_t cap)
{
	size_t n = 0;
	uint64_t total = 0;
	for (int k = 0; k < FSOP_N; k++) {
		uint64_t v = atomic_load_explicit(&nreq[k], memory_order_relaxed);
		total += v;
		n += (size_t)snprintf(out + (n < cap ? n : cap), n < cap ? cap - n : 0, "%s=%" PRIu64 " ", op_names[k], v);
	}
	return (int)(n + (size_t)snprintf(out + (n < cap ? n : cap), n < cap ? cap - n : 0, "total=%" PRIu64, total));
}

static void op_destroy(void *userdata)
{
	idle_stop(userdata);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	idle_start(userdata);
	/* No writeback cache by default: every write reaches the daemon
	 * before write() returns, so a full arena is ENOSPC from write()
	 * itself, st_blocks and SEEK_DATA/SEEK_HOLE see all data, and the
	 * kernel still caches pages for reads (keep_cache: we are the only
	 * writer).  With writeback= the kernel gathers small writes in its
	 * page cache and sends them in large pieces (SQLite's 4 KiB pages: a
	 * tenth of the WRITEs); a close(2) or fsync that returns still has
	 * its file recorded (the kernel writes back before FLUSH and FSYNC),
	 * but a full arena shows there, not at write(), and the kernel
	 * answers SEEK_DATA/SEEK_HOLE itself (op_lseek): we cannot see its
	 * dirty pages.  Large writes arrive as up to max_write bytes. */
	struct dmarfs *fs = userdata;
	if (fs->cfg.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	else
		conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* Every change to a local file's bytes is a write the kernel made
	 * (a REST commit makes a new inode; a peer's file is opened without
	 * keep_cache): with auto_inval_data the kernel dropped a file's
	 * cached pages whenever a GETATTR showed a new mtime -- after every
	 * write it makes itself -- so SQLite's reads after its own writes
	 * went to the daemon (37,000 READs and 32,000 GETATTRs in the
	 * bench-apps workload, 9.9 -> 7.0 s without). */
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->want &= ~(unsigned)FUSE_CAP_POSIX_LOCKS; /* the kernel handles locks locally */
	conn->want &= ~(unsigned)FUSE_CAP_FLOCK_LOCKS;
	if (conn->capable & FUSE_CAP_SPLICE_READ)
		conn->want |= FUSE_CAP_SPLICE_READ;
	conn->max_write = 1u << 20;
	conn->max_readahead = DMARFS_READAHEAD;
}

/* Write-only opens (dd of=, cp, tar -x) write with direct I/O: each
 * write goes from the writer's pages to the daemon, without first being
 * copied into page-cache pages that nobody reads (for a big sequential
 * write that copy and the page allocation cost more than the rest of the
 * write; about 2x the speed here).  Nothing is lost: such an fd can
 * neither read nor be mapped, and the kernel drops other opens' cached
 * pages (and shared mappings' pages) over each range a direct write
 * covers, so readers see the new bytes at once (tests/fs/syscalls.c:
 * t_wronly_coherent).  Opens that can read keep the page cache.  With
 * writeback= every open does: the kernel keeps a file's mtime itself
 * then, and a direct write would leave it stale. */
static bool open_direct(const struct dmarfs *fs, const struct fuse_file_info *fi)
{
	return !fs->cfg.writeback && (fi->flags & O_ACCMODE) == O_WRONLY;
}

/* ---- names and attributes: ns.h -------------------------------------- */

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	count_req(FSOP_LOOKUP);
	struct inode *i = NULL;
	int r = ns_lookup(FS(req), INO(req, parent), name, &i);
	if (r == -ENOENT) {
		/* Absent, for as long as a name is cached: every name made
		 * without the kernel (the REST API's) is told to it (node.c
		 * inval), which drops the negative entry.  git stats every
		 * path before it makes it: one LOOKUP a file saved. */
		struct fuse_entry_param e = { .entry_timeout = ENTRY_TIMEOUT };
		fuse_reply_entry(req, &e);
		return;
	}
	reply_entry_or(req, r, i);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	count_req(FSOP_FORGET);
	ns_forget(FS(req), INO(req, ino), nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	count_req(FSOP_FORGET);
	struct dmarfs *fs = FS(req);
	pthread_mutex_lock(&fs->ns);
	for (size_t k = 0; k < count; k++)
		ns_forget_locked(fs, INO(req, f[k].ino), f[k].nlookup);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count_req(FSOP_GETATTR);
	(void)fi;
	struct inode *i = INO(req, ino);
	struct stat st;
	pthread_rwlock_rdlock(&i->lock);
	ns_fill_stat(i, &st);
	pthread_rwlock_unlock(&i->lock);
	st.st_nlink = ns_nlink(FS(req), i);
	fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	count_req(FSOP_SETATTR);
	(void)fi;
	static const struct {
		int fuse;
		unsigned ns;
	} map[] = {
		{ FUSE_SET_ATTR_MODE, NS_SET_MODE },	     { FUSE_SET_ATTR_UID, NS_SET_UID },
		{ FUSE_SET_ATTR_GID, NS_SET_GID },	     { FUSE_SET_ATTR_SIZE, NS_SET_SIZE },
		{ FUSE_SET_ATTR_ATIME, NS_SET_ATIME },	     { FUSE_SET_ATTR_MTIME, NS_SET_MTIME },
		{ FUSE_SET_ATTR_ATIME_NOW, NS_SET_ATIME_NOW }, { FUSE_SET_ATTR_MTIME_NOW, NS_SET_MTIME_NOW },
		{ FUSE_SET_ATTR_CTIME, NS_SET_CTIME },
	};
	struct ns_attr a = { .mode = attr->st_mode, .uid = attr->st_uid, .gid = attr->st_gid,
			     .size = (uint64_t)attr->st_size, .atime = attr->st_atim, .mtime = attr->st_mtim,
			     .ctime = attr->st_ctim };
	for (size_t k = 0; k < sizeof(map) / sizeof(map[0]); k++)
		if (to_set & map[k].fuse)
			a.set |= map[k].ns;
	if (fuse_req_ctx(req)->uid == 0)
		a.set |= NS_SET_BY_ROOT;
	struct stat st;
	int r = ns_setattr(FS(req), INO(req, ino), &a, &st);
	if (r)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
		      const char *link)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct inode *i = NULL;
	int r = ns_make(FS(req), INO(req, parent), name, mode, rdev, link, ctx->uid, ctx->gid, &i);
	reply_entry_or(req, r, i);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	count_req(FSOP_MKNOD);
	make_node(req, parent, name, mode, rdev, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	count_req(FSOP_MKDIR);
	make_node(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	count_req(FSOP_SYMLINK);
	make_node(req, parent, name, S_IFLNK | 0777, 0, link);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	count_req(FSOP_CREATE);
	struct dmarfs *fs = FS(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct inode *i = NULL;
	int r = ns_make(fs, INO(req, parent), name, S_IFREG | (mode & 07777), 0, NULL, ctx->uid, ctx->gid, &i);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	pthread_rwlock_wrlock(&i->lock);
	i->opens++;
	pthread_rwlock_unlock(&i->lock);
	fi->keep_cache = 1;
	fi->direct_io = open_direct(FS(req), fi);
	struct fuse_entry_param e;
	fill_entry(fs, i, &e);
	if (fuse_reply_create(req, &e, fi) != 0) {
		pthread_rwlock_wrlock(&i->lock);
		i->opens--;
		pthread_rwlock_unlock(&i->lock);
		ns_forget(fs, i, 1);
	}
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	count_req(FSOP_READLINK);
	struct inode *i = INO(req, ino);
	if (!S_ISLNK(i->mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	fuse_reply_readlink(req, i->target);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	count_req(FSOP_LINK);
	struct inode *i = NULL;
	int r = ns_link(FS(req), INO(req, ino), INO(req, newparent), newname, &i);
	reply_entry_or(req, r, i);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	count_req(FSOP_UNLINK);
	fuse_reply_err(req, -ns_remove(FS(req), INO(req, parent), name, NS_FILE));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	count_req(FSOP_RMDIR);
	fuse_reply_err(req, -ns_remove(FS(req), INO(req, parent), name, NS_DIR));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	count_req(FSOP_RENAME);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	fuse_reply_err(req, -ns_rename(FS(req), INO(req, parent), name, INO(req, newparent), newname, flags, ctx->uid,
				       ctx->gid));
}

static void reply_xattr(fuse_req_t req, ssize_t n, const void *buf, size_t size)
{
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
			int flags)
{
	count_req(FSOP_SETXATTR);
	fuse_reply_err(req, -ns_setxattr(FS(req), INO(req, ino), name, value, size, flags));
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	count_req(FSOP_GETXATTR);
	void *buf = size ? malloc(size) : NULL;
	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (ino == FUSE_ROOT_ID && !strcmp(name, "user.dmar.requests")) {
		char line[1024];
		int n = requests_line(line, sizeof(line));
		reply_xattr(req, n >= (int)sizeof(line) ? -E2BIG : ns_xattr_value(line, (size_t)n, buf, size), buf, size);
		free(buf);
		return;
	}
	if (ino == FUSE_ROOT_ID && !strcmp(name, "user.dmar.check"))
		idle_settle(FS(req), false); /* the check sees no encode pending */
	reply_xattr(req, ns_getxattr(FS(req), INO(req, ino), name, buf, size), buf, size);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	count_req(FSOP_LISTXATTR);
	char *buf = size ? malloc(size) : NULL;
	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	reply_xattr(req, ns_listxattr(FS(req), INO(req, ino), buf, size), buf, size);
	free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	count_req(FSOP_REMOVEXATTR);
	fuse_reply_err(req, -ns_removexattr(FS(req), INO(req, ino), name));
}

/* ---- contents ------------------------------------------------------------ */

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count_req(FSOP_OPEN);
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	pthread_rwlock_wrlock(&i->lock);
	if (S_ISDIR(i->mode)) {
		pthread_rwlock_unlock(&i->lock);
		fuse_reply_err(req, EISDIR);
		return;
	}
	int r = 0;
	if (fi->flags & O_TRUNC) {
		r = dmar_file_truncate(&i->f, &fs->cfg.ctx, 0);
		i->mtime = i->ctime = ns_now();
	}
	if (!r)
		i->opens++;
	pthread_rwlock_unlock(&i->lock);
	if (r) {
		fuse_reply_err(req, -r);
		return;
	}
	if (fi->flags & O_TRUNC)
		ns_kill_priv(fs, i, fuse_req_ctx(req)->uid == 0, false);
	fi->keep_cache = 1;
	fi->direct_io = open_direct(FS(req), fi);
	/* A read-only descriptor has nothing for close(2) to record: no
	 * FLUSH round trip at each close (a clone reads back every object
	 * it wrote).  Locks are the kernel's (op_init). */
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
	if (fuse_reply_open(req, fi) != 0) {
		pthread_rwlock_wrlock(&i->lock);
		i->opens--;
		pthread_rwlock_unlock(&i->lock);
	}
}

/* Decoded bytes of compressed chunks go to a per-thread buffer, kept
 * between requests (a fresh 1 MiB malloc per read would page-fault) and
 * freed when the thread ends. */
struct scratch {
	size_t cap;
	uint8_t b[];
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_init(void)
{
	pthread_key_create(&scratch_key, free);
}

uint8_t *fs_read_scratch(size_t size)
{
	pthread_once(&scratch_once, scratch_init);
	struct scratch *s = pthread_getspecific(scratch_key);
	if (!s || s->cap < size) {
		struct scratch *n = realloc(s, sizeof(*n) + (size ? size : 1));
		if (!n)
			return NULL;
		n->cap = size;
		s = n;
		pthread_setspecific(scratch_key, s);
	}
	return s->b;
}

void fs_reply_read(fuse_req_t req, struct dmar_file *f, struct dmar_fsctx *c, size_t size, off_t off)
{
	/* Reply straight from arena memory: the kernel copies it once into
	 * the reader's pages.  The caller's lock keeps it stable meanwhile. */
	enum { MAX_IOV = 64 };
	struct iovec iov[MAX_IOV], more[MAX_IOV];
	uint8_t *scratch = fs_read_scratch(size);
	if (!scratch) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t got = 0;
	int n = dmar_file_read_iov(f, c, (uint64_t)off, size, iov, MAX_IOV - 1, scratch, &got);
	/* More extents than iovecs (many small writes into a full arena):
	 * the kernel takes a short reply for the end of the file, so the
	 * rest is copied into the scratch buffer (after the bytes decoded
	 * there so far) and goes as the last iovec. */
	size_t tail = got;
	while (n == MAX_IOV - 1 && got < size && (uint64_t)off + got < f->size) {
		size_t part = 0;
		int m = dmar_file_read_iov(f, c, (uint64_t)off + got, size - got, more, MAX_IOV, scratch + got, &part);
		if (m <= 0) {
			n = m < 0 ? m : n;
			break;
		}
		uint8_t *to = scratch + got;
		for (int k = 0; k < m; k++) {
			memmove(to, more[k].iov_base, more[k].iov_len);
			to += more[k].iov_len;
		}
		got += part;
	}
	if (n == MAX_IOV - 1 && got > tail)
		iov[n++] = (struct iovec){ scratch + tail, got - tail };
	if (n < 0)
		fuse_reply_err(req, -n);
	else
		fuse_reply_iov(req, iov, n);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	count_req(FSOP_READ);
	(void)fi;
	struct inode *i = INO(req, ino);
	pthread_rwlock_rdlock(&i->lock);
	fs_reply_read(req, &i->f, &FS(req)->cfg.ctx, size, off);
	pthread_rwlock_unlock(&i->lock);
}

/* Bytes of a write request, copied piece by piece into the arena: with
 * splice the request's data sits in a pipe and goes to arena memory in one
 * copy, without passing through a libfuse buffer first. */
int fs_copy_bufvec(void *ctx, uint8_t *dst, size_t len)
{
	struct fuse_bufvec *src = ctx;
	struct fuse_bufvec d = FUSE_BUFVEC_INIT(len);
	d.buf[0].mem = dst;
	ssize_t n = fuse_buf_copy(&d, src, 0);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}

/* Both write paths: make room, copy the bytes in, update times. */
/* A write or an allocation that found the arena full (r == -ENOSPC,
 * given before any byte changed) is tried once more if settling the
 * pending encodes (idle.h) freed anything. */
static bool retry_when_full(struct dmarfs *fs, int r, int *tries)
{
	return r == -ENOSPC && (*tries)++ == 0 && idle_settle(fs, true) > 0;
}

static void do_write(fuse_req_t req, fuse_ino_t ino, off_t off, size_t size, struct fuse_file_info *fi,
		     int (*copy)(void *ctx, uint8_t *dst, size_t len), void *ctx)
{
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	/* O_APPEND appends at our size, not at the kernel's idea of it,
	 * like pwrite on an O_APPEND file descriptor. */
	int r, tries = 0;
	bool kill;
	do {
		pthread_rwlock_wrlock(&i->lock);
		uint64_t at = (fi->flags & O_APPEND) ? i->f.size : (uint64_t)off;
		r = dmar_file_write_with(&i->f, &fs->cfg.ctx, at, size, copy, ctx);
		if (!r)
			i->mtime = i->ctime = ns_now();
		kill = (i->mode & (S_ISUID | S_ISGID)) || i->nxa;
		pthread_rwlock_unlock(&i->lock);
	} while (retry_when_full(fs, r, &tries));
	if (r) {
		fuse_reply_err(req, -r);
		return;
	}
	/* Ours to do (HANDLE_KILLPRIV_V2): set-ID bits and capabilities. */
	if (kill)
		ns_kill_priv(fs, i, fuse_req_ctx(req)->uid == 0, false);
	idle_note_write(fs, i, idle_now()); /* before the reply: after it, i may be forgotten */
	fuse_reply_write(req, size);
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
			 struct fuse_file_info *fi)
{
	count_req(FSOP_WRITE);
	do_write(req, ino, off, fuse_buf_size(bufv), fi, fs_copy_bufvec, bufv);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count_req(FSOP_FLUSH);
	(void)fi;
	/* Every close(2) waits for this: a file closed is a file recorded,
	 * as its extents are now (the encode comes after the last close, in
	 * the background, and records what it changes). */
	struct inode *i = INO(req, ino);
	int r = S_ISREG(i->mode) ? persist_sync(FS(req), i) : 0;
	fuse_reply_err(req, -r);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count_req(FSOP_RELEASE);
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	pthread_rwlock_wrlock(&i->lock);
	if (i->opens)
		i->opens--;
	bool last = i->opens == 0 && S_ISREG(i->mode);
	/* The room a file's last extent kept for appends goes back now. */
	if (last)
		dmar_file_trim(&i->f, &fs->cfg.ctx);
	pthread_rwlock_unlock(&i->lock);
	/* Hold a reference until the file is queued or encoded: after the
	 * reply the kernel may forget the inode (an unlinked file), which
	 * would free it. */
	pthread_mutex_lock(&fs->ns);
	last = last && i->nlink > 0;
	if (last)
		i->nlookup++;
	else
		ns_inode_maybe_free(fs, i); /* the last close of an unlinked file */
	pthread_mutex_unlock(&fs->ns);
	/* The last close is when a file is most likely complete: it is due
	 * for its encode (idle.h), which the encoder thread does at its own
	 * priority.  The trim is recorded by the sync that follows the encode
	 * (or here, when nothing is left to encode). */
	bool queued = last && fs->cfg.ctx.encode != DMAR_ENCODE_NONE && idle_note_close(fs, i);
	fuse_reply_err(req, 0);
	if (last) {
		if (!queued)
			ns_encode(fs, i, &fs->cfg.ctx, 1);
		(void)persist_sync(fs, i);
		ns_forget(fs, i, 1);
	}
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	count_req(FSOP_FSYNC);
	(void)datasync;
	(void)fi;
	/* Recorded before the reply; not encoded (a database fsyncs at
	 * every commit: its files are encoded once they rest, idle.h). */
	struct inode *i = INO(req, ino);
	int r = S_ISREG(i->mode) ? persist_sync(FS(req), i) : 0;
	fuse_reply_err(req, -r);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	count_req(FSOP_OPENDIR);
	struct inode *i = INO(req, ino);
	if (!S_ISDIR(i->mode)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 0;
	fuse_reply_open(req, fi);
}

/* Append one entry to a readdir reply; false when it does not fit. */
static bool add_dirent(fuse_req_t req, char *buf, size_t size, size_t *used, const char *name,
		       const struct inode *i, off_t cookie)
{
	struct stat st;
	memset(&st, 0, sizeof(st));
	st.st_ino = i->st_ino;
	st.st_mode = i->mode & S_IFMT;
	size_t n = fuse_add_direntry(req, buf + *used, size - *used, name, &st, cookie);
	if (n > size - *used)
		return false;
	*used += n;
	return true;
}

bool fs_list_dir(fuse_req_t req, struct inode *d, char *buf, size_t size, size_t *used, off_t off)
{
	struct dmarfs *fs = FS(req);
	/* Offsets are entry cookies: an entry added or removed during a
	 * listing neither repeats nor hides the others.  The root's @PEER
	 * directories come last, with cookies from FS_PEER_COOKIE up. */
	if (off < 1 && !add_dirent(req, buf, size, used, ".", d, 1))
		return false;
	if (off < 2 && !add_dirent(req, buf, size, used, "..", d == fs->root ? d : d->parent, 2))
		return false;
	if ((uint64_t)off >= FS_PEER_COOKIE)
		return true;
	size_t pos = dmar_dir_seek(&d->dir, off < 2 ? 2 : (uint64_t)off);
	for (struct dmar_dirent *e; (e = dmar_dir_next(&d->dir, &pos));)
		if (!add_dirent(req, buf, size, used, e->name, ENTRY_INO(e), (off_t)e->cookie))
			return false;
	return true;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	count_req(FSOP_READDIR);
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *d = INO(req, ino);
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	pthread_mutex_lock(&fs->ns);
	fs_list_dir(req, d, buf, size, &used, off);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	count_req(FSOP_STATFS);
	(void)ino;
	struct dmarfs *fs = FS(req);
	/* The space as the closed files' encodes leave it (idle.h). */
	idle_settle(fs, false);
	struct dmar_arena *a = fs->cfg.ctx.arena;
	struct statvfs sv;
	memset(&sv, 0, sizeof(sv));
	uint64_t size = dmar_arena_size(a), used = dmar_arena_used(a), keep = dmar_arena_reserve(a);
	used = used < size ? used : size;
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = size / 4096;
	/* Free, and (as ext4 shows its reserved blocks) what files can still
	 * take: the journal's reserve is not theirs. */
	sv.f_bfree = (size - used) / 4096;
	sv.f_bavail = size - used > keep ? (size - used - keep) / 4096 : 0;
	pthread_mutex_lock(&fs->ns);
	sv.f_files = fs->cfg.nr_inodes;
	sv.f_ffree = sv.f_favail = fs->cfg.nr_inodes - fs->inodes;
	pthread_mutex_unlock(&fs->ns);
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* ---- allocation, copy, seek ------------------------------------------ */

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	count_req(FSOP_FALLOCATE);
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	int r, tries = 0;
	do {
		pthread_rwlock_wrlock(&i->lock);
		r = dmar_file_fallocate(&i->f, &fs->cfg.ctx, mode, off, len);
		if (!r)
			i->mtime = i->ctime = ns_now();
		pthread_rwlock_unlock(&i->lock);
	} while (retry_when_full(fs, r, &tries));
	fuse_reply_err(req, -r);
}

static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			       fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len,
			       int flags)
{
	count_req(FSOP_COPY_FILE_RANGE);
	(void)fi_in;
	(void)fi_out;
	struct dmarfs *fs = FS(req);
	struct inode *a = INO(req, ino_in), *b = INO(req, ino_out);
	if (flags) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* The source is shared by its chunks, so it is encoded first: here,
	 * step by step with each step synced, so that the raw memory each
	 * frees comes back at once (file.h: a file the journal holds keeps
	 * the raw space it gives back until its next sync). */
	ns_encode_source(fs, a);
	/* Lock in address order; the same file once. */
	struct inode *first = a < b ? a : b, *second = a < b ? b : a;
	pthread_rwlock_wrlock(&first->lock);
	if (second != first)
		pthread_rwlock_wrlock(&second->lock);
	ssize_t n;
	if (a == b && (uint64_t)off_in < (uint64_t)off_out + len && (uint64_t)off_out < (uint64_t)off_in + len)
		n = -EINVAL; /* overlapping ranges in one file */
	else
		n = dmar_file_share(&b->f, &a->f, &fs->cfg.ctx, (uint64_t)off_out, (uint64_t)off_in, len);
	if (n > 0)
		b->mtime = b->ctime = ns_now();
	if (second != first)
		pthread_rwlock_unlock(&second->lock);
	pthread_rwlock_unlock(&first->lock);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	count_req(FSOP_LSEEK);
	(void)fi;
	/* With writeback= the data may still be the kernel's dirty pages:
	 * ENOSYS makes it answer itself from then on, the whole file data
	 * (correct, with no holes found). */
	if (FS(req)->cfg.writeback)
		return (void)fuse_reply_err(req, ENOSYS);
	struct inode *i = INO(req, ino);
	uint64_t out = 0;
	pthread_rwlock_rdlock(&i->lock);
	int r = dmar_file_lseek(&i->f, off, whence, &out);
	pthread_rwlock_unlock(&i->lock);
	fs_reply_lseek(req, r, out);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write_buf = op_write_buf, /* libfuse uses it for every write */
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.create = op_create,
	.fallocate = op_fallocate,
	.copy_file_range = op_copy_file_range,
	.lseek = op_lseek,
};

const struct fuse_lowlevel_ops *fs_local_ops(void)
{
	return &ops;
}

/* ---- the device ------------------------------------------------------ */

/*
 * /dev/fuse as libfuse uses it, but for one thing: the answer to INIT
 * also takes FUSE_HANDLE_KILLPRIV_V2 when the kernel offers it, which
 * libfuse 3.14 has no capability bit for.  With it the kernel marks the
 * superblock SB_NOSEC: after a file's first write it knows the file has
 * nothing to kill and stops asking for security.capability before every
 * write (132,000 GETXATTRs of the bench-apps SQLite workload, a third of
 * its requests).  The killing is then ours: ns_kill_priv, at each write,
 * truncate, O_TRUNC open and chown, as the VFS would do it.
 */
static _Atomic uint64_t init_unique; /* the INIT request's, until answered */
static atomic_bool kernel_killpriv_v2;

static ssize_t dev_read(int fd, void *buf, size_t len, void *ud)
{
	(void)ud;
	ssize_t n = read(fd, buf, len);
	struct fuse_in_header h;
	struct fuse_init_in in;
	if (n >= (ssize_t)(sizeof(h) + offsetof(struct fuse_init_in, flags) + sizeof(in.flags))) {
		memcpy(&h, buf, sizeof(h));
		if (h.opcode == FUSE_INIT) {
			memcpy(&in.flags, (const uint8_t *)buf + sizeof(h) + offsetof(struct fuse_init_in, flags),
			       sizeof(in.flags));
			atomic_store(&kernel_killpriv_v2, (in.flags & FUSE_HANDLE_KILLPRIV_V2) != 0);
			atomic_store(&init_unique, h.unique);
		}
	}
	return n;
}

static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *ud)
{
	(void)ud;
	uint64_t want = atomic_load(&init_unique);
	if (want && count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header) &&
	    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
		struct fuse_out_header *oh = iov[0].iov_base;
		if (oh->unique == want && oh->error == 0) {
			struct fuse_init_out *o = iov[1].iov_base;
			if (atomic_load(&kernel_killpriv_v2))
				o->flags |= FUSE_HANDLE_KILLPRIV_V2;
			atomic_store(&init_unique, 0);
		}
	}
	return writev(fd, iov, count);
}

static ssize_t dev_splice(int fdin, off_t *offin, int fdout, off_t *offout, size_t len, unsigned int flags, void *ud)
{
	(void)ud;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int dmarfs_session_io(struct fuse_session *se)
{
	static const struct fuse_custom_io io = {
		.read = dev_read, .writev = dev_writev, .splice_receive = dev_splice, .splice_send = dev_splice
	};
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

/* ns.h's attr_changed: the kernel drops i's cached attributes (only
 * those: offset -1 keeps the page cache), and asks on the next stat.
 * Takes no inode lock in the kernel, so it is safe from any thread, also
 * inside a request on i. */
static void attr_changed(struct dmarfs *fs, struct inode *i)
{
	if (fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, NODEID(fs, i), -1, 0);
}

void dmarfs_set_session(struct dmarfs *fs, struct fuse_session *se)
{
	fs->se = se;
	fs->attr_changed = attr_changed;
}

void dmarfs_set_node(struct dmarfs *fs, struct dmarfs_node *node)
{
	fs->node = node;
}
