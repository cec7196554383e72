/* SPDX-License-Identifier: MIT */
/*
 * test_arena - the arena: backings and their fallbacks, the unit allocator
 * (checked against a reference first-fit model), and the chunk store.
 *
 * System settings are never changed here.  The hugetlb path is checked for
 * real only where the pool has free pages (run with vm.nr_hugepages > 0 to
 * cover it); otherwise the test checks that strict fails with -ENOMEM and
 * says why, and that the fallback reports the reason.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "prng.h"

#include "arena/alloc.h"
#include "arena/arena.h"
#include "arena/journal.h"
#include "codec/hash.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

static uint64_t rnd(uint64_t *s, uint64_t lo, uint64_t hi) /* [lo, hi] */
{
	return lo + xorshift64(s) % (hi - lo + 1);
}

static uint64_t free_hugepages(uint64_t ps)
{
	char path[128];
	unsigned long long v = 0;
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/free_hugepages",
		 (unsigned long long)(ps >> 10));
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

static struct dmar_arena *arena(uint64_t size, uint64_t pagesize, bool populate)
{
	struct dmar_arena_opts o = { .size = size, .pagesize = pagesize, .populate = populate };
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;
	int r = dmar_arena_new(&a, &o, &err);
	if (r < 0)
		fprintf(stderr, "arena: %s\n", err.msg);
	assert_int_equal(r, 0);
	return a;
}

/* The memory is there, writable, and zeroed. */
static void assert_usable(struct dmar_arena *a)
{
	uint8_t *p = dmar_arena_base(a);
	uint64_t n = dmar_arena_size(a), step = 4096;
	for (uint64_t o = 0; o < n; o += step) {
		assert_int_equal(p[o], 0);
		p[o] = (uint8_t)(o / step);
	}
	for (uint64_t o = 0; o < n; o += step)
		assert_int_equal(p[o], (uint8_t)(o / step));
	assert_int_equal(p[n - 1], 0);
}

/* ---- backing ------------------------------------------------------------ */

static void test_bad_opts(void **state)
{
	struct dmar_arena *a = NULL;
	struct dmar_error err = { 0 };
	struct dmar_arena_opts o = { .size = 0 };

	assert_int_equal(dmar_arena_new(&a, &o, NULL), -EINVAL);
	o.size = MiB;
	o.pagesize = 12345;
	assert_int_equal(dmar_arena_new(&a, &o, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "pagesize=12345"));
	o.size = UINT64_MAX;
	o.pagesize = 0;
	assert_int_equal(dmar_arena_new(&a, &o, NULL), -EINVAL);
	assert_null(a);
	dmar_arena_free(NULL);
}

static void test_normal_pages(void **state)
{
	struct dmar_arena *a = arena(10000, 4096, false);

	assert_int_equal(dmar_arena_backing(a), DMAR_BACKING_NORMAL);
	assert_int_equal(dmar_arena_pagesize(a), 4096);
	assert_int_equal(dmar_arena_size(a), 12288); /* rounded to pages */
	assert_true(dmar_arena_fd(a) >= 0);
	assert_int_equal(dmar_arena_huge_bytes(a), 0);
	assert_non_null(strstr(dmar_arena_describe(a), "normal 4 KiB pages"));
	assert_int_equal(dmar_arena_used(a), 0);
	assert_usable(a);
	dmar_arena_free(a);

	a = arena(8 * MiB, 4096, true);
	assert_usable(a);
	dmar_arena_free(a);
}

/* 2 MiB hugetlb where the pool has pages; otherwise strict must fail and
 * say so, and the fallback must say why it fell back. */
static void test_hugetlb_or_fallback(void **state)
{
	struct dmar_arena_opts o = { .size = 3 * MiB, .pagesize = 2 * MiB, .strict = true };
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;
	int r;

	if (free_hugepages(2 * MiB) >= 2) {
		r = dmar_arena_new(&a, &o, &err);
		if (r < 0)
			fprintf(stderr, "hugetlb: %s\n", err.msg);
		assert_int_equal(r, 0);
		assert_int_equal(dmar_arena_backing(a), DMAR_BACKING_HUGETLB);
		assert_int_equal(dmar_arena_pagesize(a), 2 * MiB);
		assert_int_equal(dmar_arena_size(a), 4 * MiB);
		assert_int_equal(dmar_arena_huge_bytes(a), 4 * MiB);
		assert_true(dmar_arena_fd(a) >= 0);
		assert_non_null(strstr(dmar_arena_describe(a), "hugetlb 2 MiB pages"));
		assert_usable(a);
		dmar_arena_free(a);
		print_message("hugetlb path checked (free 2 MiB pages: %llu)\n",
			      (unsigned long long)free_hugepages(2 * MiB));
		return;
	}
	r = dmar_arena_new(&a, &o, &err);
	assert_int_equal(r, -ENOMEM);
	assert_int_equal(err.code, -ENOMEM);
	assert_non_null(strstr(err.msg, "huge pages"));
	assert_non_null(strstr(err.msg, "2 MiB"));

	o.strict = false;
	a = arena(3 * MiB, 2 * MiB, false);
	assert_int_not_equal(dmar_arena_backing(a), DMAR_BACKING_HUGETLB);
	assert_non_null(strstr(dmar_arena_describe(a), "fell back because: not enough free 2 MiB huge pages"));
	assert_usable(a);
	dmar_arena_free(a);
	print_message("hugetlb path not checked: no free 2 MiB huge pages (fallback checked)\n");
}

/* 1 GiB pages where the pool has one (the size rounds up to 1 GiB);
 * otherwise strict fails and the fallback names the short 1 GiB pool. */
static void test_1g(void **state)
{
	struct dmar_arena_opts o = { .size = 4 * MiB, .pagesize = GiB, .strict = true };
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;

	if (access("/sys/kernel/mm/hugepages/hugepages-1048576kB", F_OK))
		skip(); /* no 1 GiB pages on this machine */
	if (free_hugepages(GiB)) {
		assert_int_equal(dmar_arena_new(&a, &o, &err), 0);
		assert_int_equal(dmar_arena_backing(a), DMAR_BACKING_HUGETLB);
		assert_int_equal(dmar_arena_pagesize(a), GiB);
		assert_int_equal(dmar_arena_size(a), GiB);
		assert_non_null(strstr(dmar_arena_describe(a), "hugetlb 1 GiB pages"));
		dmar_arena_free(a);
		print_message("1 GiB hugetlb path checked\n");
		return;
	}
	assert_int_equal(dmar_arena_new(&a, &o, &err), -ENOMEM);
	assert_non_null(strstr(err.msg, "1 GiB huge pages"));
	a = arena(4 * MiB, GiB, false);
	assert_int_not_equal(dmar_arena_pagesize(a), GiB);
	assert_non_null(strstr(dmar_arena_describe(a), "1 GiB huge pages"));
	assert_usable(a);
	dmar_arena_free(a);
}

