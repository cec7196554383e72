/* SPDX-License-Identifier: MIT */
/*
 * The set of distinct chunk ids of idset.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idset.h"

static uint64_t id_key(const struct dmar_id *id)
{
	uint64_t k;
	memcpy(&k, id->b, sizeof(k));
	return k;
}

int dmar_idset_init(struct dmar_idset *s, size_t max)
{
	memset(s, 0, sizeof(*s));
	size_t cap = 16;
	while (cap < 2 * max) /* at most half full: short probe runs */
		cap *= 2;
	s->slot = calloc(cap, sizeof(*s->slot));
	s->ids = malloc((max ? max : 1) * sizeof(*s->ids));
	s->mask = cap - 1;
	s->max = max;
	if (!s->slot || !s->ids || max > UINT32_MAX - 1)
		return -ENOMEM;
	return 0;
}

void dmar_idset_free(struct dmar_idset *s)
{
	free(s->ids);
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

/* The slot where id is, or the empty one where it would go. */
static size_t probe(const struct dmar_idset *s, const struct dmar_id *id)
{
	size_t i = id_key(id) & s->mask;
	for (;; i = (i + 1) & s->mask) {
		uint32_t v = s->slot[i];
		if (!v || memcmp(s->ids[v - 1].b, id->b, DMAR_HASH_SIZE) == 0)
			return i;
	}
}

int64_t dmar_idset_find(const struct dmar_idset *s, const struct dmar_id *id)
{
	uint32_t v = s->slot[probe(s, id)];
	return v ? (int64_t)v - 1 : -1;
}

int64_t dmar_idset_add(struct dmar_idset *s, const struct dmar_id *id, bool *added)
{
	size_t i = probe(s, id);
	uint32_t v = s->slot[i];
	if (added)
		*added = !v;
	if (v)
		return (int64_t)v - 1;
	if (s->n == s->max)
		return -ENOSPC;
	s->ids[s->n] = *id;
	s->slot[i] = (uint32_t)++s->n;
	return (int64_t)s->n - 1;
}
