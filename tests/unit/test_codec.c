/* SPDX-License-Identifier: MIT */
/*
 * test_codec - encoder and decoder together (codec/encoder.h, decoder.h):
 * round trips in memory, thin artifacts against reference sets, byte
 * packs, the artifact layout of format.h checked by an independent parser,
 * and corruption: no single damaged byte may ever decode to wrong bytes.
 *
 * All data comes from fixed-seed PRNGs, so failures are reproducible.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "prng.h"

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "codec/block.h"
#include "codec/bytepack.h"
#include "codec/chunker.h"
#include "codec/decoder.h"
#include "codec/dl.h"
#include "codec/encoder.h"
#include "codec/format.h"
#include "codec/hash.h"
#include "codec/refset.h"
#include "codec/size.h"

/* --- data --------------------------------------------------------------- */

static const char *const vocab[] = {
	"the", "chunk", "arena", "node", "file", "memory", "remote", "copy", "bytes",
	"hash", "recipe", "block", "pack", "mount", "of", "and", "a", "to", "is", "in",
	"dictionary", "content", "defined", "boundary", "reference", "artifact", "fast",
};

/* English-like text: compresses ~3x with zstd -3. */
static void fill_text(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed ? seed : 1;
	size_t i = 0;
	while (i < len) {
		uint64_t r = xorshift64(&s);
		char w[32];
		int n;
		if (r % 11 == 0)
			n = snprintf(w, sizeof(w), "%u", (unsigned)(r >> 40) % 100000);
		else
			n = snprintf(w, sizeof(w), "%s", vocab[(r >> 8) % (sizeof(vocab) / sizeof(*vocab))]);
		for (int k = 0; k < n && i < len; k++)
			buf[i++] = (uint8_t)w[k];
		if (i < len)
			buf[i++] = (r >> 20) % 13 == 0 ? '\n' : (r >> 20) % 7 == 0 ? ',' : ' ';
	}
}

#define BIG (8u << 20)

static struct {
	uint8_t *random;  /* BIG random bytes */
	uint8_t *text;    /* BIG text bytes */
	struct dmar_bytepack *pack;
	struct dmar_bytepack *pack2; /* another pack, other id */
	struct dmar_chunker ck_default;
	struct dmar_chunker ck_small;   /* 256/1024/4096 */
} G;

static struct dmar_bytepack *mine(uint64_t seed)
{
	enum { N = 1000, L = 200 };
	uint8_t *buf = malloc(N * L);
	size_t *sizes = malloc(N * sizeof(*sizes));
	struct dmar_bytepack *p = NULL;
	struct dmar_error err = { 0 };
	if (!buf || !sizes)
		abort();
	fill_text(buf, N * L, seed);
	for (int i = 0; i < N; i++)
		sizes[i] = L;
	if (dmar_bytepack_train(buf, sizes, N, 8192, 1, &p, &err) < 0) {
		fprintf(stderr, "train: %s\n", err.msg);
		abort();
	}
	free(buf);
	free(sizes);
	return p;
}

static int group_setup(void **state)
{
	G.random = malloc(BIG);
	G.text = malloc(BIG);
	if (!G.random || !G.text)
		return -1;
	fill_random(G.random, BIG, 0xc0dec);
	fill_text(G.text, BIG, 0x7e57);
	G.pack = mine(1);
	G.pack2 = mine(2);
	if (dmar_bytepack_id(G.pack) == dmar_bytepack_id(G.pack2))
		return -1;
	if (dmar_chunker_init(&G.ck_default, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT,
			      DMAR_CHUNK_MAX_DEFAULT) < 0 ||
	    dmar_chunker_init(&G.ck_small, 256, 1024, 4096) < 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	free(G.random);
	free(G.text);
	dmar_bytepack_free(G.pack);
	dmar_bytepack_free(G.pack2);
	return 0;
}

/* --- growable output buffer, with optional failure injection ------------- */

struct gbuf {
	uint8_t *p;
	size_t len, cap;
	size_t fail_after; /* with fail_code: fail once len would pass this */
	int fail_code;
	unsigned calls;
};

static int gbuf_write(void *ctx, const void *buf, size_t len)
{
	struct gbuf *g = ctx;
	g->calls++;
	if (g->fail_code && g->len + len > g->fail_after)
		return g->fail_code;
	if (g->len + len > g->cap) {
		size_t cap = g->cap ? g->cap : 4096;
		while (cap < g->len + len)
			cap *= 2;
		uint8_t *p = realloc(g->p, cap);
		assert_non_null(p);
		g->p = p;
		g->cap = cap;
	}
	memcpy(g->p + g->len, buf, len);
	g->len += len;
	return 0;
}

static void gbuf_free(struct gbuf *g)
{
	free(g->p);
	memset(g, 0, sizeof(*g));
}

/* --- encode / decode helpers -------------------------------------------- */

static struct dmar_encoder_opts eopts(const struct dmar_chunker *ck, int level,
				      struct dmar_bytepack *pack, unsigned threads)
{
	struct dmar_encoder_opts o = {
		.chunker = *ck,
		.level = level,
		.pack = pack,
		.threads = threads,
	};
	return o;
}

#define PIECE_MIXED ((size_t)-1)

static size_t piece_len(size_t piece, size_t *k)
{
	static const size_t mix[] = { 1, 7, 4099, 65537, 3, 1u << 20, 250000 };
	if (piece != PIECE_MIXED)
		return piece;
	return mix[(*k)++ % (sizeof(mix) / sizeof(*mix))];
}

/* Encode in[0..len) fed in pieces (0: all at once) into out. */
static int encode(const struct dmar_encoder_opts *o, const uint8_t *in, size_t len, size_t piece,
		  struct gbuf *out, struct dmar_encode_stats *st, struct dmar_error *err)
{
	struct dmar_encoder *e = NULL;
	int r = dmar_encoder_new(&e, o, gbuf_write, out, err);
	if (r < 0)
		return r;
	size_t pos = 0, k = 0;
	while (r == 0 && pos < len) {
		size_t n = piece ? piece_len(piece, &k) : len;
		if (n > len - pos)
			n = len - pos;
		r = dmar_encoder_feed(e, in + pos, n);
		pos += n;
	}
	if (r == 0)
		r = dmar_encoder_finish(e, st);
	dmar_encoder_free(e);
	return r;
}

static void encode_ok(const struct dmar_encoder_opts *o, const uint8_t *in, size_t len,
		      size_t piece, struct gbuf *out, struct dmar_encode_stats *st)
{
	struct dmar_error err = { 0 };
	int r = encode(o, in, len, piece, out, st, &err);
	if (r < 0)
		print_error("encode: %d %s\n", r, err.msg);
	assert_int_equal(r, 0);
	assert_int_equal(err.code, 0);
}

static struct dmar_decoder_opts dopts(struct dmar_bytepack *pack, const struct dmar_refset *ref,
				      unsigned threads)
{
	struct dmar_decoder_opts o = {
		.pack = pack,
		.ref = ref,
		.threads = threads,
	};
	return o;
}

static int decode(const struct dmar_decoder_opts *o, const uint8_t *art, size_t alen,
		  struct gbuf *out, struct dmar_decode_stats *st, struct dmar_error *err)
{
	return dmar_decode_mem(o, art, alen, gbuf_write, out, st, err);
}

/* The file id as format.h defines it, computed from scratch. */
static void expected_file_id(const struct dmar_chunker *ck, const uint8_t *in, size_t len,
			     struct dmar_id *id, uint64_t *chunks)
{
	struct dmar_hash_ctx *h = dmar_hash_ctx_new();
	size_t pos = 0;
	*chunks = 0;
	assert_non_null(h);
	while (pos < len) {
		size_t n = dmar_chunker_next(ck, in + pos, len - pos, true);
		struct dmar_id cid;
		uint8_t le[4];
		dmar_hash(in + pos, n, &cid);
		dmar_put_le32(le, (uint32_t)n);
		dmar_hash_ctx_update(h, cid.b, DMAR_HASH_SIZE);
		dmar_hash_ctx_update(h, le, 4);
		pos += n;
		++*chunks;
	}
	dmar_hash_ctx_final(h, id);
	dmar_hash_ctx_free(h);
}

static unsigned log2u(uint32_t v)
{
	return 31u - (unsigned)__builtin_clz(v);
}

/* Header and end record as format.h lays them out. */
static void check_layout(const struct dmar_encoder_opts *o, const uint8_t *a, size_t alen,
			 size_t logical, uint64_t chunks)
{
	assert_true(alen >= DMAR_HDR_SIZE + DMAR_END_SIZE);
	assert_memory_equal(a, DMAR_MAGIC, 4);
	assert_int_equal(a[4], DMAR_VERSION);
	unsigned flags = (o->pack ? DMAR_HDR_PACK : 0) | (o->ref ? DMAR_HDR_THIN : 0) |
			 (o->meta.valid ? DMAR_HDR_META : 0);
	assert_int_equal(a[5], flags);
	assert_int_equal(a[6], log2u(o->chunker.min));
	assert_int_equal(a[7], log2u(o->chunker.avg));
	assert_int_equal(a[8], log2u(o->chunker.max));
	assert_int_equal(a[9] | a[10] | a[11], 0);
	assert_int_equal(dmar_get_le64(a + 28), o->pack ? dmar_bytepack_id(o->pack) : 0);
	struct dmar_id ck;
	dmar_hash(a, 36, &ck);
	assert_memory_equal(a + 36, ck.b, 4);

	/* Thin: the references record follows the header, naming the bases
	 * of the reference set in the order they were added. */
	if (o->ref) {
		unsigned k = dmar_refset_sources(o->ref);
		assert_true(alen >= DMAR_HDR_SIZE + 8 + 40 * (size_t)k + DMAR_END_SIZE);
		const uint8_t *r = a + DMAR_HDR_SIZE;
		assert_int_equal(r[0], DMAR_REC_REFS);
		assert_int_equal(r[1] | r[2] | r[3], 0);
		assert_int_equal(dmar_get_le32(r + 4), k);
		for (unsigned i = 0; i < k; i++) {
			struct dmar_id id;
			uint64_t size;
			dmar_refset_source(o->ref, i, &id, &size);
			assert_memory_equal(r + 8 + 40 * i, id.b, DMAR_HASH_SIZE);
			assert_int_equal(dmar_get_le64(r + 8 + 40 * i + 32), size);
		}
	} else {
		assert_int_not_equal(a[DMAR_HDR_SIZE], DMAR_REC_REFS);
	}

	const uint8_t *e = a + alen - DMAR_END_SIZE;
	assert_int_equal(e[0], DMAR_REC_END);
	for (int i = 1; i < 8; i++)
		assert_int_equal(e[i], 0);
	assert_int_equal(dmar_get_le64(e + 8), logical);
	assert_int_equal(dmar_get_le64(e + 16), chunks);
}

/*
 * Round trip in[0..len) with encoder options o, fed in pieces, decoded
 * with dec_threads; checks bytes, stats and layout.  Leaves the artifact in
 * art when art is not NULL.
 */
static void roundtrip(const struct dmar_encoder_opts *o, const uint8_t *in, size_t len,
		      size_t piece, unsigned dec_threads, struct gbuf *art_out)
{
	struct gbuf art = { 0 }, out = { 0 };
	struct dmar_encode_stats es;
	struct dmar_decode_stats ds;
	struct dmar_error err = { 0 };

	encode_ok(o, in, len, piece, &art, &es);
	struct dmar_decoder_opts d = dopts(o->pack, o->ref, dec_threads);
	int r = decode(&d, art.p, art.len, &out, &ds, &err);
	if (r < 0)
		print_error("decode of %zu bytes (level %d, pack %d, threads %u, piece %zu): %d %s\n",
			    len, o->level, o->pack != NULL, o->threads, piece, r, err.msg);
	assert_int_equal(r, 0);
	assert_int_equal(out.len, len);
	if (len)
		assert_memory_equal(out.p, in, len);

	/* Stats agree with each other and with the input. */
	assert_int_equal(es.logical, len);
	assert_int_equal(ds.logical, len);
	assert_int_equal(es.stored, art.len);
	assert_int_equal(ds.stored, art.len);
	assert_int_equal(es.chunks, ds.chunks);
	assert_int_equal(es.blocks, ds.blocks);
	assert_int_equal(es.raw_blocks, ds.raw_blocks);
	assert_int_equal(es.absent_chunks, ds.absent_chunks);
	assert_int_equal(es.absent_bytes, ds.absent_bytes);
	assert_true(es.raw_blocks <= es.blocks);
	assert_true((len > 0) == (es.chunks > 0));
	assert_true(es.chunks >= es.blocks);
	assert_memory_equal(es.file_id.b, ds.file_id.b, DMAR_HASH_SIZE);
	if (o->level == 0)
		assert_int_equal(es.raw_blocks, es.blocks);
	if (!o->ref)
		assert_int_equal(es.absent_chunks, 0);

	/* The recipe is the chunker's cut of the whole input. */
	struct dmar_id want;
	uint64_t chunks;
	expected_file_id(&o->chunker, in, len, &want, &chunks);
	assert_int_equal(es.chunks, chunks);
	assert_memory_equal(es.file_id.b, want.b, DMAR_HASH_SIZE);

	/* Header as the decoder saw it. */
	assert_int_equal(ds.header.version, DMAR_VERSION);
	assert_int_equal(ds.header.chunker.min, o->chunker.min);
	assert_int_equal(ds.header.chunker.avg, o->chunker.avg);
	assert_int_equal(ds.header.chunker.max, o->chunker.max);
	assert_int_equal(ds.header.pack_id, o->pack ? dmar_bytepack_id(o->pack) : 0);
	assert_int_equal(ds.header.meta.valid, o->meta.valid);
	if (o->meta.valid) {
		assert_int_equal(ds.header.meta.mode, o->meta.mode);
		assert_int_equal(ds.header.meta.mtime_sec, o->meta.mtime_sec);
		assert_int_equal(ds.header.meta.mtime_nsec, o->meta.mtime_nsec);
	}
	check_layout(o, art.p, art.len, len, es.chunks);
	/* The bases the artifact names, as the decoder reports them. */
	if (o->ref) {
		assert_int_equal(ds.refs, dmar_refset_sources(o->ref));
		for (unsigned i = 0; i < ds.refs; i++) {
			struct dmar_id id;
			uint64_t size;
			dmar_refset_source(o->ref, i, &id, &size);
			assert_memory_equal(ds.ref_ids[i].b, id.b, DMAR_HASH_SIZE);
			assert_int_equal(ds.ref_sizes[i], size);
		}
	} else {
		assert_int_equal(ds.refs, 0);
	}

	gbuf_free(&out);
	if (art_out)
		*art_out = art;
	else
		gbuf_free(&art);
}

/* --- independent parser of the artifact format --------------------------- */

struct parsed {
	unsigned nblocks;
	size_t block_off[64];   /* record start of each block */
	size_t block_end[64];   /* offset after its payload */
	uint64_t block_pos[64]; /* file offset of each block's first byte */
	uint64_t block_len[64]; /* file bytes of each block */
	unsigned nrefs;         /* bases named by the references record */
	struct dmar_id ref_id[DMAR_MAX_REFS];
	uint64_t ref_size[DMAR_MAX_REFS];
	size_t end_off;         /* of the end record */
	uint64_t chunks, logical;
	unsigned runs;          /* ABSENT|RUN table entries */
};

/*
 * Walk the artifact following format.h alone and recompute every check
 * from the original bytes; the decoder is not involved.
 */
static void parse_artifact(const uint8_t *a, size_t alen, const uint8_t *orig, size_t olen,
			   struct dmar_bytepack *pack, struct parsed *p)
{
	struct dmar_hash_ctx *endck = dmar_hash_ctx_new();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	size_t pos = DMAR_HDR_SIZE;
	uint64_t lpos = 0;

	assert_non_null(endck);
	assert_non_null(dc);
	assert_false(ZSTD_isError(ZSTD_DCtx_setParameter(dc, ZSTD_d_format, ZSTD_f_zstd1_magicless)));
	if (pack)
		assert_false(ZSTD_isError(ZSTD_DCtx_refDDict(dc, (const ZSTD_DDict *)dmar_bytepack_ddict(pack))));
	memset(p, 0, sizeof(*p));
	dmar_hash_ctx_update(endck, a, DMAR_HDR_SIZE);
	struct dmar_chunker chunker;
	assert_int_equal(dmar_chunker_init_log2(&chunker, a[6], a[7], a[8]), 0);
	unsigned max = chunker.max;

	/* References record: present exactly when THIN is set; hashed into
	 * the end check right after the header. */
	if (a[5] & DMAR_HDR_THIN) {
		assert_true(pos + 8 <= alen);
		const uint8_t *r = a + pos;
		assert_int_equal(r[0], DMAR_REC_REFS);
		assert_int_equal(r[1] | r[2] | r[3], 0);
		uint32_t k = dmar_get_le32(r + 4);
		assert_true(k >= 1 && k <= DMAR_MAX_REFS);
		assert_true(pos + 8 + 40 * (size_t)k <= alen);
		p->nrefs = k;
		for (uint32_t i = 0; i < k; i++) {
			memcpy(p->ref_id[i].b, r + 8 + 40 * i, DMAR_HASH_SIZE);
			p->ref_size[i] = dmar_get_le64(r + 8 + 40 * i + 32);
		}
		dmar_hash_ctx_update(endck, r, 8 + 40 * (size_t)k);
		pos += 8 + 40 * (size_t)k;
	}

	while (a[pos] == DMAR_REC_BLOCK) {
		assert_true(p->nblocks < 64);
		p->block_off[p->nblocks] = pos;
		p->block_pos[p->nblocks] = lpos;
		const uint8_t *h = a + pos;
		assert_true(pos + DMAR_BLOCK_HDR_SIZE <= alen);
		unsigned enc = h[1], n = dmar_get_le16(h + 2);
		uint32_t raw_len = dmar_get_le32(h + 4), stored = dmar_get_le32(h + 8);
		assert_true(enc <= DMAR_ENC_ZSTD_PACK);
		assert_true(n >= 1 && n <= DMAR_BLOCK_MAX_CHUNKS);
		assert_true(raw_len <= DMAR_BLOCK_MAX_RAW);
		if (enc == DMAR_ENC_ZSTD_PACK)
			assert_non_null(pack);
		if (enc == DMAR_ENC_ZSTD)
			assert_null(pack);

		/* The block check starts with the block's index and the file
		 * offset of its first byte, le64 each. */
		struct dmar_hash_ctx *bc = dmar_hash_ctx_new();
		assert_non_null(bc);
		uint8_t where[16];
		dmar_put_le64(where, p->nblocks);
		dmar_put_le64(where + 8, lpos);
		dmar_hash_ctx_update(bc, where, 16);
		dmar_hash_ctx_update(bc, h, 12);
		size_t t = pos + DMAR_BLOCK_HDR_SIZE;
		struct dmar_id *ids = calloc(n, sizeof(*ids));
		uint8_t *present = malloc(raw_len ? raw_len : 1);
		assert_non_null(ids);
		assert_non_null(present);
		size_t present_len = 0;
		unsigned i = 0;
		while (i < n) {
			uint32_t w = dmar_get_le32(a + t);
			uint32_t value = w & DMAR_CHUNK_VALUE_MASK;
			t += 4;
			if (w & DMAR_CHUNK_RUN) {
				/* A run of chunks held by the reference data:
				 * they are the file's next chunks as the
				 * chunker cuts them. */
				assert_true(w & DMAR_CHUNK_ABSENT);
				assert_true(value >= 1 && value <= n - i);
				for (uint32_t k = 0; k < value; k++) {
					size_t len = dmar_chunker_next(&chunker, orig + lpos, olen - lpos, true);
					assert_true(len >= 1);
					dmar_hash(orig + lpos, len, &ids[i]);
					if (k == 0)
						assert_memory_equal(a + t, ids[i].b, DMAR_HASH_SIZE);
					lpos += len;
					i++;
				}
				t += DMAR_HASH_SIZE;
				p->runs++;
				continue;
			}
			uint32_t len = value;
			assert_true(len >= 1 && len <= max);
			assert_true(lpos + len <= olen);
			struct dmar_id id;
			dmar_hash(orig + lpos, len, &id);
			if (w & DMAR_CHUNK_ABSENT) {
				assert_memory_equal(a + t, id.b, DMAR_HASH_SIZE);
				t += DMAR_HASH_SIZE;
			} else {
				assert_true(present_len + len <= raw_len);
				memcpy(present + present_len, orig + lpos, len);
				present_len += len;
			}
			ids[i++] = id;
			lpos += len;
		}
		assert_int_equal(present_len, raw_len);
		dmar_hash_ctx_update(bc, a + pos + DMAR_BLOCK_HDR_SIZE, t - pos - DMAR_BLOCK_HDR_SIZE);
		dmar_hash_ctx_update(bc, ids, (size_t)n * sizeof(*ids));
		struct dmar_id ck;
		dmar_hash_ctx_final(bc, &ck);
		assert_memory_equal(h + 12, ck.b, 8);
		dmar_hash_ctx_update(endck, h + 12, 8);
		dmar_hash_ctx_free(bc);

		assert_true(t + stored <= alen);
		if (enc == DMAR_ENC_RAW) {
			assert_int_equal(stored, raw_len);
			assert_memory_equal(a + t, present, raw_len);
		} else {
			/* One magicless frame, no checksum, no dict id. */
			ZSTD_frameHeader fh;
			assert_int_equal(ZSTD_getFrameHeader_advanced(&fh, a + t, stored,
								      ZSTD_f_zstd1_magicless), 0);
			assert_int_equal(fh.checksumFlag, 0);
			assert_int_equal(fh.dictID, 0);
			uint8_t *dec = malloc(raw_len + 1);
			assert_non_null(dec);
			size_t r = ZSTD_decompressDCtx(dc, dec, raw_len + 1, a + t, stored);
			assert_false(ZSTD_isError(r));
			assert_int_equal(r, raw_len);
			assert_memory_equal(dec, present, raw_len);
			free(dec);
		}
		free(present);
		free(ids);
		p->chunks += n;
		pos = t + stored;
		p->block_len[p->nblocks] = lpos - p->block_pos[p->nblocks];
		p->block_end[p->nblocks++] = pos;
	}
	assert_int_equal(lpos, olen);
	assert_int_equal(a[pos], DMAR_REC_END);
	assert_int_equal(pos + DMAR_END_SIZE, alen);
	p->end_off = pos;
	p->logical = lpos;
	assert_int_equal(dmar_get_le64(a + pos + 8), lpos);
	assert_int_equal(dmar_get_le64(a + pos + 16), p->chunks);
	dmar_hash_ctx_update(endck, a + pos, 24);
	struct dmar_id ck;
	dmar_hash_ctx_final(endck, &ck);
	assert_memory_equal(a + pos + 24, ck.b, 8);
	dmar_hash_ctx_free(endck);
	ZSTD_freeDCtx(dc);
}

/* --- round trips -------------------------------------------------------- */

static void test_empty(void **state)
{
	for (int level = 0; level <= 3; level += 3) {
		for (unsigned t = 1; t <= 2; t++) {
			struct dmar_encoder_opts o = eopts(&G.ck_default, level, NULL, t);
			struct gbuf art = { 0 };
			roundtrip(&o, G.random, 0, 0, t, &art);
			assert_int_equal(art.len, DMAR_HDR_SIZE + DMAR_END_SIZE);
			struct parsed p;
			parse_artifact(art.p, art.len, G.random, 0, NULL, &p);
			assert_int_equal(p.nblocks, 0);
			gbuf_free(&art);

			o.pack = G.pack;
			roundtrip(&o, G.random, 0, 0, t, NULL);
		}
	}
	/* The file id of an empty file is SHA-256 of the empty recipe. */
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 1);
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	encode_ok(&o, NULL, 0, 0, &art, &st);
	struct dmar_id e;
	dmar_hash("", 0, &e);
	assert_memory_equal(st.file_id.b, e.b, DMAR_HASH_SIZE);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.blocks, 0);
	gbuf_free(&art);
}

