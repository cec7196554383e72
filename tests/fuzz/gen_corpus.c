/* SPDX-License-Identifier: MIT */
/*
 * gen_corpus - (re)generate the seed corpus in tests/fuzz/corpus/.
 *
 * Not part of the build: run it by hand when the format changes.  From a
 * configured build directory BUILD:
 *
 *   make -C BUILD codec/libdmarcodec.la net/libdmarnet.la
 *   cc -std=gnu11 -I BUILD -I . -I tests/fuzz tests/fuzz/gen_corpus.c \
 *      BUILD/net/.libs/libdmarnet.a BUILD/codec/.libs/libdmarcodec.a \
 *      -lzstd -lcrypto -lpthread -o /tmp/gen_corpus
 *   /tmp/gen_corpus tests/fuzz/corpus
 *
 * It includes fuzz_decode.c so that the artifacts needing a byte pack or
 * reference data are made with exactly the pack and bases that fuzz_decode
 * builds at start-up (and it replays every decode seed through it).  The
 * net/ seeds (recipe, batch, peers) are checked against their parsers
 * here: a seed named bad-* must be refused, any other accepted.  Every
 * file stays under 64 KiB, the -max_len of tests/fuzz/run-short.sh.
 */
#include "fuzz_decode.c"

#include <sys/stat.h>

#include "../unit/prng.h" /* fill_floats */

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_c_format: magicless frames */
#include <zstd.h>

#include "codec/compress.h"
#include "codec/encoder.h"
#include "codec/format.h"
#include "net/peers.h"
#include "net/wire.h"

static const char *outdir;
static unsigned nfiles;

static void put(const char *target, const char *name, const void *buf, size_t len)
{
	char path[512];
	if (len > 65536)
		fz_die(name, "corpus file over 64 KiB");
	snprintf(path, sizeof(path), "%s/%s", outdir, target);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		fz_die(path, "cannot write");
	nfiles++;
	if (!strcmp(target, "decode"))
		LLVMFuzzerTestOneInput(buf, len);
}

struct gbuf {
	uint8_t *p;
	size_t len, cap;
};

static int gwrite(void *ctx, const void *src, size_t len)
{
	struct gbuf *b = ctx;
	if (b->len + len > b->cap) {
		b->cap = (b->len + len) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			return -ENOMEM;
	}
	memcpy(b->p + b->len, src, len);
	b->len += len;
	return 0;
}

static struct gbuf encode(unsigned lmin, unsigned lavg, unsigned lmax, int level, bool pack,
			  const struct dmar_refset *ref, bool meta, const uint8_t *in, size_t len)
{
	struct dmar_encoder_opts o = { .level = level, .threads = 1, .ref = ref };
	struct dmar_encoder *e;
	struct dmar_error err = { 0 };
	struct gbuf b = { 0 };
	if (dmar_chunker_init_log2(&o.chunker, lmin, lavg, lmax) < 0)
		fz_die("chunker", "bad sizes");
	if (pack)
		o.pack = fz_pack;
	if (meta)
		o.meta = (struct dmar_meta){ true, 0100644, 1700000000, 123456789 };
	if (dmar_encoder_new(&e, &o, gwrite, &b, &err) < 0 || dmar_encoder_feed(e, in, len) < 0 ||
	    dmar_encoder_finish(e, NULL) < 0)
		fz_die("encode", err.msg);
	dmar_encoder_free(e);
	return b;
}

static struct dmar_refset *ref_for(unsigned lmin)
{
	for (size_t i = 0; i < FZ_NREFS; i++)
		if (fz_refs[i].min_log2 == lmin)
			return fz_refs[i].rs;
	fz_die("ref_for", "no such refset");
	return NULL;
}

/* fz_base with a few edits: most chunks stay in the reference data. */
static uint8_t *edited_base(size_t *len)
{
	uint8_t *e = malloc(FZ_BASE_LEN + 16);
	memcpy(e, fz_base, FZ_BASE_LEN / 2);
	memcpy(e + FZ_BASE_LEN / 2, "0123456789abcdef", 16);
	memcpy(e + FZ_BASE_LEN / 2 + 16, fz_base + FZ_BASE_LEN / 2, FZ_BASE_LEN / 2);
	for (int i = 0; i < 50; i++)
		e[FZ_BASE_LEN / 5 + (size_t)i] ^= 0x21;
	*len = FZ_BASE_LEN + 16;
	return e;
}

/* Offsets of the block records of a valid artifact, and of its end. */
static unsigned block_offsets(const uint8_t *a, size_t len, size_t *off, unsigned max, size_t *end)
{
	size_t pos = DMAR_HDR_SIZE;
	unsigned nb = 0;
	if (a[5] & DMAR_HDR_THIN)
		pos += 8 + 40 * (size_t)dmar_get_le32(a + pos + 4);
	while (pos < len && a[pos] == DMAR_REC_BLOCK) {
		if (nb == max)
			fz_die("block_offsets", "too many blocks");
		off[nb++] = pos;
		unsigned n = dmar_get_le16(a + pos + 2);
		size_t t = pos + DMAR_BLOCK_HDR_SIZE;
		for (unsigned i = 0; i < n;) {
			uint32_t w = dmar_get_le32(a + t);
			t += 4;
			if (w & DMAR_CHUNK_ABSENT) {
				t += DMAR_ID_SIZE;
				i += (w & DMAR_CHUNK_RUN) ? (w & DMAR_CHUNK_VALUE_MASK) : 1;
			} else {
				i++;
			}
		}
		pos = t + dmar_get_le32(a + pos + 8);
	}
	*end = pos;
	return nb;
}

