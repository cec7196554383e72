/* SPDX-License-Identifier: MIT */
/*
 * test_hash - SHA-256 content ids and their hex form (codec/hash.h).
 *
 * Every test runs twice: with the SHA-NI code (where the CPU has it) and
 * with it forced off (libcrypto).  The batch and SHA-NI results are
 * checked against libcrypto's EVP_Digest called directly, not against
 * dmar_hash, so the two paths cannot agree on a wrong answer.
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
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "prng.h"

#include "codec/crc32c.h"
#include "codec/hash.h"
#include "codec/sha256.h"

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

/* CRC-32C (the journal's record check): the check value of the
 * Castagnoli polynomial, both engines, and continuation over pieces. */
static void test_crc32c(void **state)
{
	(void)state;
	const char *nine = "123456789";
	assert_int_equal(dmar_crc32c(0, nine, 9), 0xe3069283u);
	assert_int_equal(dmar_crc32c_table(0, nine, 9), 0xe3069283u);
	assert_int_equal(dmar_crc32c(0, "", 0), 0);
	static uint8_t buf[10007];
	uint64_t s = 42;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)xorshift64(&s);
	uint32_t whole = dmar_crc32c(0, buf, sizeof(buf));
	assert_int_equal(dmar_crc32c_table(0, buf, sizeof(buf)), whole);
	for (size_t cut = 0; cut < sizeof(buf); cut += 1237)
		assert_int_equal(dmar_crc32c(dmar_crc32c(0, buf, cut), buf + cut, sizeof(buf) - cut), whole);
	buf[5000] ^= 1;
	assert_int_not_equal(dmar_crc32c(0, buf, sizeof(buf)), whole);
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

static void ref_sha(const void *buf, size_t len, struct dmar_id *out);