/* Sizes around the chunk limits, every option combination. */
static void test_sizes_matrix(void **state)
{
	const struct dmar_chunker *ck = &G.ck_default;
	const size_t sizes[] = { 1, 2, ck->min - 1, ck->min, ck->min + 1, ck->avg, ck->max,
				 ck->max + 1, 3 * ck->max + 17, 300000 };
	const size_t pieces[] = { 0, 1, 7, 4099, PIECE_MIXED };
	const uint8_t *srcs[] = { G.random, G.text };
	unsigned runs = 0;

	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++) {
		for (int kind = 0; kind < 2; kind++) {
			for (int level = 0; level <= 3; level += 3) {
				for (int pk = 0; pk < 2; pk++) {
					for (unsigned t = 1; t <= 2; t++) {
						struct gbuf first = { 0 };
						for (size_t pi = 0; pi < sizeof(pieces) / sizeof(*pieces); pi++) {
							/* 1-byte pieces only once per size. */
							if (pieces[pi] == 1 && (t != 1 || level != 3 || pk))
								continue;
							struct dmar_encoder_opts o =
								eopts(ck, level, pk ? G.pack : NULL, t);
							struct gbuf art = { 0 };
							roundtrip(&o, srcs[kind], sizes[si], pieces[pi],
								  3 - t, &art);
							runs++;
							/* Same bytes whatever the pieces
							 * and the thread count. */
							if (!first.p) {
								first = art;
								continue;
							}
							assert_int_equal(art.len, first.len);
							assert_memory_equal(art.p, first.p, art.len);
							gbuf_free(&art);
						}
						gbuf_free(&first);
					}
				}
			}
		}
	}
	print_message("  %u round trips\n", runs);
}

static void test_small_chunks(void **state)
{
	const size_t sizes[] = { 1, 255, 256, 257, 1024, 4096, 4097, 100000, 1000003 };
	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++) {
		for (int level = 0; level <= 3; level += 3) {
			struct dmar_encoder_opts o = eopts(&G.ck_small, level, NULL, 1);
			roundtrip(&o, G.text, sizes[si], 7, 1, NULL);
			o.threads = 2;
			o.pack = G.pack;
			roundtrip(&o, G.random, sizes[si], 4099, 2, NULL);
		}
	}
	/* min == avg == max: every chunk is 256 bytes, blocks fill up with
	 * the most chunks a block can hold. */
	struct dmar_chunker fixed;
	assert_int_equal(dmar_chunker_init(&fixed, 256, 256, 256), 0);
	struct dmar_encoder_opts o = eopts(&fixed, 3, NULL, 2);
	struct gbuf art = { 0 };
	roundtrip(&o, G.text, 3u << 20, PIECE_MIXED, 2, &art);
	struct parsed p;
	parse_artifact(art.p, art.len, G.text, 3u << 20, NULL, &p);
	assert_int_equal(p.chunks, (3u << 20) / 256);
	gbuf_free(&art);
}

/* Random data that repeats itself 2.5 MiB later, in one block: each copy
 * looks incompressible to the encoder's samples, and the repeat is beyond
 * level 3's own 2 MiB window.  The block is still compressed (a chunk id
 * occurs twice in it; the window covers the block), to about the bytes
 * of one copy, and decodes to the input. */
static void test_repeat_in_block(void **state)
{
	enum { R = 1u << 20, X = 3u << 19, LEN = 2 * R + X };
	uint8_t *in = malloc(LEN);
	assert_non_null(in);
	memcpy(in, G.random, R);
	memcpy(in + R, G.random + 2 * R, X);
	memcpy(in + R + X, G.random, R);
	for (int level = 1; level <= 3; level += 2) {
		struct dmar_encoder_opts o = eopts(&G.ck_default, level, NULL, 1);
		struct gbuf art = { 0 };
		struct dmar_encode_stats st;
		encode_ok(&o, in, LEN, 0, &art, &st);
		print_message("  random with a 1 MiB repeat 2.5 MiB on, level %d: %llu blocks (%llu raw), %zu bytes\n",
			      level, (unsigned long long)st.blocks, (unsigned long long)st.raw_blocks, art.len);
		assert_int_equal(st.blocks, 1);
		assert_int_equal(st.raw_blocks, 0);
		assert_true(art.len < R + X + R / 16);
		gbuf_free(&art);
		roundtrip(&o, in, LEN, 0, 1, NULL);
	}
	free(in);
}

static void test_large(void **state)
{
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	struct parsed p;

	/* 8 MiB of random data: many blocks, none worth compressing. */
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 2);
	roundtrip(&o, G.random, BIG, 4099, 2, &art);
	parse_artifact(art.p, art.len, G.random, BIG, NULL, &p);
	/* The block size is the encoder's choice (block.h); the format
	 * caps a block at DMAR_BLOCK_MAX_RAW bytes. */
	assert_true(p.nblocks >= 2);
	print_message("  random 8 MiB: %u blocks, %llu chunks, %zu bytes\n", p.nblocks,
		      (unsigned long long)p.chunks, art.len);
	assert_true(art.len < BIG + BIG / 100);
	gbuf_free(&art);
	encode_ok(&o, G.random, BIG, 0, &art, &st);
	assert_int_equal(st.raw_blocks, st.blocks);
	gbuf_free(&art);

	/* 8 MiB of text: compresses, with and without the pack. */
	for (int pk = 0; pk < 2; pk++) {
		for (unsigned t = 1; t <= 2; t++) {
			o = eopts(&G.ck_default, 3, pk ? G.pack : NULL, t);
			roundtrip(&o, G.text, BIG, PIECE_MIXED, t, &art);
			parse_artifact(art.p, art.len, G.text, BIG, o.pack, &p);
			print_message("  text 8 MiB, pack %d, threads %u: %u blocks, %zu bytes\n", pk,
				      t, p.nblocks, art.len);
			assert_true(art.len < BIG / 2);
			gbuf_free(&art);
		}
	}
	/* Level 0 stores. */
	o = eopts(&G.ck_default, 0, NULL, 1);
	roundtrip(&o, G.text, BIG, 65536, 1, &art);
	assert_true(art.len > BIG);
	parse_artifact(art.p, art.len, G.text, BIG, NULL, &p);
	gbuf_free(&art);
	/* Level 19 on a smaller piece. */
	o = eopts(&G.ck_default, 19, G.pack, 2);
	roundtrip(&o, G.text, 1u << 20, 0, 1, NULL);
	/* The highest level the header allows. */
	o = eopts(&G.ck_small, 22, NULL, 1);
	roundtrip(&o, G.text, 100000, 0, 1, NULL);
}

/* dmar_dl_open: the first soname that loads, every symbol into the
 * table; a clear message when none loads or a symbol is missing. */
static void test_dl_open(void **state)
{
	(void)state;
	struct t {
		size_t (*len)(const char *);
		int (*cmp)(const char *, const char *);
	} t = { 0 };
	const struct dmar_dl_sym syms[] = { { "strlen", offsetof(struct t, len) }, { "strcmp", offsetof(struct t, cmp) } };
	char msg[256];
	const char *const good[] = { "libdmar-no-such.so.9", "libc.so.6" };
	assert_non_null(dmar_dl_open(good, 2, "libc6", syms, 2, &t, msg, sizeof(msg)));
	assert_int_equal(t.len("four"), 4);
	assert_int_equal(t.cmp("a", "a"), 0);

	const char *const none[] = { "libdmar-no-such.so.9", "libdmar-no-such.so.8" };
	assert_null(dmar_dl_open(none, 2, "dmar-nothing", syms, 2, &t, msg, sizeof(msg)));
	assert_non_null(strstr(msg, "none of libdmar-no-such.so.9, libdmar-no-such.so.8 loads ("));
	assert_non_null(strstr(msg, "); install dmar-nothing"));

	const struct dmar_dl_sym bad[] = { { "strlen", 0 }, { "dmar_no_such_function", 0 } };
	assert_null(dmar_dl_open(good + 1, 1, "libc6", bad, 2, &t, msg, sizeof(msg)));
	assert_string_equal(msg, "libc.so.6: no symbol dmar_no_such_function");
}

/* Block buffers: a small request gets what it asks, the first of
 * DMAR_BLOCK_BUF_HUGE_MIN or more the whole max at once, on 2 MiB
 * boundaries (huge pages), and bigger requests up to max then reuse it
 * instead of mapping fresh memory for each (every page of which faults
 * in anew).  zstd's allocator splits at the same size. */
