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

#include "server_i.h"
#include "codec/clock.h"

/* ---- answers ----------------------------------------------------------------- */

enum MHD_Result srv_queue(struct req *q, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	q->status = status;
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
enum MHD_Result srv_reply_json(struct req *q, unsigned status, json_t *o)
{
	if (!o)
		return MHD_NO;
	return srv_queue(q, status, json_response(o));
}

/*
 * Answer the error code with {"error": msg, "errno": NAME}, plus the
 * members of extra (stolen, may be NULL); status 0 means the one
 * dmar_wire_http_status gives; a srv_header (name, value) may be added.
 */
enum MHD_Result srv_reply_error_full(struct req *q, int code, unsigned status, const char *msg, json_t *extra,
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
	atomic_fetch_add_explicit(&q->s->refused[-code < SRV_ERRNO_MAX ? -code : SRV_ERRNO_MAX - 1], 1,
				  memory_order_relaxed);
	json_object_set_new(o, "error", json_string(msg && *msg ? msg : strerror(-code)));
	json_object_set_new(o, "errno", json_string(dmar_wire_errno_name(code)));
	struct MHD_Response *resp = json_response(o);
	if (resp && hname)
		MHD_add_response_header(resp, hname, hvalue);
	return srv_queue(q, status, resp);
}

enum MHD_Result srv_reply_error(struct req *q, int code, unsigned status, const char *msg)
{
	return srv_reply_error_full(q, code, status, msg, NULL, NULL, NULL);
}

__attribute__((format(printf, 4, 5))) static enum MHD_Result reply_errorf(struct req *q, int code, unsigned status,
									  const char *fmt, ...)
{
	char msg[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return srv_reply_error(q, code, status, msg);
}

/* The node's error: its code and message. */
enum MHD_Result srv_reply_ops_error(struct req *q, int code)
{
	return srv_reply_error(q, code, 0, q->err.code ? q->err.msg : NULL);
}

/* Answer len bytes of buf (malloc'd, stolen) as ctype. */
enum MHD_Result srv_reply_bytes(struct req *q, unsigned status, const char *ctype, uint8_t *buf, size_t len)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, len ? buf : (void *)"",
								    len ? MHD_RESPMEM_MUST_FREE
									: MHD_RESPMEM_PERSISTENT);
	if (!resp || !len)
		free(buf);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	return srv_queue(q, status, resp);
}

enum MHD_Result srv_reply_empty(struct req *q, unsigned status)
{
	return srv_queue(q, status, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
}

/* ---- request helpers --------------------------------------------------------- */

const char *srv_header(struct req *q, const char *name)
{
	return MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, name);
}

/* Does the header's media type (before any ';' parameters) equal want? */
bool srv_media_type_is(const char *value, const char *want)
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

/* Does a comma-separated srv_header list hold token (case-insensitive)? */
bool srv_header_has_token(const char *value, const char *token)
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

static bool token_is(const struct dmar_server *s, const void *secret, size_t len)
{
	/* Hashing first makes the comparison constant-time in the length too. */
	struct dmar_id got;
	dmar_hash(secret, len, &got);
	uint8_t diff = 0;
	for (size_t i = 0; i < DMAR_HASH_SIZE; i++)
		diff |= got.b[i] ^ s->token_hash.b[i];
	return diff == 0;
}

/* A browser's websocket cannot send Authorization: it offers the token as
 * the subprotocol dmar.token.HEX beside dmar.v1 (the one answered). */
static bool ws_token(struct req *q)
{
	const char *v = srv_header(q, "Sec-WebSocket-Protocol");
	if (!v || !srv_header_has_token(srv_header(q, MHD_HTTP_HEADER_UPGRADE), "websocket"))
		return false;
	const char *p = strstr(v, SRV_WS_TOKEN);
	if (!p)
		return false;
	p += strlen(SRV_WS_TOKEN);
	uint8_t secret[DMAR_TOKEN_MAX];
	size_t n = 0;
	for (; dmar_hexval(p[0]) >= 0 && dmar_hexval(p[1]) >= 0; p += 2) {
		if (n == sizeof(secret))
			return false;
		secret[n++] = (uint8_t)(dmar_hexval(p[0]) << 4 | dmar_hexval(p[1]));
	}
	bool ok = (*p == 0 || *p == ',' || *p == ' ') && token_is(q->s, secret, n);
	explicit_bzero(secret, n);
	return ok;
}

