/* SPDX-License-Identifier: MIT */
/*
 * FastCDC (Xia et al., USENIX ATC 2016) with normalized chunking level 2.
 *
 * The rolling hash is the gear hash h = (h << 1) + G[byte]: after the shift,
 * bit k of h depends on the last k+1 bytes only, so testing the top bits of
 * h against zero looks at a window of up to 64 bytes without ever removing
 * a byte from the hash.  A mask with b bits set cuts with probability 2^-b
 * per byte.  Normalized chunking uses b = log2(avg) + 2 before the average
 * size and b = log2(avg) - 2 after it, which squeezes the size distribution
 * towards avg (fewer tiny and fewer max-size chunks than a single mask) at
 * the same mean.  Hashing starts at min: the first min bytes of a chunk
 * cannot hold a cut, so they are skipped outright.
 */
#include "config.h"

#include <errno.h>

#include "chunker.h"
#include "format.h"

static const uint64_t gear[256] = {
#include "gear_table.inc"
};

/* b set bits at the top of the word (the bits that see the most bytes). */
static uint64_t top_mask(unsigned b)
{
	return b == 0 ? 0 : ~UINT64_C(0) << (64 - b);
}

static bool is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

static unsigned log2u(uint32_t v)
{
	return 31u - (unsigned)__builtin_clz(v);
}

int dmar_chunker_init(struct dmar_chunker *c, uint32_t min, uint32_t avg, uint32_t max)
{
	if (!is_pow2(min) || !is_pow2(avg) || !is_pow2(max))
		return -EINVAL;
	if (min > avg || avg > max)
		return -EINVAL;
	if (log2u(min) < DMAR_CHUNK_LOG2_MIN || log2u(max) > DMAR_CHUNK_LOG2_MAX)
		return -EINVAL;
	unsigned bits = log2u(avg);
	c->min = min;
	c->avg = avg;
	c->max = max;
	c->mask_s = top_mask(bits + 2);
	c->mask_l = top_mask(bits > 2 ? bits - 2 : 1);
	return 0;
}

int dmar_chunker_init_log2(struct dmar_chunker *c, unsigned min_log2, unsigned avg_log2,
			   unsigned max_log2)
{
	if (min_log2 > 31 || avg_log2 > 31 || max_log2 > 31)
		return -EINVAL;
	return dmar_chunker_init(c, 1u << min_log2, 1u << avg_log2, 1u << max_log2);
}

size_t dmar_chunker_next(const struct dmar_chunker *c, const uint8_t *buf, size_t len, bool eof)
{
	if (len == 0)
		return 0;
	if (len <= c->min)
		return eof ? len : 0;

	size_t end = len < c->max ? len : c->max;
	size_t mid = c->avg < end ? c->avg : end;
	uint64_t h = 0;
	size_t i = c->min;

	for (; i < mid; i++) {
		h = (h << 1) + gear[buf[i]];
		if (!(h & c->mask_s))
			return i + 1;
	}
	for (; i < end; i++) {
		h = (h << 1) + gear[buf[i]];
		if (!(h & c->mask_l))
			return i + 1;
	}
	if (end == c->max)
		return end;
	return eof ? len : 0;
}
