/* SPDX-License-Identifier: MIT */
/*
 * The REST client of client.h, on libcurl.
 *
 * Requests.  Every call borrows a CURL easy handle from the client's pool
 * and gives it back reset (curl_easy_reset keeps the handle's live
 * connections), so a later call to the same peer reuses a warm keep-alive
 * connection.  Handles share one DNS and TLS-session cache (a curl share);
 * connections are not shared that way because libcurl does not support a
 * shared connection cache across concurrent threads.
 *
 * Transfer engines.  push and pull run opts.streams worker threads, each
 * with its own pooled handle (so its own connection) doing one request
 * after another with curl_easy_perform.  Threads rather than one curl
 * multi loop: the per-chunk work -- the source's get, the compressibility
 * probe and zstd for push, zstd decoding and SHA-256 verification for
 * pull -- then runs on every core instead of the one thread driving the
 * sockets, and a stream that waits for its answer never holds up the
 * others, so all streams stay busy and no round boundary separates
 * batches.
 *
 * Push, in order:
 *   1. query: the distinct chunk ids of the recipe, DMAR_QUERY_MAX ids a
 *      request, sequentially;
 *   2. upload: the workers take missing chunks from a shared cursor and
 *      form batches of about DMAR_BATCH_BYTES or DMAR_BATCH_CHUNKS chunks.
 *      Each chunk is probed for compressibility (in a long run of
 *      incompressible ones only every 8th: stream_probe).  A batch of mostly
 *      compressible chunks is compressed as a whole (one level-5 zstd
 *      stream over the raw records, the source's zstd chunks decoded) into
 *      the worker's buffer and sent with Content-Encoding: zstd: one stream
 *      sees what the chunks share, which per-chunk frames cannot.  Any
 *      other batch is sized before it is sent (compressible chunks are
 *      compressed one by one into the worker's scratch), so the request
 *      has a Content-Length and the read callback streams the record
 *      headers and payloads straight from the source's memory: nothing is
 *      copied into a batch buffer.  Chunks the peer rejected
 *      (422) are sent once more, fetched afresh from the source;
 *   3. commit: PUT the recipe.  It is the only step that creates the file
 *      on the peer, so a failure anywhere before leaves no file (uploaded
 *      chunks wait on the peer for a later commit).  A 409 (chunks dropped
 *      meanwhile) uploads the listed chunks -- or re-queries every chunk
 *      if the peer truncated its list -- and commits again, 3 times at
 *      most.
 * The ordering guarantee is only this: no commit is sent before every
 * upload it depends on was answered.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_c_format: magicless frames */
#include <zstd.h>

#include "client.h"
#include "compress.h"
#include "libcurl.h"

/* A query body is 32 bytes an id and the peer reads at most 64 MiB a body;
 * half that leaves room for a peer that counts its limit differently. */
#define DMAR_QUERY_MAX (1u << 20)
/* Upload batches: big enough that the per-request cost (headers, one
 * answer) vanishes, small enough that several streams have work even for a
 * file of a few tens of MiB, and far under the peer's 64 MiB body limit
 * (a batch ends after the chunk that crosses the size, so it stays below
 * DMAR_BATCH_BYTES + DMAR_WIRE_CHUNK_MAX plus headers). */
#define DMAR_BATCH_BYTES (8u << 20)
#define DMAR_BATCH_CHUNKS 256u
/* A batch whose chunks are mostly compressible travels as one zstd stream
 * (Content-Encoding: zstd) at this level. */
#define DMAR_BATCH_ZSTD_LEVEL 5
/* After this many probed chunks in a row were incompressible, a stream
 * probes only one chunk in DMAR_PROBE_STRIDE until one passes
 * (stream_probe says why). */
#define DMAR_PROBE_RUN 8u
#define DMAR_PROBE_STRIDE 8u
/* Pull asks for this many ids a request: the sizes are unknown before the
 * answer, and 256 chunks of the default 32 KiB average make about 8 MiB. */
#define DMAR_FETCH_CHUNKS 256u
/* Streams when the caller does not say: one per CPU, DMAR_STREAMS_MIN to
 * DMAR_STREAMS_MAX (default_streams says why). */
#define DMAR_STREAMS_MIN 2u
#define DMAR_STREAMS_MAX 4u
#define DMAR_CONNECT_TIMEOUT_DEFAULT 3000L
/* A connection with no byte moving for this long has stalled. */
#define DMAR_STALL_SECONDS 30L
/* JSON answers and error bodies are small; a recipe is bounded by its format. */
#define DMAR_JSON_MAX (16u << 20)
#define DMAR_COMMIT_RETRIES 3
/* curl's socket buffers for the bulk transfers: fewer, bigger send and recv
 * calls (2 MiB is the most CURLOPT_UPLOAD_BUFFERSIZE accepts). */
#define DMAR_BULK_BUFFER (1L << 20)

struct dmar_client {
	char *url;   /* base, without a trailing '/' */
	char *label; /* "peer b (http://10.9.0.2:7420)", for messages */
	char *auth;  /* "Authorization: Bearer ..." or NULL */
	char *tls_ca;
	unsigned streams;
	atomic_bool no_short; /* the peer answered 415 to a short recipe */
	long connect_timeout_ms;
	long timeout_ms;

	CURLSH *share;
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];

	pthread_mutex_t pool_lock;
	CURL **pool; /* idle handles; protected by pool_lock */
	size_t npool, pool_cap;
};

/* ---- the client --------------------------------------------------------- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
	struct dmar_client *c = ctx;
	pthread_mutex_lock(&c->share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
	struct dmar_client *c = ctx;
	pthread_mutex_unlock(&c->share_lock[data]);
}

/*
 * On a fast link a stream keeps about a core busy at each end (copies,
 * TCP, and the receiver's SHA-256), so streams beyond the CPUs only add
 * switching between threads: a 1 GiB upload between two nodes sharing 2
 * cores took about 1.5 s of CPU at both ends with 2 streams and 1.6 s
 * with 4.  Two at least, so one batch is prepared while another is on the
 * wire; 4 at most, enough to hide a LAN's round trips behind 8 MiB
 * batches.
 */
static unsigned default_streams(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < (long)DMAR_STREAMS_MIN)
		return DMAR_STREAMS_MIN;
	return n > (long)DMAR_STREAMS_MAX ? DMAR_STREAMS_MAX : (unsigned)n;
}

int dmar_client_new(struct dmar_client **out, const struct dmar_client_opts *o, struct dmar_error *err)
{
	if (!o || !o->url || !*o->url)
		return dmar_error_set(err, -EINVAL, "client: no peer URL");
	if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
		return dmar_error_set(err, -EINVAL, "client: %s: not an http:// or https:// URL", o->url);
	int r = dmar_libcurl_load(err);
	if (r < 0)
		return r;

	struct dmar_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->pool_lock, NULL);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&c->share_lock[i], NULL);
	c->streams = o->streams ? o->streams : default_streams();
	c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : DMAR_CONNECT_TIMEOUT_DEFAULT;
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 0;
	size_t ul = strlen(o->url);
	while (ul > 0 && o->url[ul - 1] == '/')
		ul--;
	c->url = strndup(o->url, ul);
	if (!c->url)
		goto nomem;
	int n = o->name ? asprintf(&c->label, "peer %s (%s)", o->name, c->url)
			: asprintf(&c->label, "peer %s", c->url);
	if (n < 0) {
		c->label = NULL;
		goto nomem;
	}
	if (o->token && asprintf(&c->auth, "Authorization: Bearer %s", o->token) < 0) {
		c->auth = NULL;
		goto nomem;
	}
	if (o->tls_ca && !(c->tls_ca = strdup(o->tls_ca)))
		goto nomem;
	if (!(c->share = curl_share_init()))
		goto nomem;
	curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*out = c;
	return 0;
nomem:
	dmar_client_free(c);
	return -ENOMEM;
}

void dmar_client_free(struct dmar_client *c)
{
	if (!c)
		return;
	/* The handles go before the share they point to. */
	for (size_t i = 0; i < c->npool; i++)
		curl_easy_cleanup(c->pool[i]);
	free(c->pool);
	if (c->share)
		curl_share_cleanup(c->share);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&c->share_lock[i]);
	pthread_mutex_destroy(&c->pool_lock);
	free(c->url);
	free(c->label);
	if (c->auth)
		memset(c->auth, 0, strlen(c->auth)); /* the secret does not linger in freed memory */
	free(c->auth);
	free(c->tls_ca);
	free(c);
}

static CURL *pool_get(struct dmar_client *c)
{
	CURL *h = NULL;
	pthread_mutex_lock(&c->pool_lock);
	if (c->npool)
		h = c->pool[--c->npool];
	pthread_mutex_unlock(&c->pool_lock);
	return h ? h : curl_easy_init();
}

static void pool_put(struct dmar_client *c, CURL *h)
{
	if (!h)
		return;
	curl_easy_reset(h); /* forgets the options, keeps the connections */
	pthread_mutex_lock(&c->pool_lock);
	if (c->npool == c->pool_cap) {
		size_t cap = c->pool_cap ? 2 * c->pool_cap : 8;
		CURL **p = realloc(c->pool, cap * sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&c->pool_lock);
			curl_easy_cleanup(h);
			return;
		}
		c->pool = p;
		c->pool_cap = cap;
	}
	c->pool[c->npool++] = h;
	pthread_mutex_unlock(&c->pool_lock);
}

