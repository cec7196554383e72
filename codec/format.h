/* SPDX-License-Identifier: MIT */
/*
 * format.h - the on-disk layout of a .dmar artifact, version 1.
 *
 * docs/format.md is the normative spec; this header is its C mirror.  All
 * integers are little-endian and fixed width.  An artifact is
 *
 *     header (40 bytes)  [references]  block*  end (32 bytes)
 *
 * and is written in one pass, so it can be produced on a pipe: nothing in
 * the header depends on data that comes later.
 *
 * Header
 *   off len
 *     0   4  magic "DMAR"
 *     4   1  version (1)
 *     5   1  flags: DMAR_HDR_PACK   payloads use the byte pack named below
 *                   DMAR_HDR_THIN   encoder had reference data; blocks may
 *                                   list chunks whose payload is absent
 *                   DMAR_HDR_META   mode/mtime fields are meaningful
 *     6   1  log2 of the minimum chunk size
 *     7   1  log2 of the average chunk size
 *     8   1  log2 of the maximum chunk size
 *     9   3  reserved, zero
 *    12   4  mode (st_mode permission and type bits)
 *    16   8  mtime, seconds since the epoch (signed)
 *    24   4  mtime, nanoseconds (< 10^9)
 *    28   8  byte pack id (0 when DMAR_HDR_PACK is clear)
 *    36   4  check: first 4 bytes of SHA-256(bytes 0..35), as stored
 *
 * References: present exactly when the header has DMAR_HDR_THIN
 *     0   1  type 'R'
 *     1   3  reserved, zero
 *     4   4  k, the number of base files (1..DMAR_MAX_REFS)
 *     8      k entries: the base's file id (32 bytes, as defined below,
 *            with this artifact's chunk sizes) and its size (u64)
 *   Absent chunks are looked up in these bases, in this order: a decoder
 *   must be given the same bases in the same order (more may follow).
 *
 * Block: the chunks of a run of the file, in order
 *     0   1  type 'C'
 *     1   1  encoding: 0 raw, 1 zstd, 2 zstd with the byte pack
 *     2   2  n, the number of chunks (1..DMAR_BLOCK_MAX_CHUNKS)
 *     4   4  raw_len: bytes of the present chunks, concatenated
 *     8   4  stored_len: payload bytes that follow the chunk table
 *    12   8  check: first 8 bytes of SHA-256 over the block's index
 *            (0, 1, ...) and the file offset of its first byte (le64 each),
 *            bytes 0..11 of this record, the chunk table as stored, then the
 *            32-byte id of every chunk in order (recomputed from the data for
 *            present chunks)
 *    20      chunk table, describing the n chunks in order.  Each entry
 *            starts with a u32: bit 31 ABSENT, bit 30 RUN, bits 0..29 a
 *            value.
 *              neither bit: one present chunk; value = its length.
 *              ABSENT:      one chunk held by the reference data; value =
 *                           its length; the chunk's 32-byte id follows.
 *              ABSENT|RUN:  value (>= 1) chunks held by the reference
 *                           data: the chunk whose 32-byte id follows and
 *                           the value - 1 chunks after it in the reference
 *                           data's chunk order (its first occurrence, in
 *                           the same base file); their lengths and ids are
 *                           the reference data's.
 *            RUN without ABSENT is invalid.
 *            payload: stored_len bytes.  raw: the present chunks' bytes
 *            (stored_len == raw_len).  zstd: one magicless zstd frame
 *            without checksum or dictionary id that decodes to exactly
 *            raw_len bytes.
 *
 * End
 *     0   1  type 'E'
 *     1   7  reserved, zero
 *     8   8  logical size: the sum of all chunk lengths
 *    16   8  chunk count
 *    24   8  check: first 8 bytes of SHA-256 over the header, the
 *            references record if any, every block's check in order, and
 *            bytes 0..23 of this record
 *
 * A chunk id is the SHA-256 of the chunk's bytes.  A file's id is the
 * SHA-256 of its recipe: for each chunk in order, its 32-byte id followed by
 * its length as u32.  Nothing after the end record is allowed.
 */
#ifndef DMAR_FORMAT_H
#define DMAR_FORMAT_H

#include <stdint.h>
#include <string.h>

#define DMAR_MAGIC "DMAR"
#define DMAR_VERSION 1

#define DMAR_HDR_SIZE 40
#define DMAR_BLOCK_HDR_SIZE 20
#define DMAR_END_SIZE 32

#define DMAR_HDR_PACK 0x01u
#define DMAR_HDR_THIN 0x02u
#define DMAR_HDR_META 0x04u
#define DMAR_HDR_KNOWN_FLAGS (DMAR_HDR_PACK | DMAR_HDR_THIN | DMAR_HDR_META)

#define DMAR_REC_REFS 'R'
#define DMAR_MAX_REFS 64
#define DMAR_REC_BLOCK 'C'
#define DMAR_REC_END 'E'

#define DMAR_ENC_RAW 0
#define DMAR_ENC_ZSTD 1
#define DMAR_ENC_ZSTD_PACK 2

#define DMAR_CHUNK_ABSENT 0x80000000u
#define DMAR_CHUNK_RUN 0x40000000u
#define DMAR_CHUNK_VALUE_MASK 0x3fffffffu

/* Limits a decoder enforces before it allocates anything.  A block holds at
 * most DMAR_BLOCK_MAX_RAW decoded bytes, so no artifact can make a decoder
 * hold more than a few of these at once, whatever sizes it declares. */
#define DMAR_BLOCK_MAX_CHUNKS 4096
#define DMAR_BLOCK_MAX_RAW (8u << 20)
#define DMAR_CHUNK_LOG2_MIN 8  /* 256 B */
#define DMAR_CHUNK_LOG2_MAX 22 /* 4 MiB */

#define DMAR_ID_SIZE 32

/* Little-endian field access, independent of host byte order and alignment. */
static inline void dmar_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void dmar_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void dmar_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t dmar_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t dmar_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint64_t dmar_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

#endif /* DMAR_FORMAT_H */
