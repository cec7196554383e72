/* SPDX-License-Identifier: MIT */
/*
 * RFC 6455 helpers (ws.h): the handshake key, frame headers, and the
 * incremental frame parser.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ws.h"
#include "codec/libcrypto.h"

/* ---- handshake ---------------------------------------------------------- */

static bool is_b64(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

int dmar_ws_accept_key(const char *key, char out[DMAR_WS_ACCEPT_SIZE])
{
	if (!key || strlen(key) != DMAR_WS_KEY_SIZE || key[22] != '=' || key[23] != '=')
		return -EINVAL;
	for (int i = 0; i < 22; i++)
		if (!is_b64(key[i]))
			return -EINVAL;
	uint8_t in[DMAR_WS_KEY_SIZE + sizeof(DMAR_WS_GUID) - 1];
	memcpy(in, key, DMAR_WS_KEY_SIZE);
	memcpy(in + DMAR_WS_KEY_SIZE, DMAR_WS_GUID, sizeof(DMAR_WS_GUID) - 1);
	uint8_t sha[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	int r = dmar_libcrypto_load(NULL);
	if (r < 0)
		return r;
	if (!dmar_libcrypto.digest(in, sizeof(in), sha, &n, dmar_libcrypto.sha1, NULL) || n != 20)
		return -EIO;
	/* 20 bytes encode to 28 characters and a NUL: exactly out's size. */
	dmar_libcrypto.encode_block((unsigned char *)out, sha, 20);
	return 0;
}

/* ---- writing ------------------------------------------------------------ */

size_t dmar_ws_frame_header(uint8_t out[DMAR_WS_HDR_MAX], enum dmar_ws_opcode opcode, uint64_t len,
			    const uint8_t *mask)
{
	size_t n = 2;
	out[0] = (uint8_t)(0x80 | (opcode & 0x0f));
	uint8_t m = mask ? 0x80 : 0;
	if (len <= 125) {
		out[1] = (uint8_t)(m | len);
	} else if (len <= 0xffff) {
		out[1] = m | 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		n = 4;
	} else {
		out[1] = m | 127;
		for (int i = 0; i < 8; i++)
			out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 10;
	}
	if (mask) {
		memcpy(out + n, mask, 4);
		n += 4;
	}
	return n;
}

void dmar_ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], uint64_t offset)
{
	for (size_t i = 0; i < len; i++)
		data[i] ^= mask[(offset + i) & 3];
}

/* ---- parsing ------------------------------------------------------------ */

/*
 * Two phases per frame: the header (2 bytes, then as many more as the
 * length and mask bits announce, collected in hdr), then the payload,
 * unmasked as it is copied into buf.  buf grows to the largest frame seen,
 * never beyond max_payload.
 */
struct dmar_ws_parser {
	dmar_ws_frame_fn fn;
	void *ctx;
	size_t max_payload;
	enum dmar_ws_masking masking;
	int failed;          /* sticky error */
	bool in_message;     /* a fragmented text/binary message is open */
	uint8_t hdr[DMAR_WS_HDR_MAX];
	size_t hdr_have, hdr_need;
	bool in_payload;
	struct dmar_ws_frame f;
	bool masked;
	uint8_t mask[4];
	uint8_t *buf;
	size_t cap, have;
};

int dmar_ws_parser_new(struct dmar_ws_parser **out, size_t max_payload, enum dmar_ws_masking masking,
		       dmar_ws_frame_fn fn, void *ctx)
{
	struct dmar_ws_parser *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->fn = fn;
	p->ctx = ctx;
	p->max_payload = max_payload;
	p->masking = masking;
	p->hdr_need = 2;
	*out = p;
	return 0;
}

void dmar_ws_parser_free(struct dmar_ws_parser *p)
{
	if (!p)
		return;
	free(p->buf);
	free(p);
}

static int fail(struct dmar_ws_parser *p, int code)
{
	p->failed = code;
	return code;
}

static int proto(struct dmar_ws_parser *p, struct dmar_error *err, const char *what)
{
	return fail(p, dmar_error_set(err, -EPROTO, "websocket: %s", what));
}

static bool is_control(unsigned op)
{
	return op & 0x8;
}