/* Default options take whatever is best and describe it honestly. */
static void test_default_backing(void **state)
{
	struct dmar_arena *a = arena(8 * MiB, 0, true);
	const char *d = dmar_arena_describe(a);

	print_message("default backing: %s\n", d);
	switch (dmar_arena_backing(a)) {
	case DMAR_BACKING_HUGETLB:
		assert_non_null(strstr(d, "hugetlb"));
		break;
	case DMAR_BACKING_THP:
		assert_int_equal(strncmp(d, "transparent huge pages", 22), 0);
		assert_non_null(strstr(d, "in huge pages after populate"));
		assert_true(dmar_arena_huge_bytes(a) <= dmar_arena_size(a));
		break;
	case DMAR_BACKING_NORMAL:
		assert_int_equal(strncmp(d, "normal", 6), 0);
		break;
	case DMAR_BACKING_KMOD:
		fail_msg("an unnamed arena is never the kernel module's");
	}
	assert_usable(a);
	dmar_arena_free(a);
}

/* ---- allocator ---------------------------------------------------------- */

struct range {
	uint64_t off, len;
};

static void assert_disjoint(const struct range *r, size_t n, uint64_t size)
{
	for (size_t i = 0; i < n; i++) {
		assert_true(r[i].off + r[i].len <= size);
		assert_int_equal(r[i].off % DMAR_ARENA_UNIT, 0);
		for (size_t j = i + 1; j < n; j++)
			assert_true(r[i].off + r[i].len <= r[j].off || r[j].off + r[j].len <= r[i].off);
	}
}

static void test_fill_and_free(void **state)
{
	struct dmar_arena *a = arena(MiB, 4096, false);
	uint64_t n = MiB / DMAR_ARENA_UNIT, off;
	uint64_t *offs = calloc(n, sizeof(*offs));
	uint8_t *base = dmar_arena_base(a);

	assert_int_equal(dmar_arena_alloc(a, 0, &off), -EINVAL);
	assert_int_equal(dmar_arena_alloc(a, 2 * MiB, &off), -ENOSPC);
	assert_int_equal(dmar_arena_alloc(a, UINT64_MAX, &off), -ENOSPC);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(dmar_arena_alloc(a, 1 + i % DMAR_ARENA_UNIT, &offs[i]), 0);
		assert_int_equal(offs[i], i * DMAR_ARENA_UNIT); /* first fit */
		memset(base + offs[i], (int)(i & 0xff), DMAR_ARENA_UNIT);
	}
	assert_int_equal(dmar_arena_used(a), MiB);
	assert_int_equal(dmar_arena_alloc(a, 1, &off), -ENOSPC);
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(base[offs[i] + DMAR_ARENA_UNIT - 1], (uint8_t)(i & 0xff));

	/* Free every other unit: half free, but no run of two. */
	for (uint64_t i = 0; i < n; i += 2)
		dmar_arena_release(a, offs[i], 1 + i % DMAR_ARENA_UNIT);
	assert_int_equal(dmar_arena_used(a), MiB / 2);
	assert_int_equal(dmar_arena_alloc(a, 2 * DMAR_ARENA_UNIT, &off), -ENOSPC);
	assert_int_equal(dmar_arena_alloc(a, DMAR_ARENA_UNIT, &off), 0);
	assert_int_equal(off, 0);
	/* Freeing a neighbour makes a run of two (units 1 and 2). */
	dmar_arena_release(a, offs[1], 2);
	assert_int_equal(dmar_arena_alloc(a, 2 * DMAR_ARENA_UNIT, &off), 0);
	assert_int_equal(off, DMAR_ARENA_UNIT);
	free(offs);
	dmar_arena_free(a);
}

static void test_large_and_fragmented(void **state)
{
	struct dmar_arena *a = arena(64 * MiB, 4096, false);
	struct range r[4];
	uint64_t off;

	assert_int_equal(dmar_arena_alloc(a, 40 * MiB, &r[0].off), 0);
	r[0].len = 40 * MiB;
	assert_int_equal(dmar_arena_alloc(a, 20 * MiB, &r[1].off), 0);
	r[1].len = 20 * MiB;
	assert_int_equal(dmar_arena_alloc(a, 8 * MiB, &off), -ENOSPC);
	assert_int_equal(dmar_arena_alloc(a, 4 * MiB, &r[2].off), 0);
	r[2].len = 4 * MiB;
	assert_disjoint(r, 3, 64 * MiB);
	assert_int_equal(dmar_arena_used(a), 64 * MiB);
	dmar_arena_release(a, r[1].off, r[1].len);
	assert_int_equal(dmar_arena_alloc(a, 8 * MiB, &off), 0);
	assert_int_equal(off, 40 * MiB);
	dmar_arena_release(a, off, 8 * MiB);
	dmar_arena_release(a, r[0].off, r[0].len);
	dmar_arena_release(a, r[2].off, r[2].len);
	assert_int_equal(dmar_arena_used(a), 0);

	/* Small pieces with holes between them: a large request skips the
	 * holes and lands past them; small ones fill the holes first. */
	enum { N = 1000 };
	struct range *s = calloc(N, sizeof(*s));
	for (int i = 0; i < N; i++) {
		s[i].len = (uint64_t)(1 + i % 7) * DMAR_ARENA_UNIT + 100;
		assert_int_equal(dmar_arena_alloc(a, s[i].len, &s[i].off), 0);
	}
	uint64_t top = s[N - 1].off + s[N - 1].len;
	for (int i = 0; i < N; i += 2)
		dmar_arena_release(a, s[i].off, s[i].len);
	assert_int_equal(dmar_arena_alloc(a, 32 * MiB, &off), 0);
	assert_true(off >= top - DMAR_ARENA_UNIT);
	dmar_arena_release(a, off, 32 * MiB);
	assert_int_equal(dmar_arena_alloc(a, 100, &off), 0);
	assert_int_equal(off, s[0].off);
	dmar_arena_release(a, off, 100);
	for (int i = 1; i < N; i += 2)
		dmar_arena_release(a, s[i].off, s[i].len);
	assert_int_equal(dmar_arena_used(a), 0);
	assert_int_equal(dmar_arena_alloc(a, 64 * MiB, &off), 0);
	assert_int_equal(off, 0);
	dmar_arena_release(a, off, 64 * MiB);
	free(s);
	dmar_arena_free(a);
}

