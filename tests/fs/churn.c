/* SPDX-License-Identifier: MIT */
/*
 * tests/fs/churn.c - a mixed workload that knows what it did, for the
 * crash tests (tests/fs/durable.sh): the daemon is killed while this
 * runs, mounted again, and the tree must be what the workload's calls
 * that returned made it, give or take the one call in flight.
 *
 *   churn run DIR MODEL SEED MAXOPS
 *       Load MODEL (the tree as the last verify found it; none: DIR is
 *       empty), then do up to MAXOPS operations under DIR chosen by SEED:
 *       create and write files of 0 B to 4 MiB (some fsync'd), rewrite
 *       ranges in place, append, truncate without an open fd, rename files
 *       and directories (over others too), unlink, mkdir, rmdir, hard and
 *       symbolic links, setxattr and removexattr, chmod, copy_file_range.
 *       Every operation ends with its files closed, so each one that
 *       returns is durable (persist.h).  When a call fails because the
 *       daemon is gone (ENOTCONN, ECONNABORTED, or EIO with the mount
 *       dead right after: gone()), stop and save MODEL: the
 *       tree before the operation in flight and as it would be after it.
 *       Exit 0 (MAXOPS done, or the daemon went), 3 on an unexpected error.
 *   churn verify DIR MODEL
 *       Compare DIR with MODEL: every path must be as before the
 *       operation in flight, or as after it (a file rewritten in place
 *       may show each byte old or new: persist.h), nothing else anywhere.
 *       Then save what DIR holds as MODEL.  Exit 0, 1 with the first
 *       differences on stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../unit/prng.h"

#define MAXN 400
#define PATHMAX 160
#define MAX_TOTAL (48u << 20)

enum { T_FILE = 1, T_DIR, T_LINK };

struct node {
	char path[PATHMAX];
	int type;
	uint32_t mode;
	uint64_t size;
	uint8_t *data;     /* files */
	char target[64];   /* symlinks */
	char xval[32];     /* user.churn, "" if none */
	uint32_t group;    /* files: hard links share it */
};

struct model {
	struct node n[MAXN];
	int count;
	uint32_t next_group;
};

static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
	return n ? xorshift64(&rng) % n : 0;
}

static void node_free(struct node *x)
{
	free(x->data);
	x->data = NULL;
}

static void model_free(struct model *m)
{
	for (int i = 0; i < m->count; i++)
		node_free(&m->n[i]);
	m->count = 0;
}

static void model_copy(struct model *dst, const struct model *src)
{
	model_free(dst);
	*dst = *src;
	for (int i = 0; i < src->count; i++) {
		if (src->n[i].data) {
			dst->n[i].data = malloc(src->n[i].size ? src->n[i].size : 1);
			memcpy(dst->n[i].data, src->n[i].data, src->n[i].size);
		}
	}
}

static struct node *find(struct model *m, const char *path)
{
	for (int i = 0; i < m->count; i++)
		if (!strcmp(m->n[i].path, path))
			return &m->n[i];
	return NULL;
}

static void drop(struct model *m, const char *path)
{
	struct node *x = find(m, path);
	if (!x)
		return;
	node_free(x);
	*x = m->n[--m->count];
}

/* ---- saving ------------------------------------------------------------- */

static int save_one(FILE *f, const struct model *m)
{
	fwrite(&m->count, sizeof(m->count), 1, f);
	fwrite(&m->next_group, sizeof(m->next_group), 1, f);
	for (int i = 0; i < m->count; i++) {
		fwrite(&m->n[i], sizeof(m->n[i]), 1, f);
		if (m->n[i].type == T_FILE)
			fwrite(m->n[i].data, 1, m->n[i].size, f);
	}
	return ferror(f) ? -1 : 0;
}

