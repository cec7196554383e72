/* SPDX-License-Identifier: MIT */
/*
 * bgroup.h - byte grouping, the float-aware transform before zstd.
 *
 * A tensor of bf16/fp16 (width 2) or fp32 (width 4) values, stored
 * little-endian, interleaves bytes of very different statistics: the top
 * byte of each value holds its sign and (most of) its exponent, which take
 * few distinct values across a tensor, the low bytes hold mantissa bits
 * that are nearly random.  zstd sees one stream where every other byte is
 * noise: its match finder finds nothing and its entropy coder mixes the
 * two distributions.  Grouping the bytes by their position in the value
 * (all byte 0s, then all byte 1s, ...) gives it one run of skewed bytes it
 * codes in a few bits each, and one of noise it leaves nearly as is.
 * (Hugging Face's Xet and ZipNN do the same.)
 *
 * The grouped form of len bytes at width w: n = len / w values; plane k
 * (0 <= k < w) is bytes k, k + w, k + 2w, ... of the first n * w bytes;
 * the planes in order, then the last len % w bytes as they were.  It is
 * a permutation: every input has exactly one grouped form and back, so a
 * decoder needs nothing but len and w.  Where the values start within
 * the bytes does not matter to the gain (a chunk cut at an odd offset
 * swaps the planes' roles), only to which plane is which.
 */
#ifndef DMAR_BGROUP_H
#define DMAR_BGROUP_H

#include <stddef.h>
#include <stdint.h>

/* The widths there are (values of enum dmar_zx below). */
#define DMAR_BGROUP_MAX_WIDTH 4

/* The grouped form of src's len bytes into dst (len bytes, not
 * overlapping src).  width is 2 or 4. */
void dmar_bgroup_split(uint8_t *dst, const uint8_t *src, size_t len, unsigned width);
/* The inverse: the original bytes of the grouped form src into dst. */
void dmar_bgroup_join(uint8_t *dst, const uint8_t *src, size_t len, unsigned width);

#endif /* DMAR_BGROUP_H */
