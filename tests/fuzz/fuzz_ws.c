/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ws - the websocket frame parser (net/ws.h) on arbitrary bytes.
 *
 * The first byte picks the masking rule, the piece size and the payload
 * limit; the rest is the stream.  Fed in pieces, the parser must deliver
 * exactly the frames (and the error) it delivers when fed all at once,
 * respect its limits, and every frame it accepts must survive a round
 * trip: written again with dmar_ws_frame_header (masked when the rule
 * wants it) and parsed by a fresh parser, it comes back the same.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/hash.h"
#include "net/ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_ws: %s\n", what);
	abort();
}

/* The frames a parse delivered, summed up: count and a running hash. */
struct seen {
	size_t max;
	enum dmar_ws_masking masking;
	unsigned n;
	struct dmar_hash_ctx *h;
	bool roundtrip;
};

static void roundtrip(const struct seen *s, const struct dmar_ws_frame *f);

static int on_frame(void *ctx, const struct dmar_ws_frame *f)
{
	struct seen *s = ctx;
	if (f->len > s->max)
		die("frame beyond max_payload delivered");
	if ((f->opcode & 0x8) && (f->len > DMAR_WS_CONTROL_MAX || !f->fin))
		die("control frame breaks the rules");
	if (f->opcode == DMAR_WS_CLOSE && f->len == 1)
		die("1-byte close delivered");
	uint8_t meta[2] = { (uint8_t)f->opcode, f->fin };
	dmar_hash_ctx_update(s->h, meta, 2);
	dmar_hash_ctx_update(s->h, &f->len, sizeof(f->len));
	dmar_hash_ctx_update(s->h, f->payload, f->len);
	s->n++;
	if (s->roundtrip)
		roundtrip(s, f);
	return 0;
}

struct one {
	const struct dmar_ws_frame *want;
	int got;
};

static int on_again(void *ctx, const struct dmar_ws_frame *f)
{
	struct one *o = ctx;
	if (o->got++ || f->opcode != o->want->opcode || f->fin != o->want->fin || f->len != o->want->len ||
	    memcmp(f->payload, o->want->payload, f->len))
		die("frame changed in a round trip");
	return 0;
}

static void roundtrip(const struct seen *s, const struct dmar_ws_frame *f)
{
	/* A continuation or non-final frame needs its message context: only
	 * whole, final frames are re-parsed alone. */
	if (f->opcode == DMAR_WS_CONT || !f->fin)
		return;
	const uint8_t mask[4] = { 0x5a, 0x01, 0xfe, 0x80 };
	bool masked = s->masking == DMAR_WS_MASK_REQUIRED;
	uint8_t *buf = malloc(DMAR_WS_HDR_MAX + f->len + 1);
	if (!buf)
		die("out of memory");
	size_t h = dmar_ws_frame_header(buf, f->opcode, f->len, masked ? mask : NULL);
	memcpy(buf + h, f->payload, f->len);
	if (masked)
		dmar_ws_mask(buf + h, f->len, mask, 0);
	struct one o = { f, 0 };
	struct dmar_ws_parser *p;
	struct dmar_error err = { 0 };
	if (dmar_ws_parser_new(&p, s->max, s->masking, on_again, &o) < 0)
		die("parser_new");
	if (dmar_ws_parser_feed(p, buf, h + f->len, &err) != 0 || o.got != 1)
		die("a written frame does not parse back");
	dmar_ws_parser_free(p);
	free(buf);
}

static int parse(const uint8_t *d, size_t n, size_t step, struct seen *s, struct dmar_id *sum)
{
	struct dmar_ws_parser *p;
	struct dmar_error err = { 0 };
	if (dmar_ws_parser_new(&p, s->max, s->masking, on_frame, s) < 0)
		die("parser_new");
	int r = 0;
	for (size_t at = 0; at < n && r == 0; at += step)
		r = dmar_ws_parser_feed(p, d + at, n - at < step ? n - at : step, &err);
	if (r < 0) {
		if (r != -EPROTO && r != -EMSGSIZE && r != -ENOMEM)
			die("undocumented error code");
		if (err.code != r || !err.msg[0])
			die("error not recorded with a message");
		struct dmar_error again = { 0 };
		if (dmar_ws_parser_feed(p, "\x81\x00", 2, &again) != r)
			die("error not sticky");
	}
	dmar_ws_parser_free(p);
	dmar_hash_ctx_final(s->h, sum);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static const size_t limits[] = { 0, 1, 125, 126, 4096, 70000 };
	struct seen s = {
		.masking = (enum dmar_ws_masking)(data[0] % 3),
		.max = limits[(data[0] >> 2) % 6],
		.h = dmar_hash_ctx_new(),
	};
	size_t step = 1 + (data[0] >> 5) * 3;
	if (!s.h)
		die("out of memory");
	struct dmar_id whole, pieces;
	s.roundtrip = true;
	int r1 = parse(data + 1, size - 1, size, &s, &whole);
	unsigned n1 = s.n;
	s.n = 0;
	s.roundtrip = false;
	int r2 = parse(data + 1, size - 1, step, &s, &pieces);
	if (r1 != r2 || n1 != s.n || memcmp(whole.b, pieces.b, DMAR_HASH_SIZE))
		die("feeding in pieces changed the result");
	dmar_hash_ctx_free(s.h);
	return 0;
}
