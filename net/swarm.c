/* SPDX-License-Identifier: MIT */
/*
 * Swarm pulls (swarm.h): have/want at every candidate, the chunks shared
 * out among their holders, pulled side by side, rounds until done.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "swarm.h"
#include "codec/idset.h"
#include "codec/clock.h"

struct swarm {
	struct dmar_swarm_peer *p;
	size_t np;
	struct dmar_idset set;
	uint8_t *holds;      /* set.n x np: holds[i * np + k], peer k holds chunk i */
	atomic_uchar *got;   /* per set index: in the sink */
	bool alive[DMAR_SWARM_PEERS];
	const struct dmar_chunk_sink *sink;
	atomic_int sink_err; /* the sink refused a chunk: the pull stops */
	pthread_mutex_t lock;
	struct dmar_xfer_stats st; /* the pulls' figures, added up under lock */
	struct dmar_xfer_stats live[DMAR_SWARM_PEERS]; /* each running pull's so far */
	dmar_xfer_progress_fn progress;
	void *prctx;
	double t0;
};

/* One peer's part of a round. */
struct part {
	struct swarm *w;
	size_t k;
	struct dmar_id *ids;
	size_t n, cap;
	struct dmar_error err;
	int r;
	pthread_t th;
};

static int part_put(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded)
{
	struct part *pt = ctx;
	struct swarm *w = pt->w;
	int64_t idx = dmar_idset_find(&w->set, &c->id);
	if (idx < 0)
		return -EBADMSG; /* the pull checks this already */
	int r = w->sink->put(w->sink->ctx, c, decoded);
	if (r < 0) {
		int none = 0;
		atomic_compare_exchange_strong(&w->sink_err, &none, r);
		return r;
	}
	atomic_store(&w->got[idx], 1);
	__atomic_add_fetch(&w->p[pt->k].chunks, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&w->p[pt->k].bytes, c->len, __ATOMIC_RELAXED);
	return 0;
}

static void add(struct dmar_xfer_stats *to, const struct dmar_xfer_stats *s)
{
	to->sent_chunks += s->sent_chunks;
	to->chunk_bytes += s->chunk_bytes;
	to->wire_bytes += s->wire_bytes;
	to->requests += s->requests;
	to->connects += s->connects;
}

/* The whole pull's figures so far, with w->lock held. */
static struct dmar_xfer_stats sum(const struct swarm *w)
{
	struct dmar_xfer_stats t = w->st;
	for (size_t k = 0; k < w->np; k++)
		add(&t, &w->live[k]);
	t.chunks = w->set.n;
	t.logical = t.chunk_bytes;
	t.seconds = dmar_mono_s() - w->t0;
	return t;
}

/* A peer's pull reports its progress: the swarm's caller sees the sum. */
static void part_progress(void *ctx, const struct dmar_xfer_stats *st)
{
	struct part *pt = ctx;
	struct swarm *w = pt->w;
	pthread_mutex_lock(&w->lock);
	w->live[pt->k] = *st;
	struct dmar_xfer_stats t = sum(w);
	w->progress(w->prctx, &t);
	pthread_mutex_unlock(&w->lock);
}

