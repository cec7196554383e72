/* SPDX-License-Identifier: MIT */
/*
 * test_client - the REST client (net/client.h) against a fake node.
 *
 * The fake is a small libmicrohttpd server written here, not net/server.c:
 * it speaks the endpoints of docs/rest-api.md over an in-memory chunk table
 * and file table, counts what it receives, verifies every uploaded chunk
 * against its id, and has switches that inject the faults the client must
 * handle (a 422 for one chunk, a 409 on commit, 507, 401, a corrupted
 * chunk in a fetch answer).
 *
 * test_throughput prints the push and pull rates over loopback (fake and
 * client share the CPUs, so it is a floor, not a benchmark); it never
 * asserts a speed.  DMAR_BENCH_MIB sets its size (default 32);
 * DMAR_TEST_FILTER=test_throughput runs it alone.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "prng.h"

#include "codec/hash.h"
#include "net/client.h"
#include "net/relay.h"
#include "net/swarm.h"
#include "net/wire.h"

/* ---- a chunk table, shared by the fake and the test's source ----------- */

struct tchunk {
	struct dmar_id id;
	uint8_t *data;
	uint32_t len;
	bool compressible;
	bool borrowed; /* data belongs to someone else (the throughput test) */
};

#define TABLE_SLOTS (1u << 17)

struct table {
	struct tchunk *c; /* dense */
	size_t n, cap;
	uint32_t *slot;   /* index + 1 */
};

static void table_init(struct table *t)
{
	memset(t, 0, sizeof(*t));
	t->slot = calloc(TABLE_SLOTS, sizeof(*t->slot));
	assert_non_null(t->slot);
}

static void table_free(struct table *t, bool own_data)
{
	if (own_data)
		for (size_t i = 0; i < t->n; i++)
			if (!t->c[i].borrowed)
				free(t->c[i].data);
	free(t->c);
	free(t->slot);
	memset(t, 0, sizeof(*t));
}

static size_t slot_of(const struct dmar_id *id)
{
	uint64_t k;
	memcpy(&k, id->b, 8);
	return k & (TABLE_SLOTS - 1);
}

static struct tchunk *table_find(const struct table *t, const struct dmar_id *id)
{
	for (size_t i = slot_of(id);; i = (i + 1) & (TABLE_SLOTS - 1)) {
		if (!t->slot[i])
			return NULL;
		struct tchunk *c = &t->c[t->slot[i] - 1];
		if (memcmp(c->id.b, id->b, 32) == 0)
			return c;
	}
}

/* The one entry whose id starts with id's first idlen bytes: 1 and *id
 * completed, 0 if none, 2 if several (the real store's rule: every id with
 * those first 8 bytes sits in the cluster after its home slot). */
static int table_resolve(const struct table *t, struct dmar_id *id, unsigned idlen)
{
	struct tchunk *hit = NULL;
	for (size_t i = slot_of(id);; i = (i + 1) & (TABLE_SLOTS - 1)) {
		if (!t->slot[i])
			break;
		struct tchunk *c = &t->c[t->slot[i] - 1];
		if (memcmp(c->id.b, id->b, idlen) != 0)
			continue;
		if (hit)
			return 2;
		hit = c;
	}
	if (hit)
		*id = hit->id;
	return hit != NULL;
}

/* Adds a copy of data (or data itself if borrow) unless id is there;
 * returns the entry. */
static struct tchunk *table_put(struct table *t, const struct dmar_id *id, const uint8_t *data, uint32_t len,
				bool borrow)
{
	struct tchunk *have = table_find(t, id);
	if (have)
		return have;
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->c = realloc(t->c, t->cap * sizeof(*t->c));
		assert_non_null(t->c);
	}
	struct tchunk *c = &t->c[t->n];
	c->id = *id;
	c->len = len;
	c->compressible = false;
	c->borrowed = borrow;
	if (borrow) {
		c->data = (uint8_t *)data;
	} else {
		c->data = malloc(len);
		assert_non_null(c->data);
		memcpy(c->data, data, len);
	}
	size_t i = slot_of(id);
	while (t->slot[i])
		i = (i + 1) & (TABLE_SLOTS - 1);
	t->slot[i] = (uint32_t)++t->n;
	return c;
}

static struct tchunk *table_add(struct table *t, const struct dmar_id *id, const uint8_t *data, uint32_t len)
{
	return table_put(t, id, data, len, false);
}

/* Removing rebuilds the slots: rare (the 409 fault) and tables are small. */
static void table_remove(struct table *t, const struct dmar_id *id)
{
	struct tchunk *c = table_find(t, id);
	if (!c)
		return;
	size_t k = (size_t)(c - t->c);
	if (!c->borrowed)
		free(c->data);
	t->c[k] = t->c[--t->n];
	memset(t->slot, 0, TABLE_SLOTS * sizeof(*t->slot));
	for (size_t j = 0; j < t->n; j++) {
		size_t i = slot_of(&t->c[j].id);
		while (t->slot[i])
			i = (i + 1) & (TABLE_SLOTS - 1);
		t->slot[i] = (uint32_t)(j + 1);
	}
}

/* ---- the fake node ------------------------------------------------------- */

struct ffile {
	char path[512];
	bool dir;
	uint32_t mode;
	uint8_t *recipe;
	size_t len;
	uint64_t size;
};

struct fake {
	struct MHD_Daemon *d;
	uint16_t port;
	pthread_mutex_t lock; /* everything below */
	struct table store;
	struct ffile files[64];
	size_t nfiles;
	/* what arrived */
	unsigned long n_query, n_upload, n_commit, n_fetch;
	unsigned long n_short; /* commits that came as short recipes */
	unsigned long n_415;   /* short recipes refused (no_short) */
	unsigned long rx_chunks, rx_zstd, rx_bad;
	unsigned long rx_grouped;  /* chunks in a byte-grouped frame */
	unsigned long rx_zbatches; /* uploads with Content-Encoding: zstd */
	uint64_t rx_zbytes;        /* their bodies' bytes as sent */
	uint64_t rx_bytes;
	uint64_t upload_id;          /* X-Dmar-Upload of the first upload since reset */
	unsigned long upload_mixed;  /* uploads with another id, none or a malformed one */
	/* faults */
	const char *token;
	bool reject_one_once; /* answer 422 for the first chunk of the next upload */
	unsigned drop_on_commit; /* on the next commit that finds every chunk, drop this many and answer 409 */
	unsigned missing_cap;    /* the 409 list's cap (0: 4096) */
	bool no_short;           /* answer 415 to a short recipe, like a node from before them */
	bool enospc;
	bool corrupt_fetch; /* flip a byte of one chunk in each fetch answer */
	bool zstd_fetch;    /* send compressible chunks zstd-encoded in fetch answers */
	bool discard;       /* verify uploads but keep only their ids (the throughput test) */
};

static struct fake *F;

struct freq {
	uint8_t *body;
	size_t len, cap;
	bool upload;
	struct dmar_batch_parser *parser;
	ZSTD_DCtx *dz;
	ZSTD_DCtx *bz; /* Content-Encoding: zstd, like the real server */
	bool zdone;
	uint8_t *scratch;
	json_t *bad;
	int fail;
	unsigned long got;
	uint64_t bytes;
};

static struct ffile *file_find(const char *path)
{
	for (size_t i = 0; i < F->nfiles; i++)
		if (strcmp(F->files[i].path, path) == 0)
			return &F->files[i];
	return NULL;
}