static void test_block_buf(void **state)
{
	(void)state;
	enum { MAX = 9u << 20 };
	struct dmar_block_buf b = { 0 };
	assert_int_equal(dmar_block_buf_reserve(&b, 1000, MAX), 0);
	assert_non_null(b.p);
	assert_int_equal(b.cap, 1000);
	uint8_t *small = b.p;
	assert_int_equal(dmar_block_buf_reserve(&b, 600, MAX), 0);
	assert_ptr_equal(b.p, small);
	assert_int_equal(b.cap, 1000);
	memset(b.p, 1, b.cap);

	assert_int_equal(dmar_block_buf_reserve(&b, DMAR_BLOCK_BUF_HUGE_MIN, MAX), 0);
	assert_int_equal(b.cap, MAX);
	assert_int_equal((uintptr_t)b.p % (2u << 20), 0);
	uint8_t *big = b.p;
	for (size_t n = DMAR_BLOCK_BUF_HUGE_MIN + 1; n <= MAX; n += 1u << 20) {
		assert_int_equal(dmar_block_buf_reserve(&b, n, MAX), 0);
		assert_ptr_equal(b.p, big);
		memset(b.p, 2, n);
	}
	dmar_block_buf_free(&b);
	assert_null(b.p);
	assert_int_equal(b.cap, 0);

	void *z = dmar_block_zalloc(NULL, DMAR_BLOCK_BUF_HUGE_MIN);
	assert_non_null(z);
	assert_int_equal((uintptr_t)z % (2u << 20), 0);
	memset(z, 3, DMAR_BLOCK_BUF_HUGE_MIN);
	dmar_block_zfree(NULL, z);
	z = dmar_block_zalloc(NULL, 100);
	assert_non_null(z);
	memset(z, 4, 100);
	dmar_block_zfree(NULL, z);
}

/* Zeros cut at max: blocks of maximum chunks, highly compressible. */
static void test_zeros(void **state)
{
	const size_t len = 5u << 20;
	uint8_t *z = calloc(1, len);
	assert_non_null(z);
	for (int level = 0; level <= 3; level += 3) {
		struct dmar_encoder_opts o = eopts(&G.ck_default, level, NULL, 2);
		struct gbuf art = { 0 };
		roundtrip(&o, z, len, 0, 2, &art);
		struct parsed p;
		parse_artifact(art.p, art.len, z, len, NULL, &p);
		assert_int_equal(p.chunks, len / DMAR_CHUNK_MAX_DEFAULT);
		if (level)
			assert_true(art.len < 4096);
		gbuf_free(&art);
	}
	free(z);
}

static void test_meta(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 1);
	o.meta.valid = true;
	o.meta.mode = 0100644;
	o.meta.mtime_sec = -1234567890123LL;
	o.meta.mtime_nsec = 999999999;
	roundtrip(&o, G.text, 50000, 0, 1, NULL);
	o.meta.mtime_sec = INT64_MAX;
	o.meta.mtime_nsec = 0;
	o.meta.mode = 0;
	roundtrip(&o, G.text, 1, 0, 1, NULL);
}

/* Encoding through space/commit and from a file descriptor. */
static void progress_cb(void *ctx, uint64_t n)
{
	uint64_t *last = ctx;
	assert_true(n > *last);
	*last = n;
}

static void test_space_commit_fd(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 2);
	struct gbuf ref = { 0 }, art = { 0 }, out = { 0 };
	struct dmar_encode_stats st;
	struct dmar_encoder *e;
	const size_t len = 5u << 20;

	encode_ok(&o, G.text, len, 0, &ref, &st);

	/* space/commit, in odd amounts, with commit(0) in between. */
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	size_t pos = 0;
	uint64_t s = 99;
	while (pos < len) {
		uint8_t *dst;
		size_t cap;
		dmar_encoder_space(e, &dst, &cap);
		assert_true(cap >= 1);
		size_t n = 1 + (size_t)(xorshift64(&s) % 100000);
		if (n > cap)
			n = cap;
		if (n > len - pos)
			n = len - pos;
		memcpy(dst, G.text + pos, n);
		assert_int_equal(dmar_encoder_commit(e, n), 0);
		assert_int_equal(dmar_encoder_commit(e, 0), 0);
		pos += n;
		assert_int_equal(dmar_encoder_stats(e)->logical, pos);
	}
	/* More than the space offered is refused. */
	uint8_t *dst;
	size_t cap;
	dmar_encoder_space(e, &dst, &cap);
	assert_int_equal(dmar_encoder_commit(e, cap + 1), -EINVAL);
	assert_int_equal(dmar_encoder_finish(e, &st), 0);
	/* Finished: no second finish, no more input. */
	assert_int_equal(dmar_encoder_finish(e, &st), -EINVAL);
	assert_int_equal(dmar_encoder_feed(e, "x", 1), -EINVAL);
	dmar_encoder_free(e);
	assert_int_equal(art.len, ref.len);
	assert_memory_equal(art.p, ref.p, ref.len);
	gbuf_free(&art);

	/* feed_fd from a temp file. */
	char path[] = "/tmp/test_codec.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(write(fd, G.text, len), (ssize_t)len);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	uint64_t last = 0;
	assert_int_equal(dmar_encoder_feed_fd(e, fd, progress_cb, &last), 0);
	assert_int_equal(dmar_encoder_finish(e, &st), 0);
	dmar_encoder_free(e);
	close(fd);
	assert_int_equal(art.len, ref.len);
	assert_memory_equal(art.p, ref.p, ref.len);

	/* feed_fd on a bad fd reports the read error. */
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &out, &err), 0);
	assert_int_equal(dmar_encoder_feed_fd(e, -1, NULL, NULL), -EBADF);
	assert_true(err.msg[0] != '\0');
	dmar_encoder_free(e);
	dmar_encoder_free(NULL);

	gbuf_free(&art);
	gbuf_free(&ref);
	gbuf_free(&out);
}

/* The decoder reading through a callback that returns short counts. */
struct slow_reader {
	const uint8_t *p;
	size_t left;
	uint64_t s;
	size_t max;
	int fail_code; /* returned once fail_at bytes have been read */
	size_t fail_at, done;
};

static ssize_t slow_read(void *ctx, void *buf, size_t len)
{
	struct slow_reader *r = ctx;
	if (r->fail_code && r->done >= r->fail_at)
		return r->fail_code;
	size_t n = 1 + (size_t)(xorshift64(&r->s) % r->max);
	if (n > len)
		n = len;
	if (n > r->left)
		n = r->left;
	memcpy(buf, r->p, n);
	r->p += n;
	r->left -= n;
	r->done += n;
	return (ssize_t)n;
}

static void test_decode_stream(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, G.pack, 2);
	struct gbuf art = { 0 };
	const size_t len = 5u << 20;
	struct dmar_encode_stats es;

	encode_ok(&o, G.text, len, 0, &art, &es);
	static const size_t maxes[] = { 1, 7, 4099, 1u << 20 };
	for (size_t m = 0; m < 4; m++) {
		for (unsigned t = 1; t <= 2; t++) {
			struct slow_reader rd = { art.p, art.len, m + 1, maxes[m], 0, 0, 0 };
			struct gbuf out = { 0 };
			struct dmar_decode_stats ds;
			struct dmar_error err = { 0 };
			struct dmar_decoder_opts d = dopts(G.pack, NULL, t);
			uint64_t last = 0;
			/* 1-byte reads of 2 MiB are slow: only the start. */
			if (maxes[m] == 1) {
				rd.left = 100000;
				int r = dmar_decode(&d, slow_read, &rd, gbuf_write, &out, progress_cb,
						    &last, &ds, &err);
				assert_int_equal(r, -ENODATA);
				assert_true(err.msg[0] != '\0');
				gbuf_free(&out);
				continue;
			}
			int r = dmar_decode(&d, slow_read, &rd, gbuf_write, &out, progress_cb, &last,
					    &ds, &err);
			assert_int_equal(r, 0);
			assert_int_equal(out.len, len);
			assert_memory_equal(out.p, G.text, len);
			assert_true(last <= len);
			gbuf_free(&out);
		}
	}

	/* Read errors surface as they are. */
	for (size_t at = 0; at < art.len; at += art.len / 7) {
		struct slow_reader rd = { art.p, art.len, 5, 65536, -EIO, at, 0 };
		struct gbuf out = { 0 };
		struct dmar_error err = { 0 };
		struct dmar_decoder_opts d = dopts(G.pack, NULL, 2);
		int r = dmar_decode(&d, slow_read, &rd, gbuf_write, &out, NULL, NULL, NULL, &err);
		assert_int_equal(r, -EIO);
		assert_int_equal(err.code, -EIO);
		assert_true(err.msg[0] != '\0');
		assert_true(out.len <= len);
		assert_memory_equal(out.p ? out.p : (uint8_t *)"", G.text, out.len);
		gbuf_free(&out);
	}

	/* Write errors too; NULL write only tests. */
	for (size_t at = 0; at < len; at += len / 3) {
		struct gbuf out = { .fail_after = at, .fail_code = -ENOSPC };
		struct dmar_error err = { 0 };
		struct dmar_decoder_opts d = dopts(G.pack, NULL, 2);
		assert_int_equal(decode(&d, art.p, art.len, &out, NULL, &err), -ENOSPC);
		assert_int_equal(err.code, -ENOSPC);
		gbuf_free(&out);
	}
	struct dmar_decoder_opts d = dopts(G.pack, NULL, 1);
	struct dmar_decode_stats ds;
	assert_int_equal(dmar_decode_mem(&d, art.p, art.len, NULL, NULL, &ds, NULL), 0);
	assert_int_equal(ds.logical, len);
	assert_memory_equal(ds.file_id.b, es.file_id.b, DMAR_HASH_SIZE);
	gbuf_free(&art);
}

static void test_encoder_write_errors(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 2);
	const size_t len = 5u << 20;
	/* Failing at the header, in the first block, later on, at the end. */
	const size_t ats[] = { 0, 39, 40, 1000, 1u << 20, 3u << 20 };
	for (size_t i = 0; i < sizeof(ats) / sizeof(*ats); i++) {
		for (unsigned t = 1; t <= 2; t++) {
			o.threads = t;
			struct gbuf art = { .fail_after = ats[i], .fail_code = -EIO };
			struct dmar_error err = { 0 };
			int r = encode(&o, G.random, len, 4099, &art, NULL, &err);
			assert_int_equal(r, -EIO);
			assert_int_equal(err.code, -EIO);
			assert_true(err.msg[0] != '\0');
			gbuf_free(&art);
		}
	}
	/* Failing only at the end record. */
	struct gbuf ok = { 0 };
	struct dmar_encode_stats st;
	encode_ok(&o, G.text, 100000, 0, &ok, &st);
	struct gbuf art = { .fail_after = ok.len - 1, .fail_code = -EPIPE };
	assert_int_equal(encode(&o, G.text, 100000, 0, &art, NULL, NULL), -EPIPE);
	gbuf_free(&art);
	gbuf_free(&ok);
}

/*
 * Positional output (opts.pwrite): the workers write their own blocks at
 * their offsets, concurrently.  The artifact must be byte for byte the one
 * the write path makes, every byte written exactly once (no overlap, no
 * hole), and a failing write must end the encode with its error instead
 * of hanging the workers queued behind it.
 */
struct pbuf {
	pthread_mutex_t lock;
	uint8_t *p;
	size_t cap;
	uint8_t *seen;      /* 1 per byte written */
	size_t written, end;
	uint64_t fail_at;   /* with fail_code: fail a write that reaches this offset */
	int fail_code;
	bool overlap;
	unsigned in_flight;  /* calls running now */
	bool concurrent;     /* two calls ever ran at once */
};

static int pbuf_pwrite(void *ctx, const void *buf, size_t len, uint64_t off)
{
	struct pbuf *b = ctx;
	if (b->fail_code && off + len > b->fail_at)
		return b->fail_code;
	assert_true(off + len <= b->cap);
	pthread_mutex_lock(&b->lock);
	b->concurrent |= ++b->in_flight > 1;
	pthread_mutex_unlock(&b->lock);
	memcpy(b->p + off, buf, len);
	/* Long enough for a second writer, if the code let one in, to
	 * arrive while this one is still running. */
	usleep(200);
	pthread_mutex_lock(&b->lock);
	b->in_flight--;
	for (size_t i = 0; i < len; i++)
		b->overlap |= b->seen[off + i]++ != 0;
	b->written += len;
	if (off + len > b->end)
		b->end = off + len;
	pthread_mutex_unlock(&b->lock);
	return 0;
}

static void pbuf_init(struct pbuf *b, size_t cap)
{
	memset(b, 0, sizeof(*b));
	pthread_mutex_init(&b->lock, NULL);
	b->cap = cap;
	b->p = calloc(1, cap);
	b->seen = calloc(1, cap);
	assert_non_null(b->p);
	assert_non_null(b->seen);
}

static void pbuf_free(struct pbuf *b)
{
	pthread_mutex_destroy(&b->lock);
	free(b->p);
	free(b->seen);
}

static int encode_positional(const struct dmar_encoder_opts *base, const uint8_t *in, size_t len,
			     struct pbuf *b, struct dmar_encode_stats *st, struct dmar_error *err)
{
	struct dmar_encoder_opts o = *base;
	o.pwrite = pbuf_pwrite;
	o.pwrite_ctx = b;
	struct dmar_encoder *e = NULL;
	/* No write callback: the positional one must be enough. */
	int r = dmar_encoder_new(&e, &o, NULL, NULL, err);
	if (r < 0)
		return r;
	size_t pos = 0, k = 0;
	while (r == 0 && pos < len) {
		size_t n = piece_len(PIECE_MIXED, &k);
		if (n > len - pos)
			n = len - pos;
		r = dmar_encoder_feed(e, in + pos, n);
		pos += n;
	}
	if (r == 0)
		r = dmar_encoder_finish(e, st);
	dmar_encoder_free(e);
	return r;
}

/* The positional tests' input: 7 MiB of text then random bytes (zstd and
 * raw blocks of different sizes, so every offset depends on the blocks
 * before it), and a reference set holding the first 3 MiB of the random
 * bytes, for thin artifacts. */
#define POSITIONAL_LEN (13u << 20)
static uint8_t *positional_input(struct dmar_refset **rs)
{
	uint8_t *in = malloc(POSITIONAL_LEN);
	assert_non_null(in);
	memcpy(in, G.text, 7u << 20);
	memcpy(in + (7u << 20), G.random, POSITIONAL_LEN - (7u << 20));
	struct dmar_error rerr = { 0 };
	assert_int_equal(dmar_refset_new(rs, &G.ck_default), 0);
	assert_int_equal(dmar_refset_add_mem(*rs, G.random, 3u << 20, 1, &rerr), 0);
	return in;
}

static void test_encoder_positional(void **state)
{
	(void)state;
	const size_t len = POSITIONAL_LEN;
	struct dmar_refset *rs;
	uint8_t *in = positional_input(&rs);
	const int levels[] = { 0, 3 };
	for (int thin = 0; thin < 2; thin++) {
		for (size_t li = 0; li < 2; li++) {
			for (unsigned t = 1; t <= 4; t++) {
				struct dmar_encoder_opts o = eopts(&G.ck_default, levels[li], NULL, t);
				o.ref = thin ? rs : NULL;
				struct gbuf want = { 0 };
				struct dmar_encode_stats ws, ps;
				encode_ok(&o, in, len, PIECE_MIXED, &want, &ws);
				struct pbuf b;
				pbuf_init(&b, len + (1u << 20));
				struct dmar_error err = { 0 };
				int r = encode_positional(&o, in, len, &b, &ps, &err);
				if (r < 0)
					print_error("positional: %d %s\n", r, err.msg);
				assert_int_equal(r, 0);
				assert_false(b.overlap);
				assert_false(b.concurrent);
				assert_int_equal(b.written, want.len);
				assert_int_equal(b.end, want.len);
				assert_memory_equal(b.p, want.p, want.len);
				assert_int_equal(ps.stored, want.len);
				assert_int_equal(ps.blocks, ws.blocks);
				assert_memory_equal(ps.file_id.b, ws.file_id.b, DMAR_HASH_SIZE);
				if (thin)
					assert_true(ps.absent_chunks > 0);
				pbuf_free(&b);

				/* Failing at the header, in an early block, in a late one,
				 * at the end record. */
				const uint64_t ats[] = { 0, 1000, 5u << 20, want.len - 1 };
				for (size_t i = 0; i < sizeof(ats) / sizeof(*ats); i++) {
					pbuf_init(&b, len + (1u << 20));
					b.fail_at = ats[i];
					b.fail_code = -ENOSPC;
					struct dmar_error ferr = { 0 };
					r = encode_positional(&o, in, len, &b, NULL, &ferr);
					assert_int_equal(r, -ENOSPC);
					assert_int_equal(ferr.code, -ENOSPC);
					assert_true(ferr.msg[0] != '\0');
					assert_false(b.overlap);
					pbuf_free(&b);
				}
				gbuf_free(&want);
			}
		}
	}
	dmar_refset_free(rs);
	free(in);
}

