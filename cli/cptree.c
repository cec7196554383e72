/* SPDX-License-Identifier: MIT */
/*
 * dmar cp -r DIR NODE:PATH - a directory tree to a node in few requests.
 *
 * The tree is walked depth first, each directory before what it holds.
 * Small files (up to TREE_FILE_MAX) are read whole and cut as a mount
 * cuts them; their operations and chunks gather in a batch of about
 * TREE_BATCH_BYTES: one query asks the node which of the batch's chunks
 * it lacks, then one tree commit (POST /v1/tree) makes the batch's
 * directories, files and symlinks, carrying only those chunks, the whole
 * body one zstd frame when that pays (across small files it compresses
 * like a tar).  So a tree of 8,000 headers costs some fifty requests, not
 * three or four a file.  A larger file ends the batch (its directory must
 * exist) and goes by the push of a single file (cp_push_fd).
 *
 * Other kinds of file (devices, fifos, sockets) have no form in the API:
 * they are skipped with a message, and the exit status says so.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "codec/chunker.h"
#include "codec/cutter.h"
#include "codec/idset.h"
#include "net/client.h"
#include "net/wire.h"
#include "codec/clock.h"

#define TREE_FILE_MAX (4u << 20)
#define TREE_BATCH_BYTES (16u << 20)
#define TREE_BATCH_OPS 4096u

/* A file of the batch: where its bytes and chunks are. */
struct tfile {
	uint32_t op;         /* its operation's index in the body */
	size_t data, size;   /* its bytes: offset in t->data, length */
	size_t first, nchunks; /* its chunks: t->chunks[first..) */
	uint32_t mode;
	struct timespec mtime;
};

struct tchunk {
	struct dmar_id id;
	size_t off; /* in t->data */
	uint32_t len;
};

struct tree {
	struct dmar_client *c;
	const char *node;
	bool noreplace;
	struct dmar_tree_body *body;
	struct dmar_cutter *cut;
	struct dmar_tree_op op; /* scratch: 4 KiB of path */
	/* the batch */
	uint8_t *data;
	size_t data_len, data_cap;
	struct tchunk *chunks;
	size_t nchunks, chunks_cap;
	struct tfile *files;
	size_t nfiles, files_cap;
	char **paths; /* by operation, for messages */
	size_t npaths, paths_cap;
	/* the totals */
	uint64_t nfile, ndir, nlink, bytes, skipped, failed;
	struct dmar_xfer_stats st;
	uint64_t requests;
};

