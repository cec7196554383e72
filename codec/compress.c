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
#include <zstd_errors.h>

#include "bgroup.h"
#include "bytepack.h"
#include "compress.h"

enum { PROBE_S = 256, PROBE_N = 16, PROBE_LEVEL = 1 };
_Static_assert(PROBE_S * PROBE_N == DMAR_COMPRESS_SAMPLED, "samples do not overlap");

/* The probe's samples of len (>= DMAR_COMPRESS_SAMPLED) bytes: PROBE_N
 * pieces spread over them, each starting at a multiple of 4 from the
 * first byte, so that the samples laid end to end keep the values of a
 * float tensor whole for the grouped probes. */
static void sample_take(uint8_t *sample, const uint8_t *src, size_t len)
{
	/* The source is often cold (an arena chunk last touched when it
	 * was written): ask for every line of the samples first, so the
	 * misses overlap instead of coming one after another. */
	for (size_t k = 0; k < PROBE_N; k++)
		for (size_t o = 0; o < PROBE_S; o += 64)
			__builtin_prefetch(src + ((len - PROBE_S) * k / (PROBE_N - 1) & ~(size_t)3) + o);
	for (size_t k = 0; k < PROBE_N; k++)
		memcpy(sample + k * PROBE_S, src + ((len - PROBE_S) * k / (PROBE_N - 1) & ~(size_t)3), PROBE_S);
}

/* One zstd frame over src, len bytes, as n planes each in zstd blocks of
 * its own (one block mixing the planes would get one entropy table for
 * both, which loses most of what grouping gains).  c's parameters are
 * the caller's.  The frame's length, or a zstd error code. */
static size_t planes_compress(ZSTD_CCtx *c, void *dst, size_t cap, const uint8_t *src, size_t len, unsigned n)
{
	ZSTD_CCtx_reset(c, ZSTD_reset_session_only);
	ZSTD_outBuffer out = { dst, cap, 0 };
	size_t plane = len / n;
	for (unsigned k = 0; k < n; k++) {
		/* the last plane takes the bytes past the whole values */
		ZSTD_inBuffer in = { src + k * plane, k + 1 < n ? plane : len - k * plane, 0 };
		ZSTD_EndDirective end = k + 1 < n ? ZSTD_e_flush : ZSTD_e_end;
		size_t r;
		do {
			r = ZSTD_compressStream2(c, &out, &in, end);
			if (ZSTD_isError(r))
				return r;
			if (r && out.pos == out.size)
				return (size_t)-ZSTD_error_dstSize_tooSmall;
		} while (r);
	}
	return out.pos;
}

/* The probe over the forms asked for: plain, the grouped ones, or both
 * (compress.h, dmar_compress_choose). */
static enum dmar_zx probe_forms(ZSTD_CCtx *probe, const void *p, size_t len, bool plain, bool grouped)
{
	enum { S = PROBE_N * PROBE_S };
	if (len < DMAR_COMPRESS_MIN)
		return DMAR_ZX_RAW;
	if (len < DMAR_COMPRESS_SAMPLED)
		/* samples would overlap, repeating bytes that then look
		 * compressible; and too few values for grouping to show */
		return plain ? DMAR_ZX_PLAIN : DMAR_ZX_RAW;
	uint8_t sample[S], planes[S], out[S + 512];
	sample_take(sample, p, len);
	size_t best = S - S / 16 + 1;
	enum dmar_zx zx = DMAR_ZX_RAW;
	ZSTD_CCtx_reset(probe, ZSTD_reset_session_and_parameters);
	ZSTD_CCtx_setParameter(probe, ZSTD_c_compressionLevel, PROBE_LEVEL);
	if (plain) {
		size_t c = ZSTD_compress2(probe, out, sizeof(out), sample, S);
		if (!ZSTD_isError(c) && c < best) {
			if (!grouped || c <= S - S / 3)
				return DMAR_ZX_PLAIN;
			best = c - S / 32; /* what a grouped form must beat */
			zx = DMAR_ZX_PLAIN;
		}
	}
	for (unsigned w = 2; grouped && w <= DMAR_BGROUP_MAX_WIDTH; w *= 2) {
		dmar_bgroup_split(planes, sample, S, w);
		size_t c = planes_compress(probe, out, sizeof(out), planes, S, w);
		if (!ZSTD_isError(c) && c < best) {
			best = c;
			zx = (enum dmar_zx)w;
		}
	}
	return zx;
}

bool dmar_compress_probe(ZSTD_CCtx *probe, const void *p, size_t len)
{
	return probe_forms(probe, p, len, true, false) == DMAR_ZX_PLAIN;
}

