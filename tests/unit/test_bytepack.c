/* SPDX-License-Identifier: MIT */
/*
 * test_bytepack - mining, saving and loading byte packs (codec/bytepack.h).
 *
 * One pack is mined in the group setup from 2000 JSON-like records made by
 * a fixed-seed PRNG and shared by the tests (mining is the slow part).
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
#include <unistd.h>

#include <cmocka.h>

#include "prng.h"
#include <zstd.h>

#include "codec/bytepack.h"
#include "codec/format.h"
#include "codec/hash.h"

#define NSAMPLES 2000
#define DICT_CAP (16u << 10)

static const char *const words[] = {
	"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
	"india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
};

/* One record like {"id":123,"name":"kilo_papa","email":...}; returns its length. */
static size_t make_record(char *out, size_t cap, uint64_t *s)
{
	unsigned id = (unsigned)(xorshift64(s) % 100000);
	const char *w1 = words[xorshift64(s) % 16];
	const char *w2 = words[xorshift64(s) % 16];
	const char *t1 = words[xorshift64(s) % 16];
	unsigned score = (unsigned)(xorshift64(s) % 1000);
	int n = snprintf(out, cap,
			 "{\"id\":%u,\"name\":\"%s_%s\",\"email\":\"%s.%s@example.com\","
			 "\"tags\":[\"%s\",\"%s\"],\"active\":%s,\"score\":%u.%u}\n",
			 id, w1, w2, w1, w2, t1, w2, (id & 1) ? "true" : "false", score / 10,
			 score % 10);
	assert_true(n > 0 && (size_t)n < cap);
	return (size_t)n;
}

struct samples {
	char *buf;
	size_t *sizes;
	unsigned n;
	size_t total;
};

static void make_samples(struct samples *sm, unsigned n, uint64_t seed)
{
	uint64_t s = seed;
	sm->buf = malloc((size_t)n * 256);
	sm->sizes = malloc(n * sizeof(*sm->sizes));
	assert_non_null(sm->buf);
	assert_non_null(sm->sizes);
	sm->n = n;
	sm->total = 0;
	for (unsigned i = 0; i < n; i++) {
		sm->sizes[i] = make_record(sm->buf + sm->total, 256, &s);
		sm->total += sm->sizes[i];
	}
}

static void free_samples(struct samples *sm)
{
	free(sm->buf);
	free(sm->sizes);
}

struct fixture {
	struct samples sm;
	struct dmar_bytepack *pack;
	uint8_t *img; /* serialized pack */
	size_t img_len;
};

static int group_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct dmar_error err = { 0 };
	if (!f)
		return -1;
	make_samples(&f->sm, NSAMPLES, 0x5eed);
	if (dmar_bytepack_train(f->sm.buf, f->sm.sizes, f->sm.n, DICT_CAP, 1, &f->pack, &err) < 0) {
		print_error("train: %s\n", err.msg);
		return -1;
	}
	if (dmar_bytepack_serialize(f->pack, &f->img, &f->img_len) < 0)
		return -1;
	*state = f;
	return 0;
}

static int group_teardown(void **state)
{
	struct fixture *f = *state;
	if (!f)
		return 0;
	dmar_bytepack_free(f->pack);
	free(f->img);
	free_samples(&f->sm);
	free(f);
	return 0;
}

/* --- train, serialize, load --------------------------------------------- */

static void test_train_basic(void **state)
{
	struct fixture *f = *state;
	size_t dlen;
	const uint8_t *dict = dmar_bytepack_dict(f->pack, &dlen);

	assert_non_null(dict);
	assert_true(dlen > 0 && dlen <= DICT_CAP);
	assert_true(dmar_bytepack_id(f->pack) != 0);
	/* The id is the first 8 bytes of SHA-256(dict), little-endian. */
	struct dmar_id sha;
	dmar_hash(dict, dlen, &sha);
	assert_int_equal(dmar_bytepack_id(f->pack), dmar_get_le64(sha.b));
	/* A trained (not raw-content) dictionary has a zstd id. */
	assert_int_equal(dmar_bytepack_zstd_id(f->pack), ZSTD_getDictID_fromDict(dict, dlen));
	print_message("  dict %zu bytes, id %016llx, zstd id %08x\n", dlen,
		      (unsigned long long)dmar_bytepack_id(f->pack), dmar_bytepack_zstd_id(f->pack));
}

