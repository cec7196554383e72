/* SPDX-License-Identifier: MIT */
/* Connection admission (admit.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admit.h"
#include "codec/clock.h"

/* Seconds between two log lines of the same reason. */
#define LOG_EVERY 10

enum state { PENDING, TRUSTED, CLOSED };

struct dmar_admit_conn {
	struct dmar_admit_conn *prev, *next; /* the pending list, oldest first */
	int fd;
	enum state state;
	uint64_t t0_ms;         /* accepted */
	uint8_t key[16];        /* the address: 4 or 16 bytes */
	uint8_t keylen;
	char text[INET6_ADDRSTRLEN];
};

/* How many pending connections one address holds. */
struct addr_count {
	uint8_t key[16];
	uint8_t keylen;
	unsigned count;
};

/* Closes of one reason since its last log line. */
struct tally {
	uint64_t n;
	char last[INET6_ADDRSTRLEN];
	uint64_t logged_ms;
};

struct dmar_admit {
	struct dmar_admit_opts o;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool stop;
	struct dmar_admit_conn *head, *tail;
	uint64_t npending, ntrusted, expired, evicted;
	/* the addresses of the pending connections (at most pending_max + 1) */
	struct addr_count *ac;
	size_t nac;
	struct tally t_expired, t_full, t_addr;
};

static struct addr_count *ac_find(struct dmar_admit *a, const struct dmar_admit_conn *c)
{
	for (size_t k = 0; k < a->nac; k++)
		if (a->ac[k].keylen == c->keylen && !memcmp(a->ac[k].key, c->key, c->keylen))
			return &a->ac[k];
	return NULL;
}

static void ac_add(struct dmar_admit *a, const struct dmar_admit_conn *c)
{
	struct addr_count *x = ac_find(a, c);
	if (!x) {
		x = &a->ac[a->nac++];
		memcpy(x->key, c->key, sizeof(x->key));
		x->keylen = c->keylen;
		x->count = 0;
	}
	x->count++;
}

static void ac_del(struct dmar_admit *a, const struct dmar_admit_conn *c)
{
	struct addr_count *x = ac_find(a, c);
	if (x && !--x->count)
		*x = a->ac[--a->nac];
}

static void unlink_pending(struct dmar_admit *a, struct dmar_admit_conn *c)
{
	ac_del(a, c);
	if (c->prev)
		c->prev->next = c->next;
	else
		a->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		a->tail = c->prev;
	c->prev = c->next = NULL;
	a->npending--;
}

/* Close a pending connection (lock held): its server thread sees the end
 * of the stream and cleans up; c stays until dmar_admit_close. */
static void kill_pending(struct dmar_admit *a, struct dmar_admit_conn *c, struct tally *why)
{
	unlink_pending(a, c);
	c->state = CLOSED;
	shutdown(c->fd, SHUT_RDWR);
	why->n++;
	memcpy(why->last, c->text, sizeof(why->last));
}

/* One line per reason that closed connections since its last line, at
 * most every LOG_EVERY seconds (lock held; the lines are written after
 * it is released). */
static size_t take_lines(struct dmar_admit *a, char lines[3][256], uint64_t t)
{
	size_t n = 0;
	struct {
		struct tally *t;
		const char *fmt;
	} r[] = {
		{ &a->t_expired, "closed %llu connection%s with no complete request %u ms after connecting (last from %s)" },
		{ &a->t_full, "closed %llu connection%s without a complete request for room: %u at most at once (the "
			      "oldest of the address holding the most go; last from %s)" },
		{ &a->t_addr, "closed %llu connection%s without a complete request for room: %u at most from one "
			      "address (its oldest go; last from %s)" },
	};
	unsigned v[] = { a->o.head_ms, a->o.pending_max, a->o.pending_per_addr };
	for (size_t k = 0; k < 3; k++) {
		struct tally *y = r[k].t;
		if (!y->n || t - y->logged_ms < LOG_EVERY * 1000ull)
			continue;
		snprintf(lines[n++], sizeof(lines[0]), r[k].fmt, (unsigned long long)y->n, y->n == 1 ? "" : "s", v[k],
			 y->last);
		y->n = 0;
		y->logged_ms = t;
	}
	return n;
}

static void put_lines(struct dmar_admit *a, char lines[3][256], size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (a->o.log)
			a->o.log(a->o.log_ctx, lines[k]);
		else
			fprintf(stderr, "dmarfs: %s\n", lines[k]);
	}
}

void dmar_admit_sweep(struct dmar_admit *a)
{
	char lines[3][256];
	uint64_t t = dmar_mono_ms();
	pthread_mutex_lock(&a->lock);
	while (a->head && t - a->head->t0_ms >= a->o.head_ms) {
		kill_pending(a, a->head, &a->t_expired);
		a->expired++;
	}
	size_t n = take_lines(a, lines, t);
	pthread_mutex_unlock(&a->lock);
	put_lines(a, lines, n);
}

