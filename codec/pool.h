/* SPDX-License-Identifier: MIT */
/*
 * pool.h - a fixed set of worker threads running jobs that the submitter
 * collects in submission order (so output stays in file order while the
 * work runs in parallel).
 *
 * With threads == 0 there are no threads: dmar_pool_submit runs the job at
 * once in the caller, so single-threaded runs pay nothing for the pool.
 * Submit and wait must be called from one thread (the owner); job
 * functions run on workers and must only touch their own job.
 */
#ifndef DMAR_POOL_H
#define DMAR_POOL_H

#include <stdbool.h>

struct dmar_pool;

struct dmar_pool_job {
	/* Runs on a worker; worker is in [0, max(threads, 1)) and lets a job use
	 * per-worker scratch (compression contexts) without locking. */
	void (*fn)(struct dmar_pool_job *job, unsigned worker);
	struct dmar_pool_job *next; /* protected by the pool mutex */
	bool done;                  /* protected by the pool mutex */
};

/* threads: worker threads, 0 = run jobs inline.  Returns 0 or -ENOMEM/-EAGAIN. */
int dmar_pool_new(struct dmar_pool **out, unsigned threads);
unsigned dmar_pool_threads(const struct dmar_pool *p);
void dmar_pool_submit(struct dmar_pool *p, struct dmar_pool_job *job);
/* Block until job (submitted earlier) has finished. */
void dmar_pool_wait(struct dmar_pool *p, struct dmar_pool_job *job);
/* Waits for queued jobs, then joins the workers.  NULL-safe. */
void dmar_pool_free(struct dmar_pool *p);

#endif /* DMAR_POOL_H */
