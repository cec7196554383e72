/* SPDX-License-Identifier: MIT */
/*
 * A bitmap allocator, first fit, with two kinds of hints that save reading
 * without changing where anything is placed.
 *
 * Why a bitmap: the arena is a fixed size known up front, so one bit per
 * 512-byte unit (32 KiB of bitmap per GiB) covers it with no per-block
 * headers inside the arena, every state is a plain array that could live
 * in the arena itself later, and a release needs only (off, len), which
 * the chunk store and the extent maps keep anyway.
 *
 * Why first fit: it keeps the low part of the arena dense and leaves the
 * top free in large pieces, which matters twice here.  Requests range from
 * one unit (a tiny compressed chunk) to tens of MiB (a raw extent), and a
 * policy that scatters the small ones (next fit) soon leaves no room for
 * the large.  And on lazily populated backings only touched memory costs
 * RAM: first fit reuses freed space before touching new pages.
 *
 * Hint 1, groups: the bitmap is cut into groups of 64 words (4096 units,
 * 2 MiB of arena), each with its free prefix and suffix (exact) and an
 * upper bound on its longest free run.  A search walks groups: a run that
 * crosses groups is found from suffix + whole free groups + prefix, and a
 * group is read word by word only when its bound says the request may fit
 * inside.  Allocating keeps the bound valid for free (runs only shrink);
 * releasing raises it to the merged run's length; a group read in full
 * without success gets its bound lowered to what was seen, so stale bounds
 * cost one read each.  Inside a group, a run of n < 64 zero bits in a word
 * is found with log2(n) shift-and steps, and runs across words carry the
 * high free bits of one word into the low free bits of the next.
 *
 * Hint 2, size classes (every size below 8, then four per power of two):
 * each keeps a unit below which no free run of at least the class's size
 * starts, and the same for the exact size it saw last.  A search for n
 * starts at its class's bound instead of at the front, so repeated
 * requests do not re-read the holes that were too small last time.  The
 * bounds are exact: a search for n that succeeds at p proves no run >= n
 * starts below p + n, one that fails that none exists, and a release
 * creates one new run (the released units merged with their free
 * neighbours), which lowers the bounds of the classes it can hold to its
 * start and leaves the others alone.
 *
 * And fail_min remembers the smallest request that found no run since the
 * last release, so a full arena says -ENOSPC without searching at all.
 *
 * Cost: a search reads O(units / 4096) group summaries plus the words of
 * the groups that may hold the run (64 words each); allocating or
 * releasing n units touches n / 64 words and the summaries of their groups.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "alloc.h"

#define ALL_ONES (~0ull)
#define GROUP_WORDS 64
#define GROUP_UNITS (GROUP_WORDS * 64)
#define MAX_CLASSES 256

struct group {
	uint16_t prefix; /* free units from the group's start (exact) */
	uint16_t suffix; /* free units up to the group's end (exact) */
	uint16_t maxrun; /* >= the longest free run inside the group */
};

/* "No free run of at least size units starts below bound." */
struct bound {
	uint64_t size; /* 0: no entry */
	uint64_t bound;
};

struct dmar_alloc {
	pthread_mutex_t lock;
	uint64_t units;    /* managed units, fixed */
	uint64_t ngroups;  /* fixed; the bitmap has ngroups * GROUP_WORDS words */
	uint64_t used;     /* reserved units; protected by lock, as is all below */
	uint64_t fail_min; /* no free run this long exists; UINT64_MAX = unknown */
	uint64_t *map;     /* bit u set: unit u reserved (bits past units are set) */
	struct group *grp;
	unsigned nclasses;
	struct bound cls[MAX_CLASSES];   /* .size = the class's smallest size */
	struct bound exact[MAX_CLASSES]; /* the last exact size seen per class */
};

static inline uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Mask of cnt (1..64) bits starting at bit b. */
static inline uint64_t bits(unsigned b, uint64_t cnt)
{
	return (cnt == 64 ? ALL_ONES : ((1ull << cnt) - 1)) << b;
}