/*
 * The decoder's positional output (opts.pwrite): a writer thread writes
 * verified blocks at their offsets, maybe out of order.  The file must
 * come out whole with each byte written once; a failing write is the
 * decode's error; a damaged block is never written, nor anything after it.
 */
static void test_decoder_positional(void **state)
{
	(void)state;
	const size_t len = POSITIONAL_LEN;
	struct dmar_refset *rs;
	uint8_t *in = positional_input(&rs);
	for (int thin = 0; thin < 2; thin++) {
		for (int level = 0; level <= 3; level += 3) {
			struct dmar_encoder_opts eo = eopts(&G.ck_default, level, NULL, 2);
			eo.ref = thin ? rs : NULL;
			struct gbuf art = { 0 };
			struct dmar_encode_stats es;
			encode_ok(&eo, in, len, 0, &art, &es);
			for (unsigned t = 1; t <= 3; t++) {
				struct dmar_decoder_opts d = dopts(NULL, eo.ref, t);
				d.pwrite = pbuf_pwrite;
				struct pbuf b;
				pbuf_init(&b, len);
				d.pwrite_ctx = &b;
				struct dmar_decode_stats ds;
				struct dmar_error err = { 0 };
				int r = dmar_decode_mem(&d, art.p, art.len, NULL, NULL, &ds, &err);
				if (r < 0)
					print_error("positional decode: %d %s\n", r, err.msg);
				assert_int_equal(r, 0);
				assert_false(b.overlap);
				assert_false(b.concurrent);
				assert_int_equal(b.written, len);
				assert_int_equal(b.end, len);
				assert_memory_equal(b.p, in, len);
				assert_memory_equal(ds.file_id.b, es.file_id.b, DMAR_HASH_SIZE);
				pbuf_free(&b);

				const uint64_t ats[] = { 0, 5u << 20, len - 1 };
				for (size_t i = 0; i < sizeof(ats) / sizeof(*ats); i++) {
					pbuf_init(&b, len);
					b.fail_at = ats[i];
					b.fail_code = -ENOSPC;
					d.pwrite_ctx = &b;
					struct dmar_error ferr = { 0 };
					r = dmar_decode_mem(&d, art.p, art.len, NULL, NULL, NULL, &ferr);
					assert_int_equal(r, -ENOSPC);
					assert_int_equal(ferr.code, -ENOSPC);
					assert_true(ferr.msg[0] != '\0');
					pbuf_free(&b);
				}

				/* A byte of the last block's payload (raw random data)
				 * flipped; the blocks before it hold 4 MiB or more each. */
				art.p[art.len - 100] ^= 0x40;
				pbuf_init(&b, len);
				d.pwrite_ctx = &b;
				struct dmar_error cerr = { 0 };
				r = dmar_decode_mem(&d, art.p, art.len, NULL, NULL, NULL, &cerr);
				art.p[art.len - 100] ^= 0x40;
				assert_int_equal(r, -EBADMSG);
				/* Written: the three blocks before it, whole (the decoder
				 * waits for their writes before it returns), and nothing
				 * of the damaged one. */
				size_t p = 0;
				while (p < len && b.seen[p])
					p++;
				assert_true(p >= 12u << 20);
				assert_true(p < len);
				assert_int_equal(b.written, p);
				assert_memory_equal(b.p, in, p);
				pbuf_free(&b);
			}
			gbuf_free(&art);
		}
	}
	dmar_refset_free(rs);
	free(in);
}

static void expect_encoder_einval(const struct dmar_encoder_opts *o, dmar_write_fn w, const char *what)
{
	struct dmar_encoder *e = (struct dmar_encoder *)(uintptr_t)0x1;
	struct dmar_error err = { 0 };
	struct gbuf out = { 0 };
	int r = dmar_encoder_new(&e, o, w, &out, &err);
	if (r != -EINVAL)
		print_error("%s: got %d\n", what, r);
	assert_int_equal(r, -EINVAL);
	assert_int_equal(err.code, -EINVAL);
	assert_true(err.msg[0] != '\0');
	assert_ptr_equal(e, (void *)(uintptr_t)0x1);
	assert_int_equal(out.len, 0);
}

static void test_encoder_bad_opts(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 1);
	o.threads = 0;
	expect_encoder_einval(&o, gbuf_write, "threads 0");
	o = eopts(&G.ck_default, -1, NULL, 1);
	expect_encoder_einval(&o, gbuf_write, "level -1");
	o = eopts(&G.ck_default, 23, NULL, 1);
	expect_encoder_einval(&o, gbuf_write, "level 23");
	o = eopts(&G.ck_default, 3, NULL, 1);
	expect_encoder_einval(&o, NULL, "no write callback");
	memset(&o.chunker, 0, sizeof(o.chunker));
	expect_encoder_einval(&o, gbuf_write, "zero chunker");
	o = eopts(&G.ck_default, 3, NULL, 1);
	o.chunker.avg = 3000;
	expect_encoder_einval(&o, gbuf_write, "bad chunker");
	o = eopts(&G.ck_default, 3, NULL, 1);
	o.meta.valid = true;
	o.meta.mtime_nsec = 1000000000u;
	expect_encoder_einval(&o, gbuf_write, "nsec 1e9");

	/* A reference set cut with other sizes. */
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.random, 100000, 1, NULL), 0);
	o = eopts(&G.ck_default, 3, NULL, 1);
	o.ref = rs;
	expect_encoder_einval(&o, gbuf_write, "refset chunker");
	dmar_refset_free(rs);
}

/* --- index-only and info modes ------------------------------------------ */

struct index_ctx {
	uint64_t next_off;
	uint64_t chunks;
	struct dmar_hash_ctx *recipe;
	int fail_after; /* blocks; 0 = never */
	int blocks;
};

static int index_cb(void *ctx, uint64_t offset, const struct dmar_id *ids, const uint32_t *lens,
		    const uint8_t *data, unsigned n)
{
	struct index_ctx *x = ctx;
	if (x->fail_after && ++x->blocks > x->fail_after)
		return -ECANCELED;
	assert_int_equal(offset, x->next_off);
	assert_true(n >= 1);
	for (unsigned i = 0; i < n; i++) {
		struct dmar_id id;
		uint8_t le[4];
		dmar_hash(data, lens[i], &id);
		assert_memory_equal(id.b, ids[i].b, DMAR_HASH_SIZE);
		/* The data is the file's own bytes at that offset. */
		assert_memory_equal(data, G.text + x->next_off, lens[i]);
		dmar_put_le32(le, lens[i]);
		dmar_hash_ctx_update(x->recipe, ids[i].b, DMAR_HASH_SIZE);
		dmar_hash_ctx_update(x->recipe, le, 4);
		data += lens[i];
		x->next_off += lens[i];
		x->chunks++;
	}
	return 0;
}

static void test_index_only(void **state)
{
	const size_t len = 5u << 20;
	for (unsigned t = 1; t <= 2; t++) {
		struct index_ctx x = { 0 };
		x.recipe = dmar_hash_ctx_new();
		struct dmar_encoder_opts o = eopts(&G.ck_small, 0, NULL, t);
		o.on_chunks = index_cb;
		o.on_chunks_ctx = &x;
		struct dmar_encoder *e;
		struct dmar_encode_stats st;
		assert_int_equal(dmar_encoder_new(&e, &o, NULL, NULL, NULL), 0);
		assert_int_equal(dmar_encoder_feed(e, G.text, len), 0);
		assert_int_equal(dmar_encoder_finish(e, &st), 0);
		dmar_encoder_free(e);
		assert_int_equal(x.next_off, len);
		assert_int_equal(st.logical, len);
		assert_int_equal(st.chunks, x.chunks);
		assert_int_equal(st.stored, 0);
		struct dmar_id id, want;
		uint64_t n;
		dmar_hash_ctx_final(x.recipe, &id);
		expected_file_id(&G.ck_small, G.text, len, &want, &n);
		assert_memory_equal(id.b, want.b, DMAR_HASH_SIZE);
		assert_memory_equal(st.file_id.b, want.b, DMAR_HASH_SIZE);

		/* The callback's error stops the encoder. */
		x.fail_after = 1;
		x.blocks = 0;
		x.next_off = 0;
		struct dmar_error err = { 0 };
		assert_int_equal(dmar_encoder_new(&e, &o, NULL, NULL, &err), 0);
		int r = dmar_encoder_feed(e, G.text, len);
		if (r == 0)
			r = dmar_encoder_finish(e, &st);
		assert_int_equal(r, -ECANCELED);
		dmar_encoder_free(e);
		dmar_hash_ctx_free(x.recipe);
	}
}

struct info_ctx {
	uint64_t next_index, next_off, absent;
	const struct dmar_chunker *ck;
	const uint8_t *data;
};

/* With every length known (no thin chunks, or reference data given):
 * offsets, lengths and ids are all the file's. */
static void info_cb(void *ctx, uint64_t index, uint64_t offset, uint32_t len, unsigned absent,
		    const struct dmar_id *id)
{
	struct info_ctx *x = ctx;
	assert_int_equal(index, x->next_index);
	assert_int_equal(offset, x->next_off);
	assert_true(absent <= 3);
	/* The chunk is the chunker's cut at this offset. */
	size_t want = dmar_chunker_next(x->ck, x->data + offset, BIG - offset, true);
	assert_true(len >= 1);
	assert_true(len == want || len < want); /* the last one may be cut by eof */
	if (absent) {
		/* 1 and 2 carry the id from the table; 3 may not. */
		if (absent != 3)
			assert_non_null(id);
		if (id) {
			struct dmar_id h;
			dmar_hash(x->data + offset, len, &h);
			assert_memory_equal(h.b, id->b, DMAR_HASH_SIZE);
		}
		x->absent++;
	} else {
		assert_null(id);
	}
	x->next_index++;
	x->next_off += len;
}

static int fail_write(void *ctx, const void *buf, size_t len)
{
	fail_msg("info mode must not write");
	return -EIO;
}

static void test_info_mode(void **state)
{
	const size_t len = 3u << 20;
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, G.pack, 2);
	struct gbuf art = { 0 };
	struct dmar_encode_stats es;
	encode_ok(&o, G.text, len, 0, &art, &es);

	struct info_ctx x = { .ck = &G.ck_small, .data = G.text };
	/* No pack needed to look at the structure. */
	struct dmar_decoder_opts d = dopts(NULL, NULL, 1);
	d.info_only = true;
	d.on_chunk = info_cb;
	d.on_chunk_ctx = &x;
	struct dmar_decode_stats ds;
	assert_int_equal(dmar_decode_mem(&d, art.p, art.len, fail_write, NULL, &ds, NULL), 0);
	assert_int_equal(x.next_off, len);
	assert_int_equal(x.next_index, es.chunks);
	assert_int_equal(ds.logical, len);
	assert_int_equal(ds.chunks, es.chunks);
	assert_int_equal(ds.blocks, es.blocks);
	assert_int_equal(ds.stored, art.len);
	assert_int_equal(ds.header.pack_id, dmar_bytepack_id(G.pack));

	/* Thin: absent chunks reported with their ids. */
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.text, len / 2, 1, NULL), 0);
	o = eopts(&G.ck_small, 3, NULL, 1);
	o.ref = rs;
	gbuf_free(&art);
	encode_ok(&o, G.text, len, 0, &art, &es);
	memset(&x, 0, sizeof(x));
	x.ck = &G.ck_small;
	x.data = G.text;
	/* With the reference data, every chunk is known. */
	d.ref = rs;
	assert_int_equal(decode(&d, art.p, art.len, NULL, &ds, NULL), 0);
	assert_int_equal(x.next_off, len);
	assert_true(x.absent > 0);
	assert_int_equal(x.absent, es.absent_chunks);
	assert_int_equal(ds.absent_chunks, es.absent_chunks);
	assert_int_equal(ds.absent_bytes, es.absent_bytes);
	dmar_refset_free(rs);
	gbuf_free(&art);
}

/*
 * Info mode on a thin artifact without reference data (decoder.h): the
 * chunks of a RUN entry are absent == 2 (the first, id known, len 0) and 3
 * (the rest, id NULL, len 0); an offset is UINT64_MAX once it depends on
 * an unknown length.  What is reported may be unknown, never wrong.
 */
struct truth {
	uint64_t n;
	uint64_t off[4096];
	uint32_t len[4096];
	struct dmar_id id[4096];
	bool lost;      /* an unknown length was reported */
	uint64_t next;  /* expected index */
	unsigned wrong_len, wrong_off, wrong_id, wrong_kind, unknown;
};

static void truth_cb(void *ctx, uint64_t index, uint64_t offset, uint32_t len, unsigned absent,
		     const struct dmar_id *id)
{
	struct truth *t = ctx;
	assert_int_equal(index, t->next);
	assert_true(index < t->n);
	t->next++;
	t->wrong_kind += absent > 3 || (absent == 0 && id) || ((absent == 1 || absent == 2) && !id) ||
			 (absent == 3 && id);
	if (len == 0) {
		t->unknown++;
		t->wrong_len += absent < 2;
	} else {
		t->wrong_len += len != t->len[index];
	}
	/* UINT64_MAX is "unknown"; after an unknown length nothing else
	 * can be known. */
	if (offset == UINT64_MAX)
		t->lost = true;
	else
		t->wrong_off += t->lost || offset != t->off[index];
	if (len == 0)
		t->lost = true;
	if (id)
		t->wrong_id += memcmp(id->b, t->id[index].b, DMAR_HASH_SIZE) != 0;
}

static void test_info_thin_no_ref(void **state)
{
	const size_t len = 1u << 20;
	struct truth *t = calloc(1, sizeof(*t));
	assert_non_null(t);
	size_t pos = 0;
	while (pos < len) {
		size_t n = dmar_chunker_next(&G.ck_small, G.text + pos, len - pos, true);
		assert_true(t->n < 4096);
		t->off[t->n] = pos;
		t->len[t->n] = (uint32_t)n;
		dmar_hash(G.text + pos, n, &t->id[t->n]);
		t->n++;
		pos += n;
	}
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.text, len / 2, 1, NULL), 0);
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 1);
	o.ref = rs;
	struct gbuf art = { 0 };
	struct dmar_encode_stats es;
	encode_ok(&o, G.text, len, 0, &art, &es);

	struct dmar_decoder_opts d = dopts(NULL, NULL, 1);
	d.info_only = true;
	d.on_chunk = truth_cb;
	d.on_chunk_ctx = t;
	struct dmar_decode_stats ds;
	assert_int_equal(decode(&d, art.p, art.len, NULL, &ds, NULL), 0);
	assert_int_equal(ds.logical, len);
	assert_int_equal(ds.chunks, es.chunks);
	assert_int_equal(ds.absent_chunks, es.absent_chunks);
	print_message("  %llu chunks: %u of unknown length, %u wrong lengths, %u wrong offsets, "
		      "%u wrong ids, %u wrong kinds\n", (unsigned long long)t->n, t->unknown,
		      t->wrong_len, t->wrong_off, t->wrong_id, t->wrong_kind);
	assert_int_equal(t->next, t->n);
	unsigned wrong = t->wrong_len + t->wrong_off + t->wrong_id + t->wrong_kind;
	gbuf_free(&art);
	dmar_refset_free(rs);
	free(t);
	assert_int_equal(wrong, 0);
}

struct header_ctx {
	int calls;
	int ret;
	struct dmar_header_info seen;
};

static int header_cb(void *ctx, const struct dmar_header_info *h)
{
	struct header_ctx *x = ctx;
	x->calls++;
	x->seen = *h;
	return x->ret;
}