/* The lowest free run of n in the model, or UINT64_MAX. */
static uint64_t model_first_fit(const uint8_t *m, uint64_t units, uint64_t n)
{
	uint64_t run = 0;
	for (uint64_t u = 0; u < units; u++) {
		run = m[u] ? 0 : run + 1;
		if (run == n)
			return u + 1 - n;
	}
	return UINT64_MAX;
}

/* Random gets and puts, each checked against a byte-per-unit model: the
 * allocator must pick exactly the first-fit run and fail exactly when the
 * model has no run.  Unit counts not multiples of 64 test the tail. */
static void stress(uint64_t units, int ops, uint64_t seed, uint64_t max_n)
{
	struct dmar_alloc *al;
	uint8_t *m = calloc(units, 1);
	struct range *live = calloc((size_t)ops, sizeof(*live));
	size_t nlive = 0;
	uint64_t s = seed, used = 0;

	assert_int_equal(dmar_alloc_new(&al, units), 0);
	for (int op = 0; op < ops; op++) {
		if (nlive && (xorshift64(&s) % 100 < 45 || used * 10 > units * 9)) {
			size_t k = (size_t)(xorshift64(&s) % nlive);
			assert_int_equal(dmar_alloc_put(al, live[k].off, live[k].len), 0);
			memset(m + live[k].off, 0, live[k].len);
			used -= live[k].len;
			live[k] = live[--nlive];
			continue;
		}
		/* Mostly small, some medium, a few large. */
		uint64_t c = xorshift64(&s) % 100, n;
		n = c < 70 ? rnd(&s, 1, 8) : c < 95 ? rnd(&s, 9, 200) : rnd(&s, 201, max_n);
		uint64_t want = model_first_fit(m, units, n), got = UINT64_MAX;
		int r = dmar_alloc_get(al, n, &got);
		if (want == UINT64_MAX) {
			assert_int_equal(r, -ENOSPC);
			continue;
		}
		assert_int_equal(r, 0);
		assert_int_equal(got, want);
		memset(m + got, 1, n);
		used += n;
		live[nlive++] = (struct range){ got, n };
		if (op % 512 == 0) {
			assert_int_equal(dmar_alloc_check(al), 0);
			assert_int_equal(dmar_alloc_used(al), used);
		}
	}
	/* Bad puts change nothing. */
	assert_int_equal(dmar_alloc_put(al, units, 1), -EINVAL);
	assert_int_equal(dmar_alloc_put(al, 0, 0), -EINVAL);
	assert_int_equal(dmar_alloc_put(al, 0, units + 1), -EINVAL);
	if (nlive) {
		uint64_t f = model_first_fit(m, units, 1);
		if (f != UINT64_MAX)
			assert_int_equal(dmar_alloc_put(al, f, 1), -EINVAL);
	}
	assert_int_equal(dmar_alloc_check(al), 0);
	while (nlive) {
		nlive--;
		assert_int_equal(dmar_alloc_put(al, live[nlive].off, live[nlive].len), 0);
	}
	assert_int_equal(dmar_alloc_used(al), 0);
	assert_int_equal(dmar_alloc_check(al), 0);
	uint64_t f;
	assert_int_equal(dmar_alloc_get(al, units, &f), 0);
	assert_int_equal(f, 0);
	assert_int_equal(dmar_alloc_get(al, 1, &f), -ENOSPC);
	dmar_alloc_free(al);
	free(live);
	free(m);
}

static void test_alloc_vs_model(void **state)
{
	stress(1000, 20000, 1, 400);     /* tight: ENOSPC and fragmentation often */
	stress(4133, 20000, 2, 2000);    /* a partial last word */
	stress(65536 + 17, 6000, 3, 20000); /* large runs: the empty-word jumps */
	assert_int_equal(dmar_alloc_new(&(struct dmar_alloc *){ NULL }, 0), -EINVAL);
}

struct thread_arg {
	struct dmar_arena *a;
	uint64_t seed;
	int failures;
};

/* Each live allocation is filled with a tag unique to it and checked
 * before release: an overlap between threads would overwrite a tag. */
static void *alloc_thread(void *p)
{
	struct thread_arg *t = p;
	enum { LIVE = 64 };
	struct range live[LIVE] = { { 0, 0 } };
	uint32_t tag[LIVE] = { 0 };
	uint64_t s = t->seed;
	uint8_t *base = dmar_arena_base(t->a);

	for (uint32_t i = 1; i <= 20000; i++) {
		size_t k = (size_t)(xorshift64(&s) % LIVE);
		if (live[k].len) {
			for (uint64_t o = 0; o + 4 <= live[k].len; o += DMAR_ARENA_UNIT)
				if (memcmp(base + live[k].off + o, &tag[k], 4))
					t->failures++;
			dmar_arena_release(t->a, live[k].off, live[k].len);
			live[k].len = 0;
			continue;
		}
		uint64_t len = rnd(&s, 1, 16 * KiB);
		if (dmar_arena_alloc(t->a, len, &live[k].off) < 0)
			continue;
		live[k].len = len;
		tag[k] = (uint32_t)(t->seed << 24) ^ i;
		for (uint64_t o = 0; o + 4 <= len; o += DMAR_ARENA_UNIT)
			memcpy(base + live[k].off + o, &tag[k], 4);
	}
	for (size_t k = 0; k < LIVE; k++)
		if (live[k].len)
			dmar_arena_release(t->a, live[k].off, live[k].len);
	return NULL;
}

static void test_alloc_threads(void **state)
{
	/* Small enough that the threads run it full now and then. */
	struct dmar_arena *a = arena(MiB, 4096, false);
	struct thread_arg args[2] = { { a, 7, 0 }, { a, 9, 0 } };
	pthread_t tid[2];

	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&tid[i], NULL, alloc_thread, &args[i]), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		assert_int_equal(args[i].failures, 0);
	}
	assert_int_equal(dmar_arena_used(a), 0);
	dmar_arena_free(a);
}

/* ---- chunk store -------------------------------------------------------- */

static void make_chunk(uint8_t *buf, size_t len, uint64_t seed, struct dmar_id *id)
{
	uint64_t s = seed * 2 + 1;
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(xorshift64(&s) >> 32);
	dmar_hash(buf, len, id);
}