/* Class of n >= 1: n - 1 below 8, then four classes per power of two
 * (8, 10, 12, 14, 16, 20, ...); the class's size is the largest one <= n. */
static unsigned class_of(uint64_t n)
{
	if (n < 8)
		return (unsigned)n - 1;
	unsigned e = 63 - (unsigned)__builtin_clzll(n);
	return 7 + (e - 3) * 4 + (unsigned)((n >> (e - 2)) & 3);
}

static uint64_t class_size(unsigned k)
{
	if (k < 7)
		return k + 1;
	unsigned e = 3 + (k - 7) / 4;
	return (uint64_t)(4 + (k - 7) % 4) << (e - 2);
}

/* Free units in [limit, u) that end at u - 1, counted downwards. */
static uint64_t free_below(const struct dmar_alloc *al, uint64_t u, uint64_t limit)
{
	uint64_t cnt = 0;

	while (u > limit) {
		uint64_t b = (u - 1) & 63, m = al->map[(u - 1) >> 6] << (63 - b);
		uint64_t z = min_u64(m ? (uint64_t)__builtin_clzll(m) : 64, b + 1);
		cnt += z;
		u -= z;
		if (z < b + 1)
			break;
	}
	return cnt;
}

/* Free units in [u, limit) that start at u, counted upwards. */
static uint64_t free_from(const struct dmar_alloc *al, uint64_t u, uint64_t limit)
{
	uint64_t cnt = 0;

	while (u < limit) {
		uint64_t b = u & 63, m = al->map[u >> 6] >> b;
		uint64_t z = min_u64(m ? (uint64_t)__builtin_ctzll(m) : 64, 64 - b);
		cnt += z;
		u += z;
		if (z < 64 - b)
			break;
	}
	return cnt;
}

static void group_edges(struct dmar_alloc *al, uint64_t g)
{
	struct group *gs = &al->grp[g];
	uint64_t s = g * GROUP_UNITS;

	gs->prefix = (uint16_t)free_from(al, s, s + GROUP_UNITS);
	gs->suffix = (uint16_t)free_below(al, s + GROUP_UNITS, s);
	gs->maxrun = (uint16_t)max_u64(gs->maxrun, max_u64(gs->prefix, gs->suffix));
}

/* Bits p of the result are set where w has n (1..63) zero bits from p up. */
static uint64_t zero_runs(uint64_t w, uint64_t n)
{
	uint64_t x = ~w, have = 1;

	while (have < n) {
		uint64_t s = min_u64(have, n - have);
		x &= x >> s;
		have += s;
	}
	return x;
}

/* The lowest free run of n inside words [w0, w1), or UINT64_MAX; then
 * *longest is an upper bound on every free run seen (all < n). */
static uint64_t scan_words(const struct dmar_alloc *al, uint64_t n, uint64_t w0, uint64_t w1,
			   uint64_t *longest)
{
	uint64_t run = 0, start = 0, seen = 0;

	for (uint64_t i = w0; i < w1; i++) {
		uint64_t w = al->map[i];

		if (w == 0) {
			if (run == 0)
				start = i << 6;
			run += 64;
			if (run >= n)
				return start;
			continue;
		}
		if (w == ALL_ONES) {
			seen = max_u64(seen, run);
			run = 0;
			continue;
		}
		uint64_t tz = (uint64_t)__builtin_ctzll(w);
		if (run + tz >= n)
			return run ? start : i << 6;
		seen = max_u64(seen, run + tz);
		if (n < 64) {
			uint64_t z = zero_runs(w, n);
			if (z)
				return (i << 6) + (uint64_t)__builtin_ctzll(z);
		}
		/* Runs wholly inside the word are < n, and < 63 anyway. */
		seen = max_u64(seen, min_u64(n - 1, 62));
		run = (uint64_t)__builtin_clzll(w);
		start = (i << 6) + 64 - run;
	}
	*longest = max_u64(seen, run);
	return UINT64_MAX;
}

/* The lowest unit starting a free run of n, or UINT64_MAX, given that none
 * starts below unit from (so a run met partway is never too early). */
