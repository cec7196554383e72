/* SPDX-License-Identifier: MIT */
/*
 * GET /v1/events: the websocket event stream and the thread that serves
 * it (server_i.h).
 */
#include "config.h"

#include "server_i.h"
#include "codec/clock.h"


void srv_wake_events(struct dmar_server *s)
{
	char b = 0;
	ssize_t r = write(s->wake[1], &b, 1);
	(void)r; /* a full pipe wakes the thread just as well */
}

/* Append a frame to cl's backlog; false (and cl dropped) past the limit.
 * Called with s->lock held, or before the event thread knows cl. */
bool srv_ws_queue(struct ws_client *cl, enum dmar_ws_opcode op, const void *payload, size_t len)
{
	uint8_t h[DMAR_WS_HDR_MAX];
	size_t hl = dmar_ws_frame_header(h, op, len, NULL);
	if (cl->out_off && cl->out_off == cl->out_len)
		cl->out_off = cl->out_len = 0;
	size_t pending = cl->out_len - cl->out_off;
	if (pending + hl + len > WS_BACKLOG_MAX) {
		cl->dead = true;
		return false;
	}
	if (cl->out_len + hl + len > cl->out_cap) {
		/* Slide what is still unsent to the front before growing. */
		if (pending)
			memmove(cl->out, cl->out + cl->out_off, pending);
		cl->out_len = pending;
		cl->out_off = 0;
		if (pending + hl + len > cl->out_cap) {
			size_t cap = cl->out_cap ? cl->out_cap : 4096;
			while (cap < pending + hl + len)
				cap *= 2;
			uint8_t *o = realloc(cl->out, cap);
			if (!o) {
				cl->dead = true;
				return false;
			}
			cl->out = o;
			cl->out_cap = cap;
		}
	}
	memcpy(cl->out + cl->out_len, h, hl);
	if (len)
		memcpy(cl->out + cl->out_len + hl, payload, len);
	cl->out_len += hl + len;
	return true;
}

/* Queue a close frame with this code; nothing more is sent after it. */
static void ws_close(struct ws_client *cl, unsigned code)
{
	if (cl->closing)
		return;
	uint8_t p[2] = { (uint8_t)(code >> 8), (uint8_t)code };
	srv_ws_queue(cl, DMAR_WS_CLOSE, p, code ? 2 : 0);
	cl->closing = true;
	cl->closing_since_ms = (int64_t)dmar_mono_ms();
}

/* A client's frame (event thread): answer pings and closes, ignore data. */
static int on_ws_frame(void *ctx, const struct dmar_ws_frame *f)
{
	struct ws_client *cl = ctx;
	pthread_mutex_lock(&cl->s->lock);
	if (f->opcode == DMAR_WS_PING && !cl->closing) {
		srv_ws_queue(cl, DMAR_WS_PONG, f->payload, f->len);
	} else if (f->opcode == DMAR_WS_CLOSE) {
		/* Echo the client's status code, as RFC 6455 5.5.1 suggests. */
		unsigned code = f->len >= 2 ? (unsigned)f->payload[0] << 8 | f->payload[1] : 0;
		ws_close(cl, code);
	}
	pthread_mutex_unlock(&cl->s->lock);
	return 0;
}

/* Feed received bytes; a protocol error is answered with a close frame. */
static void ws_feed(struct ws_client *cl, const void *data, size_t len)
{
	struct dmar_error err = { 0 };
	int r = dmar_ws_parser_feed(cl->parser, data, len, &err);
	if (r < 0) {
		pthread_mutex_lock(&cl->s->lock);
		ws_close(cl, r == -EMSGSIZE ? DMAR_WS_CLOSE_TOO_BIG : DMAR_WS_CLOSE_PROTOCOL);
		pthread_mutex_unlock(&cl->s->lock);
	}
}

