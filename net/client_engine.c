/* SPDX-License-Identifier: MIT */
/*
 * What the transfer engines (push, pull) share (client_i.h): progress,
 * the first failure, the stream threads.
 */
#include "config.h"

#include "client_i.h"
#include "codec/clock.h"

void cl_engine_init(struct engine *e, struct dmar_client *c, dmar_xfer_progress_fn progress, void *pctx)
{
	memset(e, 0, sizeof(*e));
	e->c = c;
	e->progress = progress;
	e->pctx = pctx;
	pthread_mutex_init(&e->lock, NULL);
	e->t0 = dmar_mono_s();
}

/* Record a stream's failure; the first one wins and stops the others,
 * but for a plain I/O error, which the peer's own answer (ENOSPC from a
 * stream whose request was answered) replaces: a full arena made one
 * stream's connection close under it while another read the 507. */
void cl_engine_fail(struct engine *e, int code, const struct dmar_error *err)
{
	pthread_mutex_lock(&e->lock);
	if (e->err.code == -EIO && code != -EIO && code != -ECANCELED)
		memset(&e->err, 0, sizeof(e->err));
	if (!e->err.code) {
		if (err && err->code)
			dmar_error_set(&e->err, code, "%s", err->msg);
		else
			dmar_error_errno(&e->err, code, e->c->label);
		e->err.code = code;
	}
	pthread_mutex_unlock(&e->lock);
	atomic_store(&e->failed, 1);
}

/* Add a request's figures and tell the caller, under the lock so progress
 * is never called twice at once. */
void cl_engine_account(struct engine *e, uint64_t chunks, uint64_t bytes, const struct call *k)
{
	pthread_mutex_lock(&e->lock);
	e->st.sent_chunks += chunks;
	e->st.chunk_bytes += bytes;
	e->st.wire_bytes += k->wire;
	e->st.requests += k->answered;
	e->st.connects += k->connects;
	e->st.seconds = (dmar_mono_s() - e->t0);
	if (e->progress)
		e->progress(e->pctx, &e->st);
	pthread_mutex_unlock(&e->lock);
}

/* Run fn on nthreads threads (the calling one among them) and wait. */
int cl_run_streams(void *(*fn)(void *), void *args, size_t arg_size, unsigned nthreads)
{
	pthread_t *tid = calloc(nthreads, sizeof(*tid));
	if (!tid)
		return -ENOMEM;
	unsigned started = 1;
	for (; started < nthreads; started++)
		if (pthread_create(&tid[started], NULL, fn, (char *)args + started * arg_size) != 0)
			break; /* fewer streams: the work is shared, not lost */
	fn(args);
	for (unsigned i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	free(tid);
	return 0;
}

void cl_engine_finish(struct engine *e, struct dmar_xfer_stats *st, int r, struct dmar_error *err)
{
	e->st.seconds = (dmar_mono_s() - e->t0);
	if (e->progress)
		e->progress(e->pctx, &e->st);
	if (st)
		*st = e->st;
	if (r < 0 && e->err.code && err)
		dmar_error_set(err, r, "%s", e->err.msg);
	pthread_mutex_destroy(&e->lock);
	dmar_idset_free(&e->set);
}