static int load_one(FILE *f, struct model *m)
{
	memset(m, 0, sizeof(*m));
	if (fread(&m->count, sizeof(m->count), 1, f) != 1 || fread(&m->next_group, sizeof(m->next_group), 1, f) != 1 ||
	    m->count < 0 || m->count > MAXN)
		return -1;
	for (int i = 0; i < m->count; i++) {
		if (fread(&m->n[i], sizeof(m->n[i]), 1, f) != 1)
			return -1;
		m->n[i].data = NULL;
		if (m->n[i].type == T_FILE) {
			m->n[i].data = malloc(m->n[i].size ? m->n[i].size : 1);
			if (fread(m->n[i].data, 1, m->n[i].size, f) != m->n[i].size)
				return -1;
		}
	}
	return 0;
}

/* MODEL holds pre, a flag, and post when an operation was in flight. */
static int save(const char *file, const struct model *pre, const struct model *post)
{
	FILE *f = fopen(file, "w");
	if (!f)
		return -1;
	int pending = post != NULL;
	fwrite(&pending, sizeof(pending), 1, f);
	save_one(f, pre);
	if (post)
		save_one(f, post);
	return fclose(f);
}

static int load(const char *file, struct model *pre, struct model *post, bool *pending)
{
	FILE *f = fopen(file, "r");
	int p = 0;
	memset(pre, 0, sizeof(*pre));
	memset(post, 0, sizeof(*post));
	*pending = false;
	if (!f)
		return errno == ENOENT ? 0 : -1;
	int r = fread(&p, sizeof(p), 1, f) == 1 && load_one(f, pre) == 0 ? 0 : -1;
	if (!r && p)
		r = load_one(f, post);
	*pending = p;
	fclose(f);
	return r;
}

/* ---- the workload -------------------------------------------------------- */

static const char *root;

static void full(char *out, const char *path)
{
	snprintf(out, PATHMAX + 256, "%s/%s", root, path);
}

/* Whether a call failed because the daemon went.  A request the kernel
 * was copying to the daemon (or a reply from it) when the daemon was
 * killed can fail with EIO: the copy into the dying process's memory
 * fails before its /dev/fuse is released, which is what makes every
 * other request ECONNABORTED or ENOTCONN.  So an EIO counts as the
 * daemon's end only if the mount is dead within a few seconds (statfs:
 * stat may answer from the kernel's cache); any other EIO is a bug. */
static bool gone(int e)
{
	if (e == ENOTCONN || e == ECONNABORTED)
		return true;
	if (e != EIO)
		return false;
	for (int k = 0; k < 50; k++) {
		struct statfs sf;
		if (statfs(root, &sf) < 0 && errno == ENOTCONN)
			return true;
		usleep(100000);
	}
	return false;
}

static uint64_t total(const struct model *m)
{
	uint64_t t = 0;
	for (int i = 0; i < m->count; i++)
		t += m->n[i].size;
	return t;
}

/* A random existing node of type t (0: any), or NULL. */
static struct node *pick(struct model *m, int t)
{
	int cand[MAXN], n = 0;
	for (int i = 0; i < m->count; i++)
		if (!t || m->n[i].type == t)
			cand[n++] = i;
	return n ? &m->n[cand[rnd((uint64_t)n)]] : NULL;
}

/* A new path: in the root or in an existing directory. */
static void new_path(struct model *m, char *out, const char *stem)
{
	for (;;) {
		struct node *d = rnd(3) ? pick(m, T_DIR) : NULL;
		if (snprintf(out, PATHMAX, "%s%s%s%llu", d ? d->path : "", d ? "/" : "", stem,
			     (unsigned long long)rnd(100000)) >= PATHMAX - 24)
			continue;
		if (!find(m, out))
			return;
	}
}

static void fill(uint8_t *p, uint64_t n, struct model *m)
{
	/* Some content repeats other files' (dedup), some is new. */
	struct node *src = rnd(4) == 0 ? pick(m, T_FILE) : NULL;
	uint64_t s = xorshift64(&rng);
	for (uint64_t i = 0; i < n; i++) {
		if (src && src->size)
			p[i] = src->data[i % src->size];
		else
			p[i] = (uint8_t)(i % 4096 < 64 ? i : xorshift64(&s));
	}
}

