/* SPDX-License-Identifier: MIT */
/*
 * refset.h - reference data for thin artifacts: the chunks of one or more
 * base files, indexed by id.
 *
 * A thin artifact lists some chunks by id only; the encoder omits every
 * chunk that the reference set holds and the decoder reads those chunks
 * back from the same base files.  Both sides must cut the bases with the
 * artifact's chunk sizes, so a set is built for one chunker.
 *
 * The index costs 48 bytes per chunk of base data plus a hash table of
 * 8-byte slots kept under half full: 64-128 bytes per chunk (~90 on
 * average, ~2.5 MiB per GiB of base at the default sizes); the base bytes themselves are read on demand with pread,
 * and every chunk read back is hashed again, so a base that changed after
 * indexing is reported, never used.
 *
 * Not thread-safe while adding; lookups and reads may run concurrently.
 */
#ifndef DMAR_REFSET_H
#define DMAR_REFSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunker.h"
#include "error.h"
#include "hash.h"

struct dmar_refset;

int dmar_refset_new(struct dmar_refset **out, const struct dmar_chunker *ck);

/* Index the file at path (cut and hashed with threads workers).  The file
 * stays open until the set is freed. */
int dmar_refset_add_file(struct dmar_refset *rs, const char *path, unsigned threads,
			 struct dmar_error *err);

/* Index bytes already in memory; buf must outlive the set. */
int dmar_refset_add_mem(struct dmar_refset *rs, const void *buf, size_t len, unsigned threads,
			struct dmar_error *err);

bool dmar_refset_has(const struct dmar_refset *rs, const struct dmar_id *id);

/* Position of the first chunk with this id in the bases' chunk order
 * (all bases' chunks, in the order they were added), or -1. */
int64_t dmar_refset_find(const struct dmar_refset *rs, const struct dmar_id *id);

/* The chunk at position index, if it lies in the same base as position
 * first (runs never cross from one base into the next): 0 or -ENOENT. */
int dmar_refset_at(const struct dmar_refset *rs, uint64_t index, uint64_t first,
		   struct dmar_id *id, uint32_t *len);

/*
 * Copy the chunk with this id and length into dst.  Returns 0, -ENOENT (not
 * in the set, or known with another length), -EBADMSG (the base changed:
 * its bytes no longer hash to id), or -errno from reading.
 */
int dmar_refset_read(const struct dmar_refset *rs, const struct dmar_id *id, uint32_t len,
		     uint8_t *dst);

/* The bases, in the order added: each one's file id (the SHA-256 of its
 * recipe, cut with this set's chunker) and size.  A thin artifact records
 * them, so a decoder given other bases says so before decoding. */
unsigned dmar_refset_sources(const struct dmar_refset *rs);
void dmar_refset_source(const struct dmar_refset *rs, unsigned k, struct dmar_id *file_id, uint64_t *size);

uint64_t dmar_refset_chunks(const struct dmar_refset *rs);
uint64_t dmar_refset_bytes(const struct dmar_refset *rs);
const struct dmar_chunker *dmar_refset_chunker(const struct dmar_refset *rs);

void dmar_refset_free(struct dmar_refset *rs); /* NULL-safe */

#endif /* DMAR_REFSET_H */