static void test_train_deterministic(void **state)
{
	struct fixture *f = *state;
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };

	assert_int_equal(dmar_bytepack_train(f->sm.buf, f->sm.sizes, f->sm.n, DICT_CAP, 1, &p, &err), 0);
	assert_int_equal(dmar_bytepack_id(p), dmar_bytepack_id(f->pack));
	dmar_bytepack_free(p);
	dmar_bytepack_free(NULL);
}

static void test_serialize_layout(void **state)
{
	struct fixture *f = *state;
	size_t dlen;
	const uint8_t *dict = dmar_bytepack_dict(f->pack, &dlen);
	const uint8_t *b = f->img;

	assert_int_equal(f->img_len, DMAR_BYTEPACK_HDR_SIZE + dlen);
	assert_memory_equal(b, DMAR_BYTEPACK_MAGIC, 4);
	assert_int_equal(b[4], DMAR_BYTEPACK_VERSION);
	assert_int_equal(b[5] | b[6] | b[7], 0);
	assert_int_equal(dmar_get_le32(b + 8), dlen);
	assert_int_equal(dmar_get_le32(b + 12), dmar_bytepack_zstd_id(f->pack));
	struct dmar_id sha;
	dmar_hash(dict, dlen, &sha);
	assert_memory_equal(b + 16, sha.b, 32);
	assert_memory_equal(b + DMAR_BYTEPACK_HDR_SIZE, dict, dlen);
}

static void test_load_roundtrip(void **state)
{
	struct fixture *f = *state;
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };

	/* load copies: the image may go away right after. */
	uint8_t *copy = malloc(f->img_len);
	assert_non_null(copy);
	memcpy(copy, f->img, f->img_len);
	assert_int_equal(dmar_bytepack_load(copy, f->img_len, &p, &err), 0);
	memset(copy, 0, f->img_len);
	free(copy);
	assert_int_equal(err.code, 0);

	assert_int_equal(dmar_bytepack_id(p), dmar_bytepack_id(f->pack));
	assert_int_equal(dmar_bytepack_zstd_id(p), dmar_bytepack_zstd_id(f->pack));
	size_t l1, l2;
	const void *d1 = dmar_bytepack_dict(p, &l1);
	const void *d2 = dmar_bytepack_dict(f->pack, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(d1, d2, l1);

	/* Serializing the loaded pack gives the same image. */
	uint8_t *img;
	size_t len;
	assert_int_equal(dmar_bytepack_serialize(p, &img, &len), 0);
	assert_int_equal(len, f->img_len);
	assert_memory_equal(img, f->img, len);
	free(img);
	dmar_bytepack_free(p);
}

static void test_load_file(void **state)
{
	struct fixture *f = *state;
	char path[] = "/tmp/test_bytepack.XXXXXX";
	int fd = mkstemp(path);
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };

	assert_true(fd >= 0);
	assert_int_equal(write(fd, f->img, f->img_len), (ssize_t)f->img_len);
	close(fd);
	assert_int_equal(dmar_bytepack_load_file(path, &p, &err), 0);
	assert_int_equal(dmar_bytepack_id(p), dmar_bytepack_id(f->pack));
	dmar_bytepack_free(p);

	/* Truncated file: an error naming the path. */
	assert_int_equal(truncate(path, (off_t)f->img_len - 1), 0);
	p = NULL;
	assert_int_equal(dmar_bytepack_load_file(path, &p, &err), -EBADMSG);
	assert_null(p);
	assert_non_null(strstr(err.msg, path));
	unlink(path);

	/* Missing file. */
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_bytepack_load_file(path, &p, &err), -ENOENT);
	assert_null(p);
	assert_true(err.msg[0] != '\0');

	/* A directory is not a pack. */
	memset(&err, 0, sizeof(err));
	assert_true(dmar_bytepack_load_file("/tmp", &p, &err) < 0);
	assert_null(p);
	assert_true(err.msg[0] != '\0');
}