static void test_store_refcount(void **state)
{
	struct dmar_arena *a = arena(4 * MiB, 4096, false);
	struct dmar_store_stats st;
	struct dmar_chunk_info ci;
	struct dmar_id id, other;
	uint8_t buf[3000];
	bool added = false;
	uint64_t used0 = dmar_arena_used(a);

	make_chunk(buf, sizeof(buf), 1, &id);
	make_chunk(buf, 10, 2, &other);
	make_chunk(buf, sizeof(buf), 1, &id);
	assert_int_equal(dmar_store_lookup(a, &id, &ci), -ENOENT);
	assert_int_equal(dmar_store_ref_existing(a, &id), -ENOENT);
	assert_int_equal(dmar_store_unref(a, &id), -ENOENT);

	assert_int_equal(dmar_store_ref(a, &id, DMAR_CHUNK_RAW, sizeof(buf), buf, sizeof(buf), &added), 0);
	assert_true(added);
	uint64_t used1 = dmar_arena_used(a);
	assert_int_equal(used1 - used0, 6 * DMAR_ARENA_UNIT); /* 3000 B in 512 B units */
	/* The second ref does not look at the payload and stores nothing. */
	assert_int_equal(dmar_store_ref(a, &id, DMAR_CHUNK_RAW, sizeof(buf), NULL, 0, &added), 0);
	assert_false(added);
	assert_int_equal(dmar_store_ref_existing(a, &id), 0);
	assert_int_equal(dmar_arena_used(a), used1);

	dmar_store_stats(a, &st);
	assert_int_equal(st.chunks, 1);
	assert_int_equal(st.refs, 3);
	assert_int_equal(st.stored_bytes, sizeof(buf));
	assert_int_equal(st.chunk_bytes, sizeof(buf));
	assert_int_equal(dmar_store_lookup(a, &id, &ci), 0);
	assert_int_equal(ci.refs, 3);
	assert_int_equal(ci.len, sizeof(buf));
	assert_int_equal(ci.stored_len, sizeof(buf));
	assert_int_equal(ci.enc, DMAR_CHUNK_RAW);
	assert_memory_equal(dmar_arena_base(a) + ci.off, buf, sizeof(buf));
	assert_int_equal(dmar_store_lookup(a, &other, &ci), -ENOENT);

	/* A compressed chunk: stored and decoded sizes kept apart. */
	assert_int_equal(dmar_store_ref(a, &other, DMAR_CHUNK_ZSTD, 5000, buf, 700, NULL), 0);
	dmar_store_stats(a, &st);
	assert_int_equal(st.chunks, 2);
	assert_int_equal(st.stored_bytes, sizeof(buf) + 700);
	assert_int_equal(st.chunk_bytes, sizeof(buf) + 5000);
	assert_int_equal(dmar_store_unref(a, &other), 0);

	for (int i = 0; i < 2; i++)
		assert_int_equal(dmar_store_unref(a, &id), 0);
	assert_int_equal(dmar_store_lookup(a, &id, &ci), 0);
	assert_int_equal(ci.refs, 1);
	assert_int_equal(dmar_arena_used(a), used1);
	assert_int_equal(dmar_store_unref(a, &id), 0);
	assert_int_equal(dmar_store_lookup(a, &id, &ci), -ENOENT);
	assert_int_equal(dmar_store_unref(a, &id), -ENOENT);
	assert_int_equal(dmar_arena_used(a), used0);
	dmar_store_stats(a, &st);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.refs, 0);
	assert_int_equal(st.stored_bytes, 0);
	assert_int_equal(st.chunk_bytes, 0);

	/* Bad new chunks are refused and leave nothing behind. */
	assert_int_equal(dmar_store_ref(a, &id, DMAR_CHUNK_RAW, 10, buf, 9, NULL), -EINVAL);
	assert_int_equal(dmar_store_ref(a, &id, 3, 10, buf, 10, NULL), -EINVAL);
	assert_int_equal(dmar_store_ref(a, &id, DMAR_CHUNK_ZSTD, 0, buf, 10, NULL), -EINVAL);
	assert_int_equal(dmar_store_ref(a, &id, DMAR_CHUNK_ZSTD, 10, buf, 0, NULL), -EINVAL);
	assert_int_equal(dmar_arena_used(a), used0);
	dmar_arena_free(a);
}

/* Batches (more ids than one batch holds, so the lock is taken several
 * times) and prefixes. */
static void test_store_batches(void **state)
{
	enum { N = 700, CH = 512 };
	struct dmar_arena *a = arena(4 * MiB, 4096, false);
	static struct dmar_id ids[N + 1], pre[N + 2];
	static struct dmar_chunk_info info[N + 1];
	static uint8_t st[N + 2];
	uint8_t buf[CH];
	uint64_t used0 = dmar_arena_used(a);
	for (int i = 0; i < N; i++) {
		make_chunk(buf, sizeof(buf), 100 + (uint64_t)i, &ids[i]);
		assert_int_equal(dmar_store_ref(a, &ids[i], DMAR_CHUNK_RAW, CH, buf, CH, NULL), 0);
	}
	make_chunk(buf, sizeof(buf), 99, &ids[N]); /* not stored */

	/* ref_many: each held id gets a reference and its info; the absent
	 * one gets refs 0 and no reference. */
	dmar_store_ref_many(a, ids, N + 1, info);
	for (int i = 0; i < N; i++) {
		assert_int_equal(info[i].refs, 2);
		assert_int_equal(info[i].len, CH);
	}
	assert_int_equal(info[N].refs, 0);
	struct dmar_store_stats ss;
	dmar_store_stats(a, &ss);
	assert_int_equal(ss.refs, 2 * N);

	/* Prefixes: 8 and 20 bytes complete; an absent one and an ambiguous
	 * one (two held ids with the same first 8 bytes) do not. */
	struct dmar_id twin = ids[5];
	twin.b[10] ^= 1;
	assert_int_equal(dmar_store_ref(a, &twin, DMAR_CHUNK_RAW, CH, buf, CH, NULL), 0);
	for (int i = 0; i < N + 1; i++) {
		memset(&pre[i], 0, sizeof(pre[i]));
		memcpy(pre[i].b, ids[i].b, 8);
	}
	memset(&pre[N + 1], 0xee, sizeof(pre[N + 1]));
	assert_int_equal(dmar_store_resolve_many(a, pre, N + 2, 8, st), 0);
	for (int i = 0; i < N; i++) {
		if (i == 5)
			continue;
		assert_int_equal(st[i], 0);
		assert_memory_equal(pre[i].b, ids[i].b, 32);
	}
	assert_int_equal(st[5], 2);
	assert_int_equal(st[N], 1);
	assert_int_equal(st[N + 1], 1);
	struct dmar_id p20 = { 0 };
	memcpy(p20.b, ids[5].b, 20); /* 20 bytes tell ids[5] from its twin */
	assert_int_equal(dmar_store_resolve(a, &p20, 20), 0);
	assert_memory_equal(p20.b, ids[5].b, 32);
	assert_int_equal(dmar_store_resolve(a, &p20, 7), -EINVAL);
	assert_int_equal(dmar_store_resolve(a, &p20, 33), -EINVAL);
	memcpy(p20.b, ids[5].b, 8);
	assert_int_equal(dmar_store_resolve(a, &p20, 8), -ENOTUNIQ);

	/* ref_all: all or nothing. */
	assert_int_equal(dmar_store_ref_all(a, ids, N + 1, info), -ENOENT);
	dmar_store_stats(a, &ss);
	assert_int_equal(ss.refs, 2 * N + 1); /* the twin's one, and nothing taken */
	assert_int_equal(dmar_store_ref_all(a, ids, N, info), 0);
	assert_int_equal(info[0].refs, 3);
	dmar_store_unref_many(a, ids, N);

	/* unref_many twice (the second drops the last references and frees
	 * the space); the absent id is skipped. */
	dmar_store_unref_many(a, ids, N + 1);
	dmar_store_stats(a, &ss);
	assert_int_equal(ss.refs, N + 1);
	dmar_store_unref_many(a, ids, N + 1);
	assert_int_equal(dmar_store_unref(a, &twin), 0);
	dmar_store_stats(a, &ss);
	assert_int_equal(ss.refs, 0);
	assert_int_equal(ss.chunks, 0);
	assert_int_equal(dmar_arena_used(a), used0);
	dmar_arena_free(a);
}

