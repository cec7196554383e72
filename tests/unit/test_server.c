/* SPDX-License-Identifier: MIT */
/*
 * test_server - the REST API (net/server.h) against a fake in-memory node,
 * driven over real sockets with libcurl (and a raw socket for the
 * websocket).  Every endpoint's success and every error status.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "prng.h"

#include "codec/hash.h"
#include "net/peers.h"
#include "net/server.h"
#include "net/wire.h"
#include "net/ws.h"

/* ---- the fake node ------------------------------------------------------------ */

#define MAX_FILES 32
#define MAX_CHUNKS 256

struct fake_file {
	char path[256];
	bool dir;
	uint32_t mode;
	uint64_t size;
	uint8_t *recipe; /* wire form, files only */
	size_t recipe_len;
};

struct fake_chunk {
	struct dmar_id id;
	uint8_t enc;
	uint32_t len, stored;
	uint8_t *payload;
};

struct fake {
	pthread_mutex_t lock;
	unsigned calls; /* every op counts */
	struct fake_file files[MAX_FILES];
	unsigned nfiles;
	struct fake_chunk chunks[MAX_CHUNKS];
	unsigned nchunks;
	unsigned put_limit; /* put_chunk says ENOSPC once this many are held (0: never) */
	unsigned clones;    /* files made by clone */
	uint64_t upload;    /* the last put_chunk's upload id */
	char relay[DMAR_HOPS_TEXT_MAX]; /* the last put_chunk's or commit's relay list */
};

static struct fake F;

static struct fake_file *find_file(const char *path)
{
	for (unsigned i = 0; i < F.nfiles; i++)
		if (strcmp(F.files[i].path, path) == 0)
			return &F.files[i];
	return NULL;
}

static struct fake_chunk *find_chunk(const struct dmar_id *id)
{
	for (unsigned i = 0; i < F.nchunks; i++)
		if (memcmp(F.chunks[i].id.b, id->b, DMAR_HASH_SIZE) == 0)
			return &F.chunks[i];
	return NULL;
}

static struct fake_file *add_file(const char *path, bool dir, uint32_t mode, uint64_t size)
{
	assert_true(F.nfiles < MAX_FILES);
	struct fake_file *f = &F.files[F.nfiles++];
	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->dir = dir;
	f->mode = mode;
	f->size = size;
	return f;
}

static void add_chunk(const struct dmar_id *id, uint8_t enc, uint32_t len, const uint8_t *payload, uint32_t stored)
{
	assert_true(F.nchunks < MAX_CHUNKS);
	struct fake_chunk *c = &F.chunks[F.nchunks++];
	c->id = *id;
	c->enc = enc;
	c->len = len;
	c->stored = stored;
	c->payload = malloc(stored);
	assert_non_null(c->payload);
	memcpy(c->payload, payload, stored);
}

static json_t *stat_obj(const struct fake_file *f)
{
	const char *slash = strrchr(f->path, '/');
	return json_pack("{s:s, s:s, s:I, s:i, s:f, s:I, s:i}", "name", slash ? slash + 1 : f->path, "type",
			 f->dir ? "dir" : "file", "size", (json_int_t)f->size, "mode", (int)f->mode, "mtime",
			 1700000000.5, "mtime_ns", (json_int_t)1700000000500000000, "nlink", 1);
}

static int fake_info(void *ctx, json_t **out, struct dmar_error *err)
{
	__atomic_add_fetch(&F.calls, 1, __ATOMIC_SEQ_CST);
	*out = json_pack("{s:s, s:{s:I, s:I}}", "name", "fake", "arena", "size", (json_int_t)1 << 30, "used",
			 (json_int_t)4096);
	return 0;
}