/* The pack compresses records it has never seen better than plain zstd. */
static void test_dict_helps(void **state)
{
	struct fixture *f = *state;
	struct samples fresh;
	make_samples(&fresh, 50, 0xabcdef);

	const ZSTD_CDict *cd = (const ZSTD_CDict *)dmar_bytepack_cdict(f->pack, 3);
	const ZSTD_DDict *dd = (const ZSTD_DDict *)dmar_bytepack_ddict(f->pack);
	assert_non_null(cd);
	assert_non_null(dd);
	/* Cached: the same object the second time. */
	assert_ptr_equal(cd, dmar_bytepack_cdict(f->pack, 3));
	assert_ptr_equal(dd, dmar_bytepack_ddict(f->pack));
	/* Out-of-range levels are clamped, not a crash. */
	assert_non_null(dmar_bytepack_cdict(f->pack, 0));
	assert_non_null(dmar_bytepack_cdict(f->pack, 99));

	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	size_t plain = 0, with = 0, pos = 0;
	uint8_t out[1024], back[1024];
	for (unsigned i = 0; i < fresh.n; i++) {
		const char *rec = fresh.buf + pos;
		size_t n = fresh.sizes[i];
		size_t a = ZSTD_compressCCtx(cc, out, sizeof(out), rec, n, 3);
		assert_false(ZSTD_isError(a));
		plain += a;
		size_t b = ZSTD_compress_usingCDict(cc, out, sizeof(out), rec, n, cd);
		assert_false(ZSTD_isError(b));
		with += b;
		size_t d = ZSTD_decompress_usingDDict(dc, back, sizeof(back), out, b, dd);
		assert_int_equal(d, n);
		assert_memory_equal(back, rec, n);
		pos += n;
	}
	print_message("  50 fresh records: %zu bytes plain, %zu with the pack\n", plain, with);
	assert_true(with * 2 < plain);
	ZSTD_freeCCtx(cc);
	ZSTD_freeDCtx(dc);
	free_samples(&fresh);
}

/* cdict/ddict are built on first use from several threads at once. */
struct cache_arg {
	struct dmar_bytepack *p;
	const void *cd, *dd;
};

static void *cache_thread(void *v)
{
	struct cache_arg *a = v;
	a->dd = dmar_bytepack_ddict(a->p);
	a->cd = dmar_bytepack_cdict(a->p, 5);
	return NULL;
}

