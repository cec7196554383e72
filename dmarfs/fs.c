/* SPDX-License-Identifier: MIT */
/*
 * The FUSE low-level operations, shaped like libfuse's passthrough_ll:
 * a fuse_ino_t is the address of our struct inode (the root is
 * FUSE_ROOT_ID), and the kernel's lookup count keeps it alive.
 *
 * Locking: fs->ns (a mutex) protects the namespace (directory entries,
 * nlink, nlookup, inode counts); each inode's rwlock protects its
 * attributes and contents.  Namespace operations take fs->ns, then at most
 * the inode locks they change; data operations take only the inode lock.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "dir.h"
#include "fs_i.h"

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

struct timespec fs_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return t;
}

/* ---- inodes ------------------------------------------------------------ */

/* Called with fs->ns held. */
struct inode *fs_inode_new(struct dmarfs *fs, mode_t mode, uid_t uid, gid_t gid)
{
	if (fs->inodes >= fs->cfg.nr_inodes)
		return NULL;
	struct inode *i = calloc(1, sizeof(*i));
	if (!i)
		return NULL;
	pthread_rwlock_init(&i->lock, NULL);
	i->kind = INODE_LOCAL;
	i->st_ino = fs->next_ino++;
	i->mode = mode;
	i->uid = uid;
	i->gid = gid;
	i->atime = i->mtime = i->ctime = fs_now();
	dmar_dir_init(&i->dir, 3); /* cookies 1 and 2 are "." and ".." */
	dmar_file_init(&i->f);
	fs->inodes++;
	i->all_next = fs->all;
	if (fs->all)
		fs->all->all_prev = i;
	fs->all = i;
	return i;
}

/* Take i off fs->all (it goes to the grave).  ns held. */
static void all_unlink(struct dmarfs *fs, struct inode *i)
{
	if (i->all_prev)
		i->all_prev->all_next = i->all_next;
	else
		fs->all = i->all_next;
	if (i->all_next)
		i->all_next->all_prev = i->all_prev;
	i->all_prev = i->all_next = NULL;
}

/* Inodes kept after their last reference (fs_inode_maybe_free), newest
 * first; the oldest half is freed when there are more than this. */
#define GRAVE_MAX 4096

static void inode_destroy(struct dmarfs *fs, struct inode *i);

static void bury_half(struct dmarfs *fs)
{
	struct inode *i = fs->grave;
	for (size_t k = 1; i && k < GRAVE_MAX / 2; k++)
		i = i->idle_next;
	if (!i)
		return;
	struct inode *old = i->idle_next;
	i->idle_next = NULL;
	while (old) {
		struct inode *n = old->idle_next;
		fs->inodes++; /* inode_destroy counts it down again */
		inode_destroy(fs, old);
		fs->ngrave--;
		old = n;
	}
}

static void inode_destroy(struct dmarfs *fs, struct inode *i)
{
	if (fs->all == i || i->all_prev) /* not yet in the grave */
		all_unlink(fs, i);
	dmar_file_clear(&i->f, &fs->cfg.ctx);
	for (size_t k = 0; k < i->nxa; k++) {
		free(i->xa[k].name);
		free(i->xa[k].value);
	}
	free(i->xa);
	dmar_dir_clear(&i->dir);
	free(i->target);
	pthread_rwlock_destroy(&i->lock);
	free(i);
	fs->inodes--;
}

/* An inode goes when no name and no kernel reference is left (an unlinked
 * file stays readable while open: the kernel holds a lookup on it).
 * Called with fs->ns held. */
void fs_inode_maybe_free(struct dmarfs *fs, struct inode *i)
{
	if (i == fs->root || i->nlink != 0)
		return;
	if (i->nlookup != 0) {
		/* No name is left but the kernel still knows the inode.  Its
		 * FORGET can come seconds later (when the dentry cache lets
		 * go), and until then an rm'd file would still hold its arena
		 * memory: a cp just after an rm in a full arena got ENOSPC.
		 * With no open left nobody can read the bytes again, so they
		 * go now; the gen bump makes a running encode drop its plan. */
		if (S_ISREG(i->mode)) {
			pthread_rwlock_wrlock(&i->lock);
			if (i->opens == 0 && i->f.n)
				dmar_file_clear(&i->f, &fs->cfg.ctx);
			pthread_rwlock_unlock(&i->lock);
		}
		return;
	}
	/* Free the contents (arena memory) now, but keep the small struct a
	 * while: under the sanitizer build a READLINK was seen still running
	 * on an inode whose FORGET had just arrived on another thread, and a
	 * late reader must find valid memory (it sees an empty file or the
	 * old symlink target), not freed memory.  See the note on issue 3. */
	dmar_file_clear(&i->f, &fs->cfg.ctx);
	fs->inodes--;
	all_unlink(fs, i);
	i->idle_next = fs->grave;
	fs->grave = i;
	if (++fs->ngrave > GRAVE_MAX)
		bury_half(fs);
}