static uint64_t new_size(void)
{
	switch (rnd(8)) {
	case 0: return 0;
	case 1: return rnd(4u << 20);
	case 2: case 3: return rnd(1u << 20);
	default: return rnd(100000);
	}
}

/* Apply to every name of x's file. */
static void set_data(struct model *m, struct node *x, const uint8_t *d, uint64_t size)
{
	uint32_t g = x->group;
	for (int i = 0; i < m->count; i++) {
		struct node *y = &m->n[i];
		if (y->type != T_FILE || y->group != g)
			continue;
		free(y->data);
		y->data = malloc(size ? size : 1);
		memcpy(y->data, d, size);
		y->size = size;
	}
}

static void set_meta(struct model *m, struct node *x, uint32_t mode, const char *xval)
{
	uint32_t g = x->group;
	for (int i = 0; i < m->count; i++) {
		struct node *y = &m->n[i];
		if (y != x && (x->type != T_FILE || y->type != T_FILE || y->group != g))
			continue;
		y->mode = mode;
		snprintf(y->xval, sizeof(y->xval), "%s", xval);
	}
}

static int write_all(int fd, const uint8_t *p, uint64_t n, uint64_t off)
{
	while (n) {
		size_t k = n > (1u << 20) ? 1u << 20 : (size_t)n;
		ssize_t w = pwrite(fd, p, k, (off_t)off);
		if (w < 0)
			return -1;
		p += w;
		n -= (uint64_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/* Rename the subtree of a directory renamed from `from` to `to`. */
static void model_rename(struct model *m, const char *from, const char *to)
{
	size_t fl = strlen(from);
	drop(m, to);
	for (int i = 0; i < m->count; i++) {
		char *p = m->n[i].path;
		if (!strcmp(p, from) || (!strncmp(p, from, fl) && p[fl] == '/')) {
			char nw[PATHMAX * 2];
			snprintf(nw, sizeof(nw), "%s%s", to, p + fl);
			if (snprintf(p, PATHMAX, "%s", nw) >= PATHMAX)
				abort(); /* new_path keeps paths short */
		}
	}
}

/* One operation: post gets the model after it, then it runs.  -1 when
 * the daemon went (errno), -2 on another error (a bug: message). */
static int one_op(struct model *post, char *what, size_t wcap)
{
	char a[PATHMAX], b[PATHMAX], fa[PATHMAX + 256], fb[PATHMAX + 256];
	int fd = -1, r = 0;
	uint64_t kind = rnd(100);
	struct node *x;
	if (post->count >= MAXN - 4 || total(post) > MAX_TOTAL)
		kind = 40; /* unlink: room again */
	if (kind < 20) { /* create + write (+ fsync) */
		new_path(post, a, "f");
		uint64_t n = new_size();
		uint8_t *d = malloc(n ? n : 1);
		fill(d, n, post);
		bool sync = rnd(2);
		snprintf(what, wcap, "create %s (%llu bytes%s)", a, (unsigned long long)n, sync ? ", fsync" : "");
		struct node nn = { .type = T_FILE, .mode = 0640, .size = n, .data = d, .group = ++post->next_group };
		snprintf(nn.path, PATHMAX, "%s", a);
		post->n[post->count++] = nn;
		full(fa, a);
		fd = open(fa, O_CREAT | O_EXCL | O_WRONLY, 0640);
		if (fd < 0 || write_all(fd, d, n, 0) < 0 || (sync && fsync(fd) < 0))
			goto fail;
	} else if (kind < 28) { /* rewrite a range in place, maybe past the end */
		if (!(x = pick(post, T_FILE)))
			return 0;
		uint64_t off = rnd(x->size + 1), n = 1 + rnd(200000), end = off + n;
		uint64_t size = end > x->size ? end : x->size;
		uint8_t *d = malloc(size);
		memcpy(d, x->data, x->size);
		memset(d + x->size, 0, size - x->size);
		fill(d + off, n, post);
		snprintf(what, wcap, "rewrite %s [%llu, %llu)", x->path, (unsigned long long)off, (unsigned long long)end);
		full(fa, x->path);
		set_data(post, x, d, size);
		fd = open(fa, O_WRONLY);
		if (fd < 0 || write_all(fd, d + off, n, off) < 0)
			goto fail_d;
		free(d);
		d = NULL;
		goto done;
	fail_d:
		free(d);
		goto fail;
	} else if (kind < 32) { /* overwrite with O_TRUNC */
		if (!(x = pick(post, T_FILE)))
			return 0;
		uint64_t n = new_size();
		uint8_t *d = malloc(n ? n : 1);
		fill(d, n, post);
		snprintf(what, wcap, "overwrite %s (%llu bytes)", x->path, (unsigned long long)n);
		full(fa, x->path);
		set_data(post, x, d, n);
		fd = open(fa, O_WRONLY | O_TRUNC);
		r = fd < 0 || write_all(fd, d, n, 0) < 0;
		free(d);
		if (r)
			goto fail;
	} else if (kind < 36) { /* truncate by path */
		if (!(x = pick(post, T_FILE)))
			return 0;
		uint64_t n = rnd(x->size + 300000);
		uint8_t *d = calloc(1, n ? n : 1);
		memcpy(d, x->data, n < x->size ? n : x->size);
		snprintf(what, wcap, "truncate %s to %llu", x->path, (unsigned long long)n);
		full(fa, x->path);
		set_data(post, x, d, n);
		free(d);
		if (truncate(fa, (off_t)n) < 0)
			goto fail;
	} else if (kind < 46) { /* unlink */
		if (!(x = pick(post, rnd(4) ? T_FILE : T_LINK)))
			return 0;
		snprintf(what, wcap, "unlink %s", x->path);
		full(fa, x->path);
		drop(post, x->path);
		if (unlink(fa) < 0)
			goto fail;
	} else if (kind < 54) { /* rename a file, sometimes over another */
		if (!(x = pick(post, T_FILE)))
			return 0;
		struct node *y = rnd(3) == 0 ? pick(post, T_FILE) : NULL;
		snprintf(a, PATHMAX, "%s", x->path);
		if (y && y != x)
			snprintf(b, PATHMAX, "%s", y->path);
		else
			new_path(post, b, "r");
		snprintf(what, wcap, "rename %s %s", a, b);
		full(fa, a);
		full(fb, b);
		bool same = y && y != x && y->group == x->group;
		if (!same)
			model_rename(post, a, b);
		if (rename(fa, fb) < 0)
			goto fail;
		if (same) /* POSIX: renaming a file onto another name of it does nothing */
			return 0;
	} else if (kind < 60) { /* mkdir */
		new_path(post, a, "d");
		if (strchr(a, '/') && strchr(strchr(a, '/') + 1, '/'))
			return 0; /* depth 2 at most */
		snprintf(what, wcap, "mkdir %s", a);
		struct node nn = { .type = T_DIR, .mode = 0755 };
		snprintf(nn.path, PATHMAX, "%s", a);
		post->n[post->count++] = nn;
		full(fa, a);
		if (mkdir(fa, 0755) < 0)
			goto fail;
	} else if (kind < 64) { /* rmdir if empty, else rename the directory */
		if (!(x = pick(post, T_DIR)))
			return 0;
		size_t l = strlen(x->path);
		bool empty = true;
		for (int i = 0; i < post->count; i++)
			if (!strncmp(post->n[i].path, x->path, l) && post->n[i].path[l] == '/')
				empty = false;
		snprintf(a, PATHMAX, "%s", x->path);
		full(fa, a);
		if (empty) {
			snprintf(what, wcap, "rmdir %s", a);
			drop(post, a);
			if (rmdir(fa) < 0)
				goto fail;
		} else {
			snprintf(b, PATHMAX, "d%llu", (unsigned long long)rnd(100000));
			if (find(post, b))
				return 0;
			snprintf(what, wcap, "rename dir %s %s", a, b);
			full(fb, b);
			model_rename(post, a, b);
			if (rename(fa, fb) < 0)
				goto fail;
		}
	} else if (kind < 70) { /* hard link */
		if (!(x = pick(post, T_FILE)))
			return 0;
		new_path(post, b, "h");
		snprintf(what, wcap, "link %s %s", x->path, b);
		full(fa, x->path);
		full(fb, b);
		struct node nn = *x;
		snprintf(nn.path, PATHMAX, "%s", b);
		nn.data = malloc(x->size ? x->size : 1);
		memcpy(nn.data, x->data, x->size);
		post->n[post->count++] = nn;
		if (link(fa, fb) < 0)
			goto fail;
	} else if (kind < 75) { /* symlink */
		new_path(post, a, "s");
		struct node nn = { .type = T_LINK, .mode = 0777 };
		snprintf(nn.path, PATHMAX, "%s", a);
		snprintf(nn.target, sizeof(nn.target), "target-%llu", (unsigned long long)rnd(1000000));
		snprintf(what, wcap, "symlink %s -> %s", a, nn.target);
		post->n[post->count++] = nn;
		full(fa, a);
		if (symlink(nn.target, fa) < 0)
			goto fail;
	} else if (kind < 82) { /* xattr set or remove */
		if (!(x = pick(post, rnd(2) ? T_FILE : T_DIR)))
			return 0;
		full(fa, x->path);
		if (x->xval[0] && rnd(2)) {
			snprintf(what, wcap, "removexattr %s", x->path);
			set_meta(post, x, x->mode, "");
			if (removexattr(fa, "user.churn") < 0)
				goto fail;
		} else {
			char v[32];
			snprintf(v, sizeof(v), "v%llu", (unsigned long long)rnd(1000000000));
			snprintf(what, wcap, "setxattr %s %s", x->path, v);
			set_meta(post, x, x->mode, v);
			if (setxattr(fa, "user.churn", v, strlen(v), 0) < 0)
				goto fail;
		}
	} else if (kind < 88) { /* chmod */
		if (!(x = pick(post, rnd(3) ? T_FILE : T_DIR)))
			return 0;
		uint32_t mode = x->type == T_DIR ? 0700 | (uint32_t)rnd(0100) : 0600 | (uint32_t)rnd(0100);
		snprintf(what, wcap, "chmod %s %o", x->path, mode);
		full(fa, x->path);
		char xv[32];
		snprintf(xv, sizeof(xv), "%s", x->xval);
		set_meta(post, x, mode, xv);
		if (chmod(fa, mode) < 0)
			goto fail;
	} else { /* copy_file_range of a whole file into a new one */
		if (!(x = pick(post, T_FILE)))
			return 0;
		new_path(post, b, "c");
		snprintf(what, wcap, "copy %s %s", x->path, b);
		full(fa, x->path);
		full(fb, b);
		struct node nn = *x;
		snprintf(nn.path, PATHMAX, "%s", b);
		nn.mode = 0640;
		nn.xval[0] = 0;
		nn.group = ++post->next_group;
		nn.data = malloc(x->size ? x->size : 1);
		memcpy(nn.data, x->data, x->size);
		post->n[post->count++] = nn;
		int in = open(fa, O_RDONLY);
		if (in < 0)
			goto fail;
		fd = open(fb, O_CREAT | O_EXCL | O_WRONLY, 0640);
		uint64_t left = x->size;
		while (fd >= 0 && left) {
			ssize_t k = copy_file_range(in, NULL, fd, NULL, left, 0);
			if (k <= 0) {
				int e = errno;
				close(in);
				errno = k == 0 ? EIO : e;
				goto fail;
			}
			left -= (uint64_t)k;
		}
		close(in);
		if (fd < 0)
			goto fail;
	}
done:
	if (fd >= 0 && close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	return 0;
fail:;
	int e = errno;
	if (fd >= 0)
		close(fd);
	errno = e;
	if (gone(e))
		return -1;
	fprintf(stderr, "churn: %s: %s\n", what, strerror(e));
	return -2;
}

static int run_ops(const char *file, struct model *pre, struct model *post, long maxops)
{
	bool pending;
	if (load(file, pre, post, &pending) < 0 || pending) {
		fprintf(stderr, "churn: %s: unreadable, or not verified since the last run\n", file);
		return 3;
	}
	char what[512] = "";
	long done = 0;
	int r = 0;
	for (; done < maxops; done++) {
		model_copy(post, pre);
		r = one_op(post, what, sizeof(what));
		if (r < 0)
			break;
		model_copy(pre, post);
	}
	if (r == -2) {
		save(file, pre, NULL);
		return 3;
	}
	if (save(file, pre, r == -1 ? post : NULL) != 0) {
		perror("churn: saving the model");
		return 3;
	}
	printf("churn: %ld operations done%s%s\n", done, r == -1 ? "; in flight when the daemon went: " : "",
	       r == -1 ? what : "");
	return 0;
}

static int cmd_run(const char *dir, const char *file, uint64_t seed, long maxops)
{
	struct model *pre = calloc(1, sizeof(*pre)), *post = calloc(1, sizeof(*post));
	if (!pre || !post) {
		free(pre);
		free(post);
		return 3;
	}
	root = dir;
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	int r = run_ops(file, pre, post, maxops);
	model_free(pre);
	model_free(post);
	free(pre);
	free(post);
	return r;
}

/* ---- verify -------------------------------------------------------------- */

struct seen {
	struct model m;
	int err;
};

static void scan(struct seen *s, const char *rel)
{
	char path[PATHMAX + 256];
	snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
	DIR *d = opendir(path);
	if (!d) {
		s->err = errno;
		return;
	}
	for (struct dirent *e; (e = readdir(d));) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (s->m.count == MAXN) {
			s->err = EOVERFLOW;
			break;
		}
		struct node *x = &s->m.n[s->m.count++];
		memset(x, 0, sizeof(*x));
		if (snprintf(x->path, PATHMAX, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= PATHMAX) {
			s->err = ENAMETOOLONG;
			continue;
		}
		char fp[PATHMAX + 256];
		full(fp, x->path);
		struct stat st;
		if (lstat(fp, &st) < 0) {
			s->err = errno;
			continue;
		}
		x->mode = st.st_mode & 07777;
		x->type = S_ISDIR(st.st_mode) ? T_DIR : S_ISLNK(st.st_mode) ? T_LINK : T_FILE;
		ssize_t v = x->type == T_LINK ? -1 : getxattr(fp, "user.churn", x->xval, sizeof(x->xval) - 1);
		x->xval[v > 0 ? v : 0] = 0;
		x->group = (uint32_t)st.st_ino;
		if (x->type == T_LINK) {
			ssize_t k = readlink(fp, x->target, sizeof(x->target) - 1);
			x->target[k > 0 ? k : 0] = 0;
			x->mode = 0777;
		} else if (x->type == T_FILE) {
			x->size = (uint64_t)st.st_size;
			x->data = malloc(x->size ? x->size : 1);
			int fd = open(fp, O_RDONLY);
			ssize_t k = fd < 0 ? -1 : pread(fd, x->data, x->size, 0);
			uint64_t got = k > 0 ? (uint64_t)k : 0;
			while (k > 0 && got < x->size && (k = pread(fd, x->data + got, x->size - got, (off_t)got)) > 0)
				got += (uint64_t)k;
			if (fd >= 0)
				close(fd);
			if (got != x->size)
				s->err = k < 0 ? errno : EIO;
		} else {
			scan(s, x->path);
		}
	}
	closedir(d);
}

/* Does actual node a match model node m?  mix: bytes may be either of
 * m's or of alt's (a rewrite in flight). */
static bool same(const struct node *a, const struct node *m, const struct node *alt)
{
	if (!a || !m)
		return !a && !m;
	if (a->type != m->type || a->mode != m->mode || strcmp(a->xval, m->xval))
		return false;
	if (a->type == T_LINK)
		return !strcmp(a->target, m->target);
	if (a->type != T_FILE)
		return true;
	if (a->size != m->size)
		return false;
	for (uint64_t i = 0; i < a->size; i++)
		if (a->data[i] != m->data[i] && !(alt && i < alt->size && a->data[i] == alt->data[i]))
			return false;
	return true;
}

static int verify(const char *dir, const char *file, struct model *pre, struct model *post, struct seen *s)
{
	bool pending;
	root = dir;
	if (load(file, pre, post, &pending) < 0) {
		fprintf(stderr, "churn: %s: unreadable\n", file);
		return 2;
	}
	scan(s, "");
	if (s->err) {
		fprintf(stderr, "churn: reading %s: %s\n", dir, strerror(s->err));
		return 1;
	}
	int bad = 0;
	/* Every path of the three. */
	const struct model *all[3] = { &s->m, pre, post };
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < all[k]->count; i++) {
			const char *p = all[k]->n[i].path;
			struct node *a = find(&s->m, p), *b = find(pre, p), *c = pending ? find(post, p) : NULL;
			bool ok = same(a, b, NULL) || (pending && (same(a, c, NULL) || same(a, c, b) || same(a, b, c)));
			/* A file made by the operation in flight: its creation
			 * returned before its data was closed (persist.h). */
			if (!ok && pending && !b && c && c->type == T_FILE && a && a->type == T_FILE && !a->size)
				ok = true;
			if (!ok && bad++ < 5) {
				fprintf(stderr, "churn: %s: found %s (%llu bytes, mode %o, xattr '%s'), expected %s (%llu bytes, mode %o, xattr '%s')%s\n",
					p, a ? (a->type == T_DIR ? "dir" : a->type == T_LINK ? "symlink" : "file") : "nothing",
					(unsigned long long)(a ? a->size : 0), a ? a->mode : 0, a ? a->xval : "",
					b ? (b->type == T_DIR ? "dir" : b->type == T_LINK ? "symlink" : "file") : "nothing",
					(unsigned long long)(b ? b->size : 0), b ? b->mode : 0, b ? b->xval : "",
					pending ? " or as after the operation in flight" : "");
			}
		}
	}
	if (bad) {
		fprintf(stderr, "churn: %d paths differ from what the workload did\n", bad);
		return 1;
	}
	/* What was found is the model now (hard links: groups by inode). */
	s->m.next_group = 0;
	for (int i = 0; i < s->m.count; i++)
		if (s->m.n[i].group > s->m.next_group)
			s->m.next_group = s->m.n[i].group;
	if (save(file, &s->m, NULL) != 0)
		return 2;
	printf("churn: %d paths as expected%s\n", s->m.count, pending ? " (an operation was in flight)" : "");
	return 0;
}

static int cmd_verify(const char *dir, const char *file)
{
	struct model *pre = calloc(1, sizeof(*pre)), *post = calloc(1, sizeof(*post));
	struct seen *s = calloc(1, sizeof(*s));
	int r = pre && post && s ? verify(dir, file, pre, post, s) : 2;
	if (pre)
		model_free(pre);
	if (post)
		model_free(post);
	if (s)
		model_free(&s->m);
	free(pre);
	free(post);
	free(s);
	return r;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "run"))
		return cmd_run(argv[2], argv[3], strtoull(argv[4], NULL, 10), strtol(argv[5], NULL, 10));
	if (argc == 4 && !strcmp(argv[1], "verify"))
		return cmd_verify(argv[2], argv[3]);
	fprintf(stderr, "usage: churn run DIR MODEL SEED MAXOPS | churn verify DIR MODEL\n");
	return 2;
}
