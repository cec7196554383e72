/* SPDX-License-Identifier: MIT */
/*
 * sha256.h - SHA-256 on the x86 SHA extensions (SHA-NI), one message at a
 * time or two at once, or sixteen at once on AVX-512.
 *
 * A single SHA-256 stream is bound by the latency of sha256rnds2, not by
 * its throughput: each pair of rounds waits for the previous one.  Two
 * independent messages interleaved fill those bubbles, about 1.7x the
 * bytes per core of one stream (or of libcrypto, which hashes one).  The
 * codec hashes tens of thousands of independent chunks per GiB, so it
 * feeds them through two lanes (dmar_sha256_stream).
 *
 * hash.c is the only user: it picks this code or libcrypto at run time,
 * and the portable C code at the end where it has neither.
 * Everything here exists only where DMAR_SHA256_HW is defined (x86-64);
 * callers must also check dmar_sha256_cpu() (or, for the x16 stream,
 * dmar_sha256_x16_cpu()) before using it.
 */
#ifndef DMAR_SHA256_H
#define DMAR_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* SHA-256 in portable C (about a tenth of SHA-NI's speed): the last
 * resort, on any CPU. */
struct dmar_sha256_sw {
	uint32_t st[8];
	uint64_t len;
	uint8_t buf[64];
};
void dmar_sha256_sw_init(struct dmar_sha256_sw *c);
void dmar_sha256_sw_update(struct dmar_sha256_sw *c, const void *buf, size_t len);
void dmar_sha256_sw_final(struct dmar_sha256_sw *c, uint8_t out[32]);
void dmar_sha256_sw(const void *buf, size_t len, uint8_t out[32]);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DMAR_SHA256_HW 1

/* Does this CPU have SHA-NI and SSE4.1 (cpuid, checked once)? */
bool dmar_sha256_cpu(void);

/* out = SHA-256(buf[0..len)).  Only when dmar_sha256_cpu(). */
void dmar_sha256(const void *buf, size_t len, uint8_t out[32]);

/* One message that arrives in pieces (update any number of times, final
 * once).  Only when dmar_sha256_cpu(). */
struct dmar_sha256_ctx {
	uint32_t st[8];
	uint64_t len;      /* bytes so far */
	uint8_t buf[64];   /* a partial block: len % 64 bytes */
};
void dmar_sha256_init(struct dmar_sha256_ctx *c);
void dmar_sha256_update(struct dmar_sha256_ctx *c, const void *buf, size_t len);
/* Writes the digest; c must be initialised again before reuse. */
void dmar_sha256_final(struct dmar_sha256_ctx *c, uint8_t out[32]);

/* Source of messages for dmar_sha256_stream: store the next message's
 * bytes, length and digest destination and return true, or return false
 * when there are no more. */
typedef bool (*dmar_sha256_next_fn)(void *ctx, const uint8_t **buf, size_t *len, uint8_t **out);

/* Hash every message next() yields, two at a time: as soon as one lane
 * finishes its message it takes the next, so lengths need not match and
 * only the last message runs alone.  Only when dmar_sha256_cpu(). */
void dmar_sha256_stream(dmar_sha256_next_fn next, void *ctx);

/* Does this CPU (and kernel) have AVX-512 F and BW with the zmm state
 * saved? */
bool dmar_sha256_x16_cpu(void);

/* The same as dmar_sha256_stream, sixteen messages at a time on AVX-512
 * (about 1.45x two SHA-NI lanes on the test VM).  With hw_tail (only when
 * dmar_sha256_cpu()), the last few messages, once no new one comes, end
 * on two SHA-NI lanes instead of in a mostly idle x16 kernel.  Only when
 * dmar_sha256_x16_cpu(). */
void dmar_sha256_stream_x16(dmar_sha256_next_fn next, void *ctx, bool hw_tail);

#endif /* __x86_64__ */

#endif /* DMAR_SHA256_H */