static uint64_t find_run(struct dmar_alloc *al, uint64_t n, uint64_t from)
{
	uint64_t carry = 0, cstart = 0;

	for (uint64_t g = from / GROUP_UNITS; g < al->ngroups; g++) {
		struct group *gs = &al->grp[g];
		uint64_t gstart = g * GROUP_UNITS, longest = 0;

		if (carry + gs->prefix >= n)
			return carry ? cstart : gstart;
		if (gs->prefix == GROUP_UNITS) {
			if (!carry)
				cstart = gstart;
			carry += GROUP_UNITS;
			continue;
		}
		if (gs->maxrun >= n) {
			uint64_t w0 = max_u64(from >> 6, g * GROUP_WORDS);
			uint64_t u = scan_words(al, n, w0, (g + 1) * GROUP_WORDS, &longest);
			if (u != UINT64_MAX)
				return u;
			if (w0 == g * GROUP_WORDS)
				gs->maxrun = (uint16_t)longest; /* read it all: tighten */
		}
		carry = gs->suffix;
		cstart = gstart + GROUP_UNITS - gs->suffix;
	}
	return UINT64_MAX;
}

static void set_range(struct dmar_alloc *al, uint64_t u, uint64_t n, bool on)
{
	uint64_t end = u + n, g0 = u / GROUP_UNITS, g1 = (end - 1) / GROUP_UNITS;

	for (uint64_t v = u; v < end;) {
		uint64_t cnt = min_u64(64 - (v & 63), end - v);
		if (on)
			al->map[v >> 6] |= bits(v & 63, cnt);
		else
			al->map[v >> 6] &= ~bits(v & 63, cnt);
		v += cnt;
	}
	for (uint64_t g = g0; g <= g1; g++) {
		/* Groups wholly inside the range are all free or all used. */
		if (g > g0 && g < g1)
			al->grp[g] = on ? (struct group){ 0, 0, 0 }
					: (struct group){ GROUP_UNITS, GROUP_UNITS, GROUP_UNITS };
		else
			group_edges(al, g);
	}
	if (!on) {
		/* The run around the released range: its part in g0 (g1's
		 * part is g1's prefix, which group_edges counted). */
		uint64_t s = g0 * GROUP_UNITS;
		uint64_t r = free_below(al, u, s) + free_from(al, u, s + GROUP_UNITS);
		al->grp[g0].maxrun = (uint16_t)max_u64(al->grp[g0].maxrun, r);
	}
}

static bool range_reserved(const struct dmar_alloc *al, uint64_t u, uint64_t n)
{
	for (uint64_t end = u + n; u < end;) {
		uint64_t cnt = min_u64(64 - (u & 63), end - u), m = bits(u & 63, cnt);
		if ((al->map[u >> 6] & m) != m)
			return false;
		u += cnt;
	}
	return true;
}

/* A search for n proved that no run >= n starts below end. */
static void learn(struct dmar_alloc *al, uint64_t n, uint64_t end)
{
	unsigned k = class_of(n);

	for (unsigned j = k; j < al->nclasses; j++) {
		if (al->cls[j].size >= n)
			al->cls[j].bound = max_u64(al->cls[j].bound, end);
		if (al->exact[j].size >= n)
			al->exact[j].bound = max_u64(al->exact[j].bound, end);
	}
	if (al->exact[k].size != n)
		al->exact[k] = (struct bound){ n, end };
}

/* The free run that contains unit u (free): *start and its length.  Whole
 * free groups on either side are stepped over by their summaries. */
static uint64_t run_around(const struct dmar_alloc *al, uint64_t u, uint64_t *start)
{
	uint64_t g = u / GROUP_UNITS, gs = g * GROUP_UNITS;
	uint64_t lo = u - free_below(al, u, gs), hi = u + free_from(al, u, gs + GROUP_UNITS);

	if (lo == gs)
		for (uint64_t h = g; h-- > 0;) {
			lo -= al->grp[h].suffix;
			if (al->grp[h].suffix != GROUP_UNITS)
				break;
		}
	if (hi == gs + GROUP_UNITS)
		for (uint64_t h = g + 1; h < al->ngroups; h++) {
			hi += al->grp[h].prefix;
			if (al->grp[h].prefix != GROUP_UNITS)
				break;
		}
	*start = lo;
	return hi - lo;
}