static enum MHD_Result answer(struct MHD_Connection *con, unsigned status, const char *ctype, void *buf,
			      size_t len)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (ctype)
		MHD_add_response_header(resp, "Content-Type", ctype);
	enum MHD_Result r = MHD_queue_response(con, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result answer_json(struct MHD_Connection *con, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return answer(con, status, "application/json", s, strlen(s));
}

static enum MHD_Result answer_err(struct MHD_Connection *con, unsigned status, const char *eno, const char *msg)
{
	return answer_json(con, status, json_pack("{s:s, s:s}", "error", msg, "errno", eno));
}

static json_t *file_stat(const struct ffile *f)
{
	const char *slash = strrchr(f->path, '/');
	return json_pack("{s:s, s:s, s:I, s:I}", "name", slash ? slash + 1 : f->path, "type",
			 f->dir ? "dir" : "file", "size", (json_int_t)f->size, "mode", (json_int_t)f->mode);
}

/* Upload records as they arrive: verify, count, store (or reject). */
static int fake_record(void *ctx, const struct dmar_wire_chunk *c)
{
	struct freq *q = ctx;
	const uint8_t *decoded;
	int r = dmar_wire_chunk_verify(c, q->dz, q->scratch, &decoded, NULL);
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(c->id.b, 32, hex);
	pthread_mutex_lock(&F->lock);
	F->rx_chunks++;
	F->rx_bytes += c->len;
	F->rx_zstd += c->enc == DMAR_WIRE_ZSTD;
	F->rx_grouped += c->enc == DMAR_WIRE_ZSTD_G2 || c->enc == DMAR_WIRE_ZSTD_G4;
	bool reject = r < 0;
	F->rx_bad += reject;
	if (!reject && F->reject_one_once) {
		F->reject_one_once = false;
		reject = true;
	}
	if (reject) {
		json_array_append_new(q->bad, json_string(hex));
	} else if (F->enospc) {
		q->fail = -ENOSPC;
	} else {
		if (F->discard)
			table_put(&F->store, &c->id, NULL, c->len, true);
		else
			table_add(&F->store, &c->id, decoded, c->len);
		q->got++;
		q->bytes += c->len;
	}
	pthread_mutex_unlock(&F->lock);
	return 0;
}

static enum MHD_Result fake_query(struct MHD_Connection *con, struct freq *q)
{
	if (q->len % 32)
		return answer_err(con, 400, "EINVAL", "not an id list");
	size_t n = q->len / 32, m = 0;
	uint8_t *out = malloc(q->len ? q->len : 1);
	pthread_mutex_lock(&F->lock);
	F->n_query++;
	for (size_t i = 0; i < n; i++)
		if (!table_find(&F->store, (const struct dmar_id *)(q->body + 32 * i)))
			memcpy(out + 32 * m++, q->body + 32 * i, 32);
	pthread_mutex_unlock(&F->lock);
	char count[32];
	snprintf(count, sizeof(count), "%zu", m);
	struct MHD_Response *resp = MHD_create_response_from_buffer(32 * m, out, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "X-Dmar-Missing", count);
	enum MHD_Result r = MHD_queue_response(con, 200, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result fake_upload_done(struct MHD_Connection *con, struct freq *q)
{
	pthread_mutex_lock(&F->lock);
	F->n_upload++;
	pthread_mutex_unlock(&F->lock);
	if (q->fail == -ENOSPC)
		return answer_err(con, 507, "ENOSPC", "fake arena full: 0 bytes free");
	if (q->fail == -ENOTSUP)
		return answer_err(con, 415, "ENOTSUP", "Content-Encoding: only zstd");
	if (q->fail < 0 || (q->bz && !q->zdone) || dmar_batch_parser_finish(q->parser, NULL) < 0)
		return answer_err(con, 400, "EBADMSG", "malformed chunk batch");
	if (json_array_size(q->bad)) {
		json_t *j = json_pack("{s:s, s:s, s:O}", "error", "chunks do not match their ids", "errno",
				      "EILSEQ", "bad", q->bad);
		return answer_json(con, 422, j);
	}
	return answer_json(con, 200, json_pack("{s:I, s:I}", "received", (json_int_t)q->got, "bytes",
					       (json_int_t)q->bytes));
}

/* Complete a short recipe from the store, as net/server.c does: NULL and
 * *full (malloc'd, *flen bytes) the full recipe, or the 409 answer. */
static json_t *fake_complete(struct dmar_recipe *r, const struct dmar_id *rid, unsigned idlen, uint8_t **full,
			     size_t *flen)
{
	size_t nb = (r->n + 7) / 8, nmiss = 0;
	uint8_t *bits = calloc(nb + 1, 1);
	bool ambiguous = false;
	for (size_t i = 0; i < r->n; i++) {
		if (r->e[i].kind != DMAR_RECIPE_CHUNK)
			continue;
		int k = table_resolve(&F->store, &r->e[i].id, idlen);
		if (k == 0) {
			bits[i / 8] |= (uint8_t)(1u << (i % 8));
			nmiss++;
		}
		ambiguous |= k == 2;
	}
	json_t *ans = NULL;
	*full = NULL;
	if (!ambiguous && nmiss) {
		char *hex = malloc(2 * nb + 1);
		dmar_hex(bits, nb, hex);
		ans = json_pack("{s:s, s:s, s:I, s:s}", "error", "chunks missing", "errno", "ENODATA", "missing_count",
				(json_int_t)nmiss, "missing_bits", hex);
		free(hex);
	} else if (!ambiguous) {
		struct dmar_id got;
		*flen = dmar_recipe_wire_size(r->n);
		*full = malloc(*flen);
		dmar_recipe_write(r, *full, &got);
		ambiguous = memcmp(got.b, rid->b, 32) != 0;
	}
	if (ambiguous) {
		free(*full);
		*full = NULL;
		ans = json_pack("{s:s, s:s, s:i, s:s}", "error", "resend the full recipe", "errno", "ENODATA",
				"missing_count", 0, "resend", "full");
	}
	free(bits);
	return ans;
}

static enum MHD_Result fake_commit(struct MHD_Connection *con, const char *path, struct freq *q)
{
	const char *ct = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Type");
	bool is_short = ct && strcmp(ct, "application/x-dmar-recipe-short") == 0;
	struct dmar_recipe r;
	struct dmar_id rid;
	unsigned idlen;
	if (is_short && F->no_short) {
		pthread_mutex_lock(&F->lock);
		F->n_415++;
		pthread_mutex_unlock(&F->lock);
		return answer_err(con, 415, "ENOTSUP", "Content-Type must be application/x-dmar-recipe");
	}
	if (is_short ? dmar_recipe_short_parse(q->body, q->len, &r, &rid, &idlen, NULL) < 0
		     : dmar_recipe_parse(q->body, q->len, &r, NULL) < 0)
		return answer_err(con, 400, "EBADMSG", "bad recipe");
	const char *inm = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "If-None-Match");
	pthread_mutex_lock(&F->lock);
	F->n_commit++;
	uint8_t *full = NULL;
	size_t flen = 0;
	if (is_short) {
		F->n_short++;
		json_t *ans = fake_complete(&r, &rid, idlen, &full, &flen);
		if (ans) {
			pthread_mutex_unlock(&F->lock);
			dmar_recipe_free(&r);
			return answer_json(con, 409, ans);
		}
	} else {
		flen = q->len;
		full = malloc(flen);
		memcpy(full, q->body, flen);
	}
	/* Drop only from a commit that would succeed: the client commits
	 * first, and the fault to test is chunks lost after the upload. */
	bool all = true;
	for (size_t i = 0; i < r.n && all; i++)
		all = r.e[i].kind != DMAR_RECIPE_CHUNK || table_find(&F->store, &r.e[i].id);
	if (F->drop_on_commit && all) {
		unsigned k = 0;
		for (size_t i = 0; i < r.n && k < F->drop_on_commit; i++)
			if (r.e[i].kind == DMAR_RECIPE_CHUNK && table_find(&F->store, &r.e[i].id)) {
				table_remove(&F->store, &r.e[i].id);
				k++;
			}
		F->drop_on_commit = 0;
	}
	json_t *missing = json_array();
	size_t m = 0, cap = F->missing_cap ? F->missing_cap : 4096;
	struct table seen;
	table_init(&seen);
	for (size_t i = 0; i < r.n; i++) {
		if (r.e[i].kind != DMAR_RECIPE_CHUNK || table_find(&F->store, &r.e[i].id) ||
		    table_find(&seen, &r.e[i].id))
			continue;
		table_add(&seen, &r.e[i].id, (const uint8_t *)"", 1);
		char hex[DMAR_HASH_HEX_SIZE];
		dmar_hex(r.e[i].id.b, 32, hex);
		if (m++ < cap)
			json_array_append_new(missing, json_string(hex));
	}
	table_free(&seen, true);
	enum MHD_Result ret;
	struct ffile *f = file_find(path);
	if (m && is_short) {
		/* chunks dropped under a short commit: bits, as the real node */
		json_decref(missing);
		size_t nb = (r.n + 7) / 8;
		uint8_t *bits = calloc(nb + 1, 1);
		char *hex = malloc(2 * nb + 1);
		for (size_t i = 0; i < r.n; i++)
			if (r.e[i].kind == DMAR_RECIPE_CHUNK && !table_find(&F->store, &r.e[i].id))
				bits[i / 8] |= (uint8_t)(1u << (i % 8));
		dmar_hex(bits, nb, hex);
		ret = answer_json(con, 409,
				  json_pack("{s:s, s:s, s:I, s:s}", "error", "chunks missing", "errno", "ENODATA",
					    "missing_count", (json_int_t)m, "missing_bits", hex));
		free(bits);
		free(hex);
	} else if (m) {
		ret = answer_json(con, 409,
				  json_pack("{s:s, s:s, s:I, s:o}", "error", "chunks missing", "errno", "ENODATA",
					    "missing_count", (json_int_t)m, "missing", missing));
	} else if (f && inm && strcmp(inm, "*") == 0) {
		json_decref(missing);
		ret = answer_err(con, 412, "EEXIST", "file exists");
	} else {
		json_decref(missing);
		if (!f)
			f = &F->files[F->nfiles++];
		free(f->recipe);
		snprintf(f->path, sizeof(f->path), "%s", path);
		f->dir = false;
		f->mode = r.mode;
		f->size = r.size;
		f->recipe = full;
		f->len = flen;
		full = NULL;
		ret = answer_json(con, 201, file_stat(f));
	}
	pthread_mutex_unlock(&F->lock);
	free(full);
	dmar_recipe_free(&r);
	return ret;
}

/* A fetch answer streams from the chunk table (no copy of the batch, like
 * the real server): part 0 is the batch header, then a record header and
 * its payload for each chunk. */
struct fetch_rec {
	uint8_t h[DMAR_BATCH_REC_SIZE];
	const uint8_t *payload;
	uint32_t stored;
	uint8_t *own; /* a transformed payload (zstd, corrupted) */
};

struct fetch_ans {
	uint8_t hdr[DMAR_BATCH_HDR_SIZE];
	struct fetch_rec *rec;
	size_t n, part, off;
};

static ssize_t fetch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fetch_ans *a = cls;
	size_t done = 0;
	while (done < max && a->part < 1 + 2 * a->n) {
		const uint8_t *b;
		size_t len;
		if (a->part == 0) {
			b = a->hdr;
			len = sizeof(a->hdr);
		} else if ((a->part - 1) % 2 == 0) {
			b = a->rec[(a->part - 1) / 2].h;
			len = DMAR_BATCH_REC_SIZE;
		} else {
			b = a->rec[(a->part - 1) / 2].payload;
			len = a->rec[(a->part - 1) / 2].stored;
		}
		size_t take = len - a->off < max - done ? len - a->off : max - done;
		memcpy(buf + done, b + a->off, take);
		done += take;
		a->off += take;
		if (a->off == len) {
			a->part++;
			a->off = 0;
		}
	}
	return done ? (ssize_t)done : MHD_CONTENT_READER_END_OF_STREAM;
}

static void fetch_free(void *cls)
{
	struct fetch_ans *a = cls;
	for (size_t i = 0; i < a->n; i++)
		free(a->rec[i].own);
	free(a->rec);
	free(a);
}

static enum MHD_Result fake_fetch(struct MHD_Connection *con, struct freq *q)
{
	size_t n = q->len / 32;
	struct fetch_ans *a = calloc(1, sizeof(*a));
	a->rec = calloc(n ? n : 1, sizeof(*a->rec));
	a->n = n;
	dmar_batch_write_header(a->hdr, (uint32_t)n);
	uint64_t total = DMAR_BATCH_HDR_SIZE;
	ZSTD_CCtx *zc = ZSTD_createCCtx();
	ZSTD_CCtx_setParameter(zc, ZSTD_c_format, ZSTD_f_zstd1_magicless);
	pthread_mutex_lock(&F->lock);
	F->n_fetch++;
	for (size_t i = 0; i < n; i++) {
		struct tchunk *c = table_find(&F->store, (const struct dmar_id *)(q->body + 32 * i));
		if (!c) {
			pthread_mutex_unlock(&F->lock);
			ZSTD_freeCCtx(zc);
			fetch_free(a);
			char hex[DMAR_HASH_HEX_SIZE], msg[128];
			dmar_hex(q->body + 32 * i, 32, hex);
			snprintf(msg, sizeof(msg), "chunk %s not held", hex);
			return answer_err(con, 404, "ENOENT", msg);
		}
		struct fetch_rec *r = &a->rec[i];
		struct dmar_wire_chunk w = { .id = c->id, .enc = DMAR_WIRE_RAW, .len = c->len, .stored = c->len };
		r->payload = c->data;
		if (F->zstd_fetch && c->compressible) {
			r->own = malloc(ZSTD_compressBound(c->len));
			w.enc = DMAR_WIRE_ZSTD;
			w.stored = (uint32_t)ZSTD_compress2(zc, r->own, ZSTD_compressBound(c->len), c->data, c->len);
			r->payload = r->own;
		} else if (F->corrupt_fetch && i == n / 2) {
			r->own = malloc(c->len);
			memcpy(r->own, c->data, c->len);
			r->own[c->len / 2] ^= 0x40;
			r->payload = r->own;
		}
		r->stored = w.stored;
		dmar_batch_write_record(r->h, &w);
		total += DMAR_BATCH_REC_SIZE + w.stored;
	}
	pthread_mutex_unlock(&F->lock);
	ZSTD_freeCCtx(zc);
	struct MHD_Response *resp = MHD_create_response_from_callback(total, 256 << 10, fetch_read, a, fetch_free);
	MHD_add_response_header(resp, "Content-Type", "application/x-dmar-chunks");
	enum MHD_Result ret = MHD_queue_response(con, 200, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result fake_route(struct MHD_Connection *con, const char *url, const char *method, struct freq *q)
{
	if (F->token) {
		const char *a = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
		char want[256];
		snprintf(want, sizeof(want), "Bearer %s", F->token);
		if (!a || strcmp(a, want) != 0)
			return answer_err(con, 401, "EKEYREJECTED", "bad token");
	}
	bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0, put = strcmp(method, "PUT") == 0;
	if (get && strcmp(url, "/v1/node") == 0)
		return answer_json(con, 200, json_pack("{s:s}", "name", "fake"));
	if (post && strcmp(url, "/v1/chunks/query") == 0)
		return fake_query(con, q);
	if (post && strcmp(url, "/v1/chunks") == 0)
		return fake_upload_done(con, q);
	if (post && strcmp(url, "/v1/chunks/fetch") == 0)
		return fake_fetch(con, q);
	if (post && strcmp(url, "/v1/transfers") == 0) {
		json_t *j = json_loadb((const char *)q->body, q->len, 0, NULL);
		json_object_set_new(j, "ok", json_true());
		return answer_json(con, 200, j);
	}
	if (strncmp(url, "/v1/files/", 10) == 0 && put)
		return fake_commit(con, url + 10, q);
	enum MHD_Result ret;
	pthread_mutex_lock(&F->lock);
	if (strncmp(url, "/v1/files/", 10) == 0 && (get || strcmp(method, "DELETE") == 0)) {
		const char *path = url + 10;
		struct ffile *f = file_find(path);
		if (!f && (*path || !get)) {
			ret = answer_err(con, 404, "ENOENT", "no such file");
		} else if (!get) {
			free(f->recipe);
			*f = F->files[--F->nfiles];
			ret = answer(con, 204, NULL, NULL, 0);
		} else if (f && !f->dir) {
			ret = answer_json(con, 200, file_stat(f));
		} else {
			/* a directory: list what lies directly below it */
			json_t *st = f ? file_stat(f) : json_pack("{s:s, s:s}", "name", "", "type", "dir");
			json_t *ents = json_array();
			size_t pl = strlen(path);
			for (size_t i = 0; i < F->nfiles; i++) {
				const char *p = F->files[i].path;
				if (pl && (strncmp(p, path, pl) != 0 || p[pl] != '/'))
					continue;
				if (!strchr(p + pl + (pl ? 1 : 0), '/'))
					json_array_append_new(ents, file_stat(&F->files[i]));
			}
			json_object_set_new(st, "entries", ents);
			ret = answer_json(con, 200, st);
		}
	} else if (strncmp(url, "/v1/dirs/", 9) == 0 && put) {
		json_t *j = json_loadb((const char *)q->body, q->len, 0, NULL);
		if (file_find(url + 9)) {
			ret = answer_err(con, 409, "EEXIST", "exists");
		} else {
			struct ffile *f = &F->files[F->nfiles++];
			memset(f, 0, sizeof(*f));
			snprintf(f->path, sizeof(f->path), "%s", url + 9);
			f->dir = true;
			f->mode = (uint32_t)json_integer_value(json_object_get(j, "mode"));
			ret = answer_json(con, 201, file_stat(f));
		}
		json_decref(j);
	} else if (strncmp(url, "/v1/recipes/", 12) == 0 && get) {
		struct ffile *f = file_find(url + 12);
		if (!f || f->dir) {
			ret = answer_err(con, 404, "ENOENT", "no such file");
		} else {
			uint8_t *b = malloc(f->len);
			memcpy(b, f->recipe, f->len);
			ret = answer(con, 200, "application/x-dmar-recipe", b, f->len);
		}
	} else {
		ret = answer_err(con, 404, "ENOENT", "no such endpoint");
	}
	pthread_mutex_unlock(&F->lock);
	return ret;
}

static enum MHD_Result fake_handler(void *cls, struct MHD_Connection *con, const char *url, const char *method,
				    const char *version, const char *data, size_t *data_size, void **con_cls)
{
	struct freq *q = *con_cls;
	if (!q) {
		q = calloc(1, sizeof(*q));
		q->upload = strcmp(method, "POST") == 0 && strcmp(url, "/v1/chunks") == 0;
		if (q->upload) {
			dmar_batch_parser_new(&q->parser, 1u << 20, fake_record, q);
			/* One transfer's uploads carry one id (net/wire.h). */
			const char *up = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Dmar-Upload");
			uint64_t id = 0;
			pthread_mutex_lock(&F->lock);
			if (!up || dmar_wire_upload_parse(up, &id) < 0 || (F->upload_id && id != F->upload_id))
				F->upload_mixed++;
			else
				F->upload_id = id;
			pthread_mutex_unlock(&F->lock);
			q->dz = ZSTD_createDCtx();
			q->scratch = malloc(DMAR_WIRE_SCRATCH);
			q->bad = json_array();
			const char *ce = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Encoding");
			if (ce && strcmp(ce, "zstd") == 0) {
				q->bz = ZSTD_createDCtx();
				pthread_mutex_lock(&F->lock);
				F->rx_zbatches++;
				pthread_mutex_unlock(&F->lock);
			} else if (ce) {
				q->fail = -ENOTSUP;
			}
		}
		*con_cls = q;
		return MHD_YES;
	}
	if (*data_size) {
		if (q->upload) {
			/* Parse as it arrives, like the real server: no whole-body buffer. */
			if (q->bz && !q->fail) {
				pthread_mutex_lock(&F->lock);
				F->rx_zbytes += *data_size;
				pthread_mutex_unlock(&F->lock);
				ZSTD_inBuffer in = { data, *data_size, 0 };
				uint8_t out[65536];
				while (!q->fail && (in.pos < in.size)) {
					ZSTD_outBuffer o = { out, sizeof(out), 0 };
					size_t r = ZSTD_decompressStream(q->bz, &o, &in);
					if (ZSTD_isError(r))
						q->fail = -EBADMSG;
					else if (o.pos && dmar_batch_parser_feed(q->parser, out, o.pos, NULL) < 0)
						q->fail = -EBADMSG;
					q->zdone = r == 0;
					/* drain what it holds back */
					while (!q->fail && o.pos == o.size) {
						ZSTD_inBuffer none = { NULL, 0, 0 };
						o.pos = 0;
						r = ZSTD_decompressStream(q->bz, &o, &none);
						if (ZSTD_isError(r))
							q->fail = -EBADMSG;
						else if (o.pos && dmar_batch_parser_feed(q->parser, out, o.pos, NULL) < 0)
							q->fail = -EBADMSG;
						q->zdone = r == 0;
					}
				}
			} else if (!q->fail && dmar_batch_parser_feed(q->parser, data, *data_size, NULL) < 0)
				q->fail = -EBADMSG;
		} else {
			if (q->len + *data_size > q->cap) {
				q->cap = (q->len + *data_size) * 2;
				q->body = realloc(q->body, q->cap);
			}
			memcpy(q->body + q->len, data, *data_size);
			q->len += *data_size;
		}
		*data_size = 0;
		return MHD_YES;
	}
	return fake_route(con, url, method, q);
}

static void fake_completed(void *cls, struct MHD_Connection *con, void **con_cls,
			   enum MHD_RequestTerminationCode toe)
{
	struct freq *q = *con_cls;
	if (!q)
		return;
	free(q->body);
	dmar_batch_parser_free(q->parser);
	ZSTD_freeDCtx(q->dz);
	ZSTD_freeDCtx(q->bz);
	free(q->scratch);
	json_decref(q->bad);
	free(q);
	*con_cls = NULL;
}

static int fake_start(void **state)
{
	F = calloc(1, sizeof(*F));
	pthread_mutex_init(&F->lock, NULL);
	table_init(&F->store);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	F->d = MHD_start_daemon(MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
					MHD_USE_ERROR_LOG,
				0, NULL, NULL, fake_handler, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				MHD_OPTION_NOTIFY_COMPLETED, fake_completed, NULL,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(1u << 20), MHD_OPTION_END);
	assert_non_null(F->d);
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(F->d, MHD_DAEMON_INFO_BIND_PORT);
	F->port = info->port;
	*state = F;
	return 0;
}

static int fake_stop(void **state)
{
	MHD_stop_daemon(F->d);
	for (size_t i = 0; i < F->nfiles; i++)
		free(F->files[i].recipe);
	table_free(&F->store, true);
	pthread_mutex_destroy(&F->lock);
	free(F);
	F = NULL;
	return 0;
}

/* ---- the client side ------------------------------------------------------- */

static struct dmar_client *client_for(uint16_t port, const char *token, unsigned streams)
{
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
	struct dmar_client_opts o = { .name = "b", .url = url, .token = token, .streams = streams };
	struct dmar_client *c = NULL;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_new(&c, &o, &err), 0);
	return c;
}

/* The file to push: its chunks in a table, their recipe. */
struct tfile {
	struct table chunks;
	struct dmar_recipe r;
	atomic_long gets, puts;
	bool tried; /* src_get says every chunk was tried and kept raw */
};

/* n chunks of 8..136 KiB, one in every `compressible` of them text-like
 * (0: none); the recipe shows each chunk once, then the first few again
 * (duplicates must travel once), partly (a skip), and a hole. */
/* n chunks of 8-136 KiB: text-like ones (every compressible-th, and all
 * from text_from on), random ones, then copies and a hole. */
/* n chunks: every compressible-th (0: none) and those from text_from on
 * text-like, the others random, or with float_width a float tensor
 * (fill_floats) */
static void tfile_make_ex(struct tfile *f, size_t n, unsigned compressible, size_t text_from, unsigned float_width,
			  uint64_t seed)
{
	memset(f, 0, sizeof(*f));
	table_init(&f->chunks);
	uint64_t s = seed;
	size_t dup = n < 4 ? n : 4;
	f->r.e = calloc(n + dup + 1, sizeof(*f->r.e));
	uint8_t *buf = malloc(DMAR_WIRE_CHUNK_MAX);
	for (size_t i = 0; i < n; i++) {
		uint32_t len = (uint32_t)(8192 + xorshift64(&s) % (128 << 10));
		bool text = (compressible && i % compressible == 0) || i >= text_from;
		if (text) {
			static const char words[] = "the quick brown fox jumps over the lazy dog ";
			for (uint32_t k = 0; k < len; k++)
				buf[k] = (uint8_t)words[(k + i) % (sizeof(words) - 1)];
			buf[0] = (uint8_t)i; /* distinct ids */
			buf[1] = (uint8_t)(i >> 8);
		} else if (float_width) {
			fill_floats(buf, len, float_width, xorshift64(&s));
		} else {
			fill_random(buf, len, xorshift64(&s));
		}
		struct dmar_id id;
		dmar_hash(buf, len, &id);
		table_add(&f->chunks, &id, buf, len)->compressible = text || float_width;
		f->r.e[f->r.n++] = (struct dmar_recipe_entry){ .id = id, .len = len, .kind = DMAR_RECIPE_CHUNK };
	}
	for (size_t i = 0; i < dup; i++) {
		struct dmar_recipe_entry e = f->r.e[i];
		e.skip = 100;
		e.len -= 100;
		f->r.e[f->r.n++] = e;
	}
	f->r.e[f->r.n++] = (struct dmar_recipe_entry){ .len = 5000, .kind = DMAR_RECIPE_HOLE };
	for (size_t i = 0; i < f->r.n; i++)
		f->r.size += f->r.e[i].len;
	f->r.mode = 0644;
	f->r.mtime_sec = 1700000000;
	free(buf);
}

static void tfile_make(struct tfile *f, size_t n, unsigned compressible, uint64_t seed)
{
	tfile_make_ex(f, n, compressible, SIZE_MAX, 0, seed);
}

static void tfile_free(struct tfile *f)
{
	table_free(&f->chunks, true);
	dmar_recipe_free(&f->r);
}

/* Give the fake node some of the file's chunks: every k-th (k = 1: all). */
static void fake_preload(struct tfile *f, size_t k)
{
	for (size_t i = 0; i < f->chunks.n; i += k) {
		struct tchunk *c = &f->chunks.c[i];
		table_add(&F->store, &c->id, c->data, c->len)->compressible = c->compressible;
	}
}

static int src_get(void *ctx, const struct dmar_id *id, uint32_t len, struct dmar_wire_chunk *c)
{
	struct tfile *f = ctx;
	struct tchunk *t = table_find(&f->chunks, id);
	if (!t)
		return -ENOENT;
	assert_true(len <= t->len); /* the hint is a lower bound */
	atomic_fetch_add(&f->gets, 1);
	*c = (struct dmar_wire_chunk){ .id = *id, .enc = DMAR_WIRE_RAW, .len = t->len, .stored = t->len,
				       .payload = t->data, .tried = f->tried };
	return 0;
}

static void src_put(void *ctx, struct dmar_wire_chunk *c)
{
	struct tfile *f = ctx;
	atomic_fetch_add(&f->puts, 1);
}

static int push(struct dmar_client *c, struct tfile *f, const char *path, struct dmar_xfer_stats *st,
		struct dmar_error *err)
{
	struct dmar_chunk_source src = { src_get, src_put, f };
	return dmar_client_push(c, path, &f->r, NULL, &src, NULL, NULL, NULL, st, err);
}

/* A push that must succeed: on failure, say why before the assert fires. */
static void push_ok(struct dmar_client *c, struct tfile *f, const char *path, struct dmar_xfer_stats *st)
{
	struct dmar_error err = { 0 };
	int r = push(c, f, path, st, &err);
	if (r < 0)
		print_message("push %s: %s (fake: %lu queries, %lu uploads, %lu chunks, %zu held, %lu commits)\n",
			      path, err.msg, F->n_query, F->n_upload, F->rx_chunks, F->store.n, F->n_commit);
	assert_int_equal(r, 0);
}

static uint64_t tfile_bytes(const struct tfile *f)
{
	uint64_t b = 0;
	for (size_t i = 0; i < f->chunks.n; i++)
		b += f->chunks.c[i].len;
	return b;
}

/* Every chunk of f is on the fake, byte for byte. */
static void assert_fake_has(const struct tfile *f)
{
	for (size_t i = 0; i < f->chunks.n; i++) {
		struct tchunk *have = table_find(&F->store, &f->chunks.c[i].id);
		assert_non_null(have);
		assert_int_equal(have->len, f->chunks.c[i].len);
		assert_memory_equal(have->data, f->chunks.c[i].data, have->len);
	}
}

/* ---- push ---------------------------------------------------------------- */

static void test_push_new(void **state)
{
	struct tfile f;
	tfile_make(&f, 80, 5, 1);
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	struct dmar_error err = { 0 };
	push_ok(c, &f, "dir/new file%.bin", &st);

	assert_int_equal(st.chunks, 80);
	assert_int_equal(st.sent_chunks, 80);
	assert_int_equal(st.chunk_bytes, tfile_bytes(&f));
	assert_int_equal(st.logical, f.r.size);
	assert_true(st.wire_bytes > 0);
	assert_int_equal(st.round_trips, 3); /* query, one upload round, commit */
	/* The fake got each distinct chunk once, all verified; the text-like
	 * ones went zstd, the random ones raw. */
	assert_int_equal(F->rx_chunks, 80);
	assert_int_equal(F->rx_bad, 0);
	assert_int_equal(F->rx_zstd, 16);
	assert_true(st.wire_bytes < tfile_bytes(&f));
	assert_fake_has(&f);
	assert_int_equal(f.gets, f.puts);

	/* The file is there under its (percent-decoded) name, and its recipe
	 * comes back as sent. */
	json_t *s = NULL;
	assert_int_equal(dmar_client_stat(c, "dir/new file%.bin", &s, &err), 0);
	assert_int_equal(json_integer_value(json_object_get(s, "size")), f.r.size);
	json_decref(s);
	struct dmar_recipe back;
	assert_int_equal(dmar_client_recipe(c, "dir/new file%.bin", &back, &err), 0);
	assert_int_equal(back.n, f.r.n);
	assert_memory_equal(back.e, f.r.e, f.r.n * sizeof(*f.r.e));
	dmar_recipe_free(&back);

	dmar_client_free(c);
	tfile_free(&f);
}

/* Chunks their source already tried to compress (an encode=zstd arena
 * keeps them raw only when zstd saved under 1/16) never go in the plain
 * form, text-like ones neither: the push does not probe that form again
 * (only the grouped ones, which the source does not try). */
static void test_push_tried(void **state)
{
	struct tfile f;
	tfile_make(&f, 80, 5, 1);
	f.tried = true;
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "tried", &st);
	assert_int_equal(st.sent_chunks, 80);
	assert_int_equal(F->rx_chunks, 80);
	assert_int_equal(F->rx_zstd, 0);
	assert_int_equal(F->rx_zbatches, 0);
	if (F->rx_grouped == 0)
		assert_true(st.wire_bytes > tfile_bytes(&f));
	assert_fake_has(&f);
	dmar_client_free(c);
	tfile_free(&f);
}

/* bf16 and fp32 tensors go byte-grouped, chunk by chunk (never in a
 * whole-batch stream, which would see them ungrouped), and the wire is
 * smaller than the plain form makes it (zstd -1 alone: ~0.78 of bf16). */
static void test_push_floats(void **state)
{
	for (unsigned w = 2; w <= 4; w *= 2) {
		unsigned long chunks0 = F->rx_chunks, grouped0 = F->rx_grouped, zb0 = F->rx_zbatches;
		struct tfile f;
		tfile_make_ex(&f, 30, 0, SIZE_MAX, w, 40 + w);
		struct dmar_client *c = client_for(F->port, NULL, 2);
		struct dmar_xfer_stats st;
		push_ok(c, &f, w == 2 ? "bf16" : "fp32", &st);
		print_message("width %u: %" PRIu64 " bytes, wire %" PRIu64 "\n", w, tfile_bytes(&f), st.wire_bytes);
		assert_int_equal(F->rx_chunks - chunks0, 30);
		assert_int_equal(F->rx_grouped - grouped0, 30);
		assert_int_equal(F->rx_zbatches - zb0, 0);
		if (w == 2)
			assert_true(st.wire_bytes < tfile_bytes(&f) * 3 / 4);
		else
			assert_true(st.wire_bytes < tfile_bytes(&f) * 15 / 16);
		assert_fake_has(&f);
		dmar_client_free(c);
		tfile_free(&f);
	}
}

/* A long run of random chunks is probed only now and then (stream_probe):
 * the first text chunks after it go raw unprobed, and the text is still
 * found: at most 7 of its chunks go raw. */
static void test_push_probe_run(void **state)
{
	struct tfile f;
	tfile_make_ex(&f, 120, 0, 60, 0, 23);
	uint64_t random_bytes = 0, text_bytes = 0;
	for (size_t i = 0; i < 120; i++)
		*(i < 60 ? &random_bytes : &text_bytes) += f.r.e[i].len;
	struct dmar_client *c = client_for(F->port, NULL, 1);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "runs", &st);
	assert_int_equal(st.sent_chunks, 120);
	assert_int_equal(F->rx_chunks, 120);
	assert_int_equal(F->rx_bad, 0);
	/* The requests' overhead alone is about 13 KB; with this seed three
	 * text chunks go raw (330 KB), with every chunk probed none would. */
	assert_true(st.wire_bytes > random_bytes + (64u << 10));
	/* 7 raw text chunks are 7 x 136 KiB at most; the rest shrinks to a
	 * few hundred bytes each, and the requests' overhead is far under
	 * 64 KiB. */
	assert_true(text_bytes > 60 * 8192);
	assert_true(st.wire_bytes < random_bytes + 7 * (136u << 10) + (64u << 10));
	assert_fake_has(&f);
	assert_int_equal(f.gets, f.puts);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_only_missing(void **state)
{
	struct tfile f;
	tfile_make(&f, 60, 0, 2);
	fake_preload(&f, 3); /* the peer has every third chunk */
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "f", &st);
	assert_int_equal(st.chunks, 60);
	assert_int_equal(st.sent_chunks, 40);
	assert_int_equal(F->rx_chunks, 40);
	assert_int_equal(F->n_query, 0); /* commit first: its 409 listed all 40 */
	assert_int_equal(F->n_commit, 2);
	assert_fake_has(&f);
	dmar_client_free(c);
	tfile_free(&f);
}

