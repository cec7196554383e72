/* SPDX-License-Identifier: MIT */
/*
 * A node's REST API (server.h, docs/rest-api.md) on libmicrohttpd.
 *
 * Threads.  One thread per connection (MHD_USE_THREAD_PER_CONNECTION):
 * a chunk upload spends its time hashing and decompressing, and a
 * POST /v1/transfers blocks for the whole transfer, so a connection must
 * never hold up another -- with a fixed pool, one long transfer would
 * stall every connection sharing its thread.  A few parallel large
 * uploads then run on as many cores.  Websockets leave MHD after the
 * upgrade and are served by one event thread of ours (poll over all of
 * them), so dmar_server_event only appends to buffers and never blocks.
 *
 * A request's life.  First call of the access handler (headers only):
 * authenticate, route, decode and check the path, check Content-Length
 * against the limit.  Any failure is answered right there, so a refused
 * request never has its body read, let alone passed to the node.  Then
 * the body arrives in pieces: a chunk batch goes through the incremental
 * parser (each chunk verified and stored as soon as it is complete);
 * other bodies are buffered up to their limit.  An error found mid-body
 * (batch malformed, body over the limit, arena full) is remembered and
 * the rest of the body discarded -- at most one more limit's worth, then
 * the connection is dropped -- because MHD answers only before the body
 * or after it.  The last call runs the endpoint.
 *
 * Ordering and atomicity, as the node sees them.  Chunks of a batch reach
 * put_chunk in batch order, each only after it matched its id; a bad
 * chunk is skipped, not fatal, and put_chunk's failure stops the batch
 * (the chunks before it stay stored).  A commit is one ops->commit call
 * with a recipe that parsed completely: the node makes it atomic.
 * Nothing else orders requests: parallel connections run in parallel.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_c_format: magicless frames */
#include <zstd.h>

#include "admit.h"
#include "compress.h"
#include "server.h"
#include "ws.h"

/* Connections at once, each on its own thread (mostly asleep: an idle
 * one costs a stack's virtual memory, not CPU), and a per-address share.
 * Those that never finish a request are closed by the admission (admit.h)
 * long before these fill. */
#define CONNECTIONS_DEFAULT 1024
#define CONNECTIONS_PER_IP 256
#define JSON_BODY_MAX (1u << 20)
#define CONN_MEMORY (2u << 20)      /* MHD's per-connection buffer: bigger pieces of upload */
#define IDLE_TIMEOUT_S 60
#define WS_CLIENTS_MAX 64
#define WS_BACKLOG_MAX (1u << 20)   /* a slower client is dropped */
#define WS_FRAME_MAX 4096           /* what a client may send us: control frames, in practice */
#define WS_CLOSE_WAIT_MS 5000
#define FETCH_BLOCK (256u << 10)
#define PEM_MAX (1u << 20)
/* Content-Encoding: zstd on POST /v1/chunks: the body decodes through a
 * buffer of this size; at most BATCH_ZSTD_RATIO x the body limit decoded
 * (413 beyond: a decompression bomb costs no more than that), with a
 * window of at most 2^BATCH_ZSTD_WLOG bytes. */
#define BATCH_ZOUT (256u << 10)
#define BATCH_ZSTD_RATIO 4
#define BATCH_ZSTD_WLOG 23
/* Raw chunks of a batch verified together: a feed's worth (feed_later
 * makes a feed at least FEED_MIN bytes, some sixteen chunks of the default
 * 32 KiB average, up to half CONN_MEMORY), bounded so the group's array
 * stays small. */
#define VERIFY_GROUP 256

/* ---- the server and its websocket clients ------------------------------------ */

struct ws_client {
	struct ws_client *next;
	struct dmar_server *s;
	struct MHD_UpgradeResponseHandle *urh;
	int sock;
	struct dmar_ws_parser *parser; /* event thread only */
	/* protected by dmar_server.lock: */
	uint8_t *out;
	size_t out_len, out_off, out_cap;
	bool closing; /* a close frame is queued: close once flushed */
	bool dead;    /* close now */
	int64_t closing_since_ms;
};

struct dmar_server {
	struct MHD_Daemon *d;
	const struct dmar_node_ops *ops;
	void *ctx;
	bool has_token;
	struct dmar_id token_hash; /* compared, in constant time, with the hash of what a request carries */
	uint64_t max_body;
	uint16_t port;
	char *cert, *key; /* PEM text, kept for the daemon's life */

	pthread_t ev_thread;
	bool ev_started;
	int wake[2]; /* pipe: wakes the event thread */
	pthread_mutex_t lock;
	struct ws_client *clients; /* protected by lock; only the event thread frees */
	unsigned nclients;         /* protected by lock */
	bool stopping;             /* protected by lock */
	/* Served since the start, for GET /v1/node: what a client's
	 * transfer cost this end, counted here rather than believed. */
	atomic_uint_fast64_t requests;    /* every request that reached the handler */
	atomic_uint_fast64_t connections; /* every connection accepted (a TCP, and TLS, handshake each) */
	struct dmar_admit *admit;         /* which unauthenticated connections stay (admit.h) */
};

/* Per connection (MHD's socket context): the zstd state and scratch that
 * verifying a batch needs, made on first use and kept across requests. */
struct conn {
	ZSTD_DCtx *dctx;
	uint8_t *scratch; /* DMAR_WIRE_CHUNK_MAX bytes */
	/* a batch body with Content-Encoding: zstd */
	ZSTD_DCtx *bdctx;
	uint8_t *zout; /* BATCH_ZOUT bytes: what the stream decodes to, fed to the parser */
	struct dmar_admit_conn *adm; /* pending until a request head authenticates */
};

/* ---- requests ---------------------------------------------------------------- */

enum body_kind {
	BODY_NONE,  /* ignored (up to the limit) */
	BODY_JSON,  /* buffered, at most JSON_BODY_MAX */
	BODY_BUF,   /* buffered: recipe, id list */
	BODY_BATCH, /* parsed as it arrives */
};
enum match { MATCH_EXACT, MATCH_TREE, MATCH_ID };

#define CT_RECIPE "application/x-dmar-recipe"
#define CT_RECIPE_SHORT "application/x-dmar-recipe-short"
#define CT_IDS "application/octet-stream"
#define CT_CHUNKS "application/x-dmar-chunks"
#define CT_JSON "application/json"

struct req;
typedef enum MHD_Result (*handler_fn)(struct req *q);

struct route {
	const char *method;
	const char *prefix;
	enum match match;
	enum body_kind body;
	const char *ctype[2]; /* the Content-Types it takes (the first named in a 415), or none */
	handler_fn fn;
};

struct req {
	struct dmar_server *s;
	struct MHD_Connection *c;
	struct conn *conn;
	const struct route *rt;
	char *path;        /* decoded and checked (MATCH_TREE) */
	struct dmar_id id; /* MATCH_ID */
	bool answered;     /* a response is queued */

	uint64_t limit, seen; /* body bytes allowed and arrived */
	uint64_t clen;        /* Content-Length, or UINT64_MAX without one */
	size_t held;          /* body bytes left with MHD at the last call (see feed_later) */
	uint8_t *body;
	size_t len, cap;

	/* an error found while the body arrived, answered at its end */
	int fail;              /* negative errno, 0 if none */
	unsigned fail_status;  /* 0: dmar_wire_http_status(fail) */
	struct dmar_error err; /* also where ops write */

	/* POST /v1/chunks */
	struct dmar_batch_parser *bp;
	uint64_t upload;    /* X-Dmar-Upload, 0 if none */
	bool zstd;          /* Content-Encoding: zstd */
	bool zdone;         /* the zstd frame ended */
	uint64_t decoded;   /* its bytes decoded so far */
	uint64_t received, bytes;
	struct dmar_wire_chunk *group; /* VERIFY_GROUP raw chunks waiting to be verified together */
	bool *group_ok;
	size_t ngroup;
	json_t *bad;         /* ids that did not verify */
	uint64_t bad_count;
	char bad_msg[320];   /* the first one's message */

	char *hello; /* GET /v1/events: the first frame's text */
};

/* ---- answers ----------------------------------------------------------------- */

static enum MHD_Result queue(struct req *q, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	enum MHD_Result r = MHD_queue_response(q->c, status, resp);
	MHD_destroy_response(resp);
	q->answered = true;
	return r;
}

static struct MHD_Response *json_response(json_t *o)
{
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		return NULL;
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return NULL;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	return resp;
}

/* Answer o (stolen; NULL: out of memory). */
static enum MHD_Result reply_json(struct req *q, unsigned status, json_t *o)
{
	if (!o)
		return MHD_NO;
	return queue(q, status, json_response(o));
}

/*
 * Answer the error code with {"error": msg, "errno": NAME}, plus the
 * members of extra (stolen, may be NULL); status 0 means the one
 * dmar_wire_http_status gives; a header (name, value) may be added.
 */
static enum MHD_Result reply_error_full(struct req *q, int code, unsigned status, const char *msg, json_t *extra,
					const char *hname, const char *hvalue)
{
	if (code >= 0)
		code = -EIO;
	if (!status)
		status = (unsigned)dmar_wire_http_status(code);
	json_t *o = extra && json_is_object(extra) ? extra : json_object();
	if (o != extra)
		json_decref(extra);
	if (!o)
		return MHD_NO;
	json_object_set_new(o, "error", json_string(msg && *msg ? msg : strerror(-code)));
	json_object_set_new(o, "errno", json_string(dmar_wire_errno_name(code)));
	struct MHD_Response *resp = json_response(o);
	if (resp && hname)
		MHD_add_response_header(resp, hname, hvalue);
	return queue(q, status, resp);
}

