/* SPDX-License-Identifier: MIT */
/*
 * fuzz_roundtrip - encode arbitrary bytes, decode them, demand the same.
 *
 * The first two input bytes choose the options, the rest is the file:
 *   byte 0  bits 0-1  zstd level: 0 (store), 1, 3, 6
 *           bit  2    encoder threads 2 (else 1)
 *           bit  3    decoder threads 2 (else 1)
 *           bit  4    use the built-in byte pack
 *           bit  5    thin: reference data = the first half of the file
 *           bits 6-7  feed in pieces of: all, 1, 7, 4099 bytes
 *   byte 1  bits 0-1  log2 min chunk = 8 + v
 *           bits 2-3  log2 avg chunk = min + v
 *           bits 4-5  log2 max chunk = avg + v
 *           bit  6    metadata (mode, mtime) from the file's first bytes
 *           bit  7    hand the file over with dmar_encoder_feed_map
 *                     (no copy) instead of dmar_encoder_feed
 * Any failure to encode, decode, or reproduce the bytes aborts.
 *
 * Inputs stay under 64 KiB, so every artifact has one block; artifacts of
 * several blocks are the unit tests' job (tests/unit/test_codec.c), as
 * they take ~1000x longer per run.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/bytepack.h"
#include "codec/chunker.h"
#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/format.h"
#include "codec/refset.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, int r, const char *msg)
{
	fprintf(stderr, "fuzz_roundtrip: %s: %d %s\n", what, r, msg ? msg : "");
	abort();
}

static struct dmar_bytepack *pack;

/* The same deterministic samples as fuzz_decode's pack. */
static void setup(void)
{
	enum { N = 400, L = 160 };
	static const char *const words[] = {
		"chunk", "arena", "node", "file", "memory", "remote", "copy", "bytes", "hash",
		"recipe", "block", "pack", "mount", "the", "of", "and", "a", "to", "is", "in",
	};
	static uint8_t samples[N * L];
	size_t sizes[N];
	uint64_t s = 0x70ac;
	size_t i = 0;
	struct dmar_error err = { 0 };

	if (pack)
		return;
	while (i < sizeof(samples)) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		const char *w = words[s % (sizeof(words) / sizeof(*words))];
		while (*w && i < sizeof(samples))
			samples[i++] = (uint8_t)*w++;
		if (i < sizeof(samples))
			samples[i++] = (s >> 32) % 9 == 0 ? '\n' : ' ';
	}
	for (int k = 0; k < N; k++)
		sizes[k] = L;
	if (dmar_bytepack_train(samples, sizes, N, 2048, 1, &pack, &err) < 0)
		die("train", err.code, err.msg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	setup();
	return 0;
}

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static int buf_write(void *ctx, const void *src, size_t len)
{
	struct buf *b = ctx;
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, len);
	b->len += len;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int levels[] = { 0, 1, 3, 6 };
	static const size_t pieces[] = { 0, 1, 7, 4099 };
	struct dmar_encoder_opts o = { 0 };
	struct dmar_refset *rs = NULL;
	struct dmar_encoder *e;
	struct dmar_encode_stats es;
	struct dmar_decode_stats ds;
	struct dmar_error err = { 0 };
	struct buf art = { 0 }, out = { 0 };
	int r;

	setup();
	if (size < 2)
		return 0;
	uint8_t c0 = data[0], c1 = data[1];
	const uint8_t *in = data + 2;
	size_t len = size - 2;

	o.level = levels[c0 & 3];
	o.threads = c0 & 4 ? 2 : 1;
	o.pack = c0 & 0x10 ? pack : NULL;
	size_t piece = pieces[c0 >> 6];
	unsigned lmin = 8 + (c1 & 3);
	unsigned lavg = lmin + ((c1 >> 2) & 3);
	unsigned lmax = lavg + ((c1 >> 4) & 3);
	if (c1 & 0x40) {
		o.meta.valid = true;
		o.meta.mode = len >= 4 ? dmar_get_le32(in) : 0100644;
		o.meta.mtime_sec = len >= 12 ? (int64_t)dmar_get_le64(in + 4) : 0;
		o.meta.mtime_nsec = (uint32_t)(len * 7919) % 1000000000u;
	}
	if (dmar_chunker_init_log2(&o.chunker, lmin, lavg, lmax) < 0)
		die("chunker", -EINVAL, NULL);

	if (c0 & 0x20) {
		r = dmar_refset_new(&rs, &o.chunker);
		if (r < 0)
			die("refset_new", r, NULL);
		r = dmar_refset_add_mem(rs, in, len / 2, 1, &err);
		if (r < 0)
			die("refset_add_mem", r, err.msg);
		o.ref = rs;
	}

	r = dmar_encoder_new(&e, &o, buf_write, &art, &err);
	if (r < 0)
		die("encoder_new", r, err.msg);
	size_t pos = 0;
	if (c1 & 0x80) {
		/* The mapped bytes must stay valid until the encoder is freed. */
		r = dmar_encoder_feed_map(e, in, len);
		pos = len;
	}
	while (r == 0 && pos < len) {
		size_t n = piece && piece < len - pos ? piece : len - pos;
		r = dmar_encoder_feed(e, in + pos, n);
		pos += n;
	}
	if (r == 0)
		r = dmar_encoder_finish(e, &es);
	dmar_encoder_free(e);
	if (r < 0)
		die("encode", r, err.msg);

	struct dmar_decoder_opts d = {
		.pack = o.pack,
		.ref = rs,
		.threads = c0 & 8 ? 2 : 1,
	};
	r = dmar_decode_mem(&d, art.p, art.len, buf_write, &out, &ds, &err);
	if (r < 0)
		die("decode", r, err.msg);
	if (out.len != len || (len && memcmp(out.p, in, len)))
		die("decoded bytes differ from the input", 0, NULL);
	if (es.logical != len || ds.logical != len || es.stored != art.len ||
	    ds.stored != art.len || es.chunks != ds.chunks || es.blocks != ds.blocks ||
	    es.absent_chunks != ds.absent_chunks || es.absent_bytes != ds.absent_bytes ||
	    (len > 0) != (es.chunks > 0) || memcmp(es.file_id.b, ds.file_id.b, DMAR_ID_SIZE))
		die("encoder and decoder stats disagree", 0, NULL);
	if (o.level == 0 && es.raw_blocks != es.blocks)
		die("level 0 compressed a block", 0, NULL);
	if (!rs && es.absent_chunks)
		die("chunks absent without reference data", 0, NULL);
	if (rs && len >= 2 * o.chunker.max + 2 && !es.absent_chunks)
		die("no chunk of the reference half left out", 0, NULL);

	free(art.p);
	free(out.p);
	dmar_refset_free(rs);
	return 0;
}
