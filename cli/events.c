/* SPDX-License-Identifier: MIT */
/*
 * A node's event stream (GET /v1/events) as a `dmar` command follows it:
 * the websocket of net/ws.h, whole messages assembled from their frames,
 * pings answered, the node's close seen.  dmar watch prints each message;
 * dmar cp follows the nodes that relay its broadcast (their
 * relay.progress).
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "net/peers.h"
#include "net/wire.h"
#include "net/ws.h"
#include "codec/clock.h"

#define EVENTS_MSG_MAX (1u << 20)

struct cli_events {
	struct dmar_ws_client *ws;
	cli_event_fn fn;
	void *ctx;
	uint8_t *msg; /* the message being assembled from its frames */
	size_t msg_len;
	bool closed;
	int close_code;
};

static int on_frame(void *arg, const struct dmar_ws_frame *f)
{
	struct cli_events *e = arg;
	if (e->closed)
		return 0;
	switch (f->opcode) {
	case DMAR_WS_TEXT:
	case DMAR_WS_BINARY:
	case DMAR_WS_CONT:
		if (f->opcode != DMAR_WS_CONT)
			e->msg_len = 0;
		if (e->msg_len + f->len > EVENTS_MSG_MAX)
			return -EMSGSIZE;
		if (f->fin && !e->msg_len)
			return e->fn(e->ctx, f->payload, f->len);
		if (!e->msg && !(e->msg = malloc(EVENTS_MSG_MAX)))
			return -ENOMEM;
		memcpy(e->msg + e->msg_len, f->payload, f->len);
		e->msg_len += f->len;
		if (!f->fin)
			return 0;
		size_t whole = e->msg_len;
		e->msg_len = 0;
		return e->fn(e->ctx, e->msg, whole);
	case DMAR_WS_PING:
		return e->ws ? dmar_ws_client_send(e->ws, DMAR_WS_PONG, f->payload, f->len) : 0;
	case DMAR_WS_PONG:
		return 0;
	case DMAR_WS_CLOSE:
		e->closed = true;
		e->close_code = f->len >= 2 ? f->payload[0] << 8 | f->payload[1] : DMAR_WS_CLOSE_NORMAL;
		return 0;
	}
	return 0;
}

int cli_events_open(struct cli_events **out, const struct cli_net *net, const struct dmar_peer *p, long connect_ms,
		    volatile sig_atomic_t *stop, int wake_fd, cli_event_fn fn, void *ctx, struct dmar_error *err)
{
	char url[DMAR_PEER_URL_MAX], host[DMAR_PEER_URL_MAX];
	*out = NULL;
	if (dmar_peers_url(p, url, sizeof(url)) < 0)
		return dmar_error_set(err, -ENAMETOOLONG, "the node's URL is too long");
	struct cli_events *e = calloc(1, sizeof(*e));
	if (!e)
		return dmar_error_set(err, -ENOMEM, "out of memory");
	e->fn = fn;
	e->ctx = ctx;
	struct dmar_ws_client_opts o = {
		.url = url,
		.host = dmar_peers_address(p, host, sizeof(host)),
		.path = "/v1/events",
		.token = net->token,
		.tls_ca = net->tls_ca,
		.user_agent = "dmar/" PACKAGE_VERSION,
		.max_payload = EVENTS_MSG_MAX,
		.connect_ms = connect_ms,
		.io_ms = connect_ms,
		.stop = stop,
		.wake_fd = wake_fd >= 0 ? &wake_fd : NULL,
	};
	int r = dmar_ws_client_connect(&e->ws, &o, on_frame, e, err);
	if (r < 0) {
		if (r == -EKEYREJECTED && !net->token) {
			size_t l = strlen(err->msg);
			snprintf(err->msg + l, sizeof(err->msg) - l, " (no token: --token FILE or $DMAR_TOKEN_FILE)");
		}
		cli_events_free(e);
		return r;
	}
	*out = e;
	return 0;
}

int cli_events_pump(struct cli_events *e, int ms, struct dmar_error *err)
{
	if (e->closed)
		return 0;
	int r = dmar_ws_client_pump(e->ws, ms, err);
	if (r == -EPROTO || r == -EMSGSIZE)
		dmar_ws_client_close(e->ws, r == -EMSGSIZE ? DMAR_WS_CLOSE_TOO_BIG : DMAR_WS_CLOSE_PROTOCOL);
	return r;
}

bool cli_events_closed(const struct cli_events *e, int *code)
{
	if (e->closed && code)
		*code = e->close_code;
	return e->closed;
}

void cli_events_end(struct cli_events *e)
{
	if (!e)
		return;
	if (e->closed) { /* the node's close, answered with its code */
		dmar_ws_client_close(e->ws, e->close_code == DMAR_WS_CLOSE_NORMAL ||
							   e->close_code == DMAR_WS_CLOSE_GOING_AWAY ?
						    e->close_code :
						    DMAR_WS_CLOSE_NORMAL);
		return;
	}
	/* We end it: our close, then a moment for the node's. */
	if (dmar_ws_client_close(e->ws, DMAR_WS_CLOSE_NORMAL) < 0)
		return;
	double t0 = dmar_mono_s();
	while (!e->closed && dmar_mono_s() - t0 < 1.0) {
		int r = dmar_ws_client_pump(e->ws, 250, NULL);
		if (r < 0 && r != -ETIMEDOUT)
			break;
	}
}

void cli_events_free(struct cli_events *e)
{
	if (!e)
		return;
	dmar_ws_client_free(e->ws);
	free(e->msg);
	free(e);
}
