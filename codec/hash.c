/* SPDX-License-Identifier: MIT */
/*
 * OpenSSL 3 looks a digest up by name on every one-shot call; fetching the
 * SHA-256 implementation once and keeping one context per thread avoids
 * that cost, which matters at ~30 000 chunks per GiB.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <openssl/evp.h>

#include "hash.h"

struct dmar_hash_ctx {
	EVP_MD_CTX *ctx;
};

static const EVP_MD *sha256_md;
static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key;

static void free_tls(void *p)
{
	EVP_MD_CTX_free(p);
}

static void md_init(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
#endif
	if (!sha256_md)
		sha256_md = EVP_sha256();
	if (pthread_key_create(&tls_key, free_tls) != 0)
		abort();
}

static void must(int ok)
{
	if (!ok) {
		/* Only a broken libcrypto gets here; there is no sane fallback. */
		fputs("dmar: libcrypto SHA-256 failed\n", stderr);
		abort();
	}
}

static EVP_MD_CTX *thread_ctx(void)
{
	pthread_once(&md_once, md_init);
	EVP_MD_CTX *c = pthread_getspecific(tls_key);
	if (!c) {
		c = EVP_MD_CTX_new();
		must(c != NULL);
		must(pthread_setspecific(tls_key, c) == 0);
	}
	return c;
}

void dmar_hash(const void *buf, size_t len, struct dmar_id *out)
{
	EVP_MD_CTX *c = thread_ctx();
	unsigned int n = 0;
	must(EVP_DigestInit_ex(c, sha256_md, NULL));
	must(EVP_DigestUpdate(c, buf, len));
	must(EVP_DigestFinal_ex(c, out->b, &n));
}

void dmar_hash_iov(const struct iovec *iov, int n, struct dmar_id *out)
{
	EVP_MD_CTX *c = thread_ctx();
	unsigned int len = 0;
	must(EVP_DigestInit_ex(c, sha256_md, NULL));
	for (int i = 0; i < n; i++)
		must(EVP_DigestUpdate(c, iov[i].iov_base, iov[i].iov_len));
	must(EVP_DigestFinal_ex(c, out->b, &len));
}

struct dmar_hash_ctx *dmar_hash_ctx_new(void)
{
	pthread_once(&md_once, md_init);
	struct dmar_hash_ctx *h = malloc(sizeof(*h));
	if (!h)
		return NULL;
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx || !EVP_DigestInit_ex(h->ctx, sha256_md, NULL)) {
		EVP_MD_CTX_free(h->ctx);
		free(h);
		return NULL;
	}
	return h;
}

void dmar_hash_ctx_update(struct dmar_hash_ctx *h, const void *buf, size_t len)
{
	must(EVP_DigestUpdate(h->ctx, buf, len));
}

void dmar_hash_ctx_final(struct dmar_hash_ctx *h, struct dmar_id *out)
{
	unsigned int n = 0;
	must(EVP_DigestFinal_ex(h->ctx, out->b, &n));
	must(EVP_DigestInit_ex(h->ctx, sha256_md, NULL));
}

void dmar_hash_ctx_free(struct dmar_hash_ctx *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

void dmar_hex(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int dmar_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int dmar_id_parse(const char *hex, struct dmar_id *out)
{
	struct dmar_id id;
	for (int i = 0; i < DMAR_HASH_SIZE; i++) {
		int hi = dmar_hexval(hex[2 * i]);
		int lo = hi < 0 ? -1 : dmar_hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		id.b[i] = (uint8_t)(hi << 4 | lo);
	}
	if (hex[2 * DMAR_HASH_SIZE] != '\0')
		return -EINVAL;
	*out = id;
	return 0;
}