/* ---- one request -------------------------------------------------------- */

/* What a transfer engine adds up over its requests. */
struct tally {
	uint64_t wire;
	uint64_t rounds;
	uint64_t requests, connects;
};

/*
 * One HTTP request: call_begin, the body and callbacks, call_perform, then
 * call_end.  The response body is collected in resp (at most resp_max
 * bytes) unless a streaming sink takes the 2xx answer.
 */
struct call {
	struct dmar_client *c;
	CURL *h;
	struct curl_slist *hdrs;
	char errbuf[CURL_ERROR_SIZE];
	struct dmar_error *err;
	uint8_t *resp;
	size_t resp_len, resp_cap, resp_max;
	/* a 2xx body goes here instead of resp, piece by piece (pull) */
	int (*sink)(void *ctx, const uint8_t *p, size_t n, struct dmar_error *err);
	void *sink_ctx;
	int sink_state; /* 0 undecided, 1 sinking, 2 collecting (an error answer) */
	int cb_err;     /* a callback's negative errno that stopped the transfer */
	const atomic_int *abort_flag; /* another stream failed: stop now */
	long status;
	uint64_t wire;
	bool answered;     /* an HTTP answer came back */
	uint64_t connects; /* connections curl opened for this request */
};

static size_t call_write(char *p, size_t size, size_t nmemb, void *ud)
{
	struct call *k = ud;
	size_t n = size * nmemb;
	if (k->abort_flag && atomic_load(k->abort_flag)) {
		k->cb_err = -ECANCELED;
		return 0;
	}
	if (k->sink && k->sink_state == 0) {
		long st = 0;
		curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &st);
		k->sink_state = st >= 200 && st < 300 ? 1 : 2;
	}
	if (k->sink_state == 1) {
		int r = k->sink(k->sink_ctx, (const uint8_t *)p, n, k->err);
		if (r < 0) {
			k->cb_err = r;
			return 0;
		}
		return n;
	}
	if (n > k->resp_max - k->resp_len) {
		k->cb_err = dmar_error_set(k->err, -EBADMSG, "%s: answer larger than %zu bytes", k->c->label,
					   k->resp_max);
		return 0;
	}
	if (k->resp_len + n > k->resp_cap) {
		size_t cap = k->resp_cap ? k->resp_cap : 4096;
		while (cap < k->resp_len + n)
			cap *= 2;
		if (cap > k->resp_max)
			cap = k->resp_max;
		uint8_t *q = realloc(k->resp, cap);
		if (!q) {
			k->cb_err = -ENOMEM;
			return 0;
		}
		k->resp = q;
		k->resp_cap = cap;
	}
	memcpy(k->resp + k->resp_len, p, n);
	k->resp_len += n;
	return n;
}

/*
 * wire_bytes counts what crossed the wire as HTTP: request and answer
 * headers and bodies.  The debug callback sees exactly those bytes;
 * CURLINFO_REQUEST_SIZE does not do: depending on the libcurl version it
 * includes none, part or all of the request body, so adding the upload
 * size to it would count bodies twice.
 */
static int call_debug(CURL *h, curl_infotype type, char *data, size_t size, void *ud)
{
	struct call *k = ud;
	if (type == CURLINFO_HEADER_OUT || type == CURLINFO_DATA_OUT || type == CURLINFO_HEADER_IN ||
	    type == CURLINFO_DATA_IN)
		k->wire += size;
	return 0;
}

static int call_header(struct call *k, const char *line)
{
	struct curl_slist *l = curl_slist_append(k->hdrs, line);
	if (!l)
		return -ENOMEM;
	k->hdrs = l;
	return 0;
}

/* Append path, each component percent-encoded, '/' kept, to *url. */
static int url_append_path(CURL *h, char **url, const char *path)
{
	size_t cap = strlen(*url) + 3 * strlen(path) + 1;
	char *u = malloc(cap);
	if (!u)
		return -ENOMEM;
	size_t len = strlen(*url);
	memcpy(u, *url, len + 1);
	const char *p = path;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		char *esc = curl_easy_escape(h, p, (int)n);
		if (!esc) {
			free(u);
			return -ENOMEM;
		}
		size_t el = strlen(esc);
		memcpy(u + len, esc, el);
		len += el;
		curl_free(esc);
		if (!slash)
			break;
		u[len++] = '/';
		p = slash + 1;
	}
	u[len] = 0;
	free(*url);
	*url = u;
	return 0;
}

/*
 * Start a request for method on endpoint (like "/v1/files/"), followed by
 * path (checked and percent-encoded) if not NULL.
 */
static int call_begin(struct call *k, struct dmar_client *c, const char *method, const char *endpoint,
		      const char *path, struct dmar_error *err)
{
	memset(k, 0, sizeof(*k));
	k->c = c;
	k->err = err;
	k->resp_max = DMAR_JSON_MAX;
	if (path) {
		int r = dmar_wire_path_check(path, err);
		if (r < 0)
			return r;
	}
	k->h = pool_get(c);
	if (!k->h)
		return -ENOMEM;
	char *url = NULL;
	if (asprintf(&url, "%s%s", c->url, endpoint) < 0)
		return -ENOMEM;
	if (path && url_append_path(k->h, &url, path) < 0) {
		free(url);
		return -ENOMEM;
	}
	CURL *h = k->h;
	curl_easy_setopt(h, CURLOPT_URL, url);
	free(url); /* curl keeps its own copy of every string option */
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") == 0 ? NULL : method);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for DNS timeouts */
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, DMAR_STALL_SECONDS);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, k->errbuf);
	curl_easy_setopt(h, CURLOPT_SHARE, c->share);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	if (c->tls_ca)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->tls_ca);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, call_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, k);
	/* "verbose" only routes events to call_debug, which counts; nothing is printed */
	curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, call_debug);
	curl_easy_setopt(h, CURLOPT_DEBUGDATA, k);
	curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
	/* No "Expect: 100-continue": it costs a round trip (or curl's 1 s
	 * wait) before every large body, and bodies here fit the peer's limit
	 * by construction. */
	if (call_header(k, "Expect:") < 0)
		return -ENOMEM;
	if (c->auth && call_header(k, c->auth) < 0)
		return -ENOMEM;
	return 0;
}

/* An in-memory body (curl sends it from data, which must outlive the call). */
static int call_body(struct call *k, const char *ctype, const void *data, size_t len)
{
	char line[128];
	snprintf(line, sizeof(line), "Content-Type: %s", ctype);
	if (call_header(k, line) < 0)
		return -ENOMEM;
	curl_easy_setopt(k->h, CURLOPT_POSTFIELDS, data ? data : "");
	curl_easy_setopt(k->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	return 0;
}

static int transport_error(struct call *k, CURLcode rc)
{
	long os = 0;
	curl_easy_getinfo(k->h, CURLINFO_OS_ERRNO, &os);
	const char *detail = k->errbuf[0] ? k->errbuf : curl_easy_strerror(rc);
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return dmar_error_set(k->err, -EHOSTUNREACH, "%s: cannot resolve the host (%s)", k->c->label,
				      detail);
	case CURLE_COULDNT_CONNECT:
		if (os == EHOSTUNREACH || os == ENETUNREACH)
			return dmar_error_set(k->err, -EHOSTUNREACH, "%s: host unreachable", k->c->label);
		if (os == ETIMEDOUT)
			return dmar_error_set(k->err, -ETIMEDOUT, "%s: connection timed out", k->c->label);
		return dmar_error_set(k->err, -ECONNREFUSED, "%s: connection refused", k->c->label);
	case CURLE_OPERATION_TIMEDOUT:
		return dmar_error_set(k->err, -ETIMEDOUT, "%s: timed out (%s)", k->c->label, detail);
	default:
		return dmar_error_set(k->err, -EIO, "%s: %s", k->c->label, detail);
	}
}

/* Run the request.  0 when an HTTP answer arrived (k->status says which),
 * else the transport error or a callback's. */
static int call_perform(struct call *k)
{
	curl_easy_setopt(k->h, CURLOPT_HTTPHEADER, k->hdrs);
	CURLcode rc = curl_easy_perform(k->h);
	long nc = 0;
	if (curl_easy_getinfo(k->h, CURLINFO_NUM_CONNECTS, &nc) == CURLE_OK && nc > 0)
		k->connects = (uint64_t)nc;
	long st = 0;
	k->answered = curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &st) == CURLE_OK && st > 0;
	if (k->cb_err)
		return k->cb_err;
	/* A node that refuses a request while its body is still being sent
	 * (507: the arena is full) answers at once and closes: the send then
	 * fails after the answer arrived.  The answer is what counts (an EIO
	 * here made the same full arena look like a broken link). */
	if (rc != CURLE_OK && !(k->answered && st >= 400 && (rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR)))
		return transport_error(k, rc);
	k->status = st;
	return 0;
}

