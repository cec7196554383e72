/* SPDX-License-Identifier: MIT */
/*
 * Where the CPU has SHA-NI or AVX-512, hashing goes to sha256.c, which
 * hashes two (SHA-NI) or sixteen (AVX-512) messages at once for the batch
 * calls, and one at a time (also incrementally) for the rest; libcrypto is
 * then never loaded (libcrypto.h says why it is loaded on demand).
 * Without SHA-NI, libcrypto hashes: OpenSSL 3 looks a digest up by name
 * on every one-shot call, so the digest is fetched once and each thread
 * keeps one context, which matters at ~30 000 chunks per GiB.  Without
 * libcrypto either, sha256.c's portable C code does: slower, never an
 * abort in a mounted daemon.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "hash.h"
#include "libcrypto.h"
#include "sha256.h"

struct dmar_hash_ctx {
#ifdef DMAR_SHA256_HW
	bool hw;                   /* sha256.c's SHA-NI code (s) */
	struct dmar_sha256_ctx s;
#endif
	EVP_MD_CTX *ctx;           /* else libcrypto, or where it is missing */
	struct dmar_sha256_sw sw;  /* (ctx NULL) portable C */
};

static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key;
static bool have_ossl;
#define C dmar_libcrypto

/* An incremental context's libcrypto call failed: its state is lost, and
 * there is no error path to say so.  EVP_DigestUpdate/Final of SHA-256
 * on a context that initialised fail only in a broken libcrypto. */
static void abort_on(bool failed)
{
	if (failed) {
		fputs("dmar: libcrypto SHA-256 failed mid-message\n", stderr);
		abort();
	}
}

static void free_tls(void *p)
{
	C.md_ctx_free(p);
}

static bool env_off(const char *name);

static void md_init(void)
{
	struct dmar_error err = { 0 };
	/* DMAR_HASH_NO_LIBCRYPTO: the portable code, as on a machine without
	 * libcrypto (for tests, like DMAR_HASH_NO_SHANI). */
	if (env_off("DMAR_HASH_NO_LIBCRYPTO")) {
		fputs("dmar: SHA-256 in portable C (DMAR_HASH_NO_LIBCRYPTO)\n", stderr);
		return;
	}
	if (dmar_libcrypto_load(&err) < 0) {
		/* Hashing has no error path, and needs none: it goes on in
		 * portable C, slower, and says so once. */
		fprintf(stderr, "dmar: SHA-256 in portable C (about 10x slower): no SHA-NI on this CPU (or DMAR_HASH_NO_SHANI), and %s\n",
			err.msg);
		return;
	}
	have_ossl = pthread_key_create(&tls_key, free_tls) == 0;
}

/* This thread's libcrypto context, or NULL: hash in portable C. */
static EVP_MD_CTX *thread_ctx(void)
{
	pthread_once(&md_once, md_init);
	if (!have_ossl)
		return NULL;
	EVP_MD_CTX *c = pthread_getspecific(tls_key);
	if (!c && (c = C.md_ctx_new()) && pthread_setspecific(tls_key, c) != 0) {
		C.md_ctx_free(c);
		c = NULL;
	}
	return c;
}

/* SHA-256 of the n pieces of iov, by libcrypto where it works, else (no
 * libcrypto, or a call of it failing) in portable C. */
static void soft_hash_iov(const struct iovec *iov, int n, struct dmar_id *out)
{
	EVP_MD_CTX *c = thread_ctx();
	unsigned int len = 0;
	bool ok = c && C.digest_init_ex(c, C.sha256, NULL);
	for (int i = 0; ok && i < n; i++)
		ok = C.digest_update(c, iov[i].iov_base, iov[i].iov_len);
	if (ok && C.digest_final_ex(c, out->b, &len))
		return;
	struct dmar_sha256_sw sw;
	dmar_sha256_sw_init(&sw);
	for (int i = 0; i < n; i++)
		dmar_sha256_sw_update(&sw, iov[i].iov_base, iov[i].iov_len);
	dmar_sha256_sw_final(&sw, out->b);
}

static void ossl_hash(const void *buf, size_t len, struct dmar_id *out)
{
	struct iovec v = { (void *)buf, len };
	soft_hash_iov(&v, 1, out);
}

/*
 * SHA-NI, AVX-512 x16 or libcrypto.  libcrypto uses SHA-NI too, but one
 * message at a time; ours pairs messages up, or runs sixteen side by side
 * on AVX-512 (faster still, and the only fast path on CPUs with AVX-512
 * but no SHA-NI, such as Skylake-SP and Cascade Lake).  One-shot hashing
 * has one message and stays on SHA-NI.  The choice is made once (cpuid,
 * the environment), and only the test hooks change it later; it is atomic
 * because worker threads read it while the main thread may have set it.
 */
