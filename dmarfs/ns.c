/* SPDX-License-Identifier: MIT */
/*
 * The namespace: one place for the rules of names (what may be created
 * where, what a removal or rename does to nlink and times), shared by the
 * FUSE operations, the REST API and the journal's replay.  Each change is
 * split in two: the live operation checks, then applies (ns_apply_*, also
 * what replay runs) and records (persist.h), undoing the change if it
 * cannot be recorded.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "check.h"
#include "ns.h"
#include "persist.h"

struct timespec ns_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return t;
}

/* ---- inodes ------------------------------------------------------------ */

struct inode *ns_inode_new(struct dmarfs *fs, uint64_t ino, mode_t mode, uid_t uid, gid_t gid)
{
	if (fs->inodes >= fs->cfg.nr_inodes)
		return NULL;
	struct inode *i = calloc(1, sizeof(*i));
	if (!i)
		return NULL;
	pthread_rwlock_init(&i->lock, NULL);
	pthread_mutex_init(&i->encode_mu, NULL);
	i->kind = INODE_LOCAL;
	i->st_ino = ino ? ino : fs->next_ino;
	if (i->st_ino >= fs->next_ino)
		fs->next_ino = i->st_ino + 1;
	i->mode = mode;
	i->uid = uid;
	i->gid = gid;
	i->atime = i->mtime = i->ctime = ns_now();
	dmar_dir_init(&i->dir, 3); /* cookies 1 and 2 are "." and ".." */
	dmar_file_init(&i->f);
	fs->inodes++;
	i->all_next = fs->all;
	if (fs->all)
		fs->all->all_prev = i;
	fs->all = i;
	return i;
}

/* Take i off fs->all (it goes to the grave). */
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

/* Inodes kept after their last reference (ns_inode_maybe_free), newest
 * first; the oldest half is freed when there are more than this. */
#define GRAVE_MAX 4096

/* A file's contents go when it is gone from the namespace and from the
 * journal (its removal is recorded before this runs). */
static void drop_contents(struct dmarfs *fs, struct inode *i)
{
	if (fs->replaying)
		dmar_file_forget(&i->f);
	else
		dmar_file_destroy(&i->f, &fs->cfg.ctx);
}

static void inode_destroy(struct dmarfs *fs, struct inode *i)
{
	if (fs->all == i || i->all_prev) /* not yet in the grave */
		all_unlink(fs, i);
	drop_contents(fs, i);
	for (size_t k = 0; k < i->nxa; k++) {
		free(i->xa[k].name);
		free(i->xa[k].value);
	}
	free(i->xa);
	dmar_dir_clear(&i->dir);
	free(i->target);
	pthread_rwlock_destroy(&i->lock);
	pthread_mutex_destroy(&i->encode_mu);
	free(i);
	fs->inodes--;
}

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

void ns_inode_maybe_free(struct dmarfs *fs, struct inode *i)
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
			if (i->opens == 0 && (i->f.n || i->f.dur))
				drop_contents(fs, i);
			pthread_rwlock_unlock(&i->lock);
		}
		return;
	}
	/* Free the contents (arena memory) now, but keep the small struct a
	 * while: under the sanitizer build a READLINK was seen still running
	 * on an inode whose FORGET had just arrived on another thread, and a
	 * late reader must find valid memory (it sees an empty file or the
	 * old symlink target), not freed memory.  See the note on issue 3. */
	drop_contents(fs, i);
	fs->inodes--;
	all_unlink(fs, i);
	i->idle_next = fs->grave;
	fs->grave = i;
	if (++fs->ngrave > GRAVE_MAX)
		bury_half(fs);
}

void ns_forget_locked(struct dmarfs *fs, struct inode *i, uint64_t n)
{
	/* More than counted: some path dropped a reference it never took,
	 * and an inode the kernel still knows could be freed under it. */
	if (n > i->nlookup && !fs->forget_warned) {
		fs->forget_warned = true;
		fprintf(stderr, "dmarfs: bug: %" PRIu64 " lookups forgotten on an inode that had %" PRIu64 "\n", n,
			i->nlookup);
	}
	i->nlookup = i->nlookup > n ? i->nlookup - n : 0;
	ns_inode_maybe_free(fs, i);
}

void ns_forget(struct dmarfs *fs, struct inode *i, uint64_t n)
{
	pthread_mutex_lock(&fs->ns);
	ns_forget_locked(fs, i, n);
	pthread_mutex_unlock(&fs->ns);
}

nlink_t ns_nlink(struct dmarfs *fs, struct inode *i)
{
	pthread_mutex_lock(&fs->ns);
	nlink_t n = i->nlink;
	pthread_mutex_unlock(&fs->ns);
	return n;
}

/* The arena's reclaimer: every owner's shed, in the order they came (the
 * node's abandoned uploads before the copies of peers' files). */
static size_t ns_reclaim(void *ctx)
{
	struct dmarfs *fs = ctx;
	size_t gone = 0;
	for (int o = 0; o < fs->nowners; o++)
		if (fs->owners[o].shed)
			gone += fs->owners[o].shed(fs->owners[o].ctx);
	return gone;
}

