/* SPDX-License-Identifier: MIT */
/*
 * The housekeeping thread of idle.h.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "idle.h"
#include "ns.h"
#include "persist.h"
#include "codec/clock.h"

/* How often the thread also sees whether the journal wants a
 * checkpoint. */
#define CKPT_SECONDS 2

/* last_write of a file closed since its last write: due at once (the
 * monotonic clock is past 0 by the time a mount exists). */
#define CLOSED 0
/* last_write of the files an attached arena holds unencoded: due at once
 * too, but not settled by statfs or the check (idle_settle), which must
 * not wait for a re-attach's backlog. */
#define LONG_AGO 1

uint64_t idle_now(void)
{
	return dmar_mono_ms() / 1000;
}

/* Put i on the work list, holding a lookup reference; ns held. */
static void enqueue(struct dmarfs *fs, struct inode *i)
{
	i->queued = true;
	i->nlookup++;
	i->idle_next = fs->idle_head;
	fs->idle_head = i;
	fs->idle_queued++;
}

void idle_note_write(struct dmarfs *fs, struct inode *i, uint64_t now_s)
{
	__atomic_store_n(&i->last_write, now_s, __ATOMIC_RELAXED);
	if (__atomic_load_n(&i->queued, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&fs->ns);
	if (!i->queued && !fs->idle_stop)
		enqueue(fs, i);
	pthread_mutex_unlock(&fs->ns);
}

bool idle_note_close(struct dmarfs *fs, struct inode *i)
{
	pthread_mutex_lock(&fs->ns);
	bool queued = fs->idle_running && !fs->idle_stop;
	if (queued) {
		__atomic_store_n(&i->last_write, CLOSED, __ATOMIC_RELAXED);
		if (!i->queued)
			enqueue(fs, i);
		fs->idle_kick = true;
		pthread_cond_signal(&fs->idle_cond);
	}
	pthread_mutex_unlock(&fs->ns);
	return queued;
}

/* Which files a pass takes: those due at now_s, the closed ones only, or
 * all. */
enum pick { DUE, CLOSED_ONLY, ALL };

static bool picked(const struct inode *i, enum pick how, uint64_t now_s)
{
	uint64_t w = __atomic_load_n(&i->last_write, __ATOMIC_RELAXED);
	switch (how) {
	case DUE:
		return w == CLOSED || now_s - w >= IDLE_SECONDS;
	case CLOSED_ONLY:
		return w == CLOSED;
	case ALL:
		break;
	}
	return true;
}

/* Take the files of the idle list that how picks off it, into *due
 * (grown as needed); how many.  ns held.  One pass: every file written in
 * the last seconds is on the list (a git clone puts thousands there), and
 * a walk from the head for each file encoded held the namespace lock for
 * most of a clone. */
static size_t take(struct dmarfs *fs, enum pick how, uint64_t now_s, struct inode ***due, size_t *cap)
{
	size_t n = 0;
	for (struct inode **p = &fs->idle_head; *p;) {
		struct inode *i = *p;
		if (!picked(i, how, now_s)) {
			p = &i->idle_next;
			continue;
		}
		if (n == *cap) {
			size_t c = *cap ? 2 * *cap : 256;
			struct inode **d = realloc(*due, c * sizeof(*d));
			if (!d)
				break; /* the rest at the next pass */
			*due = d;
			*cap = c;
		}
		*p = i->idle_next;
		i->idle_next = NULL;
		i->queued = false; /* a write from now on queues it again */
		fs->idle_queued--;
		(*due)[n++] = i;
	}
	return n;
}

static size_t encode_picked(struct dmarfs *fs, enum pick how, uint64_t now_s)
{
	struct inode **due = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&fs->ns);
	size_t n = fs->idle_stop ? 0 : take(fs, how, now_s, &due, &cap);
	for (size_t k = 0; k < n; k++) {
		struct inode *i = due[k];
		bool live = !fs->idle_stop && i->nlink > 0 && S_ISREG(i->mode);
		pthread_mutex_unlock(&fs->ns);
		/* The sync makes "IDLE_SECONDS without writes" a durable
		 * state. */
		if (live) {
			ns_encode(fs, i, &fs->cfg.ctx, 1);
			(void)persist_sync(fs, i);
		}
		pthread_mutex_lock(&fs->ns);
		ns_forget_locked(fs, i, 1); /* the list's reference */
	}
	pthread_mutex_unlock(&fs->ns);
	free(due);
	return n;
}