static atomic_bool use_hw, use_x16;
static bool cpu_hw, cpu_x16;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static bool env_off(const char *name)
{
	const char *no = getenv(name);
	return no && *no && strcmp(no, "0") != 0;
}

static void hw_init(void)
{
#ifdef DMAR_SHA256_HW
	cpu_hw = dmar_sha256_cpu();
	cpu_x16 = dmar_sha256_x16_cpu();
#endif
	atomic_store_explicit(&use_hw, cpu_hw && !env_off("DMAR_HASH_NO_SHANI"), memory_order_relaxed);
	atomic_store_explicit(&use_x16, cpu_x16 && !env_off("DMAR_HASH_NO_AVX512"), memory_order_relaxed);
}

bool dmar_hash_hw(void)
{
	pthread_once(&hw_once, hw_init);
	return atomic_load_explicit(&use_hw, memory_order_relaxed);
}

bool dmar_hash_set_hw(bool on)
{
	pthread_once(&hw_once, hw_init);
	atomic_store_explicit(&use_hw, on && cpu_hw, memory_order_relaxed);
	return dmar_hash_hw();
}

bool dmar_hash_x16(void)
{
	pthread_once(&hw_once, hw_init);
	return atomic_load_explicit(&use_x16, memory_order_relaxed);
}

bool dmar_hash_set_x16(bool on)
{
	pthread_once(&hw_once, hw_init);
	atomic_store_explicit(&use_x16, on && cpu_x16, memory_order_relaxed);
	return dmar_hash_x16();
}

void dmar_hash(const void *buf, size_t len, struct dmar_id *out)
{
#ifdef DMAR_SHA256_HW
	if (dmar_hash_hw()) {
		dmar_sha256(buf, len, out->b);
		return;
	}
#endif
	ossl_hash(buf, len, out);
}

#ifdef DMAR_SHA256_HW
/*
 * The lanes take messages in the order given, each a new one as soon as
 * its last ends, so the batch ends when its last lane does: handed out
 * longest first (LPT scheduling), the messages left at the end are the
 * short ones and the lanes end close together.  On the test VM, x16,
 * content-defined chunks of 8-128 KiB: 32 at a time 3020 -> 3219 MB/s,
 * 128 at a time 3100 -> 3190; 16 or fewer all start at once, so their
 * order cannot matter and they go as given.  Sorting 128 entries costs microseconds against
 * the millisecond that hashing their 4 MiB takes.
 */
#define LPT_MIN 17
#define LPT_STACK 256

struct msg {
	const uint8_t *p;
	size_t len;
	uint8_t *out;
};

static int msg_cmp(const void *a, const void *b)
{
	const struct msg *x = a, *y = b;
	if (x->len != y->len)
		return x->len < y->len ? 1 : -1;
	return x->p < y->p ? -1 : x->p > y->p; /* a total order: the same schedule every time */
}

struct msg_src {
	const struct msg *m;
	size_t n, i;
};

static bool msg_next(void *ctx, const uint8_t **buf, size_t *len, uint8_t **out)
{
	struct msg_src *s = ctx;
	if (s->i == s->n)
		return false;
	*buf = s->m[s->i].p;
	*len = s->m[s->i].len;
	*out = s->m[s->i].out;
	s->i++;
	return true;
}

struct many_src {
	const struct iovec *bufs;
	size_t n, i;
	struct dmar_id *outs;
};

static bool many_next(void *ctx, const uint8_t **buf, size_t *len, uint8_t **out)
{
	struct many_src *m = ctx;
	if (m->i == m->n)
		return false;
	*buf = m->bufs[m->i].iov_base;
	*len = m->bufs[m->i].iov_len;
	*out = m->outs[m->i].b;
	m->i++;
	return true;
}

struct chunk_src {
	const uint8_t *base;
	const uint32_t *lens;
	const uint8_t *skip;
	size_t n, i, off;
	struct dmar_id *ids;
};

/* Hash what next() yields on the fastest engine there is; false when
 * there is none but libcrypto. */
static bool stream(dmar_sha256_next_fn next, void *ctx)
{
	bool hw = dmar_hash_hw();
	if (dmar_hash_x16())
		dmar_sha256_stream_x16(next, ctx, hw);
	else if (hw)
		dmar_sha256_stream(next, ctx);
	else
		return false;
	return true;
}

/* stream(), the at most n messages next() yields taken longest first
 * (in the given order when they are few, or there is no memory for the
 * list). */