off_t fs_inode_size(const struct inode *i)
{
	if (S_ISREG(i->mode))
		return (off_t)i->f.size;
	if (S_ISLNK(i->mode))
		return (off_t)strlen(i->target);
	if (S_ISDIR(i->mode))
		return (off_t)(dmar_dir_count(&i->dir) + 2) * 32;
	return 0;
}

void fs_fill_stat(const struct inode *i, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = i->st_ino;
	st->st_mode = i->mode;
	st->st_nlink = i->nlink;
	st->st_uid = i->uid;
	st->st_gid = i->gid;
	st->st_rdev = i->rdev;
	st->st_blksize = 4096;
	st->st_size = fs_inode_size(i);
	if (S_ISREG(i->mode)) {
		struct dmar_file_stats fst;
		dmar_file_stats(&i->f, NULL, &fst);
		st->st_blocks = (blkcnt_t)((fst.raw + fst.chunked + 511) / 512);
	}
	st->st_atim = i->atime;
	st->st_mtim = i->mtime;
	st->st_ctim = i->ctime;
}

/* Reply with an entry, taking a lookup reference.  ns held. */
static void reply_entry(fuse_req_t req, struct dmarfs *fs, struct inode *i)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof(e));
	i->nlookup++;
	e.ino = NODEID(fs, i);
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = ENTRY_TIMEOUT;
	pthread_rwlock_rdlock(&i->lock);
	fs_fill_stat(i, &e.attr);
	pthread_rwlock_unlock(&i->lock);
	if (fuse_reply_entry(req, &e) != 0)
		i->nlookup--; /* the kernel never got it */
}

/* ---- directories (ns held) -------------------------------------------- */

/* Entry name in d, or NULL.  ns held. */
#define ENTRY_INO(e) ((struct inode *)(e)->ino)

struct dmar_dirent *fs_dir_find(struct inode *d, const char *name)
{
	return dmar_dir_find(&d->dir, name);
}

int fs_dir_add(struct inode *d, const char *name, struct inode *i)
{
	return dmar_dir_add(&d->dir, name, i);
}

static void dir_remove(struct inode *d, struct dmar_dirent *e)
{
	dmar_dir_remove(&d->dir, e);
}

void fs_touch_dir(struct inode *d)
{
	pthread_rwlock_wrlock(&d->lock);
	d->mtime = d->ctime = fs_now();
	pthread_rwlock_unlock(&d->lock);
}

/* ---- operations ----------------------------------------------------- */

static uint64_t mono_seconds(void);

/* Seconds without writes after which a file still open is encoded. */
#define IDLE_SECONDS 5

static void *idle_main(void *arg)
{
	struct dmarfs *fs = arg;
	pthread_mutex_lock(&fs->ns);
	while (!fs->idle_stop) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&fs->idle_cond, &fs->ns, &until);
		uint64_t now_s = mono_seconds();
		for (struct inode **p = &fs->idle_head; *p && !fs->idle_stop;) {
			struct inode *i = *p;
			if (now_s - __atomic_load_n(&i->last_write, __ATOMIC_RELAXED) < IDLE_SECONDS) {
				p = &i->idle_next;
				continue;
			}
			*p = i->idle_next;
			i->queued = false;
			bool live = i->nlink > 0 && S_ISREG(i->mode);
			pthread_mutex_unlock(&fs->ns);
			/* A write meanwhile queues the file again; one during
			 * the encode makes its plan stale, and it waits. */
			if (live)
				fs_encode_inode(fs, i, false);
			pthread_mutex_lock(&fs->ns);
			fs_forget_one(fs, i, 1);
			p = &fs->idle_head; /* the list may have changed */
		}
	}
	pthread_mutex_unlock(&fs->ns);
	return NULL;
}

/* Threads start here, not before: the daemon forks after mounting. */
static void idle_start(struct dmarfs *fs)
{
	pthread_mutex_lock(&fs->ns);
	fs->idle_running = pthread_create(&fs->idle_thread, NULL, idle_main, fs) == 0;
	pthread_mutex_unlock(&fs->ns);
}

