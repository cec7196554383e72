/* SPDX-License-Identifier: MIT */
/*
 * idset.h - a set of distinct chunk ids, in the order first added.
 *
 * What a transfer asks for (each chunk once however often a file repeats
 * it) and where a sender finds a chunk.  Open addressing over the ids'
 * first 8 bytes: SHA-256 output is uniform, so no further hashing.  ids[]
 * stays dense and in first-seen order, so it is an id list as it is, and
 * callers keep what they know of each chunk in arrays of their own indexed
 * like it.  The capacity is fixed at init.
 */
#ifndef DMAR_IDSET_H
#define DMAR_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct dmar_idset {
	struct dmar_id *ids; /* the n distinct ids, first-seen order (read only) */
	size_t n;
	uint32_t *slot; /* private: index + 1, 0 empty */
	size_t mask, max;
};

/* Room for max distinct ids.  0 or -ENOMEM (s then free-able). */
int dmar_idset_init(struct dmar_idset *s, size_t max);
void dmar_idset_free(struct dmar_idset *s);
/* The index of id, or -1. */
int64_t dmar_idset_find(const struct dmar_idset *s, const struct dmar_id *id);
/* Add id, if new (*added tells; may be NULL): its index, or -ENOSPC past
 * the capacity. */
int64_t dmar_idset_add(struct dmar_idset *s, const struct dmar_id *id, bool *added);

#endif /* DMAR_IDSET_H */