static int fake_stat(void *ctx, const char *path, json_t **out, struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	int r = 0;
	if (!*path) {
		json_t *entries = json_array();
		for (unsigned i = 0; i < F.nfiles; i++)
			if (!strchr(F.files[i].path, '/'))
				json_array_append_new(entries, stat_obj(&F.files[i]));
		*out = json_pack("{s:s, s:s, s:i, s:o}", "name", "", "type", "dir", "mode", 0755, "entries", entries);
	} else {
		struct fake_file *f = find_file(path);
		if (f)
			*out = stat_obj(f);
		else
			r = dmar_error_set(err, -ENOENT, "%s: no such file or directory", path);
	}
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_remove(void *ctx, const char *path, struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	int r = 0;
	struct fake_file *f = find_file(path);
	if (!f) {
		r = dmar_error_set(err, -ENOENT, "%s: no such file or directory", path);
	} else {
		free(f->recipe);
		*f = F.files[--F.nfiles];
	}
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_mkdir(void *ctx, const char *path, uint32_t mode, struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	int r = 0;
	if (!*path || find_file(path))
		r = dmar_error_set(err, -EEXIST, "%s: exists", path);
	else
		add_file(path, true, mode, 0);
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_have(void *ctx, const struct dmar_id *ids, size_t n, uint8_t *missing, struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	for (size_t i = 0; i < n; i++)
		missing[i] = find_chunk(&ids[i]) == NULL;
	pthread_mutex_unlock(&F.lock);
	return 0;
}

static int fake_resolve(void *ctx, const char *path, struct dmar_id *ids, size_t n, unsigned idlen, uint8_t *state,
			struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	for (size_t i = 0; i < n; i++) {
		unsigned hits = 0;
		struct dmar_id full;
		for (unsigned k = 0; k < F.nchunks; k++)
			if (memcmp(F.chunks[k].id.b, ids[i].b, idlen) == 0) {
				full = F.chunks[k].id;
				hits++;
			}
		state[i] = hits == 1 ? 0 : hits ? 2 : 1;
		if (hits == 1)
			ids[i] = full;
	}
	pthread_mutex_unlock(&F.lock);
	return 0;
}

/* The relay list a request carried, as text ("" for none). */
static void note_relay(const struct dmar_req_tags *t)
{
	if (t->relay)
		dmar_hops_format(t->relay, 0, F.relay, sizeof(F.relay));
	else
		F.relay[0] = 0;
}

static int fake_put_chunk(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded,
			  const struct dmar_req_tags *t, struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	F.upload = t->upload;
	note_relay(t);
	int r = 0;
	if (F.put_limit && F.nchunks >= F.put_limit)
		r = dmar_error_set(err, -ENOSPC, "arena full");
	else if (!find_chunk(&c->id))
		add_chunk(&c->id, c->enc, c->len, c->payload, c->stored);
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_commit(void *ctx, const char *path, const struct dmar_recipe *rc, const struct dmar_id *cid,
		       bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err)
{
	(void)cid;
	pthread_mutex_lock(&F.lock);
	F.calls++;
	note_relay(t);
	int r = 0;
	json_t *missing = json_array();
	for (size_t i = 0; i < rc->n; i++)
		if (rc->e[i].kind == DMAR_RECIPE_CHUNK && !find_chunk(&rc->e[i].id)) {
			char hex[DMAR_HASH_HEX_SIZE];
			dmar_hex(rc->e[i].id.b, DMAR_HASH_SIZE, hex);
			json_array_append_new(missing, json_string(hex));
		}
	struct fake_file *f = find_file(path);
	if (json_array_size(missing)) {
		*out = json_pack("{s:I, s:O}", "missing_count", (json_int_t)json_array_size(missing), "missing",
				 missing);
		r = dmar_error_set(err, -ENODATA, "%zu chunks missing", json_array_size(missing));
	} else if (f && noreplace) {
		r = dmar_error_set(err, -EEXIST, "%s: exists", path);
	} else {
		if (!f)
			f = add_file(path, false, rc->mode, rc->size);
		free(f->recipe);
		f->size = rc->size;
		f->mode = rc->mode;
		f->recipe_len = dmar_recipe_wire_size(rc->n);
		f->recipe = malloc(f->recipe_len);
		dmar_recipe_write(rc, f->recipe, NULL);
		*out = stat_obj(f);
	}
	json_decref(missing);
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_recipe(void *ctx, const char *path, uint8_t **buf, size_t *len, struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	int r = 0;
	struct fake_file *f = find_file(path);
	if (!f || !f->recipe) {
		r = dmar_error_set(err, f ? -EISDIR : -ENOENT, "%s: no such file", path);
	} else {
		*buf = malloc(f->recipe_len);
		memcpy(*buf, f->recipe, f->recipe_len);
		*len = f->recipe_len;
	}
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_get_chunk(void *ctx, const struct dmar_id *id, struct dmar_wire_chunk *c, uint8_t **buf,
			  struct dmar_error *err)
{
	pthread_mutex_lock(&F.lock);
	F.calls++;
	int r = 0;
	struct fake_chunk *fc = find_chunk(id);
	if (!fc) {
		r = dmar_error_set(err, -ENOENT, "no such chunk");
	} else {
		*buf = malloc(fc->stored);
		memcpy(*buf, fc->payload, fc->stored);
		c->id = fc->id;
		c->enc = fc->enc;
		c->len = fc->len;
		c->stored = fc->stored;
		c->payload = *buf;
	}
	pthread_mutex_unlock(&F.lock);
	return r;
}

static int fake_transfer(void *ctx, const char *path, const char *to, const char *dest, json_t **out,
			 struct dmar_error *err)
{
	__atomic_add_fetch(&F.calls, 1, __ATOMIC_SEQ_CST);
	if (strcmp(to, "b") != 0)
		return dmar_error_set(err, -ENOENT, "unknown peer %s", to);
	*out = json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "path", path, "to", to, "dest", dest, "logical_bytes",
			 (json_int_t)1000, "wire_bytes", (json_int_t)100, "seconds", 0.5);
	return 0;
}

/* A file whose recipe has content id cid and size bytes, copied to path
 * with head's mode and mtime. */
static int fake_clone(void *ctx, const char *path, const struct dmar_recipe *head, const struct dmar_id *cid,
		      bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err)
{
	(void)ctx;
	(void)t;
	pthread_mutex_lock(&F.lock);
	F.calls++;
	int r = -ENOENT;
	for (unsigned i = 0; i < F.nfiles && r == -ENOENT; i++) {
		struct fake_file *f = &F.files[i];
		struct dmar_recipe rc;
		struct dmar_id c;
		if (f->dir || !f->recipe || dmar_recipe_parse(f->recipe, f->recipe_len, &rc, err) < 0)
			continue;
		if (rc.size == head->size && dmar_recipe_ids(&rc, NULL, &c) == 0 && !memcmp(c.b, cid->b, 32)) {
			struct fake_file *d = find_file(path);
			if (d && noreplace) {
				r = dmar_error_set(err, -EEXIST, "%s: exists", path);
			} else {
				if (!d)
					d = add_file(path, false, head->mode, rc.size);
				free(d->recipe);
				rc.mode = head->mode;
				rc.mtime_sec = head->mtime_sec;
				rc.mtime_nsec = head->mtime_nsec;
				d->mode = rc.mode;
				d->size = rc.size;
				d->recipe_len = dmar_recipe_wire_size(rc.n);
				d->recipe = malloc(d->recipe_len);
				dmar_recipe_write(&rc, d->recipe, NULL);
				*out = stat_obj(d);
				F.clones++;
				r = 0;
			}
		}
		dmar_recipe_free(&rc);
	}
	pthread_mutex_unlock(&F.lock);
	return r;
}

static const struct dmar_node_ops fake_ops = {
	.clone = fake_clone,
	.info = fake_info,
	.stat = fake_stat,
	.remove = fake_remove,
	.mkdir = fake_mkdir,
	.have = fake_have,
	.resolve = fake_resolve,
	.put_chunk = fake_put_chunk,
	.commit = fake_commit,
	.recipe = fake_recipe,
	.get_chunk = fake_get_chunk,
	.transfer = fake_transfer,
};

static void fake_reset(void)
{
	for (unsigned i = 0; i < F.nfiles; i++)
		free(F.files[i].recipe);
	for (unsigned i = 0; i < F.nchunks; i++)
		free(F.chunks[i].payload);
	F.nfiles = F.nchunks = F.calls = F.put_limit = F.clones = 0;
	add_file("hello.txt", false, 0644, 5);
	add_file("docs", true, 0755, 0);
	add_file("docs/a.md", false, 0600, 100);
}

static unsigned calls(void)
{
	return __atomic_load_n(&F.calls, __ATOMIC_SEQ_CST);
}

/* ---- chunks for the tests -------------------------------------------------------- */

struct tchunk {
	struct dmar_id id;
	uint8_t *data; /* decoded */
	uint32_t len;
	uint8_t enc;
	uint8_t *payload; /* wire form */
	uint32_t stored;
};

/* A chunk of len bytes: compressible text when text, else random. */
static void make_chunk(struct tchunk *c, uint32_t len, uint64_t seed, bool text, bool zstd)
{
	uint64_t s = seed ? seed : 1;
	c->len = len;
	c->data = malloc(len);
	assert_non_null(c->data);
	fill_random(c->data, len, seed);
	if (text)
		for (uint32_t i = 0; i < len; i++)
			c->data[i] = (uint8_t)("abcdefgh\n"[xorshift64(&s) % 3 + i % 5]);
	dmar_hash(c->data, len, &c->id);
	c->enc = zstd ? DMAR_WIRE_ZSTD : DMAR_WIRE_RAW;
	if (!zstd) {
		c->payload = malloc(len);
		memcpy(c->payload, c->data, len);
		c->stored = len;
		return;
	}
	ZSTD_CCtx *z = ZSTD_createCCtx();
	ZSTD_CCtx_setParameter(z, ZSTD_c_format, ZSTD_f_zstd1_magicless);
	size_t cap = ZSTD_compressBound(len);
	c->payload = malloc(cap);
	size_t r = ZSTD_compress2(z, c->payload, cap, c->data, len);
	assert_false(ZSTD_isError(r));
	c->stored = (uint32_t)r;
	ZSTD_freeCCtx(z);
}

static void free_chunk(struct tchunk *c)
{
	free(c->data);
	free(c->payload);
}

struct bytes {
	uint8_t *p;
	size_t len, cap;
};

static void put_bytes(struct bytes *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

/* A batch of the chunks; bad_payload (or -1): that one's payload is
 * corrupted, the id left as it was. */
static void make_batch(struct bytes *b, struct tchunk *cs, int n, int bad_payload)
{
	uint8_t h[DMAR_BATCH_HDR_SIZE];
	dmar_batch_write_header(h, (uint32_t)n);
	put_bytes(b, h, sizeof(h));
	for (int i = 0; i < n; i++) {
		struct dmar_wire_chunk w = { .id = cs[i].id, .enc = cs[i].enc, .len = cs[i].len, .stored = cs[i].stored };
		uint8_t r[DMAR_BATCH_REC_SIZE];
		dmar_batch_write_record(r, &w);
		put_bytes(b, r, sizeof(r));
		size_t at = b->len;
		put_bytes(b, cs[i].payload, cs[i].stored);
		if (i == bad_payload)
			b->p[at + cs[i].stored / 2] ^= 0x55;
	}
}

/* ---- HTTP ---------------------------------------------------------------------- */

static struct dmar_server *S;
static char base[64];

struct resp {
	long status;
	struct bytes body;
	char headers[8192];
	size_t hlen;
	json_t *json;
};

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	put_bytes(ctx, p, size * n);
	return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
	struct resp *r = ctx;
	size_t len = size * n;
	if (r->hlen + len < sizeof(r->headers)) {
		memcpy(r->headers + r->hlen, p, len);
		r->hlen += len;
		r->headers[r->hlen] = '\0';
	}
	return len;
}

/* The value of a response header (case-insensitive name), in a static
 * buffer, or NULL. */
static const char *resp_header(struct resp *r, const char *name)
{
	static char v[512];
	size_t n = strlen(name);
	for (const char *l = r->headers; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
			const char *s = l + n + 1;
			while (*s == ' ')
				s++;
			size_t k = strcspn(s, "\r\n");
			snprintf(v, sizeof(v), "%.*s", (int)k, s);
			return v;
		}
	}
	return NULL;
}

struct chunked_src {
	size_t left;
};

static size_t chunked_read(char *buf, size_t size, size_t n, void *ctx)
{
	struct chunked_src *s = ctx;
	size_t k = size * n < s->left ? size * n : s->left;
	memset(buf, 'x', k);
	s->left -= k;
	return k;
}

struct req_opts {
	const char *token;
	const char *ctype;
	const char *header; /* one more request header */
	const char *header2; /* and another */
	size_t chunked;     /* send this many bytes with chunked encoding */
	const char *url;    /* instead of base */
};

static void http_full(struct resp *r, const char *method, const char *path, const void *body, size_t len,
		      const struct req_opts *o)
{
	static const struct req_opts none;
	if (!o)
		o = &none;
	memset(r, 0, sizeof(*r));
	CURL *c = curl_easy_init();
	assert_non_null(c);
	char url[8192];
	snprintf(url, sizeof(url), "%s%s", o->url ? o->url : base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");
	char line[512];
	if (o->token) {
		snprintf(line, sizeof(line), "Authorization: Bearer %s", o->token);
		h = curl_slist_append(h, line);
	}
	/* Unless told otherwise, the Content-Type the endpoint takes. */
	const char *ct = o->ctype;
	if (!ct)
		ct = !strncmp(path, "/v1/chunks/query", 16) || !strncmp(path, "/v1/chunks/fetch", 16) ?
			     "application/octet-stream" :
		     !strcmp(path, "/v1/chunks") ? "application/x-dmar-chunks" :
		     !strncmp(path, "/v1/dirs", 8) || !strcmp(path, "/v1/transfers") ? "application/json" :
											 NULL;
	if (ct) {
		snprintf(line, sizeof(line), "Content-Type: %s", ct);
		h = curl_slist_append(h, line);
	}
	if (o->header)
		h = curl_slist_append(h, o->header);
	if (o->header2)
		h = curl_slist_append(h, o->header2);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	struct chunked_src src = { o->chunked };
	if (o->chunked) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, chunked_read);
		curl_easy_setopt(c, CURLOPT_READDATA, &src);
	} else if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	CURLcode cr = curl_easy_perform(c);
	if (cr != CURLE_OK)
		fail_msg("%s %s: %s", method, path, curl_easy_strerror(cr));
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (r->body.len)
		r->json = json_loadb((const char *)r->body.p, r->body.len, 0, NULL);
}

static void http(struct resp *r, const char *method, const char *path, const void *body, size_t len)
{
	http_full(r, method, path, body, len, NULL);
}

/* A request written as it is (head and body) on a fresh connection; the
 * status of the answer, 0 if none came. */
static long raw_status(const char *request)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(dmar_server_port(S)) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t n = strlen(request);
	assert_int_equal(send(fd, request, n, MSG_NOSIGNAL), (ssize_t)n);
	char reply[512];
	ssize_t k = recv(fd, reply, sizeof(reply) - 1, 0);
	close(fd);
	long status = 0;
	if (k > 12) {
		reply[k] = 0;
		sscanf(reply, "HTTP/1.%*d %ld", &status);
	}
	return status;
}

static void resp_free(struct resp *r)
{
	free(r->body.p);
	json_decref(r->json);
}

/* An error answer: status, errno name, and a message. */
static void assert_error(struct resp *r, long status, const char *errname)
{
	if (r->status != status)
		fail_msg("status %ld, wanted %ld: %.*s", r->status, status, (int)r->body.len, (char *)r->body.p);
	assert_non_null(r->json);
	assert_string_equal(json_string_value(json_object_get(r->json, "errno")), errname);
	const char *msg = json_string_value(json_object_get(r->json, "error"));
	assert_non_null(msg);
	assert_true(strlen(msg) > 0);
	const char *ct = resp_header(r, "Content-Type");
	assert_non_null(ct);
	assert_string_equal(ct, "application/json");
}

static void start_server(struct dmar_server **s, char *url, const struct dmar_server_opts *o)
{
	struct dmar_error err = { 0 };
	struct dmar_server_opts def = { .listen = "127.0.0.1:0" };
	int r = dmar_server_start(s, o ? o : &def, &fake_ops, NULL, &err);
	if (r < 0)
		fail_msg("server: %s", err.msg);
	sprintf(url, "http://127.0.0.1:%u", dmar_server_port(*s));
}

static int group_setup(void **state)
{
	pthread_mutex_init(&F.lock, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	fake_reset();
	start_server(&S, base, NULL);
	return 0;
}

static int group_teardown(void **state)
{
	dmar_server_stop(S);
	F.put_limit = 0;
	fake_reset();
	for (unsigned i = 0; i < F.nfiles; i++)
		free(F.files[i].recipe);
	for (unsigned i = 0; i < F.nchunks; i++)
		free(F.chunks[i].payload);
	curl_global_cleanup();
	return 0;
}

static int each_setup(void **state)
{
	fake_reset();
	return 0;
}

/* ---- namespace ----------------------------------------------------------------- */

static void test_node(void **state)
{
	struct resp r;
	http(&r, "GET", "/v1/node", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "name")), "fake");
	assert_string_equal(json_string_value(json_object_get(r.json, "version")), PACKAGE_VERSION);
	assert_non_null(json_object_get(r.json, "arena"));
	resp_free(&r);
}

static void test_stat(void **state)
{
	struct resp r;
	http(&r, "GET", "/v1/files/hello.txt", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "type")), "file");
	assert_int_equal(json_integer_value(json_object_get(r.json, "size")), 5);
	resp_free(&r);

	/* The root, with and without the slash, lists its entries. */
	http(&r, "GET", "/v1/files", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(json_array_size(json_object_get(r.json, "entries")), 2);
	resp_free(&r);
	http(&r, "GET", "/v1/files/", NULL, 0);
	assert_int_equal(r.status, 200);
	resp_free(&r);

	/* Percent-encoding is decoded once; a trailing slash is dropped. */
	http(&r, "GET", "/v1/files/d%6fcs/a.md", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "name")), "a.md");
	resp_free(&r);
	http(&r, "GET", "/v1/files/docs/", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "type")), "dir");
	resp_free(&r);

	http(&r, "GET", "/v1/files/nope", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	assert_string_equal(json_string_value(json_object_get(r.json, "error")), "nope: no such file or directory");
	resp_free(&r);
}

