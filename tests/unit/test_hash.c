/* SPDX-License-Identifier: MIT */
/*
 * test_hash - SHA-256 content ids and their hex form (codec/hash.h).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prng.h"

#include "hash.h"

static void assert_id_hex(const struct dmar_id *id, const char *want)
{
	char hex[DMAR_HASH_HEX_SIZE];
	dmar_hex(id->b, DMAR_HASH_SIZE, hex);
	assert_string_equal(hex, want);
}

/* --- known answers (FIPS 180-2 / NIST CAVS vectors) --------------------- */

#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_448 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
#define SHA_MILLION_A "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
#define MSG_448 "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"

static void test_known_answers(void **state)
{
	struct dmar_id id;

	dmar_hash("", 0, &id);
	assert_id_hex(&id, SHA_EMPTY);
	/* A NULL buffer with len 0 is the empty message too. */
	dmar_hash(NULL, 0, &id);
	assert_id_hex(&id, SHA_EMPTY);
	dmar_hash("abc", 3, &id);
	assert_id_hex(&id, SHA_ABC);
	dmar_hash(MSG_448, strlen(MSG_448), &id);
	assert_id_hex(&id, SHA_448);

	char *a = malloc(1000000);
	assert_non_null(a);
	memset(a, 'a', 1000000);
	dmar_hash(a, 1000000, &id);
	assert_id_hex(&id, SHA_MILLION_A);
	free(a);
}

static void test_incremental_known(void **state)
{
	struct dmar_hash_ctx *h = dmar_hash_ctx_new();
	struct dmar_id id;

	assert_non_null(h);
	/* Nothing fed: the empty message. */
	dmar_hash_ctx_final(h, &id);
	assert_id_hex(&id, SHA_EMPTY);
	/* final resets: the context is reusable at once. */
	dmar_hash_ctx_update(h, "a", 1);
	dmar_hash_ctx_update(h, "", 0);
	dmar_hash_ctx_update(h, "bc", 2);
	dmar_hash_ctx_final(h, &id);
	assert_id_hex(&id, SHA_ABC);
	/* The million 'a' in pieces of 1000. */
	char a[1000];
	memset(a, 'a', sizeof(a));
	for (int i = 0; i < 1000; i++)
		dmar_hash_ctx_update(h, a, sizeof(a));
	dmar_hash_ctx_final(h, &id);
	assert_id_hex(&id, SHA_MILLION_A);
	dmar_hash_ctx_free(h);
	dmar_hash_ctx_free(NULL);
}

static void test_incremental_equals_oneshot(void **state)
{
	const size_t len = 300000;
	uint8_t *buf = malloc(len);
	struct dmar_hash_ctx *h = dmar_hash_ctx_new();
	struct dmar_id want, got;
	uint64_t s = 7;

	assert_non_null(buf);
	assert_non_null(h);
	fill_random(buf, len, 11);
	for (int round = 0; round < 20; round++) {
		size_t n = round == 0 ? len : (size_t)(xorshift64(&s) % len);
		dmar_hash(buf, n, &want);
		size_t pos = 0;
		while (pos < n) {
			/* Pieces from 0 to ~2 blocks, crossing the 64-byte
			 * block boundary in every way. */
			size_t piece = (size_t)(xorshift64(&s) % (round & 1 ? 130 : 9000));
			if (piece > n - pos)
				piece = n - pos;
			dmar_hash_ctx_update(h, buf + pos, piece);
			pos += piece;
		}
		dmar_hash_ctx_final(h, &got);
		assert_memory_equal(want.b, got.b, DMAR_HASH_SIZE);
	}
	/* Every length around the padding boundaries (55, 56, 64, ...). */
	for (size_t n = 0; n < 200; n++) {
		dmar_hash(buf, n, &want);
		dmar_hash_ctx_update(h, buf, n / 2);
		dmar_hash_ctx_update(h, buf + n / 2, n - n / 2);
		dmar_hash_ctx_final(h, &got);
		assert_memory_equal(want.b, got.b, DMAR_HASH_SIZE);
	}
	dmar_hash_ctx_free(h);
	free(buf);
}

