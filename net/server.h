/* SPDX-License-Identifier: MIT */
/*
 * server.h - a node's REST API (docs/rest-api.md), served by libmicrohttpd.
 *
 * The server owns HTTP: listening, TLS, the bearer token, body limits,
 * routing /v1/..., parsing and checking every request (paths, JSON, id
 * lists, recipes, chunk batches with each chunk verified against its id)
 * and the websocket event stream.  What the requests act on -- the
 * namespace and the chunk store -- comes from the node through struct
 * dmar_node_ops, so the API can be tested with a fake node and no FUSE.
 *
 * Paths reach the callbacks percent-decoded, checked by
 * dmar_wire_path_check, and without a trailing '/'.
 *
 * Threads: the callbacks run on the server's threads, several at once;
 * the node makes them thread-safe.  Each returns 0 or a negative errno; on
 * error it may fill err with a message (the server answers with
 * dmar_wire_http_status(code) and {"error": msg, "errno": "ENOSPC"}).
 */
#ifndef DMAR_SERVER_H
#define DMAR_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "admit.h"
#include "metrics.h"
#include "wire.h"
#include "codec/error.h"
#include "codec/hash.h"

#define DMAR_SERVER_PORT_DEFAULT 7420
#define DMAR_SERVER_BODY_MAX_DEFAULT (64u << 20)

struct dmar_hops;

/* What a request says about the transfer it belongs to: X-Dmar-Upload (0:
 * none) and X-Dmar-Relay (NULL: none; POST /v1/chunks and PUT
 * /v1/files only), the nodes to forward the transfer's chunks and file
 * to, in order (peers.h). */
struct dmar_req_tags {
	uint64_t upload;
	const struct dmar_hops *relay;
};

struct dmar_node_ops {
	/* GET /v1/node: *out = a new JSON object describing the node (name,
	 * arena, store...); the server adds "version". */
	int (*info)(void *ctx, json_t **out, struct dmar_error *err);
	/* GET /v1/files/PATH: *out = a new stat object (docs/rest-api.md);
	 * for a directory it has "entries", an array of stat objects with
	 * "name".  path passed dmar_wire_path_check; "" is the root. */
	int (*stat)(void *ctx, const char *path, json_t **out, struct dmar_error *err);
	/* DELETE /v1/files/PATH: unlink a file or symlink, or rmdir an empty
	 * directory.  -ENOENT, -ENOTEMPTY, -EINVAL for the root... */
	int (*remove)(void *ctx, const char *path, struct dmar_error *err);
	/* PUT /v1/dirs/PATH: mkdir (mode & 07777).  -EEXIST, -ENOENT (parent)... */
	int (*mkdir)(void *ctx, const char *path, uint32_t mode, struct dmar_error *err);
	/* POST /v1/chunks/query: set missing[i] to 1 for each ids[i] the node
	 * does not hold, 0 for the others. */
	int (*have)(void *ctx, const struct dmar_id *ids, size_t n, uint8_t *missing, struct dmar_error *err);
	/* POST /v1/chunks, once per chunk: c passed dmar_wire_chunk_verify;
	 * decoded is its c->len decoded bytes (c itself is the wire form, so
	 * a node that keeps zstd frames stores c->payload as it is).  The node
	 * holds the chunk for a later commit.  -ENOSPC when the arena is full.
	 * t->upload: the sender's X-Dmar-Upload id for the chunks of one
	 * transfer (0: none sent).  A sender gives its transfer up at the
	 * first ENOSPC, so the node may drop, at once, what that upload
	 * staged.  t->relay: forward the chunk to the first of those nodes
	 * (the commit will follow it there). */
	int (*put_chunk)(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded,
			 const struct dmar_req_tags *t, struct dmar_error *err);
	/* PUT /v1/files/PATH with a recipe (cid: its content id): build the file from chunks the
	 * node holds and make it appear at path atomically, replacing what
	 * is there (unless noreplace: -EEXIST).  On success *out = the new
	 * file's stat object.  If chunks are missing: -ENODATA and *out =
	 * {"missing_count": M, "missing": ["hex", ...]} (at most
	 * DMAR_SERVER_MISSING_LIST ids listed); nothing changes.  The server
	 * answers -ENODATA with 409 and that object plus "error".  With
	 * t->relay, once the file is made here it goes on to those nodes
	 * (a chain: each forwards to the rest), and *out gets "relay", an
	 * array of one result object per node (docs/rest-api.md). */
	int (*commit)(void *ctx, const char *path, const struct dmar_recipe *r, const struct dmar_id *cid,
		      bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err);
	/* Optional.  PUT /v1/files/PATH with X-Dmar-Content, the content id
	 * (net/wire.h) of the recipe the body carries: make the file from
	 * content the node already holds under that id, with head's size,
	 * mode and mtime (head has no entries), as commit would.  -ENOENT
	 * when the node holds no such content: the server then reads the
	 * recipe.  The server has checked that the recipe id binds head to
	 * cid. */
	int (*clone)(void *ctx, const char *path, const struct dmar_recipe *head, const struct dmar_id *cid,
		     bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err);
	/* PUT /v1/files/PATH with a short recipe: complete each of the n ids,
	 * known by their first idlen bytes (8..32; the rest zero), from the
	 * chunks the node holds: state[i] = 0 and ids[i] the full id when one
	 * chunk has that prefix, 1 when none has, 2 when several have.  path
	 * is the file the commit makes, which may already hold most of them
	 * in the same order (a new version).  The server then checks the
	 * completed recipe against its id and commits it through commit. */
	int (*resolve)(void *ctx, const char *path, struct dmar_id *ids, size_t n, unsigned idlen, uint8_t *state,
		       struct dmar_error *err);
	/* Optional.  PUT /v1/files/PATH with a recipe delta: the recipe of
	 * the regular file at path in *out (entries malloc'd) when its
	 * content id is cid; -ESTALE when it holds other content, -ENOENT
	 * when there is no such file.  The server applies the delta to it and
	 * commits the result through commit. */
	int (*base)(void *ctx, const char *path, const struct dmar_id *cid, struct dmar_recipe *out,
		    struct dmar_error *err);
	/* GET /v1/recipes/PATH: *buf = malloc'd recipe bytes (dmar_recipe_write)
	 * of the regular file at path, *len its size. */
	int (*recipe)(void *ctx, const char *path, uint8_t **buf, size_t *len, struct dmar_error *err);
	/* GET /v1/chunks/ID and POST /v1/chunks/fetch: a copy of the chunk's
	 * payload in *buf (malloc'd), described by *c (c->payload == *buf; raw,
	 * or zstd without a dictionary).  -ENOENT if not held.  *buf is the
	 * server's to free whatever the return (it starts NULL). */
	int (*get_chunk)(void *ctx, const struct dmar_id *id, struct dmar_wire_chunk *c, uint8_t **buf,
			 struct dmar_error *err);
	/* POST /v1/transfers: ship the file at path to peer `to`, as dest
	 * there; returns when done.  *out = the result object (logical and
	 * wire bytes, seconds...).  -ENOENT (path or unknown peer), or the
	 * peer's error. */
	int (*transfer)(void *ctx, const char *path, const char *to, const char *dest, json_t **out,
			struct dmar_error *err);
	/* Optional (POST /v1/tree answers ENOTSUP for its symlinks without
	 * it).  Make path a symlink to target, replacing a file or symlink
	 * there (unless noreplace: -EEXIST); -EISDIR over a directory. */
	int (*symlink)(void *ctx, const char *path, const char *target, bool noreplace, struct dmar_error *err);
	/* Optional.  The end of a POST /v1/tree: drop what upload staged (its
	 * files took their own references when committed; the rest would
	 * wait for the stages' expiry). */
	void (*unstage)(void *ctx, uint64_t upload);
	/* Optional.  GET /metrics: the node's own metrics, appended to p
	 * (metrics.h) after the server's. */
	void (*metrics)(void *ctx, struct dmar_prom *p);
	/* Optional (501 without).  GET /v1/mesh: *out = a new object,
	 * {"node": its name, "nodes": [one row per peer, net/probe.h]}. */
	int (*mesh)(void *ctx, json_t **out, struct dmar_error *err);
};

