/* SPDX-License-Identifier: MIT */
/*
 * Byte grouping (bgroup.h).  SSE2 (every x86-64 has it) does 32 bytes a
 * step, well above the zstd it feeds; the scalar loops do the rest and
 * other machines.
 */
#include "config.h"

#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "bgroup.h"

/* 32 bytes of 16 pairs -> 16 even bytes, 16 odd bytes. */
#ifdef __SSE2__
static inline void split2_32(const uint8_t *s, __m128i *even, __m128i *odd)
{
	const __m128i lo = _mm_set1_epi16(0x00ff);
	__m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
	*even = _mm_packus_epi16(_mm_and_si128(a, lo), _mm_and_si128(b, lo));
	*odd = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
}
#endif

static size_t split2(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 16 <= n; i += 16) {
		__m128i e, o;
		split2_32(src + 2 * i, &e, &o);
		_mm_storeu_si128((__m128i *)(dst + i), e);
		_mm_storeu_si128((__m128i *)(dst + n + i), o);
	}
#endif
	for (; i < n; i++) {
		dst[i] = src[2 * i];
		dst[n + i] = src[2 * i + 1];
	}
	return 2 * n;
}

static size_t split4(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
#ifdef __SSE2__
	/* Two rounds of pairs: 64 bytes -> the even and odd bytes of 32
	 * pairs, then of those the even and odd again. */
	for (; i + 16 <= n; i += 16) {
		__m128i e0, o0, e1, o1, b0, b1, b2, b3;
		split2_32(src + 4 * i, &e0, &o0);
		split2_32(src + 4 * i + 32, &e1, &o1);
		uint8_t ev[32], od[32];
		_mm_storeu_si128((__m128i *)ev, e0);
		_mm_storeu_si128((__m128i *)(ev + 16), e1);
		_mm_storeu_si128((__m128i *)od, o0);
		_mm_storeu_si128((__m128i *)(od + 16), o1);
		split2_32(ev, &b0, &b2);
		split2_32(od, &b1, &b3);
		_mm_storeu_si128((__m128i *)(dst + i), b0);
		_mm_storeu_si128((__m128i *)(dst + n + i), b1);
		_mm_storeu_si128((__m128i *)(dst + 2 * n + i), b2);
		_mm_storeu_si128((__m128i *)(dst + 3 * n + i), b3);
	}
#endif
	for (; i < n; i++)
		for (unsigned k = 0; k < 4; k++)
			dst[k * n + i] = src[4 * i + k];
	return 4 * n;
}

static size_t join2(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 16 <= n; i += 16) {
		__m128i e = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i o = _mm_loadu_si128((const __m128i *)(src + n + i));
		_mm_storeu_si128((__m128i *)(dst + 2 * i), _mm_unpacklo_epi8(e, o));
		_mm_storeu_si128((__m128i *)(dst + 2 * i + 16), _mm_unpackhi_epi8(e, o));
	}
#endif
	for (; i < n; i++) {
		dst[2 * i] = src[i];
		dst[2 * i + 1] = src[n + i];
	}
	return 2 * n;
}

static size_t join4(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 16 <= n; i += 16) {
		__m128i b0 = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i b1 = _mm_loadu_si128((const __m128i *)(src + n + i));
		__m128i b2 = _mm_loadu_si128((const __m128i *)(src + 2 * n + i));
		__m128i b3 = _mm_loadu_si128((const __m128i *)(src + 3 * n + i));
		/* pairs (b0 b1) and (b2 b3), then the pairs interleaved as 16-bit units */
		__m128i p01l = _mm_unpacklo_epi8(b0, b1), p01h = _mm_unpackhi_epi8(b0, b1);
		__m128i p23l = _mm_unpacklo_epi8(b2, b3), p23h = _mm_unpackhi_epi8(b2, b3);
		uint8_t *d = dst + 4 * i;
		_mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi16(p01l, p23l));
		_mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi16(p01l, p23l));
		_mm_storeu_si128((__m128i *)(d + 32), _mm_unpacklo_epi16(p01h, p23h));
		_mm_storeu_si128((__m128i *)(d + 48), _mm_unpackhi_epi16(p01h, p23h));
	}
#endif
	for (; i < n; i++)
		for (unsigned k = 0; k < 4; k++)
			dst[4 * i + k] = src[k * n + i];
	return 4 * n;
}

void dmar_bgroup_split(uint8_t *dst, const uint8_t *src, size_t len, unsigned width)
{
	size_t done = width == 4 ? split4(dst, src, len / 4) : split2(dst, src, len / 2);
	memcpy(dst + done, src + done, len - done);
}

void dmar_bgroup_join(uint8_t *dst, const uint8_t *src, size_t len, unsigned width)
{
	size_t done = width == 4 ? join4(dst, src, len / 4) : join2(dst, src, len / 2);
	memcpy(dst + done, src + done, len - done);
}
