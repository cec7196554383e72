/* SPDX-License-Identifier: MIT */
/*
 * test_ws - RFC 6455 helpers (net/ws.h): the handshake key, frame headers
 * and the incremental parser's rules.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prng.h"

#include "net/ws.h"

static void test_accept_key(void **state)
{
	char out[DMAR_WS_ACCEPT_SIZE];
	/* The example of RFC 6455 section 1.3. */
	assert_int_equal(dmar_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
	assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	const char *bad[] = { NULL, "", "dGhlIHNhbXBsZSBub25jZQ=", "dGhlIHNhbXBsZSBub25jZQ===", "dGhlIHNhbXBsZSBub25jZ!==",
			      "dGhlIHNhbXBsZSBub25jZQAA" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(dmar_ws_accept_key(bad[i], out), -EINVAL);
}

static void test_frame_header(void **state)
{
	uint8_t h[DMAR_WS_HDR_MAX];
	const uint8_t m[4] = { 1, 2, 3, 4 };
	assert_int_equal(dmar_ws_frame_header(h, DMAR_WS_TEXT, 5, NULL), 2);
	assert_int_equal(h[0], 0x81);
	assert_int_equal(h[1], 5);
	assert_int_equal(dmar_ws_frame_header(h, DMAR_WS_BINARY, 125, m), 6);
	assert_int_equal(h[1], 0x80 | 125);
	assert_memory_equal(h + 2, m, 4);
	assert_int_equal(dmar_ws_frame_header(h, DMAR_WS_TEXT, 126, NULL), 4);
	assert_int_equal(h[1], 126);
	assert_int_equal(h[2] << 8 | h[3], 126);
	assert_int_equal(dmar_ws_frame_header(h, DMAR_WS_TEXT, 65535, m), 8);
	assert_int_equal(dmar_ws_frame_header(h, DMAR_WS_TEXT, 65536, m), 14);
	assert_int_equal(h[1], 0x80 | 127);
	assert_int_equal(h[7], 1);
	assert_int_equal(h[8], 0);
}

struct got {
	int n;
	enum dmar_ws_opcode op[16];
	bool fin[16];
	size_t len[16];
	uint8_t data[16][300];
};

static int on_frame(void *ctx, const struct dmar_ws_frame *f)
{
	struct got *g = ctx;
	assert_true(g->n < 16);
	g->op[g->n] = f->opcode;
	g->fin[g->n] = f->fin;
	g->len[g->n] = f->len;
	memcpy(g->data[g->n], f->payload, f->len < 300 ? f->len : 300);
	g->n++;
	return 0;
}

/* A frame with an explicit first byte (FIN, RSV, opcode). */
static size_t frame(uint8_t *out, uint8_t b0, const void *payload, size_t len, bool masked)
{
	const uint8_t m[4] = { 0xa1, 0xb2, 0xc3, 0xd4 };
	size_t h = dmar_ws_frame_header(out, (enum dmar_ws_opcode)(b0 & 0x0f), len, masked ? m : NULL);
	out[0] = b0;
	memcpy(out + h, payload, len);
	if (masked)
		dmar_ws_mask(out + h, len, m, 0);
	return h + len;
}

/* Feed buf in pieces of step bytes; the first error. */
static int feed(struct dmar_ws_parser *p, const uint8_t *buf, size_t len, size_t step)
{
	struct dmar_error err = { 0 };
	for (size_t at = 0; at < len; at += step) {
		int r = dmar_ws_parser_feed(p, buf + at, len - at < step ? len - at : step, &err);
		if (r < 0) {
			assert_int_equal(err.code, r);
			assert_true(err.msg[0]);
			return r;
		}
	}
	return 0;
}

static void test_parse_stream(void **state)
{
	uint8_t buf[1 << 18], big[70000];
	fill_random(big, sizeof(big), 7);
	size_t n = 0;
	n += frame(buf + n, 0x81, "hello", 5, true);
	n += frame(buf + n, 0x02, big, 200, true); /* fragmented binary */
	n += frame(buf + n, 0x89, "p", 1, true);   /* a ping in between */
	n += frame(buf + n, 0x80, big, 70000, true);
	n += frame(buf + n, 0x88, "\x03\xe8", 2, true);
	n += frame(buf + n, 0x8a, "", 0, true);
	for (size_t step = 1; step <= n; step = step * 3 + 1) {
		struct got g = { 0 };
		struct dmar_ws_parser *p;
		assert_int_equal(dmar_ws_parser_new(&p, 70000, DMAR_WS_MASK_REQUIRED, on_frame, &g), 0);
		assert_int_equal(feed(p, buf, n, step), 0);
		assert_int_equal(g.n, 6);
		assert_int_equal(g.op[0], DMAR_WS_TEXT);
		assert_memory_equal(g.data[0], "hello", 5);
		assert_int_equal(g.op[1], DMAR_WS_BINARY);
		assert_false(g.fin[1]);
		assert_memory_equal(g.data[1], big, 200);
		assert_int_equal(g.op[2], DMAR_WS_PING);
		assert_int_equal(g.op[3], DMAR_WS_CONT);
		assert_true(g.fin[3]);
		assert_int_equal(g.len[3], 70000);
		assert_memory_equal(g.data[3], big, 300);
		assert_int_equal(g.op[4], DMAR_WS_CLOSE);
		assert_int_equal(g.op[5], DMAR_WS_PONG);
		assert_int_equal(g.len[5], 0);
		dmar_ws_parser_free(p);
	}
	dmar_ws_parser_free(NULL);
}

static void expect_error(const uint8_t *buf, size_t n, enum dmar_ws_masking m, size_t max, int want)
{
	struct got g = { 0 };
	struct dmar_ws_parser *p;
	assert_int_equal(dmar_ws_parser_new(&p, max, m, on_frame, &g), 0);
	assert_int_equal(feed(p, buf, n, n), want);
	/* Sticky. */
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_ws_parser_feed(p, "\x81\x80xxxx", 6, &err), want);
	dmar_ws_parser_free(p);
}

