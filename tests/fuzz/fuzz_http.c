/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http - the node's request path as a client on the network reaches
 * it: each input is written as it is to a fresh connection of a real
 * server (net/server.h, libmicrohttpd, every handler), one with a token
 * and one without, whose node operations are small fakes that check what
 * reaches them.  The server must answer with an HTTP status line or close
 * the connection, and survive: ASan and UBSan watch its threads, and a
 * GET /v1/node with the token after each input must still answer 200.
 * A path that reaches an operation must pass dmar_wire_path_check, and a
 * chunk that reaches put_chunk must match its id.
 *
 * The seeds (tests/fuzz/corpus/http) are requests of each endpoint.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "codec/hash.h"
#include "net/peers.h"
#include "net/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TOKEN "fuzz-token-0123456789"

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_http: %s %s\n", what, detail ? detail : "");
	abort();
}

static void path_ok(const char *path)
{
	if (dmar_wire_path_check(path, NULL) < 0)
		die("an operation got a path the policy refuses:", path);
}

static int f_info(void *ctx, json_t **out, struct dmar_error *err)
{
	*out = json_pack("{s:s}", "name", "fuzz");
	return *out ? 0 : -ENOMEM;
}

static int f_stat(void *ctx, const char *path, json_t **out, struct dmar_error *err)
{
	path_ok(path);
	if (path[0] == 'x')
		return dmar_error_set(err, -ENOENT, "no such file");
	*out = json_pack("{s:s, s:s, s:i}", "name", "f", "type", "file", "size", 1);
	return *out ? 0 : -ENOMEM;
}

static int f_remove(void *ctx, const char *path, struct dmar_error *err)
{
	path_ok(path);
	return path[0] == 'd' ? 0 : -ENOENT;
}

static int f_mkdir(void *ctx, const char *path, uint32_t mode, struct dmar_error *err)
{
	path_ok(path);
	return mode & ~07777u ? -EINVAL : 0;
}

static int f_have(void *ctx, const struct dmar_id *ids, size_t n, uint8_t *missing, struct dmar_error *err)
{
	for (size_t i = 0; i < n; i++)
		missing[i] = ids[i].b[0] & 1;
	return 0;
}

/* A relay list reaches the node only parsed and checked. */
static void relay_ok(const struct dmar_req_tags *t)
{
	if (t->relay && (!t->relay->n || t->relay->n > DMAR_HOPS_MAX))
		die("a relay list of no nodes, or too many", NULL);
	for (size_t i = 0; t->relay && i < t->relay->n; i++)
		if (!t->relay->name[i][0])
			die("a relay list with an empty name", NULL);
}

static int f_put_chunk(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded,
		       const struct dmar_req_tags *t, struct dmar_error *err)
{
	relay_ok(t);
	struct dmar_id id;
	dmar_hash(decoded, c->len, &id);
	if (memcmp(id.b, c->id.b, DMAR_HASH_SIZE) != 0)
		die("put_chunk got a chunk that does not match its id", NULL);
	return c->len > 60000 ? dmar_error_set(err, -ENOSPC, "arena full") : 0;
}

static int f_commit(void *ctx, const char *path, const struct dmar_recipe *r, const struct dmar_id *cid,
		    bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err)
{
	path_ok(path);
	relay_ok(t);
	if (r->n && (r->e[0].id.b[0] & 1)) {
		*out = json_pack("{s:i, s:[]}", "missing_count", 1, "missing");
		return dmar_error_set(err, -ENODATA, "1 chunk missing");
	}
	*out = json_pack("{s:s, s:s, s:I}", "name", "f", "type", "file", "size", (json_int_t)r->size);
	return *out ? 0 : -ENOMEM;
}

static int f_resolve(void *ctx, const char *path, struct dmar_id *ids, size_t n, unsigned idlen, uint8_t *state, struct dmar_error *err)
{
	for (size_t i = 0; i < n; i++)
		state[i] = ids[i].b[0] % 3;
	return 0;
}

static int f_recipe(void *ctx, const char *path, uint8_t **buf, size_t *len, struct dmar_error *err)
{
	path_ok(path);
	return -ENOENT;
}