static int grow(void **p, size_t *cap, size_t n, size_t size)
{
	if (n <= *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 256;
	while (c < n)
		c *= 2;
	void *q = realloc(*p, c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* One chunk of the file being cut. */
static int on_chunk(void *ctx, const uint8_t *p, uint32_t len, const struct dmar_id *id)
{
	(void)p;
	struct tree *t = ctx;
	if (grow((void **)&t->chunks, &t->chunks_cap, t->nchunks + 1, sizeof(*t->chunks)) < 0)
		return -ENOMEM;
	struct tfile *f = &t->files[t->nfiles - 1];
	size_t off = f->data;
	for (size_t k = f->first; k < t->nchunks; k++)
		off += t->chunks[k].len;
	t->chunks[t->nchunks++] = (struct tchunk){ .id = *id, .off = off, .len = len };
	return 0;
}

/* Add an operation for path (its name kept for messages). */
static int add_op(struct tree *t, uint8_t kind, uint32_t mode, const char *path, const void *data, size_t len)
{
	if (grow((void **)&t->paths, &t->paths_cap, t->npaths + 1, sizeof(*t->paths)) < 0 ||
	    !(t->paths[t->npaths] = strdup(path)))
		return -ENOMEM;
	t->op.kind = kind;
	t->op.flags = kind != DMAR_TREE_DIR && t->noreplace ? DMAR_TREE_NOREPLACE : 0;
	t->op.mode = mode;
	snprintf(t->op.path, sizeof(t->op.path), "%s", path);
	t->op.data = data;
	t->op.data_len = len;
	int r = dmar_tree_body_op(t->body, &t->op);
	if (r < 0) {
		free(t->paths[t->npaths]);
		return r;
	}
	t->npaths++;
	return 0;
}

static void batch_clear(struct tree *t)
{
	dmar_tree_body_reset(t->body);
	for (size_t k = 0; k < t->npaths; k++)
		free(t->paths[k]);
	t->npaths = t->nfiles = t->nchunks = t->data_len = 0;
}

static void account(struct tree *t, const struct dmar_xfer_stats *s)
{
	t->st.sent_chunks += s->sent_chunks;
	t->st.chunk_bytes += s->chunk_bytes;
	t->st.wire_bytes += s->wire_bytes;
	t->st.round_trips += s->round_trips;
	t->requests += s->requests;
}

/* File f's operation (with its recipe) into body b. */
static int file_op(struct tree *t, struct dmar_tree_body *b, const struct tfile *f)
{
	struct dmar_recipe rc = { .size = f->size, .mode = f->mode, .mtime_sec = f->mtime.tv_sec,
				  .mtime_nsec = (uint32_t)f->mtime.tv_nsec, .n = f->nchunks };
	struct dmar_recipe_entry *e = calloc(rc.n ? rc.n : 1, sizeof(*e));
	size_t rlen = dmar_recipe_wire_size(rc.n);
	uint8_t *rb = malloc(rlen);
	int r = -ENOMEM;
	if (e && rb) {
		for (size_t k = 0; k < rc.n; k++)
			e[k] = (struct dmar_recipe_entry){ .id = t->chunks[f->first + k].id,
							   .len = t->chunks[f->first + k].len,
							   .kind = DMAR_RECIPE_CHUNK };
		rc.e = e;
		dmar_recipe_write(&rc, rb, NULL);
		t->op.kind = DMAR_TREE_FILE;
		t->op.flags = t->noreplace ? DMAR_TREE_NOREPLACE : 0;
		t->op.mode = 0;
		snprintf(t->op.path, sizeof(t->op.path), "%s", t->paths[f->op]);
		t->op.data = rb;
		t->op.data_len = rlen;
		r = dmar_tree_body_op(b, &t->op);
	}
	free(e);
	free(rb);
	return r;
}

/* The files status[] says lacked chunks at the node, again in a body of
 * their own with all their chunks; their status[] updated.  0 or -errno. */
static int resend(struct tree *t, int *status, struct dmar_error *err)
{
	struct dmar_tree_body *b;
	size_t n = 0;
	int r = dmar_tree_body_new(&b);
	uint32_t *which = calloc(t->nfiles, sizeof(*which));
	int *st2 = calloc(t->nfiles, sizeof(*st2));
	if (r < 0 || !which || !st2) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t f = 0; f < t->nfiles; f++) {
		const struct tfile *tf = &t->files[f];
		if (status[tf->op] != -ENODATA)
			continue;
		if ((r = file_op(t, b, tf)) < 0)
			goto out;
		for (size_t k = tf->first; k < tf->first + tf->nchunks; k++)
			if ((r = dmar_tree_body_chunk(b, &t->chunks[k].id, t->data + t->chunks[k].off,
						      t->chunks[k].len)) < 0)
				goto out;
		which[n++] = tf->op;
	}
	struct dmar_xfer_stats xs;
	r = dmar_client_tree(t->c, b, st2, &xs, err);
	account(t, &xs);
	if (r >= 0) {
		for (size_t k = 0; k < n; k++)
			status[which[k]] = st2[k];
		r = 0;
	}
out:
	dmar_tree_body_free(b);
	free(which);
	free(st2);
	return r;
}

/* Send the batch: the query of its chunks, then the tree commit with the
 * missing ones.  Files the node found chunks missing for (it dropped
 * them since the query) go once more with all of theirs.  0, or -1 when
 * the request itself failed (reported). */
static int flush(struct tree *t)
{
	if (!dmar_tree_body_ops(t->body))
		return 0;
	struct dmar_error err = { 0 };
	struct dmar_idset set;
	uint8_t *missing = NULL;
	int *status = NULL;
	int ret = -1, r;
	if (dmar_idset_init(&set, t->nchunks ? t->nchunks : 1) < 0 ||
	    !(status = calloc(t->npaths, sizeof(*status))))
		goto nomem;
	for (size_t k = 0; k < t->nchunks; k++)
		dmar_idset_add(&set, &t->chunks[k].id, NULL);
	if (set.n) {
		if (!(missing = calloc(set.n, 1)))
			goto nomem;
		if ((r = dmar_client_query(t->c, set.ids, set.n, missing, &err)) < 0) {
			char why[400];
			cli_err("%s: %s", t->node, cli_net_why(r, &err, why, sizeof(why)));
			goto out;
		}
		t->st.round_trips++;
		t->requests++;
		/* Each missing chunk once: the first place it shows. */
		for (size_t k = 0; k < t->nchunks; k++) {
			int64_t i = dmar_idset_find(&set, &t->chunks[k].id);
			if (missing[i]) {
				missing[i] = 0;
				if (dmar_tree_body_chunk(t->body, &t->chunks[k].id, t->data + t->chunks[k].off,
							 t->chunks[k].len) < 0)
					goto nomem;
			}
		}
	}
	struct dmar_xfer_stats xs;
	r = dmar_client_tree(t->c, t->body, status, &xs, &err);
	account(t, &xs);
	if (r < 0) {
		char why[400];
		cli_err("%s: %s", t->node, cli_net_why(r, &err, why, sizeof(why)));
		t->failed += t->npaths;
		goto out;
	}
	/* Files whose chunks the node dropped since the query (its arena
	 * filled): once more, each with all of its chunks. */
	bool again = false;
	for (size_t f = 0; f < t->nfiles; f++)
		again |= status[t->files[f].op] == -ENODATA;
	if (again && (r = resend(t, status, &err)) < 0) {
		char why[400];
		cli_err("%s: %s", t->node, cli_net_why(r, &err, why, sizeof(why)));
	}
	for (size_t k = 0; k < t->npaths; k++)
		if (status[k]) {
			cli_err("%s:%s: %s", t->node, t->paths[k],
				status[k] == -EEXIST && t->noreplace ? "already exists (-n)" : strerror(-status[k]));
			t->failed++;
		}
	ret = 0;
	goto out;
nomem:
	cli_err("out of memory");
out:
	batch_clear(t);
	free(missing);
	free(status);
	dmar_idset_free(&set);
	return ret;
}

/* Time to send: enough bytes or operations, or near the format's limit
 * on operation bytes (one more can take a 4 KiB path and a recipe of
 * some KiB). */
static bool full(const struct tree *t)
{
	return dmar_tree_body_ops(t->body) >= TREE_BATCH_OPS || t->data_len >= TREE_BATCH_BYTES ||
	       dmar_tree_body_bytes(t->body) >= DMAR_TREE_OPS_BYTES_MAX - (256u << 10);
}

static int read_all(int fd, uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = read(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -ESTALE; /* it shrank */
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* A small file into the batch: its bytes, chunks and recipe.  0, 1
 * (reported, skipped), -1 (fatal). */
static int add_file(struct tree *t, int fd, const struct stat *st, const char *local, const char *path)
{
	size_t n = (size_t)st->st_size;
	if (grow((void **)&t->data, &t->data_cap, t->data_len + n + 1, 1) < 0 ||
	    grow((void **)&t->files, &t->files_cap, t->nfiles + 1, sizeof(*t->files)) < 0)
		return -1;
	int r = read_all(fd, t->data + t->data_len, n);
	if (r < 0) {
		cli_err("%s: %s", local, r == -ESTALE ? "shrank while being read" : strerror(-r));
		return 1;
	}
	struct tfile *f = &t->files[t->nfiles++];
	*f = (struct tfile){ .data = t->data_len, .size = n, .first = t->nchunks, .mode = st->st_mode & 07777,
			     .mtime = st->st_mtim, .op = (uint32_t)t->npaths };
	dmar_cutter_reset(t->cut);
	if ((r = dmar_cutter_feed(t->cut, t->data + t->data_len, n)) < 0 || (r = dmar_cutter_finish(t->cut)) < 0)
		return -1;
	f->nchunks = t->nchunks - f->first;
	/* Its path first (file_op names it from there). */
	if (grow((void **)&t->paths, &t->paths_cap, t->npaths + 1, sizeof(*t->paths)) < 0 ||
	    !(t->paths[t->npaths] = strdup(path)))
		return -1;
	t->npaths++;
	if (file_op(t, t->body, f) < 0)
		return -1;
	t->data_len += n;
	t->bytes += n;
	t->nfile++;
	return 0;
}

static int walk(struct tree *t, int dirfd, const char *local, const char *path);

static int name_cmp(const void *a, const void *b)
{
	return strcmp((*(struct dirent *const *)a)->d_name, (*(struct dirent *const *)b)->d_name);
}

/* One entry: name in the directory dirfd (local: its path here, path:
 * where it goes).  0, or -1 (fatal, reported). */
static int entry(struct tree *t, int dirfd, const char *name, const char *local, const char *path)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		cli_err("%s: %s", local, strerror(errno));
		t->skipped++;
		return 0;
	}
	struct dmar_error perr = { 0 };
	if (dmar_wire_path_check(path, &perr) < 0) {
		cli_err("%s: cannot be named on the node: %s", local, perr.msg);
		t->skipped++;
		return 0;
	}
	if (S_ISDIR(st.st_mode)) {
		int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			cli_err("%s: %s", local, strerror(errno));
			t->skipped++;
			return 0;
		}
		int r = full(t) && flush(t) < 0 ? -1 : add_op(t, DMAR_TREE_DIR, st.st_mode & 07777, path, NULL, 0);
		t->ndir++;
		if (r == 0)
			r = walk(t, fd, local, path);
		close(fd);
		return r < 0 ? -1 : 0;
	}
	if (S_ISLNK(st.st_mode)) {
		char target[DMAR_TREE_PATH_MAX + 1];
		ssize_t n = readlinkat(dirfd, name, target, sizeof(target));
		if (n <= 0 || n > DMAR_TREE_PATH_MAX) {
			cli_err("%s: %s", local, n < 0 ? strerror(errno) : "symlink target too long");
			t->skipped++;
			return 0;
		}
		if (full(t) && flush(t) < 0)
			return -1;
		t->nlink++;
		return add_op(t, DMAR_TREE_SYMLINK, 0, path, target, (size_t)n) < 0 ? -1 : 0;
	}
	if (!S_ISREG(st.st_mode)) {
		cli_err("%s: skipped: not a regular file, directory or symlink", local);
		t->skipped++;
		return 0;
	}
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		cli_err("%s: %s", local, strerror(errno));
		t->skipped++;
		return 0;
	}
	int r = 0;
	if ((uint64_t)st.st_size > TREE_FILE_MAX) {
		/* Its directory first, then the file on its own. */
		char where[4200];
		snprintf(where, sizeof(where), "%s:%s", t->node, path);
		struct dmar_xfer_stats xs;
		if (flush(t) < 0) {
			r = -1;
		} else if (cp_push_fd(t->c, NULL, local, fd, &st, path, where, t->noreplace, false, &xs) != 0) {
			t->failed++;
		} else {
			account(t, &xs);
			t->nfile++;
			t->bytes += (uint64_t)st.st_size;
		}
	} else {
		if (full(t) && flush(t) < 0)
			r = -1;
		else if ((r = add_file(t, fd, &st, local, path)) > 0)
			t->skipped++, r = 0;
		else if (r < 0)
			cli_err("out of memory");
	}
	close(fd);
	return r;
}

