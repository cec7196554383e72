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

#endif /* DMAR_TEST_PRNG_H */