int dmarfs_new(struct dmarfs **out, const struct dmarfs_config *cfg)
{
	struct dmarfs *fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->cfg = *cfg;
	fs->next_ino = NS_ROOT_INO;
	/* The mount's content index, unless the caller brought one. */
	if (!fs->cfg.ctx.index && !(fs->cfg.ctx.index = fs->own_index = dmar_content_index_new())) {
		free(fs);
		return -ENOMEM;
	}
	pthread_rwlockattr_t ra;
	pthread_rwlockattr_init(&ra);
	/* A checkpoint must not wait behind an endless run of syncs. */
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fs->ckpt, &ra);
	/* and the check must not wait behind a stream of encode steps */
	pthread_rwlock_init(&fs->busy, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&fs->ns, NULL);
	pthread_mutex_init(&fs->rec_mu, NULL);
	pthread_cond_init(&fs->idle_cond, NULL);
	fs->root = ns_inode_new(fs, NS_ROOT_INO, S_IFDIR | (cfg->root_mode & 07777), cfg->root_uid, cfg->root_gid);
	if (!fs->root) {
		dmar_content_index_free(fs->own_index);
		free(fs);
		return -ENOMEM;
	}
	fs->root->nlink = 2;
	fs->root->nlookup = 1;
	dmar_arena_set_reclaim(cfg->ctx.arena, ns_reclaim, fs);
	*out = fs;
	return 0;
}

void ns_add_owner(struct dmarfs *fs, void (*refs)(void *ctx, const struct dmar_file_refs *r),
		  void (*tick)(void *ctx), size_t (*shed)(void *ctx), void *ctx)
{
	if (fs->nowners == (int)(sizeof(fs->owners) / sizeof(fs->owners[0])))
		abort(); /* a build with more owners than slots */
	fs->owners[fs->nowners].refs = refs;
	fs->owners[fs->nowners].tick = tick;
	fs->owners[fs->nowners].shed = shed;
	fs->owners[fs->nowners++].ctx = ctx;
}

void ns_tick(struct dmarfs *fs)
{
	pthread_rwlock_rdlock(&fs->busy); /* what expires must not go mid-check */
	for (int o = 0; o < fs->nowners; o++)
		if (fs->owners[o].tick)
			fs->owners[o].tick(fs->owners[o].ctx);
	pthread_rwlock_unlock(&fs->busy);
}

uint64_t ns_env_knob(const char *env, uint64_t dflt, uint64_t *once)
{
	uint64_t v = __atomic_load_n(once, __ATOMIC_RELAXED);
	if (!v) {
		const char *e = getenv(env);
		char *end = NULL;
		unsigned long long x = e && *e ? strtoull(e, &end, 10) : 0;
		v = x && end && !*end ? (uint64_t)x : dflt;
		__atomic_store_n(once, v, __ATOMIC_RELAXED);
	}
	return v;
}

void dmarfs_free(struct dmarfs *fs)
{
	if (!fs)
		return;
	while (fs->grave) {
		struct inode *n = fs->grave->idle_next;
		fs->inodes++;
		inode_destroy(fs, fs->grave);
		fs->grave = n;
	}
	dmar_arena_set_reclaim(fs->cfg.ctx.arena, NULL, NULL);
	/* The tree and the unlinked inodes the kernel still knew. */
	while (fs->all)
		inode_destroy(fs, fs->all);
	pthread_cond_destroy(&fs->idle_cond);
	pthread_mutex_destroy(&fs->ns);
	pthread_mutex_destroy(&fs->rec_mu);
	free(fs->rec_spare);
	pthread_rwlock_destroy(&fs->ckpt);
	pthread_rwlock_destroy(&fs->busy);
	dmar_content_index_free(fs->own_index); /* every file is gone */
	free(fs);
}

/* ---- reading ---------------------------------------------------------- */

off_t ns_inode_size(const struct inode *i)
{
	if (S_ISREG(i->mode))
		return (off_t)i->f.size;
	if (S_ISLNK(i->mode))
		return (off_t)strlen(i->target);
	if (S_ISDIR(i->mode))
		return (off_t)(dmar_dir_count(&i->dir) + 2) * 32;
	return 0;
}

void ns_fill_stat(const struct inode *i, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = i->st_ino;
	st->st_mode = i->mode;
	st->st_nlink = i->nlink;
	st->st_uid = i->uid;
	st->st_gid = i->gid;
	st->st_rdev = i->rdev;
	st->st_blksize = 4096;
	st->st_size = ns_inode_size(i);
	if (S_ISREG(i->mode)) {
		struct dmar_file_stats fst;
		dmar_file_stats(&i->f, NULL, &fst);
		st->st_blocks = (blkcnt_t)((fst.raw + fst.chunked + 511) / 512);
	}
	st->st_atim = i->atime;
	st->st_mtim = i->mtime;
	st->st_ctim = i->ctime;
}

/* ---- the tree changes (ns held) --------------------------------------- */

static void touch_dir(struct inode *d, struct timespec t)
{
	pthread_rwlock_wrlock(&d->lock);
	d->mtime = d->ctime = t;
	pthread_rwlock_unlock(&d->lock);
}

static void set_ctime(struct inode *i, struct timespec t)
{
	pthread_rwlock_wrlock(&i->lock);
	i->ctime = t;
	pthread_rwlock_unlock(&i->lock);
}