/* The incremental paths (a context, an iovec) against libcrypto called
 * directly: on SHA-NI they are sha256.c's own, and dmar_hash there is the
 * same code, so comparing with it alone could agree on a wrong answer. */
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
		ref_sha(buf, n, &want);
		struct iovec v[64];
		int nv = 0;
		size_t pos = 0;
		while (pos < n) {
			/* Pieces from 0 to ~2 blocks, crossing the 64-byte
			 * block boundary in every way. */
			size_t piece = (size_t)(xorshift64(&s) % (round & 1 ? 130 : 9000));
			if (piece > n - pos)
				piece = n - pos;
			dmar_hash_ctx_update(h, buf + pos, piece);
			if (nv < 63)
				v[nv++] = (struct iovec){ buf + pos, piece };
			else
				v[62].iov_len += piece; /* the rest in the last one */
			pos += piece;
		}
		dmar_hash_ctx_final(h, &got);
		assert_memory_equal(want.b, got.b, DMAR_HASH_SIZE);
		memset(&got, 0, sizeof(got));
		dmar_hash_iov(v, nv, &got);
		assert_memory_equal(want.b, got.b, DMAR_HASH_SIZE);
	}
	/* Every length around the padding boundaries (55, 56, 64, ...). */
	for (size_t n = 0; n < 200; n++) {
		ref_sha(buf, n, &want);
		dmar_hash_ctx_update(h, buf, n / 2);
		dmar_hash_ctx_update(h, buf + n / 2, n - n / 2);
		dmar_hash_ctx_final(h, &got);
		assert_memory_equal(want.b, got.b, DMAR_HASH_SIZE);
		struct iovec v[3] = { { buf, n / 3 }, { buf + n / 3, 0 }, { buf + n / 3, n - n / 3 } };
		memset(&got, 0, sizeof(got));
		dmar_hash_iov(v, 3, &got);
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

/* --- SHA-NI, single and paired, against libcrypto ---------------------- */

static void ref_sha(const void *buf, size_t len, struct dmar_id *out)
{
	unsigned n = 0;
	assert_true(EVP_Digest(buf, len, out->b, &n, EVP_sha256(), NULL));
	assert_int_equal(n, DMAR_HASH_SIZE);
}

static void test_known_answers_batch(void **state)
{
	struct iovec v[4] = {
		{ "", 0 },
		{ "abc", 3 },
		{ MSG_448, strlen(MSG_448) },
		{ "abc", 3 },
	};
	struct dmar_id ids[4], a, b;

	dmar_hash_many(v, 4, ids);
	assert_id_hex(&ids[0], SHA_EMPTY);
	assert_id_hex(&ids[1], SHA_ABC);
	assert_id_hex(&ids[2], SHA_448);
	assert_id_hex(&ids[3], SHA_ABC);
	dmar_hash2("abc", 3, MSG_448, strlen(MSG_448), &a, &b);
	assert_id_hex(&a, SHA_ABC);
	assert_id_hex(&b, SHA_448);
	/* Both lanes empty, and a NULL buffer of length 0. */
	dmar_hash2(NULL, 0, "", 0, &a, &b);
	assert_id_hex(&a, SHA_EMPTY);
	assert_id_hex(&b, SHA_EMPTY);
	/* One message alone in a batch, and none at all. */
	dmar_hash_many(&v[2], 1, ids);
	assert_id_hex(&ids[0], SHA_448);
	memset(ids, 0x5a, sizeof(ids));
	dmar_hash_many(v, 0, ids);
	for (size_t i = 0; i < sizeof(ids); i++)
		assert_int_equal(((uint8_t *)ids)[i], 0x5a);
}

/* Every length 0..300 (one, two and several blocks, each side of the
 * 55/56-byte padding split), alone and paired with every other length in
 * the range, at an odd address. */
static void test_short_lengths(void **state)
{
	enum { MAX = 300 };
	uint8_t *raw = malloc(2 * MAX + 2);
	assert_non_null(raw);
	fill_random(raw, 2 * MAX + 2, 21);
	const uint8_t *a = raw + 1, *b = raw + MAX + 2;
	struct dmar_id want[MAX + 1], wantb[MAX + 1], got, gotb;

	for (size_t n = 0; n <= MAX; n++) {
		ref_sha(a, n, &want[n]);
		ref_sha(b, n, &wantb[n]);
		dmar_hash(a, n, &got);
		assert_memory_equal(got.b, want[n].b, DMAR_HASH_SIZE);
	}
	for (size_t i = 0; i <= MAX; i++) {
		for (size_t j = 0; j <= MAX; j++) {
			dmar_hash2(a, i, b, j, &got, &gotb);
			assert_memory_equal(got.b, want[i].b, DMAR_HASH_SIZE);
			assert_memory_equal(gotb.b, wantb[j].b, DMAR_HASH_SIZE);
		}
	}
	free(raw);
}

/* Long messages of random, unequal lengths up to 1 MiB, in batches of
 * 1..9: the lanes run out at different blocks and take the next message
 * mid-stream. */
static void test_long_batches(void **state)
{
	enum { BIG = 1 << 20, N = 9 };
	uint8_t *buf = malloc(BIG + 64);
	assert_non_null(buf);
	fill_random(buf, BIG + 64, 5);
	uint64_t s = 99;
	for (int round = 0; round < 12; round++) {
		size_t n = (size_t)round % N + 1;
		struct iovec v[N];
		struct dmar_id want[N], got[N];
		for (size_t i = 0; i < n; i++) {
			size_t len = (size_t)(xorshift64(&s) % (BIG + 1));
			/* Now and then a tiny one next to a huge one. */
			if (xorshift64(&s) % 4 == 0)
				len %= 200;
			size_t off = (size_t)(xorshift64(&s) % 64);
			v[i].iov_base = buf + off;
			v[i].iov_len = len < BIG - off ? len : BIG - off;
			ref_sha(v[i].iov_base, v[i].iov_len, &want[i]);
		}
		dmar_hash_many(v, n, got);
		for (size_t i = 0; i < n; i++)
			assert_memory_equal(got[i].b, want[i].b, DMAR_HASH_SIZE);
		struct dmar_id one;
		dmar_hash(v[0].iov_base, v[0].iov_len, &one);
		assert_memory_equal(one.b, want[0].b, DMAR_HASH_SIZE);
	}
	/* The million 'a' paired with a million 'a' less one. */
	memset(buf, 'a', 1000000);
	struct dmar_id x, y, wy;
	dmar_hash2(buf, 1000000, buf, 999999, &x, &y);
	assert_id_hex(&x, SHA_MILLION_A);
	ref_sha(buf, 999999, &wy);
	assert_memory_equal(y.b, wy.b, DMAR_HASH_SIZE);
	free(buf);
}

/* Batches of every size around the sixteen AVX-512 lanes, of lengths
 * that end lanes at different blocks: lanes go idle, refill, and (with
 * SHA-NI) hand their last messages to it. */
static void test_lane_counts(void **state)
{
	enum { N = 41, BIG = 70000 };
	uint8_t *buf = malloc(BIG + 64);
	assert_non_null(buf);
	fill_random(buf, BIG + 64, 17);
	uint64_t s = 1234;
	for (size_t n = 1; n <= N; n++) {
		struct iovec v[N];
		struct dmar_id want[N], got[N];
		for (size_t i = 0; i < n; i++) {
			size_t len;
			switch (xorshift64(&s) % 4) {
			case 0: len = (size_t)(xorshift64(&s) % 130); break;   /* 0-2 blocks with padding */
			case 1: len = 64 * (size_t)(xorshift64(&s) % 40); break; /* block multiples, 0 too */
			default: len = (size_t)(xorshift64(&s) % BIG); break;
			}
			size_t off = (size_t)(xorshift64(&s) % 64);
			v[i].iov_base = buf + off;
			v[i].iov_len = len;
			ref_sha(v[i].iov_base, len, &want[i]);
		}
		memset(got, 0, sizeof(got));
		dmar_hash_many(v, n, got);
		for (size_t i = 0; i < n; i++)
			assert_memory_equal(got[i].b, want[i].b, DMAR_HASH_SIZE);
	}
	free(buf);
}

/* More messages than hash.c sorts on the stack (its list then comes from
 * malloc), many of one length (ties), empty ones too: each id lands where
 * its message was, whatever order the lanes took them in. */
static void test_many_sorted(void **state)
{
	enum { N = 300, BIG = 20000 };
	uint8_t *buf = malloc(BIG + 64);
	assert_non_null(buf);
	fill_random(buf, BIG + 64, 23);
	struct iovec *v = calloc(N, sizeof(*v));
	struct dmar_id *want = calloc(N, sizeof(*want)), *got = calloc(N, sizeof(*got));
	uint32_t *lens = calloc(N, sizeof(*lens));
	assert_non_null(v);
	assert_non_null(want);
	assert_non_null(got);
	assert_non_null(lens);
	uint64_t s = 777;
	for (size_t i = 0; i < N; i++) {
		size_t len = i % 5 == 0 ? 4096 : (size_t)(xorshift64(&s) % BIG);
		if (i % 37 == 0)
			len = 0;
		size_t off = (size_t)(xorshift64(&s) % 64);
		v[i] = (struct iovec){ buf + off, len };
		ref_sha(buf + off, len, &want[i]);
	}
	dmar_hash_many(v, N, got);
	for (size_t i = 0; i < N; i++)
		assert_memory_equal(got[i].b, want[i].b, DMAR_HASH_SIZE);

	/* The same lengths as chunks end to end. */
	size_t total = 0;
	for (size_t i = 0; i < N; i++)
		total += lens[i] = (uint32_t)(v[i].iov_len ? v[i].iov_len : 1);
	uint8_t *base = malloc(total);
	assert_non_null(base);
	fill_random(base, total, 29);
	size_t off = 0;
	for (size_t i = 0; i < N; i++) {
		ref_sha(base + off, lens[i], &want[i]);
		off += lens[i];
	}
	memset(got, 0, N * sizeof(*got));
	dmar_hash_chunks(base, lens, NULL, N, got);
	for (size_t i = 0; i < N; i++)
		assert_memory_equal(got[i].b, want[i].b, DMAR_HASH_SIZE);
	free(base);
	free(lens);
	free(got);
	free(want);
	free(v);
	free(buf);
}

/* A block's chunks end to end, some absent (skipped): those take no bytes
 * and their ids stay as they were. */
static void test_chunks_skip(void **state)
{
	enum { N = 200 };
	uint32_t lens[N];
	uint8_t skip[N];
	struct dmar_id ids[N], want[N];
	uint64_t s = 42;
	size_t total = 0;
	for (int i = 0; i < N; i++) {
		lens[i] = (uint32_t)(xorshift64(&s) % (i < 50 ? 130 : 40000)) + 1;
		skip[i] = xorshift64(&s) % 3 == 0;
		total += lens[i];
	}
	uint8_t *base = malloc(total);
	assert_non_null(base);
	fill_random(base, total, 8);

	memset(ids, 0xa5, sizeof(ids));
	size_t off = 0;
	for (int i = 0; i < N; i++) {
		if (skip[i]) {
			memset(want[i].b, 0xa5, DMAR_HASH_SIZE);
		} else {
			ref_sha(base + off, lens[i], &want[i]);
			off += lens[i];
		}
	}
	dmar_hash_chunks(base, lens, skip, N, ids);
	for (int i = 0; i < N; i++)
		assert_memory_equal(ids[i].b, want[i].b, DMAR_HASH_SIZE);

	/* No skip array: every chunk is in base. */
	off = 0;
	for (int i = 0; i < N; i++) {
		ref_sha(base + off, lens[i], &want[i]);
		off += lens[i];
	}
	dmar_hash_chunks(base, lens, NULL, N, ids);
	for (int i = 0; i < N; i++)
		assert_memory_equal(ids[i].b, want[i].b, DMAR_HASH_SIZE);
	free(base);
}

#if defined(__x86_64__)
/* Does /proc/cpuinfo's flags line name this flag (a whole word)?  -1 when
 * it cannot be read. */
static int cpu_flag(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return -1;
	char line[8192];
	size_t n = strlen(flag);
	int has = 0;
	while (!has && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		for (const char *p = line; !has && (p = strstr(p + 1, flag));)
			has = p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0');
	}
	fclose(f);
	return has;
}
#endif

/* The switch: off always takes, on only where the CPU has SHA-NI. */
static void test_hw_switch(void **state)
{
	bool cpu = dmar_hash_set_hw(true);
	assert_int_equal(dmar_hash_hw(), cpu);
	assert_false(dmar_hash_set_hw(false));
	assert_false(dmar_hash_hw());
	assert_int_equal(dmar_hash_set_hw(true), cpu);
#if defined(__x86_64__)
	/* On x86-64 the answer must be the CPU's own. */
	int sha_ni = cpu_flag("sha_ni");
	if (sha_ni >= 0)
		assert_int_equal(cpu, sha_ni);
#else
	assert_false(cpu);
#endif
}

/* The same for the AVX-512 code: on only where the CPU has F and BW. */
static void test_x16_switch(void **state)
{
	bool cpu = dmar_hash_set_x16(true);
	assert_int_equal(dmar_hash_x16(), cpu);
	assert_false(dmar_hash_set_x16(false));
	assert_false(dmar_hash_x16());
	assert_int_equal(dmar_hash_set_x16(true), cpu);
#if defined(__x86_64__)
	int f512 = cpu_flag("avx512f"), bw512 = cpu_flag("avx512bw");
	if (f512 >= 0)
		assert_int_equal(cpu, f512 && bw512);
#else
	assert_false(cpu);
#endif
}

/* DMAR_HASH_NO_SHANI and DMAR_HASH_NO_AVX512 are read once, at the first
 * hash: try each in fresh copies of this program (see main). */
static int probe(const char *name, const char *env)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		unsetenv("DMAR_HASH_NO_SHANI");
		unsetenv("DMAR_HASH_NO_AVX512");
		unsetenv("DMAR_HASH_NO_LIBCRYPTO");
		if (env)
			setenv(name, env, 1);
		if (!strcmp(name, "DMAR_HASH_NO_LIBCRYPTO")) {
			/* nothing but the portable code */
			setenv("DMAR_HASH_NO_SHANI", "1", 1);
			setenv("DMAR_HASH_NO_AVX512", "1", 1);
		}
		setenv("DMAR_TEST_HASH_PROBE", "1", 1);
		execl("/proc/self/exe", "test_hash", (char *)NULL);
		_exit(127);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The child's answer: 20, plus 1 for SHA-NI on, plus 2 for AVX-512 on. */
static void test_env_off(void **state)
{
	int hw = dmar_hash_set_hw(true) ? 1 : 0;
	int x16 = dmar_hash_set_x16(true) ? 2 : 0;
	assert_int_equal(probe("DMAR_HASH_NO_SHANI", "1"), 20 + x16);
	assert_int_equal(probe("DMAR_HASH_NO_SHANI", NULL), 20 + hw + x16);
	assert_int_equal(probe("DMAR_HASH_NO_SHANI", "0"), 20 + hw + x16);
	assert_int_equal(probe("DMAR_HASH_NO_SHANI", ""), 20 + hw + x16);
	assert_int_equal(probe("DMAR_HASH_NO_AVX512", "1"), 20 + hw);
	assert_int_equal(probe("DMAR_HASH_NO_AVX512", "0"), 20 + hw + x16);
	/* Neither SHA-NI nor libcrypto: the portable code hashes right. */
	assert_int_equal(probe("DMAR_HASH_NO_LIBCRYPTO", "1"), 20);
}

/* The portable code against libcrypto: every length around the padding
 * boundaries, whole and in pieces of every size. */
static void test_portable(void **state)
{
	(void)state;
	uint8_t buf[300], want[32], got[32];
	uint64_t s = 7;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(xorshift64(&s) >> 13);
	for (size_t len = 0; len <= sizeof(buf); len++) {
		unsigned n = 0;
		assert_true(EVP_Digest(buf, len, want, &n, EVP_sha256(), NULL));
		dmar_sha256_sw(buf, len, got);
		assert_memory_equal(got, want, 32);
		for (size_t piece = 1; piece <= 70; piece += 23) {
			struct dmar_sha256_sw c;
			dmar_sha256_sw_init(&c);
			for (size_t at = 0; at < len; at += piece)
				dmar_sha256_sw_update(&c, buf + at, len - at < piece ? len - at : piece);
			dmar_sha256_sw_final(&c, got);
			assert_memory_equal(got, want, 32);
		}
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

/* Four engines for the batch calls: x16 with a SHA-NI tail, SHA-NI
 * alone, x16 alone (as on a CPU with AVX-512 and no SHA-NI), libcrypto. */
static int engine(bool hw, bool x16)
{
	bool h = dmar_hash_set_hw(hw), x = dmar_hash_set_x16(x16);
	if (hw && !h)
		fprintf(stderr, "test_hash: no SHA-NI on this CPU: libcrypto does its part\n");
	if (x16 && !x)
		fprintf(stderr, "test_hash: no AVX-512 on this CPU: the x16 code is not tried\n");
	/* Off always takes. */
	if (!hw)
		assert_false(h);
	if (!x16)
		assert_false(x);
	return 0;
}

static int x16_hw(void **state) { return engine(true, true); }
static int hw_only(void **state) { return engine(true, false); }
static int x16_only(void **state) { return engine(false, true); }
static int hw_off(void **state) { return engine(false, false); }

static int hw_restore(void **state)
{
	dmar_hash_set_hw(true);
	dmar_hash_set_x16(true);
	return 0;
}

/* An optional argument runs only the tests matching it (a glob). */
int main(int argc, char **argv)
{
	if (getenv("DMAR_TEST_HASH_PROBE")) {
		/* test_env_off's child: say what the environment chose, after
		 * checking that choice hashes right. */
		struct dmar_id id;
		dmar_hash("abc", 3, &id);
		char hex[DMAR_HASH_HEX_SIZE];
		dmar_hex(id.b, DMAR_HASH_SIZE, hex);
		if (strcmp(hex, SHA_ABC))
			return 12;
		/* And a batch, which is what the AVX-512 code hashes. */
		struct iovec v[20];
		struct dmar_id ids[20];
		for (int i = 0; i < 20; i++)
			v[i] = (struct iovec){ (void *)MSG_448, strlen(MSG_448) };
		dmar_hash_many(v, 20, ids);
		for (int i = 0; i < 20; i++) {
			dmar_hex(ids[i].b, DMAR_HASH_SIZE, hex);
			if (strcmp(hex, SHA_448))
				return 13;
		}
		/* And a message in pieces. */
		struct dmar_hash_ctx *h = dmar_hash_ctx_new();
		if (!h)
			return 14;
		for (const char *p = MSG_448; *p; p++)
			dmar_hash_ctx_update(h, p, 1);
		dmar_hash_ctx_final(h, &id);
		dmar_hash_ctx_free(h);
		dmar_hex(id.b, DMAR_HASH_SIZE, hex);
		if (strcmp(hex, SHA_448))
			return 15;
		return 20 + (dmar_hash_hw() ? 1 : 0) + (dmar_hash_x16() ? 2 : 0);
	}
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_portable),
		cmocka_unit_test(test_crc32c),
		cmocka_unit_test(test_incremental_known),
		cmocka_unit_test(test_incremental_equals_oneshot),
		cmocka_unit_test(test_known_answers_batch),
		cmocka_unit_test(test_short_lengths),
		cmocka_unit_test(test_long_batches),
		cmocka_unit_test(test_lane_counts),
		cmocka_unit_test(test_chunks_skip),
		cmocka_unit_test(test_many_sorted),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_parse_roundtrip),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_threads),
	};
	const struct CMUnitTest once[] = {
		cmocka_unit_test(test_hw_switch),
		cmocka_unit_test(test_x16_switch),
		cmocka_unit_test(test_env_off),
	};
	int r = cmocka_run_group_tests_name("x16+sha-ni", tests, x16_hw, hw_restore);
	r |= cmocka_run_group_tests_name("sha-ni", tests, hw_only, hw_restore);
	r |= cmocka_run_group_tests_name("x16", tests, x16_only, hw_restore);
	r |= cmocka_run_group_tests_name("libcrypto", tests, hw_off, hw_restore);
	r |= cmocka_run_group_tests_name("switch", once, NULL, NULL);
	return r;
}