static void test_on_header(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, G.pack, 1);
	o.meta = (struct dmar_meta){ true, 0100755, 1700000000, 42 };
	struct gbuf art = { 0 }, out = { 0 };
	struct dmar_encode_stats es;
	encode_ok(&o, G.text, 100000, 0, &art, &es);

	struct header_ctx x = { 0 };
	struct dmar_decoder_opts d = dopts(G.pack, NULL, 1);
	d.on_header = header_cb;
	d.on_header_ctx = &x;
	assert_int_equal(decode(&d, art.p, art.len, &out, NULL, NULL), 0);
	assert_int_equal(x.calls, 1);
	assert_int_equal(x.seen.version, DMAR_VERSION);
	assert_int_equal(x.seen.flags, DMAR_HDR_PACK | DMAR_HDR_META);
	assert_int_equal(x.seen.chunker.min, 256);
	assert_int_equal(x.seen.chunker.avg, 1024);
	assert_int_equal(x.seen.chunker.max, 4096);
	assert_int_equal(x.seen.pack_id, dmar_bytepack_id(G.pack));
	assert_true(x.seen.meta.valid);
	assert_int_equal(x.seen.meta.mode, 0100755);
	assert_int_equal(x.seen.meta.mtime_sec, 1700000000);
	assert_int_equal(x.seen.meta.mtime_nsec, 42);
	gbuf_free(&out);

	/* Its error stops the decode before any output. */
	x.ret = -ECANCELED;
	struct dmar_error err = { 0 };
	assert_int_equal(decode(&d, art.p, art.len, &out, NULL, &err), -ECANCELED);
	assert_int_equal(err.code, -ECANCELED);
	assert_int_equal(out.len, 0);
	gbuf_free(&out);
	gbuf_free(&art);
}

/* --- byte packs --------------------------------------------------------- */

static void test_pack_required(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, G.pack, 1);
	struct gbuf art = { 0 }, out = { 0 };
	struct dmar_encode_stats es;
	struct dmar_error err = { 0 };
	char hex[32];

	encode_ok(&o, G.text, 200000, 0, &art, &es);
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)dmar_bytepack_id(G.pack));

	struct dmar_decoder_opts d = dopts(NULL, NULL, 1);
	assert_int_equal(decode(&d, art.p, art.len, &out, NULL, &err), -ENOKEY);
	assert_int_equal(err.code, -ENOKEY);
	assert_non_null(strstr(err.msg, hex));
	assert_int_equal(out.len, 0);

	memset(&err, 0, sizeof(err));
	d = dopts(G.pack2, NULL, 2);
	assert_int_equal(decode(&d, art.p, art.len, &out, NULL, &err), -ENOKEY);
	assert_non_null(strstr(err.msg, hex));
	assert_int_equal(out.len, 0);

	/* Level 0 with a pack still names it (the header is written before
	 * any block is known to be raw). */
	gbuf_free(&art);
	o.level = 0;
	encode_ok(&o, G.text, 200000, 0, &art, &es);
	d = dopts(NULL, NULL, 1);
	assert_int_equal(decode(&d, art.p, art.len, &out, NULL, NULL), -ENOKEY);
	gbuf_free(&art);
	gbuf_free(&out);
}

/* A pack given for an artifact that names none must not change a thing. */
static void test_pack_not_needed(void **state)
{
	for (int level = 0; level <= 3; level += 3) {
		struct dmar_encoder_opts o = eopts(&G.ck_default, level, NULL, 1);
		struct gbuf art = { 0 }, out = { 0 };
		struct dmar_encode_stats es;
		struct dmar_error err = { 0 };
		encode_ok(&o, G.text, 3u << 20, 0, &art, &es);
		struct dmar_decoder_opts d = dopts(G.pack, NULL, 1);
		int r = decode(&d, art.p, art.len, &out, NULL, &err);
		if (r < 0)
			print_error("level %d, no-pack artifact decoded with a pack: %d %s\n", level, r,
				    err.msg);
		assert_int_equal(r, 0);
		assert_int_equal(out.len, 3u << 20);
		assert_memory_equal(out.p, G.text, 3u << 20);
		gbuf_free(&art);
		gbuf_free(&out);
	}
}

/* --- thin artifacts ----------------------------------------------------- */

/* A new version of base: a few regions overwritten, a few bytes inserted. */
static uint8_t *edit(const uint8_t *base, size_t len, size_t *out_len)
{
	uint8_t *e = malloc(len + 10);
	assert_non_null(e);
	size_t at = len / 3;
	memcpy(e, base, at);
	memcpy(e + at, "0123456789", 10);
	memcpy(e + at + 10, base + at, len - at);
	for (int k = 1; k <= 3; k++) {
		size_t off = (size_t)k * (len / 4);
		for (int i = 0; i < 100; i++)
			e[off + (size_t)i] ^= 0x5a;
	}
	*out_len = len + 10;
	return e;
}

static void check_thin(const struct dmar_chunker *ck, const uint8_t *base, size_t blen,
		       int level, struct dmar_bytepack *pack, unsigned threads)
{
	assert_true(blen < BIG);
	size_t nlen;
	uint8_t *nv = edit(base, blen, &nlen);
	struct dmar_refset *rs;
	struct dmar_error err = { 0 };

	assert_int_equal(dmar_refset_new(&rs, ck), 0);
	assert_int_equal(dmar_refset_add_mem(rs, base, blen, threads, &err), 0);
	assert_int_equal(dmar_refset_bytes(rs), blen);
	assert_true(dmar_refset_chunks(rs) > 0);

	/* Full artifact for comparison. */
	struct dmar_encoder_opts o = eopts(ck, level, pack, threads);
	struct gbuf full = { 0 }, thin = { 0 }, out = { 0 };
	struct dmar_encode_stats fs, ts;
	encode_ok(&o, nv, nlen, 0, &full, &fs);

	o.ref = rs;
	roundtrip(&o, nv, nlen, PIECE_MIXED, threads, &thin);
	encode_ok(&o, nv, nlen, 0, &out, &ts);
	gbuf_free(&out);
	print_message("  thin: %llu of %llu chunks absent, %zu bytes vs %zu full\n",
		      (unsigned long long)ts.absent_chunks, (unsigned long long)ts.chunks, thin.len,
		      full.len);
	assert_true(ts.absent_chunks > 0);
	assert_true(ts.absent_chunks < ts.chunks);
	assert_true(ts.absent_bytes > nlen / 2);
	assert_true(thin.len * 4 < full.len);
	assert_memory_equal(ts.file_id.b, fs.file_id.b, DMAR_HASH_SIZE);
	struct parsed p;
	parse_artifact(thin.p, thin.len, nv, nlen, pack, &p);
	/* It names its one base: the file id of base cut with the artifact's
	 * chunk sizes, and its size. */
	struct dmar_id base_id;
	uint64_t base_chunks;
	expected_file_id(ck, base, blen, &base_id, &base_chunks);
	assert_int_equal(p.nrefs, 1);
	assert_memory_equal(p.ref_id[0].b, base_id.b, DMAR_HASH_SIZE);
	assert_int_equal(p.ref_size[0], blen);

	/* Without reference data: -ENOENT, and the message says why. */
	struct dmar_decoder_opts d = dopts(pack, NULL, threads);
	memset(&err, 0, sizeof(err));
	int r = decode(&d, thin.p, thin.len, &out, NULL, &err);
	assert_int_equal(r, -ENOENT);
	assert_int_equal(err.code, -ENOENT);
	assert_non_null(strstr(err.msg, "reference"));
	/* Whatever was written is a verified prefix. */
	assert_true(out.len <= nlen);
	if (out.len)
		assert_memory_equal(out.p, nv, out.len);
	gbuf_free(&out);

	/* Reference data of another file: -ENOENT from the references
	 * record, before any block is written. */
	struct dmar_refset *other;
	assert_int_equal(dmar_refset_new(&other, ck), 0);
	assert_int_equal(dmar_refset_add_mem(other, G.random + (BIG - blen), blen, 1, NULL), 0);
	d.ref = other;
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&d, thin.p, thin.len, &out, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "reference file 1"));
	assert_non_null(strstr(err.msg, "same order"));
	assert_int_equal(out.len, 0);
	gbuf_free(&out);
	dmar_refset_free(other);

	/* Reference data holding only the first half of the base: another
	 * file (other size and id), refused the same way. */
	assert_int_equal(dmar_refset_new(&other, ck), 0);
	assert_int_equal(dmar_refset_add_mem(other, base, blen / 2, 1, NULL), 0);
	d.ref = other;
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&d, thin.p, thin.len, &out, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "reference file 1"));
	assert_non_null(strstr(err.msg, "same order"));
	assert_int_equal(out.len, 0);
	gbuf_free(&out);
	dmar_refset_free(other);

	/* An unrelated source before the base: the first base is not the
	 * encoder's, refused. */
	assert_int_equal(dmar_refset_new(&other, ck), 0);
	const uint8_t *unrelated = base == G.text ? G.random : G.text;
	assert_int_equal(dmar_refset_add_mem(other, unrelated, 123456, 1, NULL), 0);
	assert_int_equal(dmar_refset_add_mem(other, base, blen, 1, NULL), 0);
	d.ref = other;
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&d, thin.p, thin.len, &out, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "same order"));
	assert_int_equal(out.len, 0);
	gbuf_free(&out);
	dmar_refset_free(other);

	/* The same source after the base: more bases may follow. */
	assert_int_equal(dmar_refset_new(&other, ck), 0);
	assert_int_equal(dmar_refset_add_mem(other, base, blen, 1, NULL), 0);
	assert_int_equal(dmar_refset_add_mem(other, unrelated, 123456, 1, NULL), 0);
	d.ref = other;
	memset(&err, 0, sizeof(err));
	int r2 = decode(&d, thin.p, thin.len, &out, NULL, &err);
	if (r2 < 0)
		print_error("refset = [base, unrelated]: %d (%s)\n", r2, err.msg);
	assert_int_equal(r2, 0);
	assert_int_equal(out.len, nlen);
	assert_memory_equal(out.p, nv, nlen);
	gbuf_free(&out);
	dmar_refset_free(other);

	gbuf_free(&thin);
	gbuf_free(&full);
	dmar_refset_free(rs);
	free(nv);
}

static void test_thin(void **state)
{
	check_thin(&G.ck_default, G.random, 4u << 20, 3, NULL, 1);
	check_thin(&G.ck_default, G.random, 4u << 20, 0, NULL, 2);
	check_thin(&G.ck_default, G.text, 6u << 20, 3, G.pack, 2);
	check_thin(&G.ck_small, G.text, 1u << 20, 3, NULL, 1);
	check_thin(&G.ck_small, G.random, 1u << 20, 0, G.pack, 2);
}

/*
 * Reference data given at unpack time, against an artifact made with one
 * base.  The references record (format.h) names the encoder's bases in
 * order: a set that starts with them decodes, whatever follows; one that
 * starts with another base is refused up front with -ENOENT, before any
 * block is written, and the message says to give the same bases in the
 * same order.
 */
struct refcase {
	const char *what;
	/* up to three sources: offset into G.random, or G.text when text */
	struct {
		bool text;
		size_t off, len;
	} src[3];
	unsigned n;
	int want;
};

static void test_thin_superset_ref(void **state)
{
	const size_t blen = 4u << 20;
	size_t nlen;
	uint8_t *nv = edit(G.random, blen, &nlen);
	struct dmar_refset *rs;
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	int bad = 0;

	/* Encoded against the base alone. */
	assert_int_equal(dmar_refset_new(&rs, &G.ck_default), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.random, blen, 1, NULL), 0);
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 1);
	o.ref = rs;
	encode_ok(&o, nv, nlen, 0, &art, &st);
	assert_true(st.absent_chunks > 0);

	static const struct refcase cases[] = {
		{ "[base]", { { false, 0, 4u << 20 } }, 1, 0 },
		{ "[base, base]", { { false, 0, 4u << 20 }, { false, 0, 4u << 20 } }, 2, 0 },
		{ "[base, base[0..1 MiB)]", { { false, 0, 4u << 20 }, { false, 0, 1u << 20 } }, 2, 0 },
		{ "[base, text, base[0..123456)]",
		  { { false, 0, 4u << 20 }, { true, 0, 1u << 20 }, { false, 0, 123456 } }, 3, 0 },
		{ "[base[0..1 MiB), base]", { { false, 0, 1u << 20 }, { false, 0, 4u << 20 } }, 2, -ENOENT },
		{ "[base[0..123456), base]", { { false, 0, 123456 }, { false, 0, 4u << 20 } }, 2, -ENOENT },
		{ "[text, base]", { { true, 0, 1u << 20 }, { false, 0, 4u << 20 } }, 2, -ENOENT },
		{ "[base one byte longer]", { { false, 0, (4u << 20) + 1 } }, 1, -ENOENT },
		{ "[base shifted by one byte]", { { false, 1, 4u << 20 } }, 1, -ENOENT },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
		for (unsigned t = 1; t <= 2; t++) {
			struct dmar_refset *sup;
			assert_int_equal(dmar_refset_new(&sup, &G.ck_default), 0);
			for (unsigned i = 0; i < cases[c].n; i++) {
				const uint8_t *src = cases[c].src[i].text ? G.text : G.random;
				assert_int_equal(dmar_refset_add_mem(sup, src + cases[c].src[i].off,
								     cases[c].src[i].len, 1, NULL), 0);
			}
			struct dmar_decoder_opts d = dopts(NULL, sup, t);
			struct gbuf out = { 0 };
			struct dmar_decode_stats ds;
			struct dmar_error err = { 0 };
			int r = decode(&d, art.p, art.len, &out, &ds, &err);
			bool ok;
			if (cases[c].want == 0)
				ok = r == 0 && out.len == nlen && !memcmp(out.p, nv, nlen);
			else
				ok = r == cases[c].want && err.code == r && strstr(err.msg, "same order") &&
				     strstr(err.msg, "reference file 1") && out.len == 0;
			/* Filled in also on failure: the bases the artifact
			 * names. */
			ok = ok && ds.refs == 1 && ds.ref_sizes[0] == blen;
			if (!ok) {
				print_error("refset = %s, %u threads: %d (%s), %zu bytes written\n",
					    cases[c].what, t, r, err.msg, out.len);
				bad++;
			}
			gbuf_free(&out);
			dmar_refset_free(sup);
		}
	}

	gbuf_free(&art);
	dmar_refset_free(rs);
	free(nv);
	assert_int_equal(bad, 0);
}

/*
 * Several bases: the references record lists them in order, each as the
 * file id of its recipe cut with the artifact's chunk sizes and its size;
 * the record is covered by the end check; a decoder given fewer bases, or
 * others, or the same in another order refuses with -ENOENT.
 */
