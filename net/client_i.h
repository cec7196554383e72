/* SPDX-License-Identifier: MIT */
/*
 * client_i.h - what the parts of the REST client share.  Internal to net/.
 *
 *   client.c         the client, its handle pool, one request, and the
 *                    query and commit calls
 *   client_engine.c  what push and pull share: the set of distinct chunk
 *                    ids, progress and failure, the stream threads
 *   client_push.c    push: have/want, batches out, the commit
 *   client_pull.c    pull: batches in, verified and stored
 *   client_tree.c    tree commits: many names and their chunks, one request
 */
#ifndef DMAR_CLIENT_I_H
#define DMAR_CLIENT_I_H

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
#include "libcurl.h"
#include "codec/compress.h"
#include "codec/idcache.h"
#include "codec/idset.h"

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
/* What a client remembers the peer holds: 8 << 15 chunk ids (2 MiB, about
 * 8 GiB of files at the 32 KiB chunk average). */
#define CL_HELD_LOG2_BUCKETS 15
/* A push sends the chunks the peer is not known to hold before its first
 * commit when it knows of at least all but 1/CL_PREDICT_SHARE of them: a
 * new version of a file the peer holds.  Below that, the peer is asked
 * (the commit's refusal): a cache that forgot half a file would upload
 * chunks the peer has. */
#define CL_PREDICT_SHARE 8
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
	atomic_bool no_delta; /* the peer answered 415 to a recipe delta */
	/* Chunks the peer holds, as its commits said (push): a new version
	 * of a file it holds goes with its new chunks before the commit,
	 * not after a refusal that lists them. */
	struct dmar_idcache *held;
	long connect_timeout_ms;
	long timeout_ms;

	CURLSH *share;
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];

	pthread_mutex_t pool_lock;
	CURL **pool; /* idle handles; protected by pool_lock */
	size_t npool, pool_cap;
};

/* What a transfer engine adds up over its requests. */
struct tally {
	uint64_t wire;
	uint64_t rounds;
	uint64_t requests, connects;
};

/*
 * One HTTP request: cl_call_begin, the body and callbacks, cl_call_perform, then
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

#define CT_RECIPE "application/x-dmar-recipe"
#define CT_RECIPE_SHORT "application/x-dmar-recipe-short"
#define CT_RECIPE_DELTA "application/x-dmar-recipe-delta"

struct engine {
	struct dmar_client *c;
	struct dmar_idset set; /* the transfer's distinct chunks */
	atomic_int failed; /* set once by the first failing stream */
	pthread_mutex_t lock;
	struct dmar_error err;        /* the first failure; protected by lock */
	struct dmar_xfer_stats st;    /* protected by lock */
	dmar_xfer_progress_fn progress;
	void *pctx;
	double t0; /* dmar_mono_s() at the start */
};

/* ---- client.c: one request, query and commit ---- */

int cl_call_header(struct call *k, const char *line);
int cl_call_begin(struct call *k, struct dmar_client *c, const char *method, const char *endpoint,
		      const char *path, struct dmar_error *err);
int cl_call_body(struct call *k, const char *ctype, const void *data, size_t len);
int cl_call_perform(struct call *k);
void cl_call_end(struct call *k, struct tally *t);
json_t *cl_resp_json(const struct call *k);
int cl_call_http_error(struct call *k, json_t **answer);
bool cl_ok_status(long s);
int cl_query_all(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing, struct tally *t,
		     struct dmar_error *err);
/* One commit request's body and headers. */
struct commit_req {
	const char *ctype; /* CT_RECIPE, CT_RECIPE_SHORT or CT_RECIPE_DELTA */
	const uint8_t *recipe;
	size_t len;
	const struct dmar_id *content; /* sent as X-Dmar-Content (NULL: not) */
	bool noreplace;
	const char *upload; /* "X-Dmar-Upload: ..." or NULL */
	const char *relay;  /* "X-Dmar-Relay: ..." or NULL */
};
int cl_commit_one(struct dmar_client *c, const char *path, const struct commit_req *q, json_t **out, struct tally *t,
		  long *status, struct dmar_error *err);
uint8_t *cl_recipe_bytes(const struct dmar_recipe *r, size_t *len, struct dmar_id *id);

/* ---- client_engine.c ---- */

/* Seconds since t0 (CLOCK_MONOTONIC). */
void cl_engine_init(struct engine *e, struct dmar_client *c, dmar_xfer_progress_fn progress, void *pctx);
void cl_engine_fail(struct engine *e, int code, const struct dmar_error *err);
void cl_engine_account(struct engine *e, uint64_t chunks, uint64_t bytes, const struct call *k);
int cl_run_streams(void *(*fn)(void *), void *args, size_t arg_size, unsigned nthreads);
void cl_engine_finish(struct engine *e, struct dmar_xfer_stats *st, int r, struct dmar_error *err);

#endif /* DMAR_CLIENT_I_H */