static void test_remove(void **state)
{
	struct resp r;
	http(&r, "DELETE", "/v1/files/hello.txt", NULL, 0);
	assert_int_equal(r.status, 204);
	assert_int_equal(r.body.len, 0);
	resp_free(&r);
	http(&r, "GET", "/v1/files/hello.txt", NULL, 0);
	assert_int_equal(r.status, 404);
	resp_free(&r);
	http(&r, "DELETE", "/v1/files/hello.txt", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);
}

static void test_mkdir(void **state)
{
	struct resp r;
	http(&r, "PUT", "/v1/dirs/new", NULL, 0);
	assert_int_equal(r.status, 201);
	assert_string_equal(json_string_value(json_object_get(r.json, "type")), "dir");
	assert_int_equal(json_integer_value(json_object_get(r.json, "mode")), 0755);
	resp_free(&r);

	const char *body = "{\"mode\": 448}";
	http(&r, "PUT", "/v1/dirs/docs/private", body, strlen(body));
	assert_int_equal(r.status, 201);
	assert_int_equal(json_integer_value(json_object_get(r.json, "mode")), 0700);
	resp_free(&r);

	http(&r, "PUT", "/v1/dirs/new", NULL, 0);
	assert_error(&r, 409, "EEXIST");
	resp_free(&r);

	body = "{\"mode\": ";
	http(&r, "PUT", "/v1/dirs/x", body, strlen(body));
	assert_error(&r, 400, "EINVAL");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "JSON"));
	resp_free(&r);
	body = "{\"mode\": \"rwx\"}";
	http(&r, "PUT", "/v1/dirs/x", body, strlen(body));
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	body = "[1]";
	http(&r, "PUT", "/v1/dirs/x", body, strlen(body));
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	assert_null(find_file("x"));
}

/* ---- chunks ---------------------------------------------------------------------- */

static void test_query(void **state)
{
	struct tchunk c[3];
	for (int i = 0; i < 3; i++)
		make_chunk(&c[i], 1000, 10 + i, false, false);
	add_chunk(&c[1].id, c[1].enc, c[1].len, c[1].payload, c[1].stored);
	uint8_t ids[3 * 32];
	for (int i = 0; i < 3; i++)
		memcpy(ids + 32 * i, c[i].id.b, 32);

	struct resp r;
	http_full(&r, "POST", "/v1/chunks/query", ids, sizeof(ids), &(struct req_opts){ .ctype = "application/octet-stream" });
	assert_int_equal(r.status, 200);
	assert_string_equal(resp_header(&r, "X-Dmar-Missing"), "2");
	assert_string_equal(resp_header(&r, "Content-Type"), "application/octet-stream");
	assert_int_equal(r.body.len, 64);
	assert_memory_equal(r.body.p, c[0].id.b, 32);
	assert_memory_equal(r.body.p + 32, c[2].id.b, 32);
	resp_free(&r);

	/* All held: an empty answer. */
	http(&r, "POST", "/v1/chunks/query", ids + 32, 32);
	assert_int_equal(r.status, 200);
	assert_string_equal(resp_header(&r, "X-Dmar-Missing"), "0");
	assert_int_equal(r.body.len, 0);
	resp_free(&r);

	http(&r, "POST", "/v1/chunks/query", ids, 33);
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	http(&r, "POST", "/v1/chunks/query", "", 0);
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

static void test_upload(void **state)
{
	struct tchunk c[3];
	make_chunk(&c[0], 5000, 1, false, false);
	make_chunk(&c[1], 70000, 2, true, true);
	make_chunk(&c[2], 1, 3, false, false);
	struct bytes b = { 0 };
	make_batch(&b, c, 3, -1);

	struct resp r;
	F.upload = 1;
	http_full(&r, "POST", "/v1/chunks", b.p, b.len, &(struct req_opts){ .ctype = "application/x-dmar-chunks" });
	assert_int_equal(r.status, 200);
	assert_int_equal(json_integer_value(json_object_get(r.json, "received")), 3);
	assert_int_equal(json_integer_value(json_object_get(r.json, "bytes")), 75001);
	resp_free(&r);
	assert_int_equal(F.nchunks, 3);
	assert_int_equal(F.upload, 0); /* no X-Dmar-Upload */

	/* The upload id reaches put_chunk; a malformed one is refused. */
	http_full(&r, "POST", "/v1/chunks", b.p, b.len,
		  &(struct req_opts){ .ctype = "application/x-dmar-chunks", .header = "X-Dmar-Upload: 00000000deadbeef" });
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_true(F.upload == 0xdeadbeef);
	const char *bad[] = { "X-Dmar-Upload: 0000000000000000", "X-Dmar-Upload: deadbeef",
			      "X-Dmar-Upload: 00000000deadbeef0", "X-Dmar-Upload: 00000000deadbeeg" };
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		F.upload = 1;
		http_full(&r, "POST", "/v1/chunks", b.p, b.len,
			  &(struct req_opts){ .ctype = "application/x-dmar-chunks", .header = bad[k] });
		assert_error(&r, 400, "EINVAL");
		resp_free(&r);
		assert_true(F.upload == 1); /* refused before any chunk */
	}
	/* So does a relay list, parsed (host-list form); a malformed one is
	 * refused with what is wrong, before any chunk. */
	http_full(&r, "POST", "/v1/chunks", b.p, b.len,
		  &(struct req_opts){ .ctype = "application/x-dmar-chunks", .header = "X-Dmar-Relay: c,n[1-2]" });
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_string_equal(F.relay, "c,n1,n2");
	const char *bad_relay[] = { "X-Dmar-Relay: c,c", "X-Dmar-Relay: c,,d", "X-Dmar-Relay: n[2-1]",
				    "X-Dmar-Relay: c d" };
	for (size_t k = 0; k < sizeof(bad_relay) / sizeof(bad_relay[0]); k++) {
		unsigned calls = F.calls;
		http_full(&r, "POST", "/v1/chunks", b.p, b.len,
			  &(struct req_opts){ .ctype = "application/x-dmar-chunks", .header = bad_relay[k] });
		assert_error(&r, 400, "EINVAL");
		assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "X-Dmar-Relay: "));
		resp_free(&r);
		assert_int_equal(F.calls, calls);
	}
	struct fake_chunk *fc = find_chunk(&c[1].id);
	assert_non_null(fc);
	assert_int_equal(fc->enc, DMAR_WIRE_ZSTD);
	assert_int_equal(fc->stored, c[1].stored);
	free(b.p);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

/* A chunk whose payload does not match its id: the others are stored. */
static void test_upload_bad_chunk(void **state)
{
	struct tchunk c[3];
	make_chunk(&c[0], 3000, 4, false, false);
	make_chunk(&c[1], 3000, 5, false, false);
	make_chunk(&c[2], 9000, 6, true, true);
	struct bytes b = { 0 };
	make_batch(&b, c, 3, 1);
	struct resp r;
	http(&r, "POST", "/v1/chunks", b.p, b.len);
	assert_error(&r, 422, "EILSEQ");
	json_t *bad = json_object_get(r.json, "bad");
	assert_int_equal(json_array_size(bad), 1);
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(c[1].id.b, 32, hex);
	assert_string_equal(json_string_value(json_array_get(bad, 0)), hex);
	assert_int_equal(json_integer_value(json_object_get(r.json, "received")), 2);
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "hash mismatch"));
	resp_free(&r);
	assert_int_equal(F.nchunks, 2);
	assert_non_null(find_chunk(&c[0].id));
	assert_null(find_chunk(&c[1].id));
	assert_non_null(find_chunk(&c[2].id));

	/* A corrupt zstd frame is just as bad. */
	free(b.p);
	b = (struct bytes){ 0 };
	make_batch(&b, c + 2, 1, 0);
	http(&r, "POST", "/v1/chunks", b.p, b.len);
	assert_error(&r, 422, "EILSEQ");
	resp_free(&r);
	free(b.p);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

/* Many chunks in one batch, more than the server verifies as one group,
 * small and large (so some straddle MHD's pieces), raw and zstd mixed,
 * three raw ones corrupt: exactly those are listed, every other one is
 * stored with its own bytes (a deferred verification read the payload
 * while it was still the record's), plain and as one zstd stream. */
static void test_upload_many(void **state)
{
	enum { N = 200 };
	static struct tchunk c[N];
	uint64_t s = 77;
	for (int i = 0; i < N; i++) {
		uint32_t len = i % 50 == 7 ? 150000 : 1 + (uint32_t)(xorshift64(&s) % 12000);
		make_chunk(&c[i], len, 1000 + (uint64_t)i, i % 9 == 4, i % 9 == 4);
	}
	const int bad[] = { 3, 70, 151 };
	for (int round = 0; round < 2; round++) {
		fake_reset();
		for (int k = 0; k < 3; k++)
			c[bad[k]].payload[c[bad[k]].stored / 2] ^= 0x55;
		struct bytes b = { 0 };
		make_batch(&b, c, N, -1);
		for (int k = 0; k < 3; k++)
			c[bad[k]].payload[c[bad[k]].stored / 2] ^= 0x55;
		struct resp r;
		if (round == 0) {
			http(&r, "POST", "/v1/chunks", b.p, b.len);
		} else {
			size_t cap = ZSTD_compressBound(b.len);
			uint8_t *z = malloc(cap);
			size_t zn = ZSTD_compress(z, cap, b.p, b.len, 1);
			assert_false(ZSTD_isError(zn));
			struct req_opts o = { .ctype = "application/x-dmar-chunks", .header = "Content-Encoding: zstd" };
			http_full(&r, "POST", "/v1/chunks", z, zn, &o);
			free(z);
		}
		assert_error(&r, 422, "EILSEQ");
		json_t *list = json_object_get(r.json, "bad");
		assert_int_equal(json_array_size(list), 3);
		for (int k = 0; k < 3; k++) {
			char hex[DMAR_HASH_HEX_SIZE];
			dmar_hex(c[bad[k]].id.b, 32, hex);
			bool listed = false;
			for (size_t j = 0; j < 3; j++)
				listed |= strcmp(json_string_value(json_array_get(list, j)), hex) == 0;
			assert_true(listed);
		}
		assert_int_equal(json_integer_value(json_object_get(r.json, "received")), N - 3);
		resp_free(&r);
		assert_int_equal(F.nchunks, N - 3);
		for (int i = 0; i < N; i++) {
			struct fake_chunk *fc = find_chunk(&c[i].id);
			if (i == bad[0] || i == bad[1] || i == bad[2]) {
				assert_null(fc);
				continue;
			}
			assert_non_null(fc);
			assert_int_equal(fc->stored, c[i].stored);
			assert_memory_equal(fc->payload, c[i].payload, c[i].stored);
		}
		free(b.p);
	}
	for (int i = 0; i < N; i++)
		free_chunk(&c[i]);
}