static void ws_read(struct dmar_server *s, struct ws_client *cl)
{
	uint8_t buf[4096];
	ssize_t n = recv(cl->sock, buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		pthread_mutex_lock(&s->lock);
		cl->dead = true;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	ws_feed(cl, buf, (size_t)n);
}

/* Send what cl's backlog holds, as far as the socket takes it; then, if
 * the close frame is out, the client is done.  Called with s->lock held. */
static void ws_flush(struct ws_client *cl)
{
	while (!cl->dead && cl->out_off < cl->out_len) {
		ssize_t n = send(cl->sock, cl->out + cl->out_off, cl->out_len - cl->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			cl->dead = true;
			break;
		}
		cl->out_off += (size_t)n;
	}
	if (cl->closing && cl->out_off == cl->out_len)
		cl->dead = true;
	if (cl->closing && (int64_t)dmar_mono_ms() - cl->closing_since_ms > WS_CLOSE_WAIT_MS)
		cl->dead = true;
}

void srv_ws_client_free(struct ws_client *cl)
{
	MHD_upgrade_action(cl->urh, MHD_UPGRADE_ACTION_CLOSE);
	dmar_ws_parser_free(cl->parser);
	free(cl->out);
	free(cl);
}

/* The event thread: poll the wake pipe and every client. */
void *srv_event_loop(void *arg)
{
	struct dmar_server *s = arg;
	struct pollfd *fds = NULL;
	struct ws_client **cls = NULL;
	size_t cap = 0;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		if (s->stopping) {
			pthread_mutex_unlock(&s->lock);
			break;
		}
		/* Reap the dead; only this thread unlinks and frees clients. */
		struct ws_client **pp = &s->clients, *dead = NULL;
		while (*pp) {
			struct ws_client *cl = *pp;
			if (cl->dead) {
				*pp = cl->next;
				cl->next = dead;
				dead = cl;
				s->nclients--;
			} else {
				pp = &cl->next;
			}
		}
		size_t n = 1 + s->nclients;
		if (n > cap) {
			struct pollfd *nf = realloc(fds, n * sizeof(*fds));
			struct ws_client **nc = nf ? realloc(cls, n * sizeof(*cls)) : NULL;
			if (nf)
				fds = nf;
			if (nc)
				cls = nc;
			if (!nf || !nc) {
				pthread_mutex_unlock(&s->lock);
				usleep(100000);
				continue;
			}
			cap = n;
		}
		fds[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
		size_t i = 1;
		bool any_closing = false;
		for (struct ws_client *cl = s->clients; cl; cl = cl->next, i++) {
			cls[i] = cl;
			fds[i] = (struct pollfd){ .fd = cl->sock, .events = POLLIN };
			if (cl->out_off < cl->out_len)
				fds[i].events |= POLLOUT;
			any_closing |= cl->closing;
		}
		pthread_mutex_unlock(&s->lock);
		while (dead) {
			struct ws_client *next = dead->next;
			srv_ws_client_free(dead);
			dead = next;
		}

		if (poll(fds, n, any_closing ? 500 : -1) < 0 && errno != EINTR)
			usleep(10000);
		if (fds[0].revents & POLLIN) {
			char b[64];
			while (read(s->wake[0], b, sizeof(b)) > 0)
				;
		}
		for (i = 1; i < n; i++) {
			struct ws_client *cl = cls[i];
			if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
				ws_read(s, cl);
			pthread_mutex_lock(&s->lock);
			ws_flush(cl);
			pthread_mutex_unlock(&s->lock);
		}
	}
	free(fds);
	free(cls);
	return NULL;
}

/* MHD hands over the socket once the 101 is out (on the connection's
 * thread): the client joins the event thread's set, hello frame first. */
static void on_upgrade(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in, size_t extra_in_size,
		       MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct dmar_server *s = cls;
	struct req *q = con_cls;
	struct ws_client *cl = calloc(1, sizeof(*cl));
	if (!cl)
		goto fail;
	cl->s = s;
	cl->urh = urh;
	cl->sock = sock;
	int fl = fcntl(sock, F_GETFL);
	if (fl >= 0)
		fcntl(sock, F_SETFL, fl | O_NONBLOCK);
	if (dmar_ws_parser_new(&cl->parser, WS_FRAME_MAX, DMAR_WS_MASK_REQUIRED, on_ws_frame, cl) < 0)
		goto fail;
	/* Bytes the client sent right after its request are frames too; fed
	 * before the event thread can see the client, so one thread at a time. */
	if (q && q->hello)
		srv_ws_queue(cl, DMAR_WS_TEXT, q->hello, strlen(q->hello));
	if (extra_in_size)
		ws_feed(cl, extra_in, extra_in_size);
	pthread_mutex_lock(&s->lock);
	if (s->stopping || s->nclients >= WS_CLIENTS_MAX) {
		pthread_mutex_unlock(&s->lock);
		goto fail;
	}
	cl->next = s->clients;
	s->clients = cl;
	s->nclients++;
	pthread_mutex_unlock(&s->lock);
	srv_wake_events(s);
	return;
fail:
	if (cl) {
		dmar_ws_parser_free(cl->parser);
		free(cl->out);
		free(cl);
	}
	MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/* GET /v1/events: the RFC 6455 handshake, then the socket is ours. */
enum MHD_Result srv_h_events(struct req *q)
{
	const char *upgrade = srv_header(q, MHD_HTTP_HEADER_UPGRADE);
	const char *connection = srv_header(q, MHD_HTTP_HEADER_CONNECTION);
	const char *version = srv_header(q, "Sec-WebSocket-Version");
	const char *key = srv_header(q, "Sec-WebSocket-Key");
	if (!srv_header_has_token(upgrade, "websocket") || !srv_header_has_token(connection, "upgrade"))
		return srv_reply_error_full(q, -EINVAL, MHD_HTTP_UPGRADE_REQUIRED,
					"events: a websocket endpoint (Upgrade: websocket, Connection: Upgrade)", NULL,
					MHD_HTTP_HEADER_UPGRADE, "websocket");
	if (!version || strcmp(version, "13") != 0)
		return srv_reply_error_full(q, -EINVAL, MHD_HTTP_UPGRADE_REQUIRED, "events: Sec-WebSocket-Version must be 13",
					NULL, "Sec-WebSocket-Version", "13");
	char accept[DMAR_WS_ACCEPT_SIZE];
	int ar = dmar_ws_accept_key(key, accept);
	if (ar == -EINVAL)
		return srv_reply_error(q, -EINVAL, 0, "events: Sec-WebSocket-Key missing or not 16 bytes of base64");
	if (ar < 0)
		return srv_reply_error(q, ar, MHD_HTTP_INTERNAL_SERVER_ERROR,
				   "events: no SHA-1 for the handshake (libcrypto could not be loaded)");
	pthread_mutex_lock(&q->s->lock);
	bool full = q->s->nclients >= WS_CLIENTS_MAX;
	pthread_mutex_unlock(&q->s->lock);
	if (full)
		return srv_reply_error(q, -EAGAIN, 0, "events: too many listeners");

	/* The first frame names the node. */
	json_t *info = NULL;
	struct dmar_error ignored = { 0 };
	if (q->s->ops->info(q->s->ctx, &info, &ignored) < 0)
		info = NULL;
	json_t *name = json_object_get(info, "name");
	json_t *hello = json_pack("{s:s, s:O?}", "type", "hello", "node", json_is_string(name) ? name : NULL);
	json_decref(info);
	if (hello)
		q->hello = json_dumps(hello, JSON_COMPACT);
	json_decref(hello);

	struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, q->s);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	/* A browser fails a socket whose offered subprotocols got no answer. */
	if (srv_header_has_token(srv_header(q, "Sec-WebSocket-Protocol"), SRV_WS_PROTOCOL))
		MHD_add_response_header(resp, "Sec-WebSocket-Protocol", SRV_WS_PROTOCOL);
	return srv_queue(q, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}
