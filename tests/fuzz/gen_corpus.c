/* SPDX-License-Identifier: MIT */
/*
 * gen_corpus - (re)generate the seed corpus in tests/fuzz/corpus/.
 *
 * Not part of the build: run it by hand when the format changes.  From a
 * configured build directory BUILD:
 *
 *   make -C BUILD codec/libdmarcodec.la
 *   cc -std=gnu11 -I BUILD -I codec -I tests/fuzz tests/fuzz/gen_corpus.c \
 *      BUILD/codec/.libs/libdmarcodec.a -lzstd -lcrypto -lpthread -o /tmp/gen_corpus
 *   /tmp/gen_corpus tests/fuzz/corpus
 *
 * It includes fuzz_decode.c so that the artifacts needing a byte pack or
 * reference data are made with exactly the pack and bases that fuzz_decode
 * builds at start-up (and it replays every decode seed through it).  Every
 * file stays under 64 KiB, the -max_len of tests/fuzz/run-short.sh.
 */
#include "fuzz_decode.c"

#include <sys/stat.h>

#include "encoder.h"
#include "format.h"

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
	printf("gen_corpus: %u files in %s\n", nfiles, outdir);
	return 0;
}
