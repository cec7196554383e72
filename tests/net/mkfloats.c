/* SPDX-License-Identifier: MIT */
/*
 * mkfloats FILE BYTES WIDTH SEED - a float tensor as model weights are:
 * values near normal of scale 0.02 (tests/unit/prng.h fill_floats), as
 * bf16 (WIDTH 2) or fp32 (WIDTH 4), little-endian.  For the tests and
 * benchmarks of the wire's byte-grouped frames; the same seed gives the
 * same bytes.  Needs nothing of the build (scripts/bench-net compiles it
 * on its own, for builds of older trees too).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/prng.h"

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: mkfloats FILE BYTES WIDTH SEED\n");
		return 2;
	}
	char *end;
	unsigned long long left = strtoull(argv[2], &end, 10);
	unsigned width = (unsigned)strtoul(argv[3], NULL, 10);
	uint64_t seed = strtoull(argv[4], NULL, 10);
	if (*end || (width != 2 && width != 4)) {
		fprintf(stderr, "mkfloats: BYTES is a number, WIDTH 2 or 4\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "wb");
	if (!f) {
		fprintf(stderr, "mkfloats: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	enum { PIECE = 1 << 20 }; /* a multiple of 4: values stay whole across pieces */
	static uint8_t buf[PIECE];
	for (uint64_t k = 0; left; k++) {
		size_t n = left < PIECE ? (size_t)left : PIECE;
		fill_floats(buf, n, width, seed * 1000003u + k + 1);
		if (fwrite(buf, 1, n, f) != n) {
			fprintf(stderr, "mkfloats: %s: %s\n", argv[1], strerror(errno));
			return 1;
		}
		left -= n;
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "mkfloats: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	return 0;
}