static void gen_refs(const uint8_t *text)
{
	struct gbuf b;
	size_t elen;
	uint8_t *ed = edited_base(&elen);

	/* Made against two bases (fz_base twice): the decoder's reference
	 * data has one, so it is refused before any block. */
	struct dmar_refset *two;
	struct dmar_chunker ck;
	struct dmar_error err = { 0 };
	if (dmar_chunker_init_log2(&ck, 8, 10, 12) < 0 || dmar_refset_new(&two, &ck) < 0 ||
	    dmar_refset_add_mem(two, fz_base, FZ_BASE_LEN, 1, &err) < 0 ||
	    dmar_refset_add_mem(two, fz_base, FZ_BASE_LEN / 2, 1, &err) < 0)
		fz_die("refset", err.msg);
	b = encode(8, 10, 12, 3, false, two, false, ed, elen);
	put("decode", "thin-two-bases.dmar", b.p, b.len);
	free(b.p);
	dmar_refset_free(two);

	/* Thin with nothing absent (the file shares nothing with the base):
	 * decodes without reference data, so only the end check guards the
	 * record there. */
	struct gbuf t = encode(8, 10, 12, 3, false, ref_for(8), false, text + 20000, 6000);
	put("decode", "thin-none-absent.dmar", t.p, t.len);
	const size_t r = DMAR_HDR_SIZE;
	uint8_t *c = malloc(t.len + 48);
	memcpy(c, t.p, t.len);
	c[r + 8 + 32] ^= 1;
	put("decode", "bad-refs-size", c, t.len);
	memcpy(c, t.p, t.len);
	c[r + 8] ^= 1;
	put("decode", "bad-refs-id", c, t.len);
	memcpy(c, t.p, t.len);
	c[r] = DMAR_REC_BLOCK;
	put("decode", "bad-refs-type", c, t.len);
	memcpy(c, t.p, t.len);
	c[r + 2] = 1;
	put("decode", "bad-refs-reserved", c, t.len);
	memcpy(c, t.p, t.len);
	dmar_put_le32(c + r + 4, 0);
	put("decode", "bad-refs-k0", c, t.len);
	memcpy(c, t.p, t.len);
	dmar_put_le32(c + r + 4, DMAR_MAX_REFS + 1);
	put("decode", "bad-refs-k65", c, t.len);
	memcpy(c, t.p, t.len);
	dmar_put_le32(c + r + 4, 2);
	put("decode", "bad-refs-k2", c, t.len);
	put("decode", "bad-refs-truncated", t.p, r + 8 + 20);
	/* The record left out, and given twice. */
	memcpy(c, t.p, r);
	memcpy(c + r, t.p + r + 48, t.len - r - 48);
	put("decode", "bad-refs-missing", c, t.len - 48);
	memcpy(c, t.p, r + 48);
	memcpy(c + r + 48, t.p + r, t.len - r);
	put("decode", "bad-refs-twice", c, t.len + 48);
	free(c);
	free(t.p);

	/* A thin artifact with absent chunks whose record names another
	 * base: refused with the reference data, before the blocks. */
	t = encode(8, 10, 12, 3, false, ref_for(8), false, ed, elen);
	t.p[r + 8 + 5] ^= 0x40;
	put("decode", "bad-refs-other-base", t.p, t.len);
	free(t.p);
	free(ed);
}

static void gen_moved_blocks(void)
{
	const size_t len = (2u << 20) + 3000;
	uint8_t *in = malloc(len);
	for (size_t i = 0; i < len; i++)
		in[i] = (uint8_t)("periodic data, 1000 bytes a period "[i % 1000 % 35] + i % 1000 / 35);
	struct gbuf b = encode(8, 8, 8, 19, false, NULL, false, in, len);
	free(in);
	size_t off[8], end;
	if (block_offsets(b.p, b.len, off, 8, &end) != 3)
		fz_die("moved blocks", "not three blocks");
	put("decode", "three-blocks.dmar", b.p, b.len);
	size_t l[3] = { off[1] - off[0], off[2] - off[1], end - off[2] };
	uint8_t *c = malloc(b.len + l[0] + l[1] + l[2]);
	static const struct {
		const char *name;
		unsigned n;
		unsigned order[4];
	} cases[] = {
		{ "bad-block-dropped", 2, { 0, 2 } },
		{ "bad-block-dropped-last", 2, { 0, 1 } },
		{ "bad-block-repeated", 4, { 0, 1, 1, 2 } },
		{ "bad-block-swapped", 3, { 1, 0, 2 } },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		size_t pos = off[0];
		memcpy(c, b.p, pos);
		for (unsigned i = 0; i < cases[k].n; i++) {
			unsigned blk = cases[k].order[i];
			memcpy(c + pos, b.p + off[blk], l[blk]);
			pos += l[blk];
		}
		memcpy(c + pos, b.p + end, DMAR_END_SIZE);
		put("decode", cases[k].name, c, pos + DMAR_END_SIZE);
	}
	free(c);
	free(b.p);
}

