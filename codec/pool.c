/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "pool.h"

struct dmar_pool {
	unsigned threads;
	pthread_mutex_t lock;
	pthread_cond_t work;      /* signalled when a job is queued or on stop */
	pthread_cond_t finished;  /* broadcast when any job finishes */
	struct dmar_pool_job *head, *tail; /* queued jobs, protected by lock */
	bool stop;                /* protected by lock */
	unsigned started;
	pthread_t tid[];
};

struct worker_arg {
	struct dmar_pool *p;
	unsigned idx;
};

/* Take the oldest queued job, or NULL.  Called with the lock held. */
static struct dmar_pool_job *take(struct dmar_pool *p)
{
	struct dmar_pool_job *j = p->head;
	if (j) {
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
	}
	return j;
}

/* Run j outside the lock (held on entry and on return). */
static void run(struct dmar_pool *p, struct dmar_pool_job *j, unsigned worker)
{
	pthread_mutex_unlock(&p->lock);
	j->fn(j, worker);
	pthread_mutex_lock(&p->lock);
	j->done = true;
	pthread_cond_broadcast(&p->finished);
}

static void *worker_main(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	struct dmar_pool *p = wa.p;
	free(arg);

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->stop)
			pthread_cond_wait(&p->work, &p->lock);
		struct dmar_pool_job *j = take(p);
		if (!j)
			break;
		run(p, j, wa.idx);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int dmar_pool_new(struct dmar_pool **out, unsigned threads)
{
	unsigned nt = threads;
	struct dmar_pool *p = calloc(1, sizeof(*p) + nt * sizeof(pthread_t));
	if (!p)
		return -ENOMEM;
	p->threads = threads;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->finished, NULL);
	for (unsigned i = 0; i < nt; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		if (!wa) {
			dmar_pool_free(p);
			return -ENOMEM;
		}
		wa->p = p;
		wa->idx = i;
		int r = pthread_create(&p->tid[i], NULL, worker_main, wa);
		if (r) {
			free(wa);
			dmar_pool_free(p);
			return -r;
		}
		p->started++;
	}
	*out = p;
	return 0;
}

unsigned dmar_pool_threads(const struct dmar_pool *p)
{
	return p->threads;
}

void dmar_pool_submit(struct dmar_pool *p, struct dmar_pool_job *job)
{
	job->next = NULL;
	job->done = false;
	if (p->threads == 0) {
		job->fn(job, 0);
		job->done = true;
		return;
	}
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->next = job;
	else
		p->head = job;
	p->tail = job;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
}

void dmar_pool_wait(struct dmar_pool *p, struct dmar_pool_job *job)
{
	if (p->threads == 0)
		return;
	/* Rather than sleep while jobs wait in the queue, the owner runs
	 * them: with one worker, cutting (or parsing) on the owner and
	 * hashing on the worker then share both cores, instead of the owner
	 * idling whenever the worker is the slower stage. */
	pthread_mutex_lock(&p->lock);
	while (!job->done) {
		struct dmar_pool_job *j = take(p);
		if (j)
			run(p, j, p->threads);
		else
			pthread_cond_wait(&p->finished, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
}

bool dmar_pool_run_one(struct dmar_pool *p)
{
	if (p->threads == 0)
		return false; /* submit ran every job already */
	pthread_mutex_lock(&p->lock);
	struct dmar_pool_job *j = take(p);
	if (j)
		run(p, j, p->threads);
	pthread_mutex_unlock(&p->lock);
	return j != NULL;
}

bool dmar_pool_done(struct dmar_pool *p, struct dmar_pool_job *job)
{
	if (p->threads == 0)
		return job->done;
	pthread_mutex_lock(&p->lock);
	bool done = job->done;
	pthread_mutex_unlock(&p->lock);
	return done;
}

void dmar_pool_free(struct dmar_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->tid[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->finished);
	free(p);
}
