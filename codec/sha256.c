/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 (FIPS 180-4) on the SHA extensions, and sixteen messages at a
 * time on AVX-512 (dmar_sha256_stream_x16).  The state lives in the
 * two-register layout sha256rnds2 wants (ABEF, CDGH) only inside a run of
 * blocks; between runs it is the plain H0..H7 array, so a lane can switch
 * from a message's own blocks to its padding block(s) and the two-lane
 * kernel can run for as many blocks as both lanes have left.
 *
 * Every function that touches the intrinsics carries the target attribute
 * instead of the whole file being built with -msha or -mavx512f: the rest
 * of the binary must run on CPUs without them, and hash.c only calls in
 * here after dmar_sha256_cpu() or dmar_sha256_x16_cpu() said yes.
 *
 * At the end, SHA-256 in portable C: what hashes where there is neither
 * SHA-NI nor a libcrypto to load.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "sha256.h"

static const uint32_t K[64] __attribute__((aligned(16))) = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t IV[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* Feed len bytes to a message whose state is st, len_so_far bytes so far
 * (a partial block of len_so_far % 64 of them in buf): whole blocks go to
 * blocks, the tail waits in buf.  The buffering of both update paths. */
static void feed(uint32_t st[8], uint64_t *len_so_far, uint8_t buf[64], const uint8_t *p, size_t len,
		 void (*blocks)(uint32_t st[8], const uint8_t *p, size_t nb))
{
	size_t fill = (size_t)(*len_so_far % 64);
	*len_so_far += len;
	if (fill) {
		size_t n = 64 - fill < len ? 64 - fill : len;
		memcpy(buf + fill, p, n);
		p += n;
		len -= n;
		if (fill + n < 64)
			return;
		blocks(st, buf, 1);
	}
	if (len >= 64) {
		blocks(st, p, len / 64);
		p += len / 64 * 64;
		len %= 64;
	}
	if (len)
		memcpy(buf, p, len);
}

#ifdef DMAR_SHA256_HW

#include <cpuid.h>
#include <immintrin.h>

#define TARGET __attribute__((target("sha,sse4.1,ssse3")))

bool dmar_sha256_cpu(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	if (!(c & bit_SSE4_1) || !(c & bit_SSSE3))
		return false;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	return (b & (1u << 29)) != 0; /* CPUID.(EAX=7,ECX=0):EBX.SHA */
}

/* H0..H7 <-> (ABEF, CDGH). */
TARGET static inline void load_state(const uint32_t st[8], __m128i *abef, __m128i *cdgh)
{
	__m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[0]), 0xB1); /* CDAB */
	__m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[4]), 0x1B); /* EFGH */
	*abef = _mm_alignr_epi8(dcba, hgfe, 8);
	*cdgh = _mm_blend_epi16(hgfe, dcba, 0xF0);
}

TARGET static inline void store_state(uint32_t st[8], __m128i abef, __m128i cdgh)
{
	__m128i feba = _mm_shuffle_epi32(abef, 0x1B);
	__m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
	_mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(feba, dchg, 0xF0));
	_mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(dchg, feba, 8));
}

/*
 * Rounds 4g..4g+3 of one lane.  M[0..3] is a ring of the last four
 * schedule words groups; with g a constant every branch folds away.
 * The schedule for group g+1 is finished here (msg2) and the first half
 * for group g+3 started (msg1), as in Intel's reference ordering: each
 * instruction's input is ready well before the rounds that need it.
 */
#define QROUND(g, S0, S1, M, p)                                                                        \
	do {                                                                                           \
		if ((g) < 4)                                                                           \
			M[(g) & 3] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)((p) + 16 * (g))), \
						      bswap);                                          \
		__m128i t_ = _mm_add_epi32(M[(g) & 3], _mm_load_si128((const __m128i *)&K[4 * (g)])); \
		S1 = _mm_sha256rnds2_epu32(S1, S0, t_);                                                \
		if ((g) >= 3 && (g) <= 14)                                                             \
			M[((g) + 1) & 3] = _mm_sha256msg2_epu32(                                       \
				_mm_add_epi32(M[((g) + 1) & 3], _mm_alignr_epi8(M[(g) & 3], M[((g) + 3) & 3], 4)), \
				M[(g) & 3]);                                                           \
		S0 = _mm_sha256rnds2_epu32(S0, S1, _mm_shuffle_epi32(t_, 0x0E));                       \
		if ((g) >= 1 && (g) <= 12)                                                             \
			M[((g) + 3) & 3] = _mm_sha256msg1_epu32(M[((g) + 3) & 3], M[(g) & 3]);         \
	} while (0)