enum dmar_zx dmar_compress_choose(ZSTD_CCtx *probe, const void *p, size_t len, bool grouped_only)
{
	return probe_forms(probe, p, len, !grouped_only, true);
}

size_t dmar_chunk_frame_decode(ZSTD_DCtx *dctx, void *dst, size_t len, const void *src, size_t stored,
			       enum dmar_zx zx, void *tmp)
{
	ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters);
	ZSTD_DCtx_setParameter(dctx, ZSTD_d_format, ZSTD_f_zstd1_magicless);
	if (zx == DMAR_ZX_PLAIN)
		return ZSTD_decompressDCtx(dctx, dst, len, src, stored);
	if (zx != DMAR_ZX_G2 && zx != DMAR_ZX_G4)
		return (size_t)-ZSTD_error_parameter_unsupported;
	size_t r = ZSTD_decompressDCtx(dctx, tmp, len, src, stored);
	if (!ZSTD_isError(r))
		dmar_bgroup_join(dst, tmp, r, (unsigned)zx);
	return r;
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

/* Moving averages over about the last 4 batches: a few bad samples (a
 * stall, a burst of other traffic) do not flip the choice, a lasting
 * change does within a few batches. */
static double ewma(double old, double x)
{
	return old > 0 ? old + (x - old) / 4 : x;
}

void dmar_zmeter_sent(struct dmar_zmeter *m, uint64_t wire, double seconds)
{
	if (wire && seconds > 0)
		m->send_bps = ewma(m->send_bps, (double)wire / seconds);
}

void dmar_zmeter_compressed(struct dmar_zmeter *m, uint64_t in, uint64_t out, double seconds)
{
	if (!in || seconds <= 0)
		return;
	m->z_bps = ewma(m->z_bps, (double)in / seconds);
	double save = out < in ? 1.0 - (double)out / (double)in : 0.0;
	/* ewma treats 0 as unmeasured: a batch that saved nothing counts
	 * as a tiny saving */
	m->z_save = ewma(m->z_save, save > 1e-6 ? save : 1e-6);
}

bool dmar_zmeter_compress(struct dmar_zmeter *m)
{
	double n = m->streams > 1 ? m->streams : 1;
	if (m->send_bps <= 0 || m->z_bps <= 0 ||
	    (m->z_save >= DMAR_ZMETER_MIN_SAVE && n * m->send_bps < (n - 1 + m->z_save) * m->z_bps)) {
		m->raw_run = 0;
		return true;
	}
	if (++m->raw_run >= DMAR_ZMETER_REFRESH) {
		m->raw_run = 0;
		return true;
	}
	return false;
}

struct dmar_zchunk {
	ZSTD_CCtx *cctx, *probe;
	int level;
	struct dmar_bytepack *pack;
	uint8_t *grouped; /* a grouped form being compressed */
	size_t grouped_cap;
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
	free(z->grouped);
	free(z);
}

bool dmar_zchunk_probe(struct dmar_zchunk *z, const void *p, size_t len)
{
	return dmar_compress_probe(z->probe, p, len);
}

enum dmar_zx dmar_zchunk_choose(struct dmar_zchunk *z, const void *p, size_t len, bool grouped_only)
{
	return dmar_compress_choose(z->probe, p, len, grouped_only);
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
	return dmar_zchunk_compress_as(z, dst, cap, src, len, DMAR_ZX_PLAIN);
}

size_t dmar_zchunk_compress_as(struct dmar_zchunk *z, void *dst, size_t cap, const void *src, size_t len,
			       enum dmar_zx zx)
{
	if (zx != DMAR_ZX_PLAIN && zx != DMAR_ZX_G2 && zx != DMAR_ZX_G4)
		return 0;
	/* No room past what pays: zstd gives up there instead of finishing
	 * a frame that would be thrown away. */
	size_t limit = len - len / 32;
	if (limit == 0)
		return 0;
	if (cap > limit - 1)
		cap = limit - 1;
	size_t c;
	if (zx == DMAR_ZX_PLAIN) {
		c = ZSTD_compress2(z->cctx, dst, cap, src, len);
	} else {
		if (len > z->grouped_cap) {
			uint8_t *g = realloc(z->grouped, len);
			if (!g)
				return 0;
			z->grouped = g;
			z->grouped_cap = len;
		}
		dmar_bgroup_split(z->grouped, src, len, (unsigned)zx);
		c = planes_compress(z->cctx, dst, cap, z->grouped, len, (unsigned)zx);
	}
	if (ZSTD_isError(c) || c == 0 || !dmar_compress_pays(len, c))
		return 0;
	return c;
}