/* f with chunks at the given entries replaced by new random ones: a new
 * version of it, as a chunker would cut one with those regions rewritten. */
static void tfile_rewrite(struct tfile *v2, const struct tfile *f, const size_t *at, size_t nat, uint64_t seed)
{
	memset(v2, 0, sizeof(*v2));
	table_init(&v2->chunks);
	for (size_t i = 0; i < f->chunks.n; i++)
		table_add(&v2->chunks, &f->chunks.c[i].id, f->chunks.c[i].data, f->chunks.c[i].len);
	v2->r = f->r;
	v2->r.e = malloc(f->r.n * sizeof(*f->r.e));
	memcpy(v2->r.e, f->r.e, f->r.n * sizeof(*f->r.e));
	uint8_t buf[8192];
	uint64_t s = seed;
	for (size_t k = 0; k < nat; k++) {
		fill_random(buf, sizeof(buf), xorshift64(&s));
		struct dmar_recipe_entry *e = &v2->r.e[at[k]];
		v2->r.size += sizeof(buf) - e->len;
		dmar_hash(buf, sizeof(buf), &e->id);
		e->len = sizeof(buf);
		table_add(&v2->chunks, &e->id, buf, sizeof(buf));
	}
}

/* A new version of a file this client shipped: its new chunks go before
 * the commit, which is the only other round trip; a peer that dropped
 * some of the rest meanwhile refuses, and gets them too. */
