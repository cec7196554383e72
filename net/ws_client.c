/* SPDX-License-Identifier: MIT */
/*
 * The client side of a websocket (ws.h): a libcurl connection opened with
 * CURLOPT_CONNECT_ONLY (so TLS, the CA file and proxies work as for every
 * other call of the client), our own upgrade request and check of the 101
 * answer, then frames through the parser.  Server frames are unmasked;
 * ours are masked with fresh random bytes, as RFC 6455 wants.
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "libcurl.h"
#include "wire.h"
#include "ws.h"

#define HDR_MAX (16u << 10)

struct dmar_ws_client {
	CURL *h;
	curl_socket_t sock;
	struct dmar_ws_parser *parser;
	volatile sig_atomic_t *stop;
	int wake; /* or -1 */
	long io_ms;
};

/* Wait until the socket is readable (or writable); 0, -ETIMEDOUT after ms
 * (-1: no limit), -EINTR when *stop was set or the wake descriptor is
 * readable. */
static int wait_sock(struct dmar_ws_client *c, bool out, int ms)
{
	for (;;) {
		if (c->stop && *c->stop)
			return -EINTR;
		struct pollfd pfd[2] = { { .fd = c->sock, .events = out ? POLLOUT : POLLIN },
					 { .fd = c->wake, .events = POLLIN } };
		/* A stop between the check and poll is seen within 250 ms. */
		int slice = ms < 0 || ms > 250 ? 250 : ms;
		int n = poll(pfd, c->wake >= 0 ? 2 : 1, slice);
		if (n > 0 && c->wake >= 0 && pfd[1].revents)
			return -EINTR;
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
		if (ms >= 0 && (ms -= slice) <= 0)
			return -ETIMEDOUT;
	}
}

static int send_all(struct dmar_ws_client *c, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		size_t n = 0;
		CURLcode cc = curl_easy_send(c->h, p, len, &n);
		if (cc == CURLE_AGAIN) {
			int r = wait_sock(c, true, (int)c->io_ms);
			if (r < 0)
				return r;
			continue;
		}
		if (cc != CURLE_OK)
			return -EIO;
		p += n;
		len -= n;
	}
	return 0;
}

/* Some bytes: their number, 0 when the peer closed the connection, or
 * -ETIMEDOUT, -EINTR, -EIO. */
static ssize_t recv_some(struct dmar_ws_client *c, void *buf, size_t cap, int ms)
{
	for (;;) {
		size_t n = 0;
		CURLcode cc = curl_easy_recv(c->h, buf, cap, &n);
		if (cc == CURLE_OK)
			return (ssize_t)n;
		if (cc != CURLE_AGAIN)
			return -EIO;
		int r = wait_sock(c, false, ms);
		if (r < 0)
			return r;
	}
}

static void b64(const uint8_t *in, size_t n, char *out)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
			     (i + 2 < n ? in[i + 2] : 0);
		out[o++] = t[v >> 18 & 63];
		out[o++] = t[v >> 12 & 63];
		out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? t[v & 63] : '=';
	}
	out[o] = 0;
}

/* The value of header name in the header block hdr (NUL-terminated), its
 * length in *len; NULL if absent. */