int ns_apply_link(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, struct timespec t,
		  bool touch)
{
	(void)fs;
	int r = dmar_dir_add(&d->dir, name, i);
	if (r < 0)
		return r;
	if (S_ISDIR(i->mode)) {
		i->nlink = 2;
		i->parent = d;
		d->nlink++;
	} else {
		if (!i->nlink)
			i->parent = d;
		i->nlink++;
	}
	if (touch) {
		if (i->nlink > 1 && !S_ISDIR(i->mode))
			set_ctime(i, t);
		touch_dir(d, t);
	}
	return 0;
}

void ns_apply_remove(struct dmarfs *fs, struct inode *d, struct dmar_dirent *e, struct timespec t)
{
	struct inode *i = ENTRY_INO(e);
	dmar_dir_remove(&d->dir, e);
	if (S_ISDIR(i->mode)) {
		i->nlink = 0;
		d->nlink--;
	} else {
		i->nlink--;
	}
	set_ctime(i, t);
	touch_dir(d, t);
	ns_inode_maybe_free(fs, i);
}

/* Is a an ancestor of (or equal to) b? */
static bool is_ancestor(struct dmarfs *fs, struct inode *a, struct inode *b)
{
	for (struct inode *x = b; x; x = x == fs->root ? NULL : x->parent)
		if (x == a)
			return true;
	return false;
}

/* The checks of rename(2), before anything changes. */
static int rename_check(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
			unsigned flags, bool *noop)
{
	*noop = false;
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
	    ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)))
		return -EINVAL;
	if (!S_ISDIR(d->mode) || !S_ISDIR(nd->mode))
		return -ENOTDIR;
	struct dmar_dirent *e = dmar_dir_find(&d->dir, name), *t = dmar_dir_find(&nd->dir, newname);
	if (!e)
		return -ENOENT;
	struct inode *i = ENTRY_INO(e);
	if (t && ENTRY_INO(t) == i) {
		*noop = true; /* same inode: nothing to do (POSIX) */
		return 0;
	}
	if ((flags & RENAME_NOREPLACE) && t)
		return -EEXIST;
	if (flags & RENAME_EXCHANGE) {
		if (!t)
			return -ENOENT;
		struct inode *j = ENTRY_INO(t);
		if ((S_ISDIR(i->mode) && is_ancestor(fs, i, nd)) || (S_ISDIR(j->mode) && is_ancestor(fs, j, d)))
			return -EINVAL;
		return 0;
	}
	if (S_ISDIR(i->mode) && is_ancestor(fs, i, nd))
		return -EINVAL;
	if (t) {
		struct inode *j = ENTRY_INO(t);
		if (S_ISDIR(i->mode) && !S_ISDIR(j->mode))
			return -ENOTDIR;
		if (!S_ISDIR(i->mode) && S_ISDIR(j->mode))
			return -EISDIR;
		if (S_ISDIR(j->mode) && dmar_dir_count(&j->dir))
			return -ENOTEMPTY;
	} else if (strlen(newname) > NAME_MAX) {
		return -ENAMETOOLONG;
	}
	return 0;
}

int ns_apply_rename(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
		    unsigned flags, struct timespec t)
{
	struct dmar_dirent *e = dmar_dir_find(&d->dir, name), *tg = dmar_dir_find(&nd->dir, newname);
	struct inode *i = ENTRY_INO(e);
	if (flags & RENAME_EXCHANGE) {
		struct inode *j = ENTRY_INO(tg);
		e->ino = j;
		tg->ino = i;
		if (S_ISDIR(i->mode) != S_ISDIR(j->mode) && d != nd) {
			int dn = S_ISDIR(i->mode) ? 1 : -1;
			d->nlink -= dn;
			nd->nlink += dn;
		}
		i->parent = nd;
		j->parent = d;
		goto touch;
	}
	if (tg) {
		struct inode *j = ENTRY_INO(tg);
		/* Replace atomically: the name points at i at once. */
		tg->ino = i;
		if (S_ISDIR(j->mode)) {
			j->nlink = 0;
			nd->nlink--;
		} else {
			j->nlink--;
		}
		set_ctime(j, t);
		ns_inode_maybe_free(fs, j);
		dmar_dir_remove(&d->dir, dmar_dir_find(&d->dir, name));
	} else {
		int r = dmar_dir_add(&nd->dir, newname, i);
		if (r < 0)
			return r;
		dmar_dir_remove(&d->dir, dmar_dir_find(&d->dir, name));
	}
	if (S_ISDIR(i->mode) && d != nd) {
		d->nlink--;
		nd->nlink++;
	}
	i->parent = nd;
touch:
	set_ctime(i, t);
	touch_dir(d, t);
	if (nd != d)
		touch_dir(nd, t);
	return 0;
}

/* ---- live operations ------------------------------------------------- */

/* Names a new entry may not take: "@..." at the root, where a mount shows
 * its peers (docs/mount.md, "Names"); the API refuses the same
 * (dmar_wire_name_check). */
static bool reserved(const struct dmarfs *fs, const struct inode *d, const char *name)
{
	return d == fs->root && name[0] == '@';
}

