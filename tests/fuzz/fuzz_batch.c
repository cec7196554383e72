/* SPDX-License-Identifier: MIT */
/*
 * fuzz_batch - the incremental chunk batch parser on arbitrary bytes.
 *
 *   bytes 0-1  split: the body is fed in two pieces, cut at
 *              le16 % (body length + 1)
 *   byte  2    bits 0-5: max_count; bit 6: also feed the second piece one
 *              byte at a time; bit 7: spare
 *   bytes 3-   the body
 *
 * The body is parsed whole and split; both must end the same way (same
 * return code, same records in the same order).  Each record the whole
 * parse delivers goes through dmar_wire_chunk_verify, which must accept it
 * or refuse it with -EILSEQ and a message naming the chunk, and the raw
 * ones of each feed through dmar_wire_chunks_verify after it, which must
 * agree.  After every feed of the split parse, the payloads it delivered
 * must still hold the bytes they had in the callback (the parser's
 * promise: valid until its next call).  Anything else aborts.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "codec/format.h"
#include "net/wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_COUNT 63

static ZSTD_DCtx *dctx;
static uint8_t *scratch;

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "fuzz_batch: %s %s\n", what, msg ? msg : "");
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	if (!dctx && !(dctx = ZSTD_createDCtx()))
		die("ZSTD_createDCtx", NULL);
	if (!scratch && !(scratch = malloc(DMAR_WIRE_SCRATCH)))
		die("out of memory", NULL);
	return 0;
}

/* What a record looked like: its fields and its payload's hash. */
struct summary {
	struct dmar_id id, payload;
	uint8_t enc;
	uint32_t len, stored;
	int verified;
};

struct run {
	struct summary s[MAX_COUNT + 1];
	struct dmar_wire_chunk c[MAX_COUNT + 1]; /* as delivered, payload pointers included */
	unsigned n;
	unsigned feed_first; /* the first record of the feed in progress */
	int verify; /* run dmar_wire_chunk_verify (the whole parse only: it costs) */
};

/* After a feed: its records' payloads must be intact, and the group
 * verification must agree with the one-by-one verdicts. */
static void after_feed(struct run *run)
{
	bool ok[MAX_COUNT + 1];
	struct dmar_wire_chunk raw[MAX_COUNT + 1];
	unsigned idx[MAX_COUNT + 1], k = 0;
	for (unsigned i = run->feed_first; i < run->n; i++) {
		struct dmar_id h;
		dmar_hash(run->c[i].payload, run->c[i].stored, &h);
		if (memcmp(h.b, run->s[i].payload.b, DMAR_HASH_SIZE) != 0)
			die("a payload changed before the parser's next call", NULL);
		if (run->verify && run->c[i].enc == DMAR_WIRE_RAW) {
			idx[k] = i;
			raw[k++] = run->c[i];
		}
	}
	if (k) {
		struct dmar_error err = { 0 };
		size_t bad = dmar_wire_chunks_verify(raw, k, ok, &err), nbad = 0;
		for (unsigned j = 0; j < k; j++) {
			if (ok[j] != (run->s[idx[j]].verified == 0))
				die("dmar_wire_chunks_verify disagrees with dmar_wire_chunk_verify", NULL);
			nbad += !ok[j];
		}
		if (bad != nbad || (bad && (err.code != -EILSEQ || strncmp(err.msg, "chunk ", 6) != 0)))
			die("dmar_wire_chunks_verify: wrong count or message:", err.msg);
	}
	run->feed_first = run->n;
}

static int same(const struct summary *a, const struct summary *b)
{
	return !memcmp(a->id.b, b->id.b, DMAR_HASH_SIZE) && !memcmp(a->payload.b, b->payload.b, DMAR_HASH_SIZE) &&
	       a->enc == b->enc && a->len == b->len && a->stored == b->stored;
}

static int on_record(void *ctx, const struct dmar_wire_chunk *c)
{
	struct run *run = ctx;
	if (run->n > MAX_COUNT)
		die("more records than the header's count allows", NULL);
	if ((c->enc != DMAR_WIRE_RAW && dmar_wire_enc_zx(c->enc) == DMAR_ZX_RAW) || c->len == 0 ||
	    c->len > DMAR_WIRE_CHUNK_MAX ||
	    (c->enc == DMAR_WIRE_RAW && c->stored != c->len) || c->stored == 0 ||
	    c->stored > ZSTD_COMPRESSBOUND(c->len))
		die("delivered a record with bad fields", NULL);
	run->c[run->n] = *c;
	struct summary *s = &run->s[run->n++];
	s->id = c->id;
	s->enc = c->enc;
	s->len = c->len;
	s->stored = c->stored;
	dmar_hash(c->payload, c->stored, &s->payload);
	if (!run->verify)
		return 0;
	const uint8_t *dec = NULL;
	struct dmar_error err = { 0 };
	s->verified = dmar_wire_chunk_verify(c, dctx, scratch, &dec, &err);
	if (s->verified == 0 && (!dec || (c->enc == DMAR_WIRE_RAW && dec != c->payload)))
		die("verified without the decoded bytes", NULL);
	if (s->verified != 0 && (s->verified != -EILSEQ || err.code != -EILSEQ ||
				 strncmp(err.msg, "chunk ", 6) != 0))
		die("verify refused without -EILSEQ naming the chunk:", err.msg);
	return 0;
}

static int parse(const uint8_t *b, size_t len, size_t cut, int bytewise, uint32_t max_count, struct run *run)
{
	struct dmar_batch_parser *p;
	struct dmar_error err = { 0 };
	if (dmar_batch_parser_new(&p, max_count, on_record, run) < 0)
		return -ENOMEM;
	run->feed_first = 0;
	int r = dmar_batch_parser_feed(p, b, cut, &err);
	after_feed(run);
	for (size_t i = cut; r == 0 && i < len;) {
		size_t n = bytewise ? 1 : len - i;
		r = dmar_batch_parser_feed(p, b + i, n, &err);
		after_feed(run);
		i += n;
	}
	if (r == 0)
		r = dmar_batch_parser_finish(p, &err);
	if (r == 0 && run->n != dmar_batch_parser_count(p))
		die("finished with fewer records than the count", NULL);
	if (r < 0 && r != -ENOMEM && (r != -EBADMSG || err.code != r || !err.msg[0]))
		die("refused without -EBADMSG and a message", err.msg);
	dmar_batch_parser_free(p);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	LLVMFuzzerInitialize(NULL, NULL);
	if (size < 3)
		return 0;
	size_t len = size - 3;
	size_t cut = dmar_get_le16(data) % (len + 1);
	uint32_t max_count = data[2] & MAX_COUNT;
	int bytewise = (data[2] >> 6) & 1;
	const uint8_t *body = data + 3;

	static struct run whole, split;
	whole.n = split.n = 0;
	whole.verify = 1;
	split.verify = 0;
	int rw = parse(body, len, len, 0, max_count, &whole);
	int rs = parse(body, len, cut, bytewise, max_count, &split);
	if (rw == -ENOMEM || rs == -ENOMEM)
		return 0;
	if (rw != rs)
		die("whole and split parses end differently", NULL);
	if (whole.n != split.n)
		die("whole and split parses deliver different numbers of records", NULL);
	for (unsigned i = 0; i < whole.n; i++)
		if (!same(&whole.s[i], &split.s[i]))
			die("whole and split parses deliver different records", NULL);
	return 0;
}