#define ROUNDS16(Q)                                                                                    \
	do {                                                                                           \
		Q(0); Q(1); Q(2); Q(3); Q(4); Q(5); Q(6); Q(7);                                        \
		Q(8); Q(9); Q(10); Q(11); Q(12); Q(13); Q(14); Q(15);                                  \
	} while (0)

/* nb consecutive 64-byte blocks at p into st. */
TARGET static void blocks1(uint32_t st[8], const uint8_t *p, size_t nb)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
	__m128i s0, s1, m[4];
	load_state(st, &s0, &s1);
	for (; nb; nb--, p += 64) {
		__m128i save0 = s0, save1 = s1;
#define Q1(g) QROUND(g, s0, s1, m, p)
		ROUNDS16(Q1);
#undef Q1
		s0 = _mm_add_epi32(s0, save0);
		s1 = _mm_add_epi32(s1, save1);
	}
	store_state(st, s0, s1);
}

/* nb blocks of two independent messages, group by group, so one lane's
 * rounds run while the other's wait on sha256rnds2's latency. */
TARGET static void blocks2(uint32_t sta[8], const uint8_t *pa, uint32_t stb[8], const uint8_t *pb, size_t nb)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
	__m128i a0, a1, b0, b1, ma[4], mb[4];
	load_state(sta, &a0, &a1);
	load_state(stb, &b0, &b1);
	for (; nb; nb--, pa += 64, pb += 64) {
		__m128i sa0 = a0, sa1 = a1, sb0 = b0, sb1 = b1;
#define Q2(g)                                  \
	do {                                   \
		QROUND(g, a0, a1, ma, pa);     \
		QROUND(g, b0, b1, mb, pb);     \
	} while (0)
		ROUNDS16(Q2);
#undef Q2
		a0 = _mm_add_epi32(a0, sa0);
		a1 = _mm_add_epi32(a1, sa1);
		b0 = _mm_add_epi32(b0, sb0);
		b1 = _mm_add_epi32(b1, sb1);
	}
	store_state(sta, a0, a1);
	store_state(stb, b0, b1);
}

/*
 * One message in flight: first its whole blocks, read in place, then the
 * one or two blocks of tail + 0x80 + zeros + bit length, built in pad.
 */
struct lane {
	uint32_t st[8];
	const uint8_t *p; /* next block */
	size_t nb;        /* blocks left in the current segment */
	size_t pad_nb;    /* 1 or 2 */
	bool in_pad;
	bool busy;
	uint8_t *out;
	uint8_t pad[128];
};

/* The padding block(s) of a message of total bytes whose last rem
 * (< 64) bytes are tail: tail, 0x80, zeros, the length in bits. */
static void lane_pad(struct lane *l, const uint8_t *tail, size_t rem, uint64_t total)
{
	l->pad_nb = rem < 56 ? 1 : 2;
	memset(l->pad, 0, sizeof(l->pad));
	if (rem)
		memcpy(l->pad, tail, rem);
	l->pad[rem] = 0x80;
	uint64_t bits = total << 3;
	uint8_t *e = l->pad + 64 * l->pad_nb - 8;
	for (int i = 0; i < 8; i++)
		e[i] = (uint8_t)(bits >> (56 - 8 * i));
}

