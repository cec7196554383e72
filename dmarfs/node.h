/* SPDX-License-Identifier: MIT */
/*
 * node.h - a mounted dmarfs as a node: its REST API (net/server.h) acting
 * on the mount's namespace and chunk store, its peers (net/peers.h) with a
 * client for each (net/client.h), and shipping files to them.
 *
 * The API's writes follow the filesystem's rules: a commit builds the
 * whole file from chunks the arena holds, then links it in one step under
 * the namespace lock, so a file appears whole or not at all; the kernel's
 * caches are told (notify_inval_entry) after the lock is dropped.
 * Chunks uploaded for a commit are held ("staged") for STAGE_SECONDS; a
 * commit releases the stage of its chunks, an abandoned upload expires.
 */
#ifndef DMARFS_NODE_H
#define DMARFS_NODE_H

#include <stdbool.h>

#include "file.h"
#include "codec/error.h"
#include "net/client.h"
#include "net/wire.h"

struct dmarfs;

struct dmarfs_node_config {
	const char *name;     /* node=NAME */
	const char *listen;   /* listen=ADDR:PORT or NULL (127.0.0.1:7420) */
	const char *peers;    /* peers=FILE or NULL */
	const char *token;    /* token=FILE or NULL */
	const char *tls_cert; /* tls_cert=, tls_key=: serve HTTPS */
	const char *tls_key;
	const char *tls_ca;   /* tls_ca=: CA of the peers' certificates */
	bool serve;           /* false for a client view (view=PEER): no server */
	uint64_t mem_max;     /* mem_max=: the daemon's memory outside the arena a request
			       * may take it to (0: no budget) */
};

struct dmarfs_node;

/* Read the peers and token files and check the listen address (cheap,
 * before the daemon forks: errors reach the user).  0 or -errno with err. */
int dmarfs_node_new(struct dmarfs_node **out, struct dmarfs *fs, const struct dmarfs_node_config *cfg,
		    struct dmar_error *err);
/* Start serving (after the fork: the server's threads must live in the
 * daemon).  0 or -errno with err. */
int dmarfs_node_start(struct dmarfs_node *n, struct dmar_error *err);
/* Stop serving (the REST API): no request acts on the mount after this.
 * NULL-safe. */
void dmarfs_node_stop(struct dmarfs_node *n);
/* Stop serving and free everything, the staged uploads' references in
 * the arena too: after the idle thread stopped (its ticks reach the
 * stages), before the mount's fs goes.  NULL-safe. */
void dmarfs_node_free(struct dmarfs_node *n);

const char *dmarfs_node_name(const struct dmarfs_node *n);
/* Peers, by index (0..count) or by name (NULL if unknown).  The client is
 * the node's, shared by all threads. */
size_t dmarfs_node_peer_count(const struct dmarfs_node *n);
const char *dmarfs_node_peer_name(const struct dmarfs_node *n, size_t i);
struct dmar_client *dmarfs_node_peer(struct dmarfs_node *n, const char *name);
/* The client MOUNT/@all/ reads through (a client of the first peer but
 * this node, its own, so that its caches are the group's), or NULL when
 * the node has no group: no other peer, or a peer named "all". */
struct dmar_client *dmarfs_node_group(struct dmarfs_node *n);
/* Where a pull of a file at origin (its client cl) looks for chunks
 * (net/swarm.h): origin first, then up to DMAR_SWARM_PEERS - 1 other peers,
 * this node's neighbours in the peers file.  out has DMAR_SWARM_PEERS
 * slots; returns how many it filled. */
struct dmar_swarm_peer;
size_t dmarfs_node_swarm(struct dmarfs_node *n, const char *origin, struct dmar_client *cl,
			 struct dmar_swarm_peer *out);

/*
 * Ship a file to `to` as dest: a peer, or several (dmarfs_node_hops), which
 * get it as a broadcast chain (net/relay.h).  r is its recipe (mode and
 * mtime set), every chunk of which the caller keeps referenced until this
 * returns.  Sends events (transfer.started/progress/done/failed; a
 * broadcast's done or failed has "nodes") to the node's websocket
 * clients.  st gets the figures of the push to the first node (also on
 * failure).  Returns 0 or the peer's or the network's -errno, with err
 * (a broadcast: the first failure, err naming every node that failed).
 * *nodes (may be NULL): a broadcast's per-node results (dmar_chain_push),
 * else NULL.  cid: r's content id if the caller knows it (NULL:
 * computed); flags: dmar_client_push's.  base, base_cid (may be NULL):
 * the recipe a single peer holds at dest and its content id, when the
 * caller knows them (dmar_push_opts).
 */
int dmarfs_node_ship(struct dmarfs_node *n, const char *to, const char *src, const char *dest,
		     const struct dmar_recipe *r, const struct dmar_id *cid, unsigned flags, struct dmar_xfer_stats *st,
		     json_t **nodes, const struct dmar_recipe *base,
		     const struct dmar_id *base_cid, struct dmar_error *err);

/* The group of every peer but this node (MOUNT/@all/, "to": "all"),
 * unless the peers file names a node "all". */
#define DMARFS_GROUP_ALL "all"
/* The nodes `to` names: one peer, a list of them ("b,c,d", "node[2-8]"),
 * or DMARFS_GROUP_ALL.  -ENOENT (err) for a name not in the peers file,
 * -EINVAL for a malformed list. */
struct dmar_hops;
int dmarfs_node_hops(struct dmarfs_node *n, const char *to, struct dmar_hops *h, struct dmar_error *err);

/* Take (pin) or drop one reference on every chunk entry of r: a recipe
 * taken under a file's lock stays shippable after the lock is dropped.
 * pin: 0 or -ENOENT (nothing left pinned). */
int dmarfs_node_pin(struct dmar_fsctx *c, const struct dmar_recipe *r);
void dmarfs_node_unpin(struct dmar_fsctx *c, const struct dmar_recipe *r);

#endif /* DMARFS_NODE_H */