/* A batch that comes in small pieces with pauses, as from a slow or busy
 * sender: the server leaves pieces under its feed size with MHD until
 * more bytes come (feed_later), which must never stall the body: every
 * chunk is stored with its own bytes, nothing is answered while the last
 * bytes are still missing, and the reply follows them at once. */
static void test_upload_trickle(void **state)
{
	enum { N = 40, LAST = 7 };
	static struct tchunk c[N];
	uint64_t s = 99;
	for (int i = 0; i < N; i++)
		make_chunk(&c[i], 1 + (uint32_t)(xorshift64(&s) % 20000), 5000 + (uint64_t)i, i % 5 == 2, i % 5 == 2);
	struct bytes b = { 0 };
	make_batch(&b, c, N, -1);

	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(dmar_server_port(S)) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char head[256];
	int hn = snprintf(head, sizeof(head),
			  "POST /v1/chunks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-dmar-chunks\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			  b.len);
	assert_int_equal(send(fd, head, (size_t)hn, 0), hn);
	size_t off = 0;
	for (unsigned piece = 0; off < b.len - LAST; piece++) {
		size_t k = 500 + piece * 397 % 3000;
		if (k > b.len - LAST - off)
			k = b.len - LAST - off;
		assert_int_equal(send(fd, b.p + off, k, 0), (ssize_t)k);
		off += k;
		if (piece % 8 == 7)
			usleep(2000);
	}
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 300), 0);
	assert_int_equal(send(fd, b.p + off, LAST, 0), LAST);

	char reply[8192];
	size_t got = 0;
	ssize_t k;
	while (got + 1 < sizeof(reply) && (k = recv(fd, reply + got, sizeof(reply) - 1 - got, 0)) > 0)
		got += (size_t)k;
	reply[got] = '\0';
	close(fd);
	assert_true(strncmp(reply, "HTTP/1.1 200 ", 13) == 0);
	const char *json = strstr(reply, "\r\n\r\n");
	assert_non_null(json);
	json_t *j = json_loads(json + 4, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "received")), N);
	json_decref(j);
	assert_int_equal(F.nchunks, N);
	for (int i = 0; i < N; i++) {
		struct fake_chunk *fc = find_chunk(&c[i].id);
		assert_non_null(fc);
		assert_int_equal(fc->stored, c[i].stored);
		assert_memory_equal(fc->payload, c[i].payload, c[i].stored);
		free_chunk(&c[i]);
	}
	free(b.p);
}

/* Content-Encoding: zstd: the batch as one zstd stream. */
static void test_upload_zstd(void **state)
{
	struct tchunk c[3];
	make_chunk(&c[0], 40000, 31, true, false);
	make_chunk(&c[1], 70000, 32, true, true);
	make_chunk(&c[2], 3000, 33, false, false);
	struct bytes b = { 0 };
	make_batch(&b, c, 3, -1);
	size_t cap = ZSTD_compressBound(b.len);
	uint8_t *z = malloc(cap);
	size_t zn = ZSTD_compress(z, cap, b.p, b.len, 3);
	assert_false(ZSTD_isError(zn));
	assert_true(zn < b.len);

	struct resp r;
	struct req_opts o = { .ctype = "application/x-dmar-chunks", .header = "Content-Encoding: zstd" };
	http_full(&r, "POST", "/v1/chunks", z, zn, &o);
	assert_int_equal(r.status, 200);
	assert_int_equal(json_integer_value(json_object_get(r.json, "received")), 3);
	assert_int_equal(json_integer_value(json_object_get(r.json, "bytes")), 113000);
	resp_free(&r);
	assert_int_equal(F.nchunks, 3);
	for (int i = 0; i < 3; i++)
		assert_non_null(find_chunk(&c[i].id));

	/* Truncated, corrupt, trailing bytes: 400; the batch is not taken whole. */
	http_full(&r, "POST", "/v1/chunks", z, zn - 5, &o);
	assert_error(&r, 400, "EBADMSG");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "zstd"));
	resp_free(&r);
	uint8_t *bad = malloc(zn + 4);
	memcpy(bad, z, zn);
	bad[0] ^= 0xff; /* the magic */
	http_full(&r, "POST", "/v1/chunks", bad, zn, &o);
	assert_error(&r, 400, "EBADMSG");
	resp_free(&r);
	memcpy(bad, z, zn);
	memcpy(bad + zn, "junk", 4);
	http_full(&r, "POST", "/v1/chunks", bad, zn + 4, &o);
	assert_error(&r, 400, "EBADMSG");
	resp_free(&r);
	free(bad);

	/* Another encoding: 415, before the body. */
	unsigned before = calls();
	o.header = "Content-Encoding: gzip";
	http_full(&r, "POST", "/v1/chunks", z, zn, &o);
	assert_error(&r, 415, "ENOTSUP");
	resp_free(&r);
	assert_int_equal(calls(), before);
	free(z);
	free(b.p);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

/* A decompression bomb: a small body that decodes to more than 4 x the
 * body limit (valid records of one chunk of zeros, over and over) is
 * stopped there: 413, however far the stream would go on. */
static void test_upload_zstd_bomb(void **state)
{
	struct dmar_server *s;
	char url[64];
	start_server(&s, url, &(struct dmar_server_opts){ .listen = "127.0.0.1:0", .max_body = 64 << 10 });
	enum { LEN = 32768, N = 100 };
	uint8_t *zero = calloc(1, LEN);
	struct dmar_wire_chunk w = { .enc = DMAR_WIRE_RAW, .len = LEN, .stored = LEN };
	dmar_hash(zero, LEN, &w.id);
	struct bytes b = { 0 };
	uint8_t h[DMAR_BATCH_HDR_SIZE], rec[DMAR_BATCH_REC_SIZE];
	dmar_batch_write_header(h, N);
	put_bytes(&b, h, sizeof(h));
	dmar_batch_write_record(rec, &w);
	for (int i = 0; i < N; i++) {
		put_bytes(&b, rec, sizeof(rec));
		put_bytes(&b, zero, LEN);
	}
	size_t cap = ZSTD_compressBound(b.len);
	uint8_t *z = malloc(cap);
	size_t zn = ZSTD_compress(z, cap, b.p, b.len, 3);
	assert_false(ZSTD_isError(zn));
	assert_true(zn < (64u << 10));
	struct resp r;
	struct req_opts o = { .url = url, .ctype = "application/x-dmar-chunks", .header = "Content-Encoding: zstd" };
	http_full(&r, "POST", "/v1/chunks", z, zn, &o);
	assert_error(&r, 413, "E2BIG");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "decodes to more than"));
	resp_free(&r);
	free(b.p);
	free(zero);
	free(z);
	dmar_server_stop(s);
}

static void test_upload_malformed(void **state)
{
	struct tchunk c[2];
	make_chunk(&c[0], 3000, 7, false, false);
	make_chunk(&c[1], 3000, 8, false, false);
	struct bytes b = { 0 };
	make_batch(&b, c, 2, -1);
	struct resp r;

	/* Truncated: the first record is stored, the answer is 400. */
	http(&r, "POST", "/v1/chunks", b.p, b.len - 10);
	assert_error(&r, 400, "EBADMSG");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "truncated"));
	resp_free(&r);

	/* Bad magic, trailing bytes, nothing at all. */
	b.p[0] = 'X';
	http(&r, "POST", "/v1/chunks", b.p, b.len);
	assert_error(&r, 400, "EBADMSG");
	resp_free(&r);
	b.p[0] = 'D';
	put_bytes(&b, "junk", 4);
	http(&r, "POST", "/v1/chunks", b.p, b.len);
	assert_error(&r, 400, "EBADMSG");
	resp_free(&r);
	http(&r, "POST", "/v1/chunks", "", 0);
	assert_error(&r, 400, "EBADMSG");
	resp_free(&r);
	free(b.p);
	for (int i = 0; i < 2; i++)
		free_chunk(&c[i]);
}

