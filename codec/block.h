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

/* A buffer that block after block is refilled afresh (old contents are
 * not kept), grown on demand. */
struct dmar_block_buf {
	uint8_t *p;
	size_t cap;
};

/* Below this, a buffer is plain malloc'd memory. */
#define DMAR_BLOCK_BUF_HUGE_MIN (256u << 10)

/* Room for n bytes (n <= max).  A request of DMAR_BLOCK_BUF_HUGE_MIN or
 * more reserves max at once, from dmar_block_buf_alloc: every 4 KiB page
 * first touched costs a fault, ~10 us on the test VM (0.4 GB/s, where one
 * 2 MiB huge page faults in at 0.6-17 GB/s), and growing the buffer block
 * by block as bigger blocks came took a fresh mapping each time (unpack
 * of the tar corpus: 1700 of its 2200 faults were its payload buffers,
 * malloc'd below 1 MiB).  Pages never touched cost no memory, so the bound
 * is the same.  0 or -ENOMEM (the old buffer is kept). */
int dmar_block_buf_reserve(struct dmar_block_buf *b, size_t n, size_t max);
void dmar_block_buf_free(struct dmar_block_buf *b);

/* Allocation callbacks for zstd (ZSTD_customMem): its workspaces of
 * DMAR_BLOCK_BUF_HUGE_MIN or more (level 3's tables for a block: 1.3 MB,
 * 650 faults a context on 4 KiB pages) go on huge pages too. */
void *dmar_block_zalloc(void *opaque, size_t size);
void dmar_block_zfree(void *opaque, void *p);

/* Block check: SHA-256 over the block's index and the file offset of its
 * first byte (le64 each: a dropped, repeated or reordered block fails its
 * own check, before its bytes are written), the record's bytes 0..11, the
 * chunk table as stored, then every chunk id; the first 8 bytes are kept. */
void dmar_block_check(uint64_t index, uint64_t offset, const uint8_t *hdr12, const uint8_t *table,
		      size_t table_len, const struct dmar_id *ids, unsigned n, uint8_t out[8]);

#endif /* DMAR_BLOCK_H */
