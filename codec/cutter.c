/* SPDX-License-Identifier: MIT */
/*
 * The streaming cutter of cutter.h: a window that keeps at least the
 * chunker's max bytes ahead of every cut (so a cut never depends on bytes
 * not yet seen), batches of chunks hashed together.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cutter.h"

#define CUTTER_WINDOW (4u << 20)
/* Chunks hashed together: enough for every lane of dmar_hash_chunks. */
#define CUTTER_BATCH 16u

struct dmar_cutter {
	struct dmar_chunker ck;
	dmar_cutter_fn fn;
	void *ctx;
	uint8_t *win;
	size_t cap, len;
	int rc; /* fn's stop or error, sticky */
};

int dmar_cutter_new(struct dmar_cutter **out, const struct dmar_chunker *ck, dmar_cutter_fn fn, void *ctx)
{
	struct dmar_cutter *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->ck = *ck;
	c->fn = fn;
	c->ctx = ctx;
	c->cap = CUTTER_WINDOW + ck->max;
	if (!(c->win = malloc(c->cap))) {
		free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void dmar_cutter_free(struct dmar_cutter *c)
{
	if (!c)
		return;
	free(c->win);
	free(c);
}

/* Cut, hash and hand over the window's chunks; at eof all of them, else
 * those with max bytes ahead of their start. */
static int drain(struct dmar_cutter *c, bool eof)
{
	uint32_t lens[CUTTER_BATCH];
	struct dmar_id ids[CUTTER_BATCH];
	size_t pos = 0;
	while (!c->rc) {
		size_t ahead = c->len - pos;
		if (!ahead || (!eof && ahead < c->ck.max))
			break;
		/* Without eof, cut only where max bytes are seen from the
		 * start of every chunk: the cut is then the same whatever
		 * comes after. */
		size_t limit = eof ? ahead : ahead - c->ck.max + 1, cut;
		unsigned n = dmar_chunker_cut(&c->ck, c->win + pos, ahead, eof, limit, lens, CUTTER_BATCH, &cut);
		if (!n)
			break;
		dmar_hash_chunks(c->win + pos, lens, NULL, n, ids);
		for (unsigned i = 0; i < n && !c->rc; i++) {
			c->rc = c->fn(c->ctx, c->win + pos, lens[i], &ids[i]);
			pos += lens[i];
		}
	}
	memmove(c->win, c->win + pos, c->len - pos);
	c->len -= pos;
	return c->rc;
}

void dmar_cutter_space(struct dmar_cutter *c, uint8_t **dst, size_t *cap)
{
	*dst = c->win + c->len;
	*cap = c->cap - c->len;
}

int dmar_cutter_commit(struct dmar_cutter *c, size_t n)
{
	c->len += n;
	if (c->rc || c->len < c->cap)
		return c->rc;
	return drain(c, false);
}

int dmar_cutter_feed(struct dmar_cutter *c, const void *p, size_t len)
{
	const uint8_t *s = p;
	while (len && !c->rc) {
		uint8_t *dst;
		size_t cap;
		dmar_cutter_space(c, &dst, &cap);
		size_t k = len < cap ? len : cap;
		memcpy(dst, s, k);
		s += k;
		len -= k;
		dmar_cutter_commit(c, k);
	}
	return c->rc;
}

int dmar_cutter_finish(struct dmar_cutter *c)
{
	if (c->rc)
		return c->rc;
	return drain(c, true);
}

void dmar_cutter_reset(struct dmar_cutter *c)
{
	c->len = 0;
	c->rc = 0;
}
