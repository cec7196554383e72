/* SPDX-License-Identifier: MIT */
/*
 * test_fuse - the mount's front ends without /dev/fuse: node a's FUSE
 * operations (fs.c wrapped by remote.c's @PEER paths) driven by a fake
 * kernel that speaks the FUSE protocol over a socket pair
 * (fuse_session_custom_io), and a second node b in the same process,
 * serving its REST API on loopback (node.c over its own namespace).
 *
 * Each test gets two fresh nodes.  What b holds is read from b's
 * namespace directly, and both arenas must add up (dmarfs_check) after
 * every test.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>
#include <linux/fuse.h>

#include "prng.h"
#include "arena/arena.h"
#include "dmarfs/check.h"
#include "dmarfs/fs.h"
#include "dmarfs/node.h"
#include "dmarfs/ns.h"
#include "net/client.h"

/* Requests and replies stay under what a SEQPACKET message may carry. */
#define IO_MAX (64u << 10)

static char rundir[128];

/* ---- a node in this process ------------------------------------------ */

struct node {
	char name[8];
	int port;
	char listen[32], peers[192];
	struct dmar_arena *a;
	struct dmarfs *fs;
	struct dmarfs_node *n;
};

static int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s >= 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	close(s);
	return ntohs(sa.sin_port);
}

/* Node name with an arena of size bytes, whose one peer is other. */
static void node_open(struct node *nd, const char *name, uint64_t size, const struct node *other)
{
	snprintf(nd->name, sizeof(nd->name), "%s", name);
	snprintf(nd->listen, sizeof(nd->listen), "127.0.0.1:%d", nd->port);
	snprintf(nd->peers, sizeof(nd->peers), "%s/peers.%s", rundir, name);
	FILE *f = fopen(nd->peers, "w");
	assert_non_null(f);
	fprintf(f, "%s 127.0.0.1:%d\n", other->name, other->port);
	fclose(f);
	struct dmar_arena_opts o = { .size = size, .pagesize = 4096, .name = name, .fresh = true, .owner = "/test" };
	struct dmar_error err = { 0 };
	if (dmar_arena_new(&nd->a, &o, &err))
		fail_msg("arena %s: %s", name, err.msg);
	struct dmarfs_config cfg = {
		.ctx = { .arena = nd->a, .encode = DMAR_ENCODE_DEDUP, .max_size = 16 * size },
		.nr_inodes = 10000,
		.root_mode = 0755,
	};
	dmar_chunker_init(&cfg.ctx.chunker, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT, DMAR_CHUNK_MAX_DEFAULT);
	assert_int_equal(dmarfs_new(&nd->fs, &cfg), 0);
	struct dmarfs_node_config nc = { .name = nd->name, .listen = nd->listen, .peers = nd->peers, .serve = true };
	if (dmarfs_node_new(&nd->n, nd->fs, &nc, &err) < 0 || dmarfs_remote_new(nd->fs, nd->n, NULL, &err) < 0)
		fail_msg("node %s: %s", name, err.msg);
	dmarfs_set_node(nd->fs, nd->n);
	if (dmarfs_node_start(nd->n, &err) < 0)
		fail_msg("node %s: %s", name, err.msg);
}

static void assert_adds_up(struct node *nd)
{
	char *rep = NULL;
	int r = dmarfs_check(nd->fs, &rep);
	if (r)
		fail_msg("check of %s: %d: %s", nd->name, r, rep ? rep : "");
	assert_non_null(strstr(rep, "state=ok"));
	free(rep);
}

/* ---- the fake kernel --------------------------------------------------- */

struct kern {
	int fd; /* our end; the session has the other */
	uint64_t unique;
	struct fuse_session *se;
	pthread_t loop;
	uint8_t *buf; /* replies */
};

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)count };
	return sendmsg(fd, &m, MSG_NOSIGNAL);
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	(void)userdata;
	ssize_t n = recv(fd, buf, len, 0);
	/* Our end closed: the session ends, as at umount (ENODEV). */
	if (n == 0) {
		errno = ENODEV;
		return -1;
	}
	return n;
}

static void *loop_main(void *arg)
{
	fuse_session_loop(arg);
	return NULL;
}

/* Send op on nodeid with the parts (pointer, length pairs, NULL-ended);
 * no reply awaited (FORGET). */