static enum MHD_Result reply_error(struct req *q, int code, unsigned status, const char *msg)
{
	return reply_error_full(q, code, status, msg, NULL, NULL, NULL);
}

__attribute__((format(printf, 4, 5))) static enum MHD_Result reply_errorf(struct req *q, int code, unsigned status,
									  const char *fmt, ...)
{
	char msg[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return reply_error(q, code, status, msg);
}

/* The node's error: its code and message. */
static enum MHD_Result reply_ops_error(struct req *q, int code)
{
	return reply_error(q, code, 0, q->err.code ? q->err.msg : NULL);
}

/* Answer len bytes of buf (malloc'd, stolen) as ctype. */
static enum MHD_Result reply_bytes(struct req *q, unsigned status, const char *ctype, uint8_t *buf, size_t len)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, len ? buf : (void *)"",
								    len ? MHD_RESPMEM_MUST_FREE
									: MHD_RESPMEM_PERSISTENT);
	if (!resp || !len)
		free(buf);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	return queue(q, status, resp);
}

static enum MHD_Result reply_empty(struct req *q, unsigned status)
{
	return queue(q, status, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
}

/* ---- request helpers --------------------------------------------------------- */

static const char *header(struct req *q, const char *name)
{
	return MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, name);
}

/* Does the header's media type (before any ';' parameters) equal want? */
static bool media_type_is(const char *value, const char *want)
{
	if (!value)
		return false;
	size_t n = strlen(want);
	while (*value == ' ' || *value == '\t')
		value++;
	if (strncasecmp(value, want, n) != 0)
		return false;
	value += n;
	while (*value == ' ' || *value == '\t')
		value++;
	return *value == '\0' || *value == ';';
}

/* Does a comma-separated header list hold token (case-insensitive)? */
static bool header_has_token(const char *value, const char *token)
{
	size_t n = strlen(token);
	while (value && *value) {
		while (*value == ' ' || *value == '\t' || *value == ',')
			value++;
		const char *end = value;
		while (*end && *end != ',')
			end++;
		const char *e = end;
		while (e > value && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if ((size_t)(e - value) == n && strncasecmp(value, token, n) == 0)
			return true;
		value = end;
	}
	return false;
}

static bool authorized(struct req *q)
{
	if (!q->s->has_token)
		return true;
	const char *h = header(q, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	while (*h == ' ')
		h++;
	/* Hashing first makes the comparison constant-time in the length too. */
	struct dmar_id got;
	dmar_hash(h, strlen(h), &got);
	uint8_t diff = 0;
	for (size_t i = 0; i < DMAR_HASH_SIZE; i++)
		diff |= got.b[i] ^ q->s->token_hash.b[i];
	return diff == 0;
}


/*
 * The URL's path part after the route's prefix, percent-decoded once
 * (MHD is told not to: it would turn %00 into a NUL we could no longer
 * see), then checked by dmar_wire_path_check; a trailing '/' is dropped.
 */
static int decode_path(const char *raw, char **out, struct dmar_error *err)
{
	size_t n = strlen(raw);
	if (n > 3 * 4096)
		return dmar_error_set(err, -EINVAL, "path: longer than 4095 bytes");
	char *p = malloc(n + 1), *w = p;
	if (!p)
		return -ENOMEM;
	for (const char *r = raw; *r; r++) {
		if (*r != '%') {
			*w++ = *r;
			continue;
		}
		int hi = dmar_hexval(r[1]), lo = hi < 0 ? -1 : dmar_hexval(r[2]);
		if (hi < 0 || lo < 0) {
			free(p);
			return dmar_error_set(err, -EINVAL, "path: '%%' not followed by two hex digits");
		}
		if (hi == 0 && lo == 0) {
			free(p);
			return dmar_error_set(err, -EINVAL, "path: NUL byte (%%00)");
		}
		*w++ = (char)(hi << 4 | lo);
		r += 2;
	}
	*w = '\0';
	int r = dmar_wire_path_check(p, err);
	if (r < 0) {
		free(p);
		return r;
	}
	if (w > p && w[-1] == '/')
		w[-1] = '\0';
	*out = p;
	return 0;
}

/* MHD's unescaper, replaced by one that leaves the URL as it came. */
static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
	return strlen(s);
}

static json_t *parse_json_body(struct req *q)
{
	json_error_t je;
	json_t *o = json_loadb((const char *)q->body, q->len, JSON_REJECT_DUPLICATES, &je);
	if (!o) {
		reply_errorf(q, -EINVAL, 0, "JSON: %s (line %d, column %d)", je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		reply_error(q, -EINVAL, 0, "JSON: the body must be an object");
		return NULL;
	}
	return o;
}

/* The body as n ids: a positive multiple of 32 bytes. */
static bool id_list(struct req *q, size_t *n)
{
	if (q->len == 0 || q->len % DMAR_HASH_SIZE) {
		reply_errorf(q, -EINVAL, 0, "id list: %zu bytes is not a positive multiple of %d", q->len,
			     DMAR_HASH_SIZE);
		return false;
	}
	*n = q->len / DMAR_HASH_SIZE;
	return true;
}

static json_t *hex_id(const struct dmar_id *id)
{
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(id->b, DMAR_HASH_SIZE, hex);
	return json_string(hex);
}

/* ---- endpoints: namespace ---------------------------------------------------- */

/* GET /v1/node */
static enum MHD_Result h_node(struct req *q)
{
	json_t *o = NULL;
	int r = q->s->ops->info(q->s->ctx, &o, &q->err);
	if (r < 0)
		return reply_ops_error(q, r);
	if (!json_is_object(o)) {
		json_decref(o);
		return reply_error(q, -EIO, 0, "node: info gave no object");
	}
	json_object_set_new(o, "version", json_string(PACKAGE_VERSION));
	struct dmar_admit_stats as;
	dmar_admit_stats(q->s->admit, &as);
	json_object_set_new(o, "server",
			    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "requests", (json_int_t)atomic_load(&q->s->requests),
				      "connections", (json_int_t)atomic_load(&q->s->connections), "pending",
				      (json_int_t)as.pending, "trusted", (json_int_t)as.trusted, "closed_slow",
				      (json_int_t)as.expired, "closed_for_room", (json_int_t)as.evicted));
	return reply_json(q, MHD_HTTP_OK, o);
}

/* Answer an op's object (stolen), or its error. */
static enum MHD_Result reply_object(struct req *q, int r, unsigned status, json_t *o)
{
	if (r < 0) {
		json_decref(o);
		return reply_ops_error(q, r);
	}
	if (!json_is_object(o)) {
		json_decref(o);
		return reply_error(q, -EIO, 0, "node: the operation gave no object");
	}
	return reply_json(q, status, o);
}

/* GET /v1/files/PATH */
static enum MHD_Result h_stat(struct req *q)
{
	json_t *o = NULL;
	int r = q->s->ops->stat(q->s->ctx, q->path, &o, &q->err);
	return reply_object(q, r, MHD_HTTP_OK, o);
}

/* DELETE /v1/files/PATH */
static enum MHD_Result h_remove(struct req *q)
{
	int r = q->s->ops->remove(q->s->ctx, q->path, &q->err);
	return r < 0 ? reply_ops_error(q, r) : reply_empty(q, MHD_HTTP_NO_CONTENT);
}

/* PUT /v1/dirs/PATH, body {"mode": 493} or none */
static enum MHD_Result h_mkdir(struct req *q)
{
	uint32_t mode = 0755;
	if (q->len) {
		json_t *o = parse_json_body(q);
		if (!o)
			return q->answered ? MHD_YES : MHD_NO;
		json_t *m = json_object_get(o, "mode");
		if (m && (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 07777)) {
			json_decref(o);
			return reply_error(q, -EINVAL, 0, "mkdir: \"mode\" must be an integer 0..4095 (07777)");
		}
		if (m)
			mode = (uint32_t)json_integer_value(m);
		json_decref(o);
	}
	int r = q->s->ops->mkdir(q->s->ctx, q->path, mode, &q->err);
	if (r < 0)
		return reply_ops_error(q, r);
	/* The new directory's stat object, if it can be had. */
	json_t *st = NULL;
	struct dmar_error ignored = { 0 };
	if (q->s->ops->stat(q->s->ctx, q->path, &st, &ignored) < 0 || !json_is_object(st)) {
		json_decref(st);
		st = json_pack("{s:s, s:s, s:i}", "name", q->path, "type", "dir", "mode", (json_int_t)mode);
	}
	return reply_json(q, MHD_HTTP_CREATED, st);
}

/* The commit's 409 answer as a bitmap over the recipe's entries (bit i,
 * LSB first in byte i/8, hex: entry i's chunk is missing) in place of the
 * id list: a quarter of a hex digit an entry, where the list costs 66
 * bytes a missing chunk, so a sender that commits first (one round trip
 * for a file this node holds) pays little when it does not.  NULL (keep
 * the list) on failure. */
/* {"missing_count": count, "missing_bits": hex of the nb bytes of bits},
 * or NULL (ENOMEM). */
static json_t *bits_answer(const uint8_t *bits, size_t nb, json_int_t count)
{
	char *hex = malloc(2 * nb + 1);
	if (!hex)
		return NULL;
	dmar_hex(bits, nb, hex);
	json_t *o = json_pack("{s:I, s:s}", "missing_count", count, "missing_bits", hex);
	free(hex);
	return o;
}

static json_t *missing_bits(struct req *q, const struct dmar_recipe *rc, json_t *ans)
{
	size_t nb = (rc->n + 7) / 8, n;
	struct dmar_id *ids = dmar_recipe_chunk_ids(rc, &n);
	uint8_t *miss = calloc(rc->n ? rc->n : 1, 1), *bits = calloc(nb ? nb : 1, 1);
	json_t *o = NULL, *count = json_object_get(ans, "missing_count");
	if (!ids || !miss || !bits || !json_is_integer(count))
		goto out;
	struct dmar_error err = { 0 };
	if (n && q->s->ops->have(q->s->ctx, ids, n, miss, &err) < 0)
		goto out;
	for (size_t i = 0, k = 0; i < rc->n; i++)
		if (rc->e[i].kind == DMAR_RECIPE_CHUNK && miss[k++])
			bits[i / 8] |= (uint8_t)(1u << (i % 8));
	o = bits_answer(bits, nb, json_integer_value(count));
out:
	free(ids);
	free(miss);
	free(bits);
	return o;
}

/* Complete the short recipe rc (ids cut to idlen bytes) from the node's
 * chunks: 0 and rc the full recipe whose id is rid.  Else -ENODATA and *out
 * the 409 answer: the bits of the entries that no held chunk completes, or
 * "resend": "full" when a prefix names more than one chunk here or the
 * completed recipe is not the one rid names (a prefix completed to another
 * chunk than the sender's): then only the full recipe can say. */
static int short_complete(struct req *q, struct dmar_recipe *rc, const struct dmar_id *rid, unsigned idlen,
			  struct dmar_id *cid, json_t **out)
{
	size_t nb = (rc->n + 7) / 8, k, nmiss = 0, namb = 0;
	struct dmar_id *ids = dmar_recipe_chunk_ids(rc, &k);
	uint8_t *state = malloc(rc->n ? rc->n : 1), *bits = calloc(nb ? nb : 1, 1);
	int r = -ENOMEM;
	if (!ids || !state || !bits)
		goto out;
	if (k && (r = q->s->ops->resolve(q->s->ctx, ids, k, idlen, state, &q->err)) < 0)
		goto out;
	k = 0;
	for (size_t i = 0; i < rc->n; i++) {
		if (rc->e[i].kind != DMAR_RECIPE_CHUNK)
			continue;
		if (state[k] == 0) {
			rc->e[i].id = ids[k];
		} else if (state[k] == 1) {
			bits[i / 8] |= (uint8_t)(1u << (i % 8));
			nmiss++;
		} else {
			namb++;
		}
		k++;
	}
	r = -ENODATA;
	if (namb) {
		*out = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "full");
		dmar_error_set(&q->err, r, "%zu chunk id prefixes of the short recipe name more than one chunk here",
			       namb);
		goto out;
	}
	if (nmiss) {
		if (!(*out = bits_answer(bits, nb, (json_int_t)nmiss)))
			r = -ENOMEM;
		else
			dmar_error_set(&q->err, r, "%zu chunks of the recipe are missing", nmiss);
		goto out;
	}
	struct dmar_id got;
	if ((r = dmar_recipe_ids(rc, &got, cid)) < 0)
		goto out;
	r = -ENODATA;
	if (memcmp(got.b, rid->b, DMAR_HASH_SIZE) != 0) {
		char a[DMAR_HASH_HEX_SIZE], b[DMAR_HASH_HEX_SIZE];
		dmar_hex(got.b, DMAR_HASH_SIZE, a);
		dmar_hex(rid->b, DMAR_HASH_SIZE, b);
		*out = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "full");
		dmar_error_set(&q->err, r, "the short recipe completes to recipe %.16s..., not %.16s...", a, b);
		goto out;
	}
	r = 0;