static void idle_stop(struct dmarfs *fs)
{
	pthread_mutex_lock(&fs->ns);
	bool running = fs->idle_running;
	fs->idle_stop = true;
	fs->idle_running = false;
	pthread_cond_broadcast(&fs->idle_cond);
	pthread_mutex_unlock(&fs->ns);
	if (running)
		pthread_join(fs->idle_thread, NULL);
	pthread_mutex_lock(&fs->ns);
	while (fs->idle_head) {
		struct inode *i = fs->idle_head;
		fs->idle_head = i->idle_next;
		i->queued = false;
		fs_forget_one(fs, i, 1);
	}
	pthread_mutex_unlock(&fs->ns);
}

static void op_destroy(void *userdata)
{
	idle_stop(userdata);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	idle_start(userdata);
	/* No writeback cache: every write reaches the daemon before write()
	 * returns, so a full arena is ENOSPC from write() itself, st_blocks
	 * and SEEK_DATA/SEEK_HOLE see all data, and the kernel still caches
	 * pages for reads (keep_cache: we are the only writer).  Large writes
	 * arrive as up to max_write bytes at a time. */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
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
 * t_wronly_coherent).  Opens that can read keep the page cache. */
static bool open_direct(const struct fuse_file_info *fi)
{
	return (fi->flags & O_ACCMODE) == O_WRONLY;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct dmarfs *fs = FS(req);
	struct inode *d = INO(req, parent);
	pthread_mutex_lock(&fs->ns);
	struct dmar_dirent *e = S_ISDIR(d->mode) ? fs_dir_find(d, name) : NULL;
	if (!e) {
		pthread_mutex_unlock(&fs->ns);
		/* A negative entry with a timeout of 0: creates elsewhere are
		 * seen at once. */
		fuse_reply_err(req, S_ISDIR(d->mode) ? ENOENT : ENOTDIR);
		return;
	}
	reply_entry(req, fs, ENTRY_INO(e));
	pthread_mutex_unlock(&fs->ns);
}

void fs_forget_one(struct dmarfs *fs, struct inode *i, uint64_t n)
{
	i->nlookup = i->nlookup > n ? i->nlookup - n : 0;
	fs_inode_maybe_free(fs, i);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct dmarfs *fs = FS(req);
	pthread_mutex_lock(&fs->ns);
	fs_forget_one(fs, INO(req, ino), nlookup);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	struct dmarfs *fs = FS(req);
	pthread_mutex_lock(&fs->ns);
	for (size_t k = 0; k < count; k++)
		fs_forget_one(fs, INO(req, f[k].ino), f[k].nlookup);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_none(req);
}

/* nlink belongs to the namespace lock; never wait for an inode lock
 * while holding it. */
nlink_t fs_get_nlink(struct dmarfs *fs, struct inode *i)
{
	pthread_mutex_lock(&fs->ns);
	nlink_t n = i->nlink;
	pthread_mutex_unlock(&fs->ns);
	return n;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct inode *i = INO(req, ino);
	struct stat st;
	pthread_rwlock_rdlock(&i->lock);
	fs_fill_stat(i, &st);
	pthread_rwlock_unlock(&i->lock);
	st.st_nlink = fs_get_nlink(FS(req), i);
	fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	struct stat st;
	int r = 0;
	pthread_rwlock_wrlock(&i->lock);
	struct timespec t = fs_now();
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (!S_ISREG(i->mode))
			r = S_ISDIR(i->mode) ? -EISDIR : -EINVAL;
		else if ((r = dmar_file_truncate(&i->f, &fs->cfg.ctx, (uint64_t)attr->st_size)) == 0)
			i->mtime = t;
	}
	if (!r && (to_set & FUSE_SET_ATTR_MODE))
		i->mode = (i->mode & S_IFMT) | (attr->st_mode & 07777);
	if (!r && (to_set & FUSE_SET_ATTR_UID))
		i->uid = attr->st_uid;
	if (!r && (to_set & FUSE_SET_ATTR_GID))
		i->gid = attr->st_gid;
	if (!r && (to_set & FUSE_SET_ATTR_ATIME))
		i->atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? t : attr->st_atim;
	if (!r && (to_set & FUSE_SET_ATTR_MTIME))
		i->mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? t : attr->st_mtim;
	if (!r)
		i->ctime = (to_set & FUSE_SET_ATTR_CTIME) ? attr->st_ctim : t;
	fs_fill_stat(i, &st);
	pthread_rwlock_unlock(&i->lock);
	st.st_nlink = fs_get_nlink(fs, i);
	if (r)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