static uint64_t ksend(struct kern *k, uint32_t op, uint64_t nodeid, ...)
{
	struct iovec iov[8];
	int n = 1;
	size_t len = sizeof(struct fuse_in_header);
	va_list ap;
	va_start(ap, nodeid);
	for (const void *p; (p = va_arg(ap, const void *));) {
		size_t l = va_arg(ap, size_t);
		assert_true(n < 8);
		iov[n++] = (struct iovec){ (void *)p, l };
		len += l;
	}
	va_end(ap);
	struct fuse_in_header h = { .len = (uint32_t)len, .opcode = op, .unique = ++k->unique, .nodeid = nodeid,
				    .uid = 0, .gid = 0, .pid = (uint32_t)getpid() };
	iov[0] = (struct iovec){ &h, sizeof(h) };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
	assert_int_equal(sendmsg(k->fd, &m, MSG_NOSIGNAL), (ssize_t)len);
	return h.unique;
}

/* The reply to request unique: 0 or -errno, its body in k->buf (*len
 * bytes).  Notifications (unique 0) on the way are skipped. */
static int kwait(struct kern *k, uint64_t unique, size_t *len)
{
	for (;;) {
		ssize_t n = recv(k->fd, k->buf, IO_MAX + 4096, 0);
		assert_true(n >= (ssize_t)sizeof(struct fuse_out_header));
		struct fuse_out_header h;
		memcpy(&h, k->buf, sizeof(h));
		assert_int_equal(h.len, (uint32_t)n);
		if (h.unique == 0)
			continue;
		assert_int_equal(h.unique, unique);
		if (len)
			*len = (size_t)n - sizeof(h);
		memmove(k->buf, k->buf + sizeof(h), (size_t)n - sizeof(h));
		return h.error;
	}
}

#define KCALL(k, len, op, nodeid, ...) kwait((k), ksend((k), (op), (nodeid), __VA_ARGS__, NULL), (len))

static void kern_start(struct kern *k, struct dmarfs *fs)
{
	memset(k, 0, sizeof(*k));
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	k->fd = sv[0];
	assert_non_null(k->buf = malloc(IO_MAX + 4096));
	char *argv[] = { "test_fuse", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);
	k->se = fuse_session_new(&args, dmarfs_ops(), sizeof(struct fuse_lowlevel_ops), fs);
	fuse_opt_free_args(&args); /* the session keeps its own copies */
	assert_non_null(k->se);
	static const struct fuse_custom_io io = { .writev = io_writev, .read = io_read };
	assert_int_equal(fuse_session_custom_io(k->se, &io, sv[1]), 0);
	dmarfs_set_session(fs, k->se);
	assert_int_equal(pthread_create(&k->loop, NULL, loop_main, k->se), 0);
	struct fuse_init_in in = { .major = FUSE_KERNEL_VERSION, .minor = 31, .max_readahead = 1u << 20,
				   .flags = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS };
	size_t n;
	assert_int_equal(KCALL(k, &n, FUSE_INIT, 0, &in, sizeof(in)), 0);
	struct fuse_init_out out;
	assert_true(n >= 24);
	memcpy(&out, k->buf, n < sizeof(out) ? n : sizeof(out));
	assert_int_equal(out.major, FUSE_KERNEL_VERSION);
}

/* umount: the session sees its device go, ends, and runs destroy. */
static void kern_stop(struct kern *k)
{
	shutdown(k->fd, SHUT_RDWR);
	pthread_join(k->loop, NULL);
	fuse_session_destroy(k->se);
	close(k->fd);
	free(k->buf);
}

/* ---- requests -------------------------------------------------------- */

static uint64_t klookup(struct kern *k, uint64_t dir, const char *name, int want)
{
	size_t n;
	int r = KCALL(k, &n, FUSE_LOOKUP, dir, name, strlen(name) + 1);
	if (r != want)
		fail_msg("lookup %s: %d, expected %d", name, r, want);
	if (r)
		return 0;
	struct fuse_entry_out e;
	memcpy(&e, k->buf, sizeof(e));
	return e.nodeid;
}

/* create(2) of name in dir: the entry's nodeid, and *fh. */
static uint64_t kcreate(struct kern *k, uint64_t dir, const char *name, uint64_t *fh)
{
	struct fuse_create_in in = { .flags = O_WRONLY | O_CREAT | O_TRUNC, .mode = S_IFREG | 0644, .umask = 022 };
	size_t n;
	int r = KCALL(k, &n, FUSE_CREATE, dir, &in, sizeof(in), name, strlen(name) + 1);
	if (r)
		fail_msg("create %s: %s", name, strerror(-r));
	assert_int_equal(n, sizeof(struct fuse_entry_out) + sizeof(struct fuse_open_out));
	struct fuse_entry_out e;
	struct fuse_open_out o;
	memcpy(&e, k->buf, sizeof(e));
	memcpy(&o, k->buf + sizeof(e), sizeof(o));
	*fh = o.fh;
	return e.nodeid;
}