size_t idle_encode_due(struct dmarfs *fs, uint64_t now_s)
{
	return encode_picked(fs, DUE, now_s);
}

size_t idle_settle(struct dmarfs *fs, bool all)
{
	return encode_picked(fs, all ? ALL : CLOSED_ONLY, 0);
}

static void *idle_main(void *arg)
{
	struct dmarfs *fs = arg;
	(void)pthread_setname_np(pthread_self(), "dmarfs-encode");
	/* Tests of the settle points hold the thread's own encoding back. */
	static uint64_t pause_once;
	bool paused = ns_env_knob("DMARFS_ENCODER_PAUSE", 0, &pause_once) != 0;
	/* This thread only: Linux's nice is per thread. */
	if (setpriority(PRIO_PROCESS, (id_t)gettid(), IDLE_NICE) != 0)
		perror("dmarfs: the encoder thread's priority (encoding runs at the writers' then)");
	uint64_t next_ckpt = idle_now() + CKPT_SECONDS, next_tick = 0;
	pthread_mutex_lock(&fs->ns);
	while (!fs->idle_stop) {
		if (!fs->idle_kick) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 1;
			pthread_cond_timedwait(&fs->idle_cond, &fs->ns, &until);
		}
		fs->idle_kick = false;
		if (fs->idle_stop)
			break;
		pthread_mutex_unlock(&fs->ns);
		uint64_t now_s = idle_now();
		if (!paused)
			idle_encode_due(fs, now_s);
		if (now_s >= next_tick) { /* once a second, however often closes wake it */
			next_tick = now_s + 1;
			ns_tick(fs);
		}
		if (now_s >= next_ckpt) {
			next_ckpt = now_s + CKPT_SECONDS;
			int r = persist_checkpoint(fs, false);
			if (r < 0)
				fprintf(stderr, "dmarfs: checkpoint of the journal: %s (tried again later)\n",
					strerror(-r));
		}
		pthread_mutex_lock(&fs->ns);
	}
	pthread_mutex_unlock(&fs->ns);
	return NULL;
}

void idle_start(struct dmarfs *fs)
{
	pthread_mutex_lock(&fs->ns);
	fs->idle_running = pthread_create(&fs->idle_thread, NULL, idle_main, fs) == 0;
	for (struct inode *i = fs->all; fs->idle_running && i; i = i->all_next) {
		if (!S_ISREG(i->mode) || !i->f.dirty || i->queued || !i->nlink)
			continue;
		__atomic_store_n(&i->last_write, LONG_AGO, __ATOMIC_RELAXED);
		enqueue(fs, i);
	}
	pthread_mutex_unlock(&fs->ns);
}

void idle_stop(struct dmarfs *fs)
{
	pthread_mutex_lock(&fs->ns);
	bool running = fs->idle_running;
	__atomic_store_n(&fs->idle_stop, true, __ATOMIC_RELAXED); /* ns_encode reads it without ns */
	fs->idle_running = false;
	pthread_cond_broadcast(&fs->idle_cond);
	pthread_mutex_unlock(&fs->ns);
	if (running)
		pthread_join(fs->idle_thread, NULL);
	pthread_mutex_lock(&fs->ns);
	while (fs->idle_head) {
		struct inode *i = fs->idle_head;
		fs->idle_head = i->idle_next;
		i->queued = false;
		fs->idle_queued--;
		ns_forget_locked(fs, i, 1);
	}
	pthread_mutex_unlock(&fs->ns);
}