static void test_thin_refs_record(void **state)
{
	const size_t la = 1u << 20, lb = 600000;
	const uint8_t *A = G.random, *B = G.text, *C = G.random + (2u << 20);
	/* The new file: half of A, a new piece, half of B. */
	const size_t nlen = la / 2 + 5000 + lb / 2;
	uint8_t *nv = malloc(nlen);
	assert_non_null(nv);
	memcpy(nv, A, la / 2);
	memcpy(nv + la / 2, G.random + (5u << 20), 5000);
	memcpy(nv + la / 2 + 5000, B + lb / 4, lb / 2);

	struct dmar_refset *ab;
	assert_int_equal(dmar_refset_new(&ab, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_mem(ab, A, la, 1, NULL), 0);
	assert_int_equal(dmar_refset_add_mem(ab, B, lb, 2, NULL), 0);
	assert_int_equal(dmar_refset_sources(ab), 2);
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 2);
	o.ref = ab;
	struct gbuf art = { 0 };
	roundtrip(&o, nv, nlen, PIECE_MIXED, 2, &art);

	/* The record, parsed independently: both bases, in order. */
	struct parsed p;
	parse_artifact(art.p, art.len, nv, nlen, NULL, &p);
	struct dmar_id ida, idb;
	uint64_t nc;
	expected_file_id(&G.ck_small, A, la, &ida, &nc);
	expected_file_id(&G.ck_small, B, lb, &idb, &nc);
	assert_int_equal(p.nrefs, 2);
	assert_memory_equal(p.ref_id[0].b, ida.b, DMAR_HASH_SIZE);
	assert_memory_equal(p.ref_id[1].b, idb.b, DMAR_HASH_SIZE);
	assert_int_equal(p.ref_size[0], la);
	assert_int_equal(p.ref_size[1], lb);
	assert_int_equal(p.block_off[0], DMAR_HDR_SIZE + 8 + 2 * 40);

	/* The ids are those of the bases cut with the artifact's sizes,
	 * which the set's own API reports too. */
	struct dmar_id sid;
	uint64_t ssize;
	dmar_refset_source(ab, 1, &sid, &ssize);
	assert_memory_equal(sid.b, idb.b, DMAR_HASH_SIZE);
	assert_int_equal(ssize, lb);

	struct {
		const char *what;
		const uint8_t *src[3];
		size_t len[3];
		unsigned n;
		int want;
		const char *msg;
	} cases[] = {
		{ "[A, B]", { A, B }, { la, lb }, 2, 0, NULL },
		{ "[A, B, C]", { A, B, C }, { la, lb, 1000 }, 3, 0, NULL },
		{ "[A, B, A]", { A, B, A }, { la, lb, la }, 3, 0, NULL },
		{ "[B, A]", { B, A }, { lb, la }, 2, -ENOENT, "reference file 1 " },
		{ "[A]", { A }, { la }, 1, -ENOENT, "only 1 given" },
		{ "[A, C]", { A, C }, { la, lb }, 2, -ENOENT, "reference file 2 " },
		{ "[A, A, B]", { A, A, B }, { la, la, lb }, 3, -ENOENT, "reference file 2 " },
		{ "[C, A, B]", { C, A, B }, { la, la, lb }, 3, -ENOENT, "reference file 1 " },
		{ "[A, B shorter]", { A, B }, { la, lb - 1 }, 2, -ENOENT, "reference file 2 " },
	};
	int bad = 0;
	for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
		for (int info = 0; info < 2; info++) {
			struct dmar_refset *rs;
			assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
			for (unsigned i = 0; i < cases[c].n; i++)
				assert_int_equal(dmar_refset_add_mem(rs, cases[c].src[i], cases[c].len[i], 1,
								     NULL), 0);
			struct dmar_decoder_opts d = dopts(NULL, rs, 1 + (c & 1));
			d.info_only = info;
			struct gbuf out = { 0 };
			struct dmar_decode_stats ds;
			struct dmar_error err = { 0 };
			int r = decode(&d, art.p, art.len, info ? NULL : &out, &ds, &err);
			bool ok = r == cases[c].want && err.code == r && out.len == (r ? 0 : (info ? 0 : nlen));
			if (ok && r == 0 && !info)
				ok = !memcmp(out.p, nv, nlen);
			if (ok && r)
				ok = strstr(err.msg, cases[c].msg) && strstr(err.msg, "same order");
			/* *st is filled in, on failure too, with the entries
			 * read up to the first base that differs. */
			bool second = r == 0 || !strstr(err.msg, "reference file 1 ");
			ok = ok && ds.refs == 2 && !memcmp(ds.ref_ids[0].b, ida.b, DMAR_HASH_SIZE) &&
			     ds.ref_sizes[0] == la &&
			     (!second || (!memcmp(ds.ref_ids[1].b, idb.b, DMAR_HASH_SIZE) && ds.ref_sizes[1] == lb));
			/* Refused before any block. */
			if (ok && r)
				ok = ds.blocks == 0 && ds.logical == 0;
			if (!ok) {
				print_error("%s%s: %d (%s), %zu bytes written, want %d\n", cases[c].what,
					    info ? " (info)" : "", r, err.msg, out.len, cases[c].want);
				bad++;
			}
			gbuf_free(&out);
			dmar_refset_free(rs);
		}
	}
	assert_int_equal(bad, 0);

	/* Info mode without reference data still reports the bases. */
	struct dmar_decoder_opts d = dopts(NULL, NULL, 1);
	d.info_only = true;
	struct dmar_decode_stats ds;
	assert_int_equal(decode(&d, art.p, art.len, NULL, &ds, NULL), 0);
	assert_int_equal(ds.refs, 2);
	assert_memory_equal(ds.ref_ids[1].b, idb.b, DMAR_HASH_SIZE);
	assert_int_equal(ds.ref_sizes[1], lb);
	/* A full decode without it: -ENOENT at the first absent chunk, the
	 * bases still reported. */
	d.info_only = false;
	struct gbuf out = { 0 };
	struct dmar_error err = { 0 };
	memset(&ds, 0, sizeof(ds));
	assert_int_equal(decode(&d, art.p, art.len, &out, &ds, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "--ref"));
	assert_int_equal(ds.refs, 2);
	gbuf_free(&out);

	gbuf_free(&art);
	dmar_refset_free(ab);
	free(nv);
}

/*
 * The references record's own damage.  A thin artifact with no absent
 * chunk decodes without reference data, so there the end check alone must
 * catch an edited record; the record's structure is checked while parsing.
 */
static void test_thin_refs_damage(void **state)
{
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	/* A base that shares nothing with the file. */
	assert_int_equal(dmar_refset_add_mem(rs, G.random, 100000, 1, NULL), 0);
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 1);
	o.ref = rs;
	struct gbuf art = { 0 }, out = { 0 };
	struct dmar_encode_stats st;
	struct dmar_error err = { 0 };
	encode_ok(&o, G.text, 20000, 0, &art, &st);
	assert_int_equal(st.absent_chunks, 0);
	const size_t rec = DMAR_HDR_SIZE, rlen = 8 + 40;
	assert_int_equal(art.p[rec], DMAR_REC_REFS);
	uint8_t *a = malloc(art.len + rlen);
	assert_non_null(a);
	memcpy(a, art.p, art.len);
	struct dmar_decoder_opts none = dopts(NULL, NULL, 1), with = dopts(NULL, rs, 1);

	/* As made: decodes with and without the base. */
	assert_int_equal(decode(&none, a, art.len, &out, NULL, NULL), 0);
	assert_int_equal(out.len, 20000);
	gbuf_free(&out);
	assert_int_equal(decode(&with, a, art.len, &out, NULL, NULL), 0);
	gbuf_free(&out);

	/* The base's size or id edited: without the base only the end check
	 * sees it, after the blocks (which are right); with it, refused
	 * before any block. */
	static const size_t at[] = { 8, 8 + 31, 8 + 32, 8 + 39 };
	for (size_t i = 0; i < sizeof(at) / sizeof(*at); i++) {
		a[rec + at[i]] ^= 0x04;
		memset(&err, 0, sizeof(err));
		assert_int_equal(decode(&none, a, art.len, &out, NULL, &err), -EBADMSG);
		assert_non_null(strstr(err.msg, "end record"));
		assert_true(out.len <= 20000);
		assert_memory_equal(out.p ? out.p : (uint8_t *)"", G.text, out.len);
		gbuf_free(&out);
		memset(&err, 0, sizeof(err));
		assert_int_equal(decode(&with, a, art.len, &out, NULL, &err), -ENOENT);
		assert_non_null(strstr(err.msg, "same order"));
		assert_int_equal(out.len, 0);
		gbuf_free(&out);
		a[rec + at[i]] ^= 0x04;
	}

	/* Structure: type, reserved bytes, k out of 1..64. */
	struct {
		size_t off;
		uint8_t val;
		const char *msg;
	} bad[] = {
		{ 0, DMAR_REC_BLOCK, "references record" },
		{ 0, DMAR_REC_END, "references record" },
		{ 1, 1, "reserved" },
		{ 3, 0x80, "reserved" },
		{ 4, 0, "bases" },
		{ 4, 65, "bases" },
		{ 7, 0x80, "bases" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		uint8_t save = a[rec + bad[i].off];
		a[rec + bad[i].off] = bad[i].val;
		for (int w = 0; w < 2; w++) {
			memset(&err, 0, sizeof(err));
			int r = decode(w ? &with : &none, a, art.len, &out, NULL, &err);
			if (r != -EBADMSG || !strstr(err.msg, bad[i].msg))
				print_error("record byte %zu = 0x%02x: %d (%s)\n", bad[i].off, bad[i].val, r,
					    err.msg);
			assert_int_equal(r, -EBADMSG);
			assert_non_null(strstr(err.msg, bad[i].msg));
			assert_int_equal(out.len, 0);
			gbuf_free(&out);
		}
		a[rec + bad[i].off] = save;
	}
	/* k = 2 with one entry: the block record is read as the second
	 * entry, and the end check (or truncation) catches it. */
	a[rec + 4] = 2;
	memset(&err, 0, sizeof(err));
	int r = decode(&none, a, art.len, &out, NULL, &err);
	assert_true(r == -EBADMSG || r == -ENODATA);
	gbuf_free(&out);
	a[rec + 4] = 1;
	/* Truncated inside the record. */
	for (size_t n = rec; n < rec + rlen; n++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(decode(&none, a, n, &out, NULL, &err), -ENODATA);
		assert_non_null(strstr(err.msg, "references record"));
		gbuf_free(&out);
	}
	/* The record removed from a thin artifact, or a second one. */
	memmove(a + rec, a + rec + rlen, art.len - rec - rlen);
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&none, a, art.len - rlen, &out, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "references record"));
	gbuf_free(&out);
	memcpy(a, art.p, rec + rlen);
	memcpy(a + rec + rlen, art.p + rec, art.len - rec);
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&none, a, art.len + rlen, &out, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "record type"));
	gbuf_free(&out);

	/* A full artifact with a references record: an unknown record. */
	struct gbuf full = { 0 };
	o.ref = NULL;
	encode_ok(&o, G.text, 20000, 0, &full, &st);
	uint8_t *f = malloc(full.len + rlen);
	assert_non_null(f);
	memcpy(f, full.p, DMAR_HDR_SIZE);
	memcpy(f + DMAR_HDR_SIZE, art.p + rec, rlen);
	memcpy(f + DMAR_HDR_SIZE + rlen, full.p + DMAR_HDR_SIZE, full.len - DMAR_HDR_SIZE);
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&none, f, full.len + rlen, &out, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "record type"));
	gbuf_free(&out);
	free(f);
	gbuf_free(&full);

	/* An empty file, thin: header, record, end. */
	gbuf_free(&art);
	o.ref = rs;
	roundtrip(&o, G.text, 0, 0, 1, &art);
	assert_int_equal(art.len, DMAR_HDR_SIZE + rlen + DMAR_END_SIZE);
	gbuf_free(&art);

	free(a);
	dmar_refset_free(rs);
}

/* The encoder takes 1 to DMAR_MAX_REFS bases. */
static void test_thin_refs_count(void **state)
{
	struct dmar_refset *rs;
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 1);

	/* No base at all. */
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	o.ref = rs;
	expect_encoder_einval(&o, gbuf_write, "refset without bases");
	/* DMAR_MAX_REFS: fine, and all are named in order. */
	for (unsigned i = 0; i < DMAR_MAX_REFS; i++)
		assert_int_equal(dmar_refset_add_mem(rs, G.text + 1000 * i, 3000 + i, 1, NULL), 0);
	struct gbuf art = { 0 };
	roundtrip(&o, G.text + 5000, 30000, 0, 1, &art);
	struct parsed p;
	parse_artifact(art.p, art.len, G.text + 5000, 30000, NULL, &p);
	assert_int_equal(p.nrefs, DMAR_MAX_REFS);
	for (unsigned i = 0; i < DMAR_MAX_REFS; i++) {
		struct dmar_id id;
		uint64_t n;
		expected_file_id(&G.ck_small, G.text + 1000 * i, 3000 + i, &id, &n);
		assert_memory_equal(p.ref_id[i].b, id.b, DMAR_HASH_SIZE);
		assert_int_equal(p.ref_size[i], 3000 + i);
	}
	gbuf_free(&art);
	/* One more: refused. */
	assert_int_equal(dmar_refset_add_mem(rs, G.text, 3000, 1, NULL), 0);
	expect_encoder_einval(&o, gbuf_write, "65 bases");
	dmar_refset_free(rs);
}

/* Identical file: everything absent, the artifact is the recipe. */
static void test_thin_identical(void **state)
{
	const size_t len = 3u << 20;
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_default), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.random, len, 2, NULL), 0);
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 2);
	o.ref = rs;
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	roundtrip(&o, G.random, len, 0, 2, &art);
	gbuf_free(&art);
	encode_ok(&o, G.random, len, 0, &art, &st);
	assert_int_equal(st.absent_chunks, st.chunks);
	assert_int_equal(st.absent_bytes, len);
	assert_true(art.len < st.chunks * 40 + 200);
	gbuf_free(&art);
	dmar_refset_free(rs);
}

/* Reference data from a file; the base changes after indexing. */
static void test_thin_file_changed(void **state)
{
	const size_t blen = 2u << 20;
	char path[] = "/tmp/test_codec_base.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, G.text, blen), (ssize_t)blen);
	close(fd);

	size_t nlen;
	uint8_t *nv = edit(G.text, blen, &nlen);
	struct dmar_refset *rs;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_file(rs, path, 2, &err), 0);
	assert_int_equal(dmar_refset_bytes(rs), blen);

	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 2);
	o.ref = rs;
	struct gbuf art = { 0 }, out = { 0 };
	roundtrip(&o, nv, nlen, 0, 2, &art);

	/* Damage the base inside an absent chunk: reported, never used. */
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "XXXX", 4, 5000), 4);
	close(fd);
	struct dmar_decoder_opts d = dopts(NULL, rs, 1);
	memset(&err, 0, sizeof(err));
	int r = decode(&d, art.p, art.len, &out, NULL, &err);
	assert_int_equal(r, -EBADMSG);
	assert_true(err.msg[0] != '\0');
	assert_true(out.len <= nlen);
	if (out.len)
		assert_memory_equal(out.p, nv, out.len);
	gbuf_free(&out);

	/* The base shrinks. */
	assert_int_equal(truncate(path, 1000), 0);
	memset(&err, 0, sizeof(err));
	r = decode(&d, art.p, art.len, &out, NULL, &err);
	assert_true(r == -EBADMSG || r == -ENOENT);
	gbuf_free(&out);

	/* A missing file. */
	unlink(path);
	struct dmar_refset *rs2;
	assert_int_equal(dmar_refset_new(&rs2, &G.ck_small), 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_refset_add_file(rs2, path, 1, &err), -ENOENT);
	assert_true(err.msg[0] != '\0');
	dmar_refset_free(rs2);

	/* Reference data with other chunk sizes than the artifact's:
	 * -EINVAL (decoder.h). */
	assert_int_equal(dmar_refset_new(&rs2, &G.ck_default), 0);
	assert_int_equal(dmar_refset_add_mem(rs2, G.text, blen, 1, NULL), 0);
	d.ref = rs2;
	memset(&err, 0, sizeof(err));
	r = decode(&d, art.p, art.len, &out, NULL, &err);
	assert_int_equal(r, -EINVAL);
	assert_int_equal(err.code, -EINVAL);
	assert_non_null(strstr(err.msg, "chunk sizes"));
	assert_int_equal(out.len, 0);
	gbuf_free(&out);
	dmar_refset_free(rs2);

	gbuf_free(&art);
	dmar_refset_free(rs);
	free(nv);
}

/* feed_map hands over the whole input at once: same artifact as feed. */
static void test_feed_map(void **state)
{
	const size_t sizes[] = { 0, 1, 4096, 300000, 5u << 20 };
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_default), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.text, 3u << 20, 1, NULL), 0);

	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++) {
		for (int v = 0; v < 4; v++) {
			struct dmar_encoder_opts o = eopts(&G.ck_default, v & 1 ? 3 : 0,
							   v == 3 ? G.pack : NULL, v & 2 ? 2 : 1);
			if (v == 2)
				o.ref = rs;
			struct gbuf ref = { 0 }, art = { 0 }, out = { 0 };
			struct dmar_encode_stats st, st2;
			encode_ok(&o, G.text, sizes[si], 65536, &ref, &st);

			struct dmar_encoder *e;
			assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
			assert_int_equal(dmar_encoder_feed_map(e, G.text, sizes[si]), 0);
			assert_int_equal(dmar_encoder_finish(e, &st2), 0);
			dmar_encoder_free(e);
			assert_int_equal(art.len, ref.len);
			assert_memory_equal(art.p, ref.p, ref.len);
			assert_int_equal(st2.logical, sizes[si]);
			assert_memory_equal(st.file_id.b, st2.file_id.b, DMAR_HASH_SIZE);

			struct dmar_decoder_opts d = dopts(o.pack, o.ref, 2);
			assert_int_equal(decode(&d, art.p, art.len, &out, NULL, NULL), 0);
			assert_int_equal(out.len, sizes[si]);
			if (sizes[si])
				assert_memory_equal(out.p, G.text, sizes[si]);
			gbuf_free(&ref);
			gbuf_free(&art);
			gbuf_free(&out);
		}
	}
	dmar_refset_free(rs);
}

/* feed_map is "only on an encoder that has been fed nothing yet; finish
 * follows": anything else would cut the input differently. */