static void test_push_new_version(void **state)
{
	struct tfile f, v2, v3;
	tfile_make(&f, 60, 0, 31);
	static const size_t at[] = { 7, 20, 33, 50 };
	tfile_rewrite(&v2, &f, at, 4, 32);
	tfile_rewrite(&v3, &v2, at + 1, 2, 33);
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "ckpt", &st);
	assert_int_equal(st.predicted_chunks, 0); /* nothing known of the peer yet */

	unsigned long commits = F->n_commit;
	push_ok(c, &v2, "ckpt", &st);
	assert_int_equal(st.predicted_chunks, 4);
	assert_int_equal(st.sent_chunks, 4);
	assert_int_equal(st.round_trips, 2); /* the upload, the commit */
	assert_int_equal(F->n_commit - commits, 1);
	assert_int_equal(F->n_query, 0);
	assert_fake_has(&v2);

	/* The peer dropped 3 chunks it held: the commit's refusal says so. */
	for (size_t i = 0; i < 3; i++)
		table_remove(&F->store, &v3.r.e[i].id);
	commits = F->n_commit;
	push_ok(c, &v3, "ckpt", &st);
	assert_int_equal(st.predicted_chunks, 2);
	assert_int_equal(st.sent_chunks, 5);
	assert_int_equal(F->n_commit - commits, 2);
	assert_fake_has(&v3);

	/* Another client knows nothing of the peer: it asks first. */
	struct dmar_client *c2 = client_for(F->port, NULL, 2);
	push_ok(c2, &v2, "ckpt2", &st);
	assert_int_equal(st.predicted_chunks, 0);
	assert_int_equal(st.sent_chunks, 0); /* the fake keeps every chunk */
	assert_int_equal(st.round_trips, 1);
	dmar_client_free(c2);
	dmar_client_free(c);
	tfile_free(&v3);
	tfile_free(&v2);
	tfile_free(&f);
}