out:
	free(ids);
	free(state);
	free(bits);
	return r;
}

/* A commit's answer: 201 with the stat object, 409 with o (chunks
 * missing, or resend), 412 for noreplace, else the error. */
static enum MHD_Result commit_reply(struct req *q, int r, json_t *o, bool noreplace)
{
	if (r == -ENODATA)
		return reply_error_full(q, r, MHD_HTTP_CONFLICT, q->err.code ? q->err.msg : "chunks missing", o,
					NULL, NULL);
	if (r == -EEXIST && noreplace) {
		json_decref(o);
		return reply_error(q, r, MHD_HTTP_PRECONDITION_FAILED, q->err.code ? q->err.msg : "file exists");
	}
	return reply_object(q, r, MHD_HTTP_CREATED, o);
}

/* X-Dmar-Content: make the file from content the node holds.  0 when
 * the clone answered (*ret set), -ENOENT to read the body's recipe as
 * usual. */
static int try_clone(struct req *q, const char *hex, bool is_short, bool noreplace, enum MHD_Result *ret)
{
	struct dmar_id cid, rid, want;
	struct dmar_recipe head;
	if (dmar_id_parse(hex, &cid) < 0) {
		*ret = reply_error(q, -EINVAL, 0, "X-Dmar-Content: not a content id (64 hex digits)");
		return 0;
	}
	int r = dmar_recipe_head_parse(q->body, q->len, is_short, &head, &rid, &q->err);
	if (r < 0) {
		*ret = reply_ops_error(q, r);
		return 0;
	}
	/* The recipe id binds the header to the content: a content id the
	 * body does not name is the sender's mistake, not a file to make. */
	dmar_recipe_id_of(&head, head.n, &cid, &want);
	if (memcmp(want.b, rid.b, DMAR_HASH_SIZE) != 0) {
		*ret = reply_error(q, -EINVAL, 0, "X-Dmar-Content: the recipe's id does not name this content");
		return 0;
	}
	json_t *o = NULL;
	r = q->s->ops->clone ? q->s->ops->clone(q->s->ctx, q->path, &head, &cid, noreplace, &o, &q->err) : -ENOENT;
	if (r == -ENOENT) {
		memset(&q->err, 0, sizeof(q->err));
		/* A short recipe's header and no entries: a content-only
		 * commit, which only this content could have answered. */
		if (!is_short || q->len != DMAR_RECIPE_SHORT_HDR_SIZE || !head.n)
			return -ENOENT;
		o = json_pack("{s:i, s:s}", "missing_count", 0, "resend", "recipe");
		r = dmar_error_set(&q->err, -ENODATA, "content-only commit: this node holds no file with that content");
	}
	*ret = commit_reply(q, r, o, noreplace);
	return 0;
}

/* PUT /v1/files/PATH, body a recipe or a short recipe */
static enum MHD_Result h_commit(struct req *q)
{
	const char *inm = header(q, MHD_HTTP_HEADER_IF_NONE_MATCH);
	bool noreplace = false;
	if (inm) {
		while (*inm == ' ')
			inm++;
		if (strcmp(inm, "*") != 0)
			return reply_error(q, -EINVAL, 0, "If-None-Match: only \"*\" is supported");
		noreplace = true;
	}
	/* A short recipe's ids mean nothing to the sender as a list: its
	 * refusals are always bits. */
	bool is_short = media_type_is(header(q, MHD_HTTP_HEADER_CONTENT_TYPE), CT_RECIPE_SHORT);
	const char *want = header(q, "X-Dmar-Missing-As");
	bool as_bits = is_short || (want && !strcmp(want, "bits"));
	const char *content = header(q, "X-Dmar-Content");
	enum MHD_Result ret;
	if (content && try_clone(q, content, is_short, noreplace, &ret) == 0)
		return ret;
	struct dmar_recipe rc;
	struct dmar_id rid, cid;
	unsigned idlen;
	/* A full recipe's content id comes from checking its trailer. */
	int r = is_short ? dmar_recipe_short_parse(q->body, q->len, &rc, &rid, &idlen, &q->err)
			 : dmar_recipe_parse_cid(q->body, q->len, &rc, &cid, &q->err);
	if (r < 0)
		return reply_ops_error(q, r);
	json_t *o = NULL;
	if (is_short)
		r = short_complete(q, &rc, &rid, idlen, &cid, &o);
	if (r == 0) {
		r = q->s->ops->commit(q->s->ctx, q->path, &rc, &cid, noreplace, &o, &q->err);
		if (r == -ENODATA && as_bits) {
			json_t *bits = missing_bits(q, &rc, o);
			if (bits) {
				json_decref(o);
				o = bits;
			}
		}
	}
	dmar_recipe_free(&rc);
	return commit_reply(q, r, o, noreplace);
}

/* GET /v1/recipes/PATH */
static enum MHD_Result h_recipe(struct req *q)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = q->s->ops->recipe(q->s->ctx, q->path, &buf, &len, &q->err);
	if (r < 0)
		return reply_ops_error(q, r);
	return reply_bytes(q, MHD_HTTP_OK, "application/x-dmar-recipe", buf, len);
}

/* *out = the string member key of o, NULL if absent; -EINVAL if it is
 * not a string or holds a NUL. */
static int json_field(json_t *o, const char *key, const char **out)
{
	json_t *v = json_object_get(o, key);
	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return -EINVAL;
	*out = json_string_value(v);
	return 0;
}

