/* SPDX-License-Identifier: MIT */
/*
 * pool.h - a fixed set of worker threads running jobs that the submitter
 * collects in submission order (so output stays in file order while the
 * work runs in parallel).
 *
 * With threads == 0 there are no threads: dmar_pool_submit runs the job at
 * once in the caller, so single-threaded runs pay nothing for the pool.
 * Otherwise the owner, while it waits, runs queued jobs itself: it counts
 * as one more worker, so `threads` workers keep threads + 1 cores busy.
 * Submit and wait must be called from one thread (the owner); job
 * functions run on workers (or the owner) and must only touch their own
 * job.
 */
#ifndef DMAR_POOL_H
#define DMAR_POOL_H

#include <stdbool.h>

struct dmar_pool;

struct dmar_pool_job {
	/* Runs on a worker; worker is in [0, threads] (threads is the owner
	 * itself, helping while it waits) and lets a job use per-worker
	 * scratch (compression contexts) without locking: give the pool
	 * threads + 1 sets of scratch. */
	void (*fn)(struct dmar_pool_job *job, unsigned worker);
	struct dmar_pool_job *next; /* protected by the pool mutex */
	bool done;                  /* protected by the pool mutex */
};

/* threads: worker threads, 0 = run jobs inline.  Returns 0 or -ENOMEM/-EAGAIN. */
int dmar_pool_new(struct dmar_pool **out, unsigned threads);
unsigned dmar_pool_threads(const struct dmar_pool *p);
void dmar_pool_submit(struct dmar_pool *p, struct dmar_pool_job *job);
/* Block until job (submitted earlier) has finished, running queued jobs
 * in the meantime. */
void dmar_pool_wait(struct dmar_pool *p, struct dmar_pool_job *job);
/* Run the oldest queued job, if any, on the owner's thread (as wait does
 * while it waits); returns whether one ran.  Owner only. */
bool dmar_pool_run_one(struct dmar_pool *p);
/* Has job (submitted earlier) finished?  Never waits, runs nothing. */
bool dmar_pool_done(struct dmar_pool *p, struct dmar_pool_job *job);

/* Waits for queued jobs, then joins the workers.  NULL-safe. */
void dmar_pool_free(struct dmar_pool *p);

#endif /* DMAR_POOL_H */