/* More batches than streams: each stream sends several, one after another. */
static void test_push_many_batches(void **state)
{
	struct tfile f;
	tfile_make(&f, 600, 0, 15);
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "many", &st);
	assert_int_equal(st.sent_chunks, 600);
	assert_int_equal(F->rx_chunks, 600);
	assert_int_equal(F->upload_mixed, 0); /* every batch: the transfer's one upload id */
	assert_true(F->upload_id != 0);
	/* about 8 MiB a batch: at least 5 for 40+ MiB, so 3+ rounds on 2 streams */
	assert_true(F->n_upload >= 5);
	assert_true(st.round_trips >= 2 + (F->n_upload + 1) / 2);
	assert_true(st.round_trips <= 2 + F->n_upload);
	assert_fake_has(&f);
	assert_int_equal(f.gets, f.puts);
	dmar_client_free(c);
	tfile_free(&f);
}

/* A compressible file: its batches go as one zstd stream each
 * (Content-Encoding: zstd) with raw records inside, far smaller than the
 * chunks. */
static void test_push_compressible(void **state)
{
	struct tfile f;
	tfile_make(&f, 300, 1, 17);
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "text", &st);
	assert_int_equal(st.sent_chunks, 300);
	assert_int_equal(F->rx_chunks, 300);
	assert_int_equal(F->rx_bad, 0);
	assert_int_equal(F->rx_zstd, 0);
	assert_true(F->rx_zbatches >= 2);
	assert_int_equal(F->rx_zbatches, F->n_upload);
	assert_true(F->rx_zbytes < tfile_bytes(&f) / 20);
	assert_true(st.wire_bytes < tfile_bytes(&f) / 20);
	assert_fake_has(&f);
	assert_int_equal(f.gets, f.puts);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_nothing_missing(void **state)
{
	struct tfile f;
	tfile_make(&f, 30, 0, 3);
	fake_preload(&f, 1);
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "copy", &st);
	assert_int_equal(st.sent_chunks, 0);
	assert_int_equal(st.chunk_bytes, 0);
	assert_int_equal(st.round_trips, 1); /* the commit alone */
	assert_int_equal(F->n_short, 1);   /* as a short recipe */
	assert_int_equal(F->n_query, 0);
	assert_int_equal(F->n_upload, 0);
	assert_int_equal(F->rx_chunks, 0);
	assert_int_equal(f.gets, 0);
	assert_true(st.wire_bytes < 8192); /* a recipe, a small answer */
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_reject_once(void **state)
{
	struct tfile f;
	tfile_make(&f, 20, 0, 4);
	F->reject_one_once = true;
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "f", &st);
	assert_int_equal(st.sent_chunks, 20);
	assert_int_equal(F->rx_chunks, 21); /* the rejected one came twice */
	assert_int_equal(F->n_upload, 2);
	assert_int_equal(st.round_trips, 4); /* commit (refused), upload, re-send, commit */
	assert_fake_has(&f);
	assert_int_equal(f.gets, f.puts);
	assert_int_equal(f.gets, 21);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_commit_409(void **state)
{
	struct tfile f;
	tfile_make(&f, 20, 0, 5);
	F->drop_on_commit = 3;
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "f", &st);
	assert_int_equal(F->n_commit, 3); /* refused, then 3 dropped, then made */
	assert_int_equal(F->n_query, 0); /* the lists were complete: no query */
	assert_int_equal(F->rx_chunks, 23);
	assert_int_equal(st.sent_chunks, 23);
	assert_fake_has(&f);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_commit_409_truncated(void **state)
{
	struct tfile f;
	tfile_make(&f, 20, 0, 6);
	F->drop_on_commit = 5;
	F->missing_cap = 2; /* lists 2 of 5: the client must ask again */
	/* A node from before short recipes: it answers 415, and then full
	 * recipes get id lists. */
	F->no_short = true;
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "f", &st);
	assert_int_equal(F->n_415, 1);
	assert_int_equal(F->n_short, 0);
	assert_int_equal(F->n_commit, 3);
	assert_int_equal(F->n_query, 2); /* both 409s listed only 2 */
	assert_int_equal(F->rx_chunks, 25);
	assert_fake_has(&f);
	/* The client remembers: the next push sends no short recipe. */
	push_ok(c, &f, "g", &st);
	assert_int_equal(F->n_415, 1);
	assert_int_equal(F->n_commit, 4);
	dmar_client_free(c);
	tfile_free(&f);
}

