/* SPDX-License-Identifier: MIT */
/*
 * bytepack.h - the byte pack: a zstd dictionary mined from sample data,
 * wrapped in a small self-checking file.
 *
 * File layout (little-endian), spec in docs/format.md:
 *   0  4  magic "DMPK"
 *   4  1  version (1)
 *   5  3  reserved, zero
 *   8  4  dictionary length (1 .. DMAR_BYTEPACK_MAX)
 *  12  4  zstd dictionary id (0 for a raw-content dictionary)
 *  16 32  SHA-256 of the dictionary bytes
 *  48     dictionary bytes
 * The pack id, which artifacts record, is the first 8 bytes of that
 * SHA-256 read as a little-endian u64 (never 0: training rejects it).
 *
 * A loaded pack is immutable and may be shared by any number of threads.
 */
#ifndef DMAR_BYTEPACK_H
#define DMAR_BYTEPACK_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define DMAR_BYTEPACK_MAGIC "DMPK"
#define DMAR_BYTEPACK_VERSION 1
#define DMAR_BYTEPACK_HDR_SIZE 48
#define DMAR_BYTEPACK_MAX (16u << 20)
/* 256 KiB: on the 8049 small files of /usr/include, one artifact each,
 * packs total 1.8 % less than zstd -3 with a 110 KiB dictionary (zstd
 * --train's default), 1.1 % less counting the pack's own size; a 110 KiB
 * pack would lose to it (the artifact's per-file header and checks cost
 * ~85 bytes more than a zstd frame).  It is loaded once per process, so
 * the size costs nothing per file.  Measured by scripts/bench-codec (c). */
#define DMAR_BYTEPACK_DEFAULT_SIZE (256u << 10)

struct dmar_bytepack;

/*
 * Mine a pack from n samples laid end to end in samples (sizes[i] bytes
 * each).  dict_cap is the largest dictionary wanted.  threads > 1 lets the
 * trainer search its parameters in parallel.  Returns 0, -EINVAL (too few or
 * too small samples for a dictionary), -ENOMEM.
 */
int dmar_bytepack_train(const void *samples, const size_t *sizes, unsigned n, size_t dict_cap,
			unsigned threads, struct dmar_bytepack **out, struct dmar_error *err);

/* Parse a pack file held in memory (copied; buf may be freed after).
 * Rejects bad magic, sizes and checksum with -EBADMSG, an unknown version
 * with -EPROTO. */
int dmar_bytepack_load(const void *buf, size_t len, struct dmar_bytepack **out,
		       struct dmar_error *err);

/* Read and parse the pack file at path. */
int dmar_bytepack_load_file(const char *path, struct dmar_bytepack **out, struct dmar_error *err);

/* The file image of p, malloc'ed into *buf (caller frees). */
int dmar_bytepack_serialize(const struct dmar_bytepack *p, uint8_t **buf, size_t *len);

uint64_t dmar_bytepack_id(const struct dmar_bytepack *p);
uint32_t dmar_bytepack_zstd_id(const struct dmar_bytepack *p);
const void *dmar_bytepack_dict(const struct dmar_bytepack *p, size_t *len);

/* Digested forms for zstd, built on first use and cached (thread-safe).
 * The returned objects belong to p.  NULL on ENOMEM. */
struct ZSTD_CDict_s;
struct ZSTD_DDict_s;
const struct ZSTD_CDict_s *dmar_bytepack_cdict(struct dmar_bytepack *p, int level);
const struct ZSTD_DDict_s *dmar_bytepack_ddict(struct dmar_bytepack *p);

void dmar_bytepack_free(struct dmar_bytepack *p); /* NULL-safe */

#endif /* DMAR_BYTEPACK_H */