static void call_end(struct call *k, struct tally *t)
{
	if (t) {
		t->wire += k->wire;
		t->requests += k->answered;
		t->connects += k->connects;
	}
	curl_slist_free_all(k->hdrs);
	free(k->resp);
	if (k->h)
		pool_put(k->c, k->h);
	k->h = NULL;
	k->hdrs = NULL;
	k->resp = NULL;
}

/* The errno a status means when the answer names none. */
static int status_errno(long status)
{
	switch (status) {
	case 400: return -EINVAL;
	case 401: return -EKEYREJECTED;
	case 403: return -EACCES;
	case 404: return -ENOENT;
	case 409: return -EEXIST;
	case 412: return -EEXIST;
	case 413: return -EFBIG;
	case 422: return -EILSEQ;
	case 502: return -EHOSTUNREACH;
	case 503: return -EAGAIN;
	case 504: return -ETIMEDOUT;
	case 507: return -ENOSPC;
	default: return -EIO;
	}
}

static json_t *resp_json(const struct call *k)
{
	if (!k->resp_len)
		return NULL;
	return json_loadb((const char *)k->resp, k->resp_len, 0, NULL);
}

/*
 * A non-2xx answer as a negative errno, the peer's message in err.  A 401
 * is -EKEYREJECTED whatever the body says (a proxy's 401 has no errno);
 * 412 is the noreplace precondition: -EEXIST.  If answer is not NULL it
 * gets the parsed body (or NULL).
 */
static int call_http_error(struct call *k, json_t **answer)
{
	json_t *j = resp_json(k);
	const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
	const char *name = j ? json_string_value(json_object_get(j, "errno")) : NULL;
	int code;
	if (k->status == 401)
		code = -EKEYREJECTED;
	else if (k->status == 412)
		code = -EEXIST;
	else if (name)
		code = dmar_wire_errno_from_name(name);
	else
		code = status_errno(k->status);
	if (msg)
		dmar_error_set(k->err, code, "%s: %s", k->c->label, msg);
	else if (k->status == 401)
		dmar_error_set(k->err, code, "%s: token rejected (HTTP 401)", k->c->label);
	else
		dmar_error_set(k->err, code, "%s: HTTP %ld", k->c->label, k->status);
	if (answer)
		*answer = j;
	else
		json_decref(j);
	return code;
}

static bool ok_status(long s)
{
	return s >= 200 && s < 300;
}

/* A 2xx answer that must be a JSON object: *out (if not NULL) gets it. */
static int call_json_answer(struct call *k, json_t **out)
{
	if (!out)
		return 0;
	json_error_t je;
	json_t *j = json_loadb((const char *)k->resp, k->resp_len, 0, &je);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return dmar_error_set(k->err, -EBADMSG, "%s: answer is not a JSON object%s%s", k->c->label,
				      j ? "" : ": ", j ? "" : je.text);
	}
	*out = j;
	return 0;
}

/* The simple calls: method, endpoint, optional path and JSON body, and the
 * JSON answer in *out (may be NULL). */
static int simple_json(struct dmar_client *c, const char *method, const char *endpoint, const char *path,
		       json_t *body, json_t **out, struct tally *t, struct dmar_error *err)
{
	struct call k;
	char *text = NULL;
	int r = call_begin(&k, c, method, endpoint, path, err);
	if (r < 0)
		goto out;
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text) {
			r = -ENOMEM;
			goto out;
		}
		if ((r = call_body(&k, "application/json", text, strlen(text))) < 0)
			goto out;
	}
	if ((r = call_perform(&k)) < 0)
		goto out;
	if (t)
		t->rounds++;
	if (!ok_status(k.status))
		r = call_http_error(&k, NULL);
	else
		r = call_json_answer(&k, out);
out:
	call_end(&k, t);
	free(text);
	return r;
}

int dmar_client_info(struct dmar_client *c, json_t **out, struct dmar_error *err)
{
	return simple_json(c, "GET", "/v1/node", NULL, NULL, out, NULL, err);
}

int dmar_client_stat(struct dmar_client *c, const char *path, json_t **out, struct dmar_error *err)
{
	return simple_json(c, "GET", "/v1/files/", path, NULL, out, NULL, err);
}

int dmar_client_remove(struct dmar_client *c, const char *path, struct dmar_error *err)
{
	return simple_json(c, "DELETE", "/v1/files/", path, NULL, NULL, NULL, err);
}

int dmar_client_mkdir(struct dmar_client *c, const char *path, uint32_t mode, struct dmar_error *err)
{
	json_t *body = json_pack("{s:I}", "mode", (json_int_t)(mode & 07777));
	if (!body)
		return -ENOMEM;
	int r = simple_json(c, "PUT", "/v1/dirs/", path, body, NULL, NULL, err);
	json_decref(body);
	return r;
}

int dmar_client_transfer(struct dmar_client *c, const char *path, const char *to, const char *dest, json_t **out,
			 struct dmar_error *err)
{
	int r = dmar_wire_path_check(path, err);
	if (r < 0 || (r = dmar_wire_path_check(dest, err)) < 0)
		return r;
	json_t *body = json_pack("{s:s, s:s, s:s}", "path", path, "to", to, "dest", dest);
	if (!body)
		return dmar_error_set(err, -EINVAL, "transfer: peer name is not UTF-8");
	json_t *ans = NULL;
	r = simple_json(c, "POST", "/v1/transfers", NULL, body, out ? &ans : NULL, NULL, err);
	json_decref(body);
	if (r == 0 && out)
		*out = ans;
	return r;
}

int dmar_client_recipe(struct dmar_client *c, const char *path, struct dmar_recipe *out, struct dmar_error *err)
{
	struct call k;
	int r = call_begin(&k, c, "GET", "/v1/recipes/", path, err);
	if (r < 0)
		goto out;
	k.resp_max = dmar_recipe_wire_size(DMAR_RECIPE_MAX_ENTRIES);
	if ((r = call_perform(&k)) < 0)
		goto out;
	if (!ok_status(k.status)) {
		r = call_http_error(&k, NULL);
		goto out;
	}
	struct dmar_error perr = { 0 };
	r = dmar_recipe_parse(k.resp, k.resp_len, out, &perr);
	if (r < 0)
		dmar_error_set(err, r, "%s: %s: %s", c->label, path, perr.msg);
out:
	call_end(&k, NULL);
	return r;
}

/* ---- query and commit ----------------------------------------------------- */

/* One query request for ids[0..n), n <= DMAR_QUERY_MAX. */
static int query_one(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing, struct tally *t,
		     struct dmar_error *err)
{
	struct call k;
	int r = call_begin(&k, c, "POST", "/v1/chunks/query", NULL, err);
	if (r < 0)
		goto out;
	k.resp_max = n * DMAR_HASH_SIZE;
	if ((r = call_body(&k, "application/octet-stream", ids, n * DMAR_HASH_SIZE)) < 0)
		goto out;
	if ((r = call_perform(&k)) < 0)
		goto out;
	t->rounds++;
	if (!ok_status(k.status)) {
		r = call_http_error(&k, NULL);
		goto out;
	}
	/* The missing ids come back in request order: one merge pass maps them
	 * onto flags, and anything out of order or unasked is a broken peer. */
	if (k.resp_len % DMAR_HASH_SIZE) {
		r = dmar_error_set(err, -EBADMSG, "%s: query answer of %zu bytes is not a list of ids", c->label,
				   k.resp_len);
		goto out;
	}
	size_t m = k.resp_len / DMAR_HASH_SIZE, j = 0;
	for (size_t i = 0; i < n; i++) {
		missing[i] = j < m && memcmp(ids[i].b, k.resp + j * DMAR_HASH_SIZE, DMAR_HASH_SIZE) == 0;
		j += missing[i];
	}
	if (j != m)
		r = dmar_error_set(err, -EBADMSG, "%s: query answer lists ids that were not asked, or out of order",
				   c->label);
out:
	call_end(&k, t);
	return r;
}