static void *part_run(void *arg)
{
	struct part *pt = arg;
	struct swarm *w = pt->w;
	struct dmar_chunk_sink sink = { .put = part_put, .ctx = pt };
	struct dmar_xfer_stats st = { 0 };
	pt->r = dmar_client_pull(w->p[pt->k].c, pt->ids, pt->n, &sink, w->progress ? part_progress : NULL, pt, &st,
				 &pt->err);
	pthread_mutex_lock(&w->lock);
	add(&w->st, &st);
	memset(&w->live[pt->k], 0, sizeof(w->live[pt->k]));
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* The have/want query of peer k, run beside the others'. */
struct ask {
	struct swarm *w;
	size_t k;
	uint8_t *missing;
	pthread_t th;
	bool started;
};

static void *ask_run(void *arg)
{
	struct ask *a = arg;
	struct swarm *w = a->w;
	struct dmar_error e = { 0 };
	int r = dmar_client_query(w->p[a->k].c, w->set.ids, w->set.n, a->missing, &e);
	if (r < 0) {
		w->p[a->k].err = r;
		return NULL;
	}
	w->alive[a->k] = true;
	for (size_t i = 0; i < w->set.n; i++)
		w->holds[i * w->np + a->k] = !a->missing[i];
	return NULL;
}

static int ask_all(struct swarm *w)
{
	struct ask a[DMAR_SWARM_PEERS] = { 0 };
	int r = 0;
	for (size_t k = 0; k < w->np && !r; k++) {
		a[k] = (struct ask){ .w = w, .k = k, .missing = malloc(w->set.n ? w->set.n : 1) };
		if (!a[k].missing)
			r = -ENOMEM;
		else if (!(a[k].started = pthread_create(&a[k].th, NULL, ask_run, &a[k]) == 0))
			ask_run(&a[k]);
	}
	for (size_t k = 0; k < w->np; k++) {
		if (a[k].started)
			pthread_join(a[k].th, NULL);
		free(a[k].missing);
	}
	return r;
}

/* One round: every chunk not yet in goes to its least loaded live holder,
 * all peers pull side by side.  -ENOENT when a chunk has no live holder. */
static int round_run(struct swarm *w, struct dmar_error *err)
{
	struct part pt[DMAR_SWARM_PEERS] = { 0 };
	int r = 0;
	for (size_t i = 0; i < w->set.n && !r; i++) {
		if (atomic_load(&w->got[i]))
			continue;
		size_t best = w->np;
		for (size_t k = 0; k < w->np; k++)
			if (w->alive[k] && w->holds[i * w->np + k] && (best == w->np || pt[k].n < pt[best].n))
				best = k;
		if (best == w->np) {
			char hex[17];
			dmar_hex(w->set.ids[i].b, 8, hex);
			r = dmar_error_set(err, -ENOENT, "chunk %s...: no peer left that holds it (%s: %s)", hex,
					   w->p[0].name ? w->p[0].name : "the file's node",
					   w->p[0].err ? strerror(-w->p[0].err) : "does not hold it");
			break;
		}
		struct part *q = &pt[best];
		if (q->n == q->cap) {
			size_t cap = q->cap ? 2 * q->cap : 256;
			struct dmar_id *ni = realloc(q->ids, cap * sizeof(*ni));
			if (!ni) {
				r = -ENOMEM;
				break;
			}
			q->ids = ni;
			q->cap = cap;
		}
		q->ids[q->n++] = w->set.ids[i];
	}
	bool started[DMAR_SWARM_PEERS] = { false };
	for (size_t k = 0; k < w->np && !r; k++) {
		if (!pt[k].n)
			continue;
		pt[k].w = w;
		pt[k].k = k;
		if (!(started[k] = pthread_create(&pt[k].th, NULL, part_run, &pt[k]) == 0))
			part_run(&pt[k]);
	}
	for (size_t k = 0; k < w->np; k++) {
		if (started[k])
			pthread_join(pt[k].th, NULL);
		/* A peer that failed is left out; its chunks go to the others
		 * next round.  The sink's own refusal ends the pull. */
		if (pt[k].n && pt[k].r < 0 && !atomic_load(&w->sink_err)) {
			w->alive[k] = false;
			w->p[k].err = pt[k].r;
		}
		free(pt[k].ids);
	}
	int se = atomic_load(&w->sink_err);
	if (!r && se)
		r = dmar_error_set(err, se, "pull: %s", strerror(-se));
	return r;
}

int dmar_swarm_pull(struct dmar_swarm_peer *p, size_t np, const struct dmar_id *ids, size_t n,
		    const struct dmar_chunk_sink *sink, dmar_xfer_progress_fn progress, void *prctx,
		    struct dmar_xfer_stats *st, struct dmar_error *err)
{
	if (np > DMAR_SWARM_PEERS)
		np = DMAR_SWARM_PEERS;
	struct swarm w = { .p = p, .np = np, .sink = sink, .progress = progress, .prctx = prctx, .t0 = dmar_mono_s() };
	pthread_mutex_init(&w.lock, NULL);
	for (size_t k = 0; k < np; k++) {
		p[k].chunks = p[k].bytes = 0;
		p[k].err = 0;
	}
	int r = dmar_idset_init(&w.set, n ? n : 1);
	for (size_t i = 0; r == 0 && i < n; i++)
		if (dmar_idset_add(&w.set, &ids[i], NULL) < 0)
			r = -ENOMEM;
	if (r == 0 && (!(w.holds = calloc(w.set.n * np + 1, 1)) || !(w.got = calloc(w.set.n + 1, 1))))
		r = -ENOMEM;
	if (r == 0 && w.set.n && np)
		r = ask_all(&w);
	/* A round leaves out at least one peer or finishes: np + 1 rounds
	 * suffice. */
	for (size_t round = 0; r == 0 && round <= np; round++) {
		bool left = false;
		for (size_t i = 0; i < w.set.n && !left; i++)
			left = !atomic_load(&w.got[i]);
		if (!left)
			break;
		r = round_run(&w, err);
	}
	if (r == 0)
		for (size_t i = 0; i < w.set.n; i++)
			if (!atomic_load(&w.got[i])) {
				r = dmar_error_set(err, -EIO, "pull: every peer failed (%s: %s)", p[0].name ? p[0].name : "?",
						   strerror(-(p[0].err ? p[0].err : EIO)));
				break;
			}
	if (st)
		*st = sum(&w);
	free(w.holds);
	free(w.got);
	dmar_idset_free(&w.set);
	pthread_mutex_destroy(&w.lock);
	return r;
}