static void test_store_full(void **state)
{
	struct dmar_arena *a = arena(MiB, 4096, false);
	enum { CH = 40 * 1024, MAXN = 64 };
	static uint8_t buf[CH];
	struct dmar_id ids[MAXN];
	struct dmar_store_stats st;
	struct dmar_chunk_info ci;
	int n = 0, r;

	for (;;) {
		assert_true(n < MAXN);
		make_chunk(buf, CH, (uint64_t)n + 100, &ids[n]);
		r = dmar_store_ref(a, &ids[n], DMAR_CHUNK_RAW, CH, buf, CH, NULL);
		if (r < 0)
			break;
		n++;
	}
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(n, (int)(MiB / CH)); /* 25 chunks fit, the 26th not */
	assert_int_equal(dmar_store_lookup(a, &ids[n], &ci), -ENOENT);
	dmar_store_stats(a, &st);
	assert_int_equal(st.chunks, n);
	assert_int_equal(st.refs, n);
	assert_int_equal(st.stored_bytes, (uint64_t)n * CH);
	assert_int_equal(dmar_arena_used(a), (uint64_t)n * CH);
	/* A full arena still takes references to what it holds. */
	assert_int_equal(dmar_store_ref(a, &ids[0], DMAR_CHUNK_RAW, CH, buf, CH, NULL), 0);
	for (int i = 0; i < n; i++) {
		struct dmar_id id;
		assert_int_equal(dmar_store_lookup(a, &ids[i], &ci), 0);
		dmar_hash(dmar_arena_base(a) + ci.off, ci.stored_len, &id);
		assert_memory_equal(&id, &ids[i], sizeof(id));
	}
	/* Space freed is usable again. */
	assert_int_equal(dmar_store_unref(a, &ids[3]), 0);
	make_chunk(buf, CH, (uint64_t)n + 100, &ids[n]);
	assert_int_equal(dmar_store_ref(a, &ids[n], DMAR_CHUNK_RAW, CH, buf, CH, NULL), 0);
	assert_int_equal(dmar_store_lookup(a, &ids[3], &ci), -ENOENT);
	dmar_arena_free(a);
}

/* Enough chunks to grow the table several times, then removal in random
 * order, checking that every remaining chunk is still found (the backward
 * shift deletion must not strand any entry). */
