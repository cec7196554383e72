/* SPDX-License-Identifier: MIT */
/*
 * swarm.h - fetching chunks from every peer that holds them.
 *
 * A file on one node is often on others too (a broadcast left it on all
 * of them): pulling its chunks from the file's node alone makes that
 * node's link the bottleneck for every reader.  A swarm pull asks each
 * candidate peer which of the chunks it holds (one have/want query each,
 * side by side), gives every chunk to one of the peers that hold it --
 * each about the same share --, and pulls from all of them at once
 * (dmar_client_pull each, with its own streams).  A peer that fails
 * mid-pull (died, unreachable, dropped a chunk) is left out from then on
 * and what it did not deliver goes to the others that hold it, in another
 * round: the pull completes while any holder of each chunk is left.
 */
#ifndef DMAR_SWARM_H
#define DMAR_SWARM_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* At most this many peers are asked (the origin and its neighbours). */
#define DMAR_SWARM_PEERS 8

struct dmar_swarm_peer {
	struct dmar_client *c;
	const char *name;       /* for messages */
	uint64_t chunks, bytes; /* out: what it delivered */
	int err;                /* out: 0, or why it was left out */
};

/*
 * Fetch ids[0..n) (duplicates are fetched once) into sink from peers
 * p[0..np) (np <= DMAR_SWARM_PEERS; p[0] the file's own node).  progress
 * (may be NULL): the whole pull's figures so far, from the pulls'
 * threads, one at a time.  st (may be NULL): the figures of the whole
 * pull, requests and wire bytes of every peer.  Returns 0, or -ENOENT (err names a chunk no peer left
 * holds), the sink's error, or -ENOMEM.  The peers' own failures are in
 * p[i].err; they fail the pull only when they leave a chunk with nobody.
 */
int dmar_swarm_pull(struct dmar_swarm_peer *p, size_t np, const struct dmar_id *ids, size_t n,
		    const struct dmar_chunk_sink *sink, dmar_xfer_progress_fn progress, void *prctx,
		    struct dmar_xfer_stats *st, struct dmar_error *err);

#endif /* DMAR_SWARM_H */
