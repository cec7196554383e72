/* SPDX-License-Identifier: MIT */
/*
 * Remote-node paths: MOUNTPOINT/@PEER/... shows peer PEER's files through
 * its REST API, and a mount with view=PEER shows them at its root.
 *
 * This layer wraps the local operations (fs.c): each operation on a
 * remote inode is served here, everything else goes to the local one.
 * A remote file's contents live in the local arena while it is open (and
 * after, as a cache until the kernel forgets the inode): opening pulls
 * only the chunks the arena lacks; writes, truncates and copy_file_range
 * from local files change that local copy; flush/fsync ship it (recipe,
 * missing chunks, atomic commit: node.c) and return the peer's error, so
 * `cp` fails when the peer did not commit.  Reading a file whose copy is
 * current costs no network round trip beyond the attribute check.
 *
 * Locking: rm->lock protects lookup counts and the peer roots; each
 * remote inode's rwlock its attributes and contents.  A remote inode's
 * lock is taken before a local inode's, never after.  Network calls are
 * made with the remote inode's lock held (a file is shipped whole, and
 * readers of that one file wait), never with a local lock held except the
 * local source's during a copy_file_range.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "fs_i.h"
#include "idle.h"
#include "node.h"
#include "codec/idset.h"
#include "net/peers.h"
#include "net/swarm.h"
#include "codec/clock.h"

#define INODE_REMOTE 0x524d5445u /* "RMTE" */
/* Remote attributes are the peer's: trust them briefly. */
#define RATTR_TIMEOUT 1.0
#define RENTRY_TIMEOUT 1.0
/* A copy of a peer's file (loaded for a read, or written here and
 * shipped) stays in the arena for re-reads this long after its last
 * close (DMARFS_REMOTE_CACHE_SECONDS overrides it); a full arena drops
 * it at once.  A later open loads it again, pulling only what the arena
 * lacks. */
#define REMOTE_CACHE_SECONDS 60
#define RNEG_SLOTS 16
/* Inode numbers of remote files start here, far from local ones. */
#define RINO_BASE (1ull << 48)

struct rinode {
	uint32_t kind;          /* INODE_REMOTE: the same place as struct inode's */
	struct dmar_client *cl; /* the peer's, owned by the node */
	const char *peer;       /* its name, owned by the node */
	char *path;             /* at the peer; "" is its root */
	uint64_t st_ino;
	uint64_t nlookup;       /* protected by rm->lock */
	bool keep;              /* a peer's root or the view: lives until unmount */
	struct rinode *prev, *next; /* all remote inodes (rm->all), protected by rm->lock */
	struct rinode *hnext;   /* rm->hash chain, protected by rm->lock */
	pthread_rwlock_t lock;  /* the rest */
	struct stat st;         /* last known attributes */
	double st_at;           /* when (monotonic seconds); 0 = unknown */
	char *target;           /* symlinks */
	unsigned opens;
	bool loaded;            /* f holds the file's contents */
	bool dirty;             /* f changed since it was shipped (or was created) */
	int broken;             /* a change of f failed (-errno): f is not what the
				 * writer meant, so it is never shipped; close says so */
	int64_t loaded_mtime_ns;
	uint64_t loaded_size;
	double idle_since;      /* loaded and not open since (monotonic seconds) */
	struct dmar_file f;
	/* What the peer holds at path, from an open that truncated f (a named
	 * table's reference, no copy) until the ship of the new version, which
	 * sends only how f differs from it (a recipe delta); else empty. */
	struct dmar_file base;
	struct rnames *names;   /* a directory's entries as the peer last listed them, or NULL */
	struct dmarfs_remote *rm; /* the remote's: its names_gen and changes */
};

/*
 * A directory's entries from the peer's stat or listing of it, sorted by
 * name, trusted for RENTRY_TIMEOUT as the kernel trusts a dentry: a
 * lookup in the directory is answered from it, found or absent, with no
 * request.  `cp f @b/dir/new` asked the peer for dir, then for new (absent);
 * now the first answer says both, and `ls -l` costs one request, not one
 * an entry.  Any change this host makes at a peer (create, mkdir, remove,
 * a ship) bumps the remote's names_gen once it is done and notes the path
 * it changed (the last CHANGES_KEPT of them); a listing then holds for
 * every name but those changed since it was asked for, and for none once
 * more changes came than are kept: a listing never hides this host's own
 * changes, and a tree copied into @b/ (a ship a file) still finds each
 * next name absent in its directory's listing without asking.  A
 * directory this host makes starts with an empty listing; one whose
 * listing timed out is listed again at the next lookup in it (one request
 * a second for a directory being filled, not one a name).
 */
#define CHANGES_KEPT 64
struct rnames {
	json_t *entries; /* the peer's array of stat objects with "name" (a reference) */
	double at;       /* when it was fetched (monotonic seconds) */
	unsigned long gen; /* *names_gen before the fetch */
	size_t n;
	struct {
		const char *name; /* in entries */
		json_t *o;
	} *e;
};

#define RHASH_BUCKETS 4096

struct dmarfs_remote {
	struct dmarfs *fs;
	struct dmarfs_node *node;
	pthread_mutex_t lock;
	struct rinode **roots;  /* per peer, created at first lookup */
	struct rinode *view;    /* the root of a view=PEER mount */
	struct rinode *all;     /* every remote inode, freed at unmount */
	/* The same inodes by (peer, path): a lookup of a path already known
	 * gives the same inode, with its cached contents. */
	struct rinode *hash[RHASH_BUCKETS];
	/* Names the peer said are absent, for RENTRY_TIMEOUT, as the kernel's
	 * negative dentry would be.  The kernel looks a name up again before
	 * every O_EXCL create even over a valid negative dentry: cp's stat
	 * then its create asked the peer twice in a row.  Few slots: what
	 * matters is the name just looked up. */
	struct {
		struct dmar_client *cl;
		char *path; /* NULL: free slot */
		double at;
	} neg[RNEG_SLOTS];
	unsigned neg_next;
	atomic_ulong names_gen; /* see struct rnames */
	pthread_mutex_t changes_lock;
	struct {
		struct dmar_client *cl;
		char *path;
		unsigned long gen;
	} changes[CHANGES_KEPT]; /* slot gen % CHANGES_KEPT; protected by changes_lock */
	uint64_t next_ino;      /* atomic */
};

/* A directory listing taken at opendir (fi->fh). */
struct rlisting {
	size_t n;
	struct {
		char *name;
		mode_t mode;
		uint64_t ino;
	} *e;
};

static struct dmarfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static bool is_remote(struct dmarfs *fs, fuse_ino_t ino)
{
	if (!fs->remote)
		return false;
	if (ino == FUSE_ROOT_ID)
		return fs->remote->view != NULL;
	return *(const uint32_t *)(uintptr_t)ino == INODE_REMOTE;
}

static struct rinode *RI(struct dmarfs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? fs->remote->view : (struct rinode *)(uintptr_t)ino;
}

static struct inode *LI(struct dmarfs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? fs->root : (struct inode *)(uintptr_t)ino;
}

static fuse_ino_t rnodeid(struct dmarfs *fs, struct rinode *ri)
{
	return ri == fs->remote->view ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)ri;
}

static const struct fuse_lowlevel_ops *L(void)
{
	return fs_local_ops();
}

/* ---- remote inodes ---------------------------------------------------- */

static size_t rhash(const struct dmar_client *cl, const char *path)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)cl; /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)path; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return (size_t)(h % RHASH_BUCKETS);
}

static struct rinode *rinode_new(struct dmarfs_remote *rm, struct dmar_client *cl, const char *peer,
				 const char *path)
{
	struct rinode *ri = calloc(1, sizeof(*ri));
	if (!ri || !(ri->path = strdup(path))) {
		free(ri);
		return NULL;
	}
	ri->kind = INODE_REMOTE;
	ri->rm = rm;
	ri->cl = cl;
	ri->peer = peer;
	ri->st_ino = RINO_BASE + __atomic_add_fetch(&rm->next_ino, 1, __ATOMIC_RELAXED);
	pthread_rwlock_init(&ri->lock, NULL);
	dmar_file_init(&ri->f);
	dmar_file_init(&ri->base);
	pthread_mutex_lock(&rm->lock);
	ri->next = rm->all;
	if (rm->all)
		rm->all->prev = ri;
	rm->all = ri;
	pthread_mutex_unlock(&rm->lock);
	return ri;
}

/* Make ri findable by rinode_find: only once the peer has said it
 * exists (or it is being created), so a lookup never finds an inode that
 * a failed lookup is about to free. */
/* rm->lock held. */
static void neg_drop(struct dmarfs_remote *rm, struct dmar_client *cl, const char *path)
{
	for (unsigned k = 0; k < RNEG_SLOTS; k++)
		if (rm->neg[k].path && rm->neg[k].cl == cl && !strcmp(rm->neg[k].path, path)) {
			free(rm->neg[k].path);
			rm->neg[k].path = NULL;
		}
}

