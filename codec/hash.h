/* SPDX-License-Identifier: MIT */
/*
 * hash.h - SHA-256 content ids, through OpenSSL libcrypto (SHA-NI where the
 * CPU has it).
 *
 * Thread-safe: each thread keeps its own digest context.
 */
#ifndef DMAR_HASH_H
#define DMAR_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DMAR_HASH_SIZE 32
#define DMAR_HASH_HEX_SIZE (2 * DMAR_HASH_SIZE + 1)

struct dmar_id {
	uint8_t b[DMAR_HASH_SIZE];
};

/* out = SHA-256(buf[0..len)).  Aborts only if libcrypto itself is broken. */
void dmar_hash(const void *buf, size_t len, struct dmar_id *out);

/* out = SHA-256 of the n buffers laid end to end. */
struct iovec;
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