static void gen_decode(void)
{
	uint8_t text[40000], rnd[6000], zeros[60000];
	uint64_t s = 0x5eed;
	struct gbuf b;
	size_t elen;
	uint8_t *ed = edited_base(&elen);

	fz_fill_text(text, sizeof(text), 0xd0c);
	for (size_t i = 0; i < sizeof(rnd); i++)
		rnd[i] = (uint8_t)(fz_xorshift64(&s) >> 24);
	memset(zeros, 0, sizeof(zeros));

#define VALID(name, ...)                                \
	do {                                            \
		b = encode(__VA_ARGS__);                \
		put("decode", name, b.p, b.len);        \
		free(b.p);                              \
	} while (0)
	VALID("empty.dmar", 13, 15, 17, 3, false, NULL, false, text, 0);
	VALID("one-byte.dmar", 8, 10, 12, 3, false, NULL, false, text, 1);
	VALID("text-raw.dmar", 8, 10, 12, 0, false, NULL, false, text, 3000);
	VALID("text-zstd1.dmar", 8, 10, 12, 1, false, NULL, false, text, 20000);
	VALID("text-zstd3.dmar", 8, 10, 12, 3, false, NULL, false, text, sizeof(text));
	VALID("text-pack.dmar", 8, 10, 12, 3, true, NULL, false, text, 20000);
	VALID("text-pack-raw.dmar", 8, 10, 12, 0, true, NULL, false, text, 2000);
	VALID("text-meta.dmar", 8, 10, 12, 3, false, NULL, true, text, 5000);
	VALID("text-fixed256.dmar", 8, 8, 8, 1, false, NULL, false, text, 30000);
	VALID("text-default.dmar", 13, 15, 17, 3, false, NULL, true, text, sizeof(text));
	VALID("random.dmar", 8, 10, 12, 3, false, NULL, false, rnd, sizeof(rnd));
	VALID("zeros.dmar", 8, 10, 12, 3, false, NULL, false, zeros, sizeof(zeros));
	VALID("thin-small.dmar", 8, 10, 12, 3, false, ref_for(8), false, ed, elen);
	VALID("thin-small-raw.dmar", 8, 10, 12, 0, false, ref_for(8), false, ed, elen);
	VALID("thin-fixed256.dmar", 8, 8, 8, 1, false, fz_refs[1].rs, false, ed, elen);
	VALID("thin-default.dmar", 13, 15, 17, 3, true, ref_for(13), true, ed, elen);
	/* Thin, but the new file shares nothing but a prefix with the base. */
	memcpy(text, fz_base, 8000);
	VALID("thin-prefix.dmar", 8, 10, 12, 3, false, ref_for(8), false, text, 20000);
#undef VALID

	/* Damaged copies of a small valid artifact. */
	b = encode(8, 10, 12, 3, false, NULL, false, text, 6000);
	uint8_t *c = malloc(b.len + 1);
	memcpy(c, b.p, b.len);
	c[0] = 'X';
	put("decode", "bad-magic", c, b.len);
	memcpy(c, b.p, b.len);
	c[4] = 2;
	put("decode", "bad-version", c, b.len);
	put("decode", "bad-truncated-header", b.p, 30);
	put("decode", "bad-truncated-table", b.p, DMAR_HDR_SIZE + DMAR_BLOCK_HDR_SIZE + 6);
	put("decode", "bad-truncated-end", b.p, b.len - 5);
	memcpy(c, b.p, b.len);
	c[b.len] = 0;
	put("decode", "bad-trailing", c, b.len + 1);
	c[b.len - 40] ^= 0x10;
	put("decode", "bad-payload", c, b.len);
	memcpy(c, b.p, b.len);
	c[DMAR_HDR_SIZE + DMAR_BLOCK_HDR_SIZE + 1] ^= 0x01;
	put("decode", "bad-table", c, b.len);
	memcpy(c, b.p, b.len);
	c[b.len - 1] ^= 0x01;
	put("decode", "bad-end-check", c, b.len);
	/* A RUN entry without ABSENT (caught while parsing the table). */
	memcpy(c, b.p, b.len);
	dmar_put_le32(c + DMAR_HDR_SIZE + DMAR_BLOCK_HDR_SIZE,
		      dmar_get_le32(c + DMAR_HDR_SIZE + DMAR_BLOCK_HDR_SIZE) | DMAR_CHUNK_RUN);
	put("decode", "bad-run-flag", c, b.len);
	free(c);
	free(b.p);

	/* The references record of a thin artifact (format.h). */
	gen_refs(text);

	/* Three blocks (periodic data, 256-byte chunks: 4096 chunks a block,
	 * compressed to almost nothing), then the blocks dropped, repeated
	 * and swapped: each such block fails its own check (index, offset). */
	gen_moved_blocks();

	/* A block that declares the most of everything. */
	uint8_t big[DMAR_HDR_SIZE + DMAR_BLOCK_HDR_SIZE + 4 * 64];
	b = encode(8, 10, 22, 3, false, NULL, false, text, 0);
	memset(big, 0, sizeof(big));
	memcpy(big, b.p, DMAR_HDR_SIZE);
	uint8_t *r = big + DMAR_HDR_SIZE;
	r[0] = DMAR_REC_BLOCK;
	r[1] = DMAR_ENC_ZSTD;
	dmar_put_le16(r + 2, DMAR_BLOCK_MAX_CHUNKS);
	dmar_put_le32(r + 4, DMAR_BLOCK_MAX_RAW);
	dmar_put_le32(r + 8, 1u << 20);
	for (int i = 0; i < 64; i++)
		dmar_put_le32(r + DMAR_BLOCK_HDR_SIZE + 4 * i, 1u << 22);
	put("decode", "bad-huge-block", big, sizeof(big));
	free(b.p);
	free(ed);
}

static void gen_bytepack(void)
{
	enum { N = 300, L = 120 };
	static uint8_t samples[N * L];
	size_t sizes[N];
	static const size_t caps[] = { 256, 512, 1024, 4096, 16384 };
	char name[64];
	uint8_t *img;
	size_t len;

	for (int i = 0; i < N; i++)
		sizes[i] = L;
	for (size_t k = 0; k < sizeof(caps) / sizeof(*caps); k++) {
		struct dmar_bytepack *p;
		struct dmar_error err = { 0 };
		fz_fill_text(samples, sizeof(samples), 100 + k);
		if (dmar_bytepack_train(samples, sizes, N, caps[k], 1, &p, &err) < 0)
			fz_die("train", err.msg);
		dmar_bytepack_serialize(p, &img, &len);
		snprintf(name, sizeof(name), "pack-%zu.dmpk", caps[k]);
		put("bytepack", name, img, len);
		free(img);
		dmar_bytepack_free(p);
	}
	dmar_bytepack_serialize(fz_pack, &img, &len);
	put("bytepack", "fuzz-decode-pack.dmpk", img, len);

	/* Damaged copies. */
	uint8_t *c = malloc(len + 1);
	memcpy(c, img, len);
	c[0] = 'X';
	put("bytepack", "bad-magic", c, len);
	memcpy(c, img, len);
	c[4] = 2;
	put("bytepack", "bad-version", c, len);
	memcpy(c, img, len);
	c[6] = 1;
	put("bytepack", "bad-reserved", c, len);
	put("bytepack", "bad-truncated-header", img, 20);
	put("bytepack", "bad-truncated-dict", img, len - 1);
	memcpy(c, img, len);
	c[len] = 0;
	put("bytepack", "bad-trailing", c, len + 1);
	memcpy(c, img, len);
	c[len / 2] ^= 1;
	put("bytepack", "bad-checksum", c, len);
	memcpy(c, img, len);
	dmar_put_le32(c + 8, 0);
	put("bytepack", "bad-zero-length", c, len);
	memcpy(c, img, len);
	c[12] ^= 1;
	put("bytepack", "bad-zstd-id", c, len);
	free(c);
	free(img);

	/* A raw-content dictionary (no zstd dictionary header). */
	uint8_t raw[DMAR_BYTEPACK_HDR_SIZE + 600];
	struct dmar_id sha;
	memset(raw, 0, sizeof(raw));
	memcpy(raw, DMAR_BYTEPACK_MAGIC, 4);
	raw[4] = DMAR_BYTEPACK_VERSION;
	dmar_put_le32(raw + 8, 600);
	fz_fill_text(raw + DMAR_BYTEPACK_HDR_SIZE, 600, 7);
	dmar_hash(raw + DMAR_BYTEPACK_HDR_SIZE, 600, &sha);
	memcpy(raw + 16, sha.b, 32);
	put("bytepack", "raw-content.dmpk", raw, sizeof(raw));
}