/* A held chunk shares the first 8 id bytes of one of the file's: the short
 * commit is answered "resend": "full", and the full recipe commits; the
 * file is the one sent, not the twin. */
static void test_push_short_ambiguous(void **state)
{
	struct tfile f;
	tfile_make(&f, 20, 0, 8);
	fake_preload(&f, 1);
	struct dmar_id twin = f.chunks.c[4].id;
	twin.b[31] ^= 0x40;
	pthread_mutex_lock(&F->lock);
	table_add(&F->store, &twin, (const uint8_t *)"twin", 4);
	pthread_mutex_unlock(&F->lock);
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	push_ok(c, &f, "amb", &st);
	assert_int_equal(F->n_short, 1);
	assert_int_equal(F->n_commit, 2); /* short (ambiguous), full */
	assert_int_equal(st.round_trips, 2);
	assert_int_equal(st.sent_chunks, 0);
	struct ffile *ff = file_find("amb");
	assert_non_null(ff);
	struct dmar_recipe back;
	assert_int_equal(dmar_recipe_parse(ff->recipe, ff->len, &back, NULL), 0);
	assert_int_equal(back.n, f.r.n);
	assert_memory_equal(back.e, f.r.e, f.r.n * sizeof(*f.r.e));
	dmar_recipe_free(&back);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_enospc(void **state)
{
	struct tfile f;
	tfile_make(&f, 20, 0, 7);
	F->enospc = true;
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	struct dmar_error err = { 0 };
	assert_int_equal(push(c, &f, "full", &st, &err), -ENOSPC);
	assert_non_null(strstr(err.msg, "fake arena full"));
	assert_non_null(strstr(err.msg, "peer b"));
	assert_int_equal(F->n_commit, 1); /* the first one, refused: the upload failed after it */
	assert_int_equal(f.gets, f.puts);
	json_t *s = NULL;
	struct dmar_error e2 = { 0 };
	assert_int_equal(dmar_client_stat(c, "full", &s, &e2), -ENOENT);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_push_noreplace(void **state)
{
	struct tfile f;
	tfile_make(&f, 5, 0, 8);
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_chunk_source src = { src_get, src_put, &f };
	struct dmar_error err = { 0 };
	struct dmar_push_opts nr = { .flags = DMAR_PUSH_NOREPLACE };
	assert_int_equal(dmar_client_push(c, "x", &f.r, NULL, &src, &nr, NULL, NULL, NULL, &err), 0);
	assert_int_equal(dmar_client_push(c, "x", &f.r, NULL, &src, &nr, NULL, NULL, NULL, &err), -EEXIST);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_push(c, "x", &f.r, NULL, &src, NULL, NULL, NULL, NULL, &err), 0);
	dmar_client_free(c);
	tfile_free(&f);
}

/* ---- errors ----------------------------------------------------------------- */

/* ---- broadcast chains (net/relay.h) --------------------------------------- */

/* A port nobody listens on: bind one, learn it, close it. */
static uint16_t dead_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	socklen_t sl = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	close(fd);
	return ntohs(sa.sin_port);
}

/* b and d are the fake, x is nobody, "ghost" has no client. */
struct chain_peers {
	struct dmar_client *fake, *dead;
	unsigned asked;
};

static struct dmar_client *chain_peer(void *ctx, const char *name)
{
	struct chain_peers *p = ctx;
	p->asked++;
	if (!strcmp(name, "b") || !strcmp(name, "d"))
		return p->fake;
	return !strcmp(name, "x") ? p->dead : NULL;
}

/*
 * The fake does not relay (it ignores X-Dmar-Relay, as a node from before
 * broadcasts would): the chain goes on from here to every node after it.
 * A node that cannot be reached, or is unknown, fails alone, and the
 * error names each; the others get the file.
 */
