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

#include "client_i.h"

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
	if (!(c->share = curl_share_init()) || !(c->held = dmar_idcache_new(CL_HELD_LOG2_BUCKETS)))
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
	dmar_idcache_free(c->held);
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

int cl_call_header(struct call *k, const char *line)
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
int cl_call_begin(struct call *k, struct dmar_client *c, const char *method, const char *endpoint,
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
	if (cl_call_header(k, "Expect:") < 0)
		return -ENOMEM;
	if (c->auth && cl_call_header(k, c->auth) < 0)
		return -ENOMEM;
	return 0;
}

/* An in-memory body (curl sends it from data, which must outlive the call). */
int cl_call_body(struct call *k, const char *ctype, const void *data, size_t len)
{
	char line[128];
	snprintf(line, sizeof(line), "Content-Type: %s", ctype);
	if (cl_call_header(k, line) < 0)
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
int cl_call_perform(struct call *k)
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

void cl_call_end(struct call *k, struct tally *t)
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

json_t *cl_resp_json(const struct call *k)
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
int cl_call_http_error(struct call *k, json_t **answer)
{
	json_t *j = cl_resp_json(k);
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

bool cl_ok_status(long s)
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
	int r = cl_call_begin(&k, c, method, endpoint, path, err);
	if (r < 0)
		goto out;
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text) {
			r = -ENOMEM;
			goto out;
		}
		if ((r = cl_call_body(&k, "application/json", text, strlen(text))) < 0)
			goto out;
	}
	if ((r = cl_call_perform(&k)) < 0)
		goto out;
	if (t)
		t->rounds++;
	if (!cl_ok_status(k.status))
		r = cl_call_http_error(&k, NULL);
	else
		r = call_json_answer(&k, out);
out:
	cl_call_end(&k, t);
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
	int r = cl_call_begin(&k, c, "GET", "/v1/recipes/", path, err);
	if (r < 0)
		goto out;
	k.resp_max = dmar_recipe_wire_size(DMAR_RECIPE_MAX_ENTRIES);
	if ((r = cl_call_perform(&k)) < 0)
		goto out;
	if (!cl_ok_status(k.status)) {
		r = cl_call_http_error(&k, NULL);
		goto out;
	}
	struct dmar_error perr = { 0 };
	r = dmar_recipe_parse(k.resp, k.resp_len, out, &perr);
	if (r < 0)
		dmar_error_set(err, r, "%s: %s: %s", c->label, path, perr.msg);
out:
	cl_call_end(&k, NULL);
	return r;
}

/* ---- query and commit ----------------------------------------------------- */

/* One query request for ids[0..n), n <= DMAR_QUERY_MAX. */
static int query_one(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing, struct tally *t,
		     struct dmar_error *err)
{
	struct call k;
	int r = cl_call_begin(&k, c, "POST", "/v1/chunks/query", NULL, err);
	if (r < 0)
		goto out;
	k.resp_max = n * DMAR_HASH_SIZE;
	if ((r = cl_call_body(&k, "application/octet-stream", ids, n * DMAR_HASH_SIZE)) < 0)
		goto out;
	if ((r = cl_call_perform(&k)) < 0)
		goto out;
	t->rounds++;
	if (!cl_ok_status(k.status)) {
		r = cl_call_http_error(&k, NULL);
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
	cl_call_end(&k, t);
	return r;
}

int cl_query_all(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing, struct tally *t,
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
	int r = cl_query_all(c, ids, n, tmp, &t, err);
	if (r == 0 && n)
		memcpy(missing, tmp, n); /* out-params only on success */
	free(tmp);
	return r;
}


/* PUT the recipe (q->ctype: full or short); *status the HTTP status (0 if
 * none came).  q->content: the recipe's content id, sent as
 * X-Dmar-Content, so that a peer holding that content under another name
 * makes the file from it without reading the recipe. */
int cl_commit_one(struct dmar_client *c, const char *path, const struct commit_req *q, json_t **out, struct tally *t,
		  long *status, struct dmar_error *err)
{
	struct call k;
	int r = cl_call_begin(&k, c, "PUT", "/v1/files/", path, err);
	if (r < 0)
		goto out;
	if (q->noreplace && (r = cl_call_header(&k, "If-None-Match: *")) < 0)
		goto out;
	if (q->content) {
		char h[32 + DMAR_HASH_HEX_SIZE];
		memcpy(h, "X-Dmar-Content: ", 16);
		dmar_hex(q->content->b, DMAR_HASH_SIZE, h + 16);
		if ((r = cl_call_header(&k, h)) < 0)
			goto out;
	}
	if ((q->upload && (r = cl_call_header(&k, q->upload)) < 0) ||
	    (q->relay && (r = cl_call_header(&k, q->relay)) < 0))
		goto out;
	/* A relayed commit answers when the nodes after the peer are done:
	 * no byte moves meanwhile, and the peer reports their stalls itself
	 * (TCP keepalive still notices a peer that vanished). */
	if (q->relay)
		curl_easy_setopt(k.h, CURLOPT_LOW_SPEED_TIME, 0L);
	/* A refusal as a bitmap over the recipe, not an id list (push). */
	if ((r = cl_call_header(&k, "X-Dmar-Missing-As: bits")) < 0)
		goto out;
	if ((r = cl_call_body(&k, q->ctype, q->recipe, q->len)) < 0)
		goto out;
	if ((r = cl_call_perform(&k)) < 0)
		goto out;
	t->rounds++;
	*status = k.status;
	if (!cl_ok_status(k.status)) {
		json_t *ans = NULL;
		r = cl_call_http_error(&k, &ans);
		if (r == -ENODATA && out && ans)
			*out = ans;
		else
			json_decref(ans);
		goto out;
	}
	r = call_json_answer(&k, out);
out:
	cl_call_end(&k, t);
	return r;
}

uint8_t *cl_recipe_bytes(const struct dmar_recipe *r, size_t *len, struct dmar_id *id)
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
	uint8_t *b = cl_recipe_bytes(r, &len, NULL);
	if (!b)
		return -ENOMEM;
	struct tally t = { 0 };
	long status = 0;
	struct commit_req q = { .ctype = CT_RECIPE, .recipe = b, .len = len, .noreplace = noreplace };
	int ret = cl_commit_one(c, path, &q, out, &t, &status, err);
	free(b);
	return ret;
}