/* POST /v1/transfers, body {"path": ..., "to": ..., "dest": ...} */
static enum MHD_Result h_transfer(struct req *q)
{
	json_t *o = parse_json_body(q);
	if (!o)
		return q->answered ? MHD_YES : MHD_NO;
	const char *path, *to, *dest;
	enum MHD_Result ret;
	if (json_field(o, "path", &path) < 0 || json_field(o, "to", &to) < 0 || json_field(o, "dest", &dest) < 0 ||
	    !path || !to || !*to) {
		ret = reply_error(q, -EINVAL, 0,
				  "transfer: \"path\" and \"to\" are required strings, \"dest\" an optional one");
		goto out;
	}
	if (!dest)
		dest = path;
	if (dmar_wire_path_check(path, &q->err) < 0 || dmar_wire_path_check(dest, &q->err) < 0) {
		ret = reply_ops_error(q, -EINVAL);
		goto out;
	}
	json_t *res = NULL;
	int r = q->s->ops->transfer(q->s->ctx, path, to, dest, &res, &q->err);
	ret = reply_object(q, r, MHD_HTTP_OK, res);
out:
	json_decref(o);
	return ret;
}

/* ---- endpoints: chunks ------------------------------------------------------- */

/* POST /v1/chunks/query: the missing ids, in request order */
static enum MHD_Result h_query(struct req *q)
{
	size_t n;
	if (!id_list(q, &n))
		return q->answered ? MHD_YES : MHD_NO;
	const struct dmar_id *ids = (const struct dmar_id *)q->body;
	uint8_t *missing = calloc(n, 1);
	if (!missing)
		return reply_error(q, -ENOMEM, 0, NULL);
	int r = q->s->ops->have(q->s->ctx, ids, n, missing, &q->err);
	if (r < 0) {
		free(missing);
		return reply_ops_error(q, r);
	}
	/* Compact the missing ids to the front of the body buffer. */
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (missing[i])
			memmove(q->body + DMAR_HASH_SIZE * m++, q->body + DMAR_HASH_SIZE * i, DMAR_HASH_SIZE);
	free(missing);
	uint8_t *out = q->body;
	q->body = NULL;
	struct MHD_Response *resp = MHD_create_response_from_buffer(m * DMAR_HASH_SIZE, m ? out : (void *)"",
								    m ? MHD_RESPMEM_MUST_FREE
								      : MHD_RESPMEM_PERSISTENT);
	if (!resp || !m)
		free(out);
	if (!resp)
		return MHD_NO;
	char num[24];
	snprintf(num, sizeof(num), "%zu", m);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, "X-Dmar-Missing", num);
	return queue(q, MHD_HTTP_OK, resp);
}

/* The connection's zstd context and scratch, made on first use. */
static int conn_zstd(struct conn *cn)
{
	if (!cn->dctx && !(cn->dctx = ZSTD_createDCtx()))
		return -ENOMEM;
	if (!cn->scratch && !(cn->scratch = malloc(DMAR_WIRE_CHUNK_MAX)))
		return -ENOMEM;
	return 0;
}

/* A chunk's verdict (v: 0 or dmar_wire_chunk_verify's error, verr its
 * message): store its decoded bytes, or list it as bad. */
static int chunk_verdict(struct req *q, const struct dmar_wire_chunk *c, int v, const struct dmar_error *verr,
			 const uint8_t *decoded)
{
	if (v < 0) {
		if (!q->bad_count++)
			snprintf(q->bad_msg, sizeof(q->bad_msg), "%s", verr->msg);
		if (json_array_size(q->bad) < DMAR_SERVER_MISSING_LIST)
			json_array_append_new(q->bad, hex_id(&c->id));
		return 0;
	}
	int r = q->s->ops->put_chunk(q->s->ctx, c, decoded, q->upload, &q->err);
	if (r < 0)
		return r;
	q->received++;
	q->bytes += c->len;
	return 0;
}

/* Verify the raw chunks held since the last flush together (two SHA-NI or
 * sixteen AVX-512 lanes side by side: hashing is most of what receiving
 * costs), then store each or list it as bad.  Runs before their payloads
 * go: after each feed of the parser, or when the group is full. */
static int group_flush(struct req *q)
{
	size_t n = q->ngroup;
	q->ngroup = 0;
	if (!n)
		return 0;
	struct dmar_error verr = { 0 };
	dmar_wire_chunks_verify(q->group, n, q->group_ok, &verr);
	for (size_t i = 0; i < n; i++) {
		int r = chunk_verdict(q, &q->group[i], q->group_ok[i] ? 0 : -EILSEQ, &verr, q->group[i].payload);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The batch parser's callback.  A raw chunk joins the group verified
 * after this feed (its payload stays valid until the parser's next call);
 * a zstd one is decoded into the connection's scratch, which the next one
 * reuses, so it is verified and stored at once. */
static int on_chunk(void *ctx, const struct dmar_wire_chunk *c)
{
	struct req *q = ctx;
	if (c->enc == DMAR_WIRE_RAW) {
		q->group[q->ngroup++] = *c;
		return q->ngroup == VERIFY_GROUP ? group_flush(q) : 0;
	}
	int r = conn_zstd(q->conn);
	if (r < 0)
		return r;
	const uint8_t *decoded = NULL;
	struct dmar_error verr = { 0 };
	int v = dmar_wire_chunk_verify(c, q->conn->dctx, q->conn->scratch, &decoded, &verr);
	return chunk_verdict(q, c, v, &verr, decoded);
}

/* One piece of the decoded batch into the parser, then the group it left
 * verified and stored (also when the parser stopped at a malformed record:
 * the records before it count, as they did when each was stored in its
 * callback). */
static int batch_feed(struct req *q, const void *data, size_t len)
{
	int r = dmar_batch_parser_feed(q->bp, data, len, &q->err);
	int f = group_flush(q);
	return r < 0 ? r : f;
}

/* POST /v1/chunks: the batch has been parsed as it came; sum up. */
static enum MHD_Result h_put_chunks(struct req *q)
{
	if (q->zstd && !q->zdone)
		return reply_error(q, -EBADMSG, 0, "zstd body: the frame is truncated");
	int r = dmar_batch_parser_finish(q->bp, &q->err);
	if (r < 0)
		return reply_ops_error(q, r);
	if (q->bad_count) {
		json_t *extra = json_pack("{s:O, s:I, s:I, s:I}", "bad", q->bad, "bad_count", (json_int_t)q->bad_count,
					  "received", (json_int_t)q->received, "bytes", (json_int_t)q->bytes);
		return reply_error_full(q, -EILSEQ, 0, q->bad_msg, extra, NULL, NULL);
	}
	return reply_json(q, MHD_HTTP_OK,
			  json_pack("{s:I, s:I}", "received", (json_int_t)q->received, "bytes", (json_int_t)q->bytes));
}

/* GET /v1/chunks/ID */
static enum MHD_Result h_get_chunk(struct req *q)
{
	struct dmar_wire_chunk c = { 0 };
	uint8_t *buf = NULL;
	int r = q->s->ops->get_chunk(q->s->ctx, &q->id, &c, &buf, &q->err);
	if (r < 0)
		return reply_ops_error(q, r);
	struct MHD_Response *resp = MHD_create_response_from_buffer(c.stored, c.stored ? buf : (void *)"",
								    c.stored ? MHD_RESPMEM_MUST_FREE
									     : MHD_RESPMEM_PERSISTENT);
	if (!resp || !c.stored)
		free(buf);
	if (!resp)
		return MHD_NO;
	char num[16];
	snprintf(num, sizeof(num), "%u", c.len);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, "X-Dmar-Encoding", c.enc == DMAR_WIRE_ZSTD ? "zstd" : "raw");
	MHD_add_response_header(resp, "X-Dmar-Length", num);
	return queue(q, MHD_HTTP_OK, resp);
}

/*
 * POST /v1/chunks/fetch streams its answer: one chunk in memory at a time
 * (the node's copy and, for a raw chunk, its compressed form), the next
 * fetched when MHD has sent the last.  A chunk that vanishes between the
 * up-front check and its turn ends the stream early; the client sees a
 * truncated batch.
 */
struct fetch {
	struct dmar_server *s;
	uint8_t *ids;
	size_t n, next; /* ids to send, the next one */
	bool started;   /* the batch header is out */
	const uint8_t *seg[2];
	size_t seg_len[2];
	int nseg, cur;
	size_t off;
	uint8_t hdr[DMAR_BATCH_REC_SIZE > DMAR_BATCH_HDR_SIZE ? DMAR_BATCH_REC_SIZE : DMAR_BATCH_HDR_SIZE];
	uint8_t *chunk; /* the node's copy of the current chunk */
	struct dmar_zchunk *z;
	uint8_t *zbuf;  /* its compressed form */
	size_t zbuf_cap;
};

static void fetch_free(void *cls)
{
	struct fetch *f = cls;
	free(f->ids);
	free(f->chunk);
	free(f->zbuf);
	dmar_zchunk_free(f->z);
	free(f);
}

/* A raw payload as a level-1 chunk frame where the compress policy
 * (codec/compress.h) says it pays; a chunk its source already judged
 * travels as it is. */
static bool fetch_compress(struct fetch *f, struct dmar_wire_chunk *c)
{
	if (c->enc != DMAR_WIRE_RAW || c->tried)
		return false;
	if (!f->z && dmar_zchunk_new(&f->z, 1, NULL) < 0)
		return false;
	if (!dmar_zchunk_probe(f->z, c->payload, c->len))
		return false;
	if (f->zbuf_cap < c->len) {
		uint8_t *z = realloc(f->zbuf, c->len);
		if (!z)
			return false;
		f->zbuf = z;
		f->zbuf_cap = c->len;
	}
	size_t r = dmar_zchunk_compress(f->z, f->zbuf, c->len, c->payload, c->len);
	if (!r)
		return false;
	c->enc = DMAR_WIRE_ZSTD;
	c->stored = (uint32_t)r;
	c->payload = f->zbuf;
	return true;
}

/* Ready the next piece of the stream; false when there is none (or the
 * chunk could not be had). */
static bool fetch_next(struct fetch *f, bool *failed)
{
	f->cur = f->nseg = 0;
	f->off = 0;
	if (!f->started) {
		dmar_batch_write_header(f->hdr, (uint32_t)f->n);
		f->seg[0] = f->hdr;
		f->seg_len[0] = DMAR_BATCH_HDR_SIZE;
		f->nseg = 1;
		f->started = true;
		return true;
	}
	if (f->next == f->n)
		return false;
	free(f->chunk);
	f->chunk = NULL;
	struct dmar_wire_chunk c = { 0 };
	struct dmar_error err = { 0 };
	const struct dmar_id *id = (const struct dmar_id *)(f->ids + DMAR_HASH_SIZE * f->next++);
	if (f->s->ops->get_chunk(f->s->ctx, id, &c, &f->chunk, &err) < 0) {
		*failed = true;
		return false;
	}
	c.id = *id;
	fetch_compress(f, &c);
	dmar_batch_write_record(f->hdr, &c);
	f->seg[0] = f->hdr;
	f->seg_len[0] = DMAR_BATCH_REC_SIZE;
	f->seg[1] = c.payload;
	f->seg_len[1] = c.stored;
	f->nseg = 2;
	return true;
}

static ssize_t fetch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fetch *f = cls;
	size_t w = 0;
	while (w < max) {
		if (f->cur == f->nseg) {
			bool failed = false;
			if (!fetch_next(f, &failed)) {
				if (w)
					return (ssize_t)w;
				return failed ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
			}
			continue;
		}
		size_t take = f->seg_len[f->cur] - f->off;
		if (take > max - w)
			take = max - w;
		memcpy(buf + w, f->seg[f->cur] + f->off, take);
		w += take;
		f->off += take;
		if (f->off == f->seg_len[f->cur]) {
			f->cur++;
			f->off = 0;
		}
	}
	return (ssize_t)w;
}

/* POST /v1/chunks/fetch: every id is checked with have() before the first
 * byte, so an absent one is a clean 404. */
static enum MHD_Result h_fetch(struct req *q)
{
	size_t n;
	if (!id_list(q, &n))
		return q->answered ? MHD_YES : MHD_NO;
	if (n > UINT32_MAX)
		return reply_error(q, -E2BIG, 0, "fetch: too many ids");
	uint8_t *missing = calloc(n, 1);
	if (!missing)
		return reply_error(q, -ENOMEM, 0, NULL);
	const struct dmar_id *ids = (const struct dmar_id *)q->body;
	int r = q->s->ops->have(q->s->ctx, ids, n, missing, &q->err);
	if (r < 0) {
		free(missing);
		return reply_ops_error(q, r);
	}
	json_t *list = json_array();
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (missing[i] && m++ < DMAR_SERVER_MISSING_LIST)
			json_array_append_new(list, hex_id(&ids[i]));
	free(missing);
	if (m) {
		char msg[128];
		snprintf(msg, sizeof(msg), "fetch: %zu of %zu chunks are not held here", m, n);
		json_t *extra = json_pack("{s:I, s:o}", "missing_count", (json_int_t)m, "missing", list);
		return reply_error_full(q, -ENOENT, 0, msg, extra, NULL, NULL);
	}
	json_decref(list);
	struct fetch *f = calloc(1, sizeof(*f));
	if (!f)
		return reply_error(q, -ENOMEM, 0, NULL);
	f->s = q->s;
	f->ids = q->body;
	f->n = n;
	q->body = NULL;
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, FETCH_BLOCK, fetch_read, f, fetch_free);
	if (!resp) {
		fetch_free(f);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-dmar-chunks");
	return queue(q, MHD_HTTP_OK, resp);
}

/* ---- websockets: GET /v1/events ---------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void wake_events(struct dmar_server *s)
{
	char b = 0;
	ssize_t r = write(s->wake[1], &b, 1);
	(void)r; /* a full pipe wakes the thread just as well */
}

