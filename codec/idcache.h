/* SPDX-License-Identifier: MIT */
/*
 * idcache.h - a bounded, lossy set of chunk ids, safe to share between
 * threads without a lock.
 *
 * What a client remembers of the chunks a peer holds (net/client.h): it
 * only predicts, and the peer's answer to the commit settles every case,
 * so forgetting an id or keeping one the peer dropped costs time, never
 * correctness.  It keeps the first 8 bytes of each id (SHA-256 output is
 * uniform: the prefix is its own hash), in buckets of 8 (a cache line); a full bucket
 * gives up one of its keys.  A false "held" for a chunk the peer lacks
 * needs an 8-byte collision or a chunk the peer dropped since.
 */
#ifndef DMAR_IDCACHE_H
#define DMAR_IDCACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "hash.h"

struct dmar_idcache;

/* Room for 8 << log2_buckets ids, 8 bytes each.
 * NULL without memory. */
struct dmar_idcache *dmar_idcache_new(unsigned log2_buckets);
void dmar_idcache_free(struct dmar_idcache *c);
/* Remember ids[0..n); without memory, nothing (it is a cache). */
void dmar_idcache_add(struct dmar_idcache *c, const struct dmar_id *ids, size_t n);
/* Forget id. */
void dmar_idcache_drop(struct dmar_idcache *c, const struct dmar_id *id);
/* Whether id was added and not forgotten since (as far as the cache
 * still knows). */
bool dmar_idcache_has(const struct dmar_idcache *c, const struct dmar_id *id);

#endif /* DMAR_IDCACHE_H */