static void test_upload_enospc(void **state)
{
	struct tchunk c[3];
	for (int i = 0; i < 3; i++)
		make_chunk(&c[i], 2000, 20 + i, false, false);
	struct bytes b = { 0 };
	make_batch(&b, c, 3, -1);
	F.put_limit = 1;
	struct resp r;
	http(&r, "POST", "/v1/chunks", b.p, b.len);
	assert_error(&r, 507, "ENOSPC");
	assert_string_equal(json_string_value(json_object_get(r.json, "error")), "arena full");
	resp_free(&r);
	assert_int_equal(F.nchunks, 1);
	F.put_limit = 0;
	free(b.p);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

static void test_get_chunk(void **state)
{
	struct tchunk c;
	make_chunk(&c, 4000, 30, true, true);
	add_chunk(&c.id, c.enc, c.len, c.payload, c.stored);
	char path[128], hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(c.id.b, 32, hex);
	snprintf(path, sizeof(path), "/v1/chunks/%s", hex);
	struct resp r;
	http(&r, "GET", path, NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(resp_header(&r, "X-Dmar-Encoding"), "zstd");
	assert_string_equal(resp_header(&r, "X-Dmar-Length"), "4000");
	assert_int_equal(r.body.len, c.stored);
	assert_memory_equal(r.body.p, c.payload, c.stored);
	resp_free(&r);

	hex[0] = hex[0] == '0' ? '1' : '0';
	snprintf(path, sizeof(path), "/v1/chunks/%s", hex);
	http(&r, "GET", path, NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);
	http(&r, "GET", "/v1/chunks/xyz", NULL, 0);
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	free_chunk(&c);
}

struct fetched {
	ZSTD_DCtx *d;
	uint8_t *scratch;
	struct tchunk *want;
	int n;
	int zstd;
};

static int on_fetched(void *ctx, const struct dmar_wire_chunk *c)
{
	struct fetched *f = ctx;
	const uint8_t *dec;
	struct dmar_error err = { 0 };
	assert_true(f->n < 3);
	assert_memory_equal(c->id.b, f->want[f->n].id.b, 32);
	assert_int_equal(dmar_wire_chunk_verify(c, f->d, f->scratch, &dec, &err), 0);
	f->zstd += c->enc == DMAR_WIRE_ZSTD;
	f->n++;
	return 0;
}

static void test_fetch(void **state)
{
	struct tchunk c[3];
	make_chunk(&c[0], 100000, 40, true, false); /* raw but compressible: travels as zstd */
	make_chunk(&c[1], 50000, 41, false, false); /* random: travels raw */
	make_chunk(&c[2], 20000, 42, true, true);   /* zstd already */
	uint8_t ids[3 * 32];
	for (int i = 0; i < 3; i++) {
		add_chunk(&c[i].id, c[i].enc, c[i].len, c[i].payload, c[i].stored);
		memcpy(ids + 32 * i, c[i].id.b, 32);
	}
	struct resp r;
	http(&r, "POST", "/v1/chunks/fetch", ids, sizeof(ids));
	assert_int_equal(r.status, 200);
	assert_string_equal(resp_header(&r, "Content-Type"), "application/x-dmar-chunks");
	struct fetched f = { ZSTD_createDCtx(), malloc(DMAR_WIRE_SCRATCH), c, 0, 0 };
	struct dmar_batch_parser *p;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_batch_parser_new(&p, 10, on_fetched, &f), 0);
	assert_int_equal(dmar_batch_parser_feed(p, r.body.p, r.body.len, &err), 0);
	assert_int_equal(dmar_batch_parser_finish(p, &err), 0);
	assert_int_equal(f.n, 3);
	assert_int_equal(f.zstd, 2);
	assert_true(r.body.len < 100000 + 50000);
	dmar_batch_parser_free(p);
	ZSTD_freeDCtx(f.d);
	free(f.scratch);
	resp_free(&r);

	/* One absent: 404 before any byte of a batch, naming it. */
	ids[64] ^= 1;
	http(&r, "POST", "/v1/chunks/fetch", ids, sizeof(ids));
	assert_error(&r, 404, "ENOENT");
	assert_int_equal(json_integer_value(json_object_get(r.json, "missing_count")), 1);
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(ids + 64, 32, hex);
	assert_string_equal(json_string_value(json_array_get(json_object_get(r.json, "missing"), 0)), hex);
	resp_free(&r);
	http(&r, "POST", "/v1/chunks/fetch", ids, 31);
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

/* ---- commit and recipes ------------------------------------------------------ */

/* The file of c[0..n) then a 4096-byte hole (rc.e malloc'd). */
static struct dmar_recipe sample_file(struct tchunk *c, int n)
{
	struct dmar_recipe rc = { .mode = 0640, .mtime_sec = 1700000000, .n = (size_t)n + 1 };
	rc.e = calloc(rc.n, sizeof(*rc.e));
	for (int i = 0; i < n; i++) {
		rc.e[i] = (struct dmar_recipe_entry){ .id = c[i].id, .len = c[i].len, .kind = DMAR_RECIPE_CHUNK };
		rc.size += c[i].len;
	}
	rc.e[n] = (struct dmar_recipe_entry){ .len = 4096, .kind = DMAR_RECIPE_HOLE };
	rc.size += 4096;
	return rc;
}

static uint8_t *make_recipe(struct tchunk *c, int n, size_t *len)
{
	struct dmar_recipe rc = sample_file(c, n);
	*len = dmar_recipe_wire_size(rc.n);
	uint8_t *b = malloc(*len);
	dmar_recipe_write(&rc, b, NULL);
	free(rc.e);
	return b;
}

#define RECIPE_OPTS (&(struct req_opts){ .ctype = "application/x-dmar-recipe" })

static void test_commit(void **state)
{
	struct tchunk c[2];
	make_chunk(&c[0], 3000, 50, false, false);
	make_chunk(&c[1], 3000, 51, false, false);
	add_chunk(&c[0].id, c[0].enc, c[0].len, c[0].payload, c[0].stored);
	size_t len;
	uint8_t *rb = make_recipe(c, 2, &len);
	struct resp r;

	/* A chunk missing: 409 with its id, nothing created. */
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len, RECIPE_OPTS);
	assert_error(&r, 409, "ENODATA");
	assert_int_equal(json_integer_value(json_object_get(r.json, "missing_count")), 1);
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(c[1].id.b, 32, hex);
	assert_string_equal(json_string_value(json_array_get(json_object_get(r.json, "missing"), 0)), hex);
	resp_free(&r);
	assert_null(find_file("out.bin"));

	add_chunk(&c[1].id, c[1].enc, c[1].len, c[1].payload, c[1].stored);
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len, RECIPE_OPTS);
	assert_int_equal(r.status, 201);
	assert_int_equal(json_integer_value(json_object_get(r.json, "size")), 6000 + 4096);
	assert_int_equal(json_integer_value(json_object_get(r.json, "mode")), 0640);
	resp_free(&r);

	/* The recipe comes back byte for byte. */
	http(&r, "GET", "/v1/recipes/out.bin", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(resp_header(&r, "Content-Type"), "application/x-dmar-recipe");
	assert_int_equal(r.body.len, len);
	assert_memory_equal(r.body.p, rb, len);
	resp_free(&r);
	http(&r, "GET", "/v1/recipes/nope", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);

	/* Replacing is the default; If-None-Match: * refuses. */
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len, RECIPE_OPTS);
	assert_int_equal(r.status, 201);
	resp_free(&r);
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe", .header = "If-None-Match: *" });
	assert_error(&r, 412, "EEXIST");
	resp_free(&r);
	http_full(&r, "PUT", "/v1/files/other.bin", rb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe", .header = "If-None-Match: *" });
	assert_int_equal(r.status, 201);
	resp_free(&r);
	/* A commit carries its relay list to the node; a bad one is refused. */
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe", .header = "X-Dmar-Relay: d,e" });
	assert_int_equal(r.status, 201);
	resp_free(&r);
	assert_string_equal(F.relay, "d,e");
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len, RECIPE_OPTS);
	resp_free(&r);
	assert_string_equal(F.relay, "");
	http_full(&r, "PUT", "/v1/files/out.bin", rb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe", .header = "X-Dmar-Relay: d,d" });
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);

	/* Malformed recipes, and not a recipe at all. */
	rb[len - 1] ^= 1;
	http_full(&r, "PUT", "/v1/files/bad.bin", rb, len, RECIPE_OPTS);
	assert_error(&r, 400, "EBADMSG");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "checksum"));
	resp_free(&r);
	http_full(&r, "PUT", "/v1/files/bad.bin", rb, 20, RECIPE_OPTS);
	assert_error(&r, 400, "EBADMSG");
	resp_free(&r);
	http_full(&r, "PUT", "/v1/files/bad.bin", rb, len, &(struct req_opts){ .ctype = "application/json" });
	assert_int_equal(r.status, 415);
	resp_free(&r);
	assert_null(find_file("bad.bin"));
	free(rb);
	for (int i = 0; i < 2; i++)
		free_chunk(&c[i]);
}

/* A short recipe of c[0..n) and a 4096-byte hole (make_recipe's file):
 * *len its bytes; the id it carries is the full recipe's, or *bad_id. */
static uint8_t *make_short(struct tchunk *c, int n, const struct dmar_id *bad_id, size_t *len)
{
	struct dmar_recipe rc = sample_file(c, n);
	uint8_t *full = malloc(dmar_recipe_wire_size(rc.n)), *b = malloc(dmar_recipe_short_max_size(rc.n));
	struct dmar_id id;
	dmar_recipe_write(&rc, full, &id);
	*len = dmar_recipe_short_write(&rc, bad_id ? bad_id : &id, DMAR_RECIPE_SHORT_IDLEN, b);
	free(full);
	free(rc.e);
	return b;
}

#define SHORT_OPTS (&(struct req_opts){ .ctype = "application/x-dmar-recipe-short" })

static void test_commit_short(void **state)
{
	struct tchunk c[3];
	make_chunk(&c[0], 3000, 60, false, false);
	make_chunk(&c[1], 3000, 61, false, false);
	make_chunk(&c[2], 3000, 62, false, false);
	add_chunk(&c[0].id, c[0].enc, c[0].len, c[0].payload, c[0].stored);
	size_t len, flen;
	uint8_t *sb = make_short(c, 2, NULL, &len), *rb = make_recipe(c, 2, &flen);
	assert_true(len < flen / 2);
	struct resp r;

	/* Entry 1 missing: 409 with bits "02" (entries c0, c1, hole), never a
	 * list of prefixes; nothing created. */
	http_full(&r, "PUT", "/v1/files/s.bin", sb, len, SHORT_OPTS);
	assert_error(&r, 409, "ENODATA");
	assert_int_equal(json_integer_value(json_object_get(r.json, "missing_count")), 1);
	assert_string_equal(json_string_value(json_object_get(r.json, "missing_bits")), "02");
	assert_null(json_object_get(r.json, "missing"));
	resp_free(&r);
	assert_null(find_file("s.bin"));

	/* Completed: the file's recipe is the full one, byte for byte. */
	add_chunk(&c[1].id, c[1].enc, c[1].len, c[1].payload, c[1].stored);
	http_full(&r, "PUT", "/v1/files/s.bin", sb, len, SHORT_OPTS);
	assert_int_equal(r.status, 201);
	assert_int_equal(json_integer_value(json_object_get(r.json, "size")), 6000 + 4096);
	resp_free(&r);
	http(&r, "GET", "/v1/recipes/s.bin", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body.len, flen);
	assert_memory_equal(r.body.p, rb, flen);
	resp_free(&r);

	/* A recipe id the completed recipe does not have: resend in full. */
	struct dmar_id wrong = c[2].id;
	uint8_t *bad = make_short(c, 2, &wrong, &len);
	http_full(&r, "PUT", "/v1/files/w.bin", bad, len, SHORT_OPTS);
	assert_error(&r, 409, "ENODATA");
	assert_string_equal(json_string_value(json_object_get(r.json, "resend")), "full");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "completes to recipe"));
	resp_free(&r);
	assert_null(find_file("w.bin"));
	free(bad);

	/* Two held chunks share the prefix of entry 0: ambiguous, never a
	 * guess. */
	struct dmar_id twin = c[0].id;
	twin.b[31] ^= 1;
	add_chunk(&twin, c[2].enc, c[2].len, c[2].payload, c[2].stored);
	http_full(&r, "PUT", "/v1/files/t.bin", sb, len, SHORT_OPTS);
	assert_error(&r, 409, "ENODATA");
	assert_string_equal(json_string_value(json_object_get(r.json, "resend")), "full");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "more than one chunk"));
	resp_free(&r);
	assert_null(find_file("t.bin"));

	/* Malformed: a bad tag, trailing bytes. */
	sb[DMAR_RECIPE_SHORT_HDR_SIZE] = 7;
	http_full(&r, "PUT", "/v1/files/t.bin", sb, len, SHORT_OPTS);
	assert_error(&r, 400, "EBADMSG");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "entry 0: unknown tag"));
	resp_free(&r);
	free(sb);
	free(rb);
	for (int i = 0; i < 3; i++)
		free_chunk(&c[i]);
}