/* Make a new node under parent; reply with its entry (or open it). */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
		      const char *link, struct fuse_file_info *fi)
{
	struct dmarfs *fs = FS(req);
	struct inode *d = INO(req, parent);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int r = 0;
	pthread_mutex_lock(&fs->ns);
	if (!S_ISDIR(d->mode)) {
		r = -ENOTDIR;
	} else if (d->nlink == 0) {
		r = -ENOENT; /* removed directory */
	} else if (fs_dir_find(d, name)) {
		r = -EEXIST;
	} else {
		gid_t gid = ctx->gid;
		pthread_rwlock_rdlock(&d->lock);
		if (d->mode & S_ISGID) {
			gid = d->gid;
			if (S_ISDIR(mode))
				mode |= S_ISGID;
		}
		pthread_rwlock_unlock(&d->lock);
		struct inode *i = fs_inode_new(fs, mode, ctx->uid, gid);
		if (!i) {
			r = -ENOSPC;
		} else {
			i->rdev = rdev;
			i->nlink = S_ISDIR(mode) ? 2 : 1;
			i->parent = d;
			if (link && !(i->target = strdup(link)))
				r = -ENOMEM;
			if (!r)
				r = fs_dir_add(d, name, i);
			if (r) {
				i->nlink = 0;
				inode_destroy(fs, i);
			} else {
				if (S_ISDIR(mode))
					d->nlink++;
				fs_touch_dir(d);
				if (fi) {
					i->opens++;
					fi->keep_cache = 1;
					fi->direct_io = open_direct(fi);
					struct fuse_entry_param e;
					memset(&e, 0, sizeof(e));
					i->nlookup++;
					e.ino = NODEID(fs, i);
					e.attr_timeout = ATTR_TIMEOUT;
					e.entry_timeout = ENTRY_TIMEOUT;
					fs_fill_stat(i, &e.attr);
					if (fuse_reply_create(req, &e, fi) != 0) {
						i->nlookup--;
						i->opens--;
					}
				} else {
					reply_entry(req, fs, i);
				}
			}
		}
	}
	pthread_mutex_unlock(&fs->ns);
	if (r)
		fuse_reply_err(req, -r);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	make_node(req, parent, name, mode, rdev, NULL, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_node(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	make_node(req, parent, name, S_IFLNK | 0777, 0, link, NULL);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	make_node(req, parent, name, S_IFREG | (mode & 07777), 0, NULL, fi);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct inode *i = INO(req, ino);
	if (!S_ISLNK(i->mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	fuse_reply_readlink(req, i->target);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino), *d = INO(req, newparent);
	int r = 0;
	pthread_mutex_lock(&fs->ns);
	if (S_ISDIR(i->mode))
		r = -EPERM;
	else if (i->nlink == 0)
		r = -ENOENT;
	else if (fs_dir_find(d, newname))
		r = -EEXIST;
	else if ((r = fs_dir_add(d, newname, i)) == 0) {
		i->nlink++;
		pthread_rwlock_wrlock(&i->lock);
		i->ctime = fs_now();
		pthread_rwlock_unlock(&i->lock);
		fs_touch_dir(d);
		reply_entry(req, fs, i);
	}
	pthread_mutex_unlock(&fs->ns);
	if (r)
		fuse_reply_err(req, -r);
}

/* Drop the name e from d.  ns held. */
void fs_unlink_entry(struct dmarfs *fs, struct inode *d, struct dmar_dirent *e)
{
	struct inode *i = ENTRY_INO(e);
	dir_remove(d, e);
	if (S_ISDIR(i->mode)) {
		i->nlink = 0;
		d->nlink--;
	} else {
		i->nlink--;
	}
	pthread_rwlock_wrlock(&i->lock);
	i->ctime = fs_now();
	pthread_rwlock_unlock(&i->lock);
	fs_touch_dir(d);
	fs_inode_maybe_free(fs, i);
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct dmarfs *fs = FS(req);
	struct inode *d = INO(req, parent);
	int r = 0;
	pthread_mutex_lock(&fs->ns);
	struct dmar_dirent *e = fs_dir_find(d, name);
	if (!e)
		r = -ENOENT;
	else if (dir && !S_ISDIR(ENTRY_INO(e)->mode))
		r = -ENOTDIR;
	else if (!dir && S_ISDIR(ENTRY_INO(e)->mode))
		r = -EISDIR;
	else if (dir && dmar_dir_count(&ENTRY_INO(e)->dir))
		r = -ENOTEMPTY;
	else
		fs_unlink_entry(fs, d, e);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, -r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, true);
}

/* Is a an ancestor of (or equal to) b?  ns held. */
static bool is_ancestor(struct dmarfs *fs, struct inode *a, struct inode *b)
{
	for (struct inode *x = b; x; x = x == fs->root ? NULL : x->parent)
		if (x == a)
			return true;
	return false;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct dmarfs *fs = FS(req);
	struct inode *d = INO(req, parent), *nd = INO(req, newparent);
	int r = 0;
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
	    ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	pthread_mutex_lock(&fs->ns);
	struct dmar_dirent *e = fs_dir_find(d, name), *t = fs_dir_find(nd, newname);
	if (!e) {
		r = -ENOENT;
		goto out;
	}
	struct inode *i = ENTRY_INO(e);
	if (t && ENTRY_INO(t) == i)
		goto out; /* same inode: nothing to do (POSIX) */
	if ((flags & RENAME_NOREPLACE) && t) {
		r = -EEXIST;
		goto out;
	}
	if (flags & RENAME_EXCHANGE) {
		if (!t) {
			r = -ENOENT;
			goto out;
		}
		struct inode *j = ENTRY_INO(t);
		if ((S_ISDIR(i->mode) && is_ancestor(fs, i, nd)) || (S_ISDIR(j->mode) && is_ancestor(fs, j, d))) {
			r = -EINVAL;
			goto out;
		}
		e->ino = j;
		t->ino = i;
		if (S_ISDIR(i->mode) != S_ISDIR(j->mode) && d != nd) {
			int dn = S_ISDIR(i->mode) ? 1 : -1;
			d->nlink -= dn;
			nd->nlink += dn;
		}
		i->parent = nd;
		j->parent = d;
		goto touch;
	}
	if (S_ISDIR(i->mode) && is_ancestor(fs, i, nd)) {
		r = -EINVAL;
		goto out;
	}
	if (t) {
		struct inode *j = ENTRY_INO(t);
		if (S_ISDIR(i->mode) && !S_ISDIR(j->mode)) {
			r = -ENOTDIR;
			goto out;
		}
		if (!S_ISDIR(i->mode) && S_ISDIR(j->mode)) {
			r = -EISDIR;
			goto out;
		}
		if (S_ISDIR(j->mode) && dmar_dir_count(&j->dir)) {
			r = -ENOTEMPTY;
			goto out;
		}
		/* Replace atomically: the name points at i at once. */
		t->ino = i;
		if (S_ISDIR(j->mode)) {
			j->nlink = 0;
			nd->nlink--;
		} else {
			j->nlink--;
		}
		fs_inode_maybe_free(fs, j);
		e = fs_dir_find(d, name);
		dir_remove(d, e);
	} else {
		if ((r = fs_dir_add(nd, newname, i)) < 0)
			goto out;
		e = fs_dir_find(d, name);
		dir_remove(d, e);
	}
	if (S_ISDIR(i->mode) && d != nd) {
		d->nlink--;
		nd->nlink++;
	}
	i->parent = nd;
touch:
	pthread_rwlock_wrlock(&i->lock);
	i->ctime = fs_now();
	pthread_rwlock_unlock(&i->lock);
	fs_touch_dir(d);
	if (nd != d)
		fs_touch_dir(nd);
out:
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, -r);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
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
		i->mtime = i->ctime = fs_now();
	}
	if (!r)
		i->opens++;
	pthread_rwlock_unlock(&i->lock);
	if (r) {
		fuse_reply_err(req, -r);
		return;
	}
	fi->keep_cache = 1;
	fi->direct_io = open_direct(fi);
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
	struct iovec iov[MAX_IOV];
	uint8_t *scratch = fs_read_scratch(size);
	if (!scratch) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t got = 0;
	int n = dmar_file_read_iov(f, c, (uint64_t)off, size, iov, MAX_IOV, scratch, &got);
	if (n < 0)
		fuse_reply_err(req, -n);
	else
		fuse_reply_iov(req, iov, n);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	struct inode *i = INO(req, ino);
	pthread_rwlock_rdlock(&i->lock);
	fs_reply_read(req, &i->f, &FS(req)->cfg.ctx, size, off);
	pthread_rwlock_unlock(&i->lock);
}

