/* SPDX-License-Identifier: MIT */
/*
 * server_i.h - what the parts of the REST server share: its state, a
 * request's, the answers and request helpers (server.c), and the
 * endpoints of each part.  Internal to net/.
 *
 *   server.c         the daemon, authentication, routing, the access
 *                    handler (a request's life), answers and helpers
 *   server_files.c   the namespace endpoints: node, stat, mkdir, remove,
 *                    commit, recipe, transfers
 *   server_chunks.c  the chunk endpoints: query, upload, download, fetch
 *   server_events.c  the websocket event stream and its thread
 *   server_metrics.c GET /metrics
 *   server_ui.c      the web view's files and GET /v1/mesh
 */
#ifndef DMAR_SERVER_I_H
#define DMAR_SERVER_I_H

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
#include "metrics.h"
#include "peers.h"
#include "server.h"
#include "ws.h"
#include "codec/compress.h"

/* Connections at once, each on its own thread (mostly asleep: an idle
 * one costs a stack's virtual memory, not CPU), and a per-address share.
 * Those that never finish a request are closed by the admission (admit.h)
 * long before these fill. */
#define CONNECTIONS_DEFAULT 1024
#define CONNECTIONS_PER_IP 256
#define JSON_BODY_MAX (1u << 20)
#define CONN_MEMORY (256u << 10)
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

/* GET /metrics: per route (the routes table's order, then the requests
 * no route took), answers by status code and a latency histogram; error
 * answers by errno.  The status codes are those the server gives; any
 * other is counted as the last. */
#define SRV_ROUTES_MAX 24
#define SRV_CODES 24
#define SRV_ERRNO_MAX 256
struct srv_route_stats {
	_Atomic uint64_t codes[SRV_CODES];
	struct dmar_hist seconds;
};
extern const unsigned srv_codes[SRV_CODES]; /* the last is 0: "other" */
unsigned srv_code_index(unsigned status);
unsigned srv_route_count(void);
/* "GET /v1/node"... (into buf), and "other" for k == srv_route_count() */
const char *srv_route_name(unsigned k, char *buf, size_t cap);

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
	atomic_uint_fast64_t served;      /* chunks sent by GET /v1/chunks/ID and POST /v1/chunks/fetch */
	atomic_uint_fast64_t served_bytes; /* their decoded bytes */
	atomic_uint_fast64_t connections; /* every connection accepted (a TCP, and TLS, handshake each) */
	struct dmar_admit *admit;         /* which unauthenticated connections stay (admit.h) */
	struct srv_route_stats rstats[SRV_ROUTES_MAX + 1];
	_Atomic uint64_t refused[SRV_ERRNO_MAX]; /* error answers by errno (the last: any larger) */
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
	BODY_TREE,  /* a tree commit: its operations buffered, then a batch parsed as it arrives */
};
enum match { MATCH_EXACT, MATCH_TREE, MATCH_ID };

#define CT_RECIPE "application/x-dmar-recipe"
#define CT_RECIPE_SHORT "application/x-dmar-recipe-short"
#define CT_RECIPE_DELTA "application/x-dmar-recipe-delta"
#define CT_IDS "application/octet-stream"
#define CT_CHUNKS "application/x-dmar-chunks"
#define CT_JSON "application/json"
#define CT_TREE "application/x-dmar-tree"

struct req;
typedef enum MHD_Result (*handler_fn)(struct req *q);

struct route {
	const char *method;
	const char *prefix;
	enum match match;
	enum body_kind body;
	const char *ctype[3]; /* the Content-Types it takes (named in a 415), or none */
	handler_fn fn;
	bool open; /* served without the token (the web view's static files) */
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
	struct dmar_req_tags tags; /* X-Dmar-Upload, X-Dmar-Relay (also PUT /v1/files) */
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

	/* POST /v1/tree: the header, then the operations (into body), then
	 * the chunk batch (as POST /v1/chunks) */
	uint8_t thdr[DMAR_TREE_HDR_SIZE];
	size_t thave;
	uint32_t tcount, tops_len;

	char *hello; /* GET /v1/events: the first frame's text */
	double t0;       /* when its head arrived (CLOCK_MONOTONIC) */
	unsigned status; /* the status answered, 0 if none */
};

/* ---- server.c: answers and request helpers ---- */

enum MHD_Result srv_queue(struct req *q, unsigned status, struct MHD_Response *resp);
enum MHD_Result srv_reply_json(struct req *q, unsigned status, json_t *o);
enum MHD_Result srv_reply_error_full(struct req *q, int code, unsigned status, const char *msg, json_t *extra,
					const char *hname, const char *hvalue);
enum MHD_Result srv_reply_error(struct req *q, int code, unsigned status, const char *msg);
enum MHD_Result srv_reply_ops_error(struct req *q, int code);
enum MHD_Result srv_reply_bytes(struct req *q, unsigned status, const char *ctype, uint8_t *buf, size_t len);
enum MHD_Result srv_reply_empty(struct req *q, unsigned status);
const char *srv_header(struct req *q, const char *name);
bool srv_media_type_is(const char *value, const char *want);
bool srv_header_has_token(const char *value, const char *token);
json_t *srv_parse_json_body(struct req *q);
bool srv_id_list(struct req *q, size_t *n);
json_t *srv_hex_id(const struct dmar_id *id);

/* ---- server_files.c ---- */

enum MHD_Result srv_h_node(struct req *q);
enum MHD_Result srv_h_stat(struct req *q);
enum MHD_Result srv_h_remove(struct req *q);
enum MHD_Result srv_h_mkdir(struct req *q);
enum MHD_Result srv_h_commit(struct req *q);
enum MHD_Result srv_h_recipe(struct req *q);
enum MHD_Result srv_h_transfer(struct req *q);
enum MHD_Result srv_h_tree(struct req *q);

/* ---- server_chunks.c ---- */

enum MHD_Result srv_h_query(struct req *q);
int srv_group_flush(struct req *q);
int srv_on_chunk(void *ctx, const struct dmar_wire_chunk *c);
int srv_batch_feed(struct req *q, const void *data, size_t len);
int srv_tree_feed(struct req *q, const void *data, size_t len);
enum MHD_Result srv_reply_bad_chunks(struct req *q);
enum MHD_Result srv_h_put_chunks(struct req *q);
enum MHD_Result srv_h_get_chunk(struct req *q);
enum MHD_Result srv_h_fetch(struct req *q);

/* ---- server_events.c ---- */

void srv_wake_events(struct dmar_server *s);
bool srv_ws_queue(struct ws_client *cl, enum dmar_ws_opcode op, const void *payload, size_t len);
void srv_ws_client_free(struct ws_client *cl);
void *srv_event_loop(void *arg);
enum MHD_Result srv_h_events(struct req *q);
enum MHD_Result srv_h_metrics(struct req *q);
void srv_metrics_init(struct dmar_server *s);

/* ---- server_ui.c ---- */

enum MHD_Result srv_h_ui(struct req *q);
enum MHD_Result srv_h_mesh(struct req *q);
#define SRV_WS_PROTOCOL "dmar.v1"        /* what a browser's websocket asks for */
#define SRV_WS_TOKEN "dmar.token."       /* + the token in hex: its credential */

#endif /* DMAR_SERVER_I_H */
