/* SPDX-License-Identifier: MIT */
/*
 * cutter.h - a stream of bytes cut into content-defined chunks and hashed,
 * on the caller's thread.
 *
 * The streaming form of the chunk pipeline for callers that handle each
 * chunk themselves (the mount's encoder stores it, `dmar cp` lists it in a
 * recipe): feed bytes in any pieces, and fn is called for each chunk in
 * order with its bytes and id.  Chunks are hashed a batch at a time
 * (dmar_hash_chunks: two SHA-NI lanes side by side, or sixteen AVX-512
 * ones), not one by one.  Memory is one window of about 4 MiB.  The
 * artifact encoder (encoder.h) cuts with the same chunker_cut and hashes
 * the same way, on its worker threads.
 */
#ifndef DMAR_CUTTER_H
#define DMAR_CUTTER_H

#include <stddef.h>
#include <stdint.h>

#include "chunker.h"
#include "hash.h"

/* One chunk: its len bytes at p (valid during the call) and its id.
 * Returns 0 to go on, > 0 to stop cutting (the chunks after this one are
 * dropped, and feed, commit and finish return that value from then on),
 * or a negative errno (the same, as an error). */
typedef int (*dmar_cutter_fn)(void *ctx, const uint8_t *p, uint32_t len, const struct dmar_id *id);

struct dmar_cutter;
/* 0 or -ENOMEM. */
int dmar_cutter_new(struct dmar_cutter **out, const struct dmar_chunker *ck, dmar_cutter_fn fn, void *ctx);
void dmar_cutter_free(struct dmar_cutter *c); /* NULL-safe */

/* Room for the caller to put input straight into: at least 1 byte of it
 * (*cap says how much). */
void dmar_cutter_space(struct dmar_cutter *c, uint8_t **dst, size_t *cap);
/* The caller put n bytes (<= cap) there.  0, or fn's stop or error. */
int dmar_cutter_commit(struct dmar_cutter *c, size_t n);
/* Copying convenience over space/commit. */
int dmar_cutter_feed(struct dmar_cutter *c, const void *p, size_t len);
/* The input ended: cut what is left.  0, or fn's stop or error. */
int dmar_cutter_finish(struct dmar_cutter *c);
/* Start a new stream (after finish, or to drop what was fed): the window
 * is kept, so cutting many small files costs one. */
void dmar_cutter_reset(struct dmar_cutter *c);

#endif /* DMAR_CUTTER_H */
