/* SPDX-License-Identifier: MIT */
/*
 * test_compress - the compress policy and the chunk compressor
 * (codec/compress.h), the set of distinct chunk ids (codec/idset.h) and
 * the lossy cache of them (codec/idcache.h).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_d_format: magicless frames */
#include <zstd.h>

#include "prng.h"

#include "codec/bgroup.h"
#include "codec/compress.h"
#include "codec/hash.h"
#include "codec/idcache.h"
#include "codec/idset.h"

/* Bytes that only entropy coding shrinks: each byte one of 3 letters,
 * no repeats for a match finder (bf16 weights behave like this). */
static void fill_skewed(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)("abcdefgh\n"[xorshift64(&s) % 3 + i % 5]);
}

static void test_pays(void **state)
{
	assert_true(dmar_compress_pays(32768, 32768 - 1025));
	assert_false(dmar_compress_pays(32768, 32768 - 1024)); /* exactly 1/32 saved: not enough */
	assert_false(dmar_compress_pays(32768, 40000));
}

static void test_probe(void **state)
{
	const size_t len = 1u << 20;
	uint8_t *p = malloc(len);
	ZSTD_CCtx *z = ZSTD_createCCtx();
	assert_non_null(p);
	fill_random(p, len, 7);
	assert_false(dmar_compress_probe(z, p, len));      /* random */
	fill_skewed(p, len, 7);
	assert_true(dmar_compress_probe(z, p, len));       /* entropy only */
	memset(p, 'x', len);
	assert_true(dmar_compress_probe(z, p, len));       /* repeats */
	assert_false(dmar_compress_probe(z, p, DMAR_COMPRESS_MIN - 1)); /* too small to pay */
	fill_random(p, len, 8);
	assert_true(dmar_compress_probe(z, p, DMAR_COMPRESS_SAMPLED - 1)); /* too small to sample: tried */
	/* Half random, half compressible in stretches of 1/16 (a tar of .gz
	 * and text members): the spread samples see both. */
	fill_random(p, len, 9);
	for (size_t k = 0; k < 16; k += 2)
		fill_skewed(p + k * (len / 16), len / 16, 9 + k);
	assert_true(dmar_compress_probe(z, p, len));
	ZSTD_freeCCtx(z);
	free(p);
}

/* A frame from the chunk compressor decodes, magicless, to the chunk. */
static void test_zchunk_roundtrip(void **state)
{
	const size_t len = 100000;
	uint8_t *p = malloc(len), *z = malloc(ZSTD_compressBound(len)), *back = malloc(len);
	struct dmar_zchunk *zc;
	assert_int_equal(dmar_zchunk_new(&zc, 3, NULL), 0);
	assert_int_equal(dmar_zchunk_level(zc), 3);
	assert_null(dmar_zchunk_pack(zc));
	fill_skewed(p, len, 3);
	assert_true(dmar_zchunk_probe(zc, p, len));
	size_t n = dmar_zchunk_compress(zc, z, ZSTD_compressBound(len), p, len);
	assert_true(n > 0 && dmar_compress_pays(len, n));
	ZSTD_DCtx *d = ZSTD_createDCtx();
	ZSTD_DCtx_setParameter(d, ZSTD_d_format, ZSTD_f_zstd1_magicless);
	assert_int_equal(ZSTD_decompressDCtx(d, back, len, z, n), len);
	assert_memory_equal(back, p, len);
	/* Random: the frame would not pay, so none. */
	fill_random(p, len, 4);
	assert_int_equal(dmar_zchunk_compress(zc, z, ZSTD_compressBound(len), p, len), 0);
	/* No room to save 1/32: none either, whatever the data. */
	fill_skewed(p, len, 5);
	assert_int_equal(dmar_zchunk_compress(zc, z, 64, p, len), 0);
	ZSTD_freeDCtx(d);
	dmar_zchunk_free(zc);
	dmar_zchunk_free(NULL);
	free(p);
	free(z);
	free(back);
}

/* Grouping is a permutation that join undoes bit for bit, at every
 * length (whole values or not) and alignment; plane k holds byte k of
 * each value. */