static bool stream_lpt(dmar_sha256_next_fn next, void *ctx, size_t n)
{
	if (n < LPT_MIN || (!dmar_hash_x16() && !dmar_hash_hw()))
		return stream(next, ctx);
	struct msg stack[LPT_STACK];
	struct msg *m = n <= LPT_STACK ? stack : malloc(n * sizeof(*m));
	if (!m)
		return stream(next, ctx);
	size_t k = 0;
	while (k < n && next(ctx, &m[k].p, &m[k].len, &m[k].out))
		k++;
	qsort(m, k, sizeof(*m), msg_cmp);
	struct msg_src s = { m, k, 0 };
	stream(msg_next, &s);
	if (m != stack)
		free(m);
	return true;
}

static bool chunk_next(void *ctx, const uint8_t **buf, size_t *len, uint8_t **out)
{
	struct chunk_src *c = ctx;
	while (c->i < c->n && c->skip && c->skip[c->i])
		c->i++;
	if (c->i == c->n)
		return false;
	*buf = c->base + c->off;
	*len = c->lens[c->i];
	*out = c->ids[c->i].b;
	c->off += c->lens[c->i];
	c->i++;
	return true;
}
#endif

void dmar_hash2(const void *a, size_t alen, const void *b, size_t blen, struct dmar_id *outa,
		struct dmar_id *outb)
{
	struct iovec v[2] = { { (void *)a, alen }, { (void *)b, blen } };
	struct dmar_id o[2];
	/* Through a copy: outa and outb may be the same id. */
	dmar_hash_many(v, 2, o);
	*outa = o[0];
	*outb = o[1];
}

void dmar_hash_many(const struct iovec *bufs, size_t n, struct dmar_id *outs)
{
#ifdef DMAR_SHA256_HW
	struct many_src m = { bufs, n, 0, outs };
	if (stream_lpt(many_next, &m, n))
		return;
#endif
	for (size_t i = 0; i < n; i++)
		ossl_hash(bufs[i].iov_base, bufs[i].iov_len, &outs[i]);
}

void dmar_hash_chunks(const uint8_t *base, const uint32_t *lens, const uint8_t *skip, size_t n,
		      struct dmar_id *ids)
{
#ifdef DMAR_SHA256_HW
	struct chunk_src c = { base, lens, skip, n, 0, 0, ids };
	if (stream_lpt(chunk_next, &c, n))
		return;
#endif
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (skip && skip[i])
			continue;
		ossl_hash(base + off, lens[i], &ids[i]);
		off += lens[i];
	}
}

void dmar_hash_iov(const struct iovec *iov, int n, struct dmar_id *out)
{
#ifdef DMAR_SHA256_HW
	if (dmar_hash_hw()) {
		struct dmar_sha256_ctx s;
		dmar_sha256_init(&s);
		for (int i = 0; i < n; i++)
			dmar_sha256_update(&s, iov[i].iov_base, iov[i].iov_len);
		dmar_sha256_final(&s, out->b);
		return;
	}
#endif
	soft_hash_iov(iov, n, out);
}

struct dmar_hash_ctx *dmar_hash_ctx_new(void)
{
	struct dmar_hash_ctx *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
#ifdef DMAR_SHA256_HW
	/* The engine is chosen once, for the context's whole life. */
	if ((h->hw = dmar_hash_hw())) {
		dmar_sha256_init(&h->s);
		return h;
	}
#endif
	pthread_once(&md_once, md_init);
	if (have_ossl && (h->ctx = C.md_ctx_new()) && !C.digest_init_ex(h->ctx, C.sha256, NULL)) {
		C.md_ctx_free(h->ctx);
		h->ctx = NULL;
	}
	if (!h->ctx)
		dmar_sha256_sw_init(&h->sw);
	return h;
}

void dmar_hash_ctx_update(struct dmar_hash_ctx *h, const void *buf, size_t len)
{
#ifdef DMAR_SHA256_HW
	if (h->hw) {
		dmar_sha256_update(&h->s, buf, len);
		return;
	}
#endif
	if (h->ctx)
		abort_on(!C.digest_update(h->ctx, buf, len));
	else
		dmar_sha256_sw_update(&h->sw, buf, len);
}

void dmar_hash_ctx_final(struct dmar_hash_ctx *h, struct dmar_id *out)
{
#ifdef DMAR_SHA256_HW
	if (h->hw) {
		dmar_sha256_final(&h->s, out->b);
		dmar_sha256_init(&h->s);
		return;
	}
#endif
	unsigned int n = 0;
	if (h->ctx) {
		abort_on(!C.digest_final_ex(h->ctx, out->b, &n) || !C.digest_init_ex(h->ctx, C.sha256, NULL));
	} else {
		dmar_sha256_sw_final(&h->sw, out->b);
		dmar_sha256_sw_init(&h->sw);
	}
}

void dmar_hash_ctx_free(struct dmar_hash_ctx *h)
{
	if (!h)
		return;
	if (h->ctx)
		C.md_ctx_free(h->ctx);
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