/* Append a frame to cl's backlog; false (and cl dropped) past the limit.
 * Called with s->lock held, or before the event thread knows cl. */
static bool ws_queue(struct ws_client *cl, enum dmar_ws_opcode op, const void *payload, size_t len)
{
	uint8_t h[DMAR_WS_HDR_MAX];
	size_t hl = dmar_ws_frame_header(h, op, len, NULL);
	if (cl->out_off && cl->out_off == cl->out_len)
		cl->out_off = cl->out_len = 0;
	size_t pending = cl->out_len - cl->out_off;
	if (pending + hl + len > WS_BACKLOG_MAX) {
		cl->dead = true;
		return false;
	}
	if (cl->out_len + hl + len > cl->out_cap) {
		/* Slide what is still unsent to the front before growing. */
		if (pending)
			memmove(cl->out, cl->out + cl->out_off, pending);
		cl->out_len = pending;
		cl->out_off = 0;
		if (pending + hl + len > cl->out_cap) {
			size_t cap = cl->out_cap ? cl->out_cap : 4096;
			while (cap < pending + hl + len)
				cap *= 2;
			uint8_t *o = realloc(cl->out, cap);
			if (!o) {
				cl->dead = true;
				return false;
			}
			cl->out = o;
			cl->out_cap = cap;
		}
	}
	memcpy(cl->out + cl->out_len, h, hl);
	if (len)
		memcpy(cl->out + cl->out_len + hl, payload, len);
	cl->out_len += hl + len;
	return true;
}

/* Queue a close frame with this code; nothing more is sent after it. */
static void ws_close(struct ws_client *cl, unsigned code)
{
	if (cl->closing)
		return;
	uint8_t p[2] = { (uint8_t)(code >> 8), (uint8_t)code };
	ws_queue(cl, DMAR_WS_CLOSE, p, code ? 2 : 0);
	cl->closing = true;
	cl->closing_since_ms = now_ms();
}

/* A client's frame (event thread): answer pings and closes, ignore data. */
static int on_ws_frame(void *ctx, const struct dmar_ws_frame *f)
{
	struct ws_client *cl = ctx;
	pthread_mutex_lock(&cl->s->lock);
	if (f->opcode == DMAR_WS_PING && !cl->closing) {
		ws_queue(cl, DMAR_WS_PONG, f->payload, f->len);
	} else if (f->opcode == DMAR_WS_CLOSE) {
		/* Echo the client's status code, as RFC 6455 5.5.1 suggests. */
		unsigned code = f->len >= 2 ? (unsigned)f->payload[0] << 8 | f->payload[1] : 0;
		ws_close(cl, code);
	}
	pthread_mutex_unlock(&cl->s->lock);
	return 0;
}

/* Feed received bytes; a protocol error is answered with a close frame. */
static void ws_feed(struct ws_client *cl, const void *data, size_t len)
{
	struct dmar_error err = { 0 };
	int r = dmar_ws_parser_feed(cl->parser, data, len, &err);
	if (r < 0) {
		pthread_mutex_lock(&cl->s->lock);
		ws_close(cl, r == -EMSGSIZE ? DMAR_WS_CLOSE_TOO_BIG : DMAR_WS_CLOSE_PROTOCOL);
		pthread_mutex_unlock(&cl->s->lock);
	}
}