static void test_bgroup(void **state)
{
	enum { MAX = 4099 };
	uint8_t *src = malloc(MAX + 3), *g = malloc(MAX), *back = malloc(MAX);
	fill_random(src, MAX + 3, 11);
	for (unsigned w = 2; w <= DMAR_BGROUP_MAX_WIDTH; w *= 2)
		for (size_t len = 0; len <= MAX; len += len < 200 ? 1 : 97)
			for (size_t a = 0; a < 3; a++) {
				memset(g, 0xa5, MAX);
				dmar_bgroup_split(g, src + a, len, w);
				size_t n = len / w;
				for (size_t i = 0; i < n; i++)
					for (unsigned k = 0; k < w; k++)
						if (g[k * n + i] != src[a + i * w + k])
							fail_msg("width %u len %zu: plane %u value %zu", w, len, k, i);
				assert_memory_equal(g + n * w, src + a + n * w, len - n * w);
				dmar_bgroup_join(back, g, len, w);
				assert_memory_equal(back, src + a, len);
			}
	/* docs/format.md's test vector. */
	static const uint8_t in7[7] = { 0, 1, 2, 3, 4, 5, 6 }, g7[7] = { 0, 2, 4, 1, 3, 5, 6 };
	dmar_bgroup_split(g, in7, 7, 2);
	assert_memory_equal(g, g7, 7);
	dmar_bgroup_split(g, in7, 7, 4);
	assert_memory_equal(g, in7, 7);
	/* A big one through the vector paths. */
	const size_t big = 1u << 20;
	uint8_t *b = malloc(big), *bg = malloc(big), *bb = malloc(big);
	fill_floats(b, big, 2, 12);
	for (unsigned w = 2; w <= 4; w *= 2) {
		dmar_bgroup_split(bg, b, big, w);
		assert_memory_not_equal(bg, b, 4096);
		dmar_bgroup_join(bb, bg, big, w);
		assert_memory_equal(bb, b, big);
	}
	free(b);
	free(bg);
	free(bb);
	free(src);
	free(g);
	free(back);
}

/* The choice of form follows the data: bf16 weights grouped at width 2,
 * fp32 ones at 4, text plain, random bytes raw; and a grouped frame
 * decodes to the chunk, bit for bit. */
static void test_choose(void **state)
{
	const size_t len = 256u << 10;
	uint8_t *p = malloc(len), *z = malloc(ZSTD_compressBound(len)), *back = malloc(len), *tmp = malloc(len);
	ZSTD_CCtx *c = ZSTD_createCCtx();
	ZSTD_DCtx *d = ZSTD_createDCtx();
	struct dmar_zchunk *zc;
	assert_int_equal(dmar_zchunk_new(&zc, 1, NULL), 0);

	fill_floats(p, len, 2, 21);
	assert_int_equal(dmar_compress_choose(c, p, len, false), DMAR_ZX_G2);
	assert_int_equal(dmar_compress_choose(c, p + 1, len - 1, false), DMAR_ZX_G2); /* cut mid-value */
	/* The plain-only probe (the store's, the tree body's) still says
	 * plain zstd pays on it: the grouped forms are no candidates there. */
	assert_true(dmar_compress_probe(c, p, len));
	size_t plain = dmar_zchunk_compress(zc, z, ZSTD_compressBound(len), p, len);
	size_t g2 = dmar_zchunk_compress_as(zc, z, ZSTD_compressBound(len), p, len, DMAR_ZX_G2);
	print_message("bf16 %zu bytes: plain frame %zu, grouped %zu\n", len, plain, g2);
	assert_true(g2 > 0 && g2 < plain - len / 32);
	assert_int_equal(dmar_chunk_frame_decode(d, back, len, z, g2, DMAR_ZX_G2, tmp), len);
	assert_memory_equal(back, p, len);
	/* Corrupt: an error, never bytes that pass for the chunk. */
	z[g2 / 2] ^= 0x55;
	size_t r = dmar_chunk_frame_decode(d, back, len, z, g2, DMAR_ZX_G2, tmp);
	assert_true(ZSTD_isError(r) || r != len || memcmp(back, p, len) != 0);
	/* Truncated. */
	assert_true(ZSTD_isError(dmar_chunk_frame_decode(d, back, len, z, g2 / 2, DMAR_ZX_G2, tmp)));
	assert_true(ZSTD_isError(dmar_chunk_frame_decode(d, back, len, z, g2, (enum dmar_zx)3, tmp)));

	fill_floats(p, len, 4, 22);
	assert_int_equal(dmar_zchunk_choose(zc, p, len, false), DMAR_ZX_G4);
	size_t g4 = dmar_zchunk_compress_as(zc, z, ZSTD_compressBound(len), p, len, DMAR_ZX_G4);
	assert_true(g4 > 0);
	assert_int_equal(dmar_chunk_frame_decode(d, back, len, z, g4, DMAR_ZX_G4, tmp), len);
	assert_memory_equal(back, p, len);
	/* Only grouped forms compete: still width 4. */
	assert_int_equal(dmar_compress_choose(c, p, len, true), DMAR_ZX_G4);

	fill_skewed(p, len, 23);
	assert_int_equal(dmar_compress_choose(c, p, len, false), DMAR_ZX_PLAIN);
	memset(p, 'x', len);
	assert_int_equal(dmar_compress_choose(c, p, len, false), DMAR_ZX_PLAIN);
	fill_random(p, len, 24);
	assert_int_equal(dmar_compress_choose(c, p, len, false), DMAR_ZX_RAW);
	assert_int_equal(dmar_compress_choose(c, p, len, true), DMAR_ZX_RAW);
	assert_int_equal(dmar_zchunk_compress_as(zc, z, ZSTD_compressBound(len), p, len, DMAR_ZX_G2), 0);
	/* Too small to sample: plain is tried, grouped never. */
	assert_int_equal(dmar_compress_choose(c, p, DMAR_COMPRESS_SAMPLED - 1, false), DMAR_ZX_PLAIN);
	assert_int_equal(dmar_compress_choose(c, p, DMAR_COMPRESS_SAMPLED - 1, true), DMAR_ZX_RAW);
	assert_int_equal(dmar_compress_choose(c, p, DMAR_COMPRESS_MIN - 1, false), DMAR_ZX_RAW);

	dmar_zchunk_free(zc);
	ZSTD_freeCCtx(c);
	ZSTD_freeDCtx(d);
	free(p);
	free(z);
	free(back);
	free(tmp);
}

