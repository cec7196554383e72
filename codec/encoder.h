/* SPDX-License-Identifier: MIT */
/*
 * encoder.h - turn a stream of bytes into a .dmar artifact (codec/format.h).
 *
 * The caller feeds bytes in any pieces; the encoder cuts chunks, hashes
 * them, drops the ones the reference set holds, compresses runs of chunks
 * (blocks) on the worker threads and hands the artifact, in order, to the
 * write callback (or has the workers write it at its offsets, see
 * opts.pwrite).  Memory is bounded by the number of blocks in flight
 * (~2 x threads + 2 blocks of ~2 MiB), whatever the input size.
 *
 * One encoder is used by one thread; it runs its own workers.
 */
#ifndef DMAR_ENCODER_H
#define DMAR_ENCODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bytepack.h"
#include "chunker.h"
#include "error.h"
#include "hash.h"
#include "refset.h"

/* Writes len bytes or fails: returns 0 or -errno. */
typedef int (*dmar_write_fn)(void *ctx, const void *buf, size_t len);

/* Writes len bytes at offset off of the output or fails: 0 or -errno.
 * Called from any of the encoder's (or decoder's) threads, for disjoint
 * ranges, never two calls at once (a file's writes serialize in the
 * kernel anyway). */
typedef int (*dmar_pwrite_fn)(void *ctx, const void *buf, size_t len, uint64_t off);

/* Called in file order with the chunks of each block (index-only mode). */
typedef int (*dmar_chunks_fn)(void *ctx, uint64_t offset, const struct dmar_id *ids,
			      const uint32_t *lens, const uint8_t *data, unsigned n);

struct dmar_meta {
	bool valid;     /* false for stdin: mode/mtime unknown */
	uint32_t mode;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
};

struct dmar_encoder_opts {
	struct dmar_chunker chunker;  /* from dmar_chunker_init */
	int level;                    /* zstd level 1..22; 0 stores every block raw */
	struct dmar_bytepack *pack;   /* optional */
	const struct dmar_refset *ref; /* optional: chunks it holds are left out */
	unsigned threads;             /* >= 1 */
	struct dmar_meta meta;
	/* Index-only mode: when set, no artifact is produced; the encoder
	 * only cuts and hashes, and calls on_chunks for each block (data
	 * points at the block's bytes, valid during the call). */
	dmar_chunks_fn on_chunks;
	void *on_chunks_ctx;
	/* Positional output (optional, for a seekable output that starts
	 * empty at offset 0): when set, the artifact goes through pwrite
	 * and the write callback is not used (it may be NULL).  Each block
	 * is then written by the thread that encoded it, at its offset,
	 * as soon as the blocks before it know their sizes, so writing
	 * runs beside cutting and hashing instead of after them on the
	 * caller's thread.  The bytes written are the same either way. */
	dmar_pwrite_fn pwrite;
	void *pwrite_ctx;
};

struct dmar_encode_stats {
	uint64_t logical;       /* input bytes */
	uint64_t stored;        /* artifact bytes written */
	uint64_t chunks;
	uint64_t absent_chunks; /* left out because the reference set holds them */
	uint64_t absent_bytes;
	uint64_t blocks;
	uint64_t raw_blocks;    /* stored raw because compression did not pay */
	struct dmar_id file_id; /* SHA-256 of the recipe, valid after finish */
};

struct dmar_encoder;

/* write may be NULL only in index-only mode or with o->pwrite.  The
 * header is written here.
 * Returns 0, -EINVAL (bad opts), -ENOMEM, or the write callback's error. */
int dmar_encoder_new(struct dmar_encoder **out, const struct dmar_encoder_opts *o,
		     dmar_write_fn write, void *wctx, struct dmar_error *err);

/* Space for the caller to read input into directly (no copy): *buf gets at
 * least 1 byte of room, *cap says how much. */
void dmar_encoder_space(struct dmar_encoder *e, uint8_t **buf, size_t *cap);
/* The caller put n bytes (<= cap) into the space.  0 or -errno. */
int dmar_encoder_commit(struct dmar_encoder *e, size_t n);

/* Copying convenience over space/commit. */
int dmar_encoder_feed(struct dmar_encoder *e, const void *buf, size_t len);

/* Encode len bytes that stay valid and unchanged until the encoder is
 * freed, without copying them.  Only on an encoder that has been fed
 * nothing yet; finish follows.  0 or -errno. */
int dmar_encoder_feed_map(struct dmar_encoder *e, const void *buf, size_t len);

/* Read fd to EOF into the encoder, through the window (no mapping: a
 * file that changes meanwhile gives changed bytes, never a signal).
 * progress (may be NULL) is called with the running input byte count
 * every few MiB and at the end. */
int dmar_encoder_feed_fd(struct dmar_encoder *e, int fd, void (*progress)(void *, uint64_t),
			 void *pctx);

/* Flush the last blocks and the end record; fills st (may be NULL). */
int dmar_encoder_finish(struct dmar_encoder *e, struct dmar_encode_stats *st);

/* Running totals (valid any time). */
const struct dmar_encode_stats *dmar_encoder_stats(const struct dmar_encoder *e);

void dmar_encoder_free(struct dmar_encoder *e); /* NULL-safe */

#endif /* DMAR_ENCODER_H */