static void lane_start(struct lane *l, const uint8_t *buf, size_t len, uint8_t *out)
{
	size_t full = len / 64, rem = len % 64;
	memcpy(l->st, IV, sizeof(IV));
	/* buf may be NULL when len is 0: no offset from it then. */
	lane_pad(l, rem ? buf + full * 64 : buf, rem, len);
	l->out = out;
	l->busy = true;
	if (full) {
		l->p = buf;
		l->nb = full;
		l->in_pad = false;
	} else {
		l->p = l->pad;
		l->nb = l->pad_nb;
		l->in_pad = true;
	}
}

/* k blocks of l are done: step on, into the padding, or out. */
static void lane_advance(struct lane *l, size_t k)
{
	l->p += 64 * k;
	l->nb -= k;
	if (l->nb)
		return;
	if (!l->in_pad) {
		l->p = l->pad;
		l->nb = l->pad_nb;
		l->in_pad = true;
		return;
	}
	for (int i = 0; i < 8; i++) {
		l->out[4 * i] = (uint8_t)(l->st[i] >> 24);
		l->out[4 * i + 1] = (uint8_t)(l->st[i] >> 16);
		l->out[4 * i + 2] = (uint8_t)(l->st[i] >> 8);
		l->out[4 * i + 3] = (uint8_t)l->st[i];
	}
	l->busy = false;
}

static void lane_finish(struct lane *l)
{
	while (l->busy) {
		size_t k = l->nb;
		blocks1(l->st, l->p, k);
		lane_advance(l, k);
	}
}

void dmar_sha256(const void *buf, size_t len, uint8_t out[32])
{
	struct lane l;
	lane_start(&l, buf, len, out);
	lane_finish(&l);
}

void dmar_sha256_init(struct dmar_sha256_ctx *c)
{
	memcpy(c->st, IV, sizeof(IV));
	c->len = 0;
}

void dmar_sha256_update(struct dmar_sha256_ctx *c, const void *buf, size_t len)
{
	feed(c->st, &c->len, c->buf, buf, len, blocks1);
}

void dmar_sha256_final(struct dmar_sha256_ctx *c, uint8_t out[32])
{
	/* A lane that has only its padding left: the buffered tail. */
	struct lane l;
	memcpy(l.st, c->st, sizeof(l.st));
	lane_pad(&l, c->buf, (size_t)(c->len % 64), c->len);
	l.out = out;
	l.busy = true;
	l.p = l.pad;
	l.nb = l.pad_nb;
	l.in_pad = true;
	lane_finish(&l);
}

static bool refill(struct lane *l, dmar_sha256_next_fn next, void *ctx)
{
	const uint8_t *buf;
	size_t len;
	uint8_t *out;
	if (!next(ctx, &buf, &len, &out))
		return false;
	lane_start(l, buf, len, out);
	return true;
}

/* Run the lanes in ls[0..n) to their end, two at a time while two are
 * busy, taking no new message. */
static void drain2(struct lane *ls, unsigned n)
{
	for (;;) {
		struct lane *a = NULL, *b = NULL;
		for (unsigned i = 0; i < n && !b; i++)
			if (ls[i].busy) {
				if (!a)
					a = &ls[i];
				else
					b = &ls[i];
			}
		if (!a)
			return;
		if (!b) {
			lane_finish(a);
			continue;
		}
		size_t k = a->nb < b->nb ? a->nb : b->nb;
		blocks2(a->st, a->p, b->st, b->p, k);
		lane_advance(a, k);
		lane_advance(b, k);
	}
}

void dmar_sha256_stream(dmar_sha256_next_fn next, void *ctx)
{
	struct lane l[2];
	l[0].busy = l[1].busy = false;
	if (!refill(&l[0], next, ctx))
		return;
	bool more = refill(&l[1], next, ctx);
	while (l[0].busy && l[1].busy) {
		size_t k = l[0].nb < l[1].nb ? l[0].nb : l[1].nb;
		blocks2(l[0].st, l[0].p, l[1].st, l[1].p, k);
		lane_advance(&l[0], k);
		lane_advance(&l[1], k);
		for (int i = 0; i < 2; i++)
			if (more && !l[i].busy)
				more = refill(&l[i], next, ctx);
	}
	/* No message left to pair with: whatever is in flight ends alone. */
	drain2(l, 2);
}