/* Did the peer say path is absent less than RENTRY_TIMEOUT ago? */
static bool neg_hit(struct dmarfs_remote *rm, struct dmar_client *cl, const char *path)
{
	bool hit = false;
	double now = dmar_mono_s();
	pthread_mutex_lock(&rm->lock);
	for (unsigned k = 0; k < RNEG_SLOTS && !hit; k++)
		hit = rm->neg[k].path && rm->neg[k].cl == cl && now - rm->neg[k].at < RENTRY_TIMEOUT &&
		      !strcmp(rm->neg[k].path, path);
	pthread_mutex_unlock(&rm->lock);
	return hit;
}

static void neg_add(struct dmarfs_remote *rm, struct dmar_client *cl, const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return; /* only a lookup more */
	pthread_mutex_lock(&rm->lock);
	neg_drop(rm, cl, path);
	unsigned k = rm->neg_next++ % RNEG_SLOTS;
	free(rm->neg[k].path);
	rm->neg[k].cl = cl;
	rm->neg[k].path = copy;
	rm->neg[k].at = dmar_mono_s();
	pthread_mutex_unlock(&rm->lock);
}

/* Every name this host creates at the peer (create, mkdir) or finds there
 * gets an inode here first: that is where a stale "absent" goes. */
static void rinode_hash(struct dmarfs_remote *rm, struct rinode *ri)
{
	pthread_mutex_lock(&rm->lock);
	neg_drop(rm, ri->cl, ri->path);
	size_t b = rhash(ri->cl, ri->path);
	ri->hnext = rm->hash[b];
	rm->hash[b] = ri;
	pthread_mutex_unlock(&rm->lock);
}

/* The known inode of path at cl's peer, with one lookup taken (so a
 * concurrent forget cannot free it), or NULL. */
static struct rinode *rinode_find(struct dmarfs_remote *rm, struct dmar_client *cl, const char *path)
{
	pthread_mutex_lock(&rm->lock);
	struct rinode *ri = rm->hash[rhash(cl, path)];
	while (ri && (ri->cl != cl || strcmp(ri->path, path)))
		ri = ri->hnext;
	if (ri)
		ri->nlookup++;
	pthread_mutex_unlock(&rm->lock);
	return ri;
}

/* rm->lock held. */
static void rinode_unlist(struct dmarfs_remote *rm, struct rinode *ri)
{
	for (struct rinode **p = &rm->hash[rhash(ri->cl, ri->path)]; *p; p = &(*p)->hnext)
		if (*p == ri) {
			*p = ri->hnext;
			break;
		}
	if (ri->prev)
		ri->prev->next = ri->next;
	else
		rm->all = ri->next;
	if (ri->next)
		ri->next->prev = ri->prev;
}

static void names_free(struct rnames *l);

static void rinode_destroy(struct dmarfs *fs, struct rinode *ri)
{
	names_free(ri->names);
	dmar_file_clear(&ri->f, &fs->cfg.ctx);
	dmar_file_clear(&ri->base, &fs->cfg.ctx);
	pthread_rwlock_destroy(&ri->lock);
	free(ri->target);
	free(ri->path);
	free(ri);
}

static void rinode_free(struct dmarfs *fs, struct rinode *ri)
{
	if (!ri)
		return;
	pthread_mutex_lock(&fs->remote->lock);
	rinode_unlist(fs->remote, ri);
	pthread_mutex_unlock(&fs->remote->lock);
	rinode_destroy(fs, ri);
}


static void forget_remote(struct dmarfs *fs, struct rinode *ri, uint64_t n)
{
	struct dmarfs_remote *rm = fs->remote;
	pthread_mutex_lock(&rm->lock);
	ri->nlookup = ri->nlookup > n ? ri->nlookup - n : 0;
	bool gone = ri->nlookup == 0 && !ri->keep;
	if (gone)
		rinode_unlist(rm, ri);
	pthread_mutex_unlock(&rm->lock);
	if (gone)
		rinode_destroy(fs, ri);
}

static void names_free(struct rnames *l)
{
	if (!l)
		return;
	json_decref(l->entries);
	free(l->e);
	free(l);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Keep entries (a JSON array from the peer, asked for when names_gen was
 * gen, fetched at `at`) as d's names; on ENOMEM d simply has none.
 * d->lock held exclusively. */
static void names_set(struct rinode *d, json_t *entries, double at, unsigned long gen)
{
	names_free(d->names);
	d->names = NULL;
	if (!json_is_array(entries))
		return;
	struct rnames *l = calloc(1, sizeof(*l));
	size_t n = json_array_size(entries);
	if (!l || (n && !(l->e = calloc(n, sizeof(*l->e))))) {
		free(l);
		return;
	}
	for (size_t k = 0; k < n; k++) {
		json_t *o = json_array_get(entries, k);
		const char *name = json_string_value(json_object_get(o, "name"));
		if (name && json_is_object(o)) {
			l->e[l->n].name = name;
			l->e[l->n].o = o;
			l->n++;
		}
	}
	if (l->n > 1)
		qsort(l->e, l->n, sizeof(*l->e), name_cmp);
	l->entries = json_incref(entries);
	l->at = at;
	l->gen = gen;
	d->names = l;
}

/* Whether this host changed d/name since generation gen (or may have:
 * more changes came than are kept). */
static bool changed_since(struct rinode *d, const char *name, unsigned long gen)
{
	struct dmarfs_remote *rm = d->rm;
	unsigned long now = atomic_load(&rm->names_gen);
	if (now == gen)
		return false;
	if (now - gen > CHANGES_KEPT)
		return true;
	size_t dl = strlen(d->path);
	bool hit = false;
	pthread_mutex_lock(&rm->changes_lock);
	for (unsigned long g = gen + 1; g <= now && !hit; g++) {
		const char *p = rm->changes[g % CHANGES_KEPT].path;
		/* A slot not written yet (its change is under way) counts. */
		hit = rm->changes[g % CHANGES_KEPT].gen != g ||
		      (rm->changes[g % CHANGES_KEPT].cl == d->cl && p &&
		       (dl ? !strncmp(p, d->path, dl) && p[dl] == '/' && !strcmp(p + dl + 1, name) : !strcmp(p, name)));
	}
	pthread_mutex_unlock(&rm->changes_lock);
	return hit;
}

/* Whether d has a listing that timed out (a new one is worth asking
 * for).  d->lock held. */
static bool names_stale(const struct rinode *d)
{
	return d->names && dmar_mono_s() - d->names->at >= RENTRY_TIMEOUT;
}

/* What d's names say of name: 1 and *o (a new reference, *at when it was
 * fetched) if listed, 0 if absent, -1 if d has no fresh names or this
 * host changed name since they came.  d->lock held. */
static int names_find(struct rinode *d, const char *name, json_t **o, double *at)
{
	struct rnames *l = d->names;
	if (!l || dmar_mono_s() - l->at >= RENTRY_TIMEOUT || changed_since(d, name, l->gen))
		return -1;
	const char *key = name;
	__typeof__(l->e) hit = l->n ? bsearch(&key, l->e, l->n, sizeof(*l->e), name_cmp) : NULL;
	if (!hit)
		return 0;
	*o = json_incref(hit->o);
	*at = l->at;
	return 1;
}

/* This host changed path at peer cl (made, removed, shipped: done or
 * failed): listings taken before no longer hold for that name. */
static void names_changed_at(struct dmarfs_remote *rm, struct dmar_client *cl, const char *path)
{
	char *copy = strdup(path);
	pthread_mutex_lock(&rm->changes_lock);
	unsigned long g = atomic_fetch_add(&rm->names_gen, 1) + 1;
	unsigned k = (unsigned)(g % CHANGES_KEPT);
	free(rm->changes[k].path);
	rm->changes[k].cl = cl;
	rm->changes[k].path = copy; /* NULL (no memory): matches nothing, but the gen is there */
	rm->changes[k].gen = copy ? g : 0;
	pthread_mutex_unlock(&rm->changes_lock);
}

/* MOUNT/@all/ and what is below it: the group of every other peer. */
static const char group_name[] = DMARFS_GROUP_ALL;

static bool is_group(const struct rinode *ri)
{
	return ri->peer == group_name;
}

/* The group's members (dmarfs_node_hops): 0 or -errno (err). */
static int group_members(struct dmarfs_remote *rm, struct dmar_hops *h, struct dmar_error *err)
{
	return dmarfs_node_hops(rm->node, group_name, h, err);
}

/* path changed at cl's peer; a change through the group changed it at
 * every member, whose own views (@b/...) must see it too. */
static void names_changed(struct dmarfs_remote *rm, struct dmar_client *cl, const char *path)
{
	names_changed_at(rm, cl, path);
	if (cl != dmarfs_node_group(rm->node))
		return;
	struct dmar_hops *h = malloc(sizeof(*h));
	struct dmar_error err = { 0 };
	if (h && group_members(rm, h, &err) == 0)
		for (size_t i = 0; i < h->n; i++)
			names_changed_at(rm, dmarfs_node_peer(rm->node, h->name[i]), path);
	free(h);
}

/*
 * fn at d's peer; under @all/, at every member in turn.  The result is
 * the first member's error other than benign (a name that is already
 * there for mkdir, one that is not for unlink: the change was made
 * there before), with err naming that member; benign only when every
 * member said so; else 0.
 */
typedef int (*member_fn)(struct dmar_client *cl, const char *path, void *ctx, struct dmar_error *err);
static int at_each(struct dmarfs_remote *rm, struct rinode *d, const char *path, int benign, member_fn fn, void *ctx,
		   struct dmar_error *err)
{
	if (!is_group(d)) {
		int r = fn(d->cl, path, ctx, err);
		names_changed(rm, d->cl, path);
		return r;
	}
	struct dmar_hops *h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	int r = group_members(rm, h, err), first = 0;
	size_t nbenign = 0;
	for (size_t i = 0; r == 0 && i < h->n; i++) {
		struct dmar_error e = { 0 };
		int m = fn(dmarfs_node_peer(rm->node, h->name[i]), path, ctx, &e);
		if (m == benign)
			nbenign++;
		else if (m < 0 && !first) {
			first = m;
			dmar_error_set(err, m, "%s: %s", h->name[i], e.msg[0] ? e.msg : strerror(-m));
		}
	}
	names_changed(rm, d->cl, path);
	if (r == 0)
		r = first ? first : nbenign == h->n ? benign : 0;
	free(h);
	return r;
}

/* "dir/name", or "name" under the peer's root.  NULL on ENOMEM. */
static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (!p)
		return NULL;
	if (a) {
		memcpy(p, dir, a);
		p[a++] = '/';
	}
	memcpy(p + a, name, b + 1);
	return p;
}