static const char *header_value(const char *hdr, const char *name, size_t *len)
{
	size_t nl = strlen(name);
	for (const char *l = strstr(hdr, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
		const char *s = l + 2;
		if (strncasecmp(s, name, nl) || s[nl] != ':')
			continue;
		s += nl + 1;
		while (*s == ' ' || *s == '\t')
			s++;
		const char *e = strstr(s, "\r\n");
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		*len = (size_t)(e - s);
		return s;
	}
	return NULL;
}

/* The upgrade: request, then the answer up to the blank line (what came
 * after it is the first frames: fed to the parser). */
static int handshake(struct dmar_ws_client *c, const struct dmar_ws_client_opts *o, struct dmar_error *err)
{
	uint8_t raw[16];
	char key[DMAR_WS_KEY_SIZE + 1], accept[DMAR_WS_ACCEPT_SIZE];
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return dmar_error_errno(err, -EIO, "getrandom");
	b64(raw, sizeof(raw), key);
	int r = dmar_ws_accept_key(key, accept);
	if (r < 0)
		return dmar_error_set(err, r, "websocket: cannot compute the accept key (libcrypto)");
	char *req = NULL;
	int n = asprintf(&req,
			 "GET %s HTTP/1.1\r\n"
			 "Host: %s\r\n"
			 "User-Agent: %s\r\n"
			 "Upgrade: websocket\r\n"
			 "Connection: Upgrade\r\n"
			 "Sec-WebSocket-Key: %s\r\n"
			 "Sec-WebSocket-Version: 13\r\n"
			 "%s%s%s"
			 "\r\n",
			 o->path, o->host, o->user_agent ? o->user_agent : "dmar", key,
			 o->token ? "Authorization: Bearer " : "", o->token ? o->token : "", o->token ? "\r\n" : "");
	if (n < 0)
		return dmar_error_set(err, -ENOMEM, "out of memory");
	r = send_all(c, req, (size_t)n);
	explicit_bzero(req, (size_t)n);
	free(req);
	if (r < 0)
		return dmar_error_set(err, r, "sending the upgrade request: %s", strerror(-r));

	char *buf = malloc(HDR_MAX + 1);
	if (!buf)
		return dmar_error_set(err, -ENOMEM, "out of memory");
	size_t have = 0;
	char *end = NULL;
	while (!end) {
		if (have == HDR_MAX) {
			r = dmar_error_set(err, -EPROTO, "answer headers over %u bytes", HDR_MAX);
			goto out;
		}
		ssize_t got = recv_some(c, buf + have, HDR_MAX - have, (int)c->io_ms);
		if (got <= 0) {
			r = got == 0 ? -ECONNRESET : (int)got;
			dmar_error_set(err, r, "waiting for the upgrade: %s",
				       got == 0 ? "connection closed" : strerror(-r));
			goto out;
		}
		have += (size_t)got;
		buf[have] = 0;
		end = strstr(buf, "\r\n\r\n");
	}
	end[2] = 0; /* the header block keeps its last CRLF */
	int status = 0;
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) {
		r = dmar_error_set(err, -EPROTO, "not an HTTP answer");
		goto out;
	}
	if (status != 101) {
		/* An error answer carries {"error": ...} when the node sent one
		 * whole with its headers. */
		json_t *body = json_loadb(end + 4, have - (size_t)(end + 4 - buf), 0, NULL);
		const char *msg = json_string_value(json_object_get(body, "error"));
		const char *en = json_string_value(json_object_get(body, "errno"));
		r = status == 401 ? -EKEYREJECTED : en ? dmar_wire_errno_from_name(en) : -EPROTO;
		dmar_error_set(err, r, "HTTP %d%s%s", status, msg ? ": " : "", msg ? msg : "");
		json_decref(body);
		goto out;
	}
	size_t vl = 0;
	const char *v = header_value(buf, "Sec-WebSocket-Accept", &vl);
	if (!v || vl != strlen(accept) || memcmp(v, accept, vl)) {
		r = dmar_error_set(err, -EPROTO, "wrong or missing Sec-WebSocket-Accept in the 101 answer");
		goto out;
	}
	v = header_value(buf, "Upgrade", &vl);
	if (!v || vl != 9 || strncasecmp(v, "websocket", 9)) {
		r = dmar_error_set(err, -EPROTO, "the 101 answer does not upgrade to websocket");
		goto out;
	}
	r = dmar_ws_parser_feed(c->parser, end + 4, have - (size_t)(end + 4 - buf), err);
	if (r < 0 && !err->code)
		dmar_error_set(err, r, "%s", strerror(-r));
out:
	free(buf);
	return r;
}