static int f_get_chunk(void *ctx, const struct dmar_id *id, struct dmar_wire_chunk *c, uint8_t **buf,
		       struct dmar_error *err)
{
	/* a buffer also on failure: the server frees it whatever the return */
	if (!(*buf = malloc(5)))
		return -ENOMEM;
	memcpy(*buf, "hello", 5);
	memset(c, 0, sizeof(*c));
	dmar_hash(*buf, 5, &c->id);
	c->enc = DMAR_WIRE_RAW;
	c->len = c->stored = 5;
	c->payload = *buf;
	return id->b[0] & 1 ? 0 : -ENOENT;
}

static int f_transfer(void *ctx, const char *path, const char *to, const char *dest, json_t **out,
		      struct dmar_error *err)
{
	path_ok(path);
	if (dest)
		path_ok(dest);
	return dmar_error_set(err, -EHOSTUNREACH, "no peers here");
}

static int f_symlink(void *ctx, const char *path, const char *target, bool noreplace, struct dmar_error *err)
{
	path_ok(path);
	if (!target[0] || strlen(target) > 4095)
		die("symlink: a target the tree commit should have refused:", target);
	return noreplace ? dmar_error_set(err, -EEXIST, "there") : 0;
}

static void f_unstage(void *ctx, uint64_t upload)
{
	if (!upload)
		die("unstage of upload 0", NULL);
}

static const struct dmar_node_ops ops = {
	.symlink = f_symlink,
	.unstage = f_unstage,
	.info = f_info,
	.stat = f_stat,
	.remove = f_remove,
	.mkdir = f_mkdir,
	.have = f_have,
	.put_chunk = f_put_chunk,
	.commit = f_commit,
	.resolve = f_resolve,
	.recipe = f_recipe,
	.get_chunk = f_get_chunk,
	.transfer = f_transfer,
};

static struct dmar_server *S[2]; /* with the token, without */

static void start(void)
{
	if (S[0])
		return;
	/* short deadlines: an input that never ends its head costs 1 s */
	static const struct dmar_admit_opts adm = { .head_ms = 1000 };
	for (int k = 0; k < 2; k++) {
		struct dmar_error err = { 0 };
		struct dmar_server_opts o = { .listen = "127.0.0.1:0", .token = k ? NULL : TOKEN, .max_body = 1 << 20,
					      .admit = &adm };
		if (dmar_server_start(&S[k], &o, &ops, NULL, &err) < 0)
			die("server:", err.msg);
	}
}

/* Write req to a fresh connection to s, close our side, read the answer
 * (until wait_ms pass without a byte); the first bytes read into head
 * (NUL-terminated). */
static void exchange(struct dmar_server *s, const uint8_t *req, size_t n, char *head, size_t cap, int wait_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket", strerror(errno));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(dmar_server_port(s)) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* libFuzzer's timers interrupt calls: a connect goes on in the
	 * background, the others are made again. */
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int e = 0;
		socklen_t el = sizeof(e);
		if (errno != EINTR)
			die("connect", strerror(errno));
		while (poll(&p, 1, 10000) < 0 && errno == EINTR)
			;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e)
			die("connect", strerror(e ? e : errno));
	}
	size_t off = 0;
	while (off < n) {
		ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the server closed on us: fine */
		off += (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	size_t got = 0;
	head[0] = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int pr = poll(&p, 1, wait_ms);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			break;
		char buf[4096];
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (got + 1 < cap) {
			size_t k = (size_t)r < cap - 1 - got ? (size_t)r : cap - 1 - got;
			memcpy(head + got, buf, k);
			got += k;
			head[got] = 0;
		}
	}
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	start();
	char head[64];
	for (int k = 0; k < 2; k++) {
		exchange(S[k], data, size, head, sizeof(head), 1000);
		if (head[0] && strncmp(head, "HTTP/1.", 7) != 0)
			die("an answer that is not HTTP:", head);
	}
	static const char ping[] = "GET /v1/node HTTP/1.1\r\nHost: f\r\nAuthorization: Bearer " TOKEN
				   "\r\nConnection: close\r\n\r\n";
	/* A loaded machine (the sanitizer, make -j) may be slow: three tries
	 * of 10 s before calling the server dead. */
	for (int t = 0; t < 3; t++) {
		exchange(S[0], (const uint8_t *)ping, sizeof(ping) - 1, head, sizeof(head), 10000);
		if (!strncmp(head, "HTTP/1.1 200", 12))
			return 0;
	}
	die("the server stopped answering:", head);
	return 0;
}