static void *sweeper(void *arg)
{
	struct dmar_admit *a = arg;
	unsigned step = a->o.head_ms / 8 < 50 ? 50 : a->o.head_ms / 8;
	pthread_mutex_lock(&a->lock);
	while (!a->stop) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += (long)(step % 1000) * 1000000;
		until.tv_sec += step / 1000 + until.tv_nsec / 1000000000;
		until.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&a->cond, &a->lock, &until);
		if (a->stop)
			break;
		pthread_mutex_unlock(&a->lock);
		dmar_admit_sweep(a);
		pthread_mutex_lock(&a->lock);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

int dmar_admit_new(struct dmar_admit **out, const struct dmar_admit_opts *o)
{
	struct dmar_admit *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	if (o)
		a->o = *o;
	if (!a->o.pending_max)
		a->o.pending_max = DMAR_ADMIT_PENDING_MAX;
	if (!a->o.pending_per_addr)
		a->o.pending_per_addr = DMAR_ADMIT_PENDING_PER_ADDR;
	if (!a->o.head_ms)
		a->o.head_ms = DMAR_ADMIT_HEAD_MS;
	if (!(a->ac = calloc(a->o.pending_max + 1, sizeof(*a->ac)))) {
		free(a);
		return -ENOMEM;
	}
	pthread_mutex_init(&a->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&a->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&a->thread, NULL, sweeper, a) != 0) {
		pthread_cond_destroy(&a->cond);
		pthread_mutex_destroy(&a->lock);
		free(a->ac);
		free(a);
		return -EAGAIN;
	}
	*out = a;
	return 0;
}

void dmar_admit_free(struct dmar_admit *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stop = true;
	pthread_cond_signal(&a->cond);
	pthread_mutex_unlock(&a->lock);
	pthread_join(a->thread, NULL);
	/* What was closed in the last seconds, said before going. */
	char lines[3][256];
	a->t_expired.logged_ms = a->t_full.logged_ms = a->t_addr.logged_ms = 0;
	size_t n = take_lines(a, lines, UINT64_MAX / 2);
	put_lines(a, lines, n);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a->ac);
	free(a);
}

static void set_addr(struct dmar_admit_conn *c, const struct sockaddr *sa)
{
	strcpy(c->text, "?");
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		memcpy(c->key, &s4->sin_addr, 4);
		c->keylen = 4;
		inet_ntop(AF_INET, &s4->sin_addr, c->text, sizeof(c->text));
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		memcpy(c->key, &s6->sin6_addr, 16);
		c->keylen = 16;
		inet_ntop(AF_INET6, &s6->sin6_addr, c->text, sizeof(c->text));
	}
}

static bool same_addr(const struct dmar_admit_conn *x, const struct dmar_admit_conn *y)
{
	return x->keylen == y->keylen && !memcmp(x->key, y->key, x->keylen);
}

struct dmar_admit_conn *dmar_admit_open(struct dmar_admit *a, int fd, const struct sockaddr *addr)
{
	struct dmar_admit_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->fd = fd;
	c->t0_ms = dmar_mono_ms();
	set_addr(c, addr);
	pthread_mutex_lock(&a->lock);
	/* Room from this address first: its own oldest goes.  Then room at
	 * all: the oldest of the address that holds the most, so that a peer
	 * with a connection or two pending is the last to lose one, however
	 * slowly its head is read on a loaded machine. */
	struct addr_count *mine = ac_find(a, c);
	if (mine && c->keylen && mine->count >= a->o.pending_per_addr) {
		struct dmar_admit_conn *p = a->head;
		while (!same_addr(p, c))
			p = p->next;
		kill_pending(a, p, &a->t_addr);
		a->evicted++;
	} else if (a->head && a->npending >= a->o.pending_max) {
		unsigned most = 0;
		for (size_t k = 0; k < a->nac; k++)
			if (a->ac[k].count > most)
				most = a->ac[k].count;
		struct dmar_admit_conn *p = a->head;
		while (ac_find(a, p)->count != most)
			p = p->next;
		kill_pending(a, p, &a->t_full);
		a->evicted++;
	}
	c->state = PENDING;
	c->prev = a->tail;
	if (a->tail)
		a->tail->next = c;
	else
		a->head = c;
	a->tail = c;
	a->npending++;
	ac_add(a, c);
	pthread_mutex_unlock(&a->lock);
	return c;
}

void dmar_admit_head(struct dmar_admit *a, struct dmar_admit_conn *c, bool trusted)
{
	if (!c || !trusted)
		return;
	pthread_mutex_lock(&a->lock);
	if (c->state == PENDING) {
		unlink_pending(a, c);
		c->state = TRUSTED;
		a->ntrusted++;
	}
	pthread_mutex_unlock(&a->lock);
}

void dmar_admit_close(struct dmar_admit *a, struct dmar_admit_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&a->lock);
	if (c->state == PENDING)
		unlink_pending(a, c);
	else if (c->state == TRUSTED)
		a->ntrusted--;
	pthread_mutex_unlock(&a->lock);
	free(c);
}

void dmar_admit_stats(struct dmar_admit *a, struct dmar_admit_stats *st)
{
	pthread_mutex_lock(&a->lock);
	st->pending = a->npending;
	st->trusted = a->ntrusted;
	st->expired = a->expired;
	st->evicted = a->evicted;
	pthread_mutex_unlock(&a->lock);
}