/* The entries of directory fd, in name order (a stable walk). */
static int walk(struct tree *t, int fd, const char *local, const char *path)
{
	struct dirent **names;
	int dupfd = dup(fd);
	DIR *d = dupfd >= 0 ? fdopendir(dupfd) : NULL;
	if (!d) {
		if (dupfd >= 0)
			close(dupfd);
		cli_err("%s: %s", local, strerror(errno));
		t->skipped++;
		return 0;
	}
	size_t n = 0, cap = 0;
	names = NULL;
	int ret = 0;
	for (struct dirent *de; (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (grow((void **)&names, &cap, n + 1, sizeof(*names)) < 0 ||
		    !(names[n] = malloc(sizeof(struct dirent)))) {
			cli_err("out of memory");
			ret = -1;
			break;
		}
		memcpy(names[n++], de, sizeof(*de));
	}
	closedir(d);
	if (n > 1)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t k = 0; k < n; k++) {
		if (ret == 0) {
			char *l = NULL, *p = NULL;
			if (asprintf(&l, "%s/%s", local, names[k]->d_name) < 0 ||
			    asprintf(&p, "%s%s%s", path, path[0] ? "/" : "", names[k]->d_name) < 0) {
				cli_err("out of memory");
				ret = -1;
			} else {
				ret = entry(t, fd, names[k]->d_name, l, p);
			}
			free(l);
			free(p);
		}
		free(names[k]);
	}
	free(names);
	return ret;
}

