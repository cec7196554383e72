/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "crc32c.h"

#define POLY 0x82f63b78u /* reflected Castagnoli */

static uint32_t table[8][256];

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

/* Slicing by 8: eight table lookups per 8 bytes. */
static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w ^= c;
		c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
		    table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
		    table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = _mm_crc32_u64(c64, w);
		p += 8;
		n -= 8;
	}
	c = (uint32_t)c64;
	while (n--)
		c = _mm_crc32_u8(c, *p++);
	return c;
}
#endif

static bool hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void pick(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	hw = __builtin_cpu_supports("sse4.2");
#endif
	if (!hw)
		pthread_once(&table_once, table_init);
}

uint32_t dmar_crc32c_table(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&table_once, table_init);
	return ~crc_sw(~crc, buf, len);
}

uint32_t dmar_crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&once, pick);
	crc = ~crc;
#if defined(__x86_64__)
	if (hw)
		return ~crc_hw(crc, buf, len);
#endif
	return ~crc_sw(crc, buf, len);
}
