/* SPDX-License-Identifier: MIT */
/*
 * decoder.h - read a .dmar artifact back into the file's bytes, checking
 * everything on the way.
 *
 * The artifact is outside input: every declared size is checked against the
 * limits in format.h before anything is allocated, each block's chunks are
 * re-hashed and compared with the block's check before a byte of it is
 * written, and the end record's totals and check must match.  Errors carry
 * a message naming the part that is wrong (struct dmar_error).
 *
 * Output goes to the write callback in order, one verified block at a time
 * (or, with opts.pwrite, written at its offset: by a writer thread from
 * -T2 on), so memory is bounded (a few blocks of at most
 * DMAR_BLOCK_MAX_RAW) for any artifact size.  A failed decode may have written the blocks before the
 * bad one: callers that need all-or-nothing write to a temp file.
 */
#ifndef DMAR_DECODER_H
#define DMAR_DECODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bytepack.h"
#include "encoder.h"
#include "error.h"
#include "format.h"
#include "hash.h"
#include "refset.h"

/* Reads up to len bytes; returns the count (0 at end of input) or -errno. */
typedef ssize_t (*dmar_read_fn)(void *ctx, void *buf, size_t len);

struct dmar_header_info {
	unsigned version;
	unsigned flags;             /* DMAR_HDR_* */
	struct dmar_chunker chunker;
	struct dmar_meta meta;
	uint64_t pack_id;           /* 0: none */
};

/* Called once the header is parsed, before any block: the place to build a
 * reference set with the artifact's chunker.  Return 0 or -errno to stop. */
typedef int (*dmar_header_fn)(void *ctx, const struct dmar_header_info *h);

/* Called for every chunk in info mode.  absent: 0 payload present; 1 held
 * by reference data; 2 first chunk of a run held by reference data (len
 * unknown without it, 0); 3 a later chunk of such a run (id unknown:
 * NULL).  offset is UINT64_MAX once it depends on unknown lengths. */
typedef void (*dmar_chunk_info_fn)(void *ctx, uint64_t index, uint64_t offset, uint32_t len,
				   unsigned absent, const struct dmar_id *id_or_null);

struct dmar_decoder_opts {
	struct dmar_bytepack *pack;        /* needed when the header names one */
	const struct dmar_refset *ref;     /* needed when chunks are absent */
	unsigned threads;                  /* >= 1 */
	dmar_header_fn on_header;          /* optional */
	void *on_header_ctx;
	/* Info mode: parse the structure only (no decompression, no hashing,
	 * no output); on_chunk (optional) sees every chunk.  The checks are
	 * not verified in this mode. */
	bool info_only;
	dmar_chunk_info_fn on_chunk;
	void *on_chunk_ctx;
	/* Positional output (optional, for a seekable output that starts
	 * empty): when set, each verified block is written at its offset
	 * in the file (from threads >= 2 by a writer thread of the
	 * decoder's own, while the next blocks decode; at 1 by the caller's
	 * thread, in order), and dmar_decode's write callback is not used
	 * (pass NULL).  Blocks may be written out of order; a block is
	 * still never written before its check is verified.  Not used in
	 * info mode. */
	dmar_pwrite_fn pwrite;
	void *pwrite_ctx;
};

struct dmar_decode_stats {
	struct dmar_header_info header;
	uint64_t logical;         /* bytes of the file */
	uint64_t stored;          /* artifact bytes read */
	uint64_t chunks;
	uint64_t absent_chunks;
	uint64_t absent_bytes;
	uint64_t blocks;
	uint64_t raw_blocks;
	struct dmar_id file_id;   /* valid after a full (not info) decode */
	unsigned refs;            /* thin: the bases it was made against */
	struct dmar_id ref_ids[DMAR_MAX_REFS];
	uint64_t ref_sizes[DMAR_MAX_REFS];
};

/*
 * Decode the whole artifact from read into write (write may be NULL to test
 * only).  progress (may be NULL) sees the running logical byte count.
 * Returns 0 or a negative errno, with err saying what was wrong:
 *   -EBADMSG   corrupt: bad magic, check or hash mismatch, bad sizes
 *   -EPROTO    unsupported version or unknown flags
 *   -EINVAL    reference data cut with other chunk sizes than the artifact's
 *   -ENOKEY    needs a byte pack that was not given (or another one)
 *   -ENOENT    reference data missing a chunk (or none given), or not the
 *              bases the artifact was made against
 *   -ENODATA   truncated
 *   other      from read/write callbacks or ENOMEM
 * *st is filled in also on failure, with what was read so far.
 */
int dmar_decode(const struct dmar_decoder_opts *o, dmar_read_fn read, void *rctx,
		dmar_write_fn write, void *wctx, void (*progress)(void *, uint64_t), void *pctx,
		struct dmar_decode_stats *st, struct dmar_error *err);

/* Decode an artifact held in memory (for fuzzing and tests). */
int dmar_decode_mem(const struct dmar_decoder_opts *o, const void *buf, size_t len,
		    dmar_write_fn write, void *wctx, struct dmar_decode_stats *st,
		    struct dmar_error *err);

#endif /* DMAR_DECODER_H */