static uint64_t mono_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec;
}

/* A written file goes on the idle list (once), so that one held open and
 * no longer written to is encoded too, not only at close or fsync. */
static void queue_idle(struct dmarfs *fs, struct inode *i)
{
	__atomic_store_n(&i->last_write, mono_seconds(), __ATOMIC_RELAXED);
	if (__atomic_load_n(&i->queued, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&fs->ns);
	if (!i->queued && fs->idle_running) {
		i->queued = true;
		i->nlookup++;
		i->idle_next = fs->idle_head;
		fs->idle_head = i;
	}
	pthread_mutex_unlock(&fs->ns);
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
static void do_write(fuse_req_t req, fuse_ino_t ino, off_t off, size_t size, struct fuse_file_info *fi,
		     int (*copy)(void *ctx, uint8_t *dst, size_t len), void *ctx)
{
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	/* O_APPEND appends at our size, not at the kernel's idea of it,
	 * like pwrite on an O_APPEND file descriptor. */
	pthread_rwlock_wrlock(&i->lock);
	uint64_t at = (fi->flags & O_APPEND) ? i->f.size : (uint64_t)off;
	int r = dmar_file_write_with(&i->f, &fs->cfg.ctx, at, size, copy, ctx);
	if (!r) {
		i->mtime = i->ctime = fs_now();
		/* Writing clears set-user-ID (the kernel does this too, but
		 * only for writes it sees before the page cache). */
		if (i->mode & (S_ISUID | S_ISGID) && !(fuse_req_ctx(req)->uid == 0))
			i->mode &= ~(mode_t)(S_ISUID | ((i->mode & S_IXGRP) ? S_ISGID : 0));
	}
	pthread_rwlock_unlock(&i->lock);
	if (r) {
		fuse_reply_err(req, -r);
		return;
	}
	queue_idle(fs, i); /* before the reply: after it, i may be forgotten */
	fuse_reply_write(req, size);
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
			 struct fuse_file_info *fi)
{
	do_write(req, ino, off, fuse_buf_size(bufv), fi, fs_copy_bufvec, bufv);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* Encode a file's RAW extents, one step at a time (file.c: each step
 * frees the RAW memory it converted, so a file nearly as big as the free
 * space still encodes).  The cutting, hashing and storing of a step run
 * under the shared lock: readers and stat go on, and what they read (RAW
 * memory) is not touched.  Only the swap takes the exclusive lock, and it
 * is the only place RAW memory is freed, so no reader can hold a pointer
 * into freed memory: a read replies before it drops the shared lock.  A
 * write in between makes the step's plan stale: it is redone up to tries
 * times in all.  An arena too full for even one chunk stops the encode
 * where it is; the file stays partly RAW, which reads the same. */
int fs_encode_with(struct inode *i, struct dmar_fsctx *c, int tries)
{
	for (int stale = 0;;) {
		struct dmar_encode_plan *plan = NULL;
		pthread_rwlock_rdlock(&i->lock);
		int r = dmar_file_encode_prepare(&i->f, c, &plan);
		pthread_rwlock_unlock(&i->lock);
		if (r < 0 || !plan)
			return r;
		pthread_rwlock_wrlock(&i->lock);
		r = dmar_file_encode_commit(&i->f, c, plan);
		pthread_rwlock_unlock(&i->lock);
		if (r == -EAGAIN && ++stale < tries)
			continue;
		if (r < 0)
			return r;
	}
}

void fs_encode_inode(struct dmarfs *fs, struct inode *i, bool retry)
{
	fs_encode_with(i, &fs->cfg.ctx, retry ? 3 : 1);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	pthread_rwlock_wrlock(&i->lock);
	if (i->opens)
		i->opens--;
	bool encode = i->opens == 0 && i->f.dirty;
	pthread_rwlock_unlock(&i->lock);
	/* Hold a reference across the encode: after the reply the kernel may
	 * forget the inode (an unlinked file), which would free it. */
	pthread_mutex_lock(&fs->ns);
	encode = encode && i->nlink > 0;
	if (encode)
		i->nlookup++;
	else
		fs_inode_maybe_free(fs, i); /* the last close of an unlinked file */
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, 0);
	/* The last close is when a file is most likely complete: encode it
	 * now, after the reply (the kernel does not wait for RELEASE, so this
	 * is off the application's path anyway). */
	if (encode) {
		fs_encode_inode(fs, i, false);
		pthread_mutex_lock(&fs->ns);
		fs_forget_one(fs, i, 1);
		pthread_mutex_unlock(&fs->ns);
	}
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)datasync;
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	/* RAM has no durability to wait for; fsync is where a file is
	 * known to be in a consistent state, so encode it. */
	if (S_ISREG(i->mode))
		fs_encode_inode(fs, i, true);
	fuse_reply_err(req, 0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
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

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
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
	/* Offsets are entry cookies: an entry added or removed during a
	 * listing neither repeats nor hides the others.  The root lists the
	 * @PEER directories last, with cookies from FS_PEER_COOKIE up. */
	if (off < 1 && !add_dirent(req, buf, size, &used, ".", d, 1))
		goto full;
	if (off < 2 && !add_dirent(req, buf, size, &used, "..", d == fs->root ? d : d->parent, 2))
		goto full;
	if ((uint64_t)off < FS_PEER_COOKIE) {
		size_t pos = dmar_dir_seek(&d->dir, off < 2 ? 2 : (uint64_t)off);
		for (struct dmar_dirent *e; (e = dmar_dir_next(&d->dir, &pos));)
			if (!add_dirent(req, buf, size, &used, e->name, ENTRY_INO(e), (off_t)e->cookie))
				goto full;
	}
	if (d == fs->root && fs->remote)
		dmarfs_remote_root_entries(fs, req, buf, size, &used, (uint64_t)off);
full:
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct dmarfs *fs = FS(req);
	struct dmar_arena *a = fs->cfg.ctx.arena;
	struct statvfs sv;
	memset(&sv, 0, sizeof(sv));
	uint64_t size = dmar_arena_size(a), used = dmar_arena_used(a);
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = size / 4096;
	sv.f_bfree = sv.f_bavail = (size - used) / 4096;
	pthread_mutex_lock(&fs->ns);
	sv.f_files = fs->cfg.nr_inodes;
	sv.f_ffree = sv.f_favail = fs->cfg.nr_inodes - fs->inodes;
	pthread_mutex_unlock(&fs->ns);
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* ---- xattrs ------------------------------------------------------------ */

/* user.dmar.* are read-only views of a file's encoding state. */
static int virtual_xattr(struct dmarfs *fs, struct inode *i, const char *name, char *out, size_t cap)
{
	if (strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)))
		return -ENODATA;
	const char *k = name + strlen(XATTR_PREFIX);
	struct dmar_file_stats st;
	dmar_file_stats(&i->f, &fs->cfg.ctx, &st);
	if (!strcmp(k, "logical"))
		return snprintf(out, cap, "%" PRIu64, st.logical);
	if (!strcmp(k, "stored"))
		return snprintf(out, cap, "%" PRIu64, st.stored);
	if (!strcmp(k, "chunks"))
		return snprintf(out, cap, "%" PRIu64, st.chunks);
	if (!strcmp(k, "raw"))
		return snprintf(out, cap, "%" PRIu64, st.raw);
	if (!strcmp(k, "state"))
		return snprintf(out, cap, "%s",
				st.raw == 0 ? (st.chunked ? "encoded" : "empty") : (st.chunked ? "partly-encoded" : "raw"));
	if (!strcmp(k, "backing"))
		return snprintf(out, cap, "%s", dmar_arena_describe(fs->cfg.ctx.arena));
	return -ENODATA;
}

