/* SPDX-License-Identifier: MIT */
/*
 * hash.h - SHA-256 content ids: on x86 SHA-NI (sha256.c), two messages at a
 * time where the caller has several, or sixteen on AVX-512, one at a time
 * (or incrementally) for the rest; through OpenSSL libcrypto, loaded on
 * first use (libcrypto.h), on CPUs without SHA-NI.
 *
 * Thread-safe: each thread keeps its own digest context.
 */
#ifndef DMAR_HASH_H
#define DMAR_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DMAR_HASH_SIZE 32
#define DMAR_HASH_HEX_SIZE (2 * DMAR_HASH_SIZE + 1)

struct dmar_id {
	uint8_t b[DMAR_HASH_SIZE];
};

/* out = SHA-256(buf[0..len)).  Aborts only if libcrypto itself is broken. */
void dmar_hash(const void *buf, size_t len, struct dmar_id *out);

/* Many independent messages at once: with SHA-NI two are hashed side by
 * side (about 1.7x one core's throughput), on AVX-512 sixteen (about 1.45x
 * that again), so batch callers should use these rather than a loop over
 * dmar_hash.  The digests are the same. */

/* outa = SHA-256(a[0..alen)), outb = SHA-256(b[0..blen)). */
void dmar_hash2(const void *a, size_t alen, const void *b, size_t blen, struct dmar_id *outa,
		struct dmar_id *outb);

/* outs[i] = SHA-256(bufs[i]) for i < n. */
struct iovec;
void dmar_hash_many(const struct iovec *bufs, size_t n, struct dmar_id *outs);

/* The chunks of a block: chunk i is lens[i] bytes, laid end to end from
 * base, ids[i] its id.  A chunk with skip[i] != 0 (skip may be NULL) is
 * not in base at all: it takes no bytes there and ids[i] is left alone. */
void dmar_hash_chunks(const uint8_t *base, const uint32_t *lens, const uint8_t *skip, size_t n,
		      struct dmar_id *ids);

/* Is the SHA-NI code in use?  It is when the CPU has SHA-NI and SSE4.1
 * and DMAR_HASH_NO_SHANI is unset (or "0"); libcrypto does the work
 * otherwise. */
bool dmar_hash_hw(void);

/* Tests and benchmarks: turn the SHA-NI code on or off (on only takes
 * where the CPU has it); returns dmar_hash_hw() after the change.  Not
 * for use while other threads hash. */
bool dmar_hash_set_hw(bool on);

/* Do the batch calls (dmar_hash2, _many, _chunks) hash sixteen messages
 * at a time on AVX-512?  They do when the CPU and kernel have AVX-512 F
 * and BW and DMAR_HASH_NO_AVX512 is unset (or "0"); with SHA-NI on too,
 * the last few messages of a batch end on SHA-NI. */
bool dmar_hash_x16(void);

/* Tests and benchmarks: the same switch for the AVX-512 code. */
bool dmar_hash_set_x16(bool on);

/* out = SHA-256 of the n buffers laid end to end. */
void dmar_hash_iov(const struct iovec *iov, int n, struct dmar_id *out);

/* Incremental hashing of data that arrives in pieces. */
struct dmar_hash_ctx;
struct dmar_hash_ctx *dmar_hash_ctx_new(void); /* NULL on ENOMEM */
void dmar_hash_ctx_update(struct dmar_hash_ctx *h, const void *buf, size_t len);
/* Writes the digest and resets h for reuse. */
void dmar_hash_ctx_final(struct dmar_hash_ctx *h, struct dmar_id *out);
void dmar_hash_ctx_free(struct dmar_hash_ctx *h); /* NULL-safe */

/* Lower-case hex of the first n bytes (n <= 32) into out[2n+1]. */
void dmar_hex(const uint8_t *b, size_t n, char *out);

/* The value of one hex digit (either case), or -1. */
int dmar_hexval(char c);

/* Parse 64 hex digits; 0 or -EINVAL. */
int dmar_id_parse(const char *hex, struct dmar_id *out);

#endif /* DMAR_HASH_H */