static void ws_read(struct dmar_server *s, struct ws_client *cl)
{
	uint8_t buf[4096];
	ssize_t n = recv(cl->sock, buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		pthread_mutex_lock(&s->lock);
		cl->dead = true;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	ws_feed(cl, buf, (size_t)n);
}

/* Send what cl's backlog holds, as far as the socket takes it; then, if
 * the close frame is out, the client is done.  Called with s->lock held. */
static void ws_flush(struct ws_client *cl)
{
	while (!cl->dead && cl->out_off < cl->out_len) {
		ssize_t n = send(cl->sock, cl->out + cl->out_off, cl->out_len - cl->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			cl->dead = true;
			break;
		}
		cl->out_off += (size_t)n;
	}
	if (cl->closing && cl->out_off == cl->out_len)
		cl->dead = true;
	if (cl->closing && now_ms() - cl->closing_since_ms > WS_CLOSE_WAIT_MS)
		cl->dead = true;
}

static void ws_client_free(struct ws_client *cl)
{
	MHD_upgrade_action(cl->urh, MHD_UPGRADE_ACTION_CLOSE);
	dmar_ws_parser_free(cl->parser);
	free(cl->out);
	free(cl);
}

/* The event thread: poll the wake pipe and every client. */
static void *event_loop(void *arg)
{
	struct dmar_server *s = arg;
	struct pollfd *fds = NULL;
	struct ws_client **cls = NULL;
	size_t cap = 0;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		if (s->stopping) {
			pthread_mutex_unlock(&s->lock);
			break;
		}
		/* Reap the dead; only this thread unlinks and frees clients. */
		struct ws_client **pp = &s->clients, *dead = NULL;
		while (*pp) {
			struct ws_client *cl = *pp;
			if (cl->dead) {
				*pp = cl->next;
				cl->next = dead;
				dead = cl;
				s->nclients--;
			} else {
				pp = &cl->next;
			}
		}
		size_t n = 1 + s->nclients;
		if (n > cap) {
			struct pollfd *nf = realloc(fds, n * sizeof(*fds));
			struct ws_client **nc = nf ? realloc(cls, n * sizeof(*cls)) : NULL;
			if (nf)
				fds = nf;
			if (nc)
				cls = nc;
			if (!nf || !nc) {
				pthread_mutex_unlock(&s->lock);
				usleep(100000);
				continue;
			}
			cap = n;
		}
		fds[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
		size_t i = 1;
		bool any_closing = false;
		for (struct ws_client *cl = s->clients; cl; cl = cl->next, i++) {
			cls[i] = cl;
			fds[i] = (struct pollfd){ .fd = cl->sock, .events = POLLIN };
			if (cl->out_off < cl->out_len)
				fds[i].events |= POLLOUT;
			any_closing |= cl->closing;
		}
		pthread_mutex_unlock(&s->lock);
		while (dead) {
			struct ws_client *next = dead->next;
			ws_client_free(dead);
			dead = next;
		}

		if (poll(fds, n, any_closing ? 500 : -1) < 0 && errno != EINTR)
			usleep(10000);
		if (fds[0].revents & POLLIN) {
			char b[64];
			while (read(s->wake[0], b, sizeof(b)) > 0)
				;
		}
		for (i = 1; i < n; i++) {
			struct ws_client *cl = cls[i];
			if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
				ws_read(s, cl);
			pthread_mutex_lock(&s->lock);
			ws_flush(cl);
			pthread_mutex_unlock(&s->lock);
		}
	}
	free(fds);
	free(cls);
	return NULL;
}

/* MHD hands over the socket once the 101 is out (on the connection's
 * thread): the client joins the event thread's set, hello frame first. */
static void on_upgrade(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in, size_t extra_in_size,
		       MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct dmar_server *s = cls;
	struct req *q = con_cls;
	struct ws_client *cl = calloc(1, sizeof(*cl));
	if (!cl)
		goto fail;
	cl->s = s;
	cl->urh = urh;
	cl->sock = sock;
	int fl = fcntl(sock, F_GETFL);
	if (fl >= 0)
		fcntl(sock, F_SETFL, fl | O_NONBLOCK);
	if (dmar_ws_parser_new(&cl->parser, WS_FRAME_MAX, DMAR_WS_MASK_REQUIRED, on_ws_frame, cl) < 0)
		goto fail;
	/* Bytes the client sent right after its request are frames too; fed
	 * before the event thread can see the client, so one thread at a time. */
	if (q && q->hello)
		ws_queue(cl, DMAR_WS_TEXT, q->hello, strlen(q->hello));
	if (extra_in_size)
		ws_feed(cl, extra_in, extra_in_size);
	pthread_mutex_lock(&s->lock);
	if (s->stopping || s->nclients >= WS_CLIENTS_MAX) {
		pthread_mutex_unlock(&s->lock);
		goto fail;
	}
	cl->next = s->clients;
	s->clients = cl;
	s->nclients++;
	pthread_mutex_unlock(&s->lock);
	wake_events(s);
	return;
fail:
	if (cl) {
		dmar_ws_parser_free(cl->parser);
		free(cl->out);
		free(cl);
	}
	MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/* GET /v1/events: the RFC 6455 handshake, then the socket is ours. */
static enum MHD_Result h_events(struct req *q)
{
	const char *upgrade = header(q, MHD_HTTP_HEADER_UPGRADE);
	const char *connection = header(q, MHD_HTTP_HEADER_CONNECTION);
	const char *version = header(q, "Sec-WebSocket-Version");
	const char *key = header(q, "Sec-WebSocket-Key");
	if (!header_has_token(upgrade, "websocket") || !header_has_token(connection, "upgrade"))
		return reply_error_full(q, -EINVAL, MHD_HTTP_UPGRADE_REQUIRED,
					"events: a websocket endpoint (Upgrade: websocket, Connection: Upgrade)", NULL,
					MHD_HTTP_HEADER_UPGRADE, "websocket");
	if (!version || strcmp(version, "13") != 0)
		return reply_error_full(q, -EINVAL, MHD_HTTP_UPGRADE_REQUIRED, "events: Sec-WebSocket-Version must be 13",
					NULL, "Sec-WebSocket-Version", "13");
	char accept[DMAR_WS_ACCEPT_SIZE];
	int ar = dmar_ws_accept_key(key, accept);
	if (ar == -EINVAL)
		return reply_error(q, -EINVAL, 0, "events: Sec-WebSocket-Key missing or not 16 bytes of base64");
	if (ar < 0)
		return reply_error(q, ar, MHD_HTTP_INTERNAL_SERVER_ERROR,
				   "events: no SHA-1 for the handshake (libcrypto could not be loaded)");
	pthread_mutex_lock(&q->s->lock);
	bool full = q->s->nclients >= WS_CLIENTS_MAX;
	pthread_mutex_unlock(&q->s->lock);
	if (full)
		return reply_error(q, -EAGAIN, 0, "events: too many listeners");

	/* The first frame names the node. */
	json_t *info = NULL;
	struct dmar_error ignored = { 0 };
	if (q->s->ops->info(q->s->ctx, &info, &ignored) < 0)
		info = NULL;
	json_t *name = json_object_get(info, "name");
	json_t *hello = json_pack("{s:s, s:O?}", "type", "hello", "node", json_is_string(name) ? name : NULL);
	json_decref(info);
	if (hello)
		q->hello = json_dumps(hello, JSON_COMPACT);
	json_decref(hello);

	struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, q->s);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	return queue(q, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

/* ---- routing ----------------------------------------------------------------- */


/* Exact paths before the patterns that would swallow them. */
static const struct route routes[] = {
	{ "GET", "/v1/node", MATCH_EXACT, BODY_NONE, { NULL }, h_node },
	{ "POST", "/v1/chunks/query", MATCH_EXACT, BODY_BUF, { CT_IDS }, h_query },
	{ "POST", "/v1/chunks/fetch", MATCH_EXACT, BODY_BUF, { CT_IDS }, h_fetch },
	{ "POST", "/v1/chunks", MATCH_EXACT, BODY_BATCH, { CT_CHUNKS }, h_put_chunks },
	{ "GET", "/v1/chunks/", MATCH_ID, BODY_NONE, { NULL }, h_get_chunk },
	{ "GET", "/v1/files", MATCH_TREE, BODY_NONE, { NULL }, h_stat },
	{ "DELETE", "/v1/files", MATCH_TREE, BODY_NONE, { NULL }, h_remove },
	{ "PUT", "/v1/files", MATCH_TREE, BODY_BUF, { CT_RECIPE, CT_RECIPE_SHORT }, h_commit },
	{ "PUT", "/v1/dirs", MATCH_TREE, BODY_JSON, { CT_JSON }, h_mkdir },
	{ "GET", "/v1/recipes", MATCH_TREE, BODY_NONE, { NULL }, h_recipe },
	{ "POST", "/v1/transfers", MATCH_EXACT, BODY_JSON, { CT_JSON }, h_transfer },
	{ "GET", "/v1/events", MATCH_EXACT, BODY_NONE, { NULL }, h_events },
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/* What follows the route's prefix in url, or NULL if it does not match. */
static const char *route_rest(const struct route *rt, const char *url)
{
	size_t n = strlen(rt->prefix);
	if (strncmp(url, rt->prefix, n) != 0)
		return NULL;
	const char *rest = url + n;
	switch (rt->match) {
	case MATCH_EXACT:
		return *rest ? NULL : rest;
	case MATCH_TREE: /* "/v1/files" and "/v1/files/..." */
		if (!*rest)
			return rest;
		return *rest == '/' ? rest + 1 : NULL;
	case MATCH_ID:
		return strchr(rest, '/') ? NULL : rest;
	}
	return NULL;
}

static bool same_pattern(const struct route *a, const struct route *b)
{
	return a->match == b->match && strcmp(a->prefix, b->prefix) == 0;
}

/* The first pattern url matches; among its routes the one for method, or
 * 405 with Allow; or 404.  Then the path or id after the prefix. */
static enum MHD_Result route(struct req *q, const char *url, const char *method)
{
	const struct route *pat = NULL;
	const char *rest = NULL;
	for (size_t i = 0; i < NROUTES && !pat; i++)
		if ((rest = route_rest(&routes[i], url)))
			pat = &routes[i];
	if (!pat)
		return reply_errorf(q, -ENOENT, 0, "no such endpoint: %.200s", url);
	char allow[64] = "";
	for (size_t i = 0; i < NROUTES; i++) {
		if (!same_pattern(&routes[i], pat))
			continue;
		if (strcmp(routes[i].method, method) == 0) {
			q->rt = &routes[i];
			break;
		}
		snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s", *allow ? ", " : "",
			 routes[i].method);
	}
	if (!q->rt)
		return reply_error_full(q, -EINVAL, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed here", NULL,
					MHD_HTTP_HEADER_ALLOW, allow);
	if (pat->match == MATCH_TREE) {
		int r = decode_path(rest, &q->path, &q->err);
		if (r < 0)
			return reply_ops_error(q, r);
	} else if (pat->match == MATCH_ID) {
		if (dmar_id_parse(rest, &q->id) < 0)
			return reply_error(q, -EINVAL, 0, "chunk id: not 64 hex digits");
	}
	return MHD_YES;
}

/* ---- the access handler ------------------------------------------------------ */

struct framing {
	unsigned lengths, encodings; /* Content-Length, Transfer-Encoding headers */
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	(void)value;
	struct framing *f = cls;
	f->lengths += !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH);
	f->encodings += !strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	return MHD_YES;
}

/* The first call: everything that can be refused before the body. */
static enum MHD_Result begin(struct req *q, const char *url, const char *method)
{
	struct dmar_server *s = q->s;
	if (!authorized(q))
		return reply_error_full(q, -EKEYREJECTED, MHD_HTTP_UNAUTHORIZED, "missing or wrong bearer token", NULL,
					MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	dmar_admit_head(s->admit, q->conn->adm, true);
	enum MHD_Result r = route(q, url, method);
	if (q->answered || r == MHD_NO)
		return r;
	const struct route *rt = q->rt;
	/* One way to know where the body ends (RFC 9112 6.3): a second
	 * Content-Length, or one beside Transfer-Encoding, is how requests
	 * are smuggled past a proxy that reads the other. */
	struct framing fr = { 0 };
	MHD_get_connection_values(q->c, MHD_HEADER_KIND, count_framing, &fr);
	if (fr.lengths > 1)
		return reply_error(q, -EINVAL, 0, "more than one Content-Length");
	if (fr.lengths && fr.encodings)
		return reply_error(q, -EINVAL, 0, "Content-Length and Transfer-Encoding together");
	const char *cl = header(q, MHD_HTTP_HEADER_CONTENT_LENGTH);
	bool has_body = fr.encodings || (cl && strcmp(cl, "0") != 0);
	const char *ct = header(q, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (rt->ctype[0] && (has_body || rt->body != BODY_JSON) && !media_type_is(ct, rt->ctype[0]) &&
	    !(rt->ctype[1] && media_type_is(ct, rt->ctype[1])))
		return reply_errorf(q, -ENOTSUP, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "Content-Type must be %s%s%s",
				    rt->ctype[0], rt->ctype[1] ? " or " : "", rt->ctype[1] ? rt->ctype[1] : "");
	q->limit = rt->body == BODY_JSON && s->max_body > JSON_BODY_MAX ? JSON_BODY_MAX : s->max_body;
	q->clen = UINT64_MAX;
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (errno || end == cl || *end || *cl == '-')
			return reply_error(q, -EINVAL, 0, "Content-Length: not a number");
		if (n > q->limit)
			return reply_errorf(q, -EFBIG, 0, "body of %llu bytes, the limit is %" PRIu64, n, q->limit);
		q->clen = n;
		if (rt->body == BODY_BUF || rt->body == BODY_JSON) {
			if (n && !(q->body = malloc(n)))
				return reply_error(q, -ENOMEM, 0, NULL);
			q->cap = n;
		}
	}
	if (rt->body == BODY_BATCH) {
		const char *up = header(q, "X-Dmar-Upload");
		if (up && dmar_wire_upload_parse(up, &q->upload) < 0)
			return reply_errorf(q, -EINVAL, 0, "X-Dmar-Upload %.64s: not 16 hex digits", up);
		const char *ce = header(q, MHD_HTTP_HEADER_CONTENT_ENCODING);
		if (ce && *ce && strcasecmp(ce, "identity") != 0) {
			if (strcasecmp(ce, "zstd") != 0)
				return reply_errorf(q, -ENOTSUP, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
						    "Content-Encoding %.64s: only zstd is accepted", ce);
			struct conn *cn = q->conn;
			if (!cn->bdctx) {
				if (!(cn->bdctx = ZSTD_createDCtx()))
					return reply_error(q, -ENOMEM, 0, NULL);
				ZSTD_DCtx_setParameter(cn->bdctx, ZSTD_d_windowLogMax, BATCH_ZSTD_WLOG);
			}
			if (!cn->zout && !(cn->zout = malloc(BATCH_ZOUT)))
				return reply_error(q, -ENOMEM, 0, NULL);
			ZSTD_DCtx_reset(cn->bdctx, ZSTD_reset_session_only);
			q->zstd = true;
		}
		uint64_t max_count = q->limit / (DMAR_BATCH_REC_SIZE + 1) + 1;
		if (dmar_batch_parser_new(&q->bp, max_count > UINT32_MAX ? UINT32_MAX : (uint32_t)max_count, on_chunk,
					  q) < 0 ||
		    !(q->bad = json_array()) || !(q->group = malloc(VERIFY_GROUP * sizeof(*q->group))) ||
		    !(q->group_ok = malloc(VERIFY_GROUP * sizeof(*q->group_ok))))
			return reply_error(q, -ENOMEM, 0, NULL);
	}
	return MHD_YES;
}

/* A piece of a zstd-encoded batch: decode it as it comes into the parser.
 * One frame; its output drained (the decoder may hold some back while the
 * buffer is full) before this returns. */
static int batch_unzstd(struct req *q, const char *data, size_t len)
{
	struct conn *cn = q->conn;
	uint64_t max = q->s->max_body * BATCH_ZSTD_RATIO;
	ZSTD_inBuffer in = { data, len, 0 };
	for (;;) {
		if (q->zdone) {
			if (in.pos < in.size)
				return dmar_error_set(&q->err, -EBADMSG, "zstd body: bytes after the end of the frame");
			return 0;
		}
		ZSTD_outBuffer out = { cn->zout, BATCH_ZOUT, 0 };
		size_t r = ZSTD_decompressStream(cn->bdctx, &out, &in);
		if (ZSTD_isError(r))
			return dmar_error_set(&q->err, -EBADMSG, "zstd body: %s", ZSTD_getErrorName(r));
		q->zdone = r == 0;
		q->decoded += out.pos;
		if (q->decoded > max)
			return dmar_error_set(&q->err, -E2BIG,
					      "zstd body decodes to more than %" PRIu64 " bytes (%d x the body limit)",
					      max, BATCH_ZSTD_RATIO);
		if (out.pos) {
			int e = batch_feed(q, cn->zout, out.pos);
			if (e < 0)
				return e;
		}
		if (in.pos == in.size && out.pos < out.size)
			return 0;
	}
}

static void body_fail(struct req *q, int code, unsigned status)
{
	if (!q->fail) {
		q->fail = code;
		q->fail_status = status;
	}
}

/* A piece of the body.  MHD_NO drops the connection: only when a client
 * keeps sending long after it was told no. */
static enum MHD_Result body(struct req *q, const char *data, size_t len)
{
	q->seen += len;
	if (q->seen > q->limit) {
		if (!q->fail)
			dmar_error_set(&q->err, -EFBIG, "body larger than %" PRIu64 " bytes", q->limit);
		body_fail(q, -EFBIG, 0);
		if (q->seen - q->limit > q->limit)
			return MHD_NO;
	}
	if (q->fail)
		return MHD_YES; /* discard */
	switch (q->rt->body) {
	case BODY_NONE:
		break;
	case BODY_JSON:
	case BODY_BUF:
		if (q->len + len > q->cap) {
			size_t cap = q->cap ? q->cap : 4096;
			while (cap < q->len + len)
				cap *= 2;
			if (cap > q->limit)
				cap = (size_t)q->limit;
			uint8_t *b = realloc(q->body, cap);
			if (!b) {
				body_fail(q, -ENOMEM, 0);
				return MHD_YES;
			}
			q->body = b;
			q->cap = cap;
		}
		memcpy(q->body + q->len, data, len);
		q->len += len;
		break;
	case BODY_BATCH: {
		int r = q->zstd ? batch_unzstd(q, data, len) : batch_feed(q, data, len);
		if (r < 0)
			body_fail(q, r, 0);
		break;
	}
	}
	return MHD_YES;
}

/*
 * Leave a small piece of a chunk batch with MHD for now?  MHD hands the
 * body over as it comes off the socket, often a few chunks at a time,
 * and the raw chunks of each piece are verified together (group_flush):
 * with sixteen AVX-512 lanes a group of three or four hashes at the speed
 * of two SHA-NI lanes.  Left unconsumed, a piece stays in MHD's buffer
 * and comes back with the bytes that arrive after it.  Never past the
 * body's end (the last piece is the last call), and never twice at the
 * same size: a call without new bytes (MHD's buffer full, or its own
 * retry) is consumed, so nothing can stall.
 */
#define FEED_MIN (512u << 10)

static bool feed_later(struct req *q, size_t n)
{
	return q->rt->body == BODY_BATCH && !q->fail && n < FEED_MIN && n > q->held && q->clen != UINT64_MAX &&
	       q->seen + n < q->clen;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct req *q = *con_cls;
	if (!q) {
		if (!(q = calloc(1, sizeof(*q))))
			return MHD_NO;
		*con_cls = q;
		q->s = cls;
		q->c = c;
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		q->conn = ci ? ci->socket_context : NULL;
		if (!q->conn)
			return MHD_NO;
		atomic_fetch_add(&q->s->requests, 1);
		return begin(q, url, method);
	}
	if (q->answered) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		if (feed_later(q, n)) {
			q->held = n;
			return MHD_YES;
		}
		q->held = 0;
		*upload_data_size = 0;
		return body(q, upload_data, n);
	}
	if (q->fail)
		return reply_error(q, q->fail, q->fail_status, q->err.code ? q->err.msg : NULL);
	return q->rt->fn(q);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;
	if (!q)
		return;
	free(q->path);
	free(q->body);
	dmar_batch_parser_free(q->bp);
	free(q->group);
	free(q->group_ok);
	json_decref(q->bad);
	free(q->hello);
	free(q);
	*con_cls = NULL;
}

static void connection_notify(void *cls, struct MHD_Connection *c, void **socket_context,
			      enum MHD_ConnectionNotificationCode toe)
{
	struct dmar_server *s = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		atomic_fetch_add(&s->connections, 1);
		struct conn *cn = calloc(1, sizeof(struct conn));
		*socket_context = cn;
		const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		if (cn && fd)
			cn->adm = dmar_admit_open(s->admit, fd->connect_fd, ad ? ad->client_addr : NULL);
		return;
	}
	struct conn *cn = *socket_context;
	if (cn) {
		dmar_admit_close(s->admit, cn->adm);
		ZSTD_freeDCtx(cn->dctx);
		free(cn->scratch);
		ZSTD_freeDCtx(cn->bdctx);
		free(cn->zout);
		free(cn);
		*socket_context = NULL;
	}
}

/* ---- starting and stopping --------------------------------------------------- */

/* "ADDR:PORT", "[V6ADDR]:PORT", "PORT" (on 127.0.0.1), "localhost:PORT". */
static int parse_listen(const char *spec, struct sockaddr_storage *ss, socklen_t *sl, bool *loopback,
			struct dmar_error *err)
{
	char host[64];
	const char *port;
	if (!spec)
		spec = "127.0.0.1:7420";
	if (spec[0] == '[') {
		const char *end = strchr(spec, ']');
		if (!end || end[1] != ':' || (size_t)(end - spec - 1) >= sizeof(host))
			return dmar_error_set(err, -EINVAL, "listen: %s: expected [IPV6]:PORT", spec);
		memcpy(host, spec + 1, (size_t)(end - spec - 1));
		host[end - spec - 1] = '\0';
		port = end + 2;
	} else if (strchr(spec, ':')) {
		const char *colon = strrchr(spec, ':');
		if ((size_t)(colon - spec) >= sizeof(host) || strchr(spec, ':') != colon)
			return dmar_error_set(err, -EINVAL, "listen: %s: expected ADDR:PORT or [IPV6]:PORT", spec);
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = '\0';
		port = colon + 1;
	} else {
		snprintf(host, sizeof(host), "127.0.0.1");
		port = spec;
	}
	char *end;
	unsigned long p = strtoul(port, &end, 10);
	if (!*port || *end || p > 65535 || *port == '-' || *port == '+')
		return dmar_error_set(err, -EINVAL, "listen: %s: bad port", spec);
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)p);
		*sl = sizeof(*v4);
		*loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
	} else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)p);
		*sl = sizeof(*v6);
		const uint8_t *a = v6->sin6_addr.s6_addr;
		*loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) || (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && a[12] == 127);
	} else {
		return dmar_error_set(err, -EINVAL, "listen: %s: not a numeric IPv4 or IPv6 address", spec);
	}
	return 0;
}

