/* SPDX-License-Identifier: MIT */
/*
 * libcrypto.c - load libcrypto on first use (see libcrypto.h for why).
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dl.h"
#include "libcrypto.h"

struct dmar_libcrypto dmar_libcrypto;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_msg[256];

static const struct dmar_dl_sym syms[] = {
#define SYM(field, name) { name, offsetof(struct dmar_libcrypto, field) }
	SYM(md_ctx_new, "EVP_MD_CTX_new"),
	SYM(md_ctx_free, "EVP_MD_CTX_free"),
	SYM(digest_init_ex, "EVP_DigestInit_ex"),
	SYM(digest_update, "EVP_DigestUpdate"),
	SYM(digest_final_ex, "EVP_DigestFinal_ex"),
	SYM(digest, "EVP_Digest"),
	SYM(encode_block, "EVP_EncodeBlock"),
#undef SYM
};

/* An EVP_MD by name: OpenSSL 3's EVP_MD_fetch (an explicit fetch, kept
 * for the life of the process), else 1.1's EVP_sha256 / EVP_sha1. */
static const EVP_MD *md(void *h, const char *fetch_name, const char *legacy)
{
	void *f = dlsym(h, "EVP_MD_fetch");
	if (f) {
		EVP_MD *(*fetch)(void *libctx, const char *name, const char *props);
		memcpy(&fetch, &f, sizeof(f));
		const EVP_MD *m = fetch(NULL, fetch_name, NULL);
		if (m)
			return m;
	}
	void *g = dlsym(h, legacy);
	if (!g)
		return NULL;
	const EVP_MD *(*get)(void);
	memcpy(&get, &g, sizeof(g));
	return get();
}

static void load(void)
{
	struct dmar_libcrypto t;
	static const char *const names[] = DMAR_LIBCRYPTO_SONAMES;
	void *h = dmar_dl_open(names, sizeof(names) / sizeof(names[0]), "libssl3", syms, sizeof(syms) / sizeof(syms[0]),
			       &t, load_msg, sizeof(load_msg));
	if (!h) {
		load_rc = -ELIBACC;
		return;
	}
	t.sha256 = md(h, "SHA256", "EVP_sha256");
	t.sha1 = md(h, "SHA1", "EVP_sha1");
	if (!t.sha256 || !t.sha1) {
		load_rc = -ELIBACC;
		snprintf(load_msg, sizeof(load_msg), "no SHA-256 or SHA-1 digest");
		return;
	}
	dmar_libcrypto = t;
}

int dmar_libcrypto_load(struct dmar_error *err)
{
	pthread_once(&once, load);
	if (load_rc < 0)
		return dmar_error_set(err, load_rc, "libcrypto: %s", load_msg);
	return 0;
}