/* hdr = "X-Dmar-Content: " and the content id of sample_file(c, n). */
static void content_header(struct tchunk *c, int n, char *hdr, size_t cap)
{
	struct dmar_recipe rc = sample_file(c, n);
	struct dmar_id cid;
	assert_int_equal(dmar_recipe_ids(&rc, NULL, &cid), 0);
	assert_true(cap >= 16 + DMAR_HASH_HEX_SIZE);
	memcpy(hdr, "X-Dmar-Content: ", 16);
	dmar_hex(cid.b, 32, hdr + 16);
	free(rc.e);
}

/* X-Dmar-Content: a file made from content held, without its entries. */
static void test_commit_content(void **state)
{
	struct tchunk c[2];
	make_chunk(&c[0], 3000, 70, false, false);
	make_chunk(&c[1], 3000, 71, false, false);
	add_chunk(&c[0].id, c[0].enc, c[0].len, c[0].payload, c[0].stored);
	size_t len, flen;
	uint8_t *sb = make_short(c, 2, NULL, &len), *rb = make_recipe(c, 2, &flen);
	char hdr[96];
	content_header(c, 2, hdr, sizeof(hdr));
	struct req_opts so = { .ctype = "application/x-dmar-recipe-short", .header = hdr };
	struct req_opts fo = { .ctype = "application/x-dmar-recipe", .header = hdr };
	struct resp r;

	/* Not held yet: the commit goes on as without the header (a chunk
	 * missing: 409 bits). */
	http_full(&r, "PUT", "/v1/files/c1.bin", sb, len, &so);
	assert_error(&r, 409, "ENODATA");
	assert_string_equal(json_string_value(json_object_get(r.json, "missing_bits")), "02");
	resp_free(&r);
	assert_int_equal(F.clones, 0);
	add_chunk(&c[1].id, c[1].enc, c[1].len, c[1].payload, c[1].stored);
	http_full(&r, "PUT", "/v1/files/c1.bin", rb, flen, &fo);
	assert_int_equal(r.status, 201);
	resp_free(&r);
	assert_int_equal(F.clones, 0);

	/* Held now: made from it, short or full body, the recipe the same. */
	http_full(&r, "PUT", "/v1/files/c2.bin", sb, len, &so);
	assert_int_equal(r.status, 201);
	assert_int_equal(json_integer_value(json_object_get(r.json, "size")), 6000 + 4096);
	resp_free(&r);
	assert_int_equal(F.clones, 1);
	http(&r, "GET", "/v1/recipes/c2.bin", NULL, 0);
	assert_int_equal(r.body.len, flen);
	assert_memory_equal(r.body.p, rb, flen);
	resp_free(&r);
	http_full(&r, "PUT", "/v1/files/c3.bin", rb, flen, &fo);
	assert_int_equal(r.status, 201);
	resp_free(&r);
	assert_int_equal(F.clones, 2);

	/* A content id the recipe id does not name, or not an id: 400, and
	 * nothing made. */
	char bad[96];
	memcpy(bad, hdr, sizeof(bad));
	bad[16] = bad[16] == '0' ? '1' : '0';
	http_full(&r, "PUT", "/v1/files/c4.bin", sb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe-short", .header = bad });
	assert_error(&r, 400, "EINVAL");
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "does not name this content"));
	resp_free(&r);
	http_full(&r, "PUT", "/v1/files/c4.bin", sb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe-short", .header = "X-Dmar-Content: 12zz" });
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	assert_null(find_file("c4.bin"));
	assert_int_equal(F.clones, 2);

	/* A content-only commit (the short recipe's header alone): made
	 * when held, 409 "resend": "recipe" when not, never a parse error. */
	http_full(&r, "PUT", "/v1/files/c5.bin", sb, DMAR_RECIPE_SHORT_HDR_SIZE, &so);
	assert_int_equal(r.status, 201);
	resp_free(&r);
	assert_int_equal(F.clones, 3);
	assert_non_null(find_file("c5.bin"));
	struct tchunk o[1];
	make_chunk(&o[0], 2000, 72, false, false);
	size_t olen;
	uint8_t *osb = make_short(o, 1, NULL, &olen);
	char ohdr[96];
	content_header(o, 1, ohdr, sizeof(ohdr));
	http_full(&r, "PUT", "/v1/files/c6.bin", osb, DMAR_RECIPE_SHORT_HDR_SIZE,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe-short", .header = ohdr });
	assert_error(&r, 409, "ENODATA");
	assert_string_equal(json_string_value(json_object_get(r.json, "resend")), "recipe");
	resp_free(&r);
	assert_null(find_file("c6.bin"));
	free(osb);
	free_chunk(&o[0]);

	/* If-None-Match: * holds for clones too. */
	http_full(&r, "PUT", "/v1/files/c2.bin", sb, len,
		  &(struct req_opts){ .ctype = "application/x-dmar-recipe-short",
				      .header = hdr, .header2 = "If-None-Match: *" });
	assert_error(&r, 412, "EEXIST");
	resp_free(&r);
	free(sb);
	free(rb);
	for (int i = 0; i < 2; i++)
		free_chunk(&c[i]);
}

static void test_transfer(void **state)
{
	struct resp r;
	const char *body = "{\"path\": \"hello.txt\", \"to\": \"b\", \"dest\": \"in/hello.txt\"}";
	http(&r, "POST", "/v1/transfers", body, strlen(body));
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "dest")), "in/hello.txt");
	assert_int_equal(json_integer_value(json_object_get(r.json, "logical_bytes")), 1000);
	resp_free(&r);
	body = "{\"path\": \"hello.txt\", \"to\": \"b\"}";
	http(&r, "POST", "/v1/transfers", body, strlen(body));
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "dest")), "hello.txt");
	resp_free(&r);
	body = "{\"path\": \"hello.txt\", \"to\": \"zz\"}";
	http(&r, "POST", "/v1/transfers", body, strlen(body));
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);

	unsigned before = calls();
	const char *bad[] = {
		"{\"path\": \"../etc/passwd\", \"to\": \"b\"}",
		"{\"path\": \"a\", \"to\": \"b\", \"dest\": \"/abs\"}",
		"{\"path\": \"a\\u0000b\", \"to\": \"b\"}",
		"{\"path\": 7, \"to\": \"b\"}",
		"{\"to\": \"b\"}",
		"{\"path\": \"a\", \"to\": \"b\"",
		"{\"path\": \"a\", \"path\": \"b\", \"to\": \"b\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		http(&r, "POST", "/v1/transfers", bad[i], strlen(bad[i]));
		assert_error(&r, 400, "EINVAL");
		resp_free(&r);
	}
	assert_int_equal(calls(), before);
}

/* ---- the edges: paths, routes, limits, auth -------------------------------------- */

static void test_bad_paths(void **state)
{
	const char *bad[] = {
		"/v1/files/..",        "/v1/files/a/../hello.txt", "/v1/files/docs//a.md", "/v1/files//etc/passwd",
		"/v1/files/a%00b",     "/v1/files/%2e%2e",         "/v1/files/%2Fetc",     "/v1/files/a/./b",
		"/v1/files/bad%zzesc", "/v1/files/trail%",         "/v1/recipes/../x",     "/v1/dirs/a//b",
	};
	unsigned before = calls();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct resp r;
		http(&r, "GET", bad[i], NULL, 0);
		if (strncmp(bad[i], "/v1/dirs", 8) == 0) {
			resp_free(&r);
			http(&r, "PUT", bad[i], NULL, 0);
		}
		assert_error(&r, 400, "EINVAL");
		assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")), "path"));
		resp_free(&r);
	}
	/* A component of 256 bytes. */
	char longp[300] = "/v1/files/";
	memset(longp + strlen(longp), 'a', 256);
	struct resp r;
	http(&r, "GET", longp, NULL, 0);
	assert_error(&r, 400, "EINVAL");
	resp_free(&r);
	assert_int_equal(calls(), before);
}

static void test_routes(void **state)
{
	struct resp r;
	http(&r, "GET", "/v1/nothing", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);
	http(&r, "GET", "/", NULL, 0); /* to the web view */
	assert_int_equal(r.status, 302);
	assert_string_equal(resp_header(&r, "Location"), "/ui/");
	resp_free(&r);
	http(&r, "GET", "/ui/index.html", NULL, 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(resp_header(&r, "Content-Type"), "text/html"));
	resp_free(&r);
	http(&r, "GET", "/ui/nothing.html", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);
	http(&r, "GET", "/x", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);
	http(&r, "GET", "/v1/nodes", NULL, 0);
	assert_error(&r, 404, "ENOENT");
	resp_free(&r);

	http(&r, "POST", "/v1/node", "{}", 2);
	assert_int_equal(r.status, 405);
	assert_string_equal(resp_header(&r, "Allow"), "GET");
	resp_free(&r);
	http(&r, "POST", "/v1/files/hello.txt", NULL, 0);
	assert_int_equal(r.status, 405);
	assert_string_equal(resp_header(&r, "Allow"), "GET, DELETE, PUT");
	resp_free(&r);
	http(&r, "GET", "/v1/chunks/query", NULL, 0);
	assert_int_equal(r.status, 405);
	assert_string_equal(resp_header(&r, "Allow"), "POST");
	resp_free(&r);
	http(&r, "GET", "/v1/chunks", NULL, 0);
	assert_int_equal(r.status, 405);
	resp_free(&r);

	/* Not a websocket request. */
	http(&r, "GET", "/v1/events", NULL, 0);
	assert_error(&r, 426, "EINVAL");
	resp_free(&r);
}

/* RFC 9112 framing: one way to tell where a body ends; and each body
 * endpoint takes its own Content-Type (415 otherwise). */