static int bind_listen(const struct sockaddr_storage *ss, socklen_t sl, const char *spec, int *out, uint16_t *port,
		       struct dmar_error *err)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return dmar_error_set(err, -errno, "listen: %s: socket: %s", spec, strerror(errno));
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	/* The kernel's most (net.core.somaxconn): under a flood of connects
	 * a short queue drops a peer's SYN (1 s, then 3 s to try again); a
	 * long one holds it until the admission (admit.h) sorts it out. */
	if (bind(fd, (const struct sockaddr *)ss, sl) < 0 || listen(fd, SOMAXCONN) < 0) {
		int e = errno;
		close(fd);
		return dmar_error_set(err, -e, "listen: %s: %s", spec ? spec : "127.0.0.1:7420", strerror(e));
	}
	struct sockaddr_storage got;
	socklen_t gl = sizeof(got);
	getsockname(fd, (struct sockaddr *)&got, &gl);
	*port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
						: ((struct sockaddr_in *)&got)->sin_port);
	*out = fd;
	return 0;
}

/* A PEM file, NUL-terminated, at most PEM_MAX bytes. */
static int read_pem(const char *path, char **out, struct dmar_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return dmar_error_set(err, -EINVAL, "tls: %s: %s", path, strerror(errno));
	char *b = malloc(PEM_MAX + 1);
	size_t n = b ? fread(b, 1, PEM_MAX + 1, f) : 0;
	bool bad = ferror(f);
	fclose(f);
	if (!b)
		return -ENOMEM;
	if (bad || n == 0 || n > PEM_MAX) {
		free(b);
		return dmar_error_set(err, -EINVAL, "tls: %s: %s", path, bad ? "read error" : n ? "too large" : "empty");
	}
	b[n] = '\0';
	*out = b;
	return 0;
}