/* --- hex ---------------------------------------------------------------- */

static void test_hex(void **state)
{
	uint8_t b[DMAR_HASH_SIZE];
	char hex[DMAR_HASH_HEX_SIZE];

	for (int i = 0; i < DMAR_HASH_SIZE; i++)
		b[i] = (uint8_t)(i * 0x11 + 0x0f);
	dmar_hex(b, 4, hex);
	assert_string_equal(hex, "0f203142");
	dmar_hex(b, 0, hex);
	assert_string_equal(hex, "");
	uint8_t all[2] = { 0x00, 0xff };
	dmar_hex(all, 2, hex);
	assert_string_equal(hex, "00ff");

	/* n = 8: 16 digits, NUL right after; nothing beyond touched. */
	memset(hex, 'X', sizeof(hex));
	dmar_hex(b, 8, hex);
	assert_int_equal(strlen(hex), 16);
	assert_int_equal(hex[17], 'X');

	dmar_hex(b, DMAR_HASH_SIZE, hex);
	assert_int_equal(strlen(hex), 64);
	for (int i = 0; i < 64; i++)
		assert_non_null(strchr("0123456789abcdef", hex[i]));
}

static void test_parse_roundtrip(void **state)
{
	uint64_t s = 3;
	for (int round = 0; round < 100; round++) {
		struct dmar_id id, back;
		char hex[DMAR_HASH_HEX_SIZE];
		for (int i = 0; i < DMAR_HASH_SIZE; i++)
			id.b[i] = (uint8_t)xorshift64(&s);
		dmar_hex(id.b, DMAR_HASH_SIZE, hex);
		memset(&back, 0, sizeof(back));
		assert_int_equal(dmar_id_parse(hex, &back), 0);
		assert_memory_equal(id.b, back.b, DMAR_HASH_SIZE);

		/* Upper case reads the same. */
		for (int i = 0; i < 64; i++)
			if (hex[i] >= 'a' && hex[i] <= 'f')
				hex[i] = (char)(hex[i] - 'a' + 'A');
		memset(&back, 0, sizeof(back));
		assert_int_equal(dmar_id_parse(hex, &back), 0);
		assert_memory_equal(id.b, back.b, DMAR_HASH_SIZE);
	}

	struct dmar_id id;
	assert_int_equal(dmar_id_parse(SHA_ABC, &id), 0);
	struct dmar_id want;
	dmar_hash("abc", 3, &want);
	assert_memory_equal(id.b, want.b, DMAR_HASH_SIZE);
}

static void expect_parse_fail(const char *hex)
{
	struct dmar_id id, before;
	memset(&id, 0x77, sizeof(id));
	before = id;
	assert_int_equal(dmar_id_parse(hex, &id), -EINVAL);
	/* Out-params are written only on success. */
	assert_memory_equal(id.b, before.b, DMAR_HASH_SIZE);
}

static void test_parse_rejects(void **state)
{
	char hex[80];

	expect_parse_fail("");
	expect_parse_fail("0");
	expect_parse_fail("abc");
	/* 63 and 65 digits. */
	memcpy(hex, SHA_ABC, 64);
	hex[63] = '\0';
	expect_parse_fail(hex);
	memcpy(hex, SHA_ABC, 64);
	hex[64] = '0';
	hex[65] = '\0';
	expect_parse_fail(hex);
	/* 128 digits. */
	memcpy(hex, SHA_ABC, 64);
	memcpy(hex + 64, SHA_ABC, 15);
	hex[79] = '\0';
	expect_parse_fail(hex);
	/* Trailing junk, prefixes, spaces. */
	memcpy(hex, SHA_ABC, 64);
	hex[64] = '\n';
	hex[65] = '\0';
	expect_parse_fail(hex);
	memcpy(hex, SHA_ABC, 64);
	hex[64] = ' ';
	hex[65] = '\0';
	expect_parse_fail(hex);
	hex[0] = '0';
	hex[1] = 'x';
	memcpy(hex + 2, SHA_ABC, 62);
	hex[64] = '\0';
	expect_parse_fail(hex);

	/* A bad character at every position, high and low nibble alike. */
	static const char bad[] = { 'g', 'G', 'z', ' ', '-', '+', ':', '/', '@', '`', '\x80', '\xff' };
	for (int pos = 0; pos < 64; pos++) {
		for (size_t k = 0; k < sizeof(bad); k++) {
			memcpy(hex, SHA_ABC, 64);
			hex[64] = '\0';
			hex[pos] = bad[k];
			expect_parse_fail(hex);
		}
		/* A string cut short at pos (the NUL itself is bad). */
		memcpy(hex, SHA_ABC, 64);
		hex[pos] = '\0';
		expect_parse_fail(hex);
	}
}

