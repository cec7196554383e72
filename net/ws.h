/* SPDX-License-Identifier: MIT */
/*
 * ws.h - the pieces of RFC 6455 (websockets) that the event stream needs,
 * for both ends: the server's GET /v1/events and a `dmar watch` client.
 *
 * No sockets here: the handshake key, writing a frame header, and an
 * incremental parser that turns received bytes into frames.  The parser
 * takes untrusted bytes; it checks every rule of RFC 6455 section 5 that
 * can be checked frame by frame (RSV bits, known opcodes, control frames
 * final and at most 125 bytes, a close payload never 1 byte, lengths in
 * their minimal encoding with the top bit clear, masking as the side
 * requires, fragment sequencing) and never buffers more than one frame's
 * payload, at most max_payload bytes.  It does not check that text is
 * UTF-8 and does not reassemble fragmented messages: each frame is
 * delivered as it completes (a continuation with DMAR_WS_CONT).
 *
 * Thread-safety: the functions are pure or work on one parser, which a
 * single thread feeds at a time.
 */
#ifndef DMAR_WS_H
#define DMAR_WS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/error.h"

#define DMAR_WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define DMAR_WS_KEY_SIZE 24    /* base64 of 16 random bytes */
#define DMAR_WS_ACCEPT_SIZE 29 /* base64 of a SHA-1, plus NUL */
#define DMAR_WS_HDR_MAX 14     /* 2 + 8 (64-bit length) + 4 (mask) */
#define DMAR_WS_CONTROL_MAX 125

enum dmar_ws_opcode {
	DMAR_WS_CONT = 0x0,
	DMAR_WS_TEXT = 0x1,
	DMAR_WS_BINARY = 0x2,
	DMAR_WS_CLOSE = 0x8,
	DMAR_WS_PING = 0x9,
	DMAR_WS_PONG = 0xa,
};

/* Close codes the server sends (RFC 6455 7.4.1). */
#define DMAR_WS_CLOSE_NORMAL 1000
#define DMAR_WS_CLOSE_GOING_AWAY 1001
#define DMAR_WS_CLOSE_PROTOCOL 1002
#define DMAR_WS_CLOSE_TOO_BIG 1009

/*
 * out = base64(SHA-1(key + DMAR_WS_GUID)), the Sec-WebSocket-Accept for a
 * Sec-WebSocket-Key, NUL-terminated.  key must look like a key: 24 base64
 * characters ending in "==" (16 bytes); else -EINVAL and out untouched.
 * 0 on success; -ELIBACC when libcrypto (the SHA-1) cannot be loaded.
 */
int dmar_ws_accept_key(const char *key, char out[DMAR_WS_ACCEPT_SIZE]);

/*
 * Write the header of a final (FIN) frame with this opcode and payload
 * length into out; mask (4 bytes) or NULL for an unmasked frame (a server
 * never masks; a client always must, with fresh random bytes, and then
 * masks the payload with dmar_ws_mask).  Returns the header's length,
 * 2..14.
 */
size_t dmar_ws_frame_header(uint8_t out[DMAR_WS_HDR_MAX], enum dmar_ws_opcode opcode, uint64_t len,
			    const uint8_t *mask);

/* XOR data[0..len) with the mask, as the bytes at offset.. of a payload
 * (masking and unmasking are the same operation). */
void dmar_ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], uint64_t offset);

/* What the parser requires of the frames' mask bit. */
enum dmar_ws_masking {
	DMAR_WS_MASK_REQUIRED,  /* a server reading a client: every frame masked */
	DMAR_WS_MASK_FORBIDDEN, /* a client reading a server: none masked */
	DMAR_WS_MASK_ANY,
};

struct dmar_ws_frame {
	enum dmar_ws_opcode opcode;
	bool fin;
	const uint8_t *payload; /* unmasked; valid only during the callback */
	size_t len;
};

/* Called once per complete frame, in order.  A negative return stops the
 * parser: feed returns it, now and on every later call. */
typedef int (*dmar_ws_frame_fn)(void *ctx, const struct dmar_ws_frame *f);

struct dmar_ws_parser;
/* A parser for frames of at most max_payload bytes.  0 or -ENOMEM. */
int dmar_ws_parser_new(struct dmar_ws_parser **out, size_t max_payload, enum dmar_ws_masking masking,
		       dmar_ws_frame_fn fn, void *ctx);
/*
 * Feed received bytes, in pieces of any size.  Returns 0; -EPROTO when the
 * peer broke the protocol (err says how: "websocket: RSV bits set"; answer
 * with close 1002); -EMSGSIZE for a frame beyond max_payload (close 1009);
 * -ENOMEM; or fn's negative return.  Errors are sticky.
 */
int dmar_ws_parser_feed(struct dmar_ws_parser *p, const void *data, size_t len, struct dmar_error *err);
void dmar_ws_parser_free(struct dmar_ws_parser *p); /* NULL-safe */

/* ---- the client side (ws_client.c, over libcurl) ---------------------------- */

struct dmar_ws_client_opts {
	const char *url;        /* http(s)://HOST:PORT of the server (libcurl connects) */
	const char *host;       /* the Host header */
	const char *path;       /* the request target, e.g. "/v1/events" */
	const char *token;      /* Authorization: Bearer TOKEN, or NULL */
	const char *tls_ca;     /* CA file for https, or NULL */
	const char *user_agent; /* NULL: "dmar" */
	size_t max_payload;     /* the largest frame accepted */
	long connect_ms, io_ms; /* 0: 5000 each */
	volatile sig_atomic_t *stop; /* set (by a signal handler): waits end with -EINTR */
	const int *wake_fd;          /* NULL, or a descriptor whose becoming readable ends waits
				      * with -EINTR at once (another thread's stop; a signal's
				      * flag is seen within 250 ms, or at once where the signal
				      * interrupts the wait) */
};
struct dmar_ws_client;
/* Connect, upgrade, and check the 101 answer; fn gets each frame the
 * server sends, from here and from dmar_ws_client_pump.  0, or -errno
 * with err: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -EIO (connecting),
 * -EKEYREJECTED (HTTP 401), the errno an error answer names, -EPROTO (not
 * a websocket answer), -EINTR. */
int dmar_ws_client_connect(struct dmar_ws_client **out, const struct dmar_ws_client_opts *o, dmar_ws_frame_fn fn,
			   void *ctx, struct dmar_error *err);
/* Receive what comes within ms (-1: until something does) and feed it to
 * the parser.  0; -ETIMEDOUT, -EINTR, -EIO, -ECONNRESET (closed without a
 * close frame); or the parser's error (-EPROTO, -EMSGSIZE: answer with a
 * close 1002 / 1009), with err. */
int dmar_ws_client_pump(struct dmar_ws_client *c, int ms, struct dmar_error *err);
/* A masked frame of at most DMAR_WS_CONTROL_MAX bytes (a pong, a close):
 * 0, -EMSGSIZE, -EIO, -EINTR, -ETIMEDOUT. */
int dmar_ws_client_send(struct dmar_ws_client *c, enum dmar_ws_opcode op, const void *data, size_t len);
int dmar_ws_client_close(struct dmar_ws_client *c, int code);
void dmar_ws_client_free(struct dmar_ws_client *c); /* NULL-safe */

#endif /* DMAR_WS_H */
