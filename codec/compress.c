/* SPDX-License-Identifier: MIT */
/*
 * The compress policy and the chunk compressor of compress.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_c_format: magicless frames */
#include <zstd.h>

#include "bytepack.h"
#include "compress.h"

enum { PROBE_S = 256, PROBE_N = 16, PROBE_LEVEL = 1 };
_Static_assert(PROBE_S * PROBE_N == DMAR_COMPRESS_SAMPLED, "samples do not overlap");

bool dmar_compress_probe(ZSTD_CCtx *probe, const void *p, size_t len)
{
	const uint8_t *src = p;
	if (len < DMAR_COMPRESS_MIN)
		return false;
	if (len < DMAR_COMPRESS_SAMPLED)
		return true; /* samples would overlap, repeating bytes that then look compressible */
	uint8_t sample[PROBE_N * PROBE_S], out[PROBE_N * PROBE_S + 512];
	/* The source is often cold (an arena chunk last touched when it
	 * was written): ask for every line of the samples first, so the
	 * misses overlap instead of coming one after another. */
	for (size_t k = 0; k < PROBE_N; k++)
		for (size_t o = 0; o < PROBE_S; o += 64)
			__builtin_prefetch(src + (len - PROBE_S) * k / (PROBE_N - 1) + o);
	for (size_t k = 0; k < PROBE_N; k++)
		memcpy(sample + k * PROBE_S, src + (len - PROBE_S) * k / (PROBE_N - 1), PROBE_S);
	size_t c = ZSTD_compressCCtx(probe, out, sizeof(out), sample, sizeof(sample), PROBE_LEVEL);
	return !ZSTD_isError(c) && c <= sizeof(sample) - sizeof(sample) / 16;
}

int dmar_compress_setup(ZSTD_CCtx *c, int level, struct dmar_bytepack *pack)
{
	if (level < 1)
		level = 1;
	ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
	ZSTD_CCtx_setParameter(c, ZSTD_c_format, ZSTD_f_zstd1_magicless);
	ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0);
	ZSTD_CCtx_setParameter(c, ZSTD_c_dictIDFlag, 0);
	ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
	ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
	if (pack) {
		const ZSTD_CDict *cd = (const ZSTD_CDict *)dmar_bytepack_cdict(pack, level);
		if (!cd || ZSTD_isError(ZSTD_CCtx_refCDict(c, cd)))
			return -ENOMEM;
	}
	return 0;
}

struct dmar_zchunk {
	ZSTD_CCtx *cctx, *probe;
	int level;
	struct dmar_bytepack *pack;
};

int dmar_zchunk_new(struct dmar_zchunk **out, int level, struct dmar_bytepack *pack)
{
	struct dmar_zchunk *z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->level = level;
	z->pack = pack;
	z->cctx = ZSTD_createCCtx();
	z->probe = ZSTD_createCCtx();
	if (!z->cctx || !z->probe || dmar_compress_setup(z->cctx, level, pack) < 0) {
		dmar_zchunk_free(z);
		return -ENOMEM;
	}
	*out = z;
	return 0;
}

void dmar_zchunk_free(struct dmar_zchunk *z)
{
	if (!z)
		return;
	ZSTD_freeCCtx(z->cctx);
	ZSTD_freeCCtx(z->probe);
	free(z);
}

bool dmar_zchunk_probe(struct dmar_zchunk *z, const void *p, size_t len)
{
	return dmar_compress_probe(z->probe, p, len);
}

int dmar_zchunk_level(const struct dmar_zchunk *z)
{
	return z->level;
}

const struct dmar_bytepack *dmar_zchunk_pack(const struct dmar_zchunk *z)
{
	return z->pack;
}

size_t dmar_zchunk_compress(struct dmar_zchunk *z, void *dst, size_t cap, const void *src, size_t len)
{
	/* No room past what pays: zstd gives up there instead of finishing
	 * a frame that would be thrown away. */
	size_t limit = len - len / 32;
	if (limit == 0)
		return 0;
	if (cap > limit - 1)
		cap = limit - 1;
	size_t c = ZSTD_compress2(z->cctx, dst, cap, src, len);
	if (ZSTD_isError(c) || c == 0 || !dmar_compress_pays(len, c))
		return 0;
	return c;
}