static void test_store_many(void **state)
{
	enum { N = 6000 };
	struct dmar_arena *a = arena(8 * MiB, 4096, false);
	struct dmar_id *ids = calloc(N, sizeof(*ids));
	uint8_t buf[64];
	int *order = calloc(N, sizeof(*order));
	struct dmar_chunk_info ci;
	struct dmar_store_stats st;
	uint64_t s = 42;

	for (int i = 0; i < N; i++) {
		make_chunk(buf, sizeof(buf), (uint64_t)i + 1, &ids[i]);
		assert_int_equal(dmar_store_ref(a, &ids[i], DMAR_CHUNK_RAW, sizeof(buf), buf, sizeof(buf), NULL), 0);
		order[i] = i;
	}
	dmar_store_stats(a, &st);
	assert_int_equal(st.chunks, N);
	assert_int_equal(dmar_arena_used(a), (uint64_t)N * DMAR_ARENA_UNIT);
	for (int i = N - 1; i > 0; i--) {
		int j = (int)(xorshift64(&s) % (uint64_t)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (int i = 0; i < N; i++) {
		assert_int_equal(dmar_store_unref(a, &ids[order[i]]), 0);
		if (i % 1000 == 999 || i == N - 1)
			for (int k = 0; k < N; k++)
				assert_int_equal(dmar_store_lookup(a, &ids[order[k]], &ci), k <= i ? -ENOENT : 0);
	}
	assert_int_equal(dmar_arena_used(a), 0);
	free(order);
	free(ids);
	dmar_arena_free(a);
}

struct store_arg {
	struct dmar_arena *a;
	const struct dmar_id *ids;
	uint8_t (*bufs)[256];
	int n;
	int added;
};

static void *store_thread(void *p)
{
	struct store_arg *t = p;
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < t->n; i++) {
			bool added;
			if (dmar_store_ref(t->a, &t->ids[i], DMAR_CHUNK_RAW, 256, t->bufs[i], 256, &added) == 0 && added)
				t->added++;
		}
	return NULL;
}

/* Two threads add the same chunks at once: each is stored exactly once. */
static void test_store_threads(void **state)
{
	enum { N = 500 };
	struct dmar_arena *a = arena(4 * MiB, 4096, false);
	struct dmar_id *ids = calloc(N, sizeof(*ids));
	uint8_t(*bufs)[256] = calloc(N, 256);
	struct store_arg args[2];
	pthread_t tid[2];
	struct dmar_store_stats st;

	for (int i = 0; i < N; i++)
		make_chunk(bufs[i], 256, (uint64_t)i + 9, &ids[i]);
	for (int t = 0; t < 2; t++) {
		args[t] = (struct store_arg){ a, ids, bufs, N, 0 };
		assert_int_equal(pthread_create(&tid[t], NULL, store_thread, &args[t]), 0);
	}
	for (int t = 0; t < 2; t++)
		assert_int_equal(pthread_join(tid[t], NULL), 0);
	assert_int_equal(args[0].added + args[1].added, N);
	dmar_store_stats(a, &st);
	assert_int_equal(st.chunks, N);
	assert_int_equal(st.refs, 4 * N);
	assert_int_equal(dmar_arena_used(a), (uint64_t)N * DMAR_ARENA_UNIT);
	for (int i = 0; i < N; i++)
		for (int k = 0; k < 4; k++)
			assert_int_equal(dmar_store_unref(a, &ids[i]), 0);
	assert_int_equal(dmar_arena_used(a), 0);
	free(bufs);
	free(ids);
	dmar_arena_free(a);
}

/* ---- named arenas, the journal ---------------------------------------- */

/* Named arenas of these tests live in a directory of their own on tmpfs
 * (DMARFS_RUNDIR: nothing is mounted there), removed at the end. */
static char rundir[128];

static int named_setup(void **state)
{
	(void)state;
	snprintf(rundir, sizeof(rundir), "/dev/shm/dmarfs-test-arena.%d", (int)getpid());
	setenv("DMARFS_RUNDIR", rundir, 1);
	return 0;
}

static int named_teardown(void **state)
{
	(void)state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rundir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct dmar_arena *named(const char *name, uint64_t size, bool fresh, int want)
{
	struct dmar_arena_opts o = { .size = size, .pagesize = 4096, .name = name, .fresh = fresh, .owner = "/test" };
	struct dmar_error err = { 0 };
	struct dmar_arena *a = NULL;
	int r = dmar_arena_new(&a, &o, &err);
	if (r != want)
		fprintf(stderr, "named arena %s: %d %s\n", name, r, err.msg);
	assert_int_equal(r, want);
	return a;
}

struct found {
	const char *name;
	int n;
	struct dmar_arena_info last;
};

static int count_named(void *ctx, const struct dmar_arena_info *i)
{
	struct found *f = ctx;
	if (!strcmp(i->name, f->name)) {
		f->n++;
		f->last = *i;
	}
	return 0;
}

static struct found find_named(const char *name)
{
	struct found f = { .name = name };
	assert_int_equal(dmar_arena_list(count_named, &f), 0);
	return f;
}

static void test_named(void **state)
{
	(void)state;
	struct dmar_error err = { 0 };
	uint64_t off;

	/* A bad name, and an attach of a name that does not exist without
	 * a size, are refused. */
	named("../x", MiB, false, -EINVAL);
	named(".hidden", MiB, false, -EINVAL);
	named("absent", 0, false, -EINVAL);

	/* backing=kmod: the kernel module's or nothing; a name it cannot
	 * hold is refused before anything is made.  (The module itself is
	 * tested in tests/kmod/run.sh's guest.) */
	struct dmar_arena_opts ko = { .size = MiB, .pagesize = 4096, .name = "km@1", .want = DMAR_WANT_KMOD };
	struct dmar_arena *ka = NULL;
	assert_int_equal(dmar_arena_new(&ka, &ko, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "backing=kmod"));
	if (access("/dev/dmar_arena", F_OK) != 0) {
		memset(&err, 0, sizeof(err));
		ko.name = "km1";
		int kr = dmar_arena_new(&ka, &ko, &err);
		assert_true(kr < 0);
		assert_non_null(strstr(err.msg, "load the dmar_arena module"));
	}
	memset(&err, 0, sizeof(err));

	struct dmar_arena *a = named("t1", 4 * MiB, false, 0);
	assert_false(dmar_arena_attached(a));
	assert_non_null(dmar_arena_path(a));
	struct stat st;
	assert_int_equal(stat(dmar_arena_path(a), &st), 0);
	assert_int_equal(dmar_arena_size(a), 4 * MiB);
	/* The superblock is the only space in use. */
	assert_int_equal(dmar_arena_used(a), DMAR_ARENA_META_MIN);
	assert_int_equal(dmar_arena_alloc(a, 10000, &off), 0);
	assert_true(off >= DMAR_ARENA_META_MIN);
	memset(dmar_arena_base(a) + off, 0x5a, 10000);

	/* One user at a time. */
	named("t1", 0, false, -EBUSY);
	struct found f = find_named("t1");
	assert_int_equal(f.n, 1);
	assert_true(f.last.valid);
	assert_true(f.last.in_use);
	assert_int_equal(f.last.size, 4 * MiB);
	assert_int_equal(f.last.pid, getpid());
	assert_string_equal(f.last.owner, "/test");
	assert_int_equal(dmar_arena_drop("t1", &err), -EBUSY);
	dmar_arena_free(a);

	/* Attached again: the same bytes, a fresh allocator that knows only
	 * the superblock until the owner claims what it had. */
	a = named("t1", 0, false, 0);
	assert_true(dmar_arena_attached(a));
	assert_int_equal(dmar_arena_size(a), 4 * MiB);
	assert_int_equal(dmar_arena_used(a), DMAR_ARENA_META_MIN);
	for (int i = 0; i < 10000; i++)
		assert_int_equal(dmar_arena_base(a)[off + i], 0x5a);
	assert_int_equal(dmar_arena_claim(a, off, 10000), 0);
	assert_int_equal(dmar_arena_claim(a, off + 512, 10), -EEXIST);
	assert_int_equal(dmar_arena_claim(a, 0, 10), -EEXIST); /* the superblock */
	assert_int_equal(dmar_arena_claim(a, off + 1, 10), -EINVAL);
	assert_int_equal(dmar_arena_claim(a, 4 * MiB, 512), -EINVAL);
	dmar_arena_free(a);

	/* A damaged superblock is refused with a reason, the file kept. */
	char path[4096];
	snprintf(path, sizeof(path), "%s/shm/t1.arena", rundir);
	FILE *fp = fopen(path, "r+");
	assert_non_null(fp);
	fseek(fp, 20, SEEK_SET);
	fputc(0xff, fp);
	fclose(fp);
	struct dmar_arena_opts o = { .name = "t1" };
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_arena_new(&a, &o, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, "checksum"));
	f = find_named("t1");
	assert_int_equal(f.n, 1);
	assert_false(f.last.valid);

	/* fresh replaces it; remove takes the name away. */
	a = named("t1", 2 * MiB, true, 0);
	assert_false(dmar_arena_attached(a));
	assert_int_equal(dmar_arena_size(a), 2 * MiB);
	assert_int_equal(dmar_arena_remove(a), 0);
	assert_int_equal(find_named("t1").n, 0);
	dmar_arena_free(a);
	named("t1", 0, false, -EINVAL);

	/* drop frees an arena not in use. */
	a = named("t2", MiB, false, 0);
	dmar_arena_free(a);
	assert_int_equal(find_named("t2").n, 1);
	assert_int_equal(dmar_arena_drop("t2", &err), 0);
	assert_int_equal(find_named("t2").n, 0);
	assert_int_equal(dmar_arena_drop("t2", &err), -ENOENT);
}

/* Record i of the journal tests: i's size and bytes follow from i. */
static size_t rec_fill(uint8_t *buf, uint64_t i)
{
	uint64_t s = i * 0x9e3779b97f4a7c15ull + 1;
	size_t n = 1 + (size_t)(xorshift64(&s) % (i % 50 == 0 ? 200000 : 700));
	for (size_t k = 0; k < n; k++)
		buf[k] = (uint8_t)xorshift64(&s);
	return n;
}

struct replayed {
	uint64_t n, first, next_seq;
	bool bad;
};

static int rec_check(void *ctx, uint64_t seq, const void *rec, size_t len)
{
	struct replayed *r = ctx;
	static uint8_t want[200001];
	uint64_t i = r->first + r->n;
	size_t n = rec_fill(want, i);
	if (n != len || memcmp(want, rec, len))
		r->bad = true;
	if (r->n && seq != r->next_seq)
		r->bad = true;
	r->next_seq = seq + 1;
	r->n++;
	return 0;
}

static void append_recs(struct dmar_journal *j, uint64_t from, uint64_t to)
{
	static uint8_t buf[200001];
	for (uint64_t i = from; i < to; i++) {
		size_t n = rec_fill(buf, i);
		/* In two pieces, as callers build records. */
		struct iovec iov[2] = { { buf, n / 3 }, { buf + n / 3, n - n / 3 } };
		assert_int_equal(dmar_journal_append(j, iov, 2, false), 0);
	}
}

static struct dmar_journal *journal_of(struct dmar_arena *a, struct replayed *rp)
{
	struct dmar_journal *j = NULL;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_journal_open(&j, a, &err), 0);
	if (dmar_arena_attached(a)) {
		int r = dmar_journal_replay(j, rec_check, rp, &err);
		if (r)
			fprintf(stderr, "replay: %s\n", err.msg);
		assert_int_equal(r, 0);
		assert_false(rp->bad);
	}
	return j;
}