static void test_parse_errors(void **state)
{
	uint8_t buf[300], big[200] = { 0 };
	size_t n;
	n = frame(buf, 0xc1, "x", 1, true); /* RSV1 */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x83, "x", 1, true); /* opcode 3 */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x09, "x", 1, true); /* ping without FIN */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x89, big, 126, true); /* control > 125 */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x88, "x", 1, true); /* 1-byte close */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x80, "x", 1, true); /* continuation of nothing */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x01, "x", 1, true);
	n += frame(buf + n, 0x81, "y", 1, true); /* new message inside one */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x81, "x", 1, false); /* unmasked to a server */
	expect_error(buf, n, DMAR_WS_MASK_REQUIRED, 1000, -EPROTO);
	n = frame(buf, 0x81, "x", 1, true); /* masked to a client */
	expect_error(buf, n, DMAR_WS_MASK_FORBIDDEN, 1000, -EPROTO);
	n = frame(buf, 0x82, big, 200, true); /* beyond max_payload */
	expect_error(buf, n, DMAR_WS_MASK_ANY, 100, -EMSGSIZE);
	/* Lengths: not minimal, top bit set, huge. */
	const uint8_t long16[] = { 0x82, 126, 0, 5 };
	expect_error(long16, sizeof(long16), DMAR_WS_MASK_ANY, 1000, -EPROTO);
	const uint8_t long64[] = { 0x82, 127, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	expect_error(long64, sizeof(long64), DMAR_WS_MASK_ANY, 1000, -EPROTO);
	const uint8_t top[] = { 0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0 };
	expect_error(top, sizeof(top), DMAR_WS_MASK_ANY, 1000, -EPROTO);
	const uint8_t huge[] = { 0x82, 127, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	expect_error(huge, sizeof(huge), DMAR_WS_MASK_ANY, 1000, -EMSGSIZE);
}

static int stop_at_second(void *ctx, const struct dmar_ws_frame *f)
{
	int *n = ctx;
	return ++*n == 2 ? -ECANCELED : 0;
}

static void test_callback_stops(void **state)
{
	uint8_t buf[64];
	size_t n = frame(buf, 0x81, "a", 1, false);
	n += frame(buf + n, 0x81, "b", 1, false);
	n += frame(buf + n, 0x81, "c", 1, false);
	int count = 0;
	struct dmar_ws_parser *p;
	assert_int_equal(dmar_ws_parser_new(&p, 10, DMAR_WS_MASK_FORBIDDEN, stop_at_second, &count), 0);
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_ws_parser_feed(p, buf, n, &err), -ECANCELED);
	assert_int_equal(count, 2);
	dmar_ws_parser_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_key),
		cmocka_unit_test(test_frame_header),
		cmocka_unit_test(test_parse_stream),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_callback_stops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