static void test_feed_map_misuse(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 1);
	struct gbuf art = { 0 };
	struct dmar_encoder *e;
	int bad = 0, r;

	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed(e, G.text, 1000), 0);
	r = dmar_encoder_feed_map(e, G.text + 1000, 1000);
	if (r != -EINVAL) {
		print_error("feed_map after feed: %d, want -EINVAL\n", r);
		bad++;
	}
	dmar_encoder_free(e);
	gbuf_free(&art);

	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 10000), 0);
	r = dmar_encoder_feed_map(e, G.text + 10000, 10000);
	if (r != -EINVAL) {
		print_error("feed_map twice: %d, want -EINVAL\n", r);
		bad++;
	}
	dmar_encoder_free(e);
	gbuf_free(&art);

	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 10000), 0);
	r = dmar_encoder_feed(e, G.text + 10000, 10000);
	if (r != -EINVAL) {
		print_error("feed after feed_map: %d, want -EINVAL\n", r);
		bad++;
	}
	dmar_encoder_free(e);
	gbuf_free(&art);

	/* Mixed with space/commit, either way round. */
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	uint8_t *dst;
	size_t cap;
	dmar_encoder_space(e, &dst, &cap);
	memcpy(dst, G.text, 100);
	assert_int_equal(dmar_encoder_commit(e, 100), 0);
	r = dmar_encoder_feed_map(e, G.text + 100, 1000);
	if (r != -EINVAL) {
		print_error("feed_map after commit: %d, want -EINVAL\n", r);
		bad++;
	}
	dmar_encoder_free(e);
	gbuf_free(&art);

	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 10000), 0);
	dmar_encoder_space(e, &dst, &cap);
	r = cap ? dmar_encoder_commit(e, 1) : -EINVAL;
	if (r != -EINVAL) {
		print_error("commit after feed_map: %d, want -EINVAL\n", r);
		bad++;
	}
	dmar_encoder_free(e);
	gbuf_free(&art);

	/* An empty map is the whole input too. */
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 0), 0);
	r = dmar_encoder_feed_map(e, G.text, 100);
	if (r != -EINVAL) {
		print_error("feed_map after an empty feed_map: %d, want -EINVAL\n", r);
		bad++;
	}
	dmar_encoder_free(e);
	gbuf_free(&art);

	/* Refused calls change nothing: the map alone, then finish, is the
	 * artifact of that input. */
	struct gbuf ref = { 0 };
	struct dmar_encode_stats st, st2;
	encode_ok(&o, G.text, 10000, 0, &ref, &st);
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 10000), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 10000), -EINVAL);
	assert_int_equal(dmar_encoder_feed(e, G.text, 10), -EINVAL);
	assert_int_equal(dmar_encoder_finish(e, &st2), 0);
	dmar_encoder_free(e);
	assert_int_equal(st2.logical, 10000);
	assert_int_equal(art.len, ref.len);
	assert_memory_equal(art.p, ref.p, ref.len);
	gbuf_free(&art);
	gbuf_free(&ref);

	/* After finish: refused. */
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_finish(e, NULL), 0);
	assert_int_equal(dmar_encoder_feed_map(e, G.text, 100), -EINVAL);
	dmar_encoder_free(e);
	gbuf_free(&art);
	assert_int_equal(bad, 0);
}

struct pipe_writer {
	int fd;
	const uint8_t *p;
	size_t len;
};

static void *pipe_writer_main(void *arg)
{
	struct pipe_writer *w = arg;
	size_t pos = 0;
	uint64_t s = 5;
	while (pos < w->len) {
		size_t n = 1 + (size_t)(xorshift64(&s) % 70000);
		if (n > w->len - pos)
			n = w->len - pos;
		ssize_t r = write(w->fd, w->p + pos, n);
		if (r <= 0)
			break;
		pos += (size_t)r;
	}
	close(w->fd);
	return NULL;
}

/* feed_fd through read(): a pipe, and a file not at offset 0. */
static void test_feed_fd_read_path(void **state)
{
	const size_t len = 5u << 20;
	struct dmar_encoder_opts o = eopts(&G.ck_default, 3, NULL, 2);
	struct gbuf ref = { 0 }, art = { 0 };
	struct dmar_encode_stats st;
	struct dmar_encoder *e;
	encode_ok(&o, G.text, len, 0, &ref, &st);

	int fds[2];
	assert_int_equal(pipe(fds), 0);
	struct pipe_writer w = { fds[1], G.text, len };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, pipe_writer_main, &w), 0);
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_fd(e, fds[0], NULL, NULL), 0);
	assert_int_equal(dmar_encoder_finish(e, &st), 0);
	dmar_encoder_free(e);
	assert_int_equal(pthread_join(t, NULL), 0);
	close(fds[0]);
	assert_int_equal(art.len, ref.len);
	assert_memory_equal(art.p, ref.p, ref.len);
	gbuf_free(&art);
	gbuf_free(&ref);

	/* A regular file read from offset 1000: the bytes from there on. */
	char path[] = "/tmp/test_codec_off.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(write(fd, G.text, len), (ssize_t)len);
	assert_int_equal(lseek(fd, 1000, SEEK_SET), 1000);
	encode_ok(&o, G.text + 1000, len - 1000, 0, &ref, &st);
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_fd(e, fd, NULL, NULL), 0);
	assert_int_equal(dmar_encoder_finish(e, &st), 0);
	dmar_encoder_free(e);
	close(fd);
	assert_int_equal(art.len, ref.len);
	assert_memory_equal(art.p, ref.p, ref.len);
	gbuf_free(&art);
	gbuf_free(&ref);

	/* An empty regular file. */
	char path2[] = "/tmp/test_codec_empty.XXXXXX";
	fd = mkstemp(path2);
	assert_true(fd >= 0);
	unlink(path2);
	assert_int_equal(dmar_encoder_new(&e, &o, gbuf_write, &art, NULL), 0);
	assert_int_equal(dmar_encoder_feed_fd(e, fd, NULL, NULL), 0);
	assert_int_equal(dmar_encoder_finish(e, &st), 0);
	dmar_encoder_free(e);
	close(fd);
	assert_int_equal(st.logical, 0);
	assert_int_equal(art.len, DMAR_HDR_SIZE + DMAR_END_SIZE);
	gbuf_free(&art);
}

/* --- reference sets ----------------------------------------------------- */

static void test_refset_api(void **state)
{
	struct dmar_refset *rs;
	struct dmar_error err = { 0 };
	const size_t la = 1u << 20, lb = 300000;

	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	const struct dmar_chunker *c = dmar_refset_chunker(rs);
	assert_int_equal(c->min, 256);
	assert_int_equal(c->avg, 1024);
	assert_int_equal(c->max, 4096);
	assert_int_equal(dmar_refset_chunks(rs), 0);
	assert_int_equal(dmar_refset_bytes(rs), 0);

	/* Two bases; the chunks of each in order. */
	assert_int_equal(dmar_refset_add_mem(rs, G.text, la, 2, &err), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.random, lb, 1, &err), 0);
	assert_int_equal(dmar_refset_bytes(rs), la + lb);

	const uint8_t *bases[2] = { G.text, G.random };
	const size_t lens[2] = { la, lb };
	uint64_t index = 0, first[2];
	for (int b = 0; b < 2; b++) {
		first[b] = index;
		size_t pos = 0;
		while (pos < lens[b]) {
			size_t n = dmar_chunker_next(&G.ck_small, bases[b] + pos, lens[b] - pos, true);
			struct dmar_id id, got;
			uint32_t glen;
			dmar_hash(bases[b] + pos, n, &id);
			assert_true(dmar_refset_has(rs, &id));
			int64_t k = dmar_refset_find(rs, &id);
			assert_true(k >= 0 && (uint64_t)k <= index);
			assert_int_equal(dmar_refset_at(rs, index, first[b], &got, &glen), 0);
			assert_memory_equal(got.b, id.b, DMAR_HASH_SIZE);
			assert_int_equal(glen, n);
			uint8_t buf[4096];
			assert_int_equal(dmar_refset_read(rs, &id, (uint32_t)n, buf), 0);
			assert_memory_equal(buf, bases[b] + pos, n);
			/* Known with another length: -ENOENT. */
			assert_int_equal(dmar_refset_read(rs, &id, (uint32_t)n - 1, buf), -ENOENT);
			pos += n;
			index++;
		}
	}
	assert_true(dmar_refset_chunks(rs) <= index);
	assert_true(dmar_refset_chunks(rs) > 0);
	/* Runs never cross from one base into the next, nor past the end. */
	struct dmar_id id;
	uint32_t len;
	assert_int_equal(dmar_refset_at(rs, first[1], first[0], &id, &len), -ENOENT);
	assert_int_equal(dmar_refset_at(rs, first[1] - 1, first[1], &id, &len), -ENOENT);
	assert_int_equal(dmar_refset_at(rs, index, first[1], &id, &len), -ENOENT);
	assert_int_equal(dmar_refset_at(rs, UINT64_MAX, first[1], &id, &len), -ENOENT);

	/* An id it does not hold. */
	dmar_hash("not in there", 12, &id);
	assert_false(dmar_refset_has(rs, &id));
	assert_int_equal(dmar_refset_find(rs, &id), -1);
	uint8_t buf[16];
	assert_int_equal(dmar_refset_read(rs, &id, 12, buf), -ENOENT);
	dmar_refset_free(rs);
	dmar_refset_free(NULL);

	/* Duplicates: a base of one 4 KiB block repeated holds few distinct
	 * chunks; an empty base adds nothing. */
	uint8_t *rep = malloc(64u << 10);
	assert_non_null(rep);
	for (size_t i = 0; i < (64u << 10); i += 4096)
		memcpy(rep + i, G.random, 4096);
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_mem(rs, rep, 64u << 10, 1, NULL), 0);
	assert_int_equal(dmar_refset_add_mem(rs, rep, 0, 1, NULL), 0);
	assert_true(dmar_refset_chunks(rs) < 16);
	assert_int_equal(dmar_refset_bytes(rs), 64u << 10);
	dmar_refset_free(rs);
	free(rep);
}

/* --- corruption --------------------------------------------------------- */

static bool documented_error(int r)
{
	return r == -EBADMSG || r == -EPROTO || r == -ENOKEY || r == -ENOENT || r == -ENODATA;
}

/* Decode a damaged artifact: it must fail with a documented error and a
 * message, having written only a prefix of the original, or succeed with
 * exactly the original bytes. */
static int check_damaged(const struct dmar_decoder_opts *d, const uint8_t *art, size_t alen,
			 const uint8_t *orig, size_t olen, const char *what, size_t pos)
{
	struct gbuf out = { 0 };
	struct dmar_error err = { 0 };
	int r = decode(d, art, alen, &out, NULL, &err);
	if (r == 0) {
		if (out.len != olen || (olen && memcmp(out.p, orig, olen))) {
			print_error("%s at %zu: decoded %zu bytes that differ from the original\n", what,
				    pos, out.len);
			fail();
		}
	} else {
		if (!documented_error(r) || err.code != r || !err.msg[0])
			print_error("%s at %zu: %d (%s)\n", what, pos, r, err.msg);
		assert_true(documented_error(r));
		assert_int_equal(err.code, r);
		assert_true(err.msg[0] != '\0');
		assert_true(out.len <= olen);
		if (out.len && memcmp(out.p, orig, out.len)) {
			print_error("%s at %zu: failed but wrote %zu wrong bytes\n", what, pos, out.len);
			fail();
		}
	}
	gbuf_free(&out);
	return r;
}

struct flip_stats {
	unsigned tried, failed;
};

static void flip_at(const struct dmar_decoder_opts *d, uint8_t *art, size_t alen,
		    const uint8_t *orig, size_t olen, size_t pos, struct flip_stats *fs)
{
	static const uint8_t masks[] = { 0x01, 0x80 };
	for (int m = 0; m < 2; m++) {
		art[pos] ^= masks[m];
		fs->failed += check_damaged(d, art, alen, orig, olen, "flip", pos) < 0;
		fs->tried++;
		art[pos] ^= masks[m];
	}
}

static void check_truncations(const struct dmar_decoder_opts *d, const uint8_t *art, size_t alen,
			      size_t pos)
{
	struct gbuf out = { 0 };
	struct dmar_error err = { 0 };
	int r = decode(d, art, pos, &out, NULL, &err);
	if (r != -ENODATA && r != -EBADMSG)
		print_error("truncated to %zu of %zu: %d (%s)\n", pos, alen, r, err.msg);
	assert_true(r == -ENODATA || r == -EBADMSG);
	assert_true(err.msg[0] != '\0');
	gbuf_free(&out);
}

/* Every byte flipped (two ways), every truncation, a trailing byte. */
static void corrupt_all(const struct dmar_encoder_opts *o, const uint8_t *in, size_t len,
			const char *name)
{
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	struct flip_stats fs = { 0 };
	encode_ok(o, in, len, 0, &art, &st);
	struct dmar_decoder_opts d = dopts(o->pack, o->ref, 1);

	uint8_t *a = malloc(art.len + 1);
	assert_non_null(a);
	memcpy(a, art.p, art.len);
	for (size_t pos = 0; pos < art.len; pos++)
		flip_at(&d, a, art.len, in, len, pos, &fs);
	assert_memory_equal(a, art.p, art.len);
	for (size_t n = 0; n < art.len; n++)
		check_truncations(&d, a, art.len, n);
	a[art.len] = 0;
	struct gbuf out = { 0 };
	assert_int_equal(decode(&d, a, art.len + 1, &out, NULL, NULL), -EBADMSG);
	gbuf_free(&out);
	a[art.len] = 'E';
	assert_int_equal(decode(&d, a, art.len + 1, &out, NULL, NULL), -EBADMSG);
	gbuf_free(&out);
	print_message("  %s: %zu-byte artifact, %llu blocks, %u flips, %u rejected\n", name,
		      art.len, (unsigned long long)st.blocks, fs.tried, fs.failed);
	free(a);
	gbuf_free(&art);
}

static void test_corrupt_small(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_small, 0, NULL, 1);
	corrupt_all(&o, G.random, 3000, "raw random");
	o = eopts(&G.ck_small, 3, NULL, 1);
	corrupt_all(&o, G.text, 12000, "zstd text");
	o = eopts(&G.ck_small, 3, G.pack, 1);
	o.meta = (struct dmar_meta){ true, 0100600, 1600000000, 5 };
	corrupt_all(&o, G.text, 12000, "zstd text with pack and meta");
	o = eopts(&G.ck_small, 3, NULL, 1);
	corrupt_all(&o, G.text, 0, "empty");
	corrupt_all(&o, G.text, 1, "one byte");

	/* Thin: absent entries with ids, present payload. */
	size_t nlen;
	uint8_t *nv = edit(G.text, 16000, &nlen);
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &G.ck_small), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.text, 16000, 1, NULL), 0);
	o = eopts(&G.ck_small, 3, NULL, 1);
	o.ref = rs;
	corrupt_all(&o, nv, nlen, "thin");
	dmar_refset_free(rs);
	free(nv);
}

/*
 * Two and more blocks: too large to flip every byte, so flip every byte of
 * the header, of each block record header, of the end record and of the
 * first bytes of each chunk table, and a stride through the rest;
 * truncate at and around every record boundary.  256-byte chunks: a block
 * holds at most DMAR_BLOCK_MAX_CHUNKS of them (1 MiB), whatever block size
 * the encoder aims at, so 1.3 MiB makes two blocks.
 */