static void claim_seg(void *ctx, uint64_t off, uint64_t len)
{
	dmar_arena_check_claim(ctx, off, len, "journal segment");
}

static void journal_owners(void *ctx, struct dmar_arena_check *c)
{
	dmar_journal_each_segment(ctx, claim_seg, c);
}

static void assert_adds_up(struct dmar_arena *a, struct dmar_journal *j)
{
	struct dmar_arena_report rep;
	int r = dmar_arena_check(a, journal_owners, j, &rep);
	if (r)
		fprintf(stderr, "check: %s\n", rep.problem);
	assert_int_equal(r, 0);
	assert_int_equal(rep.used, rep.owned);
}

static void test_journal(void **state)
{
	(void)state;
	struct dmar_arena *a = named("j1", 16 * MiB, false, 0);
	struct replayed rp = { 0 };
	struct dmar_journal *j = journal_of(a, &rp);
	struct dmar_journal_stats st;
	struct dmar_error err = { 0 };

	assert_int_equal(dmar_journal_append(j, NULL, 0, false), -EINVAL);
	append_recs(j, 0, 300);
	dmar_journal_stats(j, &st);
	assert_int_equal(st.records, 300);
	assert_true(st.segments >= 2);
	assert_adds_up(a, j);
	dmar_journal_free(j);
	dmar_arena_free(a);

	/* Every record back, in order; then more after them. */
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ 0 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 300);
	/* The spare is made at the first append, not by replay. */
	append_recs(j, 300, 400);
	assert_adds_up(a, j);
	dmar_journal_free(j);
	dmar_arena_free(a);

	/* A torn last record (a process killed while writing it) ends the
	 * log before it; the next append writes over it. */
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ 0 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 400);
	uint64_t used = dmar_arena_used(a);
	uint8_t *base = dmar_arena_base(a);
	static uint8_t buf[200001];
	size_t n = rec_fill(buf, 400);
	assert_int_equal(dmar_journal_append(j, &(struct iovec){ buf, n }, 1, false), 0);
	dmar_journal_free(j);
	/* Find the record just written by its bytes and tear it. */
	uint8_t *hit = memmem(base, dmar_arena_size(a), buf, n);
	assert_non_null(hit);
	hit[n / 2] ^= 1;
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ 0 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 400);
	append_recs(j, 400, 410);
	dmar_journal_free(j);
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ 0 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 410);

	/* A rewrite: replay sees the old log until the commit, then only
	 * the new one, and the old log's space comes back. */
	append_recs(j, 410, 411);
	used = dmar_arena_used(a);
	assert_int_equal(dmar_journal_rewrite_begin(j), 0);
	assert_int_equal(dmar_journal_rewrite_begin(j), -EINVAL);
	append_recs(j, 420, 430);
	dmar_journal_rewrite_abort(j);
	assert_int_equal(dmar_arena_used(a), used);
	append_recs(j, 411, 412); /* the old log goes on where it was */
	assert_int_equal(dmar_journal_rewrite_begin(j), 0);
	append_recs(j, 1000, 1010);
	dmar_journal_free(j); /* a crash before the commit */
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ 0 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 412);
	append_recs(j, 412, 413);
	struct dmar_journal_stats st0;
	dmar_journal_stats(j, &st0);
	used = dmar_arena_used(a);
	assert_int_equal(dmar_journal_rewrite_begin(j), 0);
	append_recs(j, 1000, 1010);
	dmar_journal_rewrite_commit(j);
	dmar_journal_stats(j, &st);
	assert_int_equal(st.records, 10);
	assert_int_equal(st.rewrites, 1);
	/* The old log's segments went back: what is used is the new log's. */
	assert_int_equal(dmar_arena_used(a), used - st0.bytes + st.bytes);
	append_recs(j, 1010, 1020);
	assert_adds_up(a, j);
	dmar_journal_free(j);
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ .first = 1000 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 20);
	(void)used;

	/* An empty rewrite: an empty log, which takes appends again. */
	assert_int_equal(dmar_journal_rewrite_begin(j), 0);
	dmar_journal_rewrite_commit(j);
	dmar_journal_free(j);
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ .first = 2000 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 0);
	append_recs(j, 2000, 2005);
	dmar_journal_free(j);
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	rp = (struct replayed){ .first = 2000 };
	j = journal_of(a, &rp);
	assert_int_equal(rp.n, 5);

	/* A full arena: plain appends fail, must appends use the spare. */
	uint64_t off;
	while (dmar_arena_alloc(a, 64 * KiB, &off) == 0)
		;
	while (dmar_arena_alloc(a, DMAR_ARENA_UNIT, &off) == 0)
		;
	static uint8_t big[200000];
	int r = 0, k = 0;
	for (; k < 1000 && (r = dmar_journal_append(j, &(struct iovec){ big, sizeof(big) }, 1, false)) == 0; k++)
		;
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(dmar_journal_append(j, &(struct iovec){ big, 1000 }, 1, true), 0);
	dmar_journal_free(j);

	/* A damaged segment header is reported, not followed. */
	dmar_arena_free(a);
	a = named("j1", 0, false, 0);
	assert_int_equal(dmar_journal_open(&j, a, &err), 0);
	/* The first segment follows the superblock. */
	dmar_arena_base(a)[DMAR_ARENA_META_MIN + 3] ^= 0xff;
	assert_int_equal(dmar_journal_replay(j, NULL, NULL, &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, "damaged"));
	dmar_journal_free(j);
	assert_int_equal(dmar_arena_remove(a), 0);
	dmar_arena_free(a);
}

