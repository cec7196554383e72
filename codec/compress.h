/* SPDX-License-Identifier: MIT */
/*
 * compress.h - the one compress policy of dmar, and the compressor of
 * single chunks.
 *
 * Everything dmar compresses -- an artifact's blocks (encoder.c), chunks
 * in a mount's store (encode=zstd), chunks on the wire both ways -- is one
 * zstd frame in the "chunk frame" form: magicless, no checksum, no
 * dictionary id, no content size (the record around it carries sizes, a
 * check and which dictionary).  And every one of them follows the same two
 * rules:
 *   - try zstd only where dmar_compress_probe says the bytes look
 *     compressible: random or already compressed data then costs a small
 *     sampled probe, not a full attempt;
 *   - keep the frame only where dmar_compress_pays: it saves at least 1/32
 *     of the raw bytes.  Raw bytes are read in place or copied; a frame
 *     must be decoded, which a smaller gain does not pay for.
 */
#ifndef DMAR_COMPRESS_H
#define DMAR_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>

struct ZSTD_CCtx_s;
struct dmar_bytepack;

/* Below this many bytes a frame and its record eat what zstd could save:
 * the probe says no. */
#define DMAR_COMPRESS_MIN 256
/* From this many bytes on the probe samples; below, it only tries. */
#define DMAR_COMPRESS_SAMPLED 4096

/* Whether z compressed bytes of raw raw bytes are worth keeping. */
static inline bool dmar_compress_pays(size_t raw, size_t z)
{
	return z < raw - raw / 32;
}

/*
 * Whether len bytes at p look worth compressing: zstd at level 1 on 16
 * samples of 256 bytes spread over them (4 KiB, a few microseconds) must
 * save 1/16.  Many small samples, so that bytes mixing text and compressed
 * members (a tar of .gz and text files) are not judged by one spot; level
 * 1, not a negative level, because those leave literals unencoded and so
 * call incompressible what only entropy coding shrinks (bf16 weights,
 * byte-skewed data: zstd -1 saves about 20 % there).  Bytes too few to
 * sample (under DMAR_COMPRESS_SAMPLED) are simply tried; under
 * DMAR_COMPRESS_MIN, never.  probe is the
 * caller's context (one per thread), its parameters set here.
 */
bool dmar_compress_probe(struct ZSTD_CCtx_s *probe, const void *p, size_t len);

/*
 * Set c to write chunk frames at level (< 1: 1), over pack's dictionary
 * when pack is not NULL.  0, or -ENOMEM (the pack's dictionary could not
 * be prepared).
 */
int dmar_compress_setup(struct ZSTD_CCtx_s *c, int level, struct dmar_bytepack *pack);

/*
 * A chunk compressor: a chunk-frame context and a probe context, for one
 * thread at a time.
 */
struct dmar_zchunk;
/* 0, or -ENOMEM. */
int dmar_zchunk_new(struct dmar_zchunk **out, int level, struct dmar_bytepack *pack);
void dmar_zchunk_free(struct dmar_zchunk *z); /* NULL-safe */
bool dmar_zchunk_probe(struct dmar_zchunk *z, const void *p, size_t len);
/* The level and pack it was made with. */
int dmar_zchunk_level(const struct dmar_zchunk *z);
const struct dmar_bytepack *dmar_zchunk_pack(const struct dmar_zchunk *z);
/*
 * src's len bytes as one chunk frame into dst (cap bytes): the frame's
 * length when it pays, else 0 (dst then holds nothing of use).  No probe:
 * callers that probe call dmar_zchunk_probe first.
 */
size_t dmar_zchunk_compress(struct dmar_zchunk *z, void *dst, size_t cap, const void *src, size_t len);

#endif /* DMAR_COMPRESS_H */
