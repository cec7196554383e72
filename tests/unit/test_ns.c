/* SPDX-License-Identifier: MIT */
/*
 * test_ns - the namespace core of a mount without a mount (dmarfs/ns.h,
 * persist.h, check.h): the rules of each change, and the tree a crash
 * leaves, replayed from the arena's journal.
 *
 * Each test runs over a named arena in a directory of its own on tmpfs
 * (DMARFS_RUNDIR).  A "crash" frees the process's structures and keeps
 * the arena as it is, without the checkpoint a clean end writes: what the
 * next attach finds is what kill -9 would have left.
 *
 * With DMAR_JOURNAL_SEEDS=DIR, the journals of the replay tests are also
 * written to DIR as inputs of tests/fuzz/fuzz_journal (its seed corpus).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include "prng.h"
#include "arena/journal.h"
#include "dmarfs/check.h"
#include "dmarfs/idle.h"
#include "dmarfs/ns.h"
#include "dmarfs/persist.h"

#define ARENA_SIZE (64u << 20)

static char rundir[128];

static int setup(void **state)
{
	(void)state;
	snprintf(rundir, sizeof(rundir), "/dev/shm/dmarfs-test-ns.%d", (int)getpid());
	setenv("DMARFS_RUNDIR", rundir, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rundir);
	return system(cmd) == 0 ? 0 : -1;
}

struct mnt {
	struct dmar_arena *a;
	struct dmar_journal *j;
	struct dmarfs *fs;
	struct persist_stats ps;
};

/* Attach arena name (fresh: a new one) and rebuild its tree; want is
 * persist_attach's return, msg a part of its message. */
static void mnt_open_want(struct mnt *m, const char *name, bool fresh, int want, const char *msg)
{
	struct dmar_arena_opts o = { .size = ARENA_SIZE, .pagesize = 4096, .name = name, .fresh = fresh,
				     .keep = true, .owner = "/test" };
	struct dmar_error err = { 0 };
	memset(m, 0, sizeof(*m));
	int r = dmar_arena_new(&m->a, &o, &err);
	if (r)
		fail_msg("arena %s: %s", name, err.msg);
	assert_int_equal(dmar_arena_attached(m->a), !fresh);
	assert_int_equal(dmar_journal_open(&m->j, m->a, &err), 0);
	struct dmarfs_config cfg = {
		.ctx = { .arena = m->a, .encode = DMAR_ENCODE_DEDUP },
		.nr_inodes = 10000,
		.root_mode = 0755,
		.journal = m->j,
	};
	/* Small chunks: a file of a few hundred KiB makes many. */
	dmar_chunker_init(&cfg.ctx.chunker, 2048, 8192, 32768);
	assert_int_equal(dmarfs_new(&m->fs, &cfg), 0);
	if (fresh)
		return;
	r = persist_attach(m->fs, &m->ps, &err);
	if (r != want)
		fail_msg("attach of %s: %d (%s), expected %d", name, r, err.msg, want);
	if (msg && !strstr(err.msg, msg))
		fail_msg("attach of %s: message \"%s\", expected one with \"%s\"", name, err.msg, msg);
}

static void mnt_open(struct mnt *m, const char *name, bool fresh)
{
	mnt_open_want(m, name, fresh, 0, NULL);
}

/* The end of a process: with clean, the checkpoint of a clean umount
 * with keep first; without, what kill -9 leaves. */
static void mnt_close(struct mnt *m, bool clean)
{
	if (clean)
		assert_true(persist_checkpoint(m->fs, true) >= 0);
	dmarfs_free(m->fs);
	dmar_journal_free(m->j);
	dmar_arena_free(m->a);
	memset(m, 0, sizeof(*m));
}

static void mnt_drop(struct mnt *m)
{
	dmar_arena_remove(m->a);
	mnt_close(m, false);
}

static void assert_adds_up(struct mnt *m)
{
	char *rep = NULL;
	int r = dmarfs_check(m->fs, &rep);
	if (r)
		fail_msg("check: %d: %s", r, rep ? rep : "");
	assert_non_null(strstr(rep, "state=ok"));
	free(rep);
}

/* ---- helpers over the core ------------------------------------------- */

static struct inode *make(struct mnt *m, struct inode *d, const char *name, mode_t mode, const char *target)
{
	struct inode *i = NULL;
	int r = ns_make(m->fs, d, name, mode, 0, target, 1000, 1000, &i);
	if (r)
		fail_msg("make %s: %s", name, strerror(-r));
	ns_forget(m->fs, i, 1); /* the tree holds it */
	return i;
}

static struct inode *look(struct mnt *m, struct inode *d, const char *name)
{
	struct inode *i = NULL;
	int r = ns_lookup(m->fs, d, name, &i);
	if (r)
		fail_msg("lookup %s: %s", name, strerror(-r));
	ns_forget(m->fs, i, 1);
	return i;
}