static const char *const virtual_names[] = { "logical", "stored", "chunks", "raw", "state", "backing" };

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
			int flags)
{
	struct inode *i = INO(req, ino);
	if (strncmp(name, "user.", 5)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (!strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX))) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (size > 65536) {
		fuse_reply_err(req, E2BIG);
		return;
	}
	int r = 0;
	pthread_rwlock_wrlock(&i->lock);
	struct xattr *x = NULL;
	for (size_t k = 0; k < i->nxa; k++)
		if (!strcmp(i->xa[k].name, name))
			x = &i->xa[k];
	if ((flags & XATTR_CREATE) && x) {
		r = -EEXIST;
	} else if ((flags & XATTR_REPLACE) && !x) {
		r = -ENODATA;
	} else {
		void *v = malloc(size ? size : 1);
		if (!v) {
			r = -ENOMEM;
		} else {
			memcpy(v, value, size);
			if (!x) {
				struct xattr *n = realloc(i->xa, (i->nxa + 1) * sizeof(*n));
				char *nm = strdup(name);
				if (!n || !nm) {
					free(nm);
					free(v);
					if (n)
						i->xa = n;
					r = -ENOMEM;
					goto out;
				}
				i->xa = n;
				x = &i->xa[i->nxa++];
				x->name = nm;
			} else {
				free(x->value);
			}
			x->value = v;
			x->len = size;
			i->ctime = fs_now();
		}
	}