static void test_cache_threads(void **state)
{
	struct fixture *f = *state;
	struct dmar_bytepack *p = NULL;
	assert_int_equal(dmar_bytepack_load(f->img, f->img_len, &p, NULL), 0);
	struct cache_arg a[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		a[i].p = p;
		assert_int_equal(pthread_create(&t[i], NULL, cache_thread, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	for (int i = 0; i < 4; i++) {
		assert_non_null(a[i].cd);
		assert_non_null(a[i].dd);
		assert_ptr_equal(a[i].cd, a[0].cd);
		assert_ptr_equal(a[i].dd, a[0].dd);
	}
	dmar_bytepack_free(p);
}

/* --- load rejects ------------------------------------------------------- */

/*
 * bytepack.h says load "rejects bad magic, version, sizes and checksum with
 * -EBADMSG / -EINVAL".  The codes asserted here follow the decoder's
 * convention (decoder.h), which bytepack.c also follows: corrupt or
 * truncated -EBADMSG, unsupported version -EPROTO.
 */
static void expect_load_fail(const uint8_t *buf, size_t len, int code, const char *what)
{
	struct dmar_bytepack *p = (struct dmar_bytepack *)(uintptr_t)0x1;
	struct dmar_error err = { 0 };
	int r = dmar_bytepack_load(buf, len, &p, &err);
	if (r != code)
		print_error("%s: got %d (%s), want %d\n", what, r, err.msg, code);
	assert_int_equal(r, code);
	assert_int_equal(err.code, code);
	assert_true(err.msg[0] != '\0');
	/* Out-params are written only on success. */
	assert_ptr_equal(p, (void *)(uintptr_t)0x1);
	/* And no struct dmar_error is fine too. */
	assert_int_equal(dmar_bytepack_load(buf, len, &p, NULL), code);
}

static uint8_t *dup_img(const struct fixture *f)
{
	uint8_t *b = malloc(f->img_len + 16);
	assert_non_null(b);
	memcpy(b, f->img, f->img_len);
	memset(b + f->img_len, 0, 16);
	return b;
}

static void test_load_bad_magic(void **state)
{
	struct fixture *f = *state;
	uint8_t *b = dup_img(f);
	for (int i = 0; i < 4; i++) {
		memcpy(b, f->img, 4);
		b[i] ^= 0x20;
		expect_load_fail(b, f->img_len, -EBADMSG, "bad magic");
	}
	/* An artifact is not a pack. */
	memcpy(b, "DMAR", 4);
	expect_load_fail(b, f->img_len, -EBADMSG, "artifact magic");
	free(b);
}

static void test_load_bad_version(void **state)
{
	struct fixture *f = *state;
	uint8_t *b = dup_img(f);
	static const uint8_t vers[] = { 0, 2, 9, 0xff };
	for (size_t i = 0; i < sizeof(vers); i++) {
		b[4] = vers[i];
		expect_load_fail(b, f->img_len, -EPROTO, "wrong version");
	}
	free(b);
}

static void test_load_reserved(void **state)
{
	struct fixture *f = *state;
	uint8_t *b = dup_img(f);
	for (int i = 5; i < 8; i++) {
		memcpy(b, f->img, DMAR_BYTEPACK_HDR_SIZE);
		b[i] = 1;
		expect_load_fail(b, f->img_len, -EBADMSG, "reserved byte");
	}
	free(b);
}

static void test_load_truncated(void **state)
{
	struct fixture *f = *state;
	/* Every header length, then every dictionary length. */
	for (size_t n = 0; n < DMAR_BYTEPACK_HDR_SIZE; n++)
		expect_load_fail(f->img, n, -EBADMSG, "truncated header");
	for (size_t n = DMAR_BYTEPACK_HDR_SIZE; n < f->img_len; n += 97)
		expect_load_fail(f->img, n, -EBADMSG, "truncated dict");
	expect_load_fail(f->img, f->img_len - 1, -EBADMSG, "truncated dict");
	/* NULL with length 0. */
	expect_load_fail(NULL, 0, -EBADMSG, "empty");
}

static void test_load_bad_lengths(void **state)
{
	struct fixture *f = *state;
	uint8_t *b = dup_img(f);
	size_t dlen = f->img_len - DMAR_BYTEPACK_HDR_SIZE;

	/* Zero, over the limit, larger than the buffer, huge. */
	dmar_put_le32(b + 8, 0);
	expect_load_fail(b, f->img_len, -EBADMSG, "length 0");
	dmar_put_le32(b + 8, DMAR_BYTEPACK_MAX + 1);
	expect_load_fail(b, f->img_len, -EBADMSG, "length over max");
	dmar_put_le32(b + 8, (uint32_t)dlen + 1);
	expect_load_fail(b, f->img_len, -EBADMSG, "length past end");
	dmar_put_le32(b + 8, UINT32_MAX);
	expect_load_fail(b, f->img_len, -EBADMSG, "length 2^32-1");
	dmar_put_le32(b + 8, 0x80000000u);
	expect_load_fail(b, f->img_len, -EBADMSG, "length 2^31");
	/* Shorter than the data: trailing bytes. */
	dmar_put_le32(b + 8, (uint32_t)dlen - 1);
	expect_load_fail(b, f->img_len, -EBADMSG, "length short of the data");
	/* Right length, one trailing byte. */
	dmar_put_le32(b + 8, (uint32_t)dlen);
	expect_load_fail(b, f->img_len + 1, -EBADMSG, "trailing byte");
	free(b);
}

static void test_load_checksum(void **state)
{
	struct fixture *f = *state;
	uint8_t *b = dup_img(f);
	/* Flip one dictionary byte in several places, and one hash byte. */
	for (size_t off = DMAR_BYTEPACK_HDR_SIZE; off < f->img_len; off += 1021) {
		memcpy(b, f->img, f->img_len);
		b[off] ^= 0x01;
		expect_load_fail(b, f->img_len, -EBADMSG, "dict byte flipped");
	}
	memcpy(b, f->img, f->img_len);
	b[f->img_len - 1] ^= 0x80;
	expect_load_fail(b, f->img_len, -EBADMSG, "last dict byte flipped");
	for (int off = 16; off < 48; off += 5) {
		memcpy(b, f->img, f->img_len);
		b[off] ^= 0x10;
		expect_load_fail(b, f->img_len, -EBADMSG, "hash byte flipped");
	}
	/* A wrong zstd dictionary id field. */
	memcpy(b, f->img, f->img_len);
	b[12] ^= 0x01;
	expect_load_fail(b, f->img_len, -EBADMSG, "zstd id field");
	free(b);
}

/* Every single-byte change of the header is rejected. */
static void test_load_header_flips(void **state)
{
	struct fixture *f = *state;
	uint8_t *b = dup_img(f);
	for (int off = 0; off < DMAR_BYTEPACK_HDR_SIZE; off++) {
		for (int bit = 0; bit < 8; bit++) {
			memcpy(b, f->img, f->img_len);
			b[off] ^= (uint8_t)(1u << bit);
			struct dmar_bytepack *p = NULL;
			struct dmar_error err = { 0 };
			int r = dmar_bytepack_load(b, f->img_len, &p, &err);
			assert_true(r == -EBADMSG || r == -EPROTO);
			assert_null(p);
			assert_true(err.msg[0] != '\0');
		}
	}
	free(b);
}

/* A raw-content dictionary (no zstd dict magic) is a valid pack too. */
static void test_load_raw_content(void **state)
{
	uint8_t b[DMAR_BYTEPACK_HDR_SIZE + 1000];
	struct dmar_id sha;
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };

	memset(b, 0, sizeof(b));
	memcpy(b, DMAR_BYTEPACK_MAGIC, 4);
	b[4] = DMAR_BYTEPACK_VERSION;
	dmar_put_le32(b + 8, 1000);
	for (int i = 0; i < 1000; i++)
		b[DMAR_BYTEPACK_HDR_SIZE + i] = (uint8_t)("some raw content "[i % 17]);
	dmar_hash(b + DMAR_BYTEPACK_HDR_SIZE, 1000, &sha);
	memcpy(b + 16, sha.b, 32);
	assert_int_equal(dmar_bytepack_load(b, sizeof(b), &p, &err), 0);
	assert_int_equal(dmar_bytepack_zstd_id(p), 0);
	assert_int_equal(dmar_bytepack_id(p), dmar_get_le64(sha.b));
	assert_non_null(dmar_bytepack_ddict(p));
	assert_non_null(dmar_bytepack_cdict(p, 3));
	dmar_bytepack_free(p);
}

/* --- train rejects ------------------------------------------------------ */

static void expect_train_fail(const void *samples, const size_t *sizes, unsigned n, size_t cap,
			      const char *what)
{
	struct dmar_bytepack *p = (struct dmar_bytepack *)(uintptr_t)0x1;
	struct dmar_error err = { 0 };
	int r = dmar_bytepack_train(samples, sizes, n, cap, 1, &p, &err);
	if (r != -EINVAL) {
		print_error("%s: got %d (%s), want -EINVAL\n", what, r, err.msg);
		if (r == 0)
			dmar_bytepack_free(p);
	}
	assert_int_equal(r, -EINVAL);
	assert_int_equal(err.code, -EINVAL);
	assert_true(err.msg[0] != '\0');
	assert_ptr_equal(p, (void *)(uintptr_t)0x1);
}

static void test_train_too_few(void **state)
{
	struct fixture *f = *state;
	expect_train_fail(f->sm.buf, f->sm.sizes, 0, DICT_CAP, "no samples");
	expect_train_fail(f->sm.buf, f->sm.sizes, 1, DICT_CAP, "one sample");
	expect_train_fail(f->sm.buf, f->sm.sizes, 5, DICT_CAP, "five samples");
}

/*
 * Enough samples by count, but far too little data for a dictionary:
 * bytepack.h promises -EINVAL for "too small samples".
 */
static void test_train_too_little_data(void **state)
{
	static const char tiny[16] = "abcdefghabcdefgh";
	size_t sizes[16];
	/* Sizes of zero. */
	for (int i = 0; i < 16; i++)
		sizes[i] = 0;
	expect_train_fail(tiny, sizes, 16, DICT_CAP, "16 empty samples");
	/* 16 bytes in all. */
	for (int i = 0; i < 16; i++)
		sizes[i] = 1;
	expect_train_fail(tiny, sizes, 16, DICT_CAP, "16 one-byte samples");
	/* The message says how much is needed. */
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_bytepack_train(tiny, sizes, 16, DICT_CAP, 1, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "4 KiB"));
	assert_null(p);
}

/* The limit is on the total, 4 KiB: one byte short is refused, whatever
 * the count and the cap. */
static void test_train_total_limit(void **state)
{
	struct fixture *f = *state;
	size_t sizes[64];
	size_t total = 0;
	unsigned n = 0;
	while (total + 200 < 4095) {
		sizes[n++] = 200;
		total += 200;
	}
	sizes[n++] = 4095 - total;
	assert_true(f->sm.total >= 4095);
	expect_train_fail(f->sm.buf, sizes, n, DICT_CAP, "4095 bytes in 200-byte samples");
	expect_train_fail(f->sm.buf, sizes, n, 256, "4095 bytes, smallest cap");
	for (unsigned i = 0; i < 8; i++)
		sizes[i] = i < 7 ? 1 : 4088;
	expect_train_fail(f->sm.buf, sizes, 8, DICT_CAP, "8 samples, 4095 bytes");
}

static void test_train_bad_cap(void **state)
{
	struct fixture *f = *state;
	expect_train_fail(f->sm.buf, f->sm.sizes, f->sm.n, 0, "cap 0");
	expect_train_fail(f->sm.buf, f->sm.sizes, f->sm.n, 100, "cap 100");
	expect_train_fail(f->sm.buf, f->sm.sizes, f->sm.n, (size_t)DMAR_BYTEPACK_MAX + 1,
			  "cap over max");
}

static void test_train_threads(void **state)
{
	struct fixture *f = *state;
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };
	/* A smaller set, mined with 2 threads: a valid, loadable pack. */
	assert_int_equal(dmar_bytepack_train(f->sm.buf, f->sm.sizes, 500, 4096, 2, &p, &err), 0);
	size_t dlen;
	dmar_bytepack_dict(p, &dlen);
	assert_true(dlen > 0 && dlen <= 4096);
	uint8_t *img;
	size_t len;
	assert_int_equal(dmar_bytepack_serialize(p, &img, &len), 0);
	struct dmar_bytepack *q = NULL;
	assert_int_equal(dmar_bytepack_load(img, len, &q, &err), 0);
	assert_int_equal(dmar_bytepack_id(p), dmar_bytepack_id(q));
	free(img);
	dmar_bytepack_free(q);
	dmar_bytepack_free(p);
}

/* An optional argument runs only the tests matching it (a glob). */
int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_train_basic),
		cmocka_unit_test(test_train_deterministic),
		cmocka_unit_test(test_serialize_layout),
		cmocka_unit_test(test_load_roundtrip),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_dict_helps),
		cmocka_unit_test(test_cache_threads),
		cmocka_unit_test(test_load_bad_magic),
		cmocka_unit_test(test_load_bad_version),
		cmocka_unit_test(test_load_reserved),
		cmocka_unit_test(test_load_truncated),
		cmocka_unit_test(test_load_bad_lengths),
		cmocka_unit_test(test_load_checksum),
		cmocka_unit_test(test_load_header_flips),
		cmocka_unit_test(test_load_raw_content),
		cmocka_unit_test(test_train_too_few),
		cmocka_unit_test(test_train_too_little_data),
		cmocka_unit_test(test_train_total_limit),
		cmocka_unit_test(test_train_bad_cap),
		cmocka_unit_test(test_train_threads),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