/* The link meter: compress until both rates are known; then compress
 * where the link is slower than what compressing saves, else go raw but
 * for one batch in DMAR_ZMETER_REFRESH; follow a change of link. */
static void test_zmeter(void **state)
{
	struct dmar_zmeter m = { 0 };
	assert_true(dmar_zmeter_compress(&m)); /* nothing measured */
	dmar_zmeter_sent(&m, 8u << 20, 0.067); /* 125 MB/s: 1 Gbit/s */
	assert_true(dmar_zmeter_compress(&m)); /* no compress rate yet */
	dmar_zmeter_compressed(&m, 8u << 20, 5u << 20, 0.02); /* 420 MB/s, 37 % saved: 155 MB/s */
	for (int i = 0; i < 20; i++)
		assert_true(dmar_zmeter_compress(&m));
	/* The link turns fast: 2 GB/s a stream, far above 155 MB/s. */
	for (int i = 0; i < 10; i++)
		dmar_zmeter_sent(&m, 8u << 20, 0.004);
	unsigned compressed = 0;
	for (int i = 0; i < 4 * DMAR_ZMETER_REFRESH; i++)
		compressed += dmar_zmeter_compress(&m);
	assert_int_equal(compressed, 4); /* the refreshes only */
	/* Data that saves nothing, on a slow link: raw too. */
	struct dmar_zmeter r = { 0 };
	dmar_zmeter_sent(&r, 8u << 20, 0.067);
	dmar_zmeter_compressed(&r, 8u << 20, 8u << 20, 0.01);
	assert_false(dmar_zmeter_compress(&r));
	/* Two streams on a 1 Gbit/s link, 65 MB/s each, compressing at
	 * 195 MB/s a stream and saving 32 %: compressing one batch while the
	 * other stream sends beats sending raw (195 x 1.32 > 130), where one
	 * stream alone at 130 MB/s stays raw (195 x 0.32 < 130). */
	struct dmar_zmeter two = { .streams = 2 };
	dmar_zmeter_sent(&two, 8u << 20, (8u << 20) / 65e6);
	dmar_zmeter_compressed(&two, 8u << 20, (uint64_t)((8u << 20) * 0.68), (8u << 20) / 195e6);
	for (int i = 0; i < 10; i++)
		assert_true(dmar_zmeter_compress(&two));
	struct dmar_zmeter one = { .streams = 1 };
	dmar_zmeter_sent(&one, 8u << 20, (8u << 20) / 130e6);
	dmar_zmeter_compressed(&one, 8u << 20, (uint64_t)((8u << 20) * 0.68), (8u << 20) / 195e6);
	assert_false(dmar_zmeter_compress(&one));
	/* Whatever the streams, a saving of nothing is not worth the cores. */
	struct dmar_zmeter none = { .streams = 4 };
	dmar_zmeter_sent(&none, 8u << 20, 0.267);
	dmar_zmeter_compressed(&none, 8u << 20, (8u << 20) - 4096, 0.01);
	assert_false(dmar_zmeter_compress(&none));
	/* Samples of nothing or no time are ignored. */
	struct dmar_zmeter z = { 0 };
	dmar_zmeter_sent(&z, 0, 1);
	dmar_zmeter_sent(&z, 100, 0);
	dmar_zmeter_compressed(&z, 0, 0, 1);
	assert_true(z.send_bps == 0 && z.z_bps == 0);
}