static void gen_roundtrip(void)
{
	/* Two option bytes (see fuzz_roundtrip.c), then the file. */
	static const uint8_t opts[][2] = {
		{ 0x00, 0x00 }, { 0x01, 0x00 }, { 0x02, 0x24 }, { 0x03, 0x15 }, { 0x06, 0x00 },
		{ 0x0a, 0x00 }, { 0x12, 0x24 }, { 0x22, 0x00 }, { 0x32, 0x2a }, { 0x42, 0x00 },
		{ 0x82, 0x10 }, { 0xc1, 0x04 }, { 0x2e, 0x40 }, { 0x1a, 0x7f }, { 0x22, 0x55 },
		{ 0x02, 0x6a }, { 0x3f, 0x3f },
	};
	uint8_t buf[2 + 30000];
	uint64_t s = 77;
	for (size_t k = 0; k < sizeof(opts) / sizeof(*opts); k++) {
		size_t len = 100 + (k * 4099) % 30000;
		buf[0] = opts[k][0];
		buf[1] = opts[k][1];
		if (k % 3 == 2) {
			for (size_t i = 0; i < len; i++)
				buf[2 + i] = (uint8_t)(fz_xorshift64(&s) >> 24);
		} else if (k % 5 == 4) {
			memset(buf + 2, 0, len);
		} else {
			fz_fill_text(buf + 2, len, k);
		}
		char name[32];
		snprintf(name, sizeof(name), "rt-%02zu-%02x%02x", k, opts[k][0], opts[k][1]);
		put("roundtrip", name, buf, 2 + len);
	}
	put("roundtrip", "rt-empty", "\x02\x00", 2);
	put("roundtrip", "rt-short", "\x02", 1);
}


/* ---- net/: recipes, chunk batches, peers files ---------------------------- */

static int is_bad(const char *name)
{
	return strncmp(name, "bad-", 4) == 0;
}

static void put_recipe(const char *name, const uint8_t *b, size_t len)
{
	struct dmar_recipe r;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_parse(b, len, &r, &err);
	if ((rc == 0) == is_bad(name))
		fz_die(name, rc ? err.msg : "a bad recipe parses");
	if (rc == 0)
		dmar_recipe_free(&r);
	put("recipe", name, b, len);
}

static void reseal(uint8_t *b, size_t len)
{
	struct dmar_id sum;
	dmar_hash(b, len - DMAR_RECIPE_TRAILER_SIZE, &sum);
	memcpy(b + len - DMAR_RECIPE_TRAILER_SIZE, sum.b, DMAR_HASH_SIZE);
}

static void put_short(const char *name, const uint8_t *b, size_t len)
{
	struct dmar_recipe r;
	struct dmar_id id;
	unsigned idlen;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_short_parse(b, len, &r, &id, &idlen, &err);
	if ((rc == 0) == is_bad(name))
		fz_die(name, rc ? err.msg : "a bad short recipe parses");
	if (rc == 0)
		dmar_recipe_free(&r);
	put("recipe", name, b, len);
}

/* Short recipes (wire.h) of r's first entries, made into chunks, holes and
 * partial chunks, and damaged copies. */