static void test_strict_http(void **state)
{
	assert_int_equal(raw_status("GET /v1/node HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 200);
	assert_int_equal(raw_status("POST /v1/chunks/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
				    "Content-Length: 32\r\nContent-Length: 64\r\nConnection: close\r\n\r\n"),
			 400);
	assert_int_equal(raw_status("POST /v1/chunks/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
				    "Content-Length: 32\r\nContent-Length: 32\r\nConnection: close\r\n\r\n"),
			 400);
	assert_int_equal(raw_status("POST /v1/chunks/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
				    "Content-Length: 32\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"),
			 400);
	unsigned calls = F.calls;
	struct resp r;
	uint8_t ids[32] = { 0 };
	const char *wrong[][2] = {
		{ "/v1/chunks/query", "application/json" },
		{ "/v1/chunks/fetch", "text/plain" },
		{ "/v1/chunks", "application/octet-stream" },
		{ "/v1/transfers", "application/x-www-form-urlencoded" },
	};
	for (size_t k = 0; k < sizeof(wrong) / sizeof(wrong[0]); k++) {
		http_full(&r, "POST", wrong[k][0], ids, sizeof(ids), &(struct req_opts){ .ctype = wrong[k][1] });
		assert_error(&r, 415, "ENOTSUP");
		resp_free(&r);
	}
	http_full(&r, "PUT", "/v1/dirs/d415", "{}", 2, &(struct req_opts){ .ctype = "text/plain" });
	assert_error(&r, 415, "ENOTSUP");
	resp_free(&r);
	assert_int_equal(F.calls, calls); /* none reached the node */
	/* a mkdir with no body needs no Content-Type */
	http_full(&r, "PUT", "/v1/dirs/d-nobody", NULL, 0, NULL);
	assert_int_equal(r.status, 201);
	resp_free(&r);
}

static void test_limits(void **state)
{
	struct dmar_server *s;
	char url[64];
	start_server(&s, url, &(struct dmar_server_opts){ .listen = "127.0.0.1:0", .max_body = 64 << 10 });
	struct req_opts o = { .url = url };
	size_t big = 100 << 10;
	uint8_t *b = calloc(1, big);
	unsigned before = calls();
	struct resp r;
	http_full(&r, "POST", "/v1/chunks/query", b, big, &o);
	assert_error(&r, 413, "EFBIG");
	resp_free(&r);
	http_full(&r, "POST", "/v1/chunks", b, big, &o);
	assert_error(&r, 413, "EFBIG");
	resp_free(&r);
	/* Chunked: counted as it arrives. */
	o.chunked = big;
	http_full(&r, "POST", "/v1/chunks/query", NULL, 0, &o);
	assert_error(&r, 413, "EFBIG");
	resp_free(&r);
	assert_int_equal(calls(), before);
	/* Within the limit, chunked works. */
	o.chunked = 32 * 100;
	http_full(&r, "POST", "/v1/chunks/query", NULL, 0, &o);
	assert_int_equal(r.status, 200);
	assert_string_equal(resp_header(&r, "X-Dmar-Missing"), "100");
	resp_free(&r);
	dmar_server_stop(s);
	free(b);
}

#define TOKEN "s3cret-token"

static void test_auth(void **state)
{
	struct dmar_server *s;
	char url[64];
	start_server(&s, url, &(struct dmar_server_opts){ .listen = "127.0.0.1:0", .token = TOKEN });
	struct tchunk c;
	make_chunk(&c, 1000, 60, false, false);
	struct bytes b = { 0 };
	make_batch(&b, &c, 1, -1);
	unsigned before = calls();
	struct resp r;
	const char *tokens[] = { NULL, "wrong", TOKEN "x", "s3cret-toke" };
	for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
		http_full(&r, "GET", "/v1/node", NULL, 0, &(struct req_opts){ .url = url, .token = tokens[i] });
		assert_error(&r, 401, "EKEYREJECTED");
		assert_string_equal(resp_header(&r, "WWW-Authenticate"), "Bearer");
		resp_free(&r);
		http_full(&r, "POST", "/v1/chunks", b.p, b.len, &(struct req_opts){ .url = url, .token = tokens[i] });
		assert_error(&r, 401, "EKEYREJECTED");
		resp_free(&r);
		http_full(&r, "GET", "/v1/events", NULL, 0, &(struct req_opts){ .url = url, .token = tokens[i] });
		assert_error(&r, 401, "EKEYREJECTED");
		resp_free(&r);
	}
	/* Another scheme is no token either. */
	http_full(&r, "GET", "/v1/node", NULL, 0, &(struct req_opts){ .url = url, .header = "Authorization: Basic " TOKEN });
	assert_int_equal(r.status, 401);
	resp_free(&r);
	assert_int_equal(calls(), before);
	assert_int_equal(F.nchunks, 0);

	http_full(&r, "GET", "/v1/node", NULL, 0, &(struct req_opts){ .url = url, .token = TOKEN });
	assert_int_equal(r.status, 200);
	resp_free(&r);
	http_full(&r, "POST", "/v1/chunks", b.p, b.len, &(struct req_opts){ .url = url, .token = TOKEN });
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_int_equal(F.nchunks, 1);
	dmar_server_stop(s);
	free(b.p);
	free_chunk(&c);
}

static void test_listen(void **state)
{
	struct dmar_server *s = NULL;
	struct dmar_error err = { 0 };
	const struct dmar_server_opts open_v4 = { .listen = "0.0.0.0:0" };
	assert_int_equal(dmar_server_start(&s, &open_v4, &fake_ops, NULL, &err), -EPERM);
	assert_non_null(strstr(err.msg, "token"));
	assert_null(s);
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts open_v6 = { .listen = "[::]:0" };
	assert_int_equal(dmar_server_start(&s, &open_v6, &fake_ops, NULL, &err), -EPERM);
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts lan = { .listen = "192.168.1.10:7420" };
	assert_int_equal(dmar_server_start(&s, &lan, &fake_ops, NULL, &err), -EPERM);

	const char *bad[] = { "nohost:1", "127.0.0.1:99999", "127.0.0.1:", "[::1:5", "::1:5", "127.0.0.1:-1", "" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err = (struct dmar_error){ 0 };
		const struct dmar_server_opts o = { .listen = bad[i] };
		assert_int_equal(dmar_server_start(&s, &o, &fake_ops, NULL, &err), -EINVAL);
		assert_true(err.msg[0]);
	}
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts half_tls = { .listen = "127.0.0.1:0", .tls_cert = "x.pem" };
	assert_int_equal(dmar_server_start(&s, &half_tls, &fake_ops, NULL, &err), -EINVAL);
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts no_files = { .listen = "127.0.0.1:0", .tls_cert = "/nonexistent/c.pem",
						   .tls_key = "/nonexistent/k.pem" };
	assert_int_equal(dmar_server_start(&s, &no_files, &fake_ops, NULL, &err), -EINVAL);

	/* With a token, any address. */
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts tok = { .listen = "0.0.0.0:0", .token = TOKEN };
	assert_int_equal(dmar_server_start(&s, &tok, &fake_ops, NULL, &err), 0);
	dmar_server_stop(s);

	/* The port in use. */
	struct dmar_server *s2 = NULL;
	err = (struct dmar_error){ 0 };
	char spec[32];
	snprintf(spec, sizeof(spec), "127.0.0.1:%u", dmar_server_port(S));
	const struct dmar_server_opts busy = { .listen = spec };
	assert_int_equal(dmar_server_start(&s2, &busy, &fake_ops, NULL, &err), -EADDRINUSE);

	/* IPv6 loopback, where the host has it. */
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts v6 = { .listen = "[::1]:0" };
	int r = dmar_server_start(&s, &v6, &fake_ops, NULL, &err);
	if (r == 0) {
		char url[64];
		snprintf(url, sizeof(url), "http://[::1]:%u", dmar_server_port(s));
		struct resp rs;
		http_full(&rs, "GET", "/v1/node", NULL, 0, &(struct req_opts){ .url = url });
		assert_int_equal(rs.status, 200);
		resp_free(&rs);
		dmar_server_stop(s);
	} else {
		assert_true(r == -EADDRNOTAVAIL || r == -EAFNOSUPPORT);
	}
	dmar_server_stop(NULL);
}

/* ---- websocket --------------------------------------------------------------------- */

static int ws_connect(uint16_t port, const char *extra_headers, char *resp, size_t cap)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char req[1024];
	int n = snprintf(req, sizeof(req),
			 "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
			 "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
			 "%s\r\n",
			 extra_headers);
	assert_int_equal(send(fd, req, (size_t)n, 0), n);
	/* Read the response head, byte by byte so no frame is swallowed. */
	size_t got = 0;
	while (got + 1 < cap) {
		ssize_t k = recv(fd, resp + got, 1, 0);
		if (k <= 0)
			break;
		got++;
		resp[got] = '\0';
		if (got >= 4 && memcmp(resp + got - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	resp[got] = '\0';
	return fd;
}

struct ws_got {
	int n, all;
	char last[64]; /* the start of the last frame */
	enum dmar_ws_opcode op[8];
	char text[8][512];
	size_t len[8];
};

static int on_ws_got(void *ctx, const struct dmar_ws_frame *f)
{
	struct ws_got *g = ctx;
	g->all++;
	snprintf(g->last, sizeof(g->last), "%.*s", (int)f->len, (const char *)f->payload);
	if (g->n < 8) {
		g->op[g->n] = f->opcode;
		g->len[g->n] = f->len;
		snprintf(g->text[g->n], sizeof(g->text[0]), "%.*s", (int)f->len, (const char *)f->payload);
		g->n++;
	}
	return 0;
}

/* Read from fd until g holds want frames (or the peer closes). */
static void ws_read_frames(int fd, struct dmar_ws_parser *p, struct ws_got *g, int want)
{
	while (g->n < want) {
		uint8_t buf[1024];
		ssize_t k = recv(fd, buf, sizeof(buf), 0);
		if (k <= 0)
			fail_msg("websocket: connection ended after %d frames (wanted %d)", g->n, want);
		struct dmar_error err = { 0 };
		assert_int_equal(dmar_ws_parser_feed(p, buf, (size_t)k, &err), 0);
	}
}

static void ws_send(int fd, enum dmar_ws_opcode op, const void *payload, size_t len)
{
	uint8_t frame[256];
	const uint8_t mask[4] = { 0x12, 0x34, 0x56, 0x78 };
	size_t h = dmar_ws_frame_header(frame, op, len, mask);
	memcpy(frame + h, payload, len);
	dmar_ws_mask(frame + h, len, mask, 0);
	assert_int_equal(send(fd, frame, h + len, 0), (ssize_t)(h + len));
}

static void test_events(void **state)
{
	char head[2048];
	int fd = ws_connect(dmar_server_port(S), "Sec-WebSocket-Version: 13\r\n", head, sizeof(head));
	assert_non_null(strstr(head, "HTTP/1.1 101"));
	assert_non_null(strstr(head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
	assert_non_null(strcasestr(head, "Upgrade: websocket\r\n"));
	assert_non_null(strcasestr(head, "Connection: Upgrade\r\n"));

	struct ws_got g = { 0 };
	struct dmar_ws_parser *p;
	assert_int_equal(dmar_ws_parser_new(&p, 1 << 20, DMAR_WS_MASK_FORBIDDEN, on_ws_got, &g), 0);
	ws_read_frames(fd, p, &g, 1);
	assert_int_equal(g.op[0], DMAR_WS_TEXT);
	json_t *hello = json_loads(g.text[0], 0, NULL);
	assert_string_equal(json_string_value(json_object_get(hello, "type")), "hello");
	assert_string_equal(json_string_value(json_object_get(hello, "node")), "fake");
	json_decref(hello);

	/* An event reaches the listener, with a time. */
	dmar_server_event(S, json_pack("{s:s, s:s, s:s, s:I}", "type", "transfer.done", "path", "a", "to", "b",
				       "logical_bytes", (json_int_t)123));
	ws_read_frames(fd, p, &g, 2);
	json_t *ev = json_loads(g.text[1], 0, NULL);
	assert_non_null(ev);
	assert_string_equal(json_string_value(json_object_get(ev, "type")), "transfer.done");
	assert_int_equal(json_integer_value(json_object_get(ev, "logical_bytes")), 123);
	assert_true(json_is_real(json_object_get(ev, "time")));
	json_decref(ev);

	/* Ping is answered with the same payload; close with close. */
	ws_send(fd, DMAR_WS_PING, "are you there", 13);
	ws_read_frames(fd, p, &g, 3);
	assert_int_equal(g.op[2], DMAR_WS_PONG);
	assert_string_equal(g.text[2], "are you there");
	const uint8_t bye[2] = { 0x03, 0xe8 };
	ws_send(fd, DMAR_WS_CLOSE, bye, 2);
	ws_read_frames(fd, p, &g, 4);
	assert_int_equal(g.op[3], DMAR_WS_CLOSE);
	assert_int_equal(g.len[3], 2);
	assert_int_equal((uint8_t)g.text[3][0] << 8 | (uint8_t)g.text[3][1], 1000);
	uint8_t b;
	assert_true(recv(fd, &b, 1, 0) <= 0);
	close(fd);
	dmar_ws_parser_free(p);

	/* An unmasked client frame is a protocol error: close 1002. */
	fd = ws_connect(dmar_server_port(S), "Sec-WebSocket-Version: 13\r\n", head, sizeof(head));
	assert_non_null(strstr(head, "HTTP/1.1 101"));
	g = (struct ws_got){ 0 };
	assert_int_equal(dmar_ws_parser_new(&p, 1 << 20, DMAR_WS_MASK_FORBIDDEN, on_ws_got, &g), 0);
	uint8_t raw[DMAR_WS_HDR_MAX];
	dmar_ws_frame_header(raw, DMAR_WS_PING, 0, NULL);
	assert_int_equal(send(fd, raw, 2, 0), 2);
	ws_read_frames(fd, p, &g, 2);
	assert_int_equal(g.op[1], DMAR_WS_CLOSE);
	assert_int_equal((uint8_t)g.text[1][0] << 8 | (uint8_t)g.text[1][1], 1002);
	close(fd);
	dmar_ws_parser_free(p);

	/* A bad handshake is an HTTP error. */
	fd = ws_connect(dmar_server_port(S), "Sec-WebSocket-Version: 8\r\n", head, sizeof(head));
	assert_non_null(strstr(head, "HTTP/1.1 426"));
	assert_non_null(strstr(head, "Sec-WebSocket-Version: 13"));
	close(fd);
}

/* Server stop closes open websockets. */
static void test_events_stop(void **state)
{
	struct dmar_server *s;
	char url[64], head[2048];
	start_server(&s, url, NULL);
	int fd = ws_connect(dmar_server_port(s), "Sec-WebSocket-Version: 13\r\n", head, sizeof(head));
	assert_non_null(strstr(head, "HTTP/1.1 101"));
	dmar_server_stop(s);
	uint8_t buf[256];
	ssize_t k;
	while ((k = recv(fd, buf, sizeof(buf), 0)) > 0)
		;
	assert_true(k == 0 || errno == ECONNRESET);
	close(fd);
}

/* A listener that does not read is dropped once 1 MiB is waiting for it;
 * the others keep their events. */
static void test_events_slow(void **state)
{
	char head[2048];
	int slow = ws_connect(dmar_server_port(S), "Sec-WebSocket-Version: 13\r\n", head, sizeof(head));
	assert_non_null(strstr(head, "HTTP/1.1 101"));
	int fast = ws_connect(dmar_server_port(S), "Sec-WebSocket-Version: 13\r\n", head, sizeof(head));
	assert_non_null(strstr(head, "HTTP/1.1 101"));
	struct ws_got g = { 0 };
	struct dmar_ws_parser *p;
	assert_int_equal(dmar_ws_parser_new(&p, 1 << 20, DMAR_WS_MASK_FORBIDDEN, on_ws_got, &g), 0);
	ws_read_frames(fast, p, &g, 1); /* hello */

	/* 16 MiB of events: more than the socket buffers and the backlog. */
	char pad[4001];
	memset(pad, 'x', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	for (int i = 0; i < 4096; i++) {
		dmar_server_event(S, json_pack("{s:s, s:s}", "type", "transfer.progress", "path", pad));
		if (i % 64 == 63) {
			/* The fast one keeps up: it reads every event sent so
			 * far before more come (waiting, so that a loaded
			 * machine's slow sender thread does not make it look
			 * slow; 30 s at most). */
			uint8_t buf[1 << 16];
			while (g.all < 1 + i + 1) {
				struct pollfd pf = { .fd = fast, .events = POLLIN };
				if (poll(&pf, 1, 30000) != 1)
					fail_msg("the fast client got %d of %d frames in 30 s", g.all, 1 + i + 1);
				ssize_t k = recv(fast, buf, sizeof(buf), 0);
				if (k <= 0)
					fail_msg("the fast client's stream ended after %d frames", g.all);
				struct dmar_error err = { 0 };
				assert_int_equal(dmar_ws_parser_feed(p, buf, (size_t)k, &err), 0);
			}
		}
	}
	/* The slow one: some events, then the end of the stream. */
	size_t total = 0;
	uint8_t buf[1 << 16];
	ssize_t k;
	while ((k = recv(slow, buf, sizeof(buf), 0)) > 0)
		total += (size_t)k;
	assert_true(total < 4096u * 4000u);
	close(slow);
	/* The fast one is still served. */
	dmar_server_event(S, json_pack("{s:s}", "type", "arena"));
	ws_send(fast, DMAR_WS_CLOSE, "", 0);
	while ((k = recv(fast, buf, sizeof(buf), 0)) > 0) {
		struct dmar_error err = { 0 };
		assert_int_equal(dmar_ws_parser_feed(p, buf, (size_t)k, &err), 0);
	}
	/* hello, 4096 events, the last one, and the close answering ours. */
	assert_int_equal(g.all, 1 + 4096 + 1 + 1);
	close(fast);
	dmar_ws_parser_free(p);
}

/* TLS with a throwaway self-signed certificate (needs the openssl tool). */
static void test_tls(void **state)
{
	char dir[] = "/tmp/dmar-tls.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char cmd[1024], cert[64], key[64];
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
		 "-subj /CN=localhost -keyout %s -out %s >/dev/null 2>&1",
		 key, cert);
	if (system(cmd) != 0) {
		rmdir(dir);
		skip(); /* no openssl tool */
	}
	struct dmar_server *s;
	struct dmar_error err = { 0 };
	const struct dmar_server_opts o = { .listen = "127.0.0.1:0", .tls_cert = cert, .tls_key = key, .token = TOKEN };
	int r = dmar_server_start(&s, &o, &fake_ops, NULL, &err);
	if (r < 0)
		fail_msg("tls server: %s", err.msg);
	char url[64];
	snprintf(url, sizeof(url), "https://127.0.0.1:%u", dmar_server_port(s));
	CURL *c = curl_easy_init();
	struct bytes body = { 0 };
	char u[128];
	snprintf(u, sizeof(u), "%s/v1/node", url);
	curl_easy_setopt(c, CURLOPT_URL, u);
	curl_easy_setopt(c, CURLOPT_CAINFO, cert);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	struct curl_slist *h = curl_slist_append(NULL, "Authorization: Bearer " TOKEN);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	assert_int_equal(status, 200);
	assert_non_null(memmem(body.p, body.len, "\"name\":\"fake\"", 13));
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(body.p);
	dmar_server_stop(s);

	/* A key that is not one. */
	err = (struct dmar_error){ 0 };
	const struct dmar_server_opts bad = { .listen = "127.0.0.1:0", .tls_cert = cert, .tls_key = cert };
	assert_int_equal(dmar_server_start(&s, &bad, &fake_ops, NULL, &err), -EINVAL);
	unlink(cert);
	unlink(key);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_node, each_setup),
		cmocka_unit_test_setup(test_stat, each_setup),
		cmocka_unit_test_setup(test_remove, each_setup),
		cmocka_unit_test_setup(test_mkdir, each_setup),
		cmocka_unit_test_setup(test_query, each_setup),
		cmocka_unit_test_setup(test_upload, each_setup),
		cmocka_unit_test_setup(test_upload_bad_chunk, each_setup),
		cmocka_unit_test_setup(test_upload_many, each_setup),
		cmocka_unit_test_setup(test_upload_trickle, each_setup),
		cmocka_unit_test_setup(test_upload_zstd, each_setup),
		cmocka_unit_test_setup(test_upload_zstd_bomb, each_setup),
		cmocka_unit_test_setup(test_upload_malformed, each_setup),
		cmocka_unit_test_setup(test_upload_enospc, each_setup),
		cmocka_unit_test_setup(test_get_chunk, each_setup),
		cmocka_unit_test_setup(test_fetch, each_setup),
		cmocka_unit_test_setup(test_commit, each_setup),
		cmocka_unit_test_setup(test_commit_short, each_setup),
		cmocka_unit_test_setup(test_commit_content, each_setup),
		cmocka_unit_test_setup(test_transfer, each_setup),
		cmocka_unit_test_setup(test_bad_paths, each_setup),
		cmocka_unit_test_setup(test_routes, each_setup),
		cmocka_unit_test_setup(test_strict_http, each_setup),
		cmocka_unit_test_setup(test_limits, each_setup),
		cmocka_unit_test_setup(test_auth, each_setup),
		cmocka_unit_test_setup(test_listen, each_setup),
		cmocka_unit_test_setup(test_events, each_setup),
		cmocka_unit_test_setup(test_events_stop, each_setup),
		cmocka_unit_test_setup(test_events_slow, each_setup),
		cmocka_unit_test_setup(test_tls, each_setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