static void test_idset(void **state)
{
	enum { N = 5000 };
	struct dmar_idset s;
	struct dmar_id *ids = malloc(N * sizeof(*ids));
	assert_int_equal(dmar_idset_init(&s, N), 0);
	for (int i = 0; i < N; i++) {
		uint8_t b[8];
		fill_random(b, sizeof(b), (uint64_t)i + 1);
		dmar_hash(b, sizeof(b), &ids[i]);
	}
	/* Each id twice, interleaved: indices in first-seen order, once. */
	for (int i = 0; i < N; i++) {
		bool added;
		assert_int_equal(dmar_idset_add(&s, &ids[i], &added), i);
		assert_true(added);
		if (i >= 3) {
			assert_int_equal(dmar_idset_add(&s, &ids[i - 3], &added), i - 3);
			assert_false(added);
		}
	}
	assert_int_equal(s.n, N);
	assert_memory_equal(s.ids, ids, N * sizeof(*ids));
	for (int i = 0; i < N; i++)
		assert_int_equal(dmar_idset_find(&s, &ids[i]), i);
	struct dmar_id other;
	dmar_hash("other", 5, &other);
	assert_int_equal(dmar_idset_find(&s, &other), -1);
	assert_int_equal(dmar_idset_add(&s, &other, NULL), -ENOSPC); /* past the capacity */
	assert_int_equal(s.n, N);
	dmar_idset_free(&s);

	/* Empty. */
	assert_int_equal(dmar_idset_init(&s, 0), 0);
	assert_int_equal(dmar_idset_find(&s, &other), -1);
	assert_int_equal(dmar_idset_add(&s, &other, NULL), -ENOSPC);
	dmar_idset_free(&s);
	free(ids);
}

/* The lossy cache: what was added is there until dropped, at the load a
 * client gives it (a 1 GiB file's 30,000 chunks in 256k ways) without
 * losing any; past its capacity it forgets, boundedly, and never invents. */
static void test_idcache(void **state)
{
	enum { N = 30000 };
	struct dmar_id *ids = malloc(2 * N * sizeof(*ids));
	for (int i = 0; i < 2 * N; i++) {
		uint8_t b[8];
		fill_random(b, sizeof(b), (uint64_t)i + 7);
		dmar_hash(b, sizeof(b), &ids[i]);
	}
	struct dmar_idcache *c = dmar_idcache_new(15);
	assert_non_null(c);
	dmar_idcache_add(c, ids, N);
	for (int i = 0; i < N; i++)
		assert_true(dmar_idcache_has(c, &ids[i]));
	for (int i = N; i < 2 * N; i++)
		assert_false(dmar_idcache_has(c, &ids[i]));
	dmar_idcache_drop(c, &ids[5]);
	assert_false(dmar_idcache_has(c, &ids[5]));
	assert_true(dmar_idcache_has(c, &ids[6]));
	dmar_idcache_free(c);

	/* 30,000 ids in 2,048 ways: most are forgotten, and none of the
	 * others appears. */
	c = dmar_idcache_new(8);
	dmar_idcache_add(c, ids, N);
	int kept = 0;
	for (int i = 0; i < N; i++)
		kept += dmar_idcache_has(c, &ids[i]);
	assert_true(kept > 0 && kept <= 2048);
	for (int i = N; i < 2 * N; i++)
		assert_false(dmar_idcache_has(c, &ids[i]));
	dmar_idcache_free(c);
	dmar_idcache_free(NULL);
	assert_null(dmar_idcache_new(31));
	free(ids);
}

/* An optional argument runs only the tests matching it (a glob). */
int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pays),
		cmocka_unit_test(test_probe),
		cmocka_unit_test(test_zchunk_roundtrip),
		cmocka_unit_test(test_bgroup),
		cmocka_unit_test(test_choose),
		cmocka_unit_test(test_zmeter),
		cmocka_unit_test(test_idset),
		cmocka_unit_test(test_idcache),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