int ns_lookup(struct dmarfs *fs, struct inode *d, const char *name, struct inode **out)
{
	pthread_mutex_lock(&fs->ns);
	struct dmar_dirent *e = S_ISDIR(d->mode) ? dmar_dir_find(&d->dir, name) : NULL;
	int r = !S_ISDIR(d->mode) ? -ENOTDIR : strlen(name) > NAME_MAX ? -ENAMETOOLONG : -ENOENT;
	if (e) {
		*out = ENTRY_INO(e);
		(*out)->nlookup++;
		r = 0;
	}
	pthread_mutex_unlock(&fs->ns);
	return r;
}

/* The record of a change failed: the change must not stand.  ENOSPC is
 * what the caller says; the first failure is logged once. */
static int unrecorded(struct dmarfs *fs, int r, const char *what)
{
	if (!fs->record_err) {
		fs->record_err = r;
		fprintf(stderr, "dmarfs: cannot record a %s in the journal: %s (refused until there is room)\n", what,
			strerror(-r));
	}
	return r == -ENOMEM ? r : -ENOSPC;
}

/* Drop a new inode that never got a name (ns held). */
static void discard_new(struct dmarfs *fs, struct inode *i)
{
	i->nlink = 0;
	i->nlookup = 0;
	inode_destroy(fs, i);
}

/* A new inode to be named in d, made by uid/gid at t: a set-group-ID
 * directory passes on its group (and the bit, to a directory).  NULL:
 * no inode left.  ns held. */
static struct inode *child_new(struct dmarfs *fs, struct inode *d, mode_t mode, uid_t uid, gid_t gid,
			       struct timespec t)
{
	pthread_rwlock_rdlock(&d->lock);
	if (d->mode & S_ISGID) {
		gid = d->gid;
		if (S_ISDIR(mode))
			mode |= S_ISGID;
	}
	pthread_rwlock_unlock(&d->lock);
	struct inode *i = ns_inode_new(fs, 0, mode, uid, gid);
	if (i)
		i->atime = i->mtime = i->ctime = t;
	return i;
}

int ns_make(struct dmarfs *fs, struct inode *d, const char *name, mode_t mode, dev_t rdev, const char *target,
	    uid_t uid, gid_t gid, struct inode **out)
{
	int r = 0;
	struct timespec t = ns_now();
	pthread_mutex_lock(&fs->ns);
	if (!S_ISDIR(d->mode)) {
		r = -ENOTDIR;
	} else if (d->nlink == 0) {
		r = -ENOENT; /* removed directory */
	} else if (dmar_dir_find(&d->dir, name)) {
		r = -EEXIST;
	} else if (strlen(name) > NAME_MAX) {
		r = -ENAMETOOLONG;
	} else if (reserved(fs, d, name)) {
		r = -EINVAL;
	} else {
		struct inode *i = child_new(fs, d, mode, uid, gid, t);
		if (!i) {
			r = -ENOSPC;
		} else {
			i->rdev = rdev;
			if (target && !(i->target = strdup(target)))
				r = -ENOMEM;
			if (!r)
				r = ns_apply_link(fs, d, name, i, t, true);
			if (!r && (r = persist_make(fs, d, name, i, t)) < 0) {
				dmar_dir_remove(&d->dir, dmar_dir_find(&d->dir, name));
				if (S_ISDIR(mode))
					d->nlink--;
				r = unrecorded(fs, r, "new name");
			}
			if (r) {
				discard_new(fs, i);
			} else {
				i->nlookup++;
				*out = i;
			}
		}
	}
	pthread_mutex_unlock(&fs->ns);
	return r;
}

int ns_link(struct dmarfs *fs, struct inode *i, struct inode *d, const char *name, struct inode **out)
{
	int r = 0;
	struct timespec t = ns_now();
	pthread_mutex_lock(&fs->ns);
	if (S_ISDIR(i->mode))
		r = -EPERM;
	else if (i->nlink == 0)
		r = -ENOENT;
	else if (!S_ISDIR(d->mode))
		r = -ENOTDIR;
	else if (d->nlink == 0)
		r = -ENOENT;
	else if (dmar_dir_find(&d->dir, name))
		r = -EEXIST;
	else if (strlen(name) > NAME_MAX)
		r = -ENAMETOOLONG;
	else if (reserved(fs, d, name))
		r = -EINVAL;
	else if ((r = ns_apply_link(fs, d, name, i, t, true)) == 0) {
		if ((r = persist_link(fs, d, name, i, t)) < 0) {
			dmar_dir_remove(&d->dir, dmar_dir_find(&d->dir, name));
			i->nlink--;
			r = unrecorded(fs, r, "link");
		} else {
			i->nlookup++;
			*out = i;
		}
	}
	pthread_mutex_unlock(&fs->ns);
	return r;
}

