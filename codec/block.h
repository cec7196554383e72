/* SPDX-License-Identifier: MIT */
/*
 * block.h - pieces of the artifact layout shared by the encoder and the
 * decoder (private to codec/).
 */
#ifndef DMAR_BLOCK_H
#define DMAR_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "chunker.h"
#include "format.h"
#include "hash.h"

/* Logical bytes the encoder puts in one block before it cuts the next.
 * 4 MiB: blocks are compressed independently (so both cores can work on
 * one file and a decoder can check each before writing it), and each
 * block start costs zstd its history.  On a tar of /usr/include, 2 MiB
 * blocks came to 1.17x the size of `zstd -3` on the whole stream, 4 MiB to
 * 1.07x (1.02x on /usr/include + /usr/share/doc).  A decoder still holds
 * only a few blocks. */
#define DMAR_BLOCK_TARGET (4u << 20)

/* The most chunks an encoder can put in a block for this chunker. */
static inline unsigned dmar_block_max_chunks(const struct dmar_chunker *c)
{
	uint64_t n = DMAR_BLOCK_TARGET / c->min + 2;
	return n > DMAR_BLOCK_MAX_CHUNKS ? DMAR_BLOCK_MAX_CHUNKS : (unsigned)n;
}

static inline unsigned dmar_log2(uint32_t v)
{
	return 31u - (unsigned)__builtin_clz(v);
}

/* A buffer for a block's bytes (free with free()), or NULL: 2 MiB aligned
 * and asked to be backed by huge pages.  Every byte of a block is streamed
 * through by the chunker, SHA-256, zstd and read()/write() copies; on
 * 4 KiB pages the TLB misses alone (a two-level walk under virtualisation)
 * cost more than the work.  Only the first DMAR_BLOCK_TARGET bytes get
 * huge pages: dmar's blocks end a little past the target (at most one
 * chunk), and a huge page for that tail was 2 MiB zeroed, on first touch,
 * for a few hundred KiB used; the tail gets 4 KiB pages as it is touched.
 * Without THP this is just an aligned malloc. */
void *dmar_block_buf_alloc(size_t len);

/* Block check: SHA-256 over the block's index and the file offset of its
 * first byte (le64 each: a dropped, repeated or reordered block fails its
 * own check, before its bytes are written), the record's bytes 0..11, the
 * chunk table as stored, then every chunk id; the first 8 bytes are kept. */
void dmar_block_check(uint64_t index, uint64_t offset, const uint8_t *hdr12, const uint8_t *table,
		      size_t table_len, const struct dmar_id *ids, unsigned n, uint8_t out[8]);

#endif /* DMAR_BLOCK_H */
