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
 * Chunks on the wire may also go byte-grouped (codec/bgroup.h: tensors of
 * 16- and 32-bit floats): the frame is then zstd over the grouped form,
 * one zstd block per plane, and dmar_compress_choose says which form a
 * chunk's samples favour.
 */
#ifndef DMAR_COMPRESS_H
#define DMAR_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* The forms a chunk frame takes; a grouped form's value is its width. */
enum dmar_zx {
	DMAR_ZX_RAW = 0,   /* not worth a frame: keep the bytes as they are */
	DMAR_ZX_PLAIN = 1, /* zstd over the bytes */
	DMAR_ZX_G2 = 2,    /* zstd over the bytes grouped at width 2 (bf16, fp16) */
	DMAR_ZX_G4 = 4,    /* ... at width 4 (fp32) */
};

/*
 * dmar_compress_probe's judgment with the grouped forms as candidates:
 * the form whose sampled frame is smallest, if that saves 1/16.  Bytes
 * that zstd shrinks by a third as they are (text, code, tables) are not
 * tried grouped: grouping helps only bytes that just entropy coding
 * shrinks, and sparing those the two extra probes keeps the common case
 * as cheap as before.  A grouped form must beat the plain one by 1/32 of
 * the samples, else the transform costs both sides for nothing.  With
 * grouped_only, the plain form was already judged not to pay (a store
 * that compresses kept the chunk raw) and only grouped forms compete.
 */
enum dmar_zx dmar_compress_choose(struct ZSTD_CCtx_s *probe, const void *p, size_t len, bool grouped_only);

/*
 * Decode a chunk frame of form zx (not DMAR_ZX_RAW) into dst, which has
 * room for len bytes; a grouped form needs tmp, len more bytes.  Returns
 * the decoded length, or a zstd error code (ZSTD_isError; ZSTD_getErrorName
 * says what).  dctx is the caller's, reset here for magicless frames.
 */
struct ZSTD_DCtx_s;
size_t dmar_chunk_frame_decode(struct ZSTD_DCtx_s *dctx, void *dst, size_t len, const void *src, size_t stored,
			       enum dmar_zx zx, void *tmp);

/*
 * Set c to write chunk frames at level (< 1: 1), over pack's dictionary
 * when pack is not NULL.  0, or -ENOMEM (the pack's dictionary could not
 * be prepared).
 */
int dmar_compress_setup(struct ZSTD_CCtx_s *c, int level, struct dmar_bytepack *pack);

/*
 * The link meter: whether compressing pays on this link, for this data.
 * A push runs n streams side by side, each compressing a batch, then
 * sending it.  Raw, they move L = n x (the rate a stream sends at) bytes
 * a second, the link's rate.  Compressed, a stream spends 1 / z a byte
 * compressing (z: the rate a stream compresses at) and (1 - s) / L
 * sending (s: the fraction compressing removes), while the others use
 * the link: n streams move n / (1 / z + (1 - s) / L) bytes a second, up to
 * the link's L / (1 - s).  That beats L when z x (n - 1 + s) > L, and s is
 * worth the cores (at least DMAR_ZMETER_MIN_SAVE).  With one stream that
 * is send rate < s x z: compressing must be faster than sending what it
 * saves; with more, compressing one batch overlaps sending another.  A
 * 1 Gbit/s link with cores to spare compresses; a 20 Gbit/s veth on 2
 * shared cores does not (there zstd level 1, at ~0.5 GB/s a core, is
 * slower than the wire).  Both rates are per stream and in wall time, so
 * the share of the cores the other streams take is in them.  Until both
 * are measured it says compress (a compressed batch measures both);
 * while it says raw, every DMAR_ZMETER_REFRESH-th batch compresses
 * anyway, so a change of data or of load is seen.  Plain struct: callers
 * share one across threads under their own lock, and set streams.
 */
#define DMAR_ZMETER_REFRESH 8
#define DMAR_ZMETER_MIN_SAVE (1.0 / 16)
struct dmar_zmeter {
	double send_bps;  /* wire bytes a second a stream sends, moving average; 0 until measured */
	double z_bps;     /* bytes a second a stream probes and compresses */
	double z_save;    /* the fraction of them compressing removed */
	unsigned streams; /* streams sending side by side (0 is taken as 1) */
	unsigned raw_run; /* batches judged raw since the last compressed one */
};
/* A batch of wire bytes went out in seconds (the request's time). */
void dmar_zmeter_sent(struct dmar_zmeter *m, uint64_t wire, double seconds);
/* A batch of in bytes was probed and compressed to out bytes in seconds. */
void dmar_zmeter_compressed(struct dmar_zmeter *m, uint64_t in, uint64_t out, double seconds);
/* Whether the next batch should be compressed. */
bool dmar_zmeter_compress(struct dmar_zmeter *m);

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
/* The same in form zx (DMAR_ZX_PLAIN is dmar_zchunk_compress).  A grouped
 * form is staged in z's own buffer (grown to len; 0 when that fails). */
size_t dmar_zchunk_compress_as(struct dmar_zchunk *z, void *dst, size_t cap, const void *src, size_t len,
			       enum dmar_zx zx);
/* dmar_compress_choose with z's probe context. */
enum dmar_zx dmar_zchunk_choose(struct dmar_zchunk *z, const void *p, size_t len, bool grouped_only);

#endif /* DMAR_COMPRESS_H */