int ns_remove(struct dmarfs *fs, struct inode *d, const char *name, enum ns_kind kind)
{
	int r = 0;
	struct timespec t = ns_now();
	pthread_mutex_lock(&fs->ns);
	struct dmar_dirent *e = S_ISDIR(d->mode) ? dmar_dir_find(&d->dir, name) : NULL;
	struct inode *i = e ? ENTRY_INO(e) : NULL;
	if (!S_ISDIR(d->mode))
		r = -ENOTDIR;
	else if (!e)
		r = -ENOENT;
	else if (kind == NS_DIR && !S_ISDIR(i->mode))
		r = -ENOTDIR;
	else if (kind == NS_FILE && S_ISDIR(i->mode))
		r = -EISDIR;
	else if (S_ISDIR(i->mode) && dmar_dir_count(&i->dir))
		r = -ENOTEMPTY;
	else {
		/* Recorded first: a removal frees space, so its record may
		 * use the journal's spare; if even that fails the name goes
		 * anyway (the space is what the arena is short of), and a
		 * crash would bring the file back. */
		int pr = persist_remove(fs, d, name, t);
		if (pr < 0)
			(void)unrecorded(fs, pr, "removal");
		ns_apply_remove(fs, d, e, t);
	}
	pthread_mutex_unlock(&fs->ns);
	return r;
}

int ns_rename(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
	      unsigned flags, uid_t uid, gid_t gid)
{
	bool noop;
	struct timespec t = ns_now();
	unsigned wo = flags & RENAME_WHITEOUT;
	flags &= ~(unsigned)RENAME_WHITEOUT;
	if (wo && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	struct inode *w = NULL;
	pthread_mutex_lock(&fs->ns);
	int r = rename_check(fs, d, name, nd, newname, flags, &noop);
	if (!r && !noop && reserved(fs, nd, newname))
		r = -EINVAL;
	if (!r && !noop && wo) {
		/* The whiteout overlayfs wants: what name shows once the file
		 * has left, recorded with the rename (a crash keeps both or
		 * neither). */
		if ((w = child_new(fs, d, S_IFCHR, uid, gid, t)) == NULL)
			r = -ENOSPC;
	}
	if (!r && !noop && (r = persist_rename(fs, d, name, nd, newname, flags, w, t)) < 0)
		r = unrecorded(fs, r, "rename");
	if (!r && !noop)
		r = ns_apply_rename(fs, d, name, nd, newname, flags, t);
	/* The name was just freed: only a failed allocation stops it, and
	 * the whiteout then comes back at the next attach, from the record. */
	if (!r && w && (r = ns_apply_link(fs, d, name, w, t, true)) < 0)
		fprintf(stderr, "dmarfs: rename: whiteout not made: %s\n", strerror(-r));
	if (w && r < 0)
		discard_new(fs, w);
	pthread_mutex_unlock(&fs->ns);
	return r;
}

static struct xattr *xattr_find(struct inode *i, const char *name);

/* The set-ID bits a write, truncate or chown leaves of mode. */
static mode_t killed_mode(mode_t mode)
{
	return mode & ~(mode_t)(S_ISUID | ((mode & S_IXGRP) ? S_ISGID : 0));
}

void ns_kill_priv(struct dmarfs *fs, struct inode *i, bool by_root, bool chown)
{
	pthread_rwlock_rdlock(&i->lock);
	bool reg = S_ISREG(i->mode);
	bool bits = reg && (!by_root || chown) && killed_mode(i->mode) != i->mode;
	bool cap = reg && i->nxa && xattr_find(i, "security.capability");
	pthread_rwlock_unlock(&i->lock);
	if (bits) {
		pthread_rwlock_rdlock(&fs->ckpt);
		pthread_rwlock_wrlock(&i->lock);
		mode_t old = i->mode;
		i->mode = killed_mode(i->mode);
		if (i->mode != old && persist_attr(fs, i) < 0)
			i->mode = old; /* no room to record it: as it was */
		pthread_rwlock_unlock(&i->lock);
		pthread_rwlock_unlock(&fs->ckpt);
	}
	if (cap)
		(void)ns_removexattr(fs, i, "security.capability");
}

int ns_setattr(struct dmarfs *fs, struct inode *i, const struct ns_attr *a, struct stat *st)
{
	int r = 0;
	pthread_rwlock_rdlock(&fs->ckpt);
	pthread_rwlock_wrlock(&i->lock);
	struct timespec t = ns_now();
	/* The attributes as they were, for a change that cannot be recorded. */
	mode_t mode = i->mode;
	uid_t uid = i->uid;
	gid_t gid = i->gid;
	struct timespec at = i->atime, mt = i->mtime, ct = i->ctime;
	bool sized = false;
	if (a->set & NS_SET_SIZE) {
		if (!S_ISREG(i->mode))
			r = S_ISDIR(i->mode) ? -EISDIR : -EINVAL;
		else if ((r = dmar_file_truncate(&i->f, &fs->cfg.ctx, a->size)) == 0) {
			i->mtime = t;
			sized = true;
		}
	}
	if (!r && (a->set & NS_SET_MODE))
		i->mode = (i->mode & S_IFMT) | (a->mode & 07777);
	if (!r && (a->set & NS_SET_UID))
		i->uid = a->uid;
	if (!r && (a->set & NS_SET_GID))
		i->gid = a->gid;
	if (!r && (a->set & NS_SET_ATIME))
		i->atime = (a->set & NS_SET_ATIME_NOW) ? t : a->atime;
	if (!r && (a->set & NS_SET_MTIME))
		i->mtime = (a->set & NS_SET_MTIME_NOW) ? t : a->mtime;
	if (!r)
		i->ctime = (a->set & NS_SET_CTIME) ? a->ctime : t;
	/* A size change is the contents': with no open file descriptor
	 * there is no close to record it at, so it is recorded now (with
	 * the attributes); otherwise the attributes alone. */
	if (!r) {
		int pr = sized && i->opens == 0 ? persist_sync_locked(fs, i) : persist_attr(fs, i);
		if (pr < 0 && !sized) {
			i->mode = mode;
			i->uid = uid;
			i->gid = gid;
			i->atime = at;
			i->mtime = mt;
			i->ctime = ct;
			r = -ENOSPC;
		}
	}
	pthread_rwlock_unlock(&i->lock);
	pthread_rwlock_unlock(&fs->ckpt);
	bool chown = a->set & (NS_SET_UID | NS_SET_GID);
	if (!r && !(a->set & NS_SET_MODE) && (chown || sized))
		ns_kill_priv(fs, i, a->set & NS_SET_BY_ROOT, chown);
	if (st) {
		pthread_rwlock_rdlock(&i->lock);
		ns_fill_stat(i, st);
		pthread_rwlock_unlock(&i->lock);
		st->st_nlink = ns_nlink(fs, i);
	}
	return r;
}

/* ---- extended attributes ----------------------------------------------- */

/* user.dmar.* are read-only views of a file's encoding state. */
static int virtual_xattr(struct dmarfs *fs, struct inode *i, const char *name, char *out, size_t cap)
{
	if (strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)))
		return -ENODATA;
	const char *k = name + strlen(XATTR_PREFIX);
	if (!S_ISREG(i->mode))
		return -ENODATA;
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