void dmar_server_stop(struct dmar_server *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true; /* an upgrade from now on is closed at once */
	pthread_mutex_unlock(&s->lock);
	if (s->ev_started) {
		wake_events(s);
		pthread_join(s->ev_thread, NULL);
	}
	/* MHD waits for upgraded connections: close them first. */
	struct ws_client *cl = s->clients;
	while (cl) {
		struct ws_client *next = cl->next;
		ws_client_free(cl);
		cl = next;
	}
	s->clients = NULL;
	if (s->d)
		MHD_stop_daemon(s->d);
	dmar_admit_free(s->admit); /* after MHD: every connection has been closed */
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	pthread_mutex_destroy(&s->lock);
	free(s->cert);
	free(s->key);
	free(s);
}

int dmar_server_start(struct dmar_server **out, const struct dmar_server_opts *o, const struct dmar_node_ops *ops,
		      void *ctx, struct dmar_error *err)
{
	struct sockaddr_storage ss;
	socklen_t sl = 0;
	bool loopback = false;
	const char *spec = o->listen ? o->listen : "127.0.0.1:7420";
	int r = parse_listen(o->listen, &ss, &sl, &loopback, err);
	if (r < 0)
		return r;
	if (!ops || !ops->info || !ops->stat || !ops->remove || !ops->mkdir || !ops->have || !ops->put_chunk ||
	    !ops->commit || !ops->resolve || !ops->recipe || !ops->get_chunk || !ops->transfer)
		return dmar_error_set(err, -EINVAL, "server: every node operation must be given");
	if (o->token && !*o->token)
		return dmar_error_set(err, -EINVAL, "token: empty");
	if (!loopback && !o->token)
		return dmar_error_set(err, -EPERM,
				      "listen: %s is not a loopback address: refusing to serve it without a token "
				      "(anyone who reaches it could read and replace files); set a token or listen on "
				      "127.0.0.1",
				      spec);
	if (!o->tls_cert != !o->tls_key)
		return dmar_error_set(err, -EINVAL, "tls: a certificate needs a key and a key a certificate");
	if (o->tls_cert && !MHD_is_feature_supported(MHD_FEATURE_TLS))
		return dmar_error_set(err, -ENOTSUP, "tls: this libmicrohttpd was built without TLS");

	struct dmar_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ops = ops;
	s->ctx = ctx;
	s->max_body = o->max_body ? o->max_body : DMAR_SERVER_BODY_MAX_DEFAULT;
	s->wake[0] = s->wake[1] = -1;
	pthread_mutex_init(&s->lock, NULL);
	if (o->token) {
		s->has_token = true;
		dmar_hash(o->token, strlen(o->token), &s->token_hash);
	}
	if (o->tls_cert && ((r = read_pem(o->tls_cert, &s->cert, err)) < 0 || (r = read_pem(o->tls_key, &s->key, err)) < 0))
		goto fail;
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = dmar_error_set(err, -errno, "server: pipe: %s", strerror(errno));
		goto fail;
	}
	int fd = -1;
	if ((r = bind_listen(&ss, sl, spec, &fd, &s->port, err)) < 0)
		goto fail;

	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_UPGRADE | MHD_USE_ITC;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (s->cert)
		flags |= MHD_USE_TLS;
	struct MHD_OptionItem tls[] = {
		{ MHD_OPTION_HTTPS_MEM_CERT, 0, s->cert },
		{ MHD_OPTION_HTTPS_MEM_KEY, 0, s->key },
		{ MHD_OPTION_END, 0, NULL },
	};
	if ((r = dmar_admit_new(&s->admit, o->admit)) < 0) {
		close(fd);
		dmar_error_set(err, r, "server: cannot start the admission thread");
		goto fail;
	}
	unsigned conns = o->threads ? o->threads : CONNECTIONS_DEFAULT;
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, s,
				MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_CONNECTION_LIMIT, conns,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(conns < CONNECTIONS_PER_IP ? conns : CONNECTIONS_PER_IP),
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
				MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL,
				MHD_OPTION_NOTIFY_COMPLETED, completed, s,
				MHD_OPTION_NOTIFY_CONNECTION, connection_notify, s,
				MHD_OPTION_ARRAY, s->cert ? tls : tls + 2,
				MHD_OPTION_END);
	if (!s->d) {
		close(fd);
		r = dmar_error_set(err, s->cert ? -EINVAL : -EIO, "server: libmicrohttpd would not start on %s%s", spec,
				   s->cert ? " (is the TLS certificate or key invalid?)" : "");
		goto fail;
	}
	if (pthread_create(&s->ev_thread, NULL, event_loop, s) != 0) {
		r = dmar_error_set(err, -EAGAIN, "server: cannot start the event thread");
		goto fail;
	}
	s->ev_started = true;
	*out = s;
	return 0;
fail:
	dmar_server_stop(s);
	return r;
}

uint16_t dmar_server_port(const struct dmar_server *s)
{
	return s->port;
}

void dmar_server_event(struct dmar_server *s, json_t *ev)
{
	if (!s || !json_is_object(ev)) {
		json_decref(ev);
		return;
	}
	struct timeval tv;
	gettimeofday(&tv, NULL);
	json_object_set_new(ev, "time", json_real((double)tv.tv_sec + tv.tv_usec / 1e6));
	char *text = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (!text)
		return;
	size_t len = strlen(text);
	pthread_mutex_lock(&s->lock);
	for (struct ws_client *cl = s->clients; cl; cl = cl->next)
		if (!cl->closing && !cl->dead)
			ws_queue(cl, DMAR_WS_TEXT, text, len);
	pthread_mutex_unlock(&s->lock);
	free(text);
	wake_events(s);
}