static uint64_t kopen(struct kern *k, uint64_t ino, int flags)
{
	struct fuse_open_in in = { .flags = (uint32_t)flags };
	size_t n;
	assert_int_equal(KCALL(k, &n, FUSE_OPEN, ino, &in, sizeof(in)), 0);
	struct fuse_open_out o;
	memcpy(&o, k->buf, sizeof(o));
	return o.fh;
}

/* Write len bytes at 0 in IO_MAX pieces: 0 or the first error. */
static int kwrite_all(struct kern *k, uint64_t ino, uint64_t fh, const uint8_t *p, size_t len)
{
	for (size_t at = 0; at < len;) {
		uint32_t piece = len - at < IO_MAX ? (uint32_t)(len - at) : IO_MAX;
		struct fuse_write_in in = { .fh = fh, .offset = at, .size = piece };
		size_t n;
		int r = KCALL(k, &n, FUSE_WRITE, ino, &in, sizeof(in), p + at, (size_t)piece);
		if (r)
			return r;
		struct fuse_write_out o;
		memcpy(&o, k->buf, sizeof(o));
		assert_int_equal(o.size, piece);
		at += piece;
	}
	return 0;
}

/* close(2): FLUSH (its answer is close's), then RELEASE. */
static int kclose(struct kern *k, uint64_t ino, uint64_t fh)
{
	struct fuse_flush_in fl = { .fh = fh };
	int r = KCALL(k, NULL, FUSE_FLUSH, ino, &fl, sizeof(fl));
	struct fuse_release_in rl = { .fh = fh };
	assert_int_equal(KCALL(k, NULL, FUSE_RELEASE, ino, &rl, sizeof(rl)), 0);
	return r;
}

static void kforget(struct kern *k, uint64_t ino)
{
	struct fuse_forget_in in = { .nlookup = 1 };
	ksend(k, FUSE_FORGET, ino, &in, sizeof(in), NULL);
	/* FORGET has no reply: a request after it that has one returns once
	 * the FORGET was handled (one loop thread, requests in order), so a
	 * check that follows sees what it freed. */
	struct fuse_getattr_in gi = { 0 };
	assert_int_equal(KCALL(k, NULL, FUSE_GETATTR, FUSE_ROOT_ID, &gi, sizeof(gi)), 0);
}

/* The names of dir's listing, in order, "name/" for directories, each
 * followed by a space. */
static void klist(struct kern *k, uint64_t dir, char *out, size_t cap)
{
	struct fuse_open_in oi = { .flags = O_RDONLY };
	size_t n;
	assert_int_equal(KCALL(k, &n, FUSE_OPENDIR, dir, &oi, sizeof(oi)), 0);
	struct fuse_open_out oo;
	memcpy(&oo, k->buf, sizeof(oo));
	size_t used = 0;
	out[0] = 0;
	for (uint64_t off = 0;;) {
		struct fuse_read_in ri = { .fh = oo.fh, .offset = off, .size = 4096 };
		assert_int_equal(KCALL(k, &n, FUSE_READDIR, dir, &ri, sizeof(ri)), 0);
		if (!n)
			break;
		for (size_t at = 0; at < n;) {
			struct fuse_dirent d;
			memcpy(&d, k->buf + at, sizeof(d));
			used += (size_t)snprintf(out + used, cap - used, "%.*s%s ", (int)d.namelen,
						 (const char *)k->buf + at + FUSE_NAME_OFFSET,
						 d.type == (S_IFDIR >> 12) ? "/" : "");
			assert_true(used < cap);
			off = d.off;
			at += FUSE_DIRENT_SIZE(&d);
		}
	}
	struct fuse_release_in rl = { .fh = oo.fh };
	assert_int_equal(KCALL(k, NULL, FUSE_RELEASEDIR, dir, &rl, sizeof(rl)), 0);
}

/* ---- fixtures --------------------------------------------------------- */

struct pair {
	struct node a, b;
	struct kern k;
	uint64_t at_b; /* a's @b */
};

static int pair_setup(void **state)
{
	static struct pair p;
	memset(&p, 0, sizeof(p));
	p.a.port = free_port();
	p.b.port = free_port();
	snprintf(p.a.name, sizeof(p.a.name), "a");
	snprintf(p.b.name, sizeof(p.b.name), "b");
	node_open(&p.b, "b", 48u << 20, &p.a);
	node_open(&p.a, "a", 256u << 20, &p.b);
	kern_start(&p.k, p.a.fs);
	p.at_b = klookup(&p.k, FUSE_ROOT_ID, "@b", 0);
	*state = &p;
	return 0;
}

