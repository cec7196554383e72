/* SPDX-License-Identifier: MIT */
/*
 * chunker.h - content-defined chunking (FastCDC with normalized chunking).
 *
 * A chunk boundary depends only on the bytes since the previous boundary, so
 * the same content is cut the same way wherever it sits in a file and on
 * every machine: an insertion near the start of a file changes the first
 * few chunks and then the cuts fall back into step.
 *
 * The functions are pure and thread-safe; the params struct is the only
 * state and is read-only once checked.
 */
#ifndef DMAR_CHUNKER_H
#define DMAR_CHUNKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Defaults, chosen by measurement (tests/bench and scripts/bench-codec):
 *  - avg 32 KiB: a rewrite of a 64 KiB region costs on average the region
 *    plus about one chunk on each side (~128 KiB), inside the 3x budget for
 *    deltas, while the recipe stays at ~36 bytes per 32 KiB (0.11 %) and a
 *    have/want exchange for 1 GiB is 1 MiB of ids.  16 KiB halves delta
 *    overhead but doubles metadata and per-chunk call costs; 64 KiB makes
 *    a 64 KiB rewrite cost ~3x.
 *  - min = avg/4: the gear hash is not even computed for the first min
 *    bytes of a chunk, which is where most of the chunker's speed comes
 *    from, and tiny chunks (pure metadata cost) cannot occur.
 *  - max = avg*4: bounds the worst case on data with no cut points (zeros,
 *    repeats); with normalized chunking few chunks ever reach it.
 */
#define DMAR_CHUNK_MIN_DEFAULT (8u << 10)
#define DMAR_CHUNK_AVG_DEFAULT (32u << 10)
#define DMAR_CHUNK_MAX_DEFAULT (128u << 10)

struct dmar_chunker {
	uint32_t min;     /* never cut before this many bytes */
	uint32_t avg;     /* target mean chunk size, a power of two */
	uint32_t max;     /* always cut at this many bytes */
	uint64_t mask_s;  /* stricter mask used before avg (fewer cuts) */
	uint64_t mask_l;  /* looser mask used after avg (more cuts) */
};

/*
 * Set up a chunker for min <= avg <= max, all powers of two between
 * 2^DMAR_CHUNK_LOG2_MIN and 2^DMAR_CHUNK_LOG2_MAX.  Returns 0, or -EINVAL
 * (and leaves *c untouched) when the sizes are out of range.
 */
int dmar_chunker_init(struct dmar_chunker *c, uint32_t min, uint32_t avg, uint32_t max);

/* The same from log2 sizes, as stored in an artifact header. */
int dmar_chunker_init_log2(struct dmar_chunker *c, unsigned min_log2, unsigned avg_log2,
			   unsigned max_log2);

/*
 * Length of the chunk that starts at buf[0], looking at no more than len
 * bytes.  Returns a value in [1, min(len, max)] when a boundary is known.
 * When no boundary lies in buf and len < max, the answer depends on bytes
 * not yet seen: returns 0 unless eof, in which case the rest (len) is the
 * final chunk.  len == 0 returns 0.
 */
size_t dmar_chunker_next(const struct dmar_chunker *c, const uint8_t *buf, size_t len, bool eof);

/*
 * Cut successive chunks from buf[0..len): their lengths into lens, at most
 * max_n of them, stopping once limit bytes or more are cut or where
 * dmar_chunker_next needs bytes not yet seen.  Returns how many; *cut
 * gets their total.  The one cutting loop of the encoder and the cutter.
 */
unsigned dmar_chunker_cut(const struct dmar_chunker *c, const uint8_t *buf, size_t len, bool eof, size_t limit,
			  uint32_t *lens, unsigned max_n, size_t *cut);

#endif /* DMAR_CHUNKER_H */