static void test_store_adopt(void **state)
{
	(void)state;
	enum { N = 200 };
	struct dmar_arena *a = named("s1", 8 * MiB, false, 0);
	static uint8_t buf[4000];
	struct dmar_id ids[N];
	struct dmar_chunk_info ci[N], c2;
	for (int i = 0; i < N; i++) {
		make_chunk(buf, 100 + (size_t)i * 17, (uint64_t)i + 7, &ids[i]);
		assert_int_equal(dmar_store_ref(a, &ids[i], DMAR_CHUNK_RAW, 100 + (uint32_t)i * 17, buf,
						100 + (uint32_t)i * 17, NULL),
				 0);
		assert_int_equal(dmar_store_lookup(a, &ids[i], &ci[i]), 0);
	}
	uint64_t used = dmar_arena_used(a);
	dmar_arena_free(a);

	a = named("s1", 0, false, 0);
	for (int i = 0; i < N; i++) {
		/* Twice: the second only counts a reference. */
		for (int t = 0; t < 2; t++)
			assert_int_equal(dmar_store_adopt(a, &ids[i], ci[i].enc, ci[i].len, ci[i].off, ci[i].stored_len),
					 0);
		assert_int_equal(dmar_store_lookup(a, &ids[i], &c2), 0);
		assert_int_equal(c2.off, ci[i].off);
		assert_int_equal(c2.refs, 2);
		struct dmar_id id;
		dmar_hash(dmar_arena_base(a) + c2.off, c2.stored_len, &id);
		assert_memory_equal(&id, &ids[i], sizeof(id));
	}
	assert_int_equal(dmar_arena_used(a), used);
	/* Records that disagree on where a chunk is, or put two in one
	 * place, are damage. */
	assert_int_equal(dmar_store_adopt(a, &ids[0], ci[0].enc, ci[0].len, ci[1].off, ci[0].stored_len), -EUCLEAN);
	struct dmar_id other;
	make_chunk(buf, 100, 999, &other);
	assert_int_equal(dmar_store_adopt(a, &other, DMAR_CHUNK_RAW, 100, ci[5].off, 100), -EUCLEAN);
	assert_int_equal(dmar_store_adopt(a, &other, DMAR_CHUNK_RAW, 100, dmar_arena_size(a), 100), -EINVAL);
	assert_int_equal(dmar_store_adopt(a, &other, DMAR_CHUNK_RAW, 100, 7, 100), -EINVAL);
	struct dmar_arena_report rep;
	assert_int_equal(dmar_arena_check(a, NULL, NULL, &rep), 0);
	assert_int_equal(rep.chunks, N);

	/* The check finds space nobody owns, and space two owners claim. */
	uint64_t off;
	assert_int_equal(dmar_arena_alloc(a, 3000, &off), 0);
	assert_int_equal(dmar_arena_check(a, NULL, NULL, &rep), -EUCLEAN);
	assert_int_equal(rep.leaked, 6 * DMAR_ARENA_UNIT);
	assert_non_null(strstr(rep.problem, "leaked"));
	dmar_arena_release(a, off, 3000);
	for (int i = 0; i < N; i++)
		for (int t = 0; t < 2; t++)
			assert_int_equal(dmar_store_unref(a, &ids[i]), 0);
	assert_int_equal(dmar_arena_used(a), DMAR_ARENA_META_MIN);
	assert_int_equal(dmar_arena_remove(a), 0);
	dmar_arena_free(a);
}

/* An optional argument runs only the tests matching it (a glob). */
int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_opts),
		cmocka_unit_test(test_normal_pages),
		cmocka_unit_test(test_hugetlb_or_fallback),
		cmocka_unit_test(test_1g),
		cmocka_unit_test(test_default_backing),
		cmocka_unit_test(test_fill_and_free),
		cmocka_unit_test(test_large_and_fragmented),
		cmocka_unit_test(test_alloc_vs_model),
		cmocka_unit_test(test_alloc_threads),
		cmocka_unit_test(test_store_refcount),
		cmocka_unit_test(test_store_full),
		cmocka_unit_test(test_store_batches),
		cmocka_unit_test(test_store_many),
		cmocka_unit_test(test_store_threads),
		cmocka_unit_test_setup_teardown(test_named, named_setup, named_teardown),
		cmocka_unit_test_setup_teardown(test_journal, named_setup, named_teardown),
		cmocka_unit_test_setup_teardown(test_store_adopt, named_setup, named_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