/* The peer's stat object into ri->st (ri->lock held exclusively). */
static void apply_stat(struct rinode *ri, json_t *o)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	mode_t fmt = !type ? S_IFREG : !strcmp(type, "dir") ? S_IFDIR : !strcmp(type, "symlink") ? S_IFLNK : S_IFREG;
	json_int_t ns = json_integer_value(json_object_get(o, "mtime_ns"));
	struct stat *st = &ri->st;
	memset(st, 0, sizeof(*st));
	st->st_ino = ri->st_ino;
	st->st_mode = fmt | ((mode_t)json_integer_value(json_object_get(o, "mode")) & 07777);
	st->st_nlink = (nlink_t)json_integer_value(json_object_get(o, "nlink"));
	if (!st->st_nlink)
		st->st_nlink = 1;
	st->st_uid = (uid_t)json_integer_value(json_object_get(o, "uid"));
	st->st_gid = (gid_t)json_integer_value(json_object_get(o, "gid"));
	st->st_size = (off_t)json_integer_value(json_object_get(o, "size"));
	st->st_blksize = 4096;
	st->st_blocks = (st->st_size + 511) / 512;
	st->st_mtim.tv_sec = (time_t)(ns / 1000000000);
	st->st_mtim.tv_nsec = (long)(ns % 1000000000);
	st->st_atim = st->st_ctim = st->st_mtim;
	const char *t = json_string_value(json_object_get(o, "target"));
	if (t && S_ISLNK(fmt)) {
		free(ri->target);
		ri->target = strdup(t);
	}
	ri->st_at = dmar_mono_s();
}

/* Refresh ri's attributes from the peer if older than the timeout (or
 * always with force).  ri->lock held exclusively. */
static int refresh(struct rinode *ri, bool force, struct dmar_error *err)
{
	if (!force && ri->st_at && dmar_mono_s() - ri->st_at < RATTR_TIMEOUT)
		return 0;
	json_t *o = NULL;
	unsigned long gen = atomic_load(&ri->rm->names_gen);
	int r = dmar_client_stat(ri->cl, ri->path, &o, err);
	if (r < 0)
		return r;
	apply_stat(ri, o);
	/* A directory's stat carries its entries. */
	names_set(ri, S_ISDIR(ri->st.st_mode) ? json_object_get(o, "entries") : NULL, ri->st_at, gen);
	json_decref(o);
	return 0;
}

/* What close() may return for a failed ship: the peer's error where it
 * means something to the application, else EIO. */
static int close_errno(int r)
{
	switch (-r) {
	case ENOSPC: case EDQUOT: case EACCES: case EPERM: case EEXIST: case ENOENT:
	case ENOTDIR: case EISDIR: case EFBIG: case EROFS: case EINVAL: case ENOMEM:
		return -r;
	default:
		return EIO;
	}
}

/* "what @peer/path[/leaf]: why" to the log; leaf: a name in directory ri
 * (mkdir, unlink), or NULL. */
static void log_err(struct rinode *ri, const char *leaf, const char *what, int r, const struct dmar_error *err)
{
	fprintf(stderr, "dmarfs: %s @%s/%s%s%s: %s\n", what, ri->peer, ri->path, leaf && ri->path[0] ? "/" : "",
		leaf ? leaf : "", err->msg[0] ? err->msg : strerror(-r));
}

static void stat_of(struct dmarfs *fs, struct rinode *ri, struct stat *st)
{
	(void)fs;
	*st = ri->st;
	if (ri->loaded && (ri->opens || ri->dirty)) {
		st->st_size = (off_t)ri->f.size;
		st->st_blocks = (st->st_size + 511) / 512;
	}
}

static void reply_rentry(fuse_req_t req, struct dmarfs *fs, struct rinode *ri, struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof(e));
	pthread_mutex_lock(&fs->remote->lock);
	ri->nlookup++;
	pthread_mutex_unlock(&fs->remote->lock);
	e.ino = rnodeid(fs, ri);
	/* As fs.c's entries: a reused address comes with another number. */
	e.generation = ri == fs->remote->view ? 0 : ri->st_ino;
	e.attr_timeout = RATTR_TIMEOUT;
	e.entry_timeout = RENTRY_TIMEOUT;
	pthread_rwlock_rdlock(&ri->lock);
	stat_of(fs, ri, &e.attr);
	pthread_rwlock_unlock(&ri->lock);
	int r = fi ? fuse_reply_create(req, &e, fi) : fuse_reply_entry(req, &e);
	if (r != 0)
		forget_remote(fs, ri, 1);
}

/* ---- contents ------------------------------------------------------ */

struct pulled {
	struct dmar_fsctx *c;
	pthread_mutex_t lock;
	struct dmar_id *ids;
	size_t n, cap;
};

/* Each pulled chunk keeps one reference until the file has taken its
 * own, so nothing pulled is dropped before it is used. */