static void gen_short(struct dmar_recipe *r, struct dmar_recipe_entry *e)
{
	static uint8_t b[DMAR_RECIPE_SHORT_HDR_SIZE + 300 * (1 + 32 + 8)], c[sizeof(b) + 1];
	struct dmar_id id;
	dmar_hash("recipe id", 9, &id);
	r->n = 40;
	r->size = 0;
	for (size_t i = 0; i < r->n; i++) {
		if (i % 7 == 3)
			e[i] = (struct dmar_recipe_entry){ .len = 65536 * (i + 1), .kind = DMAR_RECIPE_HOLE };
		else
			e[i].skip = i % 5 == 0 ? (uint32_t)(100 * i) : 0;
		r->size += e[i].len;
	}
	size_t len = dmar_recipe_short_write(r, &id, DMAR_RECIPE_SHORT_IDLEN, b);
	put_short("short-mixed", b, len);
	size_t len32 = dmar_recipe_short_write(r, &id, 32, c);
	put_short("short-idlen32", c, len32);
	struct {
		const char *name;
		size_t off;
		uint8_t v;
	} cases[] = {
		{ "bad-short-magic", 0, 'x' },  { "bad-short-idlen", 6, 7 },  { "bad-short-flags", 7, 1 },
		{ "bad-short-tag", 80, 3 },     { "bad-short-mode", 17, 0x10 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		memcpy(c, b, len);
		c[cases[k].off] = cases[k].v;
		put_short(cases[k].name, c, len);
	}
	put_short("bad-short-truncated", b, len - 1);
	memcpy(c, b, len);
	c[len] = 0;
	put_short("bad-short-trailing", c, len + 1);
}

static void put_delta(const char *name, const uint8_t *b, size_t len)
{
	struct dmar_recipe_delta d;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_delta_parse(b, len, &d, &err);
	if ((rc == 0) == is_bad(name))
		fz_die(name, rc ? err.msg : "a bad recipe delta parses");
	if (rc == 0)
		dmar_recipe_delta_free(&d);
	put("recipe", name, b, len);
}

/* Recipe deltas against the base fuzz_recipe.c applies them to (60
 * entries of 1000 bytes, chunks named by their index, every fourth a
 * hole), and damaged copies. */
static void gen_delta(void)
{
	static struct dmar_recipe_entry be[60], ne[70];
	struct dmar_recipe base = { .n = 60, .e = be }, r = { .mode = 0600, .mtime_sec = 1700000001, .e = ne };
	for (size_t i = 0; i < 60; i++) {
		memset(&be[i], 0, sizeof(be[i]));
		be[i].len = 1000;
		be[i].kind = i % 4 == 3 ? DMAR_RECIPE_HOLE : DMAR_RECIPE_CHUNK;
		if (be[i].kind == DMAR_RECIPE_CHUNK)
			memcpy(be[i].id.b, &i, sizeof(i));
		base.size += 1000;
	}
	/* entry 5 rewritten, 10..12 gone, two new ones before 30, a hole
	 * grown at the end */
	for (size_t i = 0; i < 60; i++) {
		if (i >= 10 && i < 13)
			continue;
		if (i == 30)
			for (int x = 0; x < 2; x++) {
				ne[r.n] = (struct dmar_recipe_entry){ .len = 2000, .skip = 7 };
				dmar_hash(&x, sizeof(x), &ne[r.n].id);
				r.size += ne[r.n++].len;
			}
		ne[r.n] = be[i];
		if (i == 5)
			dmar_hash("five", 4, &ne[r.n].id);
		if (i == 59)
			ne[r.n].len = 5000;
		r.size += ne[r.n++].len;
	}
	struct dmar_id cid;
	dmar_hash("base", 4, &cid);
	uint8_t *b = NULL;
	size_t len = 0;
	if (dmar_recipe_delta_make(&base, &cid, &r, r.n, &b, &len) < 0)
		fz_die("delta", "cannot make");
	put_delta("delta-edits", b, len);
	static uint8_t c[4096];
	if (len + 1 > sizeof(c))
		fz_die("delta", "too big");
	struct {
		const char *name;
		size_t off;
		uint8_t v;
	} cases[] = {
		{ "bad-delta-magic", 0, 'x' },      { "bad-delta-flags", 6, 1 },
		{ "bad-delta-base-n", 80, 61 },     { "bad-delta-edits", 84, 9 },
		{ "bad-delta-edit-at", 96, 200 },   { "bad-delta-edit-reserved", 108, 1 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		memcpy(c, b, len);
		c[cases[k].off] = cases[k].v;
		reseal(c, len);
		put_delta(cases[k].name, c, len);
	}
	memcpy(c, b, len);
	c[100] ^= 1;
	put_delta("bad-delta-checksum", c, len);
	put_delta("bad-delta-truncated", b, len - 1);
	free(b);
}

static void gen_recipe(void)
{
	static struct dmar_recipe_entry e[300];
	struct dmar_recipe r = { .mode = 0644, .mtime_sec = 1700000000, .mtime_nsec = 5, .e = e };
	static uint8_t b[DMAR_RECIPE_HDR_SIZE + 300 * DMAR_RECIPE_ENTRY_SIZE + DMAR_RECIPE_TRAILER_SIZE + 1];
	size_t len;
	uint64_t s = 0x7ec1;

	len = dmar_recipe_wire_size(0);
	dmar_recipe_write(&r, b, NULL);
	put_recipe("empty", b, len);

	/* One chunk, a hole, then chunks and holes mixed (with partial chunks). */
	memset(e, 0, sizeof(e));
	dmar_hash("one", 3, &e[0].id);
	e[0].len = 40000;
	r.n = 1;
	r.size = 40000;
	len = dmar_recipe_wire_size(r.n);
	dmar_recipe_write(&r, b, NULL);
	put_recipe("one-chunk", b, len);
	e[0] = (struct dmar_recipe_entry){ .len = 1ull << 40, .kind = DMAR_RECIPE_HOLE };
	r.size = 1ull << 40;
	r.mode = 0600;
	r.mtime_sec = -1;
	dmar_recipe_write(&r, b, NULL);
	put_recipe("one-hole", b, len);

	r.size = 0;
	r.n = 12;
	for (size_t i = 0; i < r.n; i++) {
		memset(&e[i], 0, sizeof(e[i]));
		if (i % 3 == 1) {
			e[i].kind = DMAR_RECIPE_HOLE;
			e[i].len = 4096 * (i + 1);
		} else {
			dmar_hash(&i, sizeof(i), &e[i].id);
			e[i].len = 1000 + fz_xorshift64(&s) % 30000;
			e[i].skip = i % 4 == 0 ? (uint32_t)(fz_xorshift64(&s) % 3000) : 0;
		}
		r.size += e[i].len;
	}
	e[11].len = DMAR_WIRE_CHUNK_MAX; /* a whole largest chunk last */
	e[11].skip = 0;
	r.size = 0;
	for (size_t i = 0; i < r.n; i++)
		r.size += e[i].len;
	r.mode = 04755;
	r.mtime_nsec = 999999999;
	len = dmar_recipe_wire_size(r.n);
	dmar_recipe_write(&r, b, NULL);
	put_recipe("mixed", b, len);

	/* Damaged copies of "mixed"; those past the checksum resealed. */
	static uint8_t c[sizeof(b)];
	struct {
		const char *name;
		size_t off;
		int width;
		uint64_t v;
		int seal;
	} cases[] = {
		{ "bad-magic", 0, 1, 'X', 1 },
		{ "bad-version", 4, 2, 2, 1 },
		{ "bad-flags", 6, 2, 1, 1 },
		{ "bad-reserved", 21, 1, 1, 1 },
		{ "bad-mode", 16, 4, 0100644, 1 },
		{ "bad-nsec", 32, 4, 1000000000, 1 },
		{ "bad-count", 36, 4, 13, 1 },
		{ "bad-size", 8, 8, 1, 1 },
		{ "bad-checksum", 60, 1, 0xee, 0 },
		{ "bad-entry-len0", 48 + 32, 8, 0, 1 },
		{ "bad-entry-kind", 48 + 44, 4, 2, 1 },
		{ "bad-entry-skip", 48 + 11 * 48 + 40, 4, 1, 1 },
		{ "bad-hole-id", 48 + 48 + 3, 1, 1, 1 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		memcpy(c, b, len);
		if (cases[k].width == 1)
			c[cases[k].off] = (uint8_t)cases[k].v;
		else if (cases[k].width == 2)
			dmar_put_le16(c + cases[k].off, (uint16_t)cases[k].v);
		else if (cases[k].width == 4)
			dmar_put_le32(c + cases[k].off, (uint32_t)cases[k].v);
		else
			dmar_put_le64(c + cases[k].off, cases[k].v);
		if (cases[k].seal)
			reseal(c, len);
		put_recipe(cases[k].name, c, len);
	}
	put_recipe("bad-truncated", b, len - 1);
	put_recipe("bad-short", b, 40);
	memcpy(c, b, len);
	c[len] = 0;
	put_recipe("bad-trailing", c, len + 1);

	/* Many entries (300: 14 KiB), all small chunks of 256 bytes. */
	r.n = 300;
	r.size = 0;
	for (size_t i = 0; i < r.n; i++) {
		memset(&e[i], 0, sizeof(e[i]));
		dmar_hash(&i, sizeof(i), &e[i].id);
		e[i].len = 256;
		r.size += 256;
	}
	len = dmar_recipe_wire_size(r.n);
	dmar_recipe_write(&r, b, NULL);
	put_recipe("many", b, len);
	gen_short(&r, e);
	gen_delta();
}

/* A batch seed: 3 option bytes (fuzz_batch.c), then the body. */
struct bseed {
	uint8_t b[65536];
	size_t len;
};

static void bs_put(struct bseed *bs, const void *p, size_t n)
{
	if (bs->len + n > sizeof(bs->b))
		fz_die("batch seed", "over 64 KiB");
	memcpy(bs->b + bs->len, p, n);
	bs->len += n;
}

static void bs_start(struct bseed *bs, uint16_t split, uint8_t opts, uint32_t count)
{
	uint8_t h[3 + DMAR_BATCH_HDR_SIZE];
	dmar_put_le16(h, split);
	h[2] = opts;
	dmar_batch_write_header(h + 3, count);
	bs->len = 0;
	bs_put(bs, h, sizeof(h));
}

static void bs_add(struct bseed *bs, const uint8_t *data, uint32_t len, uint8_t enc)
{
	static uint8_t z[1 << 16];
	struct dmar_wire_chunk c = { .enc = enc, .len = len };
	dmar_hash(data, len, &c.id);
	const uint8_t *payload = data;
	if (enc == DMAR_WIRE_ZSTD_G2 || enc == DMAR_WIRE_ZSTD_G4) {
		struct dmar_zchunk *zc;
		if (dmar_zchunk_new(&zc, 1, NULL) < 0)
			fz_die("zchunk", "no memory");
		size_t n = dmar_zchunk_compress_as(zc, z, sizeof(z), data, len, dmar_wire_enc_zx(enc));
		dmar_zchunk_free(zc);
		if (!n)
			fz_die("grouped frame", "does not pay");
		c.stored = (uint32_t)n;
		payload = z;
	} else if (enc == DMAR_WIRE_ZSTD) {
		ZSTD_CCtx *cc = ZSTD_createCCtx();
		ZSTD_CCtx_setParameter(cc, ZSTD_c_format, ZSTD_f_zstd1_magicless);
		ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
		size_t n = ZSTD_compress2(cc, z, sizeof(z), data, len);
		ZSTD_freeCCtx(cc);
		if (ZSTD_isError(n))
			fz_die("zstd", ZSTD_getErrorName(n));
		c.stored = (uint32_t)n;
		payload = z;
	} else {
		c.stored = len;
	}
	uint8_t h[DMAR_BATCH_REC_SIZE];
	dmar_batch_write_record(h, &c);
	bs_put(bs, h, sizeof(h));
	bs_put(bs, payload, c.stored);
}

struct bcheck {
	unsigned n, verified;
	ZSTD_DCtx *dctx;
	uint8_t *scratch;
};

static int bcheck_rec(void *ctx, const struct dmar_wire_chunk *c)
{
	struct bcheck *k = ctx;
	const uint8_t *dec;
	k->n++;
	if (dmar_wire_chunk_verify(c, k->dctx, k->scratch, &dec, NULL) == 0)
		k->verified++;
	return 0;
}

/* Valid seeds parse and verify; bad-* ones fail somewhere: parse or verify. */
static void put_batch(const char *name, const struct bseed *bs)
{
	static struct bcheck k;
	if (!k.dctx) {
		k.dctx = ZSTD_createDCtx();
		k.scratch = malloc(DMAR_WIRE_SCRATCH);
	}
	k.n = k.verified = 0;
	struct dmar_batch_parser *p;
	struct dmar_error err = { 0 };
	if (dmar_batch_parser_new(&p, bs->b[2] & 63, bcheck_rec, &k) < 0)
		fz_die(name, "parser_new");
	int rc = dmar_batch_parser_feed(p, bs->b + 3, bs->len - 3, &err);
	if (rc == 0)
		rc = dmar_batch_parser_finish(p, &err);
	dmar_batch_parser_free(p);
	int ok = rc == 0 && k.verified == k.n;
	if (ok == is_bad(name))
		fz_die(name, rc ? err.msg : ok ? "a bad batch parses and verifies" : "a record fails verify");
	put("batch", name, bs->b, bs->len);
}

static void gen_batch(void)
{
	static struct bseed bs, c;
	static uint8_t text[30000], rnd[3000], zeros[1 << 20];
	uint64_t s = 0xb47c;
	fz_fill_text(text, sizeof(text), 0xba);
	for (size_t i = 0; i < sizeof(rnd); i++)
		rnd[i] = (uint8_t)(fz_xorshift64(&s) >> 24);
	memset(zeros, 0, sizeof(zeros));

	bs_start(&bs, 0, 0, 0);
	put_batch("empty", &bs);

	bs_start(&bs, 5, 1, 1);
	bs_add(&bs, text, 1, DMAR_WIRE_RAW);
	put_batch("one-raw-byte", &bs);

	bs_start(&bs, 30, 1, 1);
	bs_add(&bs, text, 20000, DMAR_WIRE_ZSTD);
	put_batch("one-zstd", &bs);

	/* A 1 MiB chunk of zeros in a few bytes, and a 4 MiB one. */
	bs_start(&bs, 100, 2, 2);
	bs_add(&bs, zeros, 1u << 20, DMAR_WIRE_ZSTD);
	bs_add(&bs, zeros, 100, DMAR_WIRE_ZSTD);
	put_batch("zstd-1mib-zeros", &bs);

	/* Mixed raw and zstd, split at several points (with and without the
	 * byte-at-a-time second piece). */
	static const uint16_t splits[] = { 0, 3, 16, 17, 59, 60, 61, 500, 4000, 60000 };
	for (size_t k = 0; k < sizeof(splits) / sizeof(*splits); k++) {
		bs_start(&bs, splits[k], (uint8_t)(8 | (k % 2 ? 0x40 : 0)), 6);
		bs_add(&bs, text, 3000, DMAR_WIRE_ZSTD);
		bs_add(&bs, rnd, 1000, DMAR_WIRE_RAW);
		bs_add(&bs, text + 5000, 1, DMAR_WIRE_ZSTD);
		bs_add(&bs, rnd + 1000, 2000, DMAR_WIRE_ZSTD); /* incompressible */
		bs_add(&bs, text + 9000, 256, DMAR_WIRE_RAW);
		bs_add(&bs, text + 100, 12000, DMAR_WIRE_ZSTD);
		char name[32];
		snprintf(name, sizeof(name), "mixed-split-%u%s", splits[k], k % 2 ? "-bytewise" : "");
		put_batch(name, &bs);
	}

	/* bf16-like and fp32-like chunks, grouped, beside plain ones. */
	static uint8_t bf16[12000], fp32[8000];
	fill_floats(bf16, sizeof(bf16), 2, 31);
	fill_floats(fp32, sizeof(fp32), 4, 32);
	bs_start(&bs, 50, 3, 3);
	bs_add(&bs, bf16, sizeof(bf16), DMAR_WIRE_ZSTD_G2);
	bs_add(&bs, fp32, sizeof(fp32), DMAR_WIRE_ZSTD_G4);
	bs_add(&bs, text, 700, DMAR_WIRE_ZSTD);
	put_batch("grouped", &bs);
	/* A grouped frame declared at the other width decodes to other
	 * bytes: its hash fails. */
	bs_start(&bs, 0, 1, 1);
	bs_add(&bs, bf16, sizeof(bf16), DMAR_WIRE_ZSTD_G2);
	bs.b[3 + DMAR_BATCH_HDR_SIZE + 32] = DMAR_WIRE_ZSTD_G4;
	put_batch("bad-grouped-width", &bs);
	bs.b[3 + DMAR_BATCH_HDR_SIZE + 32] = 4;
	put_batch("bad-enc-4", &bs);

	/* Damaged copies of a small mixed batch. */
	bs_start(&bs, 40, 4, 3);
	bs_add(&bs, text, 500, DMAR_WIRE_ZSTD);
	bs_add(&bs, rnd, 300, DMAR_WIRE_RAW);
	bs_add(&bs, text + 700, 900, DMAR_WIRE_ZSTD);
	put_batch("small", &bs);
	const size_t h = 3, r0 = h + DMAR_BATCH_HDR_SIZE;
	const size_t stored0 = dmar_get_le32(bs.b + r0 + 40);
	const size_t r1 = r0 + DMAR_BATCH_REC_SIZE + stored0;
	struct {
		const char *name;
		size_t off;
		int width;
		uint32_t v;
	} cases[] = {
		{ "bad-magic", h + 0, 1, 'd' },
		{ "bad-version", h + 4, 2, 0 },
		{ "bad-flags", h + 6, 2, 0x8000 },
		{ "bad-reserved", h + 12, 4, 1 },
		{ "bad-count-over-max", h + 8, 4, 5 },
		{ "bad-count-short", h + 8, 4, 2 },
		{ "bad-count-long", h + 8, 4, 4 },
		{ "bad-rec-reserved", r0 + 34, 1, 1 },
		{ "bad-rec-enc", r1 + 32, 1, 2 },
		{ "bad-rec-len0", r0 + 36, 4, 0 },
		{ "bad-rec-len-huge", r1 + 36, 4, (4u << 20) + 1 },
		{ "bad-raw-stored", r1 + 40, 4, 299 },
		{ "bad-zstd-stored0", r0 + 40, 4, 0 },
		{ "bad-zstd-declared-len", r0 + 36, 4, 501 },
		{ "bad-hash", r1 + 3, 1, 0 },
		{ "bad-raw-payload", r1 + DMAR_BATCH_REC_SIZE + 10, 1, 0 },
		{ "bad-zstd-payload", r0 + DMAR_BATCH_REC_SIZE + 5, 1, 0xff },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		c = bs;
		if (cases[k].width == 1)
			c.b[cases[k].off] = cases[k].v ? (uint8_t)cases[k].v : (uint8_t)~c.b[cases[k].off];
		else if (cases[k].width == 2)
			dmar_put_le16(c.b + cases[k].off, (uint16_t)cases[k].v);
		else
			dmar_put_le32(c.b + cases[k].off, cases[k].v);
		put_batch(cases[k].name, &c);
	}
	c = bs;
	c.len--;
	put_batch("bad-truncated-payload", &c);
	c.len = r1 + 20;
	put_batch("bad-truncated-record", &c);
	c.len = h + 10;
	put_batch("bad-truncated-header", &c);
	c = bs;
	bs_put(&c, "", 1);
	put_batch("bad-trailing", &c);
	/* A zstd frame with its magic number (the wire wants magicless). */
	bs_start(&c, 0, 1, 1);
	uint8_t framed[1024];
	size_t fl = ZSTD_compress(framed, sizeof(framed), text, 700, 3);
	struct dmar_wire_chunk w = { .enc = DMAR_WIRE_ZSTD, .len = 700, .stored = (uint32_t)fl };
	dmar_hash(text, 700, &w.id);
	uint8_t rh[DMAR_BATCH_REC_SIZE];
	dmar_batch_write_record(rh, &w);
	bs_put(&c, rh, sizeof(rh));
	bs_put(&c, framed, fl);
	put_batch("bad-zstd-with-magic", &c);
}

static void put_peers(const char *name, const char *text)
{
	struct dmar_peers *p;
	struct dmar_error err = { 0 };
	int rc = dmar_peers_parse(text, strlen(text), name, &p, &err);
	if ((rc == 0) == is_bad(name))
		fz_die(name, rc ? err.msg : "a bad peers file parses");
	if (rc == 0)
		dmar_peers_free(p);
	put("peers", name, text, strlen(text));
}

static void gen_peers(void)
{
	put_peers("empty", "");
	put_peers("comments", "# nothing here\n\n   # indented\n\t\n");
	put_peers("basic", "a 10.0.0.1:7420\nb 10.0.0.2:7420\nc 10.0.0.3:7420\n");
	put_peers("mixed", "# cluster\n"
			   "node-a\t10.9.0.1:7420\n"
			   "node-b  node-b.example.org:7420  https  # TLS\n"
			   "  v6    [fd00::2]:8443 https\r\n"
			   "lo [::1]:1\n"
			   "x.y_z localhost:65535\n"
			   "last 127.0.0.1:80");
	static char many[40000];
	size_t n = 0;
	for (int i = 0; i < 1024; i++)
		n += (size_t)snprintf(many + n, sizeof(many) - n, "p%d 10.%d.%d.1:%d\n", i, i / 256, i % 256,
				      7000 + i);
	put_peers("max-peers", many);
	snprintf(many + n, sizeof(many) - n, "one-more 10.0.0.1:1\n");
	put_peers("bad-too-many", many);
	put_peers("bad-duplicate", "a 10.0.0.1:7420\nb 10.0.0.2:7420\na 10.0.0.3:7420\n");
	put_peers("bad-port", "a 10.0.0.1:70000\n");
	put_peers("bad-port0", "a 10.0.0.1:0\n");
	put_peers("bad-no-port", "a 10.0.0.1\n");
	put_peers("bad-v6-brackets", "a ::1:7420\n");
	put_peers("bad-v6", "a [::g]:7420\n");
	put_peers("bad-ipv4", "a 10.0.0.300:7420\n");
	put_peers("bad-hostname", "a -x.lan:7420\n");
	put_peers("bad-name", "a/b 10.0.0.1:7420\n");
	put_peers("bad-option", "a 10.0.0.1:7420 tls\n");
	put_peers("bad-fields", "a 10.0.0.1:7420 https more\n");
	put_peers("bad-no-address", "lonely\n");
	put_peers("bad-url", "a https://10.0.0.1:7420\n");
	put_peers("nodelist", "a 10.0.0.1:7420\nnode[01-16] *:7420\ngpu[1-2,5]r[1-2] *:7000 https\n");
	put_peers("bad-nodelist", "node[3-1] *:7420\n");
	put_peers("bad-nodelist-numeric", "2,nod *:7420\n");
	static char line[1100];
	memset(line, ' ', 1025);
	memcpy(line, "a 1.2.3.4:5", 11);
	line[1025] = '\n';
	put_peers("bad-long-line", line);
}

/* ---- tree commits: header + operations (fuzz_tree) ---- */

struct tseed {
	uint8_t b[8192];
	size_t len;
	uint32_t n;
};

static void ts_op(struct tseed *t, uint8_t kind, uint8_t flags, uint32_t mode, const char *path, const void *data,
		  size_t len)
{
	static struct dmar_tree_op op;
	op = (struct dmar_tree_op){ .kind = kind, .flags = flags, .mode = mode, .data = data, .data_len = len };
	snprintf(op.path, sizeof(op.path), "%s", path);
	t->len += dmar_tree_write_op(t->b + DMAR_TREE_HDR_SIZE + t->len, &op);
	t->n++;
}

static void put_tree(const char *name, struct tseed *t)
{
	dmar_tree_write_header(t->b, t->n, (uint32_t)t->len);
	size_t pos = 0;
	int bad = 0;
	static struct dmar_tree_op op;
	for (uint32_t k = 0; k < t->n && !bad; k++)
		bad = dmar_tree_op_parse(t->b + DMAR_TREE_HDR_SIZE, t->len, &pos, k, &op, NULL) < 0;
	if (bad != is_bad(name)) {
		fprintf(stderr, "gen_corpus: tree seed %s: parse %s\n", name, bad ? "refused" : "accepted");
		exit(1);
	}
	put("tree", name, t->b, DMAR_TREE_HDR_SIZE + t->len);
}

static void gen_tree(void)
{
	struct dmar_recipe_entry e = { .kind = DMAR_RECIPE_CHUNK, .len = 5 };
	dmar_hash("hello", 5, &e.id);
	struct dmar_recipe r = { .size = 5, .mode = 0644, .mtime_sec = 1700000000, .n = 1, .e = &e };
	uint8_t rb[256];
	dmar_recipe_write(&r, rb, NULL);
	size_t rl = dmar_recipe_wire_size(1);
	struct tseed t = { 0 };
	ts_op(&t, DMAR_TREE_DIR, 0, 0755, "d", NULL, 0);
	ts_op(&t, DMAR_TREE_FILE, 0, 0, "d/f", rb, rl);
	ts_op(&t, DMAR_TREE_SYMLINK, DMAR_TREE_NOREPLACE, 0, "d/l", "f", 1);
	ts_op(&t, DMAR_TREE_DIR, 0, 0700, "d/e", NULL, 0);
	put_tree("mixed", &t);
	t = (struct tseed){ 0 };
	ts_op(&t, DMAR_TREE_FILE, DMAR_TREE_NOREPLACE, 0, "a/b/c.txt", rb, rl);
	put_tree("one-file", &t);
	t = (struct tseed){ 0 };
	ts_op(&t, DMAR_TREE_DIR, 0, 0755, "@x", NULL, 0);
	put_tree("bad-at-root", &t);
	t = (struct tseed){ 0 };
	ts_op(&t, DMAR_TREE_SYMLINK, 0, 0, "s", "../t", 4);
	t.b[DMAR_TREE_HDR_SIZE + 12] = 1; /* reserved */
	put_tree("bad-reserved", &t);
	t = (struct tseed){ 0 };
	ts_op(&t, DMAR_TREE_FILE, 0, 0, "f", rb, 20); /* shorter than a recipe */
	put_tree("bad-short-recipe", &t);
}

/* fuzz_zframe: data in each form, frames of each form, damaged ones. */
static void gen_zframe(void)
{
	static uint8_t in[16001], frame[16400];
	struct dmar_zchunk *zc;
	if (dmar_zchunk_new(&zc, 1, NULL) < 0)
		fz_die("zchunk", "no memory");
	static const struct { const char *name; unsigned width; uint8_t form; } k[] = {
		{ "bf16", 2, 1 }, { "fp32", 4, 2 }, { "text", 0, 0 }, { "bf16-odd-form", 2, 3 },
	};
	for (size_t i = 0; i < sizeof(k) / sizeof(*k); i++) {
		size_t len = 12001;
		if (k[i].width)
			fill_floats(in + 1, len, k[i].width, 40 + i);
		else
			for (size_t j = 0; j < len; j++)
				in[1 + j] = (uint8_t)("the quick brown fox "[j % 20] ^ (j / 997));
		char name[48];
		in[0] = k[i].form;
		snprintf(name, sizeof(name), "data-%s", k[i].name);
		put("zframe", name, in, 1 + len);
		enum dmar_zx zx = k[i].form == 1 ? DMAR_ZX_G2 : k[i].form == 2 ? DMAR_ZX_G4 : DMAR_ZX_PLAIN;
		size_t n = dmar_zchunk_compress_as(zc, frame + 4, sizeof(frame) - 4, in + 1, len, zx);
		if (!n)
			continue;
		frame[0] = (uint8_t)(4 | k[i].form);
		frame[1] = (uint8_t)len;
		frame[2] = (uint8_t)(len >> 8);
		frame[3] = (uint8_t)(len >> 16);
		snprintf(name, sizeof(name), "frame-%s", k[i].name);
		put("zframe", name, frame, 4 + n);
		frame[1] = (uint8_t)(len - 1); /* declared one byte short */
		snprintf(name, sizeof(name), "frame-%s-short", k[i].name);
		put("zframe", name, frame, 4 + n);
		frame[1] = (uint8_t)len;
		frame[4 + n / 2] ^= 0x5a;
		snprintf(name, sizeof(name), "frame-%s-damaged", k[i].name);
		put("zframe", name, frame, 4 + n);
	}
	dmar_zchunk_free(zc);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	fz_setup();
	gen_decode();
	gen_bytepack();
	gen_roundtrip();
	gen_recipe();
	gen_batch();
	gen_peers();
	gen_tree();
	gen_zframe();
	printf("gen_corpus: %u files in %s\n", nfiles, outdir);
	return 0;
}