/* A release made the free run [start, start + len): only runs of at most
 * len can newly start as low as start. */
static void unlearn(struct dmar_alloc *al, uint64_t start, uint64_t len)
{
	for (unsigned j = 0; j < al->nclasses; j++) {
		if (al->cls[j].size <= len)
			al->cls[j].bound = min_u64(al->cls[j].bound, start);
		if (al->exact[j].size && al->exact[j].size <= len)
			al->exact[j].bound = min_u64(al->exact[j].bound, start);
	}
}

int dmar_alloc_new(struct dmar_alloc **out, uint64_t units)
{
	if (!units || units > UINT64_MAX / 2)
		return -EINVAL;

	struct dmar_alloc *al = calloc(1, sizeof(*al));
	if (!al)
		return -ENOMEM;
	al->units = units;
	al->ngroups = (units + GROUP_UNITS - 1) / GROUP_UNITS;
	al->fail_min = UINT64_MAX;
	al->map = calloc(al->ngroups * GROUP_WORDS, sizeof(uint64_t));
	al->grp = calloc(al->ngroups, sizeof(*al->grp));
	if (!al->map || !al->grp) {
		free(al->map);
		free(al->grp);
		free(al);
		return -ENOMEM;
	}
	/* Units past the end are reserved for good, so no search needs a
	 * bounds check inside a word or a group. */
	for (uint64_t u = units; u < al->ngroups * GROUP_UNITS;) {
		uint64_t cnt = min_u64(64 - (u & 63), al->ngroups * GROUP_UNITS - u);
		al->map[u >> 6] |= bits(u & 63, cnt);
		u += cnt;
	}
	for (uint64_t g = 0; g < al->ngroups; g++) {
		al->grp[g].maxrun = (uint16_t)min_u64(GROUP_UNITS, units - g * GROUP_UNITS);
		group_edges(al, g);
	}
	al->nclasses = class_of(units) + 1;
	for (unsigned k = 0; k < al->nclasses; k++)
		al->cls[k].size = class_size(k);
	pthread_mutex_init(&al->lock, NULL);
	*out = al;
	return 0;
}

void dmar_alloc_free(struct dmar_alloc *al)
{
	if (!al)
		return;
	pthread_mutex_destroy(&al->lock);
	free(al->map);
	free(al->grp);
	free(al);
}

int dmar_alloc_get(struct dmar_alloc *al, uint64_t n, uint64_t *first)
{
	int r = -ENOSPC;

	if (!n)
		return -EINVAL;
	pthread_mutex_lock(&al->lock);
	if (n <= al->units - al->used && n < al->fail_min) {
		unsigned k = class_of(n);
		uint64_t from = al->cls[k].bound;
		if (al->exact[k].size && al->exact[k].size <= n)
			from = max_u64(from, al->exact[k].bound);
		uint64_t u = from < al->units ? find_run(al, n, from) : UINT64_MAX;
		if (u != UINT64_MAX) {
			set_range(al, u, n, true);
			al->used += n;
			learn(al, n, u + n);
			*first = u;
			r = 0;
		} else {
			learn(al, n, al->units);
			al->fail_min = n;
		}
	}
	pthread_mutex_unlock(&al->lock);
	return r;
}

int dmar_alloc_put(struct dmar_alloc *al, uint64_t first, uint64_t n)
{
	int r = -EINVAL;

	pthread_mutex_lock(&al->lock);
	if (n && first < al->units && n <= al->units - first && range_reserved(al, first, n)) {
		set_range(al, first, n, false);
		al->used -= n;
		al->fail_min = UINT64_MAX;
		uint64_t start, len = run_around(al, first, &start);
		unlearn(al, start, len);
		r = 0;
	}
	pthread_mutex_unlock(&al->lock);
	return r;
}