static void node_close(struct node *nd)
{
	dmarfs_node_stop(nd->n);
	dmarfs_stop(nd->fs);
	dmarfs_node_free(nd->n);
	dmarfs_free(nd->fs);
	dmar_arena_remove(nd->a);
	dmar_arena_free(nd->a);
	unlink(nd->peers);
}

static int pair_teardown(void **state)
{
	struct pair *p = *state;
	kern_stop(&p->k);
	node_close(&p->a);
	node_close(&p->b);
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(rundir, sizeof(rundir), "/dev/shm/dmarfs-test-fuse.%d", (int)getpid());
	mkdir(rundir, 0700);
	setenv("DMARFS_RUNDIR", rundir, 1);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rundir);
	return system(cmd) == 0 ? 0 : -1;
}

/* b's file at path: its bytes (malloc'd, *len unless len is NULL), or NULL when absent. */
static uint8_t *b_file(struct node *b, const char *path, size_t *len)
{
	struct inode *i = NULL;
	if (ns_walk(b->fs, path, &i) < 0)
		return NULL;
	pthread_rwlock_rdlock(&i->lock);
	size_t n = (size_t)i->f.size;
	uint8_t *out = malloc(n + 1), *scratch = malloc(65536);
	assert_non_null(out);
	assert_non_null(scratch);
	for (size_t at = 0; at < n;) {
		struct iovec iov[64];
		size_t got = 0;
		int k = dmar_file_read_iov(&i->f, &b->fs->cfg.ctx, at, n - at < 65536 ? n - at : 65536, iov, 64,
					   scratch, &got);
		assert_true(k >= 0 && got > 0);
		for (int v = 0; v < k; v++) {
			memcpy(out + at, iov[v].iov_base, iov[v].iov_len);
			at += iov[v].iov_len;
		}
	}
	pthread_rwlock_unlock(&i->lock);
	ns_forget(b->fs, i, 1);
	free(scratch);
	if (len)
		*len = n;
	return out;
}

/* b holds path with exactly data[0..len). */
static void b_has(struct node *b, const char *path, const void *data, size_t len)
{
	size_t got;
	uint8_t *at_b = b_file(b, path, &got);
	assert_non_null(at_b);
	assert_int_equal(got, len);
	assert_memory_equal(at_b, data, len);
	free(at_b);
}

/* ---- tests ------------------------------------------------------------ */

/* The root lists its own entries, then the @PEER directories (the node
 * itself among them), then @all, the group of every other peer. */
static void test_root_listing(void **state)
{
	struct pair *p = *state;
	char names[512];
	klist(&p->k, FUSE_ROOT_ID, names, sizeof(names));
	assert_string_equal(names, "./ ../ @b/ @a/ @all/ ");
	uint64_t fh;
	uint64_t loc = kcreate(&p->k, FUSE_ROOT_ID, "local", &fh);
	assert_int_equal(kclose(&p->k, loc, fh), 0);
	klist(&p->k, FUSE_ROOT_ID, names, sizeof(names));
	assert_string_equal(names, "./ ../ local @b/ @a/ @all/ ");
	/* A name under @ at the root is the peers'. */
	struct fuse_create_in in = { .flags = O_WRONLY | O_CREAT, .mode = S_IFREG | 0644 };
	assert_int_equal(KCALL(&p->k, NULL, FUSE_CREATE, FUSE_ROOT_ID, &in, sizeof(in), "@c", (size_t)3), -EINVAL);
	/* No such peer: absent, as a negative entry the kernel keeps. */
	assert_int_equal(klookup(&p->k, FUSE_ROOT_ID, "@nosuch", 0), 0);
	assert_adds_up(&p->a);
}

/* The entry in the kernel's buffer after a LOOKUP, CREATE or MKDIR. */
static struct fuse_entry_out last_entry(const struct kern *k)
{
	struct fuse_entry_out e;
	memcpy(&e, k->buf, sizeof(e));
	return e;
}

/* Each entry's generation is its inode number, so that an inode the
 * daemon frees and a later one at the same address (its nodeid) never
 * look the same to the kernel: a file made, removed and forgotten, and
 * the next made, have two (nodeid, generation) pairs; so do the entries
 * under @b/. */