/*
 * Sixteen messages at once on AVX-512: lane i of each 32-bit element of
 * a zmm register is message i, and the rounds are the plain FIPS 180-4
 * ones (rotates, vpternlogd for Ch, Maj and the three-way xors), so the
 * work per byte is about 1.6 vector instructions against sha256rnds2's
 * fixed latency.  On the test VM's Xeon: 3.2-3.35 GB/s per core, where
 * two SHA-NI lanes give 2.2-2.3 (three give 2.3: sha256rnds2 is then at
 * its throughput).
 */
#define TARGET16 __attribute__((target("avx512f,avx512bw")))

bool dmar_sha256_x16_cpu(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
		return false;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	if (!(b & bit_AVX512F) || !(b & bit_AVX512BW))
		return false;
	/* The kernel must save the opmask and zmm registers (XCR0 bits 1, 2
	 * and 5-7), or the first context switch would lose them. */
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (lo & 0xe6) == 0xe6;
}

/* Block `blk` of every lane, byte-swapped and transposed: w[j] holds
 * word j of the block of each of the 16 lanes. */
TARGET16 static inline void load16(const uint8_t *const p[16], size_t off, __m512i w[16])
{
	const __m512i bswap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
	__m512i r[16], t[16];
	for (int l = 0; l < 16; l++)
		r[l] = _mm512_shuffle_epi8(_mm512_loadu_si512(p[l] + off), bswap);
	/* 4x4 transposes inside each 128-bit quarter ... */
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
		r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
		r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
		r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	/* ... then a 4x4 transpose of the quarters. */
	for (int k = 0; k < 4; k++) {
		__m512i a = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88);
		__m512i b = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xDD);
		__m512i c = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
		__m512i d = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xDD);
		w[k] = _mm512_shuffle_i32x4(a, c, 0x88);
		w[8 + k] = _mm512_shuffle_i32x4(a, c, 0xDD);
		w[4 + k] = _mm512_shuffle_i32x4(b, d, 0x88);
		w[12 + k] = _mm512_shuffle_i32x4(b, d, 0xDD);
	}
}

#define ROR16(x, n) _mm512_ror_epi32((x), (n))
#define XOR3(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0x96)
#define CH16(e, f, g) _mm512_ternarylogic_epi32((e), (f), (g), 0xCA)
#define MAJ16(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0xE8)
#define ADD16 _mm512_add_epi32

/* nb blocks of each of 16 lanes; S[k][i] is word k of lane i's state. */
TARGET16 static void blocks16(uint32_t S[8][16], const uint8_t *const p[16], size_t nb)
{
	__m512i s[8];
	for (int k = 0; k < 8; k++)
		s[k] = _mm512_load_si512(S[k]);
	for (size_t blk = 0; blk < nb; blk++) {
		__m512i w[16];
		load16(p, 64 * blk, w);
		__m512i a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
		for (int t = 0; t < 64; t++) {
			__m512i wt;
			if (t < 16) {
				wt = w[t];
			} else {
				__m512i w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
				__m512i s0 = XOR3(ROR16(w15, 7), ROR16(w15, 18), _mm512_srli_epi32(w15, 3));
				__m512i s1 = XOR3(ROR16(w2, 17), ROR16(w2, 19), _mm512_srli_epi32(w2, 10));
				wt = ADD16(ADD16(w[t & 15], s0), ADD16(w[(t - 7) & 15], s1));
				w[t & 15] = wt;
			}
			__m512i t1 = ADD16(ADD16(h, XOR3(ROR16(e, 6), ROR16(e, 11), ROR16(e, 25))),
					   ADD16(CH16(e, f, g), ADD16(wt, _mm512_set1_epi32((int)K[t]))));
			__m512i t2 = ADD16(XOR3(ROR16(a, 2), ROR16(a, 13), ROR16(a, 22)), MAJ16(a, b, c));
			h = g;
			g = f;
			f = e;
			e = ADD16(d, t1);
			d = c;
			c = b;
			b = a;
			a = ADD16(t1, t2);
		}
		s[0] = ADD16(s[0], a);
		s[1] = ADD16(s[1], b);
		s[2] = ADD16(s[2], c);
		s[3] = ADD16(s[3], d);
		s[4] = ADD16(s[4], e);
		s[5] = ADD16(s[5], f);
		s[6] = ADD16(s[6], g);
		s[7] = ADD16(s[7], h);
	}
	for (int k = 0; k < 8; k++)
		_mm512_store_si512(S[k], s[k]);
}

