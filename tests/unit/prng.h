/* SPDX-License-Identifier: MIT */
/*
 * prng.h - the fixed-seed test data of the unit tests: xorshift64, so a
 * failure is reproducible and no test depends on rand().
 */
#ifndef DMAR_TEST_PRNG_H
#define DMAR_TEST_PRNG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* len pseudo-random bytes from seed (0 is taken as 1). */
static inline void fill_random(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed ? seed : 1;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = xorshift64(&s);
		memcpy(buf + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = xorshift64(&s);
		memcpy(buf + i, &v, len - i);
	}
}

/*
 * len bytes of a float tensor, little-endian: values near normal (the sum
 * of four uniforms, no libm needed) of scale 0.02, as weights are, stored
 * as bf16 (width 2: fp32 rounded to nearest even in its top half) or fp32
 * (width 4).  A tail short of a value is random.
 */
static inline void fill_floats(uint8_t *buf, size_t len, unsigned width, uint64_t seed)
{
	uint64_t s = seed ? seed : 1;
	size_t i = 0;
	for (; i + width <= len; i += width) {
		double u = 0;
		for (int k = 0; k < 4; k++)
			u += (double)(xorshift64(&s) >> 11) / 9007199254740992.0;
		float f = (float)((u - 2.0) * 0.02 * 1.7320508);
		uint32_t x;
		memcpy(&x, &f, 4);
		if (width == 2) {
			x += 0x7fffu + ((x >> 16) & 1u);
			buf[i] = (uint8_t)(x >> 16);
			buf[i + 1] = (uint8_t)(x >> 24);
		} else {
			for (unsigned k = 0; k < 4; k++)
				buf[i + k] = (uint8_t)(x >> (8 * k));
		}
	}
	fill_random(buf + i, len - i, s);
}

#endif /* DMAR_TEST_PRNG_H */