static void test_chain_push(void **state)
{
	(void)state;
	struct tfile f;
	tfile_make(&f, 12, 0, 21);
	struct chain_peers p = { .fake = client_for(F->port, NULL, 2), .dead = client_for(dead_port(), NULL, 2) };
	struct dmar_chunk_source src = { src_get, src_put, &f };
	struct dmar_hops h;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_hops_parse("b,x,ghost,d", &h, &err), 0);
	json_t *res = NULL;
	struct dmar_xfer_stats st;
	int r = dmar_chain_push(&h, chain_peer, &p, "me", "bc", &f.r, NULL, &src, NULL, NULL, NULL, &res, &st, &err);
	assert_int_equal(r, -ECONNREFUSED);
	assert_non_null(strstr(err.msg, "2 of 4 nodes failed: x: peer b (http://127.0.0.1:"));
	assert_non_null(strstr(err.msg, "; ghost: no peer named ghost"));
	assert_int_equal(json_array_size(res), 4);
	static const struct {
		const char *node;
		bool ok;
		const char *errno_name;
	} want[] = { { "b", true, NULL }, { "x", false, "ECONNREFUSED" }, { "ghost", false, "ENOENT" }, { "d", true, NULL } };
	for (size_t i = 0; i < 4; i++) {
		json_t *v = json_array_get(res, i);
		assert_string_equal(json_string_value(json_object_get(v, "node")), want[i].node);
		assert_int_equal(json_is_true(json_object_get(v, "ok")), want[i].ok);
		if (want[i].ok) {
			assert_string_equal(json_string_value(json_object_get(v, "from")), "me");
			assert_true(json_integer_value(json_object_get(v, "wire_bytes")) > 0);
		} else {
			assert_string_equal(json_string_value(json_object_get(v, "errno")), want[i].errno_name);
			assert_non_null(json_string_value(json_object_get(v, "error")));
		}
	}
	/* b got every chunk once; d (the same fake) had them all: st is b's */
	assert_fake_has(&f);
	assert_int_equal(st.sent_chunks, f.chunks.n);
	assert_non_null(file_find("bc"));
	json_decref(res);

	/* every node there: 0, and no failure in the results */
	assert_int_equal(dmar_hops_parse("b,d", &h, &err), 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_chain_push(&h, chain_peer, &p, NULL, "bc2", &f.r, NULL, &src, NULL, NULL, NULL, &res,
					 NULL, &err), 0);
	assert_int_equal(json_array_size(res), 2);
	assert_true(json_is_true(json_object_get(json_array_get(res, 1), "ok")));
	json_decref(res);
	dmar_client_free(p.fake);
	dmar_client_free(p.dead);
	tfile_free(&f);
}

/* dmar_client_send: what the peer lacks goes, tagged, and no commit. */
static void test_send_chunks(void **state)
{
	(void)state;
	struct tfile f;
	tfile_make(&f, 20, 0, 22);
	fake_preload(&f, 2); /* every other chunk there */
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_chunk_source src = { src_get, src_put, &f };
	struct dmar_id *ids = malloc(f.chunks.n * sizeof(*ids));
	uint32_t *lens = malloc(f.chunks.n * sizeof(*lens));
	for (size_t i = 0; i < f.chunks.n; i++) {
		ids[i] = f.chunks.c[i].id;
		lens[i] = f.chunks.c[i].len;
	}
	struct dmar_push_opts o = { .upload = 0x1234, .relay = "c,d" };
	struct dmar_xfer_stats st;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_send(c, ids, lens, f.chunks.n, &src, &o, &st, &err), 0);
	assert_fake_has(&f);
	assert_int_equal(st.sent_chunks, f.chunks.n / 2);
	assert_int_equal(F->n_commit, 0);
	assert_true(F->upload_id == 0x1234);
	assert_int_equal(F->upload_mixed, 0);
	/* again: nothing missing, nothing sent */
	assert_int_equal(dmar_client_send(c, ids, NULL, f.chunks.n, &src, NULL, &st, &err), 0);
	assert_int_equal(st.sent_chunks, 0);
	free(ids);
	free(lens);
	dmar_client_free(c);
	tfile_free(&f);
}

static void test_token(void **state)
{
	F->token = "s3cret";
	struct dmar_client *bad = client_for(F->port, "wrong", 1);
	struct dmar_client *none = client_for(F->port, NULL, 1);
	struct dmar_client *good = client_for(F->port, "s3cret", 1);
	json_t *j = NULL;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_info(bad, &j, &err), -EKEYREJECTED);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_info(none, &j, &err), -EKEYREJECTED);
	struct tfile f;
	tfile_make(&f, 3, 0, 9);
	memset(&err, 0, sizeof(err));
	assert_int_equal(push(bad, &f, "f", NULL, &err), -EKEYREJECTED);
	assert_int_equal(F->rx_chunks, 0);
	assert_int_equal(dmar_client_info(good, &j, &err), 0);
	assert_string_equal(json_string_value(json_object_get(j, "name")), "fake");
	json_decref(j);
	push_ok(good, &f, "f", NULL);
	tfile_free(&f);
	dmar_client_free(bad);
	dmar_client_free(none);
	dmar_client_free(good);
}

static void test_refused(void **state)
{
	struct dmar_client *c = client_for(dead_port(), NULL, 4);
	json_t *j = NULL;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_info(c, &j, &err), -ECONNREFUSED);
	assert_non_null(strstr(err.msg, "peer b (http://127.0.0.1:"));
	assert_non_null(strstr(err.msg, "connection refused"));
	struct tfile f;
	tfile_make(&f, 3, 0, 10);
	struct dmar_xfer_stats st;
	memset(&err, 0, sizeof(err));
	assert_int_equal(push(c, &f, "f", &st, &err), -ECONNREFUSED);
	struct dmar_id id = f.chunks.c[0].id;
	struct dmar_chunk_sink sink = { NULL, NULL };
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_pull(c, &id, 1, &sink, NULL, NULL, NULL, &err), -ECONNREFUSED);
	tfile_free(&f);
	dmar_client_free(c);
}

static void test_simple_calls(void **state)
{
	struct dmar_client *c = client_for(F->port, NULL, 1);
	struct dmar_error err = { 0 };
	json_t *j = NULL;
	assert_int_equal(dmar_client_mkdir(c, "d ir", 0750, &err), 0);
	assert_int_equal(dmar_client_mkdir(c, "d ir", 0750, &err), -EEXIST);
	memset(&err, 0, sizeof(err));
	struct tfile f;
	tfile_make(&f, 2, 0, 11);
	push_ok(c, &f, "d ir/a", NULL);
	assert_int_equal(dmar_client_stat(c, "d ir", &j, &err), 0);
	assert_string_equal(json_string_value(json_object_get(j, "type")), "dir");
	assert_int_equal(json_integer_value(json_object_get(j, "mode")), 0750);
	json_t *ents = json_object_get(j, "entries");
	assert_int_equal(json_array_size(ents), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(ents, 0), "name")), "a");
	json_decref(j);
	assert_int_equal(dmar_client_remove(c, "d ir/a", &err), 0);
	assert_int_equal(dmar_client_remove(c, "d ir/a", &err), -ENOENT);
	assert_non_null(strstr(err.msg, "no such file"));
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_stat(c, "../etc", &j, &err), -EINVAL);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_transfer(c, "d ir", "c", "dst", &j, &err), 0);
	assert_string_equal(json_string_value(json_object_get(j, "to")), "c");
	json_decref(j);
	/* query flags, in order */
	fake_preload(&f, 2); /* chunk 0 only */
	struct dmar_id ids[2] = { f.chunks.c[0].id, f.chunks.c[1].id };
	uint8_t missing[2] = { 9, 9 };
	table_remove(&F->store, &ids[1]);
	assert_int_equal(dmar_client_query(c, ids, 2, missing, &err), 0);
	assert_int_equal(missing[0], 0);
	assert_int_equal(missing[1], 1);
	/* commit of a recipe whose chunks are gone: -ENODATA and the list */
	table_remove(&F->store, &ids[0]);
	assert_int_equal(dmar_client_commit(c, "g", &f.r, false, &j, &err), -ENODATA);
	assert_int_equal(json_integer_value(json_object_get(j, "missing_count")), 2);
	json_decref(j);
	tfile_free(&f);
	dmar_client_free(c);
}

/* ---- pull ------------------------------------------------------------------- */

struct tsink {
	struct table got;
	pthread_mutex_t lock;
	unsigned long puts;
};

static void tsink_init(struct tsink *s)
{
	memset(s, 0, sizeof(*s));
	table_init(&s->got);
	pthread_mutex_init(&s->lock, NULL);
}

static void tsink_free(struct tsink *s)
{
	table_free(&s->got, true);
	pthread_mutex_destroy(&s->lock);
}