static bool authorized(struct req *q)
{
	if (!q->s->has_token)
		return true;
	const char *h = srv_header(q, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h)
		return ws_token(q);
	if (strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	while (*h == ' ')
		h++;
	return token_is(q->s, h, strlen(h));
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

json_t *srv_parse_json_body(struct req *q)
{
	json_error_t je;
	json_t *o = json_loadb((const char *)q->body, q->len, JSON_REJECT_DUPLICATES, &je);
	if (!o) {
		reply_errorf(q, -EINVAL, 0, "JSON: %s (line %d, column %d)", je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		srv_reply_error(q, -EINVAL, 0, "JSON: the body must be an object");
		return NULL;
	}
	return o;
}

/* The body as n ids: a positive multiple of 32 bytes. */
bool srv_id_list(struct req *q, size_t *n)
{
	if (q->len == 0 || q->len % DMAR_HASH_SIZE) {
		reply_errorf(q, -EINVAL, 0, "id list: %zu bytes is not a positive multiple of %d", q->len,
			     DMAR_HASH_SIZE);
		return false;
	}
	*n = q->len / DMAR_HASH_SIZE;
	return true;
}

json_t *srv_hex_id(const struct dmar_id *id)
{
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(id->b, DMAR_HASH_SIZE, hex);
	return json_string(hex);
}

/* ---- routing ----------------------------------------------------------------- */


/* Exact paths before the patterns that would swallow them. */
static const struct route routes[] = {
	{ "GET", "/v1/node", MATCH_EXACT, BODY_NONE, { NULL }, srv_h_node, false },
	{ "POST", "/v1/chunks/query", MATCH_EXACT, BODY_BUF, { CT_IDS }, srv_h_query, false },
	{ "POST", "/v1/chunks/fetch", MATCH_EXACT, BODY_BUF, { CT_IDS }, srv_h_fetch, false },
	{ "POST", "/v1/chunks", MATCH_EXACT, BODY_BATCH, { CT_CHUNKS }, srv_h_put_chunks, false },
	{ "GET", "/v1/chunks/", MATCH_ID, BODY_NONE, { NULL }, srv_h_get_chunk, false },
	{ "GET", "/v1/files", MATCH_TREE, BODY_NONE, { NULL }, srv_h_stat, false },
	{ "DELETE", "/v1/files", MATCH_TREE, BODY_NONE, { NULL }, srv_h_remove, false },
	{ "PUT", "/v1/files", MATCH_TREE, BODY_BUF, { CT_RECIPE, CT_RECIPE_SHORT, CT_RECIPE_DELTA }, srv_h_commit,
	  false },
	{ "PUT", "/v1/dirs", MATCH_TREE, BODY_JSON, { CT_JSON }, srv_h_mkdir, false },
	{ "GET", "/v1/recipes", MATCH_TREE, BODY_NONE, { NULL }, srv_h_recipe, false },
	{ "POST", "/v1/transfers", MATCH_EXACT, BODY_JSON, { CT_JSON }, srv_h_transfer, false },
	{ "POST", "/v1/tree", MATCH_EXACT, BODY_TREE, { CT_TREE }, srv_h_tree, false },
	{ "GET", "/v1/events", MATCH_EXACT, BODY_NONE, { NULL }, srv_h_events, false },
	{ "GET", "/metrics", MATCH_EXACT, BODY_NONE, { NULL }, srv_h_metrics, false },
	{ "GET", "/v1/mesh", MATCH_EXACT, BODY_NONE, { NULL }, srv_h_mesh, false },
	{ "GET", "/ui", MATCH_TREE, BODY_NONE, { NULL }, srv_h_ui, true },
	{ "GET", "/", MATCH_EXACT, BODY_NONE, { NULL }, srv_h_ui, true },
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))
_Static_assert(NROUTES <= SRV_ROUTES_MAX, "SRV_ROUTES_MAX: room for every route's metrics");

unsigned srv_route_count(void)
{
	return NROUTES;
}

const char *srv_route_name(unsigned k, char *buf, size_t cap)
{
	if (k >= NROUTES)
		return "other";
	snprintf(buf, cap, "%s %s", routes[k].method, routes[k].prefix);
	return buf;
}

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

/* Is url, asked with method, one of the routes served without the token? */
static bool open_route(const char *url, const char *method)
{
	for (size_t i = 0; i < NROUTES; i++)
		if (routes[i].open && !strcmp(routes[i].method, method) && route_rest(&routes[i], url))
			return true;
	return false;
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
		return srv_reply_error_full(q, -EINVAL, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed here", NULL,
					MHD_HTTP_HEADER_ALLOW, allow);
	if (pat->match == MATCH_TREE) {
		int r = decode_path(rest, &q->path, &q->err);
		if (r < 0)
			return srv_reply_ops_error(q, r);
	} else if (pat->match == MATCH_ID) {
		if (dmar_id_parse(rest, &q->id) < 0)
			return srv_reply_error(q, -EINVAL, 0, "chunk id: not 64 hex digits");
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
/* How many Content-Types route rt takes. */
static size_t ctypes(const struct route *rt)
{
	size_t n = 0;
	while (n < sizeof(rt->ctype) / sizeof(*rt->ctype) && rt->ctype[n])
		n++;
	return n;
}

/* Whether Content-Type ct is one route rt takes. */
static bool ctype_ok(const struct route *rt, const char *ct)
{
	for (size_t k = 0; k < ctypes(rt); k++)
		if (srv_media_type_is(ct, rt->ctype[k]))
			return true;
	return false;
}

static enum MHD_Result begin(struct req *q, const char *url, const char *method)
{
	struct dmar_server *s = q->s;
	bool trusted = authorized(q);
	if (!trusted && !open_route(url, method))
		return srv_reply_error_full(q, -EKEYREJECTED, MHD_HTTP_UNAUTHORIZED, "missing or wrong bearer token", NULL,
					MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	/* the web view's files do not make a connection trusted */
	dmar_admit_head(s->admit, q->conn->adm, trusted);
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
		return srv_reply_error(q, -EINVAL, 0, "more than one Content-Length");
	if (fr.lengths && fr.encodings)
		return srv_reply_error(q, -EINVAL, 0, "Content-Length and Transfer-Encoding together");
	const char *cl = srv_header(q, MHD_HTTP_HEADER_CONTENT_LENGTH);
	bool has_body = fr.encodings || (cl && strcmp(cl, "0") != 0);
	const char *ct = srv_header(q, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (rt->ctype[0] && (has_body || rt->body != BODY_JSON) && !ctype_ok(rt, ct)) {
		char want[256] = "";
		for (size_t k = 0, n = ctypes(rt); k < n; k++)
			snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s",
				 !k ? "" : k + 1 < n ? ", " : " or ", rt->ctype[k]);
		return reply_errorf(q, -ENOTSUP, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "Content-Type must be %s", want);
	}
	q->limit = rt->body == BODY_JSON && s->max_body > JSON_BODY_MAX ? JSON_BODY_MAX : s->max_body;
	q->clen = UINT64_MAX;
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (errno || end == cl || *end || *cl == '-')
			return srv_reply_error(q, -EINVAL, 0, "Content-Length: not a number");
		if (n > q->limit)
			return reply_errorf(q, -EFBIG, 0, "body of %llu bytes, the limit is %" PRIu64, n, q->limit);
		q->clen = n;
		if (rt->body == BODY_BUF || rt->body == BODY_JSON) {
			if (n && !(q->body = malloc(n)))
				return srv_reply_error(q, -ENOMEM, 0, NULL);
			q->cap = n;
		}
	}
	bool relayable = rt->body == BODY_BATCH || rt->fn == srv_h_commit;
	if (relayable || rt->body == BODY_TREE) {
		const char *up = srv_header(q, "X-Dmar-Upload");
		if (up && dmar_wire_upload_parse(up, &q->tags.upload) < 0)
			return reply_errorf(q, -EINVAL, 0, "X-Dmar-Upload %.64s: not 16 hex digits", up);
		/* A tree commit's chunks are its own: staged under an id of
		 * the request's, dropped when it ends. */
		if (rt->body == BODY_TREE && !q->tags.upload && dmar_wire_upload_new(&q->tags.upload) < 0)
			return srv_reply_error(q, -EIO, 0, "no random bytes for an upload id");
	}
	const char *relay = relayable ? srv_header(q, "X-Dmar-Relay") : NULL;
	if (relay) {
		struct dmar_hops *h = malloc(sizeof(*h));
		if (!h)
			return srv_reply_error(q, -ENOMEM, 0, NULL);
		q->tags.relay = h;
		if (dmar_hops_parse(relay, h, &q->err) < 0)
			return reply_errorf(q, -EINVAL, 0, "X-Dmar-Relay: %s", q->err.msg);
		if (!h->n) /* "" relays to nobody */
			q->tags.relay = NULL, free(h);
	}
	if (rt->body == BODY_BATCH || rt->body == BODY_TREE) {
		const char *ce = srv_header(q, MHD_HTTP_HEADER_CONTENT_ENCODING);
		if (ce && *ce && strcasecmp(ce, "identity") != 0) {
			if (strcasecmp(ce, "zstd") != 0)
				return reply_errorf(q, -ENOTSUP, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
						    "Content-Encoding %.64s: only zstd is accepted", ce);
			struct conn *cn = q->conn;
			if (!cn->bdctx) {
				if (!(cn->bdctx = ZSTD_createDCtx()))
					return srv_reply_error(q, -ENOMEM, 0, NULL);
				ZSTD_DCtx_setParameter(cn->bdctx, ZSTD_d_windowLogMax, BATCH_ZSTD_WLOG);
			}
			if (!cn->zout && !(cn->zout = malloc(BATCH_ZOUT)))
				return srv_reply_error(q, -ENOMEM, 0, NULL);
			ZSTD_DCtx_reset(cn->bdctx, ZSTD_reset_session_only);
			q->zstd = true;
		}
		uint64_t max_count = q->limit / (DMAR_BATCH_REC_SIZE + 1) + 1;
		if (dmar_batch_parser_new(&q->bp, max_count > UINT32_MAX ? UINT32_MAX : (uint32_t)max_count, srv_on_chunk,
					  q) < 0 ||
		    !(q->bad = json_array()) || !(q->group = malloc(VERIFY_GROUP * sizeof(*q->group))) ||
		    !(q->group_ok = malloc(VERIFY_GROUP * sizeof(*q->group_ok))))
			return srv_reply_error(q, -ENOMEM, 0, NULL);
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
			int e = q->rt->body == BODY_TREE ? srv_tree_feed(q, cn->zout, out.pos)
							 : srv_batch_feed(q, cn->zout, out.pos);
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
	case BODY_BATCH:
	case BODY_TREE: {
		int r = q->zstd			     ? batch_unzstd(q, data, len)
			: q->rt->body == BODY_TREE ? srv_tree_feed(q, data, len)
						     : srv_batch_feed(q, data, len);
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
 * and the raw chunks of each piece are verified together (srv_group_flush):
 * with sixteen AVX-512 lanes a group of three or four hashes at the speed
 * of two SHA-NI lanes.  Left unconsumed, a piece stays in MHD's buffer
 * and comes back with the bytes that arrive after it.  Never past the
 * body's end (the last piece is the last call), and never twice at the
 * same size: a call without new bytes (MHD's buffer full, or its own
 * retry) is consumed, so nothing can stall.
 */
#define FEED_MIN (64u << 10)

static bool feed_later(struct req *q, size_t n)
{
	return (q->rt->body == BODY_BATCH || q->rt->body == BODY_TREE) && !q->fail && n < FEED_MIN && n > q->held && q->clen != UINT64_MAX &&
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
		q->t0 = dmar_mono_s();
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
		return srv_reply_error(q, q->fail, q->fail_status, q->err.code ? q->err.msg : NULL);
	return q->rt->fn(q);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;
	if (!q)
		return;
	/* Counted when it ends, answered or not (status 0: "other"); the
	 * websocket's time is that of its upgrade. */
	struct srv_route_stats *rs = &q->s->rstats[q->rt ? (unsigned)(q->rt - routes) : NROUTES];
	atomic_fetch_add_explicit(&rs->codes[srv_code_index(q->status)], 1, memory_order_relaxed);
	dmar_hist_observe(&rs->seconds, dmar_mono_s() - q->t0);
	/* A tree commit's chunks were for its files, which took their own
	 * references: whatever it staged goes, however it ended. */
	if (q->rt && q->rt->body == BODY_TREE && q->received && q->s->ops->unstage)
		q->s->ops->unstage(q->s->ctx, q->tags.upload);
	free(q->path);
	free((void *)q->tags.relay);
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
	 * a short srv_queue drops a peer's SYN (1 s, then 3 s to try again); a
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
		srv_wake_events(s);
		pthread_join(s->ev_thread, NULL);
	}
	/* MHD waits for upgraded connections: close them first. */
	struct ws_client *cl = s->clients;
	while (cl) {
		struct ws_client *next = cl->next;
		srv_ws_client_free(cl);
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
	srv_metrics_init(s);
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
	if (pthread_create(&s->ev_thread, NULL, srv_event_loop, s) != 0) {
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
	/* Nobody listening (the usual case): no text, and no wake-up of the
	 * event thread, which would cost a context switch per ship.  A
	 * client that connects meanwhile misses this one, as it would a
	 * moment earlier. */
	bool anyone = false;
	pthread_mutex_lock(&s->lock);
	for (struct ws_client *cl = s->clients; cl && !anyone; cl = cl->next)
		anyone = !cl->closing && !cl->dead;
	pthread_mutex_unlock(&s->lock);
	if (!anyone) {
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
			srv_ws_queue(cl, DMAR_WS_TEXT, text, len);
	pthread_mutex_unlock(&s->lock);
	free(text);
	srv_wake_events(s);
}