out:
	pthread_rwlock_unlock(&i->lock);
	fuse_reply_err(req, -r);
}

static void reply_xattr(fuse_req_t req, const void *v, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, v, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	pthread_rwlock_rdlock(&i->lock);
	char tmp[DMAR_ARENA_DESCRIBE_MAX + 64];
	int n = S_ISREG(i->mode) ? virtual_xattr(fs, i, name, tmp, sizeof(tmp)) : -ENODATA;
	if (n >= (int)sizeof(tmp))
		n = (int)sizeof(tmp) - 1; /* never reply past the buffer */
	if (n >= 0) {
		pthread_rwlock_unlock(&i->lock);
		reply_xattr(req, tmp, (size_t)n, size);
		return;
	}
	for (size_t k = 0; k < i->nxa; k++) {
		if (!strcmp(i->xa[k].name, name)) {
			reply_xattr(req, i->xa[k].value, i->xa[k].len, size);
			pthread_rwlock_unlock(&i->lock);
			return;
		}
	}
	pthread_rwlock_unlock(&i->lock);
	fuse_reply_err(req, ENODATA);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct inode *i = INO(req, ino);
	pthread_rwlock_rdlock(&i->lock);
	size_t len = 0;
	if (S_ISREG(i->mode))
		for (size_t k = 0; k < sizeof(virtual_names) / sizeof(virtual_names[0]); k++)
			len += strlen(XATTR_PREFIX) + strlen(virtual_names[k]) + 1;
	for (size_t k = 0; k < i->nxa; k++)
		len += strlen(i->xa[k].name) + 1;
	char *buf = malloc(len ? len : 1), *p = buf;
	if (!buf) {
		pthread_rwlock_unlock(&i->lock);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (S_ISREG(i->mode))
		for (size_t k = 0; k < sizeof(virtual_names) / sizeof(virtual_names[0]); k++)
			p += sprintf(p, "%s%s", XATTR_PREFIX, virtual_names[k]) + 1;
	for (size_t k = 0; k < i->nxa; k++)
		p += sprintf(p, "%s", i->xa[k].name) + 1;
	pthread_rwlock_unlock(&i->lock);
	reply_xattr(req, buf, len, size);
	free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct inode *i = INO(req, ino);
	if (!strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX))) {
		fuse_reply_err(req, EPERM);
		return;
	}
	pthread_rwlock_wrlock(&i->lock);
	for (size_t k = 0; k < i->nxa; k++) {
		if (!strcmp(i->xa[k].name, name)) {
			free(i->xa[k].name);
			free(i->xa[k].value);
			i->xa[k] = i->xa[--i->nxa];
			i->ctime = fs_now();
			pthread_rwlock_unlock(&i->lock);
			fuse_reply_err(req, 0);
			return;
		}
	}
	pthread_rwlock_unlock(&i->lock);
	fuse_reply_err(req, ENODATA);
}

