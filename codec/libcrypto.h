/* SPDX-License-Identifier: MIT */
/*
 * libcrypto.h - OpenSSL's libcrypto, loaded the first time it is needed.
 *
 * Linking libcrypto cost every dmar process 2.3 ms and 126 page faults
 * at start-up on the test VM (an empty program: 2.2 ms, with libcrypto
 * linked 4.5 ms; its relocations alone touch that many pages), which is
 * half of what `dmar pack` of a small file took before it did any work.
 * On a CPU with SHA-NI, hash.c hashes with sha256.c and never calls
 * libcrypto; it is the engine on CPUs without it (or with
 * DMAR_HASH_NO_SHANI set), the websocket handshake's SHA-1 and base64,
 * and the reference the tests check sha256.c against.  So nothing links
 * it, and the calls go through the table dmar_libcrypto_load() fills.
 */
#ifndef DMAR_LIBCRYPTO_H
#define DMAR_LIBCRYPTO_H

#include <stddef.h>

#include <openssl/evp.h>

#include "error.h"

/* The sonames of libcrypto's ABIs that configure accepts (>= 1.1),
 * newest first. */
#define DMAR_LIBCRYPTO_SONAMES { "libcrypto.so.3", "libcrypto.so.1.1" }

struct dmar_libcrypto {
	EVP_MD_CTX *(*md_ctx_new)(void);
	void (*md_ctx_free)(EVP_MD_CTX *c);
	int (*digest_init_ex)(EVP_MD_CTX *c, const EVP_MD *md, ENGINE *e);
	int (*digest_update)(EVP_MD_CTX *c, const void *buf, size_t len);
	int (*digest_final_ex)(EVP_MD_CTX *c, unsigned char *out, unsigned int *len);
	int (*digest)(const void *buf, size_t len, unsigned char *out, unsigned int *outlen,
		      const EVP_MD *md, ENGINE *e);
	int (*encode_block)(unsigned char *out, const unsigned char *in, int len);
	/* SHA-256 and SHA-1, looked up once: OpenSSL 3's EVP_sha256() and
	 * friends search the provider for the name on every use. */
	const EVP_MD *sha256;
	const EVP_MD *sha1;
};

/* Filled by a successful dmar_libcrypto_load(); read-only after. */
extern struct dmar_libcrypto dmar_libcrypto;

/* Load libcrypto (the first call; later ones, from any thread, return
 * the first one's result).  0, or -ELIBACC with a message naming the
 * library and what was wrong. */
int dmar_libcrypto_load(struct dmar_error *err);

#endif /* DMAR_LIBCRYPTO_H */