int dmar_ws_client_connect(struct dmar_ws_client **out, const struct dmar_ws_client_opts *o, dmar_ws_frame_fn fn,
			   void *ctx, struct dmar_error *err)
{
	*out = NULL;
	int r = dmar_libcurl_load(err);
	if (r < 0)
		return r;
	struct dmar_ws_client *c = calloc(1, sizeof(*c));
	if (!c)
		return dmar_error_set(err, -ENOMEM, "out of memory");
	c->sock = CURL_SOCKET_BAD;
	c->stop = o->stop;
	c->wake = o->wake_fd ? *o->wake_fd : -1;
	c->io_ms = o->io_ms > 0 ? o->io_ms : 5000;
	if (!(c->h = curl_easy_init())) {
		free(c);
		return dmar_error_set(err, -ENOMEM, "out of memory");
	}
	curl_easy_setopt(c->h, CURLOPT_URL, o->url);
	curl_easy_setopt(c->h, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, o->connect_ms > 0 ? o->connect_ms : 5000L);
	curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
	if (o->tls_ca)
		curl_easy_setopt(c->h, CURLOPT_CAINFO, o->tls_ca);
	char cerr[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, cerr);
	CURLcode cc = curl_easy_perform(c->h);
	curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, NULL);
	if (cc != CURLE_OK) {
		r = cc == CURLE_COULDNT_CONNECT ? -ECONNREFUSED
		    : cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
		    : cc == CURLE_COULDNT_RESOLVE_HOST ? -EHOSTUNREACH : -EIO;
		dmar_error_set(err, r, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
	} else if (curl_easy_getinfo(c->h, CURLINFO_ACTIVESOCKET, &c->sock) != CURLE_OK || c->sock == CURL_SOCKET_BAD) {
		r = dmar_error_set(err, -EIO, "no socket from libcurl");
	} else if ((r = dmar_ws_parser_new(&c->parser, o->max_payload, DMAR_WS_MASK_FORBIDDEN, fn, ctx)) < 0) {
		dmar_error_set(err, r, "out of memory");
	} else {
		r = handshake(c, o, err);
	}
	if (r < 0) {
		dmar_ws_client_free(c);
		return r;
	}
	*out = c;
	return 0;
}

int dmar_ws_client_pump(struct dmar_ws_client *c, int ms, struct dmar_error *err)
{
	uint8_t buf[64 << 10];
	ssize_t n = recv_some(c, buf, sizeof(buf), ms);
	if (n == 0)
		return dmar_error_set(err, -ECONNRESET, "connection closed without a close frame");
	if (n < 0)
		return dmar_error_set(err, (int)n, "%s", strerror((int)-n));
	int r = dmar_ws_parser_feed(c->parser, buf, (size_t)n, err);
	if (r < 0 && err && !err->code)
		dmar_error_set(err, r, "%s", strerror(-r));
	return r;
}

int dmar_ws_client_send(struct dmar_ws_client *c, enum dmar_ws_opcode op, const void *data, size_t len)
{
	uint8_t f[DMAR_WS_HDR_MAX + DMAR_WS_CONTROL_MAX], mask[4];
	if (len > DMAR_WS_CONTROL_MAX)
		return -EMSGSIZE;
	if (getrandom(mask, sizeof(mask), 0) != (ssize_t)sizeof(mask))
		return -EIO;
	size_t h = dmar_ws_frame_header(f, op, len, mask);
	if (len)
		memcpy(f + h, data, len);
	dmar_ws_mask(f + h, len, mask, 0);
	return send_all(c, f, h + len);
}

int dmar_ws_client_close(struct dmar_ws_client *c, int code)
{
	uint8_t p[2] = { (uint8_t)(code >> 8), (uint8_t)code };
	return dmar_ws_client_send(c, DMAR_WS_CLOSE, p, sizeof(p));
}

void dmar_ws_client_free(struct dmar_ws_client *c)
{
	if (!c)
		return;
	dmar_ws_parser_free(c->parser);
	if (c->h)
		curl_easy_cleanup(c->h);
	free(c);
}
