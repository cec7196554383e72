/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "idcache.h"

/* 8 keys: one cache line a bucket, aligned */
#define WAYS 8

struct dmar_idcache {
	uint64_t *keys; /* WAYS a bucket, 0 empty; relaxed atomics: a torn
			 * race loses or keeps one id, which a cache may */
	uint64_t mask;  /* buckets - 1 */
	size_t bytes;
};

/* The id's key: its first 8 bytes, never 0 (0 marks an empty way). */
static uint64_t key_of(const struct dmar_id *id)
{
	uint64_t k;
	memcpy(&k, id->b, sizeof(k));
	return k ? k : 1;
}

/* The bucket from other bits than the ones a key compares first. */
static uint64_t *bucket_of(const struct dmar_idcache *c, uint64_t k)
{
	return &c->keys[((k >> 32 ^ k) & c->mask) * WAYS];
}

struct dmar_idcache *dmar_idcache_new(unsigned log2_buckets)
{
	if (log2_buckets > 30)
		return NULL;
	struct dmar_idcache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->mask = (1ull << log2_buckets) - 1;
	/* Fresh zero pages, touched as keys land: a client that never
	 * pushes costs nothing for it. */
	c->bytes = (c->mask + 1) * WAYS * sizeof(*c->keys);
	void *p = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(c);
		return NULL;
	}
	c->keys = p;
	return c;
}

void dmar_idcache_free(struct dmar_idcache *c)
{
	if (!c)
		return;
	munmap(c->keys, c->bytes);
	free(c);
}

void dmar_idcache_add(struct dmar_idcache *c, const struct dmar_id *ids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t k = key_of(&ids[i]);
		uint64_t *b = bucket_of(c, k);
		int empty = -1;
		int w;
		for (w = 0; w < WAYS; w++) {
			uint64_t v = __atomic_load_n(&b[w], __ATOMIC_RELAXED);
			if (v == k)
				break;
			if (!v && empty < 0)
				empty = w;
		}
		if (w < WAYS)
			continue;
		/* A full bucket gives up a way the key's own bits pick: no
		 * state to keep, and no way is favoured. */
		int victim = empty >= 0 ? empty : (int)(k >> 61);
		__atomic_store_n(&b[victim], k, __ATOMIC_RELAXED);
	}
}

void dmar_idcache_drop(struct dmar_idcache *c, const struct dmar_id *id)
{
	uint64_t k = key_of(id);
	uint64_t *b = bucket_of(c, k);
	for (int w = 0; w < WAYS; w++)
		if (__atomic_load_n(&b[w], __ATOMIC_RELAXED) == k)
			__atomic_store_n(&b[w], 0, __ATOMIC_RELAXED);
}

bool dmar_idcache_has(const struct dmar_idcache *c, const struct dmar_id *id)
{
	uint64_t k = key_of(id);
	const uint64_t *b = bucket_of(c, k);
	for (int w = 0; w < WAYS; w++)
		if (__atomic_load_n(&b[w], __ATOMIC_RELAXED) == k)
			return true;
	return false;
}