static bool range_free(const struct dmar_alloc *al, uint64_t u, uint64_t n)
{
	for (uint64_t end = u + n; u < end;) {
		uint64_t cnt = min_u64(64 - (u & 63), end - u);
		if (al->map[u >> 6] & bits(u & 63, cnt))
			return false;
		u += cnt;
	}
	return true;
}

int dmar_alloc_claim(struct dmar_alloc *al, uint64_t first, uint64_t n)
{
	int r = -EINVAL;

	pthread_mutex_lock(&al->lock);
	if (n && first < al->units && n <= al->units - first) {
		r = -EEXIST;
		/* Reserving only shrinks free runs: every bound stays true. */
		if (range_free(al, first, n)) {
			set_range(al, first, n, true);
			al->used += n;
			r = 0;
		}
	}
	pthread_mutex_unlock(&al->lock);
	return r;
}

void dmar_alloc_diff(struct dmar_alloc *a, struct dmar_alloc *b, uint64_t *only_a, uint64_t *only_b,
		     uint64_t *first)
{
	uint64_t oa = 0, ob = 0, f = UINT64_MAX;
	struct dmar_alloc *lo = a < b ? a : b, *hi = a < b ? b : a;

	pthread_mutex_lock(&lo->lock);
	pthread_mutex_lock(&hi->lock);
	for (uint64_t i = 0; i < a->ngroups * GROUP_WORDS; i++) {
		uint64_t x = a->map[i], y = b->map[i];
		if (x == y)
			continue;
		oa += (uint64_t)__builtin_popcountll(x & ~y);
		ob += (uint64_t)__builtin_popcountll(y & ~x);
		if (f == UINT64_MAX)
			f = (i << 6) + (uint64_t)__builtin_ctzll(x ^ y);
	}
	pthread_mutex_unlock(&hi->lock);
	pthread_mutex_unlock(&lo->lock);
	*only_a = oa;
	*only_b = ob;
	*first = f;
}

uint64_t dmar_alloc_used(struct dmar_alloc *al)
{
	pthread_mutex_lock(&al->lock);
	uint64_t u = al->used;
	pthread_mutex_unlock(&al->lock);
	return u;
}

uint64_t dmar_alloc_units(const struct dmar_alloc *al)
{
	return al->units;
}

int dmar_alloc_check(struct dmar_alloc *al)
{
	uint64_t used = 0, total = al->ngroups * GROUP_UNITS;
	int r = 0;

	pthread_mutex_lock(&al->lock);
	for (uint64_t u = al->units; u < total; u++)
		if (!(al->map[u >> 6] & (1ull << (u & 63))))
			r = -EUCLEAN;
	for (uint64_t i = 0; i < al->ngroups * GROUP_WORDS; i++)
		used += (uint64_t)__builtin_popcountll(al->map[i]);
	if (used - (total - al->units) != al->used)
		r = -EUCLEAN;
	for (uint64_t g = 0; g < al->ngroups; g++) {
		const struct group *gs = &al->grp[g];
		uint64_t s = g * GROUP_UNITS, longest = 0;
		for (uint64_t u = s; u < s + GROUP_UNITS;) {
			uint64_t f = free_from(al, u, s + GROUP_UNITS);
			longest = max_u64(longest, f);
			u += f ? f : 1;
		}
		if (gs->prefix != free_from(al, s, s + GROUP_UNITS) ||
		    gs->suffix != free_below(al, s + GROUP_UNITS, s) || gs->maxrun < longest)
			r = -EUCLEAN;
	}
	/* Every free run must start at or above the bounds it is subject to. */
	for (uint64_t u = 0; u < al->units;) {
		uint64_t f = free_from(al, u, al->units);
		if (!f) {
			u++;
			continue;
		}
		for (unsigned j = 0; j < al->nclasses; j++) {
			const struct bound *b[2] = { &al->cls[j], &al->exact[j] };
			for (int t = 0; t < 2; t++)
				if (b[t]->size && b[t]->size <= f && u < b[t]->bound)
					r = -EUCLEAN;
		}
		u += f;
	}
	pthread_mutex_unlock(&al->lock);
	return r;
}
