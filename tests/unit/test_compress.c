/* SPDX-License-Identifier: MIT */
/*
 * test_compress - the compress policy and the chunk compressor
 * (codec/compress.h), and the set of distinct chunk ids (codec/idset.h).
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

#include "codec/compress.h"
#include "codec/hash.h"
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

/* An optional argument runs only the tests matching it (a glob). */
int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pays),
		cmocka_unit_test(test_probe),
		cmocka_unit_test(test_zchunk_roundtrip),
		cmocka_unit_test(test_idset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
