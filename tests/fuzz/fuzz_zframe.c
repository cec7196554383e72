/* SPDX-License-Identifier: MIT */
/*
 * fuzz_zframe - chunk frames (codec/compress.h) and byte grouping
 * (codec/bgroup.h) on arbitrary bytes.
 *
 * The first byte picks the form (its low two bits: plain, width 2, width
 * 4, and one no frame has) and whether the rest is data or a frame:
 *   - data: grouping at either width joins back bit for bit; a frame the
 *     compressor makes in the form decodes back to exactly the data; the
 *     choice of form is one of the forms;
 *   - a frame from outside, its declared length the next 3 bytes (at most
 *     256 KiB): decoding returns an error or at most that many bytes,
 *     never writes past them (ASan), and an unknown form is refused.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "codec/bgroup.h"
#include "codec/compress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_zframe: %s\n", what);
	abort();
}

enum { FRAME_MAX = 256u << 10 };

static const enum dmar_zx forms[4] = { DMAR_ZX_PLAIN, DMAR_ZX_G2, DMAR_ZX_G4, (enum dmar_zx)3 };

static void data_case(struct dmar_zchunk *z, ZSTD_DCtx *d, enum dmar_zx zx, const uint8_t *p, size_t len)
{
	uint8_t *g = malloc(len + 1), *back = malloc(len + 1), *frame = malloc(ZSTD_compressBound(len));
	if (!g || !back || !frame)
		die("out of memory");
	for (unsigned w = 2; w <= DMAR_BGROUP_MAX_WIDTH; w *= 2) {
		dmar_bgroup_split(g, p, len, w);
		dmar_bgroup_join(back, g, len, w);
		if (memcmp(back, p, len) != 0)
			die("grouping did not join back to the data");
	}
	size_t n = dmar_zchunk_compress_as(z, frame, ZSTD_compressBound(len), p, len, zx);
	if (zx == (enum dmar_zx)3 && n)
		die("a frame in a form there is not");
	if (n) {
		if (!dmar_compress_pays(len, n))
			die("kept a frame that does not pay");
		size_t r = dmar_chunk_frame_decode(d, back, len, frame, n, zx, g);
		if (ZSTD_isError(r) || r != len || memcmp(back, p, len) != 0)
			die("a frame did not decode back to its data");
	}
	enum dmar_zx c = dmar_zchunk_choose(z, p, len, (len & 1) != 0);
	if (c != DMAR_ZX_RAW && c != DMAR_ZX_PLAIN && c != DMAR_ZX_G2 && c != DMAR_ZX_G4)
		die("chose a form there is not");
	free(g);
	free(back);
	free(frame);
}

static void frame_case(ZSTD_DCtx *d, enum dmar_zx zx, const uint8_t *p, size_t size)
{
	if (size < 3)
		return;
	size_t len = ((size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16) % (FRAME_MAX + 1);
	/* exactly len bytes each, so ASan sees any write past them */
	uint8_t *dst = malloc(len ? len : 1), *tmp = malloc(len ? len : 1);
	if (!dst || !tmp)
		die("out of memory");
	size_t r = dmar_chunk_frame_decode(d, dst, len, p + 3, size - 3, zx, tmp);
	if (!ZSTD_isError(r) && r > len)
		die("decoded more than the room it had");
	if (zx == (enum dmar_zx)3 && !ZSTD_isError(r))
		die("decoded a form there is not");
	free(dst);
	free(tmp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dmar_zchunk *z;
	static ZSTD_DCtx *d;
	if (!z && dmar_zchunk_new(&z, 1, NULL) < 0)
		die("no compressor");
	if (!d && !(d = ZSTD_createDCtx()))
		die("no decoder");
	if (size < 1)
		return 0;
	enum dmar_zx zx = forms[data[0] & 3];
	if (data[0] & 4)
		frame_case(d, zx, data + 1, size - 1);
	else
		data_case(z, d, zx, data + 1, size - 1);
	return 0;
}