/* The first two bytes: everything that can be judged before the length. */
static int check_start(struct dmar_ws_parser *p, struct dmar_error *err)
{
	unsigned op = p->hdr[0] & 0x0f;
	bool fin = p->hdr[0] & 0x80;
	unsigned len7 = p->hdr[1] & 0x7f;
	p->masked = p->hdr[1] & 0x80;
	if (p->hdr[0] & 0x70)
		return proto(p, err, "RSV bits set (no extension was negotiated)");
	if (op != DMAR_WS_CONT && op != DMAR_WS_TEXT && op != DMAR_WS_BINARY && op != DMAR_WS_CLOSE &&
	    op != DMAR_WS_PING && op != DMAR_WS_PONG)
		return proto(p, err, "unknown opcode");
	if (is_control(op) && !fin)
		return proto(p, err, "fragmented control frame");
	if (is_control(op) && len7 > DMAR_WS_CONTROL_MAX)
		return proto(p, err, "control frame longer than 125 bytes");
	if (op == DMAR_WS_CONT && !p->in_message)
		return proto(p, err, "continuation frame outside a fragmented message");
	if ((op == DMAR_WS_TEXT || op == DMAR_WS_BINARY) && p->in_message)
		return proto(p, err, "new message inside a fragmented one");
	if (p->masking == DMAR_WS_MASK_REQUIRED && !p->masked)
		return proto(p, err, "unmasked frame from a client");
	if (p->masking == DMAR_WS_MASK_FORBIDDEN && p->masked)
		return proto(p, err, "masked frame from a server");
	p->f.opcode = (enum dmar_ws_opcode)op;
	p->f.fin = fin;
	p->hdr_need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (p->masked ? 4 : 0);
	return 0;
}

/* The whole header is in: the length (minimal encoding, top bit clear) and
 * the mask; then get ready for the payload. */
static int check_header(struct dmar_ws_parser *p, struct dmar_error *err)
{
	unsigned len7 = p->hdr[1] & 0x7f;
	uint64_t len = len7;
	size_t at = 2;
	if (len7 == 126) {
		len = (uint64_t)p->hdr[2] << 8 | p->hdr[3];
		at = 4;
		if (len < 126)
			return proto(p, err, "length not in its shortest form");
	} else if (len7 == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | p->hdr[2 + i];
		at = 10;
		if (len >> 63)
			return proto(p, err, "64-bit length with the top bit set");
		if (len <= 0xffff)
			return proto(p, err, "length not in its shortest form");
	}
	if (p->f.opcode == DMAR_WS_CLOSE && len == 1)
		return proto(p, err, "close frame with a 1-byte payload");
	if (len > p->max_payload)
		return fail(p, dmar_error_set(err, -EMSGSIZE, "websocket: %" PRIu64 "-byte frame, the limit is %zu",
					      len, p->max_payload));
	if (p->masked)
		memcpy(p->mask, p->hdr + at, 4);
	if (len > p->cap) {
		uint8_t *b = realloc(p->buf, (size_t)len);
		if (!b)
			return fail(p, -ENOMEM);
		p->buf = b;
		p->cap = (size_t)len;
	}
	p->f.len = (size_t)len;
	p->have = 0;
	p->in_payload = true;
	return 0;
}

static int deliver(struct dmar_ws_parser *p)
{
	static const uint8_t empty[1];
	p->f.payload = p->f.len ? p->buf : empty;
	if (p->f.opcode == DMAR_WS_TEXT || p->f.opcode == DMAR_WS_BINARY || p->f.opcode == DMAR_WS_CONT)
		p->in_message = !p->f.fin;
	p->in_payload = false;
	p->hdr_have = 0;
	p->hdr_need = 2;
	int r = p->fn(p->ctx, &p->f);
	return r < 0 ? fail(p, r) : 0;
}

int dmar_ws_parser_feed(struct dmar_ws_parser *p, const void *data, size_t len, struct dmar_error *err)
{
	const uint8_t *d = data;
	if (p->failed)
		return p->failed;
	while (len || (p->in_payload && p->have == p->f.len)) {
		if (p->in_payload) {
			size_t take = p->f.len - p->have;
			if (take > len)
				take = len;
			if (take) { /* an empty payload has no buffer yet */
				memcpy(p->buf + p->have, d, take);
				if (p->masked)
					dmar_ws_mask(p->buf + p->have, take, p->mask, p->have);
			}
			p->have += take;
			d += take;
			len -= take;
			if (p->have < p->f.len)
				return 0;
			if (deliver(p) < 0)
				return p->failed;
			continue;
		}
		size_t take = p->hdr_need - p->hdr_have;
		if (take > len)
			take = len;
		memcpy(p->hdr + p->hdr_have, d, take);
		p->hdr_have += take;
		d += take;
		len -= take;
		if (p->hdr_have < p->hdr_need)
			return 0;
		if (p->hdr_need == 2 && check_start(p, err) < 0)
			return p->failed;
		if (p->hdr_have == p->hdr_need && check_header(p, err) < 0)
			return p->failed;
	}
	return 0;
}