static struct xattr *xattr_find(struct inode *i, const char *name)
{
	for (size_t k = 0; k < i->nxa; k++)
		if (!strcmp(i->xa[k].name, name))
			return &i->xa[k];
	return NULL;
}

int ns_xattr_set_locked(struct inode *i, const char *name, const void *value, size_t size)
{
	struct xattr *x = xattr_find(i, name);
	void *v = malloc(size ? size : 1);
	if (!v)
		return -ENOMEM;
	memcpy(v, value, size);
	if (!x) {
		struct xattr *n = realloc(i->xa, (i->nxa + 1) * sizeof(*n));
		char *nm = strdup(name);
		if (n)
			i->xa = n;
		if (!n || !nm) {
			free(nm);
			free(v);
			return -ENOMEM;
		}
		x = &i->xa[i->nxa++];
		x->name = nm;
	} else {
		free(x->value);
	}
	x->value = v;
	x->len = size;
	return 0;
}

int ns_xattr_remove_locked(struct inode *i, const char *name)
{
	struct xattr *x = xattr_find(i, name);
	if (!x)
		return -ENODATA;
	free(x->name);
	free(x->value);
	*x = i->xa[--i->nxa];
	return 0;
}

int ns_setxattr(struct dmarfs *fs, struct inode *i, const char *name, const void *value, size_t size, int flags)
{
	if (strncmp(name, "user.", 5))
		return -EOPNOTSUPP;
	if (!strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)))
		return -EPERM;
	if (size > 65536)
		return -E2BIG;
	int r;
	pthread_rwlock_rdlock(&fs->ckpt);
	pthread_rwlock_wrlock(&i->lock);
	struct xattr *x = xattr_find(i, name);
	if ((flags & XATTR_CREATE) && x) {
		r = -EEXIST;
	} else if ((flags & XATTR_REPLACE) && !x) {
		r = -ENODATA;
	} else {
		/* The old value, for a change that cannot be recorded. */
		void *old = x ? x->value : NULL;
		size_t oldlen = x ? x->len : 0;
		if (x && !(x->value = malloc(oldlen ? oldlen : 1))) {
			x->value = old;
			r = -ENOMEM;
		} else {
			if (x)
				memcpy(x->value, old, oldlen);
			struct timespec ct = i->ctime;
			r = ns_xattr_set_locked(i, name, value, size);
			if (!r) {
				i->ctime = ns_now();
				if ((r = persist_xattr(fs, i, name, value, size, false)) < 0) {
					i->ctime = ct;
					if (old) {
						(void)ns_xattr_set_locked(i, name, old, oldlen);
					} else {
						(void)ns_xattr_remove_locked(i, name);
					}
					r = -ENOSPC;
				}
			}
			free(old);
		}
	}
	pthread_rwlock_unlock(&i->lock);
	pthread_rwlock_unlock(&fs->ckpt);
	return r;
}

int ns_removexattr(struct dmarfs *fs, struct inode *i, const char *name)
{
	if (!strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)))
		return -EPERM;
	pthread_rwlock_rdlock(&fs->ckpt);
	pthread_rwlock_wrlock(&i->lock);
	int r = xattr_find(i, name) ? 0 : -ENODATA;
	/* A removal frees memory: recorded with the spare if need be. */
	if (!r && (r = persist_xattr(fs, i, name, NULL, 0, true)) == 0) {
		(void)ns_xattr_remove_locked(i, name);
		i->ctime = ns_now();
	} else if (r != -ENODATA) {
		r = -ENOSPC;
	}
	pthread_rwlock_unlock(&i->lock);
	pthread_rwlock_unlock(&fs->ckpt);
	return r;
}