static void test_generations(void **state)
{
	struct pair *p = *state;
	uint64_t fh, f = kcreate(&p->k, FUSE_ROOT_ID, "g1", &fh);
	struct fuse_entry_out e1 = last_entry(&p->k);
	assert_true(e1.generation != 0 && e1.generation == e1.attr.ino);
	assert_int_equal(kclose(&p->k, f, fh), 0);
	assert_int_equal(klookup(&p->k, FUSE_ROOT_ID, "g1", 0), f);
	assert_true(last_entry(&p->k).generation == e1.generation);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_UNLINK, FUSE_ROOT_ID, "g1", (size_t)3), 0);
	kforget(&p->k, f);
	kforget(&p->k, f);
	for (int k = 0; k < 32; k++) {
		char name[16];
		snprintf(name, sizeof(name), "n%d", k);
		uint64_t g = kcreate(&p->k, FUSE_ROOT_ID, name, &fh);
		struct fuse_entry_out e = last_entry(&p->k);
		assert_true(e.generation == e.attr.ino);
		assert_false(g == e1.nodeid && e.generation == e1.generation);
		assert_int_equal(kclose(&p->k, g, fh), 0);
	}
	struct fuse_mkdir_in mi = { .mode = 0755 };
	assert_int_equal(KCALL(&p->k, NULL, FUSE_MKDIR, p->at_b, &mi, sizeof(mi), "gd", (size_t)3), 0);
	struct fuse_entry_out r = last_entry(&p->k);
	assert_true(r.generation != 0 && r.generation == r.attr.ino);
	kforget(&p->k, r.nodeid);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_RMDIR, p->at_b, "gd", (size_t)3), 0);
	assert_adds_up(&p->a);
}

/* cp f MNT/@b/: the close returns b's commit, b holds the file whole. */
static void test_ship(void **state)
{
	struct pair *p = *state;
	size_t len = (3u << 20) + 12345;
	uint8_t *data = malloc(len);
	assert_non_null(data);
	fill_random(data, len, 11);
	uint64_t fh, ino = kcreate(&p->k, p->at_b, "x", &fh);
	assert_int_equal(kwrite_all(&p->k, ino, fh, data, len), 0);
	assert_int_equal(kclose(&p->k, ino, fh), 0);
	b_has(&p->b, "x", data, len);
	/* Listed there, and read back through a's @b from the copy. */
	char names[512];
	klist(&p->k, p->at_b, names, sizeof(names));
	assert_non_null(strstr(names, " x "));
	uint64_t rfh = kopen(&p->k, ino, O_RDONLY);
	struct fuse_read_in ri = { .fh = rfh, .offset = 1u << 20, .size = IO_MAX };
	size_t n;
	assert_int_equal(KCALL(&p->k, &n, FUSE_READ, ino, &ri, sizeof(ri)), 0);
	assert_int_equal(n, IO_MAX);
	assert_memory_equal(p->k.buf, data + (1u << 20), IO_MAX);
	assert_int_equal(kclose(&p->k, ino, rfh), 0);
	kforget(&p->k, ino);
	free(data);
	assert_adds_up(&p->a);
	assert_adds_up(&p->b);
}

/* A file larger than b's arena: close fails with ENOSPC, b has no name
 * and none of the upload's space. */
static void test_ship_enospc(void **state)
{
	struct pair *p = *state;
	size_t len = 64u << 20;
	uint8_t *data = malloc(len);
	assert_non_null(data);
	fill_random(data, len, 12);
	uint64_t used0 = dmar_arena_used(p->b.a);
	uint64_t fh, ino = kcreate(&p->k, p->at_b, "big", &fh);
	assert_int_equal(kwrite_all(&p->k, ino, fh, data, len), 0);
	assert_int_equal(kclose(&p->k, ino, fh), -ENOSPC);
	assert_null(b_file(&p->b, "big", NULL));
	assert_true(dmar_arena_used(p->b.a) < used0 + (1u << 20));
	kforget(&p->k, ino);
	free(data);
	assert_adds_up(&p->a);
	assert_adds_up(&p->b);
}

/* b gone: the create is local (the kernel looked the name up), the
 * close fails with EIO, and a keeps nothing of the ship. */
static void test_peer_down(void **state)
{
	struct pair *p = *state;
	dmarfs_node_stop(p->b.n);
	uint8_t data[4096];
	fill_random(data, sizeof(data), 13);
	uint64_t fh, ino = kcreate(&p->k, p->at_b, "y", &fh);
	assert_int_equal(kwrite_all(&p->k, ino, fh, data, sizeof(data)), 0);
	assert_int_equal(kclose(&p->k, ino, fh), -EIO);
	assert_null(b_file(&p->b, "y", NULL));
	/* And asking b anything is EIO too. */
	klookup(&p->k, p->at_b, "other", -EIO);
	kforget(&p->k, ino);
	assert_adds_up(&p->a);
}

