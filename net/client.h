/* SPDX-License-Identifier: MIT */
/*
 * client.h - talking to a node's REST API (docs/rest-api.md) with libcurl.
 *
 * One struct dmar_client per peer (a base URL, a token, TLS settings).
 * The simple calls map one to one onto endpoints.  push and pull are the
 * transfer engines: push ships a file as a recipe plus only the chunks the
 * peer lacks (have/want query, chunk batches over several parallel
 * streams, atomic commit); pull fetches the chunks a local store lacks.
 *
 * Errors: every call returns 0 or a negative errno and fills err.  A
 * peer's error answer comes back as the errno it names ("errno" field of
 * the JSON body: -ENOSPC, -EEXIST, -ENOENT...) with its message; a
 * transport failure is -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT or -EIO
 * ("peer b (10.9.0.2:7420): connection refused"); a 401 is -EKEYREJECTED.
 *
 * Thread-safety: a client may be used by several threads at once (each
 * call uses its own curl handle from a pool; connections are reused).
 */
#ifndef DMAR_CLIENT_H
#define DMAR_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "wire.h"
#include "codec/error.h"
#include "codec/hash.h"

struct dmar_client_opts {
	const char *name;   /* the peer's name, for messages ("peer b"); may be NULL */
	const char *url;    /* "http://10.9.0.2:7420" or "https://..." (no trailing /v1) */
	const char *token;  /* the shared secret, or NULL */
	const char *tls_ca; /* PEM file of the CA that signed the peer's cert, or NULL (system CAs) */
	unsigned streams;   /* parallel streams for push/pull; 0: one per CPU, 2 to 4 */
	long connect_timeout_ms; /* 0: 3000 */
	long timeout_ms;    /* whole request; 0: none (transfers can be long), but
			     * a stalled connection (no byte for 30 s) fails with -ETIMEDOUT */
};

struct dmar_client;

int dmar_client_new(struct dmar_client **out, const struct dmar_client_opts *o, struct dmar_error *err);
void dmar_client_free(struct dmar_client *c); /* NULL-safe */

/* GET /v1/node. *out: a new reference. */
int dmar_client_info(struct dmar_client *c, json_t **out, struct dmar_error *err);
/* GET /v1/files/PATH: stat (with "entries" for a directory). */
int dmar_client_stat(struct dmar_client *c, const char *path, json_t **out, struct dmar_error *err);
/* DELETE /v1/files/PATH. */
int dmar_client_remove(struct dmar_client *c, const char *path, struct dmar_error *err);
/* PUT /v1/dirs/PATH. */
int dmar_client_mkdir(struct dmar_client *c, const char *path, uint32_t mode, struct dmar_error *err);
/* GET /v1/recipes/PATH, parsed and checked (dmar_recipe_parse). */
int dmar_client_recipe(struct dmar_client *c, const char *path, struct dmar_recipe *out, struct dmar_error *err);
/* POST /v1/chunks/query: missing[i] = 1 where the peer lacks ids[i]. */
int dmar_client_query(struct dmar_client *c, const struct dmar_id *ids, size_t n, uint8_t *missing,
		      struct dmar_error *err);
/* PUT /v1/files/PATH with the recipe.  0 and *out (if not NULL) = the
 * stat object; -ENODATA when the peer lacks chunks (*out, if not NULL, is
 * the peer's answer with "missing"). */
int dmar_client_commit(struct dmar_client *c, const char *path, const struct dmar_recipe *r, bool noreplace,
		       json_t **out, struct dmar_error *err);
/* POST /v1/transfers: ask the peer to ship its file path to node `to` as dest. */
int dmar_client_transfer(struct dmar_client *c, const char *path, const char *to, const char *dest,
			 json_t **out, struct dmar_error *err);

/* ---- transfer engines ---- */

struct dmar_xfer_stats {
	uint64_t logical;     /* bytes of the file (push) or of the chunks fetched (pull) */
	uint64_t chunks;      /* distinct chunks in the recipe / asked for */
	uint64_t sent_chunks; /* chunks that crossed the wire */
	uint64_t chunk_bytes; /* their decoded bytes */
	uint64_t todo_bytes;  /* push: decoded bytes of the chunks the peer lacked, to send, as
			       * far as its answers told so far (chunk_bytes of them are sent) */
	uint64_t zchunk_bytes; /* of those, the bytes that went compressed (a frame, or a compressed batch) */
	uint64_t wire_bytes;  /* HTTP bytes both ways: headers and bodies */
	uint64_t predicted_chunks; /* push: sent before the first commit, as the peer was not known to hold them */
	uint64_t round_trips; /* sequential request rounds (parallel batches count once) */
	uint64_t requests;    /* HTTP requests answered, each of the parallel ones */
	uint64_t connects;    /* new connections opened for them (each a TCP, and TLS, handshake) */
	double seconds;
};
typedef void (*dmar_xfer_progress_fn)(void *ctx, const struct dmar_xfer_stats *st);

/* Where push reads chunk payloads.  get: fill *c for chunk id (raw or zstd
 * without dictionary; c->payload must stay valid until put is called) --
 * the engine compresses raw payloads for the wire where that pays.  put:
 * the engine is done with c (release a reference, free a copy).  Called
 * from several threads at once. */
struct dmar_chunk_source {
	int (*get)(void *ctx, const struct dmar_id *id, uint32_t len, struct dmar_wire_chunk *c);
	void (*put)(void *ctx, struct dmar_wire_chunk *c);
	void *ctx;
};

