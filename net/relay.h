/* SPDX-License-Identifier: MIT */
/*
 * relay.h - one file to many nodes: a broadcast as a chain.
 *
 * The sender pushes the file to the first node with the others named in
 * X-Dmar-Relay; that node forwards each chunk it receives to the next
 * node as soon as it is stored (with the rest of the list), and so on
 * down the chain, so every link carries the data once and all of them at
 * the same time: a broadcast takes about one transfer plus a small term
 * per hop, where sending to each node in turn costs one transfer per node
 * over the sender's link.  The commit follows the same path: each node
 * makes the file, waits until it has forwarded what it received, and
 * pushes the file to the next node (which then has nearly every chunk:
 * one round trip), whose answer reports on the nodes after it.  A chain
 * rather than a tree: in a tree an inner node sends everything once per
 * child, so its link is the bottleneck again.
 *
 * Each node is tried in turn: one that cannot be reached or fails is
 * reported and the chain goes on from the node after it, so a dead node
 * costs its own copy, not the others'.
 *
 * Two halves: dmar_chain_push, which runs wherever a chain starts (dmar
 * cp, a node shipping to a group, a node forwarding the commit), and the
 * relay sessions of a node in the chain (dmar_relay_*), which forward
 * the chunks as they arrive.
 */
#ifndef DMAR_RELAY_H
#define DMAR_RELAY_H

#include <jansson.h>
#include <stdint.h>

#include "client.h"
#include "peers.h"

/* The client for a node's name, or NULL when it has no peer of that name. */
typedef struct dmar_client *(*dmar_peer_fn)(void *ctx, const char *name);

/*
 * Ship r (content id cid, may be NULL) as path to every node of hops in
 * order, as a chain (above), reading chunks from src.  o: flags (NOREPLACE;
 * CONTENT_FIRST), upload (the chain's id: 0 for a new one); o->relay and
 * o->answer are the chain's own.  progress sees the push to the first
 * node the chain reaches.  *results (if not NULL): a new array of one
 * object per node, in hops order -- {"node", "ok": true, "from" (the
 * node that shipped to it), "wire_bytes", "chunks_sent", "seconds"} or
 * {"node", "ok": false, "errno", "error"}.  st (may be NULL): the push
 * to the first node reached.  Returns 0 when every node has the file;
 * else the first failure's errno, with err naming every node that
 * failed ("2 of 7 nodes failed: d: connection refused; f: ...").
 */
int dmar_chain_push(const struct dmar_hops *hops, dmar_peer_fn peer, void *pctx, const char *from,
		    const char *path, const struct dmar_recipe *r, const struct dmar_id *cid,
		    const struct dmar_chunk_source *src, const struct dmar_push_opts *o, dmar_xfer_progress_fn progress,
		    void *prctx, json_t **results, struct dmar_xfer_stats *st, struct dmar_error *err);

/* results for hops that all failed alike (code, msg): what a node that
 * cannot go on answers for the rest of its chain. */
json_t *dmar_chain_failed(const struct dmar_hops *hops, int code, const char *msg);

/*
 * A node's relay: the chunks it receives with X-Dmar-Relay, forwarded in
 * batches of up to some MiB (what arrived while the last one went out)
 * to the first node of their list that works, per upload (a session:
 * one thread, the ids waiting).  src must hold every chunk it was given
 * until the session ends (the node's stages do); its get may fail for a
 * chunk dropped meanwhile: that chunk then goes with the commit.
 */
struct dmar_relay;
/* What a relay session sent to one node: chunks, their decoded bytes,
 * HTTP bytes both ways, seconds spent sending. */
struct dmar_relay_sent {
	uint64_t chunks, chunk_bytes, wire_bytes;
	double seconds;
};

struct dmar_relay_cfg {
	dmar_peer_fn peer;
	void *peer_ctx;
	const struct dmar_chunk_source *src;
	/* A session nobody adds to or finishes for this long ends (its
	 * sender died before the commit). */
	unsigned idle_seconds;
	/* Optional: after each batch forwarded (at most four times a second
	 * per session, and at the end), what the session sent to node so far. */
	void (*progress)(void *ctx, uint64_t upload, const char *node, const struct dmar_relay_sent *sent);
	void *progress_ctx;
};
int dmar_relay_new(struct dmar_relay **out, const struct dmar_relay_cfg *cfg);
/* Stops every session (what they hold is not forwarded).  NULL-safe. */
void dmar_relay_free(struct dmar_relay *rl);
/* Chunk id (len bytes) of upload arrived with hops: queue it for the
 * first of them.  Never blocks on the network; when the sessions are
 * at their limits (DMAR_RELAY_SESSIONS, DMAR_RELAY_QUEUED) the chunk is
 * left for the commit to send. */
#define DMAR_RELAY_SESSIONS 32
#define DMAR_RELAY_QUEUED (1u << 18)
void dmar_relay_chunk(struct dmar_relay *rl, uint64_t upload, const struct dmar_hops *hops, const struct dmar_id *id,
		      uint32_t len);
/*
 * The commit of upload came: wait until its session has forwarded what
 * it was given, end it, and return what it sent to each node, a new
 * object {"NODE": {"wire_bytes", "chunks_sent", "seconds", "errno",
 * "error"}} (the last two for a node it gave up on), or NULL if upload
 * had no session.
 */
json_t *dmar_relay_finish(struct dmar_relay *rl, uint64_t upload);
/* Figures for GET /v1/node: sessions now, chunks forwarded and their wire bytes. */
json_t *dmar_relay_info(struct dmar_relay *rl);

#endif /* DMAR_RELAY_H */