/*
 * With no message left to start, the x16 kernel's cost per call stays
 * that of 16 lanes however few are busy, so below this many the two
 * SHA-NI lanes (2.2 GB/s together against 3.3/16 GB/s a lane here) end
 * the stragglers faster.
 */
#define X16_TAIL 10

void dmar_sha256_stream_x16(dmar_sha256_next_fn next, void *ctx, bool hw_tail)
{
	struct lane l[16];
	uint32_t S[8][16] __attribute__((aligned(64)));
	const uint8_t *p[16];
	unsigned busy = 0;
	bool more = true;
	memset(S, 0, sizeof(S));
	for (int i = 0; i < 16; i++) {
		l[i].busy = false;
		if (more && (more = refill(&l[i], next, ctx)))
			busy++;
	}
	while (busy && (more || !hw_tail || busy > X16_TAIL)) {
		/* The states live in the lanes between calls (lane_start and
		 * lane_advance work there); an idle lane reads a busy lane's
		 * blocks and its result is thrown away. */
		size_t k = SIZE_MAX;
		const uint8_t *any = NULL;
		for (int i = 0; i < 16; i++)
			if (l[i].busy) {
				any = l[i].p;
				if (l[i].nb < k)
					k = l[i].nb;
			}
		for (int i = 0; i < 16; i++) {
			p[i] = l[i].busy ? l[i].p : any;
			if (l[i].busy)
				for (int w = 0; w < 8; w++)
					S[w][i] = l[i].st[w];
		}
		blocks16(S, p, k);
		for (int i = 0; i < 16; i++) {
			if (!l[i].busy)
				continue;
			for (int w = 0; w < 8; w++)
				l[i].st[w] = S[w][i];
			lane_advance(&l[i], k);
			if (!l[i].busy) {
				busy--;
				if (more && (more = refill(&l[i], next, ctx)))
					busy++;
			}
		}
	}
	drain2(l, 16);
}

#endif /* DMAR_SHA256_HW */

/* ---- portable C -------------------------------------------------------- */

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sw_block(uint32_t st[8], const uint8_t *p)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
		       p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
		uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	st[0] += a;
	st[1] += b;
	st[2] += c;
	st[3] += d;
	st[4] += e;
	st[5] += f;
	st[6] += g;
	st[7] += h;
}

void dmar_sha256_sw_init(struct dmar_sha256_sw *c)
{
	memcpy(c->st, IV, sizeof(IV));
	c->len = 0;
}

static void sw_blocks(uint32_t st[8], const uint8_t *p, size_t nb)
{
	for (; nb; nb--, p += 64)
		sw_block(st, p);
}

void dmar_sha256_sw_update(struct dmar_sha256_sw *c, const void *buf, size_t len)
{
	feed(c->st, &c->len, c->buf, buf, len, sw_blocks);
}

void dmar_sha256_sw_final(struct dmar_sha256_sw *c, uint8_t out[32])
{
	uint64_t bits = c->len * 8;
	size_t fill = (size_t)(c->len % 64);
	c->buf[fill++] = 0x80;
	if (fill > 56) {
		memset(c->buf + fill, 0, 64 - fill);
		sw_block(c->st, c->buf);
		fill = 0;
	}
	memset(c->buf + fill, 0, 56 - fill);
	for (int i = 0; i < 8; i++)
		c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	sw_block(c->st, c->buf);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(c->st[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->st[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->st[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->st[i];
	}
}

void dmar_sha256_sw(const void *buf, size_t len, uint8_t out[32])
{
	struct dmar_sha256_sw c;
	dmar_sha256_sw_init(&c);
	dmar_sha256_sw_update(&c, buf, len);
	dmar_sha256_sw_final(&c, out);
}