static int sink_put(void *ctx, const struct dmar_wire_chunk *w, const uint8_t *decoded)
{
	struct pulled *p = ctx;
	pthread_mutex_lock(&p->lock);
	int r = 0;
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 256;
		struct dmar_id *x = realloc(p->ids, cap * sizeof(*x));
		if (x) {
			p->ids = x;
			p->cap = cap;
		} else {
			r = -ENOMEM;
		}
	}
	if (!r && (r = dmar_fsctx_chunk_put(p->c, w, decoded)) == 0)
		p->ids[p->n++] = w->id;
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* A load that lacks this much (the recipe's bytes of its missing chunks)
 * pulls them from every peer that holds them (net/swarm.h); a smaller one
 * from the file's node alone, where asking the others would cost more
 * round trips than their links save. */
#define SWARM_MIN_BYTES (16u << 20)

/* Load the peer's file into ri->f: its recipe, then only the chunks the
 * local arena lacks.  ri->lock held exclusively. */
static int load(struct dmarfs *fs, struct rinode *ri, struct dmar_error *err)
{
	struct dmar_fsctx *c = &fs->cfg.ctx;
	struct dmar_recipe rc;
	int r = dmar_client_recipe(ri->cl, ri->path, &rc, err);
	if (r < 0)
		return r;
	for (int tries = 0; tries < 3; tries++) {
		/* A file repeats chunks (that is what dedup finds): ask once. */
		struct dmar_idset want;
		if (dmar_idset_init(&want, rc.n) < 0) {
			dmar_idset_free(&want);
			r = -ENOMEM;
			break;
		}
		struct dmar_chunk_info info;
		for (size_t i = 0; i < rc.n; i++)
			if (rc.e[i].kind == DMAR_RECIPE_CHUNK && dmar_store_lookup(c->arena, &rc.e[i].id, &info) < 0)
				dmar_idset_add(&want, &rc.e[i].id, NULL);
		size_t u = want.n;
		uint64_t bytes = 0;
		for (size_t i = 0; i < rc.n; i++)
			if (rc.e[i].kind == DMAR_RECIPE_CHUNK && dmar_idset_find(&want, &rc.e[i].id) >= 0)
				bytes += rc.e[i].len;
		struct pulled p = { .c = c };
		pthread_mutex_init(&p.lock, NULL);
		struct dmar_chunk_sink sink = { .put = sink_put, .ctx = &p };
		r = 0;
		if (u && bytes >= SWARM_MIN_BYTES) {
			struct dmar_swarm_peer sp[DMAR_SWARM_PEERS];
			size_t np = dmarfs_node_swarm(fs->remote->node, ri->peer, ri->cl, sp);
			r = dmar_swarm_pull(sp, np, want.ids, u, &sink, NULL, NULL, NULL, err);
		} else if (u) {
			r = dmar_client_pull(ri->cl, want.ids, u, &sink, NULL, NULL, NULL, err);
		}
		if (!r)
			r = dmar_file_from_recipe(&ri->f, c, &rc, NULL, NULL);
		for (size_t i = 0; i < p.n; i++)
			dmar_store_unref(c->arena, &p.ids[i]);
		free(p.ids);
		pthread_mutex_destroy(&p.lock);
		dmar_idset_free(&want);
		if (r != -ENODATA)
			break; /* -ENODATA: a local chunk went meanwhile; again */
	}
	if (!r) {
		ri->loaded = true;
		ri->dirty = false;
		ri->idle_since = dmar_mono_s();
		ri->st.st_size = (off_t)rc.size;
		ri->st.st_mode = S_IFREG | rc.mode;
		ri->st.st_mtim = (struct timespec){ .tv_sec = rc.mtime_sec, .tv_nsec = rc.mtime_nsec };
		ri->loaded_size = rc.size;
		ri->loaded_mtime_ns = (int64_t)rc.mtime_sec * 1000000000 + rc.mtime_nsec;
	}
	dmar_recipe_free(&rc);
	return r;
}

/* Make ri->f current: reload when the peer's file changed since it was
 * loaded (and ours has no unshipped changes).  ri->lock held exclusively. */
static int ensure_loaded(struct dmarfs *fs, struct rinode *ri, struct dmar_error *err)
{
	if (ri->loaded && (ri->dirty || ri->opens))
		return 0;
	int r = refresh(ri, true, err);
	if (r < 0)
		return r;
	if (!S_ISREG(ri->st.st_mode))
		return S_ISDIR(ri->st.st_mode) ? -EISDIR : -EINVAL;
	int64_t ns = (int64_t)ri->st.st_mtim.tv_sec * 1000000000 + ri->st.st_mtim.tv_nsec;
	if (ri->loaded && ri->loaded_mtime_ns == ns && ri->loaded_size == (uint64_t)ri->st.st_size)
		return 0;
	dmar_file_clear(&ri->f, &fs->cfg.ctx);
	dmar_file_clear(&ri->base, &fs->cfg.ctx);
	ri->loaded = false;
	return load(fs, ri, err);
}

/* Files from this size on keep their base (struct rinode) when an open
 * truncates them: below it a recipe is small anyway. */
#define DELTA_BASE_MIN (4u << 20)

/* Before an open truncates ri->f: keep it as the base of the ship to
 * come when it is what the peer holds (loaded or shipped, unchanged since)
 * and has a content id to name it by.  It is the named table's: moving it
 * costs a reference, not its extents. */
static void keep_base(struct dmarfs *fs, struct rinode *ri)
{
	struct dmar_id cid;
	dmar_file_clear(&ri->base, &fs->cfg.ctx);
	if (!ri->loaded || ri->dirty || ri->broken || ri->f.size < DELTA_BASE_MIN ||
	    !dmar_file_content_known(&ri->f, &cid, NULL))
		return;
	ri->base = ri->f;
	dmar_file_init(&ri->f);
}

/* Ship ri->f to the peer if it has unshipped changes.  ri->lock held
 * exclusively; returns 0 or the -errno close() should report. */
static int ship(struct dmarfs *fs, struct rinode *ri)
{
	if (!ri->dirty)
		return 0;
	/* A write that failed (ENOSPC here) left f short of what the writer
	 * wrote: shipping it would make a partial (or empty) file at the
	 * peer.  Whole or not at all: close reports the write's error. */
	if (ri->broken)
		return ri->broken;
	struct dmar_error err = { 0 };
	struct dmar_fsctx c = fs->cfg.ctx;
	if (c.encode == DMAR_ENCODE_NONE)
		c.encode = DMAR_ENCODE_DEDUP; /* shipping needs chunks */
	int r = dmar_file_encode(&ri->f, &c);
	struct dmar_recipe rc;
	if (!r)
		r = dmar_file_recipe(&ri->f, &rc);
	if (r < 0) {
		dmar_error_errno(&err, r, "encode");
		log_err(ri, NULL, "ship to", r, &err);
		return -close_errno(r);
	}
	rc.mode = ri->st.st_mode & 07777;
	rc.mtime_sec = ri->st.st_mtim.tv_sec;
	rc.mtime_nsec = (uint32_t)ri->st.st_mtim.tv_nsec;
	/* The content id, known when ri->f is a copy of a file shipped
	 * before (cp of the same file under another name): then it is not
	 * hashed again, and the commit is content-only (no recipe): the
	 * peer, which likely holds that content, makes the file from it in
	 * one round trip whatever its size. */
	struct dmar_id cid;
	bool known;
	if ((r = dmar_file_content_id(&ri->f, &c, &rc, &cid, &known)) < 0) {
		dmar_recipe_free(&rc);
		return -close_errno(r);
	}
	/* The version the peer holds, for a delta: its recipe (base holds its
	 * chunks) and content id. */
	struct dmar_recipe brc = { 0 };
	struct dmar_id bcid;
	bool has_base = ri->base.n && dmar_file_content_known(&ri->base, &bcid, NULL) &&
			dmar_file_recipe(&ri->base, &brc) == 0;
	/* ri->f holds a reference on every chunk while we hold its lock. */
	struct dmar_xfer_stats st;
	r = dmarfs_node_ship(fs->remote->node, ri->peer, "(write)", ri->path, &rc, &cid,
			     known ? DMAR_PUSH_CONTENT_FIRST : 0, &st, NULL, has_base ? &brc : NULL,
			     has_base ? &bcid : NULL, &err);
	dmar_recipe_free(&brc);
	dmar_file_clear(&ri->base, &fs->cfg.ctx);
	names_changed(fs->remote, ri->cl, ri->path); /* even a failed push may have changed the peer */
	if (!r) {
		ri->dirty = false;
		ri->loaded_size = rc.size;
		ri->loaded_mtime_ns = (int64_t)rc.mtime_sec * 1000000000 + rc.mtime_nsec;
		ri->st.st_size = (off_t)rc.size;
		ri->st_at = dmar_mono_s();
	} else {
		log_err(ri, NULL, "ship to", r, &err);
	}
	dmar_recipe_free(&rc);
	return r < 0 ? -close_errno(r) : 0;
}

/* ---- operations on remote inodes --------------------------------------- */

static void reply_error(fuse_req_t req, struct rinode *ri, const char *leaf, const char *what, int r,
			const struct dmar_error *err)
{
	if (r != -ENOENT)
		log_err(ri, leaf, what, r, err);
	/* Transport failures reach the application as EIO (a network
	 * filesystem's convention), the peer's own errors as they are. */
	fuse_reply_err(req, r == -ECONNREFUSED || r == -EHOSTUNREACH || r == -ETIMEDOUT || r == -EKEYREJECTED
				    ? EIO
				    : -r);
}

static void r_lookup(fuse_req_t req, struct rinode *d, const char *name)
{
	struct dmarfs *fs = FS(req);
	if (strlen(name) > NAME_MAX) {
		fuse_reply_err(req, ENAMETOOLONG); /* no peer has such a name either */
		return;
	}
	char *path = join(d->path, name);
	if (!path) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* Known already (its entry timed out, or it is open): the same
	 * inode, so what it holds stays cached. */
	struct rinode *ri = rinode_find(fs->remote, d->cl, path);
	bool found = ri != NULL;
	json_t *listed = NULL;
	double listed_at = 0;
	int in_names = -1;
	if (!ri) {
		pthread_rwlock_rdlock(&d->lock);
		in_names = names_find(d, name, &listed, &listed_at);
		bool stale = in_names < 0 && names_stale(d);
		pthread_rwlock_unlock(&d->lock);
		if (stale) {
			/* One listing answers this name and the next ones. */
			struct dmar_error lerr = { 0 };
			pthread_rwlock_wrlock(&d->lock);
			if (names_stale(d) && refresh(d, true, &lerr) == 0)
				in_names = names_find(d, name, &listed, &listed_at);
			pthread_rwlock_unlock(&d->lock);
		}
	}
	if (!ri && (in_names == 0 || (in_names < 0 && neg_hit(fs->remote, d->cl, path)))) {
		free(path);
		struct fuse_entry_param e = { .entry_timeout = RENTRY_TIMEOUT };
		fuse_reply_entry(req, &e);
		return;
	}
	if (listed) {
		/* In the directory's fresh listing: that stat, no request. */
		ri = rinode_new(fs->remote, d->cl, d->peer, path);
		free(path);
		if (!ri) {
			json_decref(listed);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		pthread_rwlock_wrlock(&ri->lock);
		apply_stat(ri, listed);
		ri->st_at = listed_at;
		pthread_rwlock_unlock(&ri->lock);
		json_decref(listed);
		rinode_hash(fs->remote, ri);
		reply_rentry(req, fs, ri, NULL);
		return;
	}
	if (!ri)
		ri = rinode_new(fs->remote, d->cl, d->peer, path);
	free(path);
	if (!ri) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	struct dmar_error err = { 0 };
	pthread_rwlock_wrlock(&ri->lock);
	/* An open file with changes not shipped yet is what this host sees. */
	int r = found && ri->loaded && (ri->dirty || ri->opens) ? 0 : refresh(ri, true, &err);
	pthread_rwlock_unlock(&ri->lock);
	if (r == -ENOENT && !found) {
		/* A negative entry, cached as long as a positive one:
		 * repeated stats of a missing name, and a create without
		 * O_EXCL (a shell's >), ask the peer once.  The kernel always
		 * looks up again before an O_EXCL create: neg answers that. */
		neg_add(fs->remote, ri->cl, ri->path);
		rinode_free(fs, ri);
		struct fuse_entry_param e = { .entry_timeout = RENTRY_TIMEOUT };
		fuse_reply_entry(req, &e);
		return;
	}
	if (r < 0) {
		reply_error(req, ri, NULL, "lookup", r, &err);
		if (found)
			forget_remote(fs, ri, 1);
		else
			rinode_free(fs, ri);
		return;
	}
	if (!found)
		rinode_hash(fs->remote, ri);
	reply_rentry(req, fs, ri, NULL);
	if (found)
		forget_remote(fs, ri, 1); /* reply_rentry took the kernel's */
}

static void r_getattr(fuse_req_t req, struct rinode *ri)
{
	struct dmarfs *fs = FS(req);
	struct dmar_error err = { 0 };
	struct stat st;
	pthread_rwlock_wrlock(&ri->lock);
	int r = ri->loaded && (ri->opens || ri->dirty) ? 0 : refresh(ri, false, &err);
	stat_of(fs, ri, &st);
	pthread_rwlock_unlock(&ri->lock);
	if (r < 0)
		reply_error(req, ri, NULL, "stat", r, &err);
	else
		fuse_reply_attr(req, &st, RATTR_TIMEOUT);
}

static void r_setattr(fuse_req_t req, struct rinode *ri, struct stat *attr, int to_set)
{
	struct dmarfs *fs = FS(req);
	struct dmar_error err = { 0 };
	int r = 0;
	pthread_rwlock_wrlock(&ri->lock);
	bool was_open = ri->opens > 0;
	if (!S_ISREG(ri->st.st_mode) && ri->st_at) {
		r = -EPERM; /* directories' attributes belong to the peer */
		goto out;
	}
	if ((r = ensure_loaded(fs, ri, &err)) < 0)
		goto out;
	struct timespec t = ns_now();
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if ((r = dmar_file_truncate(&ri->f, &fs->cfg.ctx, (uint64_t)attr->st_size)) < 0) {
			if (!ri->broken)
				ri->broken = r;
			goto out;
		}
		ri->st.st_mtim = t;
	}
	if (to_set & FUSE_SET_ATTR_MODE)
		ri->st.st_mode = (ri->st.st_mode & S_IFMT) | (attr->st_mode & 07777);
	if (to_set & FUSE_SET_ATTR_MTIME)
		ri->st.st_mtim = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? t : attr->st_mtim;
	if (to_set & FUSE_SET_ATTR_ATIME)
		ri->st.st_atim = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? t : attr->st_atim;
	/* uid/gid are not part of a recipe: the peer's files belong to it. */
	ri->dirty |= (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_MTIME)) != 0;
	/* Without an open file there is no close to ship at: ship now. */
	if (!was_open && (r = ship(fs, ri)) < 0) {
		pthread_rwlock_unlock(&ri->lock);
		fuse_reply_err(req, -r);
		return;
	}
out:;
	struct stat st;
	stat_of(fs, ri, &st);
	pthread_rwlock_unlock(&ri->lock);
	if (r < 0)
		reply_error(req, ri, NULL, "setattr", r, &err);
	else
		fuse_reply_attr(req, &st, RATTR_TIMEOUT);
}