/* ---- allocation, copy, seek ------------------------------------------ */

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	(void)fi;
	struct dmarfs *fs = FS(req);
	struct inode *i = INO(req, ino);
	pthread_rwlock_wrlock(&i->lock);
	int r = dmar_file_fallocate(&i->f, &fs->cfg.ctx, mode, off, len);
	if (!r)
		i->mtime = i->ctime = fs_now();
	pthread_rwlock_unlock(&i->lock);
	fuse_reply_err(req, -r);
}

static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			       fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len,
			       int flags)
{
	(void)fi_in;
	(void)fi_out;
	struct dmarfs *fs = FS(req);
	struct inode *a = INO(req, ino_in), *b = INO(req, ino_out);
	if (flags) {
		fuse_reply_err(req, EINVAL);
		return;
	}
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
		b->mtime = b->ctime = fs_now();
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
	(void)fi;
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

int dmarfs_new(struct dmarfs **out, const struct dmarfs_config *cfg)
{
	struct dmarfs *fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->cfg = *cfg;
	fs->next_ino = 1;
	/* The mount's content index, unless the caller brought one. */
	if (!fs->cfg.ctx.index && !(fs->cfg.ctx.index = fs->own_index = dmar_content_index_new())) {
		free(fs);
		return -ENOMEM;
	}
	pthread_mutex_init(&fs->ns, NULL);
	pthread_cond_init(&fs->idle_cond, NULL);
	fs->root = fs_inode_new(fs, S_IFDIR | (cfg->root_mode & 07777), cfg->root_uid, cfg->root_gid);
	if (!fs->root) {
		dmar_content_index_free(fs->own_index);
		free(fs);
		return -ENOMEM;
	}
	fs->root->nlink = 2;
	fs->root->nlookup = 1;
	*out = fs;
	return 0;
}

void dmarfs_set_session(struct dmarfs *fs, struct fuse_session *se)
{
	fs->se = se;
}

void dmarfs_set_node(struct dmarfs *fs, struct dmarfs_node *node)
{
	fs->node = node;
}

void dmarfs_free(struct dmarfs *fs)
{
	if (!fs)
		return;
	idle_stop(fs);
	dmarfs_remote_free(fs);
	while (fs->grave) {
		struct inode *n = fs->grave->idle_next;
		fs->inodes++;
		inode_destroy(fs, fs->grave);
		fs->grave = n;
	}
	/* The tree and the unlinked inodes the kernel still knew. */
	while (fs->all)
		inode_destroy(fs, fs->all);
	pthread_cond_destroy(&fs->idle_cond);
	pthread_mutex_destroy(&fs->ns);
	dmar_content_index_free(fs->own_index); /* every file is gone */
	free(fs);
}