/* @all (here: b, the only other peer): mkdir, a file shipped at its
 * close, unlink and rmdir happen at the member, and @b/ sees each at
 * once (its listing is the member's, not a stale copy). */
static void test_group(void **state)
{
	struct pair *p = *state;
	uint64_t all = klookup(&p->k, FUSE_ROOT_ID, "@all", 0);
	assert_true(all != 0 && all != p->at_b);
	char names[512];
	klist(&p->k, p->at_b, names, sizeof(names));
	assert_null(strstr(names, " g/"));
	struct fuse_mkdir_in mi = { .mode = 0755 };
	size_t n;
	assert_int_equal(KCALL(&p->k, &n, FUSE_MKDIR, all, &mi, sizeof(mi), "g", (size_t)2), 0);
	struct fuse_entry_out e;
	memcpy(&e, p->k.buf, sizeof(e));
	klist(&p->k, p->at_b, names, sizeof(names));
	assert_non_null(strstr(names, " g/"));
	assert_int_equal(KCALL(&p->k, NULL, FUSE_MKDIR, all, &mi, sizeof(mi), "g", (size_t)2), -EEXIST);
	uint8_t data[20000];
	fill_random(data, sizeof(data), 14);
	uint64_t fh, f = kcreate(&p->k, e.nodeid, "f", &fh);
	assert_int_equal(kwrite_all(&p->k, f, fh, data, sizeof(data)), 0);
	assert_int_equal(kclose(&p->k, f, fh), 0);
	b_has(&p->b, "g/f", data, sizeof(data));
	kforget(&p->k, f);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_UNLINK, e.nodeid, "f", (size_t)2), 0);
	assert_null(b_file(&p->b, "g/f", NULL));
	assert_int_equal(KCALL(&p->k, NULL, FUSE_UNLINK, e.nodeid, "f", (size_t)2), -ENOENT);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_RMDIR, all, "g", (size_t)2), 0);
	struct inode *i = NULL;
	assert_int_equal(ns_walk(p->b.fs, "g", &i), -ENOENT);
	kforget(&p->k, e.nodeid);
	assert_adds_up(&p->a);
	assert_adds_up(&p->b);
}

/* mkdir, create inside, unlink, rmdir under @b: each is b's at once. */
static void test_names(void **state)
{
	struct pair *p = *state;
	struct fuse_mkdir_in mi = { .mode = 0755 };
	size_t n;
	assert_int_equal(KCALL(&p->k, &n, FUSE_MKDIR, p->at_b, &mi, sizeof(mi), "d", (size_t)2), 0);
	struct fuse_entry_out e;
	memcpy(&e, p->k.buf, sizeof(e));
	struct inode *i = NULL;
	assert_int_equal(ns_walk(p->b.fs, "d", &i), 0);
	assert_true(S_ISDIR(i->mode));
	ns_forget(p->b.fs, i, 1);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_MKDIR, p->at_b, &mi, sizeof(mi), "d", (size_t)2), -EEXIST);
	uint64_t fh, f = kcreate(&p->k, e.nodeid, "f", &fh);
	assert_int_equal(kwrite_all(&p->k, f, fh, (const uint8_t *)"hello\n", 6), 0);
	assert_int_equal(kclose(&p->k, f, fh), 0);
	b_has(&p->b, "d/f", "hello\n", 6);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_RMDIR, p->at_b, "d", (size_t)2), -ENOTEMPTY);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_UNLINK, e.nodeid, "f", (size_t)2), 0);
	assert_null(b_file(&p->b, "d/f", NULL));
	assert_int_equal(KCALL(&p->k, NULL, FUSE_RMDIR, p->at_b, "d", (size_t)2), 0);
	assert_int_equal(ns_walk(p->b.fs, "d", &i), -ENOENT);
	/* A symlink under @b: made at b by a tree commit, and read back. */
	size_t n2;
	assert_int_equal(KCALL(&p->k, &n2, FUSE_SYMLINK, p->at_b, "sl", (size_t)3, "d/f", (size_t)4), 0);
	struct fuse_entry_out se;
	memcpy(&se, p->k.buf, sizeof(se));
	assert_int_equal(se.attr.mode & S_IFMT, S_IFLNK);
	assert_int_equal(ns_walk(p->b.fs, "sl", &i), 0);
	assert_true(S_ISLNK(i->mode));
	assert_string_equal(i->target, "d/f");
	ns_forget(p->b.fs, i, 1);
	assert_int_equal(KCALL(&p->k, &n2, FUSE_READLINK, se.nodeid, NULL, (size_t)0 ), 0);
	assert_int_equal(n2, 3);
	assert_memory_equal(p->k.buf, "d/f", 3);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_SYMLINK, p->at_b, "sl", (size_t)3, "x", (size_t)2), -EEXIST);
	kforget(&p->k, se.nodeid);
	/* Renames across the @b boundary are EXDEV (mv copies instead). */
	uint64_t lfh, l = kcreate(&p->k, FUSE_ROOT_ID, "l", &lfh);
	assert_int_equal(kclose(&p->k, l, lfh), 0);
	struct fuse_rename_in rn = { .newdir = p->at_b };
	assert_int_equal(KCALL(&p->k, NULL, FUSE_RENAME, FUSE_ROOT_ID, &rn, sizeof(rn), "l", (size_t)2, "l",
			       (size_t)2),
			 -EXDEV);
	kforget(&p->k, f);
	kforget(&p->k, e.nodeid);
	assert_adds_up(&p->a);
	assert_adds_up(&p->b);
}


