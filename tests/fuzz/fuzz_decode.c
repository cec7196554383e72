/* SPDX-License-Identifier: MIT */
/*
 * fuzz_decode - the artifact decoder on arbitrary bytes.
 *
 * Each input is decoded (1) plainly, (2) with a byte pack and reference
 * data matched to the artifact's chunk sizes from on_header, as the CLI
 * does, and (3) in info mode.  The pack and the reference bases are built
 * at start-up from built-in deterministic data, so the corpus
 * (tests/fuzz/gen_corpus.c includes this file) can hold artifacts that
 * need them.
 *
 * Beyond "no crash, no leak", every result must keep the decoder's
 * contract: a documented error code recorded in the struct dmar_error with
 * a message, and on success exactly stats.logical bytes written.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/bytepack.h"
#include "codec/chunker.h"
#include "codec/decoder.h"
#include "codec/refset.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* --- deterministic built-in data (shared with gen_corpus.c) ------------- */

static uint64_t fz_xorshift64(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static const char *const fz_words[] = {
	"chunk", "arena", "node", "file", "memory", "remote", "copy", "bytes", "hash",
	"recipe", "block", "pack", "mount", "the", "of", "and", "a", "to", "is", "in",
};

static void fz_fill_text(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;
	while (i < len) {
		uint64_t r = fz_xorshift64(&s);
		const char *w = fz_words[r % (sizeof(fz_words) / sizeof(*fz_words))];
		while (*w && i < len)
			buf[i++] = (uint8_t)*w++;
		if (i < len)
			buf[i++] = (r >> 32) % 9 == 0 ? '\n' : ' ';
	}
}

#define FZ_SAMPLES 400
#define FZ_SAMPLE_LEN 160
#define FZ_BASE_LEN (64u << 10)

static struct dmar_bytepack *fz_pack;
static uint8_t fz_base[FZ_BASE_LEN];
/* Reference sets over fz_base, one per chunker an artifact may name. */
static struct {
	unsigned min_log2, avg_log2, max_log2;
	struct dmar_refset *rs;
} fz_refs[] = {
	{ 8, 10, 12, NULL },
	{ 8, 8, 8, NULL },
	{ 13, 15, 17, NULL },
};
#define FZ_NREFS (sizeof(fz_refs) / sizeof(*fz_refs))

static void fz_die(const char *what, const char *msg)
{
	fprintf(stderr, "fuzz_decode: %s: %s\n", what, msg);
	abort();
}

static void fz_setup(void)
{
	static bool done;
	if (done)
		return;
	done = true;

	uint8_t *samples = malloc(FZ_SAMPLES * FZ_SAMPLE_LEN);
	size_t sizes[FZ_SAMPLES];
	struct dmar_error err = { 0 };
	if (!samples)
		fz_die("setup", "out of memory");
	fz_fill_text(samples, FZ_SAMPLES * FZ_SAMPLE_LEN, 0x70ac);
	for (int i = 0; i < FZ_SAMPLES; i++)
		sizes[i] = FZ_SAMPLE_LEN;
	if (dmar_bytepack_train(samples, sizes, FZ_SAMPLES, 2048, 1, &fz_pack, &err) < 0)
		fz_die("train", err.msg);
	free(samples);

	fz_fill_text(fz_base, FZ_BASE_LEN, 0xba5e);
	for (size_t i = 0; i < FZ_NREFS; i++) {
		struct dmar_chunker ck;
		if (dmar_chunker_init_log2(&ck, fz_refs[i].min_log2, fz_refs[i].avg_log2,
					   fz_refs[i].max_log2) < 0 ||
		    dmar_refset_new(&fz_refs[i].rs, &ck) < 0 ||
		    dmar_refset_add_mem(fz_refs[i].rs, fz_base, FZ_BASE_LEN, 1, &err) < 0)
			fz_die("refset", err.msg);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fz_setup();
	return 0;
}

/* --- one input ---------------------------------------------------------- */

struct sink {
	uint64_t bytes;
	unsigned calls;
};

static int sink_write(void *ctx, const void *buf, size_t len)
{
	struct sink *s = ctx;
	/* Touch every byte, so reads of uninitialised or freed memory show. */
	const volatile uint8_t *p = buf;
	uint8_t x = 0;
	for (size_t i = 0; i < len; i++)
		x ^= p[i];
	(void)x;
	s->bytes += len;
	s->calls++;
	return 0;
}

static struct dmar_decoder_opts fz_opts;

/* Hand the decoder the reference set cut like the artifact, if any. */
static int on_header(void *ctx, const struct dmar_header_info *h)
{
	fz_opts.ref = NULL;
	for (size_t i = 0; i < FZ_NREFS; i++) {
		const struct dmar_chunker *c = dmar_refset_chunker(fz_refs[i].rs);
		if (c->min == h->chunker.min && c->avg == h->chunker.avg && c->max == h->chunker.max)
			fz_opts.ref = fz_refs[i].rs;
	}
	return 0;
}

struct info {
	uint64_t chunks, next_off;
	bool lost; /* a length was unknown: later offsets are too */
};

/* decoder.h: absent 0 present, 1 held by reference data, 2 first chunk of
 * a run (len 0 when unknown), 3 later chunk of a run (id NULL, len 0 when
 * unknown); offset UINT64_MAX once it depends on an unknown length. */
static void on_chunk(void *ctx, uint64_t index, uint64_t offset, uint32_t len, unsigned absent,
		     const struct dmar_id *id)
{
	struct info *in = ctx;
	if (index != in->chunks)
		fz_die("info", "chunk index out of order");
	if (absent > 3 || (absent == 0 && id) || ((absent == 1 || absent == 2) && !id))
		fz_die("info", "absent kind and id disagree");
	if (len == 0 && absent < 2)
		fz_die("info", "unknown length outside a run");
	/* UINT64_MAX is "unknown"; after an unknown length nothing later can
	 * be known. */
	if (offset == UINT64_MAX)
		in->lost = true;
	else if (in->lost || offset != in->next_off)
		fz_die("info", "offset wrong");
	in->chunks++;
	in->next_off += len;
	if (len == 0)
		in->lost = true;
}

static bool documented(int r)
{
	return r == -EBADMSG || r == -EPROTO || r == -ENOKEY || r == -ENOENT || r == -ENODATA ||
	       r == -ENOMEM;
}

static void check(const char *mode, int r, const struct dmar_error *err,
		  const struct dmar_decode_stats *st, const struct sink *s)
{
	char what[64];
	snprintf(what, sizeof(what), "%s: r=%d", mode, r);
	if (r == 0) {
		if (s && s->bytes != st->logical)
			fz_die(what, "bytes written differ from stats.logical");
		if (err->code)
			fz_die(what, "success with an error recorded");
		return;
	}
	if (!documented(r))
		fz_die(what, err->msg[0] ? err->msg : "undocumented error code");
	if (err->code != r)
		fz_die(what, "error code not recorded in struct dmar_error");
	if (!err->msg[0])
		fz_die(what, "error without a message");
	if (!memchr(err->msg, '\0', sizeof(err->msg)))
		fz_die(what, "message not terminated");
	if (s && s->bytes > st->logical)
		fz_die(what, "wrote more than the blocks hold");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dmar_decode_stats st;
	struct dmar_error err;
	struct sink s;
	int r;

	fz_setup();

	/* 1: plain, one thread. */
	memset(&fz_opts, 0, sizeof(fz_opts));
	fz_opts.threads = 1;
	memset(&err, 0, sizeof(err));
	memset(&s, 0, sizeof(s));
	r = dmar_decode_mem(&fz_opts, data, size, sink_write, &s, &st, &err);
	check("plain", r, &err, &st, &s);

	/* 2: with the pack and matching reference data; two threads for a
	 * share of the inputs. */
	memset(&fz_opts, 0, sizeof(fz_opts));
	fz_opts.pack = fz_pack;
	fz_opts.threads = size % 4 == 0 ? 2 : 1;
	fz_opts.on_header = on_header;
	memset(&err, 0, sizeof(err));
	memset(&s, 0, sizeof(s));
	r = dmar_decode_mem(&fz_opts, data, size, sink_write, &s, &st, &err);
	check("pack+ref", r, &err, &st, &s);

	/* 3: info mode, no pack needed. */
	struct info in = { 0 };
	memset(&fz_opts, 0, sizeof(fz_opts));
	fz_opts.threads = 1;
	fz_opts.info_only = true;
	fz_opts.on_chunk = on_chunk;
	fz_opts.on_chunk_ctx = &in;
	memset(&err, 0, sizeof(err));
	r = dmar_decode_mem(&fz_opts, data, size, NULL, NULL, &st, &err);
	check("info", r, &err, &st, NULL);
	if (r == 0 && (in.chunks != st.chunks || in.next_off > st.logical ||
		       (!in.lost && in.next_off != st.logical)))
		fz_die("info", "chunk callback totals differ from stats");
	return 0;
}