static void test_corrupt_blocks(void **state)
{
	const size_t len = (1u << 20) + 300000;
	struct dmar_chunker fixed;
	assert_int_equal(dmar_chunker_init(&fixed, 256, 256, 256), 0);
	struct dmar_encoder_opts o = eopts(&fixed, 3, G.pack, 2);
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	struct flip_stats fs = { 0 };
	struct parsed p;

	encode_ok(&o, G.text, len, 0, &art, &st);
	parse_artifact(art.p, art.len, G.text, len, G.pack, &p);
	assert_true(p.nblocks >= 2);
	uint8_t *a = malloc(art.len);
	assert_non_null(a);
	memcpy(a, art.p, art.len);

	/* Blocks with one decoder thread, header and end with one and two. */
	struct dmar_decoder_opts d1 = dopts(G.pack, NULL, 1);
	for (unsigned b = 0; b < p.nblocks; b++) {
		size_t s = p.block_off[b];
		for (size_t pos = s; pos < s + DMAR_BLOCK_HDR_SIZE + 12; pos++)
			flip_at(&d1, a, art.len, G.text, len, pos, &fs);
		for (size_t pos = s + 32; pos < p.block_end[b]; pos += 3989)
			flip_at(&d1, a, art.len, G.text, len, pos, &fs);
		flip_at(&d1, a, art.len, G.text, len, p.block_end[b] - 1, &fs);
	}
	for (unsigned t = 1; t <= 2; t++) {
		struct dmar_decoder_opts d = dopts(G.pack, NULL, t);
		for (size_t pos = 0; pos < DMAR_HDR_SIZE; pos += t)
			flip_at(&d, a, art.len, G.text, len, pos, &fs);
		for (size_t pos = p.end_off; pos < art.len; pos += t)
			flip_at(&d, a, art.len, G.text, len, pos, &fs);
	}
	assert_memory_equal(a, art.p, art.len);

	struct dmar_decoder_opts d = dopts(G.pack, NULL, 2);
	for (unsigned b = 0; b < p.nblocks; b++) {
		for (size_t k = 0; k < 24; k += 3) {
			check_truncations(&d, a, art.len, p.block_off[b] + k);
			check_truncations(&d, a, art.len, p.block_end[b] - 1 - k);
		}
	}
	for (size_t n = p.end_off; n < art.len; n++)
		check_truncations(&d, a, art.len, n);
	for (size_t n = 0; n < art.len; n += 65521)
		check_truncations(&d, a, art.len, n);

	print_message("  %zu-byte artifact, %u blocks, %u flips, %u rejected\n", art.len, p.nblocks,
		      fs.tried, fs.failed);
	free(a);
	gbuf_free(&art);
}

/*
 * Whole blocks moved.  A block's check covers its index and the file offset
 * of its first byte, so a block that is dropped, repeated or moved fails
 * its own check, before any of its bytes are written: what was written is
 * exactly the blocks before it.  A dropped last block leaves every block
 * right, and the end record says the file is short.
 */
static int check_rearranged(const struct dmar_decoder_opts *d, const uint8_t *a, size_t alen,
			    const struct parsed *p, const uint8_t *orig, size_t olen,
			    const unsigned *order, unsigned norder, const char *what)
{
	/* Everything before block 0 (header, references record), the blocks
	 * in the order given, the end record. */
	size_t cap = alen + 2 * (p->block_end[p->nblocks - 1] - p->block_off[0]);
	uint8_t *s = malloc(cap);
	assert_non_null(s);
	size_t len = p->block_off[0];
	memcpy(s, a, len);
	for (unsigned i = 0; i < norder; i++) {
		unsigned b = order[i];
		size_t bl = p->block_end[b] - p->block_off[b];
		assert_true(len + bl <= cap);
		memcpy(s + len, a + p->block_off[b], bl);
		len += bl;
	}
	memcpy(s + len, a + p->end_off, DMAR_END_SIZE);
	len += DMAR_END_SIZE;

	/* The first position that holds another block than the original. */
	unsigned bad_at = 0;
	while (bad_at < norder && bad_at < p->nblocks && order[bad_at] == bad_at)
		bad_at++;
	uint64_t want = bad_at < p->nblocks ? p->block_pos[bad_at] : olen;
	char msg[64];
	if (bad_at < norder)
		snprintf(msg, sizeof(msg), "block %u (", bad_at);
	else
		snprintf(msg, sizeof(msg), "end record");

	struct gbuf out = { 0 };
	struct dmar_error err = { 0 };
	int r = decode(d, s, len, &out, NULL, &err);
	int bad = 0;
	if (r != -EBADMSG || err.code != r || !strstr(err.msg, msg) ||
	    (bad_at < norder && !strstr(err.msg, "hash mismatch"))) {
		print_error("%s (%u threads): %d (%s), want -EBADMSG naming \"%s\"\n", what, d->threads, r,
			    err.msg, msg);
		bad = 1;
	}
	if (out.len != want || (out.len && memcmp(out.p, orig, out.len))) {
		print_error("%s (%u threads): wrote %zu bytes%s, want the %llu bytes of the blocks before "
			    "the bad one\n", what, d->threads, out.len,
			    out.len <= olen && !memcmp(out.p ? out.p : (uint8_t *)"", orig, out.len)
				    ? ""
				    : " that are not the original's",
			    (unsigned long long)want);
		bad = 1;
	}
	gbuf_free(&out);
	free(s);
	return bad;
}

static int rearrange_all(const struct dmar_decoder_opts *d, const uint8_t *a, size_t alen,
			 const struct parsed *p, const uint8_t *orig, size_t olen)
{
	static const struct {
		const char *what;
		unsigned n;
		unsigned order[4];
	} cases[] = {
		{ "as made", 3, { 0, 1, 2 } },
		{ "block 0 dropped", 2, { 1, 2 } },
		{ "block 1 dropped", 2, { 0, 2 } },
		{ "last block dropped", 2, { 0, 1 } },
		{ "block 0 repeated", 4, { 0, 0, 1, 2 } },
		{ "block 1 repeated", 4, { 0, 1, 1, 2 } },
		{ "last block repeated", 4, { 0, 1, 2, 2 } },
		{ "blocks 0 and 1 swapped", 3, { 1, 0, 2 } },
		{ "blocks 1 and 2 swapped", 3, { 0, 2, 1 } },
		{ "blocks reversed", 3, { 2, 1, 0 } },
		{ "block 0 only", 1, { 0 } },
		{ "block 2 only", 1, { 2 } },
	};
	int bad = 0;
	assert_int_equal(p->nblocks, 3);
	for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
		if (c == 0) {
			/* The rebuilt original decodes (the helper is right). */
			struct gbuf out = { 0 };
			assert_int_equal(decode(d, a, alen, &out, NULL, NULL), 0);
			assert_int_equal(out.len, olen);
			gbuf_free(&out);
			continue;
		}
		bad += check_rearranged(d, a, alen, p, orig, olen, cases[c].order, cases[c].n,
					cases[c].what);
	}
	return bad;
}

static void test_reordered_blocks(void **state)
{
	/* 256-byte chunks: a block holds at most 4096 of them (1 MiB), so
	 * this makes three blocks: 1 MiB, 1 MiB, 300000 bytes. */
	const size_t len = (2u << 20) + 300000;
	struct dmar_chunker fixed;
	assert_int_equal(dmar_chunker_init(&fixed, 256, 256, 256), 0);
	struct gbuf art = { 0 };
	struct dmar_encode_stats st;
	struct parsed p;
	int bad = 0;

	for (int level = 0; level <= 3; level += 3) {
		struct dmar_encoder_opts o = eopts(&fixed, level, NULL, 2);
		encode_ok(&o, G.text, len, 0, &art, &st);
		parse_artifact(art.p, art.len, G.text, len, NULL, &p);
		assert_int_equal(p.block_len[0], 1u << 20);
		assert_int_equal(p.block_pos[2], 2u << 20);
		for (unsigned t = 1; t <= 3; t += 2) {
			struct dmar_decoder_opts d = dopts(NULL, NULL, t);
			bad += rearrange_all(&d, art.p, art.len, &p, G.text, len);
		}
		gbuf_free(&art);
	}

	/* Thin: the references record stays in front; blocks of runs and
	 * absent chunks move like any other. */
	struct dmar_refset *rs;
	assert_int_equal(dmar_refset_new(&rs, &fixed), 0);
	assert_int_equal(dmar_refset_add_mem(rs, G.random, len, 1, NULL), 0);
	uint8_t *nv = malloc(len);
	assert_non_null(nv);
	memcpy(nv, G.random, len);
	for (size_t i = 0; i < len; i += 100000)
		nv[i] ^= 0x5a;
	struct dmar_encoder_opts o = eopts(&fixed, 3, NULL, 2);
	o.ref = rs;
	encode_ok(&o, nv, len, 0, &art, &st);
	assert_true(st.absent_chunks > st.chunks / 2);
	parse_artifact(art.p, art.len, nv, len, NULL, &p);
	assert_true(p.runs > 0);
	for (unsigned t = 1; t <= 3; t += 2) {
		struct dmar_decoder_opts d = dopts(NULL, rs, t);
		bad += rearrange_all(&d, art.p, art.len, &p, nv, len);
	}
	gbuf_free(&art);
	free(nv);
	dmar_refset_free(rs);
	assert_int_equal(bad, 0);
}

static void test_bad_headers(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 1);
	struct gbuf art = { 0 }, out = { 0 };
	struct dmar_encode_stats st;
	struct dmar_error err = { 0 };
	encode_ok(&o, G.text, 5000, 0, &art, &st);
	struct dmar_decoder_opts d = dopts(NULL, NULL, 1);
	uint8_t *a = art.p;

	/* Not an artifact at all. */
	assert_int_equal(decode(&d, (const uint8_t *)"hello world", 11, &out, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "magic"));
	/* A byte pack is not an artifact. */
	a[0] = 'D', a[1] = 'M', a[2] = 'P', a[3] = 'K';
	assert_int_equal(decode(&d, a, art.len, &out, NULL, NULL), -EBADMSG);
	memcpy(a, DMAR_MAGIC, 4);

	/* Version 2 with a valid check: unsupported, not corrupt. */
	struct dmar_id ck;
	a[4] = 2;
	dmar_hash(a, 36, &ck);
	memcpy(a + 36, ck.b, 4);
	memset(&err, 0, sizeof(err));
	assert_int_equal(decode(&d, a, art.len, &out, NULL, &err), -EPROTO);
	assert_non_null(strstr(err.msg, "version"));
	a[4] = DMAR_VERSION;

	/* Unknown flag with a valid check. */
	a[5] |= 0x80;
	dmar_hash(a, 36, &ck);
	memcpy(a + 36, ck.b, 4);
	assert_int_equal(decode(&d, a, art.len, &out, NULL, NULL), -EPROTO);
	a[5] &= 0x7f;

	/* Chunk sizes out of range with a valid check. */
	static const uint8_t bad_sizes[][3] = {
		{ 7, 10, 12 }, { 8, 10, 23 }, { 12, 10, 14 }, { 255, 255, 255 }, { 0, 0, 0 },
	};
	for (size_t i = 0; i < sizeof(bad_sizes) / 3; i++) {
		uint8_t save[3];
		memcpy(save, a + 6, 3);
		memcpy(a + 6, bad_sizes[i], 3);
		dmar_hash(a, 36, &ck);
		memcpy(a + 36, ck.b, 4);
		assert_int_equal(decode(&d, a, art.len, &out, NULL, NULL), -EBADMSG);
		memcpy(a + 6, save, 3);
	}
	/* Pack flag without an id, and an id without the flag. */
	a[5] |= DMAR_HDR_PACK;
	dmar_hash(a, 36, &ck);
	memcpy(a + 36, ck.b, 4);
	assert_int_equal(decode(&d, a, art.len, &out, NULL, NULL), -EBADMSG);
	a[5] &= (uint8_t)~DMAR_HDR_PACK;
	dmar_put_le64(a + 28, 12345);
	dmar_hash(a, 36, &ck);
	memcpy(a + 36, ck.b, 4);
	assert_int_equal(decode(&d, a, art.len, &out, NULL, NULL), -EBADMSG);
	assert_int_equal(out.len, 0);

	gbuf_free(&out);
	gbuf_free(&art);
}

/* Two artifacts back to back are not one artifact. */
static void test_concatenated(void **state)
{
	struct dmar_encoder_opts o = eopts(&G.ck_small, 3, NULL, 1);
	struct gbuf art = { 0 }, out = { 0 };
	struct dmar_encode_stats st;
	encode_ok(&o, G.text, 5000, 0, &art, &st);
	encode_ok(&o, G.text, 5000, 0, &art, &st);
	struct dmar_decoder_opts d = dopts(NULL, NULL, 1);
	struct dmar_error err = { 0 };
	assert_int_equal(decode(&d, art.p, art.len, &out, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "trailing"));
	gbuf_free(&out);
	gbuf_free(&art);
}

/* An optional argument runs only the tests matching it (a glob). */
/* dmar_size_parse: the one parser of sizes (dmar's -B/-b, mount's size=). */
static void test_size_parse(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = { { "0", 0 },	     { "123", 123 },	   { "4k", 4096 },	   { "4K", 4096 },
		     { "8M", 8u << 20 },     { "8MiB", 8u << 20 }, { "8MB", 8u << 20 },	   { "2g", 2ull << 30 },
		     { "2GiB", 2ull << 30 }, { "1T", 1ull << 40 }, { "16777215T", 16777215ull << 40 } };
	for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
		uint64_t v = 7;
		assert_int_equal(dmar_size_parse(good[k].s, 0, &v), 0);
		assert_int_equal(v, good[k].v);
	}
	static const char *const bad[] = { "",	 "-1", " 1",   "+1",	    "k",	 "1x",	 "1kk",
					   "1 k", "1B", "1i",  "1%",	    "1Ti3",	 "16777216T", "99999999999999999999" };
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		uint64_t v = 7;
		if (dmar_size_parse(bad[k], 0, &v) != -EINVAL)
			fail_msg("\"%s\" accepted", bad[k]);
		assert_int_equal(v, 7);
	}
	uint64_t v = 0;
	assert_int_equal(dmar_size_parse(NULL, 0, &v), -EINVAL);
	/* A share of RAM only where allowed, 1..100. */
	uint64_t half = 0, all = 0;
	assert_int_equal(dmar_size_parse("50%", DMAR_SIZE_PERCENT, &half), 0);
	assert_int_equal(dmar_size_parse("100%", DMAR_SIZE_PERCENT, &all), 0);
	assert_true(half > 0 && half <= all / 2 + 1 && half + 4096 >= all / 2);
	assert_int_equal(dmar_size_parse("0%", DMAR_SIZE_PERCENT, &v), -EINVAL);
	assert_int_equal(dmar_size_parse("101%", DMAR_SIZE_PERCENT, &v), -EINVAL);
	assert_int_equal(dmar_size_parse("50%x", DMAR_SIZE_PERCENT, &v), -EINVAL);
	/* and the one formatter, for messages */
	char t[DMAR_SIZE_TEXT];
	assert_string_equal(dmar_size_format(0, t), "0 B");
	assert_string_equal(dmar_size_format(1023, t), "1023 B");
	assert_string_equal(dmar_size_format(1536, t), "1.5 KiB");
	assert_string_equal(dmar_size_format(32u << 20, t), "32.0 MiB");
	assert_string_equal(dmar_size_format(3ull << 40, t), "3.0 TiB");
	assert_string_equal(dmar_size_format(UINT64_MAX, t), "16777216.0 TiB");
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_parse),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_sizes_matrix),
		cmocka_unit_test(test_small_chunks),
		cmocka_unit_test(test_large),
		cmocka_unit_test(test_repeat_in_block),
		cmocka_unit_test(test_zeros),
		cmocka_unit_test(test_block_buf),
		cmocka_unit_test(test_dl_open),
		cmocka_unit_test(test_meta),
		cmocka_unit_test(test_space_commit_fd),
		cmocka_unit_test(test_feed_map),
		cmocka_unit_test(test_feed_map_misuse),
		cmocka_unit_test(test_feed_fd_read_path),
		cmocka_unit_test(test_refset_api),
		cmocka_unit_test(test_decode_stream),
		cmocka_unit_test(test_encoder_write_errors),
		cmocka_unit_test(test_encoder_positional),
		cmocka_unit_test(test_decoder_positional),
		cmocka_unit_test(test_encoder_bad_opts),
		cmocka_unit_test(test_index_only),
		cmocka_unit_test(test_info_mode),
		cmocka_unit_test(test_info_thin_no_ref),
		cmocka_unit_test(test_on_header),
		cmocka_unit_test(test_pack_required),
		cmocka_unit_test(test_pack_not_needed),
		cmocka_unit_test(test_thin),
		cmocka_unit_test(test_thin_superset_ref),
		cmocka_unit_test(test_thin_refs_record),
		cmocka_unit_test(test_thin_refs_damage),
		cmocka_unit_test(test_thin_refs_count),
		cmocka_unit_test(test_thin_identical),
		cmocka_unit_test(test_thin_file_changed),
		cmocka_unit_test(test_corrupt_small),
		cmocka_unit_test(test_corrupt_blocks),
		cmocka_unit_test(test_reordered_blocks),
		cmocka_unit_test(test_bad_headers),
		cmocka_unit_test(test_concatenated),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