static int query_all(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing, struct tally *t,
		     struct dmar_error *err)
{
	for (size_t i = 0; i < n; i += DMAR_QUERY_MAX) {
		size_t m = n - i < DMAR_QUERY_MAX ? n - i : DMAR_QUERY_MAX;
		int r = query_one(c, ids + i, m, missing + i, t, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int dmar_client_query(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing,
		      struct dmar_error *err)
{
	struct tally t = { 0 };
	uint8_t *tmp = n ? malloc(n) : NULL;
	if (n && !tmp)
		return -ENOMEM;
	int r = query_all(c, ids, n, tmp, &t, err);
	if (r == 0 && n)
		memcpy(missing, tmp, n); /* out-params only on success */
	free(tmp);
	return r;
}

#define CT_RECIPE "application/x-dmar-recipe"
#define CT_RECIPE_SHORT "application/x-dmar-recipe-short"

/* PUT the recipe (ctype: full or short); *status the HTTP status (0 if
 * none came).  content: the recipe's content id, sent as X-Dmar-Content
 * (NULL: not sent), so that a peer holding that content under another
 * name makes the file from it without reading the recipe. */
static int commit_one(struct dmar_client *c, const char *path, const char *ctype, const uint8_t *recipe, size_t len,
		      const struct dmar_id *content, bool noreplace, json_t **out, struct tally *t, long *status,
		      struct dmar_error *err)
{
	struct call k;
	int r = call_begin(&k, c, "PUT", "/v1/files/", path, err);
	if (r < 0)
		goto out;
	if (noreplace && (r = call_header(&k, "If-None-Match: *")) < 0)
		goto out;
	if (content) {
		char h[32 + DMAR_HASH_HEX_SIZE];
		memcpy(h, "X-Dmar-Content: ", 16);
		dmar_hex(content->b, DMAR_HASH_SIZE, h + 16);
		if ((r = call_header(&k, h)) < 0)
			goto out;
	}
	/* A refusal as a bitmap over the recipe, not an id list (push). */
	if ((r = call_header(&k, "X-Dmar-Missing-As: bits")) < 0)
		goto out;
	if ((r = call_body(&k, ctype, recipe, len)) < 0)
		goto out;
	if ((r = call_perform(&k)) < 0)
		goto out;
	t->rounds++;
	*status = k.status;
	if (!ok_status(k.status)) {
		json_t *ans = NULL;
		r = call_http_error(&k, &ans);
		if (r == -ENODATA && out && ans)
			*out = ans;
		else
			json_decref(ans);
		goto out;
	}
	r = call_json_answer(&k, out);
out:
	call_end(&k, t);
	return r;
}

static uint8_t *recipe_bytes(const struct dmar_recipe *r, size_t *len, struct dmar_id *id)
{
	*len = dmar_recipe_wire_size(r->n);
	uint8_t *b = malloc(*len);
	if (b)
		dmar_recipe_write(r, b, id);
	return b;
}

int dmar_client_commit(struct dmar_client *c, const char *path, const struct dmar_recipe *r, bool noreplace,
		       json_t **out, struct dmar_error *err)
{
	size_t len;
	uint8_t *b = recipe_bytes(r, &len, NULL);
	if (!b)
		return -ENOMEM;
	struct tally t = { 0 };
	long status = 0;
	int ret = commit_one(c, path, CT_RECIPE, b, len, NULL, noreplace, out, &t, &status, err);
	free(b);
	return ret;
}

/* ---- a set of distinct chunk ids ------------------------------------------ */

/*
 * Open addressing over the ids' first 8 bytes (SHA-256 output is uniform,
 * so no further hashing).  ids[] is kept dense and in first-seen order, so
 * it can be sent as an id list as it is.
 */
struct idset {
	struct dmar_id *ids;
	uint32_t *hint; /* push: the longest skip + len seen, a lower bound of the chunk's length */
	uint32_t *slot; /* index + 1; 0 empty */
	size_t n, mask;
};

static uint64_t id_key(const struct dmar_id *id)
{
	uint64_t k;
	memcpy(&k, id->b, sizeof(k));
	return k;
}

static int idset_init(struct idset *s, size_t max)
{
	memset(s, 0, sizeof(*s));
	size_t cap = 16;
	while (cap < 2 * max)
		cap *= 2;
	s->slot = calloc(cap, sizeof(*s->slot));
	s->ids = malloc((max ? max : 1) * sizeof(*s->ids));
	s->hint = malloc((max ? max : 1) * sizeof(*s->hint));
	s->mask = cap - 1;
	if (!s->slot || !s->ids || !s->hint)
		return -ENOMEM;
	return 0;
}

static void idset_free(struct idset *s)
{
	free(s->ids);
	free(s->hint);
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

/* The index of id, or -1. */
static int64_t idset_find(const struct idset *s, const struct dmar_id *id)
{
	for (size_t i = id_key(id) & s->mask;; i = (i + 1) & s->mask) {
		uint32_t v = s->slot[i];
		if (!v)
			return -1;
		if (memcmp(s->ids[v - 1].b, id->b, DMAR_HASH_SIZE) == 0)
			return v - 1;
	}
}

/* Add id (capacity was reserved by idset_init); returns its index. */
static size_t idset_add(struct idset *s, const struct dmar_id *id, uint32_t hint)
{
	size_t i = id_key(id) & s->mask;
	for (;; i = (i + 1) & s->mask) {
		uint32_t v = s->slot[i];
		if (!v)
			break;
		if (memcmp(s->ids[v - 1].b, id->b, DMAR_HASH_SIZE) == 0) {
			if (hint > s->hint[v - 1])
				s->hint[v - 1] = hint;
			return v - 1;
		}
	}
	s->ids[s->n] = *id;
	s->hint[s->n] = hint;
	s->slot[i] = (uint32_t)++s->n;
	return s->n - 1;
}

/* ---- the transfer engines' shared state ----------------------------------- */

struct engine {
	struct dmar_client *c;
	struct idset set;
	atomic_int failed; /* set once by the first failing stream */
	pthread_mutex_t lock;
	struct dmar_error err;        /* the first failure; protected by lock */
	struct dmar_xfer_stats st;    /* protected by lock */
	dmar_xfer_progress_fn progress;
	void *pctx;
	struct timespec t0;
};

static double elapsed(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void engine_init(struct engine *e, struct dmar_client *c, dmar_xfer_progress_fn progress, void *pctx)
{
	memset(e, 0, sizeof(*e));
	e->c = c;
	e->progress = progress;
	e->pctx = pctx;
	pthread_mutex_init(&e->lock, NULL);
	clock_gettime(CLOCK_MONOTONIC, &e->t0);
}

/* Record a stream's failure; the first one wins and stops the others,
 * but for a plain I/O error, which the peer's own answer (ENOSPC from a
 * stream whose request was answered) replaces: a full arena made one
 * stream's connection close under it while another read the 507. */
static void engine_fail(struct engine *e, int code, const struct dmar_error *err)
{
	pthread_mutex_lock(&e->lock);
	if (e->err.code == -EIO && code != -EIO && code != -ECANCELED)
		memset(&e->err, 0, sizeof(e->err));
	if (!e->err.code) {
		if (err && err->code)
			dmar_error_set(&e->err, code, "%s", err->msg);
		else
			dmar_error_errno(&e->err, code, e->c->label);
		e->err.code = code;
	}
	pthread_mutex_unlock(&e->lock);
	atomic_store(&e->failed, 1);
}

/* Add a request's figures and tell the caller, under the lock so progress
 * is never called twice at once. */
static void engine_account(struct engine *e, uint64_t chunks, uint64_t bytes, const struct call *k)
{
	pthread_mutex_lock(&e->lock);
	e->st.sent_chunks += chunks;
	e->st.chunk_bytes += bytes;
	e->st.wire_bytes += k->wire;
	e->st.requests += k->answered;
	e->st.connects += k->connects;
	e->st.seconds = elapsed(&e->t0);
	if (e->progress)
		e->progress(e->pctx, &e->st);
	pthread_mutex_unlock(&e->lock);
}

/* Run fn on nthreads threads (the calling one among them) and wait. */
static int run_streams(void *(*fn)(void *), void *args, size_t arg_size, unsigned nthreads)
{
	pthread_t *tid = calloc(nthreads, sizeof(*tid));
	if (!tid)
		return -ENOMEM;
	unsigned started = 1;
	for (; started < nthreads; started++)
		if (pthread_create(&tid[started], NULL, fn, (char *)args + started * arg_size) != 0)
			break; /* fewer streams: the work is shared, not lost */
	fn(args);
	for (unsigned i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	free(tid);
	return 0;
}

static void engine_finish(struct engine *e, struct dmar_xfer_stats *st, int r, struct dmar_error *err)
{
	e->st.seconds = elapsed(&e->t0);
	if (e->progress)
		e->progress(e->pctx, &e->st);
	if (st)
		*st = e->st;
	if (r < 0 && e->err.code && err)
		dmar_error_set(err, r, "%s", e->err.msg);
	pthread_mutex_destroy(&e->lock);
	idset_free(&e->set);
}

/* ---- push ----------------------------------------------------------------- */

struct push {
	struct engine e;
	const struct dmar_chunk_source *src;
	const uint32_t *todo; /* set indices to upload in this phase */
	size_t ntodo;
	atomic_size_t next;   /* the next todo entry a stream takes */
	bool second_try;      /* this phase re-sends 422'd chunks: no third chance */
	char upload[32];      /* "X-Dmar-Upload: ..." of this transfer (net/wire.h) */
	uint32_t *retry;      /* 422'd chunks for the next phase; protected by e.lock */
	size_t nretry;
};

struct push_rec {
	uint8_t h[DMAR_BATCH_REC_SIZE];
	struct dmar_wire_chunk src;  /* as the source filled it, for put */
	const uint8_t *payload;      /* what goes on the wire */
	uint32_t stored;
	uint32_t idx;
	bool compressible;           /* the source's zstd, or a raw chunk that passed the probe */
};

struct push_stream {
	struct push *p;
	struct dmar_zchunk *z; /* per-chunk frames, level 1, and the probe */
	unsigned misses;  /* probes that failed in a row */
	unsigned skipped; /* chunks not probed since the last probe */
	uint8_t *scratch; /* compressed payloads of the batch */
	size_t scratch_cap, scratch_used;
	struct push_rec rec[DMAR_BATCH_CHUNKS];
	unsigned n;
	uint64_t raw_bytes, zable_bytes; /* the batch's decoded bytes, those of compressible chunks */
	/* whole-batch compression (Content-Encoding: zstd) */
	ZSTD_CCtx *bzc;   /* DMAR_BATCH_ZSTD_LEVEL, standard frame */
	ZSTD_DCtx *dz;    /* decodes the source's zstd chunks */
	uint8_t *zbody;   /* the compressed body */
	size_t zbody_cap, zbody_len;
	uint8_t *plain;   /* one decoded chunk (DMAR_WIRE_CHUNK_MAX) */
	uint8_t hdr[DMAR_BATCH_HDR_SIZE];
	/* read cursor: part 0 is the batch header, then 2 parts a record */
	size_t part, off;
	curl_off_t body;
	uint64_t requests;
};

/*
 * The compress policy's probe (codec/compress.h) for the stream's next
 * raw chunk, but a long run of
 * incompressible chunks -- random data, media, compressed archives: on a
 * 1 GiB random file the probes are 5-6 % of both nodes' CPU (perf,
 * bench-net (a)) -- is probed only one chunk in DMAR_PROBE_STRIDE after
 * DMAR_PROBE_RUN failures in a row, the others taken as incompressible,
 * until a probe passes.  After such a run, when the file turns
 * compressible, at most STRIDE - 1 chunks of the new kind go raw; a run
 * shorter than DMAR_PROBE_RUN (text every few chunks among random ones, a
 * tar of .gz and text members) is probed whole.  Chunks too small for the
 * sampled probe say nothing about their neighbours and leave the run as
 * it is.
 */
static bool stream_probe(struct push_stream *s, const struct dmar_wire_chunk *w)
{
	if (w->len < DMAR_COMPRESS_SAMPLED)
		return dmar_zchunk_probe(s->z, w->payload, w->len);
	if (s->misses >= DMAR_PROBE_RUN && ++s->skipped < DMAR_PROBE_STRIDE)
		return false;
	s->skipped = 0;
	if (dmar_zchunk_probe(s->z, w->payload, w->len)) {
		s->misses = 0;
		return true;
	}
	s->misses++;
	return false;
}

static void batch_release(struct push_stream *s)
{
	for (unsigned i = 0; i < s->n; i++)
		if (s->p->src->put)
			s->p->src->put(s->p->src->ctx, &s->rec[i].src);
	s->n = 0;
	s->scratch_used = 0;
	s->raw_bytes = s->zable_bytes = 0;
	s->zbody_len = 0;
}

/* Take chunks from the shared cursor until the batch is full.  Returns the
 * number taken (0: nothing left) or a negative errno. */
static int batch_fill(struct push_stream *s, struct dmar_error *err)
{
	struct push *p = s->p;
	size_t bytes = 0;
	char hex[17];
	while (s->n < DMAR_BATCH_CHUNKS && bytes < DMAR_BATCH_BYTES) {
		size_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->ntodo)
			break;
		uint32_t idx = p->todo[i];
		const struct dmar_id *id = &p->e.set.ids[idx];
		struct push_rec *rec = &s->rec[s->n];
		memset(&rec->src, 0, sizeof(rec->src));
		int r = p->src->get(p->src->ctx, id, p->e.set.hint[idx], &rec->src);
		if (r < 0) {
			dmar_hex(id->b, 8, hex);
			return dmar_error_set(err, r, "push: chunk %s...: %s", hex, strerror(-r));
		}
		s->n++; /* from here on batch_release puts it back */
		const struct dmar_wire_chunk *w = &rec->src;
		if (memcmp(w->id.b, id->b, DMAR_HASH_SIZE) != 0 || w->len == 0 || w->len > DMAR_WIRE_CHUNK_MAX ||
		    (w->enc == DMAR_WIRE_RAW && w->stored != w->len) ||
		    (w->enc == DMAR_WIRE_ZSTD && (w->stored == 0 || w->stored > ZSTD_COMPRESSBOUND(w->len))) ||
		    (w->enc != DMAR_WIRE_RAW && w->enc != DMAR_WIRE_ZSTD)) {
			dmar_hex(id->b, 8, hex);
			return dmar_error_set(err, -EINVAL, "push: chunk %s...: the source gave a malformed chunk",
					      hex);
		}
		rec->idx = idx;
		/* A chunk its source already found incompressible skips the
		 * probe (stream_probe says what the probes cost). */
		rec->compressible = w->enc == DMAR_WIRE_ZSTD || (!w->tried && stream_probe(s, w));
		s->raw_bytes += w->len;
		if (rec->compressible)
			s->zable_bytes += w->len;
		/* Counted decoded: a compressible batch goes compressed as a whole. */
		bytes += DMAR_BATCH_REC_SIZE + w->len;
	}
	return (int)s->n;
}

/* The per-chunk encoding (an incompressible batch, or one whole-batch
 * compression did not shrink): compressible raw chunks as level-1 frames. */
static void batch_per_chunk(struct push_stream *s)
{
	s->scratch_used = 0;
	for (unsigned i = 0; i < s->n; i++) {
		struct push_rec *rec = &s->rec[i];
		const struct dmar_wire_chunk *w = &rec->src;
		struct dmar_wire_chunk out = *w;
		if (w->enc == DMAR_WIRE_RAW && rec->compressible) {
			size_t z = dmar_zchunk_compress(s->z, s->scratch + s->scratch_used,
							s->scratch_cap - s->scratch_used, w->payload, w->len);
			if (z) {
				out.enc = DMAR_WIRE_ZSTD;
				out.stored = (uint32_t)z;
				out.payload = s->scratch + s->scratch_used;
				s->scratch_used += z;
			}
		}
		dmar_batch_write_record(rec->h, &out);
		rec->payload = out.payload;
		rec->stored = out.stored;
	}
}

static int zfeed(struct push_stream *s, const void *p, size_t n, ZSTD_EndDirective end)
{
	ZSTD_inBuffer in = { p, n, 0 };
	for (;;) {
		ZSTD_outBuffer out = { s->zbody, s->zbody_cap, s->zbody_len };
		size_t r = ZSTD_compressStream2(s->bzc, &out, &in, end);
		s->zbody_len = out.pos;
		if (ZSTD_isError(r))
			return -EIO;
		if (end == ZSTD_e_end ? r == 0 : in.pos == in.size)
			return 0;
		if (out.pos == out.size)
			return -ENOSPC; /* bigger than it was worth */
	}
}

/*
 * The whole batch -- header, records with raw payloads (the source's zstd
 * chunks decoded) -- as one standard zstd frame, DMAR_BATCH_ZSTD_LEVEL, in s->zbody.
 * 0, or a negative errno when it failed or would not pay (compress.h's
 * rule): the batch then goes per chunk.
 */
static int batch_compress(struct push_stream *s)
{
	uint64_t plain = DMAR_BATCH_HDR_SIZE + (uint64_t)s->n * DMAR_BATCH_REC_SIZE + s->raw_bytes;
	size_t want = (size_t)(plain - plain / 32);
	if (want > s->zbody_cap) {
		free(s->zbody);
		s->zbody_cap = 0;
		if (!(s->zbody = malloc(want)))
			return -ENOMEM;
		s->zbody_cap = want;
	}
	size_t cap = s->zbody_cap;
	s->zbody_cap = want; /* no room past the 3 % mark: zfeed gives up there */
	s->zbody_len = 0;
	ZSTD_CCtx_reset(s->bzc, ZSTD_reset_session_only);
	uint8_t hdr[DMAR_BATCH_HDR_SIZE];
	dmar_batch_write_header(hdr, s->n);
	int r = zfeed(s, hdr, sizeof(hdr), ZSTD_e_continue);
	for (unsigned i = 0; i < s->n && r == 0; i++) {
		const struct dmar_wire_chunk *w = &s->rec[i].src;
		struct dmar_wire_chunk out = *w;
		if (w->enc == DMAR_WIRE_ZSTD) {
			size_t d = ZSTD_decompressDCtx(s->dz, s->plain, DMAR_WIRE_CHUNK_MAX, w->payload, w->stored);
			if (ZSTD_isError(d) || d != w->len) {
				r = -EILSEQ;
				break;
			}
			out.payload = s->plain;
		}
		out.enc = DMAR_WIRE_RAW;
		out.stored = out.len;
		uint8_t rh[DMAR_BATCH_REC_SIZE];
		dmar_batch_write_record(rh, &out);
		if ((r = zfeed(s, rh, sizeof(rh), ZSTD_e_continue)) == 0)
			r = zfeed(s, out.payload, out.len, ZSTD_e_continue);
	}
	if (r == 0)
		r = zfeed(s, NULL, 0, ZSTD_e_end);
	s->zbody_cap = cap;
	return r;
}

/* The bytes of part k of the batch body. */
static const uint8_t *batch_part(const struct push_stream *s, size_t k, size_t *len)
{
	if (k == 0) {
		*len = DMAR_BATCH_HDR_SIZE;
		return s->hdr;
	}
	const struct push_rec *rec = &s->rec[(k - 1) / 2];
	if ((k - 1) % 2 == 0) {
		*len = DMAR_BATCH_REC_SIZE;
		return rec->h;
	}
	*len = rec->stored;
	return rec->payload;
}

/* curl's read callback: the body is generated from the batch's parts as
 * curl's upload buffer drains. */
static size_t batch_read(char *buf, size_t size, size_t nitems, void *ud)
{
	struct push_stream *s = ud;
	if (atomic_load(&s->p->e.failed))
		return CURL_READFUNC_ABORT;
	size_t room = size * nitems, done = 0;
	size_t parts = 1 + 2 * (size_t)s->n;
	while (room && s->part < parts) {
		size_t len;
		const uint8_t *b = batch_part(s, s->part, &len);
		size_t take = len - s->off < room ? len - s->off : room;
		memcpy(buf + done, b + s->off, take);
		done += take;
		room -= take;
		s->off += take;
		if (s->off == len) {
			s->part++;
			s->off = 0;
		}
	}
	return done;
}

/* curl rewinds when it re-sends a request on a fresh connection (the
 * reused one turned out closed by the peer). */
static int batch_seek(void *ud, curl_off_t offset, int origin)
{
	struct push_stream *s = ud;
	if (origin != SEEK_SET || offset < 0 || offset > s->body)
		return CURL_SEEKFUNC_FAIL;
	s->part = 0;
	s->off = 0;
	size_t left = (size_t)offset, parts = 1 + 2 * (size_t)s->n;
	while (s->part < parts) {
		size_t len;
		batch_part(s, s->part, &len);
		if (left < len) {
			s->off = left;
			break;
		}
		left -= len;
		s->part++;
	}
	return CURL_SEEKFUNC_OK;
}

/* 422: the peer names the chunks that failed verification and stored the
 * others.  Queue each for one re-send (from the source again: a transient
 * fault in memory or on the way), or fail if this already was the re-send. */
static int batch_rejected(struct push_stream *s, struct call *k, uint64_t *ok_chunks, uint64_t *ok_bytes,
			  struct dmar_error *err)
{
	struct push *p = s->p;
	json_t *j = resp_json(k);
	json_t *bad = j ? json_object_get(j, "bad") : NULL;
	const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
	int r = 0;
	if (!json_is_array(bad) || json_array_size(bad) == 0 || json_array_size(bad) > s->n) {
		r = dmar_error_set(err, -EILSEQ, "%s: chunks rejected: %s", p->e.c->label,
				   msg ? msg : "(no list of bad chunks)");
		goto out;
	}
	bool rejected[DMAR_BATCH_CHUNKS] = { false };
	size_t i;
	json_t *v;
	json_array_foreach(bad, i, v) {
		struct dmar_id id;
		const char *hex = json_string_value(v);
		unsigned b = 0;
		if (hex && dmar_id_parse(hex, &id) == 0)
			for (; b < s->n; b++)
				if (memcmp(p->e.set.ids[s->rec[b].idx].b, id.b, DMAR_HASH_SIZE) == 0)
					break;
		if (!hex || b == s->n) {
			r = dmar_error_set(err, -EBADMSG, "%s: 422 lists a chunk that was not in the batch",
					   p->e.c->label);
			goto out;
		}
		if (p->second_try) {
			char h[17];
			dmar_hex(id.b, 8, h);
			r = dmar_error_set(err, -EILSEQ, "%s: chunk %s... rejected twice: %s", p->e.c->label, h,
					   msg ? msg : "does not match its id");
			goto out;
		}
		rejected[b] = true;
	}
	pthread_mutex_lock(&p->e.lock);
	for (unsigned b = 0; b < s->n; b++) {
		if (rejected[b])
			p->retry[p->nretry++] = s->rec[b].idx;
		else {
			(*ok_chunks)++;
			*ok_bytes += s->rec[b].src.len;
		}
	}
	pthread_mutex_unlock(&p->e.lock);
out:
	json_decref(j);
	return r;
}

static int batch_send(struct push_stream *s, struct dmar_error *err)
{
	struct push *p = s->p;
	struct call k;
	uint64_t ok_chunks = 0, ok_bytes = 0;
	int r = call_begin(&k, p->e.c, "POST", "/v1/chunks", NULL, err);
	if (r < 0)
		goto out;
	k.abort_flag = &p->e.failed;
	/* Mostly compressible: the whole body as one zstd stream, which sees
	 * across chunks (per-chunk level 1 cannot); else per chunk, the
	 * incompressible ones costing no more than the probe. */
	bool whole = s->zable_bytes && s->zable_bytes * 2 >= s->raw_bytes && batch_compress(s) == 0;
	if (!whole) {
		batch_per_chunk(s);
		dmar_batch_write_header(s->hdr, s->n);
		s->body = DMAR_BATCH_HDR_SIZE;
		for (unsigned i = 0; i < s->n; i++)
			s->body += DMAR_BATCH_REC_SIZE + s->rec[i].stored;
		s->part = s->off = 0;
	}
	if ((r = call_header(&k, "Content-Type: application/x-dmar-chunks")) < 0 ||
	    (r = call_header(&k, p->upload)) < 0)
		goto out;
	if (whole) {
		if ((r = call_header(&k, "Content-Encoding: zstd")) < 0)
			goto out;
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDS, s->zbody);
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->zbody_len);
	} else {
		curl_easy_setopt(k.h, CURLOPT_POST, 1L);
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, s->body);
		curl_easy_setopt(k.h, CURLOPT_READFUNCTION, batch_read);
		curl_easy_setopt(k.h, CURLOPT_READDATA, s);
		curl_easy_setopt(k.h, CURLOPT_SEEKFUNCTION, batch_seek);
		curl_easy_setopt(k.h, CURLOPT_SEEKDATA, s);
	}
	curl_easy_setopt(k.h, CURLOPT_UPLOAD_BUFFERSIZE, DMAR_BULK_BUFFER);
	r = call_perform(&k);
	if (r == -ECANCELED)
		goto out; /* another stream failed; its error is the one to report */
	if (r < 0)
		goto out;
	s->requests++;
	if (ok_status(k.status)) {
		for (unsigned i = 0; i < s->n; i++)
			ok_bytes += s->rec[i].src.len;
		ok_chunks = s->n;
	} else if (k.status == 422) {
		r = batch_rejected(s, &k, &ok_chunks, &ok_bytes, err);
	} else {
		r = call_http_error(&k, NULL);
	}
out:
	engine_account(&p->e, ok_chunks, ok_bytes, &k);
	call_end(&k, NULL);
	return r;
}

static void *push_stream_run(void *arg)
{
	struct push_stream *s = arg;
	struct push *p = s->p;
	while (!atomic_load(&p->e.failed)) {
		struct dmar_error err = { 0 };
		int r = batch_fill(s, &err);
		if (r == 0)
			break; /* nothing left to take */
		if (r > 0)
			r = batch_send(s, &err);
		batch_release(s);
		if (r < 0) {
			if (r != -ECANCELED)
				engine_fail(&p->e, r, &err);
			break;
		}
	}
	return NULL;
}

/* Upload set indices todo[0..n) over the streams; chunks the peer rejects
 * go once more in a second phase.  Adds its rounds to *rounds. */
static int push_upload(struct push *p, const uint32_t *todo, size_t n, uint64_t *rounds)
{
	unsigned ns = p->e.c->streams;
	struct push_stream *s = calloc(ns, sizeof(*s));
	uint32_t *retry = malloc((n ? n : 1) * sizeof(*retry));
	int r = 0;
	if (!s || !retry) {
		r = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < ns; i++) {
		s[i].p = p;
		s[i].scratch_cap = DMAR_BATCH_BYTES + ZSTD_COMPRESSBOUND(DMAR_WIRE_CHUNK_MAX);
		s[i].scratch = malloc(s[i].scratch_cap);
		s[i].bzc = ZSTD_createCCtx();
		s[i].dz = ZSTD_createDCtx();
		s[i].plain = malloc(DMAR_WIRE_CHUNK_MAX);
		if (!s[i].scratch || dmar_zchunk_new(&s[i].z, 1, NULL) < 0 || !s[i].bzc || !s[i].dz || !s[i].plain) {
			r = -ENOMEM;
			goto out;
		}
		ZSTD_CCtx_setParameter(s[i].bzc, ZSTD_c_compressionLevel, DMAR_BATCH_ZSTD_LEVEL);
	}
	p->retry = retry;
	for (int phase = 0; phase < 2; phase++) {
		p->todo = todo;
		p->ntodo = n;
		p->nretry = 0;
		p->second_try = phase == 1;
		atomic_store(&p->next, 0);
		for (unsigned i = 0; i < ns; i++)
			s[i].requests = 0;
		/* No more streams than batches could keep busy. */
		size_t want = (n + DMAR_BATCH_CHUNKS - 1) / DMAR_BATCH_CHUNKS;
		unsigned nt = want < ns ? (unsigned)want : ns;
		if ((r = run_streams(push_stream_run, s, sizeof(*s), nt)) < 0)
			goto out;
		uint64_t most = 0;
		for (unsigned i = 0; i < nt; i++)
			if (s[i].requests > most)
				most = s[i].requests;
		*rounds += most; /* the streams ran side by side: the longest one counts */
		if (atomic_load(&p->e.failed)) {
			r = p->e.err.code ? p->e.err.code : -EIO;
			goto out;
		}
		/* Phase 1 reads the rejected list as its todo; a chunk rejected
		 * again there fails the push instead of queueing. */
		if (phase == 1 || !p->nretry)
			break;
		todo = retry;
		n = p->nretry;
		p->retry = NULL;
	}
out:
	if (s)
		for (unsigned i = 0; i < ns; i++) {
			free(s[i].scratch);
			dmar_zchunk_free(s[i].z);
			ZSTD_freeCCtx(s[i].bzc);
			ZSTD_freeDCtx(s[i].dz);
			free(s[i].zbody);
			free(s[i].plain);
		}
	free(s);
	free(retry);
	p->retry = NULL;
	return r;
}

/* The 409 answer's missing_bits (bit i: recipe entry i's chunk is
 * missing) as set indices in *todo, each once (seen: per set index). */
static int missing_from_bits(struct push *p, const struct dmar_recipe *r, const char *hex, uint8_t *seen,
			     uint32_t *todo, size_t *n, struct dmar_error *err)
{
	size_t nb = (r->n + 7) / 8;
	if (strlen(hex) != 2 * nb)
		return dmar_error_set(err, -EBADMSG, "%s: commit answer's missing_bits has %zu hex digits for %zu entries",
				      p->e.c->label, strlen(hex), r->n);
	memset(seen, 0, p->e.set.n ? p->e.set.n : 1);
	*n = 0;
	for (size_t j = 0; j < nb; j++) {
		int hi = dmar_hexval(hex[2 * j]), lo = dmar_hexval(hex[2 * j + 1]);
		if (hi < 0 || lo < 0)
			return dmar_error_set(err, -EBADMSG, "%s: commit answer's missing_bits is not hex", p->e.c->label);
		unsigned byte = (unsigned)(hi << 4 | lo);
		for (unsigned b = 0; b < 8 && byte; b++) {
			size_t i = j * 8 + b;
			if (!(byte & (1u << b)))
				continue;
			if (i >= r->n || r->e[i].kind != DMAR_RECIPE_CHUNK)
				return dmar_error_set(err, -EBADMSG,
						      "%s: commit answer's missing_bits marks entry %zu, not a chunk",
						      p->e.c->label, i);
			int64_t idx = idset_find(&p->e.set, &r->e[i].id);
			if (idx >= 0 && !seen[idx]) {
				seen[idx] = 1;
				todo[(*n)++] = (uint32_t)idx;
			}
		}
	}
	return 0;
}

/* The 409 answer's missing ids as set indices in *todo.  *requery when the
 * list was truncated (or is empty): then every chunk is queried again. */
static int missing_from_answer(struct push *p, json_t *ans, uint32_t *todo, size_t *n, bool *requery,
			       struct dmar_error *err)
{
	json_t *list = ans ? json_object_get(ans, "missing") : NULL;
	json_int_t count = ans ? json_integer_value(json_object_get(ans, "missing_count")) : 0;
	*n = 0;
	*requery = !json_is_array(list) || json_array_size(list) == 0 || count > (json_int_t)json_array_size(list);
	if (*requery)
		return 0;
	size_t i;
	json_t *v;
	json_array_foreach(list, i, v) {
		struct dmar_id id;
		const char *hex = json_string_value(v);
		int64_t idx = hex && dmar_id_parse(hex, &id) == 0 ? idset_find(&p->e.set, &id) : -1;
		if (idx < 0)
			return dmar_error_set(err, -EBADMSG, "%s: commit answer lists a chunk the recipe does not have",
					      p->e.c->label);
		if (*n < p->e.set.n)
			todo[(*n)++] = (uint32_t)idx;
	}
	return 0;
}

static int query_todo(struct push *p, uint8_t *missing, uint32_t *todo, size_t *n, struct tally *t,
		      struct dmar_error *err)
{
	int r = query_all(p->e.c, p->e.set.ids, p->e.set.n, missing, t, err);
	if (r < 0)
		return r;
	*n = 0;
	for (size_t i = 0; i < p->e.set.n; i++)
		if (missing[i])
			todo[(*n)++] = (uint32_t)i;
	return 0;
}

int dmar_client_push(struct dmar_client *c, const char *path, const struct dmar_recipe *r,
		     const struct dmar_id *cid, const struct dmar_chunk_source *src, unsigned flags,
		     dmar_xfer_progress_fn progress, void *pctx, struct dmar_xfer_stats *st, struct dmar_error *err)
{
	bool noreplace = flags & DMAR_PUSH_NOREPLACE;
	struct push p;
	memset(&p, 0, sizeof(p));
	engine_init(&p.e, c, progress, pctx);
	p.src = src;
	struct tally t = { 0 };
	uint8_t *missing = NULL, *rb = NULL, *sb = NULL;
	uint32_t *todo = NULL;
	size_t rlen = 0, slen = 0, ntodo = 0;
	int ret = dmar_wire_path_check(path, err);
	if (ret < 0)
		goto out;
	uint64_t upload;
	if ((ret = dmar_wire_upload_new(&upload)) < 0) {
		dmar_error_errno(err, ret, "getrandom");
		goto out;
	}
	snprintf(p.upload, sizeof(p.upload), "X-Dmar-Upload: %016" PRIx64, upload);
	p.e.st.logical = r->size;
	/* The recipe id from the content id: a file whose content id is
	 * known (a copy of one shipped before) is not hashed again. */
	struct dmar_id rid, content;
	if (cid) {
		content = *cid;
		dmar_recipe_id_of(r, r->n, &content, &rid);
	} else if ((ret = dmar_recipe_ids(r, &rid, &content)) < 0) {
		goto out;
	}
	/*
	 * Commit first: a file the peer holds (chunks shared with any of its
	 * files) costs one round trip, and a refusal says which chunks to
	 * send as a bitmap over the recipe (about what a have/want query
	 * costs).  The commit names each chunk by 8 bytes of its id (a short
	 * recipe: about 12 bytes an entry, where the recipe spends 48), so a
	 * new version of a file the peer has costs a quarter of its recipe,
	 * twice; the peer completes the ids and checks the result against
	 * the recipe id.  A peer that cannot (415), or whose chunks leave a
	 * prefix ambiguous, gets the full recipe.
	 */
	bool use_short = !atomic_load(&c->no_short);
	/* The content id goes with the first commit only: a refusal says
	 * the peer does not hold the content. */
	bool ask_content = true;
	if ((flags & DMAR_PUSH_CONTENT_FIRST) && use_short && r->n) {
		/* The peer likely holds the content: ask with the 80-byte
		 * header alone, not the recipe (393 KB for 1 GiB). */
		uint8_t head[DMAR_RECIPE_SHORT_HDR_SIZE];
		dmar_recipe_short_head_write(r, &rid, DMAR_RECIPE_SHORT_IDLEN, head);
		json_t *ans = NULL;
		struct dmar_error cerr = { 0 };
		long status = 0;
		ret = commit_one(c, path, CT_RECIPE_SHORT, head, sizeof(head), &content, noreplace, &ans, &t, &status,
				 &cerr);
		const char *resend = json_string_value(json_object_get(ans, "resend"));
		bool more = (ret == -ENODATA && resend && !strcmp(resend, "recipe")) || status == 415;
		if (status == 415) {
			atomic_store(&c->no_short, true);
			use_short = false;
		}
		json_decref(ans);
		if (ret == 0) {
			/* No set was built: every chunk entry counts. */
			for (size_t i = 0; i < r->n; i++)
				p.e.st.chunks += r->e[i].kind == DMAR_RECIPE_CHUNK;
			goto out;
		}
		if (!more) {
			dmar_error_set(err, ret, "%s", cerr.msg);
			goto out;
		}
		ask_content = false;
	}
	/*
	 * The distinct chunks, what a refusal's bitmap and the uploads index,
	 * only now: for a 1 GiB file they are 1.5 MiB of tables, which a
	 * content-only commit does not need, and fresh memory costs more to
	 * fault in (about 4 ms here) than that whole commit.
	 */
	if ((ret = idset_init(&p.e.set, r->n)) < 0)
		goto out;
	for (size_t i = 0; i < r->n; i++)
		if (r->e[i].kind == DMAR_RECIPE_CHUNK)
			idset_add(&p.e.set, &r->e[i].id, (uint32_t)(r->e[i].skip + r->e[i].len));
	p.e.st.chunks = p.e.set.n;
	missing = malloc(p.e.set.n ? p.e.set.n : 1);
	todo = malloc((p.e.set.n ? p.e.set.n : 1) * sizeof(*todo));
	if (!missing || !todo || !(sb = malloc(dmar_recipe_short_max_size(r->n)))) {
		ret = -ENOMEM;
		goto out;
	}
	slen = dmar_recipe_short_write(r, &rid, DMAR_RECIPE_SHORT_IDLEN, sb);
	for (int attempt = 0;;) {
		if (ntodo && (ret = push_upload(&p, todo, ntodo, &t.rounds)) < 0)
			goto out;
		ntodo = 0;
		json_t *ans = NULL;
		struct dmar_error cerr = { 0 };
		long status = 0;
		if (!use_short && !rb && !(rb = recipe_bytes(r, &rlen, NULL))) {
			ret = -ENOMEM;
			goto out;
		}
		ret = commit_one(c, path, use_short ? CT_RECIPE_SHORT : CT_RECIPE, use_short ? sb : rb,
				 use_short ? slen : rlen, ask_content ? &content : NULL, noreplace, &ans, &t, &status,
				 &cerr);
		ask_content = false;
		if (ret == 0) {
			json_decref(ans);
			break;
		}
		if (use_short && status == 415) {
			/* An older peer: full recipes from now on, and this
			 * refusal does not count as an attempt. */
			atomic_store(&c->no_short, true);
			use_short = false;
			json_decref(ans);
			continue;
		}
		if (ret != -ENODATA || attempt == DMAR_COMMIT_RETRIES + 1) {
			json_decref(ans);
			dmar_error_set(err, ret, "%s", cerr.msg);
			goto out;
		}
		attempt++;
		if (use_short && json_string_value(json_object_get(ans, "resend"))) {
			use_short = false;
			json_decref(ans);
			continue;
		}
		bool requery = false;
		const char *bits = json_string_value(json_object_get(ans, "missing_bits"));
		ret = bits ? missing_from_bits(&p, r, bits, missing, todo, &ntodo, err)
			   : missing_from_answer(&p, ans, todo, &ntodo, &requery, err);
		json_decref(ans);
		if (ret < 0)
			goto out;
		if (requery && (ret = query_todo(&p, missing, todo, &ntodo, &t, err)) < 0)
			goto out;
	}
out:
	/* wire bytes: the engine counted the uploads, t the rest */
	p.e.st.wire_bytes += t.wire;
	p.e.st.requests += t.requests;
	p.e.st.connects += t.connects;
	p.e.st.round_trips = t.rounds;
	if (ret < 0 && p.e.err.code)
		ret = p.e.err.code;
	engine_finish(&p.e, st, ret, err);
	free(missing);
	free(todo);
	free(rb);
	free(sb);
	return ret;
}

/* ---- pull ----------------------------------------------------------------- */

struct pull {
	struct engine e;
	const struct dmar_chunk_sink *sink;
	uint8_t *got; /* per set index: delivered; each index is written by the one stream that asked for it */
	atomic_size_t next;
};

struct pull_stream {
	struct pull *p;
	ZSTD_DCtx *dz;
	uint8_t *scratch; /* DMAR_WIRE_CHUNK_MAX decoded bytes */
	struct dmar_batch_parser *parser;
	size_t first, count; /* the set indices of the batch in flight */
	uint64_t chunks, bytes;
	uint64_t requests;
};

static int pull_record(void *ctx, const struct dmar_wire_chunk *c)
{
	struct pull_stream *s = ctx;
	struct pull *p = s->p;
	struct dmar_error verr = { 0 };
	char hex[17];
	/* In request order normally; any order is accepted as long as every
	 * record is one asked for in this batch and comes once. */
	int64_t idx = idset_find(&p->e.set, &c->id);
	if (idx < 0 || (size_t)idx < s->first || (size_t)idx >= s->first + s->count || p->got[idx]) {
		dmar_hex(c->id.b, 8, hex);
		struct dmar_error e = { 0 };
		dmar_error_set(&e, -EBADMSG, "%s: fetch answer has chunk %s..., not asked or twice", p->e.c->label,
			       hex);
		engine_fail(&p->e, -EBADMSG, &e);
		return -EBADMSG;
	}
	const uint8_t *decoded;
	int r = dmar_wire_chunk_verify(c, s->dz, s->scratch, &decoded, &verr);
	if (r < 0) {
		struct dmar_error e = { 0 };
		dmar_error_set(&e, r, "%s: %s", p->e.c->label, verr.msg);
		engine_fail(&p->e, r, &e);
		return r;
	}
	r = p->sink->put(p->sink->ctx, c, decoded);
	if (r < 0) {
		dmar_hex(c->id.b, 8, hex);
		struct dmar_error e = { 0 };
		dmar_error_set(&e, r, "pull: chunk %s...: %s", hex, strerror(-r));
		engine_fail(&p->e, r, &e);
		return r;
	}
	p->got[idx] = 1;
	s->chunks++;
	s->bytes += c->len;
	return 0;
}

static int pull_sink(void *ctx, const uint8_t *data, size_t n, struct dmar_error *err)
{
	struct pull_stream *s = ctx;
	struct dmar_error perr = { 0 };
	int r = dmar_batch_parser_feed(s->parser, data, n, &perr);
	if (r < 0 && perr.code)
		dmar_error_set(err, r, "%s: %s", s->p->e.c->label, perr.msg);
	return r;
}

static int pull_batch(struct pull_stream *s, struct dmar_error *err)
{
	struct pull *p = s->p;
	struct call k;
	s->chunks = s->bytes = 0;
	int r = dmar_batch_parser_new(&s->parser, (uint32_t)s->count, pull_record, s);
	if (r < 0)
		return r;
	if ((r = call_begin(&k, p->e.c, "POST", "/v1/chunks/fetch", NULL, err)) < 0)
		goto out;
	k.abort_flag = &p->e.failed;
	k.sink = pull_sink;
	k.sink_ctx = s;
	k.resp_max = 1u << 20; /* an error answer */
	if ((r = call_body(&k, "application/octet-stream", p->e.set.ids + s->first, s->count * DMAR_HASH_SIZE)) < 0)
		goto out;
	curl_easy_setopt(k.h, CURLOPT_BUFFERSIZE, DMAR_BULK_BUFFER);
	if ((r = call_perform(&k)) < 0)
		goto out;
	s->requests++;
	if (!ok_status(k.status)) {
		r = call_http_error(&k, NULL);
		goto out;
	}
	struct dmar_error perr = { 0 };
	if ((r = dmar_batch_parser_finish(s->parser, &perr)) < 0)
		dmar_error_set(err, r, "%s: %s", p->e.c->label, perr.msg);
out:
	engine_account(&p->e, s->chunks, s->bytes, &k);
	call_end(&k, NULL);
	dmar_batch_parser_free(s->parser);
	s->parser = NULL;
	return r;
}

static void *pull_stream_run(void *arg)
{
	struct pull_stream *s = arg;
	struct pull *p = s->p;
	while (!atomic_load(&p->e.failed)) {
		size_t first = atomic_fetch_add(&p->next, DMAR_FETCH_CHUNKS);
		if (first >= p->e.set.n)
			break;
		s->first = first;
		s->count = p->e.set.n - first < DMAR_FETCH_CHUNKS ? p->e.set.n - first : DMAR_FETCH_CHUNKS;
		struct dmar_error err = { 0 };
		int r = pull_batch(s, &err);
		if (r < 0 && r != -ECANCELED) {
			engine_fail(&p->e, r, &err);
			break;
		}
	}
	return NULL;
}

int dmar_client_pull(struct dmar_client *c, const struct dmar_id *ids, size_t n, const struct dmar_chunk_sink *sink,
		     dmar_xfer_progress_fn progress, void *pctx, struct dmar_xfer_stats *st, struct dmar_error *err)
{
	struct pull p;
	memset(&p, 0, sizeof(p));
	engine_init(&p.e, c, progress, pctx);
	p.sink = sink;
	unsigned ns = c->streams;
	struct pull_stream *s = NULL;
	int ret = idset_init(&p.e.set, n);
	if (ret < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		idset_add(&p.e.set, &ids[i], 0);
	p.e.st.chunks = p.e.set.n;
	size_t batches = (p.e.set.n + DMAR_FETCH_CHUNKS - 1) / DMAR_FETCH_CHUNKS;
	if (batches < ns)
		ns = (unsigned)batches;
	if (!ns)
		goto out;
	p.got = calloc(p.e.set.n, 1);
	s = calloc(ns, sizeof(*s));
	if (!p.got || !s) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < ns; i++) {
		s[i].p = &p;
		s[i].dz = ZSTD_createDCtx();
		s[i].scratch = malloc(DMAR_WIRE_CHUNK_MAX);
		if (!s[i].dz || !s[i].scratch) {
			ret = -ENOMEM;
			goto out;
		}
	}
	if ((ret = run_streams(pull_stream_run, s, sizeof(*s), ns)) < 0)
		goto out;
	uint64_t most = 0;
	for (unsigned i = 0; i < ns; i++)
		if (s[i].requests > most)
			most = s[i].requests;
	p.e.st.round_trips = most;
	p.e.st.logical = p.e.st.chunk_bytes;
	if (atomic_load(&p.e.failed))
		ret = p.e.err.code ? p.e.err.code : -EIO;
out:
	if (s)
		for (unsigned i = 0; i < ns; i++) {
			ZSTD_freeDCtx(s[i].dz);
			free(s[i].scratch);
		}
	free(s);
	free(p.got);
	engine_finish(&p.e, st, ret, err);
	return ret;
}