ssize_t ns_xattr_value(const void *v, size_t len, void *buf, size_t cap)
{
	if (cap == 0)
		return (ssize_t)len;
	if (len > cap)
		return -ERANGE;
	memcpy(buf, v, len);
	return (ssize_t)len;
}

ssize_t ns_getxattr(struct dmarfs *fs, struct inode *i, const char *name, void *buf, size_t cap)
{
	char tmp[DMAR_ARENA_DESCRIBE_MAX + 64];
	if (i == fs->root && !strcmp(name, XATTR_PREFIX "check")) {
		/* The mount's consistency check (persist.h), on demand. */
		char *rep = NULL;
		(void)dmarfs_check(fs, &rep);
		if (!rep)
			return -ENOMEM;
		ssize_t n = ns_xattr_value(rep, strlen(rep), buf, cap);
		free(rep);
		return n;
	}
	if (!strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)))
		ns_settle(fs, i);
	pthread_rwlock_rdlock(&i->lock);
	int n = virtual_xattr(fs, i, name, tmp, sizeof(tmp));
	if (n >= (int)sizeof(tmp))
		n = (int)sizeof(tmp) - 1; /* never reply past the buffer */
	ssize_t r;
	if (n >= 0) {
		r = ns_xattr_value(tmp, (size_t)n, buf, cap);
	} else {
		struct xattr *x = xattr_find(i, name);
		r = x ? ns_xattr_value(x->value, x->len, buf, cap) : -ENODATA;
	}
	pthread_rwlock_unlock(&i->lock);
	return r;
}

ssize_t ns_listxattr(struct dmarfs *fs, struct inode *i, char *buf, size_t cap)
{
	(void)fs;
	pthread_rwlock_rdlock(&i->lock);
	size_t len = 0;
	size_t nv = S_ISREG(i->mode) ? sizeof(virtual_names) / sizeof(virtual_names[0]) : 0;
	for (size_t k = 0; k < nv; k++)
		len += strlen(XATTR_PREFIX) + strlen(virtual_names[k]) + 1;
	for (size_t k = 0; k < i->nxa; k++)
		len += strlen(i->xa[k].name) + 1;
	ssize_t r = (ssize_t)len;
	if (cap && len > cap) {
		r = -ERANGE;
	} else if (cap) {
		char *p = buf;
		for (size_t k = 0; k < nv; k++)
			p += sprintf(p, "%s%s", XATTR_PREFIX, virtual_names[k]) + 1;
		for (size_t k = 0; k < i->nxa; k++)
			p += sprintf(p, "%s", i->xa[k].name) + 1;
	}
	pthread_rwlock_unlock(&i->lock);
	return r;
}

/* ---- paths ----------------------------------------------------------- */

/* Walk path from the root (ns held); with leaf, stop at the parent. */
static int walk(struct dmarfs *fs, const char *path, struct inode **out, char *leaf)
{
	struct inode *d = fs->root;
	const char *p = path;
	if (leaf)
		leaf[0] = 0;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		char name[256];
		if (len > NAME_MAX)
			return -ENAMETOOLONG;
		memcpy(name, p, len);
		name[len] = 0;
		p += len;
		while (*p == '/')
			p++;
		if (leaf && !*p) {
			memcpy(leaf, name, len + 1);
			break;
		}
		if (!S_ISDIR(d->mode))
			return -ENOTDIR;
		struct dmar_dirent *e = dmar_dir_find(&d->dir, name);
		if (!e)
			return -ENOENT;
		d = ENTRY_INO(e);
	}
	if (leaf && !S_ISDIR(d->mode))
		return -ENOTDIR;
	*out = d;
	return 0;
}

int ns_walk_parent(struct dmarfs *fs, const char *path, struct inode **d, char *leaf)
{
	pthread_mutex_lock(&fs->ns);
	int r = walk(fs, path, d, leaf);
	if (!r)
		(*d)->nlookup++;
	pthread_mutex_unlock(&fs->ns);
	return r;
}

int ns_walk(struct dmarfs *fs, const char *path, struct inode **out)
{
	pthread_mutex_lock(&fs->ns);
	int r = walk(fs, path, out, NULL);
	if (!r)
		(*out)->nlookup++;
	pthread_mutex_unlock(&fs->ns);
	return r;
}

int ns_commit_file(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, bool noreplace)
{
	int r = 0;
	struct timespec t = ns_now();
	pthread_mutex_lock(&fs->ns);
	struct dmar_dirent *e = dmar_dir_find(&d->dir, name);
	if (d->nlink == 0)
		r = -ENOENT; /* the parent went while the file was built */
	else if (e && S_ISDIR(ENTRY_INO(e)->mode))
		r = -EISDIR;
	else if (e && noreplace)
		r = -EEXIST;
	else if (!e && strlen(name) > NAME_MAX)
		r = -ENAMETOOLONG;
	else if (reserved(fs, d, name))
		r = -EINVAL;
	else if ((r = persist_commit(fs, d, name, i, e != NULL, t)) < 0)
		r = unrecorded(fs, r, "new file");
	if (!r) {
		if (e) {
			/* One step: readers see the old file or the new one. */
			struct inode *old = ENTRY_INO(e);
			e->ino = i;
			old->nlink--;
			set_ctime(old, t);
			ns_inode_maybe_free(fs, old);
			i->nlink = 1;
			i->parent = d;
			touch_dir(d, t);
		} else {
			r = ns_apply_link(fs, d, name, i, t, true);
		}
	}
	pthread_mutex_unlock(&fs->ns);
	return r;
}