static int copy_from(void *ctx, uint8_t *dst, size_t len)
{
	const uint8_t **p = ctx;
	memcpy(dst, *p, len);
	*p += len;
	return 0;
}

/* Write buf at off, as a FUSE write does; sync: then as close does. */
static void put(struct mnt *m, struct inode *i, uint64_t off, const void *buf, size_t len, bool sync)
{
	const uint8_t *p = buf;
	pthread_rwlock_wrlock(&i->lock);
	assert_int_equal(dmar_file_write_with(&i->f, &m->fs->cfg.ctx, off, len, copy_from, &p), 0);
	i->mtime = i->ctime = ns_now();
	pthread_rwlock_unlock(&i->lock);
	if (sync)
		assert_int_equal(persist_sync(m->fs, i), 0);
}

/* All of i's bytes, malloc'd. */
static uint8_t *slurp(struct mnt *m, struct inode *i, size_t *len)
{
	pthread_rwlock_rdlock(&i->lock);
	size_t n = (size_t)i->f.size;
	uint8_t *out = malloc(n + 1), *scratch = malloc(65536);
	assert_non_null(out);
	assert_non_null(scratch);
	size_t at = 0;
	while (at < n) {
		struct iovec iov[64];
		size_t got = 0;
		int k = dmar_file_read_iov(&i->f, &m->fs->cfg.ctx, at, n - at < 65536 ? n - at : 65536, iov, 64,
					   scratch, &got);
		assert_true(k >= 0);
		assert_true(got > 0);
		size_t o = at;
		for (int v = 0; v < k; v++) {
			memcpy(out + o, iov[v].iov_base, iov[v].iov_len);
			o += iov[v].iov_len;
		}
		assert_int_equal(o - at, got);
		at += got;
	}
	pthread_rwlock_unlock(&i->lock);
	free(scratch);
	*len = n;
	return out;
}

/* ---- a tree as text: one sorted line per path ------------------------ */

struct lines {
	char **v;
	size_t n, cap;
};

static void add_line(struct lines *l, char *s)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		assert_non_null(l->v);
	}
	l->v[l->n++] = s;
}

static uint64_t fnv(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t k = 0; k < n; k++)
		h = (h ^ p[k]) * 1099511628211ull;
	return h;
}