/* Requests b's server has answered (GET /v1/node, itself one of them). */
static uint64_t b_requests(struct pair *p)
{
	json_t *o = NULL;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_info(dmarfs_node_peer(p->a.n, "b"), &o, &err), 0);
	uint64_t n = (uint64_t)json_integer_value(json_object_get(json_object_get(o, "server"), "requests"));
	json_decref(o);
	return n;
}

static void tree_op(struct dmar_tree_body *b, uint8_t kind, uint8_t flags, uint32_t mode, const char *path,
		    const void *data, size_t len)
{
	struct dmar_tree_op *op = calloc(1, sizeof(*op));
	assert_non_null(op);
	*op = (struct dmar_tree_op){ .kind = kind, .flags = flags, .mode = mode, .data = data, .data_len = len };
	snprintf(op->path, sizeof(op->path), "%s", path);
	assert_int_equal(dmar_tree_body_op(b, op), 0);
	free(op);
}

/* A file's recipe of one chunk (malloc'd, *len bytes), and the chunk into
 * b unless without. */
static uint8_t *one_chunk_file(struct dmar_tree_body *b, const uint8_t *data, uint32_t n, bool with, size_t *len)
{
	struct dmar_recipe r = { .size = n, .mode = 0640, .mtime_sec = 1700000000, .n = 1 };
	struct dmar_recipe_entry e = { .kind = DMAR_RECIPE_CHUNK, .len = n };
	dmar_hash(data, n, &e.id);
	r.e = &e;
	*len = dmar_recipe_wire_size(1);
	uint8_t *rb = malloc(*len);
	assert_non_null(rb);
	dmar_recipe_write(&r, rb, NULL);
	if (with)
		assert_int_equal(dmar_tree_body_chunk(b, &e.id, data, n), 0);
	return rb;
}

/* POST /v1/tree: directories (one there already), files, a symlink, made
 * in order in one request; a failed operation fails alone; nothing of the
 * upload stays staged. */