/* --- threads ------------------------------------------------------------ */

#define THREAD_BUFS 8
#define THREAD_ROUNDS 200

struct thread_arg {
	const uint8_t *bufs[THREAD_BUFS];
	size_t lens[THREAD_BUFS];
	struct dmar_id want[THREAD_BUFS];
	unsigned start;
	int failures;
};

static void *hash_thread(void *p)
{
	struct thread_arg *a = p;
	struct dmar_hash_ctx *h = dmar_hash_ctx_new();
	if (!h) {
		a->failures++;
		return NULL;
	}
	for (unsigned r = 0; r < THREAD_ROUNDS; r++) {
		unsigned k = (a->start + r) % THREAD_BUFS;
		struct dmar_id got;
		dmar_hash(a->bufs[k], a->lens[k], &got);
		if (memcmp(got.b, a->want[k].b, DMAR_HASH_SIZE))
			a->failures++;
		/* Interleave the incremental API on the same thread. */
		dmar_hash_ctx_update(h, a->bufs[k], a->lens[k] / 3);
		dmar_hash_ctx_update(h, a->bufs[k] + a->lens[k] / 3, a->lens[k] - a->lens[k] / 3);
		dmar_hash_ctx_final(h, &got);
		if (memcmp(got.b, a->want[k].b, DMAR_HASH_SIZE))
			a->failures++;
	}
	dmar_hash_ctx_free(h);
	return NULL;
}

static void test_threads(void **state)
{
	enum { NT = 4 };
	uint8_t *bufs[THREAD_BUFS];
	struct thread_arg args[NT];
	pthread_t tid[NT];

	memset(args, 0, sizeof(args));
	for (int k = 0; k < THREAD_BUFS; k++) {
		size_t len = (size_t)(k + 1) * 7919;
		bufs[k] = malloc(len);
		assert_non_null(bufs[k]);
		fill_random(bufs[k], len, (uint64_t)k + 100);
		for (int t = 0; t < NT; t++) {
			args[t].bufs[k] = bufs[k];
			args[t].lens[k] = len;
			/* The expected answers come from this (main) thread. */
			dmar_hash(bufs[k], len, &args[t].want[k]);
		}
	}
	/* Two threads, then four, all hashing at once with the main thread. */
	for (int nt = 2; nt <= NT; nt += 2) {
		for (int t = 0; t < nt; t++) {
			args[t].start = (unsigned)t * 3;
			args[t].failures = 0;
			assert_int_equal(pthread_create(&tid[t], NULL, hash_thread, &args[t]), 0);
		}
		struct dmar_id id;
		for (int i = 0; i < 100; i++) {
			dmar_hash("abc", 3, &id);
			assert_id_hex(&id, SHA_ABC);
		}
		for (int t = 0; t < nt; t++) {
			assert_int_equal(pthread_join(tid[t], NULL), 0);
			assert_int_equal(args[t].failures, 0);
		}
	}
	for (int k = 0; k < THREAD_BUFS; k++)
		free(bufs[k]);
}

/* An optional argument runs only the tests matching it (a glob). */
int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_incremental_known),
		cmocka_unit_test(test_incremental_equals_oneshot),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_parse_roundtrip),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