int cp_push_tree(struct dmar_client *c, const char *node, const char *src, const char *dst, bool noreplace)
{
	struct tree t = { .c = c, .node = node, .noreplace = noreplace };
	struct dmar_chunker ck;
	int status = 1;
	double t0 = dmar_mono_s();
	if (dmar_chunker_init(&ck, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT, DMAR_CHUNK_MAX_DEFAULT) < 0 ||
	    dmar_tree_body_new(&t.body) < 0 || dmar_cutter_new(&t.cut, &ck, on_chunk, &t) < 0) {
		cli_err("out of memory");
		goto out;
	}
	/* The top directory itself, then its tree: as entry() does, from
	 * the directory above it. */
	char *slash = strrchr(src, '/');
	char *parent = slash ? strndup(src, slash == src ? 1 : (size_t)(slash - src)) : strdup(".");
	const char *name = slash ? slash + 1 : src;
	int pfd = parent ? open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	free(parent);
	if (pfd < 0) {
		cli_err("%s: %s", src, strerror(errno));
		goto out;
	}
	int r = entry(&t, pfd, name, src, dst);
	close(pfd);
	if (r == 0)
		r = flush(&t);
	t.st.seconds = dmar_mono_s() - t0;
	t.st.logical = t.bytes;
	if (cli_verbosity >= 1) {
		char a[32], w[32], es[32], ws[32];
		double s = t.st.seconds > 0 ? t.st.seconds : 1e-9;
		fprintf(stderr,
			"%s -> %s:%s: %" PRIu64 " files, %" PRIu64 " directories, %" PRIu64 " symlinks, %" PRIu64
			" bytes (%s); %" PRIu64 " chunks sent (%" PRIu64 " bytes), wire %" PRIu64 " bytes (%s), %" PRIu64
			" requests, %.3f s, effective %s, wire %s\n",
			src, node, dst, t.nfile, t.ndir, t.nlink, t.bytes, dmar_size_format(t.bytes, a), t.st.sent_chunks,
			t.st.chunk_bytes, t.st.wire_bytes, dmar_size_format(t.st.wire_bytes, w), t.requests, t.st.seconds,
			cli_rate(t.bytes / s, es), cli_rate(t.st.wire_bytes / s, ws));
	}
	if (r == 0 && !t.failed && !t.skipped)
		status = 0;
	else if (r == 0)
		cli_err("%" PRIu64 " not copied, %" PRIu64 " skipped", t.failed, t.skipped);
out:
	batch_clear(&t);
	dmar_tree_body_free(t.body);
	dmar_cutter_free(t.cut);
	free(t.data);
	free(t.chunks);
	free(t.files);
	free(t.paths);
	return status;
}