static void test_tree(void **state)
{
	struct pair *p = *state;
	struct dmar_client *cl = dmarfs_node_peer(p->a.n, "b");
	struct dmar_tree_body *b;
	assert_int_equal(dmar_tree_body_new(&b), 0);
	uint8_t d1[5000], d2[70000];
	fill_random(d1, sizeof(d1), 21);
	fill_random(d2, sizeof(d2), 22);
	size_t l1, l2, l3;
	uint8_t *r1 = one_chunk_file(b, d1, sizeof(d1), true, &l1);
	uint8_t *r2 = one_chunk_file(b, d2, sizeof(d2), true, &l2);
	uint8_t *r3 = one_chunk_file(b, (const uint8_t *)"never sent", 10, false, &l3);
	tree_op(b, DMAR_TREE_DIR, 0, 0750, "t", NULL, 0);
	tree_op(b, DMAR_TREE_DIR, 0, 0755, "t/sub", NULL, 0);
	tree_op(b, DMAR_TREE_FILE, 0, 0, "t/one", r1, l1);
	tree_op(b, DMAR_TREE_FILE, 0, 0, "t/sub/two", r2, l2);
	tree_op(b, DMAR_TREE_SYMLINK, 0, 0, "t/link", "sub/two", 7);
	tree_op(b, DMAR_TREE_FILE, 0, 0, "nodir/x", r1, l1);      /* ENOENT */
	tree_op(b, DMAR_TREE_FILE, 0, 0, "t/missing", r3, l3);    /* ENODATA */
	tree_op(b, DMAR_TREE_DIR, 0, 0700, "t", NULL, 0);         /* there: fine */
	tree_op(b, DMAR_TREE_DIR, 0, 0700, "t/one", NULL, 0);     /* a file: EEXIST */
	tree_op(b, DMAR_TREE_FILE, DMAR_TREE_NOREPLACE, 0, "t/one", r2, l2); /* EEXIST */
	int status[10];
	struct dmar_error err = { 0 };
	uint64_t q0 = b_requests(p);
	assert_int_equal(dmar_client_tree(cl, b, status, NULL, &err), 4);
	assert_int_equal(b_requests(p), q0 + 2); /* the tree, and this info */
	int want[10] = { 0, 0, 0, 0, 0, -ENOENT, -ENODATA, 0, -EEXIST, -EEXIST };
	assert_memory_equal(status, want, sizeof(want));
	assert_non_null(strstr(err.msg, "nodir/x"));
	b_has(&p->b, "t/one", d1, sizeof(d1));
	b_has(&p->b, "t/sub/two", d2, sizeof(d2));
	struct inode *i;
	assert_int_equal(ns_walk(p->b.fs, "t/link", &i), 0);
	assert_true(S_ISLNK(i->mode));
	assert_string_equal(i->target, "sub/two");
	ns_forget(p->b.fs, i, 1);
	assert_int_equal(ns_walk(p->b.fs, "t", &i), 0);
	assert_int_equal(i->mode & 07777, 0750);
	ns_forget(p->b.fs, i, 1);
	assert_int_equal(ns_walk(p->b.fs, "t/one", &i), 0);
	assert_int_equal(i->mode & 07777, 0640);
	ns_forget(p->b.fs, i, 1);

	/* A symlink replaced keeps its name throughout; a second tree with
	 * a malformed operation makes nothing. */
	dmar_tree_body_reset(b);
	tree_op(b, DMAR_TREE_SYMLINK, 0, 0, "t/link", "one", 3);
	assert_int_equal(dmar_client_tree(cl, b, status, NULL, &err), 0);
	assert_int_equal(ns_walk(p->b.fs, "t/link", &i), 0);
	assert_string_equal(i->target, "one");
	ns_forget(p->b.fs, i, 1);
	dmar_tree_body_reset(b);
	tree_op(b, DMAR_TREE_DIR, 0, 0755, "u", NULL, 0);
	tree_op(b, DMAR_TREE_DIR, 0, 0755, "@peer", NULL, 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_tree(cl, b, status, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "operation 1"));
	assert_int_equal(ns_walk(p->b.fs, "u", &i), -ENOENT);

	/* Staged chunks: none left once the requests have ended (just after
	 * their answers). */
	json_int_t staged = -1;
	for (int k = 0; k < 200 && staged != 0; k++) {
		json_t *o = NULL;
		assert_int_equal(dmar_client_info(cl, &o, &err), 0);
		staged = json_integer_value(json_object_get(json_object_get(o, "store"), "staged"));
		json_decref(o);
		if (staged)
			usleep(5000);
	}
	assert_int_equal(staged, 0);
	dmar_tree_body_free(b);
	free(r1);
	free(r2);
	free(r3);
	assert_adds_up(&p->b);
}

/* cp of a small file into @b/ costs b one request: the tree commit. */
static void test_small_ship(void **state)
{
	struct pair *p = *state;
	uint8_t data[20000];
	fill_random(data, sizeof(data), 23);
	char names[64];
	klist(&p->k, p->at_b, names, sizeof(names)); /* @b's listing: the lookup below is answered from it */
	uint64_t q0 = b_requests(p);
	assert_int_equal(klookup(&p->k, p->at_b, "s", 0), 0); /* a negative entry */
	uint64_t fh, ino = kcreate(&p->k, p->at_b, "s", &fh);
	assert_int_equal(kwrite_all(&p->k, ino, fh, data, sizeof(data)), 0);
	assert_int_equal(kclose(&p->k, ino, fh), 0);
	assert_int_equal(b_requests(p) - q0, 2); /* the commit and the info */
	b_has(&p->b, "s", data, sizeof(data));
	/* rm of it: one request (the kernel's lookup just said what it is). */
	q0 = b_requests(p);
	assert_int_equal(KCALL(&p->k, NULL, FUSE_UNLINK, p->at_b, "s", (size_t)2), 0);
	assert_int_equal(b_requests(p) - q0, 2); /* the DELETE and the info */
	assert_null(b_file(&p->b, "s", NULL));
	kforget(&p->k, ino);
	assert_adds_up(&p->a);
	assert_adds_up(&p->b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_root_listing, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_generations, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_ship, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_ship_enospc, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_group, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_names, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_tree, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_small_ship, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_peer_down, pair_setup, pair_teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