static void walk(struct mnt *m, struct inode *d, const char *path, struct lines *l)
{
	size_t pos = 0;
	struct dmar_dirent *e;
	while ((e = dmar_dir_next(&d->dir, &pos))) {
		struct inode *i = ENTRY_INO(e);
		char p[1024], what[128] = "", xa[512] = "";
		snprintf(p, sizeof(p), "%s/%s", path, e->name);
		if (S_ISREG(i->mode)) {
			size_t n;
			uint8_t *b = slurp(m, i, &n);
			snprintf(what, sizeof(what), "size=%zu data=%016llx", n, (unsigned long long)fnv(b, n));
			free(b);
		} else if (S_ISLNK(i->mode)) {
			snprintf(what, sizeof(what), "-> %s", i->target);
		}
		for (size_t k = 0; k < i->nxa; k++) {
			size_t o = strlen(xa);
			snprintf(xa + o, sizeof(xa) - o, " %s=%.*s", i->xa[k].name, (int)i->xa[k].len,
				 (const char *)i->xa[k].value);
		}
		char *s = NULL;
		assert_true(asprintf(&s, "%s ino=%llu mode=%o uid=%u gid=%u nlink=%u mtime=%lld.%09ld %s%s", p,
				     (unsigned long long)i->st_ino, (unsigned)i->mode, (unsigned)i->uid,
				     (unsigned)i->gid, (unsigned)i->nlink, (long long)i->mtime.tv_sec,
				     i->mtime.tv_nsec, what, xa) > 0);
		add_line(l, s);
		if (S_ISDIR(i->mode))
			walk(m, i, p, l);
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *tree(struct mnt *m)
{
	struct lines l = { 0 };
	walk(m, m->fs->root, "", &l);
	if (l.n) /* an empty tree has no list */
		qsort(l.v, l.n, sizeof(*l.v), cmp_str);
	size_t len = 1;
	for (size_t k = 0; k < l.n; k++)
		len += strlen(l.v[k]) + 1;
	char *out = malloc(len), *p = out;
	*p = 0;
	for (size_t k = 0; k < l.n; k++) {
		p += sprintf(p, "%s\n", l.v[k]);
		free(l.v[k]);
	}
	free(l.v);
	return out;
}

static void assert_tree(struct mnt *m, const char *want)
{
	char *got = tree(m);
	if (strcmp(got, want)) {
		fprintf(stderr, "tree after attach:\n%s\nexpected:\n%s", got, want);
		fail_msg("the tree after attach differs (above)");
	}
	free(got);
}

/* DMAR_JOURNAL_SEEDS: name's journal as a fuzz_journal input (a u32
 * length before each record). */
struct seed {
	FILE *f;
};

static int seed_record(void *ctx, uint64_t seq, const void *rec, size_t len)
{
	struct seed *s = ctx;
	(void)seq;
	uint32_t n = (uint32_t)len;
	fwrite(&n, sizeof(n), 1, s->f);
	fwrite(rec, 1, len, s->f);
	return 0;
}

static void dump_seed(const char *name, const char *file)
{
	const char *dir = getenv("DMAR_JOURNAL_SEEDS");
	if (!dir)
		return;
	struct dmar_arena_opts o = { .size = ARENA_SIZE, .pagesize = 4096, .name = name, .keep = true };
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;
	struct dmar_journal *j = NULL;
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	struct seed s = { fopen(path, "w") };
	assert_non_null(s.f);
	assert_int_equal(dmar_arena_new(&a, &o, &err), 0);
	assert_int_equal(dmar_journal_open(&j, a, &err), 0);
	assert_int_equal(dmar_journal_replay(j, seed_record, &s, &err), 0);
	fclose(s.f);
	dmar_journal_free(j);
	dmar_arena_free(a);
}

/* ---- the rules of each change ---------------------------------------- */

static void test_rules(void **state)
{
	(void)state;
	struct mnt m;
	mnt_open(&m, "rules", true);
	struct dmarfs *fs = m.fs;
	struct inode *root = fs->root, *i = NULL;
	struct inode *d = make(&m, root, "d", S_IFDIR | 0755, NULL);
	struct inode *f = make(&m, root, "f", S_IFREG | 0644, NULL);
	assert_int_equal(ns_make(fs, root, "d", S_IFREG | 0644, 0, NULL, 0, 0, &i), -EEXIST);
	assert_int_equal(ns_make(fs, f, "x", S_IFREG | 0644, 0, NULL, 0, 0, &i), -ENOTDIR);
	char longname[300];
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_int_equal(ns_make(fs, root, longname, S_IFREG | 0644, 0, NULL, 0, 0, &i), -ENAMETOOLONG);
	assert_int_equal(ns_lookup(fs, root, "nothing", &i), -ENOENT);
	assert_int_equal(ns_lookup(fs, f, "x", &i), -ENOTDIR);

	/* unlink(2) and rmdir(2) tell a directory from a file. */
	make(&m, d, "inner", S_IFREG | 0600, NULL);
	assert_int_equal(ns_remove(fs, root, "d", NS_FILE), -EISDIR);
	assert_int_equal(ns_remove(fs, root, "f", NS_DIR), -ENOTDIR);
	assert_int_equal(ns_remove(fs, root, "d", NS_DIR), -ENOTEMPTY);
	assert_int_equal(ns_remove(fs, root, "d", NS_ANY), -ENOTEMPTY);
	assert_int_equal(ns_remove(fs, root, "gone", NS_ANY), -ENOENT);

	/* A set-group-ID directory gives its group to what is made in it,
	 * and its bit to directories. */
	struct inode *g = NULL;
	assert_int_equal(ns_make(fs, root, "sgid", S_IFDIR | 02775, 0, NULL, 1000, 4242, &g), 0);
	ns_forget(fs, g, 1);
	struct inode *gd = make(&m, g, "sub", S_IFDIR | 0755, NULL);
	struct inode *gf = make(&m, g, "file", S_IFREG | 0644, NULL);
	assert_int_equal(gd->gid, 4242);
	assert_true(gd->mode & S_ISGID);
	assert_int_equal(gf->gid, 4242);
	assert_false(gf->mode & S_ISGID);

	/* rename(2) and its flags */
	make(&m, root, "a", S_IFREG | 0644, NULL);
	make(&m, root, "b", S_IFREG | 0644, NULL);
	struct inode *a = look(&m, root, "a"), *b = look(&m, root, "b");
	assert_int_equal(ns_rename(fs, root, "a", root, "b", RENAME_NOREPLACE, 0, 0), -EEXIST);
	assert_int_equal(ns_rename(fs, root, "a", root, "b", RENAME_EXCHANGE, 0, 0), 0);
	assert_ptr_equal(look(&m, root, "a"), b);
	assert_ptr_equal(look(&m, root, "b"), a);
	assert_int_equal(ns_rename(fs, root, "a", root, "zz", RENAME_EXCHANGE, 0, 0), -ENOENT);
	assert_int_equal(ns_rename(fs, root, "d", d, "self", 0, 0, 0), -EINVAL);
	assert_int_equal(ns_rename(fs, root, "f", root, "d", 0, 0, 0), -EISDIR);
	assert_int_equal(ns_rename(fs, root, "sgid", root, "f", 0, 0, 0), -ENOTDIR);
	assert_int_equal(ns_rename(fs, root, "sgid", root, "d", 0, 0, 0), -ENOTEMPTY);
	assert_int_equal(ns_rename(fs, root, "a", root, "b", 0, 0, 0), 0);
	assert_int_equal(ns_lookup(fs, root, "a", &i), -ENOENT);
	/* RENAME_WHITEOUT: the old name becomes a 0:0 character device of
	 * the caller's; not with RENAME_EXCHANGE */
	assert_int_equal(ns_rename(fs, root, "b", root, "wb", RENAME_WHITEOUT, 1000, 1001), 0);
	struct inode *wo = look(&m, root, "b");
	assert_true(S_ISCHR(wo->mode) && wo->rdev == 0 && wo->uid == 1000 && wo->gid == 1001);
	assert_ptr_equal(look(&m, root, "wb"), b);
	assert_int_equal(ns_rename(fs, root, "wb", root, "b", RENAME_WHITEOUT | RENAME_EXCHANGE, 0, 0), -EINVAL);
	assert_int_equal(ns_remove(fs, root, "b", NS_FILE), 0);
	assert_int_equal(ns_remove(fs, root, "wb", NS_FILE), 0);
	/* "@..." is the peers' at the root, and only there */
	assert_int_equal(ns_make(fs, root, "@peer", S_IFDIR | 0755, 0, NULL, 0, 0, &i), -EINVAL);
	assert_int_equal(ns_link(fs, f, root, "@link", &i), -EINVAL);
	assert_int_equal(ns_rename(fs, root, "sgid", root, "@s", 0, 0, 0), -EINVAL);
	struct inode *atf = make(&m, d, "@fine", S_IFREG | 0644, NULL);
	assert_non_null(atf);
	assert_int_equal(ns_rename(fs, d, "@fine", root, "@b", 0, 0, 0), -EINVAL);
	assert_int_equal(ns_remove(fs, d, "@fine", NS_FILE), 0);
	/* a name longer than NAME_MAX is too long, not absent */
	assert_int_equal(ns_lookup(fs, root, longname, &i), -ENAMETOOLONG);

	/* link(2): not of a directory */
	assert_int_equal(ns_link(fs, d, root, "dlink", &i), -EPERM);
	assert_int_equal(ns_link(fs, f, d, "flink", &i), 0);
	ns_forget(fs, i, 1);
	assert_int_equal(ns_nlink(fs, f), 2);
	assert_int_equal(ns_remove(fs, root, "f", NS_FILE), 0);
	assert_int_equal(ns_nlink(fs, f), 1);

	/* xattrs: user.* only, the dmar views read-only */
	assert_int_equal(ns_setxattr(fs, f, "trusted.x", "1", 1, 0), -EOPNOTSUPP);
	assert_int_equal(ns_setxattr(fs, f, "user.dmar.state", "1", 1, 0), -EPERM);
	assert_int_equal(ns_setxattr(fs, f, "user.k", "v", 1, XATTR_REPLACE), -ENODATA);
	assert_int_equal(ns_setxattr(fs, f, "user.k", "v", 1, XATTR_CREATE), 0);
	assert_int_equal(ns_setxattr(fs, f, "user.k", "w", 1, XATTR_CREATE), -EEXIST);
	char v[8];
	assert_int_equal(ns_getxattr(fs, f, "user.k", v, sizeof(v)), 1);
	assert_int_equal(v[0], 'v');
	assert_int_equal(ns_removexattr(fs, f, "user.k"), 0);
	assert_int_equal(ns_removexattr(fs, f, "user.k"), -ENODATA);

	/* setattr: a size is for regular files */
	struct ns_attr at = { .set = NS_SET_SIZE, .size = 10 };
	struct stat st;
	assert_int_equal(ns_setattr(fs, d, &at, &st), -EISDIR);
	assert_int_equal(ns_setattr(fs, f, &at, &st), 0);
	assert_int_equal(st.st_size, 10);

	/* paths, as the REST API walks them */
	char leaf[256];
	assert_int_equal(ns_walk(fs, "d/flink", &i), 0);
	assert_ptr_equal(i, f);
	ns_forget(fs, i, 1);
	assert_int_equal(ns_walk(fs, "d/flink/x", &i), -ENOTDIR);
	assert_int_equal(ns_walk(fs, "d/none", &i), -ENOENT);
	assert_int_equal(ns_walk_parent(fs, "sgid/sub/new", &i, leaf), 0);
	assert_ptr_equal(i, gd);
	assert_string_equal(leaf, "new");
	ns_forget(fs, i, 1);

	assert_adds_up(&m);
	mnt_drop(&m);
}

/* ---- replay ------------------------------------------------------------ */

/* A tree with one of everything, some of it changed after its sync. */
static void build(struct mnt *m, uint8_t *big, size_t bigsz)
{
	struct dmarfs *fs = m->fs;
	struct inode *root = fs->root;
	struct inode *d = make(m, root, "dir", S_IFDIR | 0750, NULL);
	struct inode *sub = make(m, d, "sub", S_IFDIR | 0700, NULL);
	make(m, root, "link", S_IFLNK | 0777, "dir/sub/../file");
	make(m, d, "fifo", S_IFIFO | 0600, NULL);

	/* encoded: chunks, one of them shared by the copy below */
	struct inode *w = make(m, d, "weights.bin", S_IFREG | 0644, NULL);
	put(m, w, 0, big, bigsz, true);
	assert_int_equal(ns_encode(fs, w, &fs->cfg.ctx, 3), 0);
	struct inode *w2 = make(m, sub, "weights-copy.bin", S_IFREG | 0644, NULL);
	put(m, w2, 0, big, bigsz, true);
	assert_int_equal(ns_encode(fs, w2, &fs->cfg.ctx, 3), 0);
	/* ... then partly rewritten in place, synced, not encoded: RAW over
	 * chunks */
	put(m, w2, 4096, "rewritten", 9, true);

	/* RAW, small */
	struct inode *s = make(m, root, "small.txt", S_IFREG | 0600, NULL);
	put(m, s, 0, "hello, arena\n", 13, true);
	/* a sparse file: a hole, then bytes */
	struct inode *h = make(m, root, "sparse", S_IFREG | 0644, NULL);
	put(m, h, 1 << 20, "end", 3, true);

	/* attributes and xattrs */
	assert_int_equal(ns_setxattr(fs, s, "user.origin", "unit-test", 9, 0), 0);
	assert_int_equal(ns_setxattr(fs, d, "user.gone", "x", 1, 0), 0);
	assert_int_equal(ns_removexattr(fs, d, "user.gone"), 0);
	struct ns_attr at = { .set = NS_SET_MODE, .mode = 0640 };
	struct stat st;
	assert_int_equal(ns_setattr(fs, s, &at, &st), 0);
	at = (struct ns_attr){ .set = NS_SET_SIZE, .size = 5 };
	assert_int_equal(ns_setattr(fs, h, &at, &st), 0); /* no fd open: recorded at once */

	/* names: hard link, renames, an exchange, removals */
	struct inode *i = NULL;
	assert_int_equal(ns_link(fs, s, sub, "small-link", &i), 0);
	ns_forget(fs, i, 1);
	make(m, root, "tmp", S_IFREG | 0644, NULL);
	assert_int_equal(ns_rename(fs, root, "tmp", d, "renamed", 0, 0, 0), 0);
	make(m, root, "x", S_IFDIR | 0755, NULL);
	make(m, root, "y", S_IFREG | 0644, NULL);
	assert_int_equal(ns_rename(fs, root, "x", root, "y", RENAME_EXCHANGE, 0, 0), 0);
	make(m, root, "doomed", S_IFREG | 0644, NULL);
	put(m, look(m, root, "doomed"), 0, big, 65536, true);
	assert_int_equal(ns_remove(fs, root, "doomed", NS_FILE), 0);
	make(m, root, "emptydir", S_IFDIR | 0755, NULL);
	assert_int_equal(ns_remove(fs, root, "emptydir", NS_DIR), 0);
	/* a file replaced by a rename over it */
	struct inode *o = make(m, root, "old", S_IFREG | 0644, NULL);
	put(m, o, 0, big + 1000, 70000, true);
	struct inode *n = make(m, root, "new", S_IFREG | 0644, NULL);
	put(m, n, 0, big + 5000, 50000, true);
	assert_int_equal(ns_encode(fs, n, &fs->cfg.ctx, 3), 0);
	assert_int_equal(ns_rename(fs, root, "new", root, "old", 0, 0, 0), 0);
	/* a rename that leaves a whiteout: both in one record */
	make(m, root, "upper", S_IFREG | 0644, NULL);
	assert_int_equal(ns_rename(fs, root, "upper", sub, "moved", RENAME_WHITEOUT, 7, 8), 0);
}

static void test_replay(void **state)
{
	(void)state;
	size_t bigsz = 300000;
	uint8_t *big = malloc(bigsz);
	uint64_t seed = 42;
	for (size_t k = 0; k < bigsz; k++)
		big[k] = (uint8_t)(xorshift64(&seed) >> 17);
	struct mnt m;
	mnt_open(&m, "replay", true);
	/* what an empty tree holds: the superblock, a checkpoint's log and
	 * the journal's spare segment */
	assert_int_equal(persist_checkpoint(m.fs, true), 1);
	uint64_t empty = dmar_arena_used(m.a);
	build(&m, big, bigsz);
	/* Written, not synced: a crash loses it.  The file shows its last
	 * sync: chunks rewritten (copy on write), bytes appended; a file
	 * never synced is empty, as it was made.  (Bytes rewritten in place
	 * in RAW memory may show either: persist.h.) */
	struct inode *u = make(&m, m.fs->root, "unsynced", S_IFREG | 0644, NULL);
	char *want = tree(&m);
	put(&m, look(&m, m.fs->root, "small.txt"), 13, "appended", 8, false);
	put(&m, look(&m, look(&m, m.fs->root, "dir"), "weights.bin"), 100, "HELLO", 5, false);
	put(&m, u, 0, big, 4096, false);
	assert_adds_up(&m);
	mnt_close(&m, false); /* kill -9 */

	dump_seed("replay", "tree");
	mnt_open(&m, "replay", false);
	assert_true(m.ps.records > 0);
	assert_tree(&m, want);
	assert_adds_up(&m);
	/* and once more from the checkpoint a clean end writes */
	mnt_close(&m, true);
	dump_seed("replay", "checkpoint");
	mnt_open(&m, "replay", false);
	assert_tree(&m, want);
	assert_adds_up(&m);

	/* Everything removed: the arena is back to what an empty tree
	 * holds, once a checkpoint has dropped the history. */
	const char *top[] = { "dir", "link", "small.txt", "sparse", "x", "y", "old", "unsynced", "upper" };
	struct inode *d = look(&m, m.fs->root, "dir");
	struct inode *sub = look(&m, d, "sub");
	assert_int_equal(ns_remove(m.fs, sub, "weights-copy.bin", NS_FILE), 0);
	assert_int_equal(ns_remove(m.fs, sub, "small-link", NS_FILE), 0);
	assert_int_equal(ns_remove(m.fs, sub, "moved", NS_FILE), 0);
	assert_int_equal(ns_remove(m.fs, d, "sub", NS_DIR), 0);
	for (const char *const *n = (const char *const[]){ "fifo", "weights.bin", "renamed", NULL }; *n; n++)
		assert_int_equal(ns_remove(m.fs, d, *n, NS_FILE), 0);
	for (size_t k = 0; k < sizeof(top) / sizeof(*top); k++)
		assert_int_equal(ns_remove(m.fs, m.fs->root, top[k], NS_ANY), 0);
	assert_int_equal(persist_checkpoint(m.fs, true), 1);
	assert_adds_up(&m);
	mnt_close(&m, false);
	mnt_open(&m, "replay", false);
	assert_tree(&m, "");
	assert_adds_up(&m);
	assert_int_equal(persist_checkpoint(m.fs, true), 1);
	uint64_t used = dmar_arena_used(m.a);
	if (used != empty)
		fail_msg("arena used %llu bytes after everything went, %llu when new",
			 (unsigned long long)used, (unsigned long long)empty);
	mnt_drop(&m);
	free(want);
	free(big);
}

/* ---- journals that do not add up are refused -------------------------- */

/* Append raw records to a fresh arena's journal, then attach it. */
static void refused(const char *name, const void *rec, size_t len, const char *msg)
{
	struct mnt m;
	mnt_open(&m, name, true);
	struct iovec iov = { (void *)rec, len };
	assert_int_equal(dmar_journal_append(m.j, &iov, 1, false), 0);
	mnt_close(&m, false);
	char seed[64];
	snprintf(seed, sizeof(seed), "refused-%s", name);
	dump_seed(name, seed);
	mnt_open_want(&m, name, false, -EUCLEAN, msg);
	mnt_drop(&m);
}

static void test_refused(void **state)
{
	(void)state;
	/* op: type, 3 zero bytes, u32 body length, body */
	const uint8_t unknown[8] = { 99, 0, 0, 0, 0, 0, 0, 0 };
	refused("bad-op", unknown, sizeof(unknown), "unknown operation 99");
	const uint8_t past[8] = { 1, 0, 0, 0, 64, 0, 0, 0 };
	refused("bad-len", past, sizeof(past), "runs past its end");
	/* UNLINK of a name that is not there: parent 1, time, length 1, "q" */
	uint8_t unl[8 + 32 + 8] = { 3, 0, 0, 0, 40, 0, 0, 0, 1 };
	unl[8 + 24] = 1;
	unl[8 + 32] = 'q';
	refused("bad-unlink", unl, sizeof(unl), "UNLINK of q in 1: no such name");
	/* CONTENT of an inode that does not exist */
	uint8_t con[8 + 80] = { 7, 0, 0, 0, 80, 0, 0, 0, 77 };
	refused("bad-content", con, sizeof(con), "CONTENT of inode 77");
}

/* ---- encode scheduling (idle.h) --------------------------------------- */

/* A file held open is encoded once it has had no write for IDLE_SECONDS,
 * not before; a later write queues it again; a file unlinked while queued
 * is not encoded, and the list's reference goes with it.  The clock is
 * the test's: idle_encode_due takes "now". */
static void test_idle(void **state)
{
	(void)state;
	struct mnt m;
	mnt_open(&m, "idle", true);
	struct inode *a = make(&m, m.fs->root, "a", S_IFREG | 0644, NULL);
	struct inode *b = make(&m, m.fs->root, "b", S_IFREG | 0644, NULL);
	uint8_t *buf = malloc(300000);
	assert_non_null(buf);
	fill_random(buf, 300000, 7);
	const uint64_t t = 1000;

	put(&m, a, 0, buf, 300000, false);
	idle_note_write(m.fs, a, t);
	put(&m, b, 0, buf + 1000, 200000, false);
	idle_note_write(m.fs, b, t + 3);
	assert_true(a->f.dirty && b->f.dirty);
	uint64_t held = a->nlookup;

	/* Too early for both. */
	assert_int_equal(idle_encode_due(m.fs, t + IDLE_SECONDS - 1), 0);
	assert_true(a->f.dirty && a->queued && b->queued);
	/* a is due, b was written 3 s later. */
	assert_int_equal(idle_encode_due(m.fs, t + IDLE_SECONDS), 1);
	assert_false(a->f.dirty);
	assert_false(a->queued);
	assert_int_equal(a->nlookup, held - 1); /* the list's reference went */
	assert_true(b->f.dirty && b->queued);
	/* A second note of b while queued moves its time, not its place. */
	idle_note_write(m.fs, b, t + 6);
	assert_int_equal(idle_encode_due(m.fs, t + 3 + IDLE_SECONDS), 0);
	assert_int_equal(idle_encode_due(m.fs, t + 6 + IDLE_SECONDS), 1);
	assert_false(b->f.dirty);

	/* Written again: queued again, encoded again; contents intact. */
	put(&m, a, 4096, buf + 5, 8192, false);
	idle_note_write(m.fs, a, t + 20);
	assert_true(a->queued && a->f.dirty);
	assert_int_equal(idle_encode_due(m.fs, t + 20 + IDLE_SECONDS), 1);
	assert_false(a->f.dirty);
	size_t n;
	uint8_t *got = slurp(&m, a, &n);
	assert_int_equal(n, 300000);
	assert_memory_equal(got, buf, 4096);
	assert_memory_equal(got + 4096, buf + 5, 8192);
	assert_memory_equal(got + 4096 + 8192, buf + 4096 + 8192, 300000 - 4096 - 8192);
	free(got);

	/* Unlinked while queued: taken off, not encoded, freed by the list's
	 * reference going (the tree's count of inodes drops). */
	struct inode *c = make(&m, m.fs->root, "c", S_IFREG | 0644, NULL);
	put(&m, c, 0, buf, 100000, false);
	idle_note_write(m.fs, c, t + 30);
	uint64_t before = m.fs->inodes;
	assert_int_equal(ns_remove(m.fs, m.fs->root, "c", NS_FILE), 0);
	assert_int_equal(m.fs->inodes, before); /* the list still holds it */
	assert_int_equal(idle_encode_due(m.fs, t + 30 + IDLE_SECONDS), 1);
	assert_int_equal(m.fs->inodes, before - 1);
	assert_null(m.fs->idle_head);
	assert_adds_up(&m);

	/* idle_stop empties the list and gives its references back; no
	 * file is queued after it. */
	put(&m, b, 0, buf, 1000, false);
	idle_note_write(m.fs, b, t + 40);
	held = b->nlookup;
	idle_stop(m.fs);
	assert_null(m.fs->idle_head);
	assert_int_equal(b->nlookup, held - 1);
	idle_note_write(m.fs, b, t + 41);
	assert_false(b->queued);
	free(buf);
	mnt_drop(&m);
}

/* A short recipe's ids completed from the file they are a new version
 * of: rewritten, inserted and deleted entries, and a rewritten region
 * longer than the walk's slack, after which it finds its way back. */
static void test_complete_ids(void **state)
{
	(void)state;
	struct mnt m;
	mnt_open(&m, "complete", true);
	struct dmarfs *fs = m.fs;
	enum { SIZE = 16 << 20 };
	uint8_t *buf = malloc(SIZE);
	assert_non_null(buf);
	fill_random(buf, SIZE, 26);
	struct inode *f = make(&m, fs->root, "f", S_IFREG | 0644, NULL);
	put(&m, f, 0, buf, SIZE, false);
	assert_int_equal(ns_encode(fs, f, &fs->cfg.ctx, 3), 0);
	struct dmar_recipe rc;
	pthread_rwlock_rdlock(&f->lock);
	assert_int_equal(dmar_file_recipe(&f->f, &rc), 0);
	pthread_rwlock_unlock(&f->lock);
	size_t n = 0;
	struct dmar_id *old = dmar_recipe_chunk_ids(&rc, &n);
	assert_non_null(old);
	assert_true(n > 1200); /* 8 KiB chunks on average */

	/* The new version: entry 10 rewritten, 50..52 gone, two new ones
	 * before 100, 150..249 rewritten in place (100 > the slack). */
	struct dmar_id *want = calloc(n + 2, sizeof(*want)), *ids = calloc(n + 2, sizeof(*ids));
	bool *fresh = calloc(n + 2, sizeof(*fresh));
	assert_true(want && ids && fresh);
	size_t k = 0;
	uint64_t seed = 7;
	for (size_t i = 0; i < n; i++) {
		if (i >= 50 && i < 53)
			continue;
		if (i == 100)
			for (int x = 0; x < 2; x++) {
				fill_random(want[k].b, DMAR_HASH_SIZE, xorshift64(&seed));
				fresh[k++] = true;
			}
		if (i == 10 || (i >= 150 && i < 250)) {
			fill_random(want[k].b, DMAR_HASH_SIZE, xorshift64(&seed));
			fresh[k++] = true;
		} else {
			want[k++] = old[i];
		}
	}
	size_t olds = 0;
	for (size_t i = 0; i < k; i++) {
		memcpy(ids[i].b, want[i].b, 8);
		olds += !fresh[i];
	}
	uint8_t *st = malloc(k);
	assert_non_null(st);
	memset(st, 1, k);
	pthread_rwlock_rdlock(&f->lock);
	size_t done = dmar_file_complete_ids(&f->f, ids, k, 8, st);
	pthread_rwlock_unlock(&f->lock);
	assert_int_equal(done, olds);
	for (size_t i = 0; i < k; i++) {
		assert_int_equal(st[i], fresh[i] ? 1 : 0);
		if (!fresh[i])
			assert_memory_equal(ids[i].b, want[i].b, DMAR_HASH_SIZE);
		else
			assert_memory_equal(ids[i].b, want[i].b, 8); /* untouched */
	}

	/* Nothing of f: nothing completed, every state left as it was. */
	for (size_t i = 0; i < k; i++)
		fill_random(ids[i].b, 8, xorshift64(&seed));
	memset(st, 1, k);
	pthread_rwlock_rdlock(&f->lock);
	assert_int_equal(dmar_file_complete_ids(&f->f, ids, k, 8, st), 0);
	pthread_rwlock_unlock(&f->lock);
	for (size_t i = 0; i < k; i++)
		assert_int_equal(st[i], 1);

	free(st);
	free(fresh);
	free(ids);
	free(want);
	free(old);
	dmar_recipe_free(&rc);
	free(buf);
	assert_adds_up(&m);
	mnt_drop(&m);
}

/* A big file encoded whole has its content id (not yet sent); a ship
 * (dmar_file_content_id) finds it without hashing and marks it sent. */
static void test_named_at_encode(void **state)
{
	(void)state;
	struct mnt m;
	mnt_open(&m, "named", true);
	struct dmarfs *fs = m.fs;
	enum { BIG = 6 << 20, SMALL = 1 << 20 };
	uint8_t *buf = malloc(BIG);
	assert_non_null(buf);
	fill_random(buf, BIG, 27);
	struct inode *big = make(&m, fs->root, "big", S_IFREG | 0644, NULL);
	struct inode *small = make(&m, fs->root, "small", S_IFREG | 0644, NULL);
	put(&m, big, 0, buf, BIG, false);
	put(&m, small, 0, buf, SMALL, false);
	assert_int_equal(ns_encode(fs, big, &fs->cfg.ctx, 3), 0);
	assert_int_equal(ns_encode(fs, small, &fs->cfg.ctx, 3), 0);
	struct dmar_id cid, want;
	bool sent = true, known = true;
	pthread_rwlock_wrlock(&small->lock);
	assert_false(dmar_file_content_known(&small->f, &cid, &sent));
	pthread_rwlock_unlock(&small->lock);

	struct dmar_recipe rc;
	pthread_rwlock_wrlock(&big->lock);
	assert_true(dmar_file_content_known(&big->f, &cid, &sent));
	assert_false(sent);
	assert_int_equal(dmar_file_recipe(&big->f, &rc), 0);
	assert_int_equal(dmar_recipe_ids(&rc, NULL, &want), 0);
	assert_memory_equal(cid.b, want.b, DMAR_HASH_SIZE);
	memset(&cid, 0, sizeof(cid));
	assert_int_equal(dmar_file_content_id(&big->f, &fs->cfg.ctx, &rc, &cid, &known), 0);
	assert_false(known); /* named here, never sent */
	assert_memory_equal(cid.b, want.b, DMAR_HASH_SIZE);
	assert_int_equal(dmar_file_content_id(&big->f, &fs->cfg.ctx, &rc, &cid, &known), 0);
	assert_true(known);
	pthread_rwlock_unlock(&big->lock);
	dmar_recipe_free(&rc);

	/* A write unnames it. */
	put(&m, big, 100, "x", 1, false);
	pthread_rwlock_rdlock(&big->lock);
	assert_false(dmar_file_content_known(&big->f, &cid, NULL));
	pthread_rwlock_unlock(&big->lock);
	free(buf);
	assert_adds_up(&m);
	mnt_drop(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rules),
		cmocka_unit_test(test_replay),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_idle),
		cmocka_unit_test(test_complete_ids),
		cmocka_unit_test(test_named_at_encode),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