static int member_mkdir(struct dmar_client *cl, const char *path, void *ctx, struct dmar_error *err)
{
	return dmar_client_mkdir(cl, path, *(uint32_t *)ctx, err);
}

static void r_mkdir(fuse_req_t req, struct rinode *d, const char *name, mode_t mode)
{
	struct dmarfs *fs = FS(req);
	struct dmar_error err = { 0 };
	char *path = join(d->path, name);
	if (!path) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	uint32_t m = mode & 07777 & ~fuse_req_ctx(req)->umask;
	int r = at_each(fs->remote, d, path, -EEXIST, member_mkdir, &m, &err);
	struct rinode *ri = r < 0 ? NULL : rinode_new(fs->remote, d->cl, d->peer, path);
	free(path);
	if (r < 0) {
		reply_error(req, d, name, "mkdir", r, &err);
		return;
	}
	if (!ri) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_rwlock_wrlock(&ri->lock);
	r = refresh(ri, true, &err);
	pthread_rwlock_unlock(&ri->lock);
	if (r < 0) {
		reply_error(req, ri, NULL, "mkdir", r, &err);
		rinode_free(fs, ri);
		return;
	}
	rinode_hash(fs->remote, ri);
	reply_rentry(req, fs, ri, NULL);
}

static int member_remove(struct dmar_client *cl, const char *path, void *ctx, struct dmar_error *err)
{
	(void)ctx;
	return dmar_client_remove(cl, path, err);
}

static void r_remove(fuse_req_t req, struct rinode *d, const char *name, bool dir)
{
	struct dmar_error err = { 0 };
	char *path = join(d->path, name);
	if (!path) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* Whether it is a directory: from the inode the kernel just looked
	 * up, or the directory's listing, while they are fresh (rm -r lists
	 * first), else the peer's stat.  One request an unlink, not two. */
	json_t *o = NULL;
	int r = 0, known = -1;
	struct rinode *ri = rinode_find(FS(req)->remote, d->cl, path);
	if (ri) {
		pthread_rwlock_rdlock(&ri->lock);
		if (ri->st_at && dmar_mono_s() - ri->st_at < RATTR_TIMEOUT)
			known = S_ISDIR(ri->st.st_mode);
		pthread_rwlock_unlock(&ri->lock);
		forget_remote(FS(req), ri, 1);
	}
	if (known < 0) {
		double at;
		pthread_rwlock_rdlock(&d->lock);
		int in = names_find(d, name, &o, &at);
		pthread_rwlock_unlock(&d->lock);
		if (in == 0)
			r = -ENOENT;
		else if (in < 0)
			r = dmar_client_stat(d->cl, path, &o, &err);
	}
	if (!r) {
		const char *type = known < 0 ? json_string_value(json_object_get(o, "type")) : NULL;
		bool isdir = known < 0 ? type && !strcmp(type, "dir") : known;
		if (dir && !isdir)
			r = -ENOTDIR;
		else if (!dir && isdir)
			r = -EISDIR;
		else
			r = at_each(FS(req)->remote, d, path, -ENOENT, member_remove, NULL, &err);
	}
	json_decref(o);
	free(path);
	if (r < 0 && r != -ENOTDIR && r != -EISDIR)
		reply_error(req, d, name, dir ? "rmdir" : "unlink", r, &err);
	else
		fuse_reply_err(req, -r);
}

/* A tree commit at one peer: 0, or the failed operation's error. */
static int member_tree(struct dmar_client *cl, const char *path, void *ctx, struct dmar_error *err)
{
	(void)path;
	int status = 0, r = dmar_client_tree(cl, ctx, &status, NULL, err);
	return r > 0 ? status : r;
}

/* symlink(2) at a peer: a tree commit of that one name (no-replace, as
 * symlink(2) is). */
static void r_symlink(fuse_req_t req, const char *link, struct rinode *d, const char *name)
{
	struct dmarfs *fs = FS(req);
	struct dmar_error err = { 0 };
	struct dmar_tree_body *b = NULL;
	struct dmar_tree_op *op = malloc(sizeof(*op));
	char *path = join(d->path, name);
	size_t tl = strlen(link);
	int r = -ENOMEM;
	if (!op || !path || dmar_tree_body_new(&b) < 0)
		goto out;
	if (!tl || tl > DMAR_TREE_PATH_MAX || strlen(path) > DMAR_TREE_PATH_MAX) {
		r = -ENAMETOOLONG;
		goto out;
	}
	*op = (struct dmar_tree_op){ .kind = DMAR_TREE_SYMLINK, .flags = DMAR_TREE_NOREPLACE,
				     .data = (const uint8_t *)link, .data_len = tl };
	snprintf(op->path, sizeof(op->path), "%s", path);
	if ((r = dmar_tree_body_op(b, op)) < 0)
		goto out;
	if ((r = at_each(fs->remote, d, path, 1, member_tree, b, &err)) < 0)
		goto out;
	struct rinode *ri = rinode_new(fs->remote, d->cl, d->peer, path);
	if (!ri || !(ri->target = strdup(link))) {
		if (ri)
			rinode_free(fs, ri);
		r = -ENOMEM;
		goto out;
	}
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	ri->st = (struct stat){ .st_ino = ri->st_ino, .st_mode = S_IFLNK | 0777, .st_nlink = 1, .st_size = (off_t)tl,
				.st_uid = ctx->uid, .st_gid = ctx->gid, .st_blksize = 4096 };
	ri->st.st_atim = ri->st.st_mtim = ri->st.st_ctim = ns_now();
	ri->st_at = dmar_mono_s();
	rinode_hash(fs->remote, ri);
	reply_rentry(req, fs, ri, NULL);
	r = 1;
out:
	free(op);
	dmar_tree_body_free(b);
	if (r < 0)
		reply_error(req, d, name, "symlink", r, &err);
	free(path);
}