/* ---- encoding ---------------------------------------------------------- */

int ns_content_id(struct inode *i, struct dmar_fsctx *c, struct dmar_recipe *rc, struct dmar_id *cid)
{
	struct dmar_recipe own;
	struct dmar_recipe *out = rc ? rc : &own;
	pthread_rwlock_rdlock(&i->lock);
	uint64_t gen = i->f.gen;
	bool known = dmar_file_content_known(&i->f, cid, NULL);
	int r = known && !rc ? 0 : dmar_file_recipe(&i->f, out);
	pthread_rwlock_unlock(&i->lock);
	if (r < 0 || known)
		return r;
	if ((r = dmar_recipe_ids(out, NULL, cid)) == 0) {
		pthread_rwlock_wrlock(&i->lock);
		if (i->f.gen == gen)
			(void)dmar_file_publish(&i->f, c, cid, false);
		pthread_rwlock_unlock(&i->lock);
	}
	if (!rc || r < 0)
		dmar_recipe_free(out);
	return r;
}

/*
 * A big file encoded whole gets its content id now (file.h, "Content
 * ids"): a ship of it, or of a copy, then does not hash its recipe on the
 * transfer's path (1.2 ms of a 1 GiB near-duplicate's 20), and a peer's
 * commit of the same content clones it.  It costs the encode a recipe
 * and its hash, about 0.1 % of the encode.  So does a file a peer's
 * recipe delta made (node.c queues it here): the next delta names it as
 * its base.
 */
#define NAME_CONTENT_MIN (4u << 20)
static void name_content(struct inode *i, struct dmar_fsctx *c)
{
	pthread_rwlock_rdlock(&i->lock);
	bool big = i->f.size >= NAME_CONTENT_MIN;
	pthread_rwlock_unlock(&i->lock);
	struct dmar_id cid;
	if (big)
		(void)ns_content_id(i, c, NULL, &cid); /* an optimisation: may fail */
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
 * where it is; the file stays partly RAW, which reads the same.  Each
 * step of a file the journal holds is synced at once: the RAW memory it
 * frees is pending until then (file.h), and must be free for the next
 * step. */
int ns_encode(struct dmarfs *fs, struct inode *i, struct dmar_fsctx *c, int tries)
{
	/* Encoders of one file take turns: two would cut and hash the same
	 * bytes, and the one that commits second would find its plan stale
	 * and, out of tries, give up on the rest of the file.  The second
	 * finds the first's work done. */
	pthread_mutex_lock(&i->encode_mu);
	int r;
	bool done = false;
	for (int stale = 0;;) {
		/* At the unmount the encoder's file is left with what is done:
		 * its RAW rest is kept (and recorded) as it is, and encoded
		 * after the next attach; the rest of a large file at nice 19
		 * would hold the daemon's end up for seconds. */
		if (__atomic_load_n(&fs->idle_stop, __ATOMIC_RELAXED)) {
			r = 0;
			break;
		}
		struct dmar_encode_plan *plan = NULL;
		pthread_rwlock_rdlock(&fs->busy);
		pthread_rwlock_rdlock(&i->lock);
		r = dmar_file_encode_prepare(&i->f, c, &plan);
		pthread_rwlock_unlock(&i->lock);
		if (r < 0 || !plan) {
			pthread_rwlock_unlock(&fs->busy);
			break;
		}
		pthread_rwlock_wrlock(&i->lock);
		r = dmar_file_encode_commit(&i->f, c, plan);
		bool durable = i->f.dur != NULL;
		pthread_rwlock_unlock(&i->lock);
		pthread_rwlock_unlock(&fs->busy);
		if (r == 0 && durable)
			(void)persist_sync(fs, i);
		done |= r == 0;
		if (r == -EAGAIN && ++stale < tries)
			continue;
		if (r < 0)
			break;
	}
	pthread_mutex_unlock(&i->encode_mu);
	if (r == 0)
		name_content(i, c);
	if (done && fs->attr_changed)
		fs->attr_changed(fs, i); /* st_blocks */
	return r;
}

void ns_encode_source(struct dmarfs *fs, struct inode *i)
{
	if (S_ISREG(i->mode) && fs->cfg.ctx.encode != DMAR_ENCODE_NONE && __atomic_load_n(&i->f.dirty, __ATOMIC_RELAXED))
		ns_encode(fs, i, &fs->cfg.ctx, 3);
}

void ns_settle(struct dmarfs *fs, struct inode *i)
{
	if (!S_ISREG(i->mode))
		return;
	pthread_rwlock_rdlock(&i->lock);
	bool closed = i->opens == 0;
	pthread_rwlock_unlock(&i->lock);
	if (closed)
		ns_encode_source(fs, i);
}
