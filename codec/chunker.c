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

/*
 * Scan buf[*pi, end) for a cut with mask m, carrying the hash in *ph.
 * Eight bytes a step: after byte k of the step the hash is
 * (h << (k+1)) + P_k, where P_k = (P_{k-1} << 1) + G[b_k] depends only on
 * the step's bytes.  So the only value carried from one step to the next is
 * h, through one shift and one add, instead of a shift-add per byte: the
 * eight candidate hashes are computed side by side and tested together.
 * The cuts are exactly those of the byte-at-a-time rule.  The step loads
 * each byte by itself (a load port, where shifting it out of one 64-bit
 * word took two ALU operations) and keeps the candidates in registers: a
 * step that finds a cut (one in about 4000) runs its eight bytes again one
 * at a time, instead of every step storing the eight candidates for that
 * case.  256 MiB of random data, 32 KiB chunks: 2440 -> 3620 MB/s.
 * Returns the chunk length (cut after byte i) or 0 when no cut lies
 * before end.
 */
static inline size_t scan(const uint8_t *buf, size_t *pi, size_t end, uint64_t *ph, uint64_t m)
{
	size_t i = *pi;
	uint64_t h = *ph;
	for (; i + 8 <= end; i += 8) {
		const uint8_t *q = buf + i;
		uint64_t p0 = gear[q[0]];
		uint64_t p1 = (p0 << 1) + gear[q[1]];
		uint64_t p2 = (p1 << 1) + gear[q[2]];
		uint64_t p3 = (p2 << 1) + gear[q[3]];
		uint64_t p4 = (p3 << 1) + gear[q[4]];
		uint64_t p5 = (p4 << 1) + gear[q[5]];
		uint64_t p6 = (p5 << 1) + gear[q[6]];
		uint64_t p7 = (p6 << 1) + gear[q[7]];
		uint64_t h7 = (h << 8) + p7;
		if (__builtin_expect(!((((h << 1) + p0) & m) && (((h << 2) + p1) & m) && (((h << 3) + p2) & m) &&
				       (((h << 4) + p3) & m) && (((h << 5) + p4) & m) && (((h << 6) + p5) & m) &&
				       (((h << 7) + p6) & m) && (h7 & m)),
				     0)) {
			for (int k = 0; k < 8; k++) {
				h = (h << 1) + gear[q[k]];
				if (!(h & m))
					return i + (size_t)k + 1;
			}
		}
		h = h7;
	}
	for (; i < end; i++) {
		h = (h << 1) + gear[buf[i]];
		if (!(h & m))
			return i + 1;
	}
	*pi = i;
	*ph = h;
	return 0;
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
	size_t i = c->min, r;

	if ((r = scan(buf, &i, mid, &h, c->mask_s)))
		return r;
	if ((r = scan(buf, &i, end, &h, c->mask_l)))
		return r;
	if (end == c->max)
		return end;
	return eof ? len : 0;
}

unsigned dmar_chunker_cut(const struct dmar_chunker *c, const uint8_t *buf, size_t len, bool eof, size_t limit,
			  uint32_t *lens, unsigned max_n, size_t *cut)
{
	size_t pos = 0;
	unsigned n = 0;
	while (pos < len && pos < limit && n < max_n) {
		size_t k = dmar_chunker_next(c, buf + pos, len - pos, eof);
		if (!k)
			break;
		lens[n++] = (uint32_t)k;
		pos += k;
	}
	*cut = pos;
	return n;
}