static void r_create(fuse_req_t req, struct rinode *d, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct dmarfs *fs = FS(req);
	char *path = join(d->path, name);
	struct rinode *ri = path ? rinode_new(fs->remote, d->cl, d->peer, path) : NULL;
	free(path);
	if (!ri) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_rwlock_wrlock(&ri->lock);
	/* No O_EXCL probe of the peer here: the kernel calls create only
	 * for a name its dentry says is absent, and that dentry was just
	 * looked up or is cached for RENTRY_TIMEOUT, as a positive one
	 * would be.  A create racing another writer at the peer is settled
	 * by the commit at close, as for any other file. */
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	ri->st = (struct stat){ .st_ino = ri->st_ino, .st_mode = S_IFREG | (mode & 07777), .st_nlink = 1,
				.st_uid = ctx->uid, .st_gid = ctx->gid, .st_blksize = 4096 };
	ri->st.st_atim = ri->st.st_mtim = ri->st.st_ctim = ns_now();
	ri->st_at = dmar_mono_s();
	/* A new file is shipped at its first close even if empty. */
	ri->loaded = ri->dirty = true;
	ri->opens = 1;
	pthread_rwlock_unlock(&ri->lock);
	fi->keep_cache = 0;
	rinode_hash(fs->remote, ri);
	reply_rentry(req, fs, ri, fi);
}

static void r_open(fuse_req_t req, struct rinode *ri, struct fuse_file_info *fi)
{
	struct dmarfs *fs = FS(req);
	struct dmar_error err = { 0 };
	int r = 0;
	pthread_rwlock_wrlock(&ri->lock);
	if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY) {
		if (!ri->st_at && (r = refresh(ri, true, &err)) < 0)
			goto out;
		if (S_ISDIR(ri->st.st_mode)) {
			r = -EISDIR;
			goto out;
		}
		keep_base(fs, ri);
		dmar_file_clear(&ri->f, &fs->cfg.ctx);
		ri->loaded = ri->dirty = true;
		ri->broken = 0;
		ri->st.st_mtim = ns_now();
	} else {
		r = ensure_loaded(fs, ri, &err);
	}
out:
	if (!r)
		ri->opens++;
	pthread_rwlock_unlock(&ri->lock);
	if (r < 0) {
		reply_error(req, ri, NULL, "open", r, &err);
		return;
	}
	/* The peer's file can change under us: no page cache across opens. */
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi) != 0) {
		pthread_rwlock_wrlock(&ri->lock);
		ri->opens--;
		pthread_rwlock_unlock(&ri->lock);
	}
}

static void r_read(fuse_req_t req, struct rinode *ri, size_t size, off_t off)
{
	pthread_rwlock_rdlock(&ri->lock);
	if (ri->loaded)
		fs_reply_read(req, &ri->f, &FS(req)->cfg.ctx, size, off);
	else
		fuse_reply_err(req, EIO);
	pthread_rwlock_unlock(&ri->lock);
}

static void r_write(fuse_req_t req, struct rinode *ri, struct fuse_bufvec *bufv, off_t off, struct fuse_file_info *fi)
{
	struct dmarfs *fs = FS(req);
	size_t size = fuse_buf_size(bufv);
	pthread_rwlock_wrlock(&ri->lock);
	uint64_t at = (fi->flags & O_APPEND) ? ri->f.size : (uint64_t)off;
	int r = ri->loaded ? dmar_file_write_with(&ri->f, &fs->cfg.ctx, at, size, fs_copy_bufvec, bufv) : -EIO;
	if (!r) {
		ri->dirty = true;
		ri->st.st_mtim = ns_now();
	} else if (ri->loaded && !ri->broken) {
		ri->broken = r;
	}
	pthread_rwlock_unlock(&ri->lock);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_write(req, size);
}

static void r_flush(fuse_req_t req, struct rinode *ri)
{
	struct dmarfs *fs = FS(req);
	pthread_rwlock_wrlock(&ri->lock);
	int r = S_ISREG(ri->st.st_mode) ? ship(fs, ri) : 0;
	pthread_rwlock_unlock(&ri->lock);
	fuse_reply_err(req, -r);
}

static void r_release(fuse_req_t req, struct rinode *ri)
{
	struct dmarfs *fs = FS(req);
	pthread_rwlock_wrlock(&ri->lock);
	if (ri->opens)
		ri->opens--;
	ri->idle_since = dmar_mono_s();
	if (!ri->opens && (ri->dirty || ri->broken)) {
		/* Its ship failed (close said so): the changes cannot go
		 * anywhere now. */
		dmar_file_clear(&ri->f, &fs->cfg.ctx);
		dmar_file_clear(&ri->base, &fs->cfg.ctx);
		ri->loaded = ri->dirty = false;
		ri->broken = 0;
		ri->st_at = 0;
	}
	pthread_rwlock_unlock(&ri->lock);
	fuse_reply_err(req, 0);
}

static void r_opendir(fuse_req_t req, struct rinode *ri, struct fuse_file_info *fi)
{
	struct dmarfs *fs = FS(req);
	struct dmar_error err = { 0 };
	json_t *o = NULL;
	unsigned long gen = atomic_load(&ri->rm->names_gen);
	int r = dmar_client_stat(ri->cl, ri->path, &o, &err);
	if (r < 0) {
		reply_error(req, ri, NULL, "opendir", r, &err);
		return;
	}
	json_t *ents = json_object_get(o, "entries");
	if (!json_is_array(ents)) {
		json_decref(o);
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	pthread_rwlock_wrlock(&ri->lock);
	names_set(ri, ents, dmar_mono_s(), gen); /* ls -l: its lstats are answered from these */
	pthread_rwlock_unlock(&ri->lock);
	struct rlisting *l = calloc(1, sizeof(*l));
	size_t n = json_array_size(ents);
	if (l && n && !(l->e = calloc(n, sizeof(*l->e)))) {
		free(l);
		l = NULL;
	}
	for (size_t k = 0; l && k < n; k++) {
		json_t *e = json_array_get(ents, k);
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *type = json_string_value(json_object_get(e, "type"));
		if (!name || !(l->e[l->n].name = strdup(name)))
			continue;
		l->e[l->n].mode = !type ? S_IFREG : !strcmp(type, "dir") ? S_IFDIR : !strcmp(type, "symlink") ? S_IFLNK
													       : S_IFREG;
		l->e[l->n].ino = RINO_BASE + __atomic_add_fetch(&fs->remote->next_ino, 1, __ATOMIC_RELAXED);
		l->n++;
	}
	json_decref(o);
	if (!l) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)l;
	fuse_reply_open(req, fi);
}

static void free_listing(struct rlisting *l)
{
	for (size_t k = 0; l && k < l->n; k++)
		free(l->e[k].name);
	if (l)
		free(l->e);
	free(l);
}

