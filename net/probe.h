/* SPDX-License-Identifier: MIT */
/*
 * probe.h - every peer's state at once: GET /v1/node of each peer of a
 * peers file, side by side (16 at a time) with short timeouts, so a peer
 * that is down costs its timeout once, not once per peer.  `dmar nodes`
 * prints the rows; a node serves them as GET /v1/mesh, which its web view
 * draws (docs/rest-api.md).
 */
#ifndef DMAR_PROBE_H
#define DMAR_PROBE_H

#include <jansson.h>

#include "peers.h"
#include "codec/error.h"

struct dmar_probe_opts {
	const char *token;       /* the shared secret, or NULL */
	const char *tls_ca;      /* for https peers, or NULL */
	long connect_timeout_ms; /* 0: DMAR_PROBE_CONNECT_MS */
	long timeout_ms;         /* the whole GET; 0: DMAR_PROBE_TIMEOUT_MS */
	/* The asker's own name and answer: its row comes from self_info,
	 * not over the network; with self_url (how its peers reach it), it
	 * has a row, the first, even when the file does not list it.  NULL:
	 * none. */
	const char *self;
	const char *self_url;
	int (*self_info)(void *ctx, json_t **out, struct dmar_error *err);
	void *self_ctx;
};

#define DMAR_PROBE_CONNECT_MS 1500
#define DMAR_PROBE_TIMEOUT_MS 4000

/*
 * *out = a new array, one object per peer in the file's order (after the
 * asker's own, see self_url):
 *   {"name", "address" ("10.0.0.2:7420"), "url", "reachable": true,
 *    "ms": the GET's round trip in milliseconds, "node": its answer}
 * or "reachable": false with "error" (the message) and "errno" (its name)
 * in place of "node" and "ms".  The asker's row has "self": true.
 * Returns 0 or -ENOMEM (nothing in *out).
 */
int dmar_probe_peers(const struct dmar_peers *peers, const struct dmar_probe_opts *o, json_t **out);

#endif