/*
 * Ship a file to the peer as path: commit r first (one round trip when the
 * peer holds every chunk); when refused, upload the chunks its answer
 * marks missing in batches (about 8 MiB each) over opts.streams parallel
 * connections, then commit r again.  A new version of a file the peer
 * holds (every chunk but a few among those its earlier commits from this
 * client took) skips the first commit: the few go first (predicted_chunks).
 * If a commit finds chunks missing (the peer dropped some meanwhile) they are uploaded and the
 * commit retried, up to 3 times; a batch answered 422
 * (a chunk did not match its id on arrival) is re-sent once from the
 * source.  progress (may be NULL) is called now and then, and at the end.
 * *st (may be NULL) gets the figures, also on failure.  On error the
 * peer has no file at path (the commit is the only step that creates it).
 * The first commit carries r's content id (cid, computed when NULL): a
 * peer that holds that content under another name makes the file from it.
 * flags: DMAR_PUSH_NOREPLACE (-EEXIST rather than replace a file at path);
 * DMAR_PUSH_CONTENT_FIRST (with cid: the peer likely holds that content,
 * a copy of a file shipped before; ask with the recipe's header alone,
 * one more round trip when it does not).
 */
#define DMAR_PUSH_NOREPLACE 1u
#define DMAR_PUSH_CONTENT_FIRST 2u
struct dmar_push_opts {
	unsigned flags;    /* DMAR_PUSH_* */
	uint64_t upload;   /* the transfer's X-Dmar-Upload (0: a new random one) */
	/* X-Dmar-Relay on the uploads and commits: the nodes the peer
	 * forwards the file to, in order ("c,d"; NULL: none).  The commit
	 * then returns only when they are done, with their results in the
	 * answer's "relay" (docs/rest-api.md). */
	const char *relay;
	json_t **answer;   /* if not NULL: the answer of the commit that made the file */
	/* The recipe of the version the peer holds at path and its content
	 * id, when the caller knows them (a new version of a file it shipped
	 * or loaded): without relay, the commit then says only how r differs
	 * (a recipe delta, codec/recipe.h), after the chunks it adds that the
	 * peer is not known to hold.  A peer without that base (or without
	 * deltas) gets r as below. */
	const struct dmar_recipe *base;
	const struct dmar_id *base_cid;
};
int dmar_client_push(struct dmar_client *c, const char *path, const struct dmar_recipe *r,
		     const struct dmar_id *cid, const struct dmar_chunk_source *src, const struct dmar_push_opts *o,
		     dmar_xfer_progress_fn progress, void *pctx, struct dmar_xfer_stats *st, struct dmar_error *err);

/*
 * Send the chunks of ids[0..n) the peer lacks (one have/want query, then
 * batches as push sends them), tagged with o->upload and o->relay (NULL
 * o: a new upload id, no relay): what a node that relays a broadcast
 * does with the chunks it receives.  lens[i] (may be NULL): ids[i]'s
 * length, for the source.  No commit.
 */
int dmar_client_send(struct dmar_client *c, const struct dmar_id *ids, const uint32_t *lens, size_t n,
		     const struct dmar_chunk_source *src, const struct dmar_push_opts *o, struct dmar_xfer_stats *st,
		     struct dmar_error *err);

/* Where pull puts chunks: put is called once per chunk fetched, after the
 * engine verified it against its id (decoded = c->len bytes), from several
 * threads at once.  A negative return (-ENOSPC) stops the pull. */
struct dmar_chunk_sink {
	int (*put)(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded);
	void *ctx;
};

/* Fetch chunks ids[0..n) (POST /v1/chunks/fetch, batched, in parallel)
 * into sink.  -ENOENT if the peer lacks one (err names it). */
int dmar_client_pull(struct dmar_client *c, const struct dmar_id *ids, size_t n, const struct dmar_chunk_sink *sink,
		     dmar_xfer_progress_fn progress, void *pctx, struct dmar_xfer_stats *st, struct dmar_error *err);

/* ---- tree commits (POST /v1/tree) ---- */

/*
 * A tree commit's body, built in memory by the caller: operations (net/
 * wire.h: directories, files by recipe, symlinks, made in the order
 * added, so a directory goes before what it holds) and the chunks the
 * files need that the peer may lack (raw; the body travels as one zstd
 * frame when its chunks are mostly compressible and that pays).  Keep a
 * body to some MiB: it is sent in one request.
 */
struct dmar_tree_body;
int dmar_tree_body_new(struct dmar_tree_body **out); /* 0, -ENOMEM */
void dmar_tree_body_free(struct dmar_tree_body *b);  /* NULL-safe */
void dmar_tree_body_reset(struct dmar_tree_body *b); /* empty again, for the next request */
/* Add an operation (its path and data are copied).  0, -EINVAL (path),
 * -E2BIG (the format's limits on operations: send this body first),
 * -ENOMEM. */
int dmar_tree_body_op(struct dmar_tree_body *b, const struct dmar_tree_op *op);
/* Add a chunk: len raw bytes whose SHA-256 is id (copied).  0, -EINVAL, -ENOMEM. */
int dmar_tree_body_chunk(struct dmar_tree_body *b, const struct dmar_id *id, const void *payload, uint32_t len);
uint32_t dmar_tree_body_ops(const struct dmar_tree_body *b);
uint64_t dmar_tree_body_bytes(const struct dmar_tree_body *b); /* the body's size before compression */

/*
 * Send b.  Returns how many operations failed (0: all were made; each
 * one's -errno in status[k], 0 for those made, when status is not NULL;
 * err gets the first failure's message, naming its path), or a negative
 * errno when the request failed as a whole (nothing was made: a chunk
 * did not match its id, the peer's arena filled while the chunks came,
 * a transport error).  *st (may be NULL): its figures.
 */
int dmar_client_tree(struct dmar_client *c, const struct dmar_tree_body *b, int *status, struct dmar_xfer_stats *st,
		     struct dmar_error *err);

#endif /* DMAR_CLIENT_H */