static void r_readdir(fuse_req_t req, struct rinode *ri, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct rlisting *l = (struct rlisting *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	/* Offsets: 1 ".", 2 "..", k + 3 the k-th entry of the listing. */
	for (uint64_t k = (uint64_t)off; k < l->n + 2; k++) {
		struct stat st = { 0 };
		const char *name = k == 0 ? "." : k == 1 ? ".." : l->e[k - 2].name;
		st.st_ino = k < 2 ? ri->st_ino : l->e[k - 2].ino;
		st.st_mode = k < 2 ? S_IFDIR : l->e[k - 2].mode;
		size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)k + 1);
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void r_statfs(fuse_req_t req, struct rinode *ri)
{
	struct dmar_error err = { 0 };
	json_t *o = NULL;
	int r = dmar_client_info(ri->cl, &o, &err);
	if (r < 0) {
		reply_error(req, ri, NULL, "statfs", r, &err);
		return;
	}
	json_t *a = json_object_get(o, "arena");
	uint64_t size = (uint64_t)json_integer_value(json_object_get(a, "size"));
	uint64_t used = (uint64_t)json_integer_value(json_object_get(a, "used"));
	json_decref(o);
	struct statvfs sv = { .f_bsize = 4096, .f_frsize = 4096, .f_namemax = 255 };
	sv.f_blocks = size / 4096;
	sv.f_bfree = sv.f_bavail = (size - (used < size ? used : size)) / 4096;
	fuse_reply_statfs(req, &sv);
}

static void r_readlink(fuse_req_t req, struct rinode *ri)
{
	pthread_rwlock_rdlock(&ri->lock);
	char *t = ri->target ? strdup(ri->target) : NULL;
	pthread_rwlock_unlock(&ri->lock);
	if (!t) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	fuse_reply_readlink(req, t);
	free(t);
}

static void r_fallocate(fuse_req_t req, struct rinode *ri, int mode, off_t off, off_t len)
{
	struct dmarfs *fs = FS(req);
	pthread_rwlock_wrlock(&ri->lock);
	int r = ri->loaded ? dmar_file_fallocate(&ri->f, &fs->cfg.ctx, mode, off, len) : -EIO;
	if (!r)
		ri->dirty = true;
	pthread_rwlock_unlock(&ri->lock);
	fuse_reply_err(req, -r);
}

static void r_lseek(fuse_req_t req, struct rinode *ri, off_t off, int whence)
{
	uint64_t out = 0;
	pthread_rwlock_rdlock(&ri->lock);
	int r = ri->loaded ? dmar_file_lseek(&ri->f, off, whence, &out) : -EIO;
	pthread_rwlock_unlock(&ri->lock);
	fs_reply_lseek(req, r, out);
}

/* ---- the wrapper ---------------------------------------------------------- */

/* A root entry "@NAME" naming a peer (or this node). */
/* The root of @NAME (k: its slot in rm->roots), made at first lookup. */
static struct rinode *root_at(struct dmarfs *fs, size_t k, struct dmar_client *cl, const char *peer)
{
	struct dmarfs_remote *rm = fs->remote;
	pthread_mutex_lock(&rm->lock);
	struct rinode *ri = rm->roots[k];
	pthread_mutex_unlock(&rm->lock);
	if (ri)
		return ri;
	/* Made outside the lock (rinode_new takes it); a racing lookup may
	 * have made one first: keep that one. */
	struct rinode *nr = rinode_new(rm, cl, peer, "");
	if (!nr)
		return NULL;
	nr->keep = true;
	nr->st = (struct stat){ .st_ino = nr->st_ino, .st_mode = S_IFDIR | 0755, .st_nlink = 2 };
	nr->st.st_atim = nr->st.st_mtim = nr->st.st_ctim = ns_now();
	pthread_mutex_lock(&rm->lock);
	if (!rm->roots[k])
		rm->roots[k] = nr;
	ri = rm->roots[k];
	pthread_mutex_unlock(&rm->lock);
	if (ri != nr)
		rinode_free(fs, nr);
	return ri;
}

/* @PEER, or @all: the group (every other peer), whose names are the first
 * member's and whose changes go to every member (a file as a broadcast). */
static struct rinode *peer_root(struct dmarfs *fs, const char *name)
{
	struct dmarfs_remote *rm = fs->remote;
	if (!rm || rm->view || name[0] != '@')
		return NULL;
	struct dmarfs_node *n = rm->node;
	size_t np = dmarfs_node_peer_count(n);
	for (size_t k = 0; k < np; k++) {
		const char *pn = dmarfs_node_peer_name(n, k);
		if (!strcmp(pn, name + 1))
			return root_at(fs, k, dmarfs_node_peer(n, pn), pn);
	}
	if (dmarfs_node_group(n) && !strcmp(name + 1, group_name))
		return root_at(fs, np, dmarfs_node_group(n), group_name);
	return NULL;
}

/* Append the @PEER entries with cookies above off to a listing of the
 * root (ns held). */
static void root_entries(struct dmarfs *fs, fuse_req_t req, char *buf, size_t size, size_t *used, uint64_t off)
{
	struct dmarfs_node *n = fs->remote->node;
	for (size_t k = 0; k < dmarfs_node_peer_count(n); k++) {
		uint64_t cookie = FS_PEER_COOKIE + k + 1;
		if (cookie <= off)
			continue;
		char name[80];
		snprintf(name, sizeof(name), "@%s", dmarfs_node_peer_name(n, k));
		struct stat st = { .st_ino = RINO_BASE - 1 - k, .st_mode = S_IFDIR };
		size_t need = fuse_add_direntry(req, buf + *used, size - *used, name, &st, (off_t)cookie);
		if (need > size - *used)
			return;
		*used += need;
	}
	size_t np = dmarfs_node_peer_count(n);
	uint64_t cookie = FS_PEER_COOKIE + np + 1;
	if (dmarfs_node_group(n) && cookie > off) {
		struct stat st = { .st_ino = RINO_BASE - 1 - np, .st_mode = S_IFDIR };
		size_t need = fuse_add_direntry(req, buf + *used, size - *used, "@" DMARFS_GROUP_ALL, &st, (off_t)cookie);
		if (need <= size - *used)
			*used += need;
	}
}

static bool root_peer_name(struct dmarfs *fs, fuse_ino_t parent, const char *name)
{
	return parent == FUSE_ROOT_ID && peer_root(fs, name) != NULL;
}

static void w_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct dmarfs *fs = FS(req);
	if (is_remote(fs, parent))
		return r_lookup(req, RI(fs, parent), name);
	struct rinode *pr = parent == FUSE_ROOT_ID ? peer_root(fs, name) : NULL;
	if (pr) {
		pthread_rwlock_wrlock(&pr->lock);
		pr->st_at = dmar_mono_s();
		pthread_rwlock_unlock(&pr->lock);
		return reply_rentry(req, fs, pr, NULL);
	}
	L()->lookup(req, parent, name);
}

static void w_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n)
{
	struct dmarfs *fs = FS(req);
	if (!is_remote(fs, ino))
		return L()->forget(req, ino, n);
	forget_remote(fs, RI(fs, ino), n);
	fuse_reply_none(req);
}

static void w_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	struct dmarfs *fs = FS(req);
	/* Local ones in one batch under the namespace lock, remote ones here. */
	pthread_mutex_lock(&fs->ns);
	for (size_t k = 0; k < count; k++)
		if (!is_remote(fs, f[k].ino))
			ns_forget_locked(fs, LI(fs, f[k].ino), f[k].nlookup);
	pthread_mutex_unlock(&fs->ns);
	for (size_t k = 0; k < count; k++)
		if (is_remote(fs, f[k].ino))
			forget_remote(fs, RI(fs, f[k].ino), f[k].nlookup);
	fuse_reply_none(req);
}

#define DISPATCH(ino, remote_call, local_call)                                                                 \
	do {                                                                                                   \
		struct dmarfs *fs_ = FS(req);                                                                  \
		if (is_remote(fs_, ino)) {                                                                     \
			struct rinode *ri = RI(fs_, ino);                                                      \
			remote_call;                                                                           \
		} else {                                                                                       \
			local_call;                                                                            \
		}                                                                                              \
	} while (0)

static void w_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_getattr(req, ri), L()->getattr(req, ino, fi));
}

static void w_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_setattr(req, ri, attr, to_set), L()->setattr(req, ino, attr, to_set, fi));
}

static void w_readlink(fuse_req_t req, fuse_ino_t ino)
{
	DISPATCH(ino, r_readlink(req, ri), L()->readlink(req, ino));
}

static void w_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	if (root_peer_name(FS(req), parent, name))
		return (void)fuse_reply_err(req, EEXIST);
	DISPATCH(parent, ((void)ri, fuse_reply_err(req, EPERM)), L()->mknod(req, parent, name, mode, rdev));
}

static void w_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	if (root_peer_name(FS(req), parent, name))
		return (void)fuse_reply_err(req, EEXIST);
	DISPATCH(parent, r_mkdir(req, ri, name, mode), L()->mkdir(req, parent, name, mode));
}

static void w_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (root_peer_name(FS(req), parent, name))
		return (void)fuse_reply_err(req, EBUSY);
	DISPATCH(parent, r_remove(req, ri, name, false), L()->unlink(req, parent, name));
}

static void w_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (root_peer_name(FS(req), parent, name))
		return (void)fuse_reply_err(req, EBUSY);
	DISPATCH(parent, r_remove(req, ri, name, true), L()->rmdir(req, parent, name));
}

static void w_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	if (root_peer_name(FS(req), parent, name))
		return (void)fuse_reply_err(req, EEXIST);
	DISPATCH(parent, r_symlink(req, link, ri, name), L()->symlink(req, link, parent, name));
}

static void w_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
		     unsigned int flags)
{
	struct dmarfs *fs = FS(req);
	if (root_peer_name(fs, parent, name) || root_peer_name(fs, newparent, newname))
		return (void)fuse_reply_err(req, EBUSY);
	/* EXDEV: mv copies and removes instead, which ships. */
	if (is_remote(fs, parent) || is_remote(fs, newparent))
		return (void)fuse_reply_err(req, EXDEV);
	L()->rename(req, parent, name, newparent, newname, flags);
}

static void w_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct dmarfs *fs = FS(req);
	if (root_peer_name(fs, newparent, newname))
		return (void)fuse_reply_err(req, EEXIST);
	if (is_remote(fs, ino) || is_remote(fs, newparent))
		return (void)fuse_reply_err(req, EXDEV);
	L()->link(req, ino, newparent, newname);
}

static void w_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_open(req, ri, fi), L()->open(req, ino, fi));
}

static void w_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_read(req, ri, size, off), L()->read(req, ino, size, off, fi));
}

static void w_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_write(req, ri, bufv, off, fi), L()->write_buf(req, ino, bufv, off, fi));
}

static void w_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_flush(req, ri), L()->flush(req, ino, fi));
}

static void w_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_release(req, ri), L()->release(req, ino, fi));
}

static void w_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_flush(req, ri), L()->fsync(req, ino, datasync, fi));
}

static void w_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_opendir(req, ri, fi), L()->opendir(req, ino, fi));
}

/* The local root's listing, then its @PEER directories. */
static void root_readdir(fuse_req_t req, size_t size, off_t off)
{
	struct dmarfs *fs = FS(req);
	char *buf = malloc(size);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	size_t used = 0;
	pthread_mutex_lock(&fs->ns);
	if (fs_list_dir(req, fs->root, buf, size, &used, off))
		root_entries(fs, req, buf, size, &used, (uint64_t)off);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void w_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct dmarfs *fs = FS(req);
	if (ino == FUSE_ROOT_ID && fs->remote && !fs->remote->view)
		return root_readdir(req, size, off);
	DISPATCH(ino, r_readdir(req, ri, size, off, fi), L()->readdir(req, ino, size, off, fi));
}

static void w_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (is_remote(FS(req), ino))
		free_listing((struct rlisting *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void w_statfs(fuse_req_t req, fuse_ino_t ino)
{
	DISPATCH(ino, r_statfs(req, ri), L()->statfs(req, ino));
}

static void w_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	DISPATCH(ino, ((void)ri, fuse_reply_err(req, ENOTSUP)), L()->setxattr(req, ino, name, value, size, flags));
}

static void w_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	DISPATCH(ino, ((void)ri, fuse_reply_err(req, ENOTSUP)), L()->getxattr(req, ino, name, size));
}