#define DMAR_SERVER_MISSING_LIST 4096

struct dmar_server_opts {
	const char *listen;   /* "ADDR:PORT", "[V6ADDR]:PORT", "localhost:PORT" or "PORT" (on
			       * 127.0.0.1), numeric addresses only; NULL: 127.0.0.1:7420.
			       * Port 0 picks a free one (dmar_server_port). */
	const char *token;    /* the shared secret itself (not a file), or NULL; "" is refused */
	const char *tls_cert; /* PEM file paths: both or neither (then plain HTTP) */
	const char *tls_key;
	uint64_t max_body;    /* bytes; 0: DMAR_SERVER_BODY_MAX_DEFAULT.  JSON bodies are
			       * further capped at 1 MiB. */
	unsigned threads;     /* connections served at once, each on its own thread (so a
			       * long POST /v1/transfers or a big upload never holds up
			       * another); further ones are not served until one ends.
			       * 0: 1024, at most 256 from one address */
	const struct dmar_admit_opts *admit; /* connections without a complete request:
					      * NULL, the defaults of admit.h */
};

struct dmar_server;

/*
 * Start serving.  Refuses (-EPERM with a message) to listen on a
 * non-loopback address without a token.  Every callback of ops must be
 * set; ops and ctx must outlive the server.  Returns 0, -EINVAL (bad
 * listen address, an op missing, an empty token, one of cert/key without
 * the other, unreadable or invalid TLS files), -ENOTSUP (no TLS in this
 * libmicrohttpd), -EADDRINUSE, -EADDRNOTAVAIL..., with err saying why.
 */
int dmar_server_start(struct dmar_server **out, const struct dmar_server_opts *o, const struct dmar_node_ops *ops,
		      void *ctx, struct dmar_error *err);
/* Stop: closes the listening socket and every connection (websockets
 * too), waits for the callbacks in flight.  NULL-safe. */
void dmar_server_stop(struct dmar_server *s);
uint16_t dmar_server_port(const struct dmar_server *s);
/* Send ev (a JSON object; the server adds "time", a float of seconds since
 * the epoch) to every websocket client of /v1/events.  Steals the
 * reference (a NULL s or ev is fine: nothing is sent).  Never blocks on a
 * slow client: one that falls more than 1 MiB behind is dropped.
 * Thread-safe, but not concurrently with or after dmar_server_stop. */
void dmar_server_event(struct dmar_server *s, json_t *ev);

#endif /* DMAR_SERVER_H */