static int sink_put(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded)
{
	struct tsink *s = ctx;
	pthread_mutex_lock(&s->lock);
	table_add(&s->got, &c->id, decoded, c->len);
	s->puts++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static void test_pull(void **state)
{
	struct tfile f;
	tfile_make(&f, 600, 4, 12); /* three fetch batches, some zstd-encoded */
	fake_preload(&f, 1);
	F->zstd_fetch = true;
	struct dmar_client *c = client_for(F->port, NULL, 4);
	size_t n = f.chunks.n + 3;
	struct dmar_id *ids = malloc(n * sizeof(*ids));
	for (size_t i = 0; i < f.chunks.n; i++)
		ids[i] = f.chunks.c[i].id;
	for (size_t i = 0; i < 3; i++)
		ids[f.chunks.n + i] = f.chunks.c[i].id; /* asked twice, fetched once */
	struct tsink s;
	tsink_init(&s);
	struct dmar_chunk_sink sink = { sink_put, &s };
	struct dmar_xfer_stats st;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_pull(c, ids, n, &sink, NULL, NULL, &st, &err), 0);
	assert_int_equal(s.puts, 600);
	assert_int_equal(st.chunks, 600);
	assert_int_equal(st.sent_chunks, 600);
	assert_int_equal(st.chunk_bytes, tfile_bytes(&f));
	assert_int_equal(st.round_trips, 1); /* 3 batches over 4 streams */
	assert_int_equal(F->n_fetch, 3);
	for (size_t i = 0; i < f.chunks.n; i++) {
		struct tchunk *g = table_find(&s.got, &f.chunks.c[i].id);
		assert_non_null(g);
		assert_memory_equal(g->data, f.chunks.c[i].data, g->len);
	}
	free(ids);
	tsink_free(&s);
	tfile_free(&f);
	dmar_client_free(c);
}

/* A swarm pull's progress: the sum over its peers never goes back. */
struct swarm_seen {
	unsigned calls;
	uint64_t bytes;
	bool backwards;
};

static void swarm_progress(void *ctx, const struct dmar_xfer_stats *st)
{
	struct swarm_seen *s = ctx;
	if (st->chunk_bytes < s->bytes)
		s->backwards = true;
	s->bytes = st->chunk_bytes;
	s->calls++;
}

/* A swarm of three: b and c (the same fake, two clients) hold every
 * chunk and share the pull, its progress their sum; x cannot be reached
 * and is left out; a chunk nobody holds fails the pull, naming it. */
static void test_swarm_pull(void **state)
{
	(void)state;
	struct tfile f;
	tfile_make(&f, 300, 0, 23);
	fake_preload(&f, 1);
	struct dmar_swarm_peer sp[3] = {
		{ .c = client_for(F->port, NULL, 2), .name = "b" },
		{ .c = client_for(dead_port(), NULL, 2), .name = "x" },
		{ .c = client_for(F->port, NULL, 2), .name = "c" },
	};
	struct dmar_id *ids = malloc((f.chunks.n + 1) * sizeof(*ids));
	for (size_t i = 0; i < f.chunks.n; i++)
		ids[i] = f.chunks.c[i].id;
	struct tsink s;
	tsink_init(&s);
	struct dmar_chunk_sink sink = { sink_put, &s };
	struct dmar_xfer_stats st;
	struct dmar_error err = { 0 };
	struct swarm_seen seen = { 0 };
	assert_int_equal(dmar_swarm_pull(sp, 3, ids, f.chunks.n, &sink, swarm_progress, &seen, &st, &err), 0);
	assert_true(seen.calls >= 2); /* a batch of each of b and c at least */
	assert_false(seen.backwards);
	assert_true(seen.bytes <= tfile_bytes(&f));
	assert_int_equal(s.puts, 300);
	assert_int_equal(sp[0].chunks + sp[2].chunks, 300);
	assert_true(sp[0].chunks >= 100 && sp[2].chunks >= 100); /* shared, about evenly */
	assert_int_equal(sp[1].chunks, 0);
	assert_int_equal(sp[1].err, -ECONNREFUSED);
	assert_int_equal(st.chunk_bytes, tfile_bytes(&f));
	for (size_t i = 0; i < f.chunks.n; i++) {
		struct tchunk *g = table_find(&s.got, &f.chunks.c[i].id);
		assert_non_null(g);
		assert_memory_equal(g->data, f.chunks.c[i].data, g->len);
	}
	/* one chunk held by nobody */
	memset(&ids[f.chunks.n], 0x5a, sizeof(ids[0]));
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_swarm_pull(sp, 3, ids, f.chunks.n + 1, &sink, NULL, NULL, NULL, &err),
			 -ENOENT);
	assert_non_null(strstr(err.msg, "chunk 5a5a5a5a5a5a5a5a...: no peer left that holds it"));
	for (int k = 0; k < 3; k++)
		dmar_client_free(sp[k].c);
	free(ids);
	tsink_free(&s);
	tfile_free(&f);
}

static void test_pull_corrupt(void **state)
{
	struct tfile f;
	tfile_make(&f, 10, 0, 13);
	fake_preload(&f, 1);
	F->corrupt_fetch = true;
	struct dmar_client *c = client_for(F->port, NULL, 2);
	struct dmar_id ids[10];
	for (size_t i = 0; i < 10; i++)
		ids[i] = f.chunks.c[i].id;
	struct tsink s;
	tsink_init(&s);
	struct dmar_chunk_sink sink = { sink_put, &s };
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_client_pull(c, ids, 10, &sink, NULL, NULL, NULL, &err), -EILSEQ);
	assert_non_null(strstr(err.msg, "hash mismatch"));
	/* The bad chunk never reached the sink. */
	assert_null(table_find(&s.got, &ids[5]));
	assert_true(s.puts < 10);

	/* One it does not hold: -ENOENT, named. */
	F->corrupt_fetch = false;
	table_remove(&F->store, &ids[7]);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_client_pull(c, ids, 10, &sink, NULL, NULL, NULL, &err), -ENOENT);
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(ids[7].b, 32, hex);
	assert_non_null(strstr(err.msg, hex));
	tsink_free(&s);
	tfile_free(&f);
	dmar_client_free(c);
}

/* ---- throughput (printed, never asserted) ------------------------------------- */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* CPU seconds of the whole process (client and fake together). */
static double cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int count_put(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded)
{
	atomic_fetch_add((atomic_ulong *)ctx, 1);
	return 0;
}

/* The fake keeps no copies here (page faults on fresh memory would be most
 * of what is measured): uploads are verified and only their ids kept, and
 * the pull is served from the test file's own buffers. */
static void test_throughput(void **state)
{
	const char *env = getenv("DMAR_BENCH_MIB");
	size_t mib = env ? strtoul(env, NULL, 10) : 32;
	if (!mib)
		mib = 32;
	struct tfile f;
	tfile_make(&f, mib * 1024 / 72, 0, 14); /* the chunks average 72 KiB */
	struct dmar_client *c = client_for(F->port, NULL, 4);
	struct dmar_xfer_stats st;
	struct dmar_error err = { 0 };
	F->discard = true;
	double t0 = now(), c0 = cpu();
	push_ok(c, &f, "big", &st);
	double dt = now() - t0, dc = cpu() - c0;
	assert_int_equal(st.sent_chunks, f.chunks.n);
	assert_int_equal(F->rx_chunks, f.chunks.n);
	assert_int_equal(F->rx_bad, 0);
	assert_int_equal(F->rx_zstd, 0); /* random data goes raw */
	print_message("push: %.1f MiB of random chunks in %.3f s: %.0f MiB/s (%.2f Gbit/s on the wire), "
		      "%" PRIu64 " rounds, %.2f CPU s (client and fake)\n",
		      (double)st.chunk_bytes / (1 << 20), dt, (double)st.chunk_bytes / (1 << 20) / dt,
		      (double)st.wire_bytes * 8 / dt / 1e9, st.round_trips, dc);

	table_free(&F->store, true);
	table_init(&F->store);
	for (size_t i = 0; i < f.chunks.n; i++)
		table_put(&F->store, &f.chunks.c[i].id, f.chunks.c[i].data, f.chunks.c[i].len, true);
	struct dmar_id *ids = malloc(f.chunks.n * sizeof(*ids));
	for (size_t i = 0; i < f.chunks.n; i++)
		ids[i] = f.chunks.c[i].id;
	atomic_ulong puts = 0;
	struct dmar_chunk_sink sink = { count_put, &puts };
	t0 = now();
	c0 = cpu();
	assert_int_equal(dmar_client_pull(c, ids, f.chunks.n, &sink, NULL, NULL, &st, &err), 0);
	dt = now() - t0;
	dc = cpu() - c0;
	assert_int_equal(puts, f.chunks.n);
	print_message("pull: %.1f MiB in %.3f s: %.0f MiB/s (%.2f Gbit/s on the wire), %.2f CPU s\n",
		      (double)st.chunk_bytes / (1 << 20), dt, (double)st.chunk_bytes / (1 << 20) / dt,
		      (double)st.wire_bytes * 8 / dt / 1e9, dc);
	free(ids);
	tfile_free(&f);
	dmar_client_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_push_new, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_chain_push, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_swarm_pull, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_send_chunks, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_tried, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_floats, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_probe_run, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_only_missing, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_new_version, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_many_batches, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_compressible, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_nothing_missing, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_reject_once, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_commit_409, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_commit_409_truncated, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_short_ambiguous, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_enospc, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_push_noreplace, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_token, fake_start, fake_stop),
		cmocka_unit_test(test_refused),
		cmocka_unit_test_setup_teardown(test_simple_calls, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_pull, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_pull_corrupt, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(test_throughput, fake_start, fake_stop),
	};
	/* DMAR_TEST_FILTER=test_throughput runs just that one (a glob). */
	if (getenv("DMAR_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DMAR_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