static void w_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	DISPATCH(ino, ((void)ri, size ? fuse_reply_buf(req, NULL, 0) : fuse_reply_xattr(req, 0)),
		 L()->listxattr(req, ino, size));
}

static void w_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	DISPATCH(ino, ((void)ri, fuse_reply_err(req, ENOTSUP)), L()->removexattr(req, ino, name));
}

static void w_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	if (root_peer_name(FS(req), parent, name))
		return (void)fuse_reply_err(req, EEXIST);
	DISPATCH(parent, r_create(req, ri, name, mode, fi), L()->create(req, parent, name, mode, fi));
}

static void w_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_fallocate(req, ri, mode, off, len), L()->fallocate(req, ino, mode, off, len, fi));
}

static void w_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	DISPATCH(ino, r_lseek(req, ri, off, whence), L()->lseek(req, ino, off, whence, fi));
}

/*
 * copy_file_range between a local and a remote file (or two remote ones)
 * shares chunks: from a local file into @PEER/ no file bytes are copied,
 * and the ship at close sends only the chunks the peer lacks.
 */
static void w_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			      fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	struct dmarfs *fs = FS(req);
	bool rin = is_remote(fs, ino_in), rout = is_remote(fs, ino_out);
	if (!rin && !rout)
		return L()->copy_file_range(req, ino_in, off_in, fi_in, ino_out, off_out, fi_out, len, flags);
	if (flags)
		return (void)fuse_reply_err(req, EINVAL);
	struct rinode *a = rin ? RI(fs, ino_in) : NULL, *b = rout ? RI(fs, ino_out) : NULL;
	if (a && a == b)
		return (void)fuse_reply_err(req, EINVAL); /* within one remote file: let cp copy */
	if (!rin)
		ns_encode_source(fs, LI(fs, ino_in));
	/* Remote inodes first (in address order), then the local one. */
	struct rinode *r1 = a && b ? (a < b ? a : b) : a ? a : b, *r2 = a && b ? (a < b ? b : a) : NULL;
	pthread_rwlock_wrlock(&r1->lock);
	if (r2)
		pthread_rwlock_wrlock(&r2->lock);
	struct inode *li = !rin ? LI(fs, ino_in) : !rout ? LI(fs, ino_out) : NULL;
	if (li)
		pthread_rwlock_wrlock(&li->lock);
	struct dmar_file *src = a ? &a->f : &li->f, *dst = b ? &b->f : &li->f;
	ssize_t n;
	if ((a && !a->loaded) || (b && !b->loaded))
		n = -EIO;
	else
		n = dmar_file_share(dst, src, &fs->cfg.ctx, (uint64_t)off_out, (uint64_t)off_in, len);
	if (n > 0 && b) {
		b->dirty = true;
		b->st.st_mtim = ns_now();
	} else if (n < 0 && b && b->loaded && !b->broken) {
		b->broken = (int)n;
	} else if (n > 0) {
		li->mtime = li->ctime = ns_now();
	}
	if (li)
		pthread_rwlock_unlock(&li->lock);
	if (r2)
		pthread_rwlock_unlock(&r2->lock);
	pthread_rwlock_unlock(&r1->lock);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void w_init(void *userdata, struct fuse_conn_info *conn)
{
	L()->init(userdata, conn);
}

static void w_destroy(void *userdata)
{
	L()->destroy(userdata);
}

static const struct fuse_lowlevel_ops wrapped = {
	.init = w_init,
	.destroy = w_destroy,
	.lookup = w_lookup,
	.forget = w_forget,
	.forget_multi = w_forget_multi,
	.getattr = w_getattr,
	.setattr = w_setattr,
	.readlink = w_readlink,
	.mknod = w_mknod,
	.mkdir = w_mkdir,
	.unlink = w_unlink,
	.rmdir = w_rmdir,
	.symlink = w_symlink,
	.rename = w_rename,
	.link = w_link,
	.open = w_open,
	.read = w_read,
	.write_buf = w_write_buf,
	.flush = w_flush,
	.release = w_release,
	.fsync = w_fsync,
	.opendir = w_opendir,
	.readdir = w_readdir,
	.releasedir = w_releasedir,
	.statfs = w_statfs,
	.setxattr = w_setxattr,
	.getxattr = w_getxattr,
	.listxattr = w_listxattr,
	.removexattr = w_removexattr,
	.create = w_create,
	.fallocate = w_fallocate,
	.copy_file_range = w_copy_file_range,
	.lseek = w_lseek,
};

const struct fuse_lowlevel_ops *dmarfs_ops(void)
{
	return &wrapped;
}

/* For the check (check.h): the copies of peers' files held here. */
static double cache_seconds(void)
{
	static uint64_t v;
	return (double)ns_env_knob("DMARFS_REMOTE_CACHE_SECONDS", REMOTE_CACHE_SECONDS, &v);
}

/* Drop the copies of peers' files nobody has open, idle since before
 * `before`: how many went.  Only tries the locks: the arena's reclaimer
 * (shed) runs on a thread that may hold some of them. */
static size_t cache_drop(struct dmarfs *fs, double before)
{
	struct dmarfs_remote *rm = fs->remote;
	size_t gone = 0;
	if (!rm || pthread_mutex_trylock(&rm->lock) != 0)
		return 0;
	for (struct rinode *ri = rm->all; ri; ri = ri->next) {
		if (pthread_rwlock_trywrlock(&ri->lock) != 0)
			continue;
		if (ri->loaded && !ri->opens && !ri->dirty && !ri->broken && ri->idle_since <= before) {
			dmar_file_clear(&ri->f, &fs->cfg.ctx);
			dmar_file_clear(&ri->base, &fs->cfg.ctx);
			ri->loaded = false;
			gone++;
		}
		pthread_rwlock_unlock(&ri->lock);
	}
	pthread_mutex_unlock(&rm->lock);
	return gone;
}

static void cache_tick(void *ctx)
{
	cache_drop(ctx, dmar_mono_s() - cache_seconds());
}

static size_t cache_shed(void *ctx)
{
	return cache_drop(ctx, HUGE_VAL);
}

static void remote_refs(void *ctx, const struct dmar_file_refs *r)
{
	struct dmarfs *fs = ctx;
	struct dmarfs_remote *rm = fs->remote;
	if (!rm)
		return;
	pthread_mutex_lock(&rm->lock);
	for (struct rinode *ri = rm->all; ri; ri = ri->next) {
		pthread_rwlock_rdlock(&ri->lock);
		dmar_file_refs(&ri->f, r);
		dmar_file_refs(&ri->base, r);
		pthread_rwlock_unlock(&ri->lock);
	}
	pthread_mutex_unlock(&rm->lock);
}

int dmarfs_remote_new(struct dmarfs *fs, struct dmarfs_node *node, const char *view, struct dmar_error *err)
{
	struct dmarfs_remote *rm = calloc(1, sizeof(*rm));
	if (!rm)
		return -ENOMEM;
	rm->fs = fs;
	rm->node = node;
	pthread_mutex_init(&rm->lock, NULL);
	pthread_mutex_init(&rm->changes_lock, NULL);
	size_t np = dmarfs_node_peer_count(node);
	if (!(rm->roots = calloc(np + 1, sizeof(*rm->roots)))) { /* and the group's */
		free(rm);
		return -ENOMEM;
	}
	if (view) {
		struct dmar_client *cl = dmarfs_node_peer(node, view);
		if (!cl) {
			free(rm->roots);
			free(rm);
			return dmar_error_set(err, -EINVAL, "view=%s: no such peer in the peers file", view);
		}
		for (size_t k = 0; k < np; k++)
			if (!strcmp(dmarfs_node_peer_name(node, k), view))
				view = dmarfs_node_peer_name(node, k); /* the node's copy outlives ours */
		if (!(rm->view = rinode_new(rm, cl, view, ""))) {
			free(rm->roots);
			free(rm);
			return -ENOMEM;
		}
		rm->view->keep = true;
		rm->view->st = (struct stat){ .st_ino = 1, .st_mode = S_IFDIR | 0755, .st_nlink = 2 };
		rm->view->st.st_atim = rm->view->st.st_mtim = rm->view->st.st_ctim = ns_now();
	}
	fs->remote = rm;
	ns_add_owner(fs, remote_refs, cache_tick, cache_shed, fs);
	return 0;
}

void dmarfs_stop(struct dmarfs *fs)
{
	idle_stop(fs);
	dmarfs_remote_free(fs);
}

void dmarfs_remote_free(struct dmarfs *fs)
{
	struct dmarfs_remote *rm = fs->remote;
	if (!rm)
		return;
	while (rm->all) {
		struct rinode *ri = rm->all;
		rm->all = ri->next;
		rinode_destroy(fs, ri);
	}
	for (unsigned k = 0; k < RNEG_SLOTS; k++)
		free(rm->neg[k].path);
	free(rm->roots);
	for (unsigned k = 0; k < CHANGES_KEPT; k++)
		free(rm->changes[k].path);
	pthread_mutex_destroy(&rm->changes_lock);
	pthread_mutex_destroy(&rm->lock);
	free(rm);
	fs->remote = NULL;
}
