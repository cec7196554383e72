/* SPDX-License-Identifier: MIT */
/*
 * Broadcast chains (relay.h): the chain push, and a node's relay sessions.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relay.h"
#include "codec/clock.h"

/* ---- the chain push ------------------------------------------------------ */

static json_t *hop_failed(const char *node, int code, const char *msg)
{
	return json_pack("{s:s, s:b, s:s, s:s}", "node", node, "ok", 0, "errno", dmar_wire_errno_name(code), "error",
			 msg && *msg ? msg : strerror(-code));
}

static json_t *hop_done(const char *node, const char *from, const struct dmar_xfer_stats *st)
{
	return json_pack("{s:s, s:b, s:s, s:I, s:I, s:I, s:f}", "node", node, "ok", 1, "from", from ? from : "",
			 "logical_bytes", (json_int_t)st->logical, "wire_bytes", (json_int_t)st->wire_bytes,
			 "chunks_sent", (json_int_t)st->sent_chunks, "seconds", st->seconds);
}

json_t *dmar_chain_failed(const struct dmar_hops *hops, int code, const char *msg)
{
	json_t *res = json_array();
	for (size_t i = 0; res && i < hops->n; i++)
		json_array_append_new(res, hop_failed(hops->name[i], code, msg));
	return res;
}

/* The failures so far, for err: "2 of 7 nodes failed: d: ...; f: ...". */
struct failures {
	int first;
	size_t n;
	char list[sizeof(((struct dmar_error *)0)->msg)];
	size_t len;
};

static void failure_add(struct failures *f, const char *node, int code, const char *msg)
{
	if (!f->n++)
		f->first = code;
	if (f->len < sizeof(f->list)) {
		int w = snprintf(f->list + f->len, sizeof(f->list) - f->len, "%s%s: %s", f->len ? "; " : "", node,
				 msg && *msg ? msg : strerror(-code));
		f->len += w > 0 ? (size_t)w : 0;
	}
}

int dmar_chain_push(const struct dmar_hops *hops, dmar_peer_fn peer, void *pctx, const char *from,
		    const char *path, const struct dmar_recipe *r, const struct dmar_id *cid,
		    const struct dmar_chunk_source *src, const struct dmar_push_opts *o, dmar_xfer_progress_fn progress,
		    void *prctx, json_t **results, struct dmar_xfer_stats *st, struct dmar_error *err)
{
	struct dmar_push_opts po = { 0 };
	if (o)
		po.flags = o->flags, po.upload = o->upload;
	if (st)
		memset(st, 0, sizeof(*st));
	int ret = 0;
	if (!po.upload && (ret = dmar_wire_upload_new(&po.upload)) < 0)
		return dmar_error_errno(err, ret, "getrandom");
	json_t *res = json_array();
	char *rest = malloc(DMAR_HOPS_TEXT_MAX);
	struct failures *f = calloc(1, sizeof(*f));
	if (!res || !rest || !f) {
		ret = -ENOMEM;
		goto out;
	}
	bool reached = false;
	for (size_t i = 0; i < hops->n;) {
		const char *name = hops->name[i];
		struct dmar_client *cl = peer(pctx, name);
		struct dmar_error e = { 0 };
		struct dmar_xfer_stats hs = { 0 };
		json_t *ans = NULL;
		int rc;
		if (!cl) {
			rc = dmar_error_set(&e, -ENOENT, "no peer named %s", name);
		} else {
			dmar_hops_format(hops, i + 1, rest, DMAR_HOPS_TEXT_MAX);
			po.relay = rest;
			po.answer = &ans;
			rc = dmar_client_push(cl, path, r, cid, src, &po, reached ? NULL : progress, prctx, &hs, &e);
		}
		if (rc < 0) {
			json_decref(ans);
			failure_add(f, name, rc, e.msg);
			json_array_append_new(res, hop_failed(name, rc, e.msg));
			i++;
			continue;
		}
		if (!reached && st)
			*st = hs;
		reached = true;
		json_array_append_new(res, hop_done(name, from, &hs));
		/* The nodes after it, as far as its answer reports on them in
		 * order; a node that does not relay reports none, and the
		 * chain goes on from here. */
		json_t *down = json_object_get(ans, "relay"), *v;
		size_t j = i + 1, k;
		json_array_foreach(down, k, v) {
			const char *nn = json_string_value(json_object_get(v, "node"));
			json_t *ok = json_object_get(v, "ok");
			if (j >= hops->n || !nn || strcmp(nn, hops->name[j]) != 0 || !json_is_boolean(ok))
				break;
			json_array_append(res, v);
			if (!json_is_true(ok)) {
				const char *msg = json_string_value(json_object_get(v, "error"));
				const char *en = json_string_value(json_object_get(v, "errno"));
				int code = en ? dmar_wire_errno_from_name(en) : -EIO;
				failure_add(f, nn, code < 0 ? code : -EIO, msg);
			}
			j++;
		}
		json_decref(ans);
		i = j;
	}
	if (f->n) {
		ret = f->first < 0 ? f->first : -EIO;
		dmar_error_set(err, ret, "%zu of %zu nodes failed: %s", f->n, hops->n, f->list);
	}
out:
	if (results && res)
		*results = res;
	else
		json_decref(res);
	free(rest);
	free(f);
	return ret;
}

/* ---- relay sessions ------------------------------------------------------ */

/* A session forwards once this much waits, or its oldest chunk waited
 * RELAY_WAIT_MS: batches of a few MiB, each a handful of milliseconds on
 * the link, keep the per-hop term of a chain small. */
#define RELAY_MIN_BYTES (1u << 20)
#define RELAY_MAX_BYTES (8u << 20)
#define RELAY_WAIT_MS 2

struct fwd {
	struct dmar_relay_sent sent;
	int err;
	char msg[sizeof(((struct dmar_error *)0)->msg)];
};

struct session {
	struct dmar_relay *rl;
	uint64_t upload;
	struct dmar_hops hops;
	size_t at;       /* the node forwarded to now (the worker's) */
	struct fwd *fw;  /* per node of hops; the worker's until it ends */
	struct dmar_id *ids;
	uint32_t *lens;
	size_t n, cap;
	uint64_t bytes;    /* of the ids waiting */
	uint64_t first_ms; /* when the oldest of them came */
	uint64_t last_ms;  /* the last chunk or finish */
	uint64_t told_ms;  /* the last progress report (the worker's) */
	bool busy;         /* a batch is out */
	bool flush;        /* finish waits: send what waits now */
	bool stop, done;   /* told to end; ended (joinable) */
	pthread_t th;
	struct session *next;
};

struct dmar_relay {
	struct dmar_relay_cfg cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* any session's state changed */
	struct session *list;
	size_t nsessions;
	uint64_t chunks, wire; /* forwarded, all sessions */
};

static struct dmar_client *hop_client(struct session *s)
{
	return s->rl->cfg.peer(s->rl->cfg.peer_ctx, s->hops.name[s->at]);
}

/* Send ids[0..n) to the first node from s->at on that takes them; a
 * node that fails is given up (the commit reports it). */
static void forward(struct session *s, const struct dmar_id *ids, const uint32_t *lens, size_t n, char *rest)
{
	while (s->at < s->hops.n) {
		struct fwd *f = &s->fw[s->at];
		struct dmar_client *cl = hop_client(s);
		struct dmar_error e = { 0 };
		int r;
		if (!cl) {
			r = dmar_error_set(&e, -ENOENT, "no peer named %s", s->hops.name[s->at]);
		} else {
			dmar_hops_format(&s->hops, s->at + 1, rest, DMAR_HOPS_TEXT_MAX);
			struct dmar_push_opts o = { .upload = s->upload, .relay = rest };
			struct dmar_xfer_stats st = { 0 };
			r = dmar_client_send(cl, ids, lens, n, s->rl->cfg.src, &o, &st, &e);
			f->sent.wire_bytes += st.wire_bytes;
			f->sent.chunks += st.sent_chunks;
			f->sent.chunk_bytes += st.chunk_bytes;
			f->sent.seconds += st.seconds;
			pthread_mutex_lock(&s->rl->lock);
			s->rl->chunks += st.sent_chunks;
			s->rl->wire += st.wire_bytes;
			pthread_mutex_unlock(&s->rl->lock);
		}
		const struct dmar_relay_cfg *cfg = &s->rl->cfg;
		uint64_t t = dmar_mono_ms();
		if (cfg->progress && (r < 0 || t - s->told_ms >= 250)) {
			s->told_ms = t;
			cfg->progress(cfg->progress_ctx, s->upload, s->hops.name[s->at], &f->sent);
		}
		if (r == 0)
			return;
		f->err = r;
		snprintf(f->msg, sizeof(f->msg), "%s", e.msg[0] ? e.msg : strerror(-r));
		s->at++;
	}
}

static void *session_run(void *arg)
{
	struct session *s = arg;
	struct dmar_relay *rl = s->rl;
	struct dmar_id *ids = NULL;
	uint32_t *lens = NULL;
	size_t cap = 0;
	char *rest = malloc(DMAR_HOPS_TEXT_MAX);
	pthread_mutex_lock(&rl->lock);
	while (!s->stop && rest) {
		uint64_t t = dmar_mono_ms();
		if (!s->n && !s->flush && t - s->last_ms >= (uint64_t)rl->cfg.idle_seconds * 1000)
			break; /* its sender is gone */
		bool ready = s->n && (s->flush || s->bytes >= RELAY_MIN_BYTES || t - s->first_ms >= RELAY_WAIT_MS);
		if (!ready) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			long wait_ms = s->n ? RELAY_WAIT_MS : 1000;
			until.tv_nsec += wait_ms * 1000000L;
			until.tv_sec += until.tv_nsec / 1000000000L;
			until.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&rl->cond, &rl->lock, &until);
			continue;
		}
		/* Take up to RELAY_MAX_BYTES from the front. */
		size_t k = 0;
		uint64_t b = 0;
		while (k < s->n && (k == 0 || b + s->lens[k] <= RELAY_MAX_BYTES))
			b += s->lens[k++];
		if (k > cap) {
			struct dmar_id *ni = realloc(ids, k * sizeof(*ni));
			uint32_t *nl = ni ? realloc(lens, k * sizeof(*nl)) : NULL;
			if (ni)
				ids = ni;
			if (nl)
				lens = nl;
			if (!ni || !nl)
				break; /* no memory: the commit sends them */
			cap = k;
		}
		memcpy(ids, s->ids, k * sizeof(*ids));
		memcpy(lens, s->lens, k * sizeof(*lens));
		memmove(s->ids, s->ids + k, (s->n - k) * sizeof(*s->ids));
		memmove(s->lens, s->lens + k, (s->n - k) * sizeof(*s->lens));
		s->n -= k;
		s->bytes -= b;
		s->first_ms = t;
		s->busy = true;
		pthread_mutex_unlock(&rl->lock);
		forward(s, ids, lens, k, rest);
		pthread_mutex_lock(&rl->lock);
		s->busy = false;
		if (s->at >= s->hops.n)
			s->n = s->bytes = 0; /* nobody left to take them */
		pthread_cond_broadcast(&rl->cond);
	}
	s->done = true;
	s->n = s->bytes = 0;
	pthread_cond_broadcast(&rl->cond);
	pthread_mutex_unlock(&rl->lock);
	free(ids);
	free(lens);
	free(rest);
	return NULL;
}

static void session_free(struct session *s)
{
	free(s->fw);
	free(s->ids);
	free(s->lens);
	free(s);
}

/* Join and free the sessions that ended by themselves; under lock. */
static void reap(struct dmar_relay *rl)
{
	for (struct session **p = &rl->list; *p;) {
		struct session *s = *p;
		if (!s->done) {
			p = &s->next;
			continue;
		}
		*p = s->next;
		rl->nsessions--;
		pthread_join(s->th, NULL);
		session_free(s);
	}
}

static struct session *session_find(struct dmar_relay *rl, uint64_t upload)
{
	for (struct session *s = rl->list; s; s = s->next)
		if (s->upload == upload && !s->done && !s->stop)
			return s;
	return NULL;
}

int dmar_relay_new(struct dmar_relay **out, const struct dmar_relay_cfg *cfg)
{
	struct dmar_relay *rl = calloc(1, sizeof(*rl));
	if (!rl)
		return -ENOMEM;
	rl->cfg = *cfg;
	if (!rl->cfg.idle_seconds)
		rl->cfg.idle_seconds = 600;
	pthread_mutex_init(&rl->lock, NULL);
	pthread_cond_init(&rl->cond, NULL);
	*out = rl;
	return 0;
}

void dmar_relay_free(struct dmar_relay *rl)
{
	if (!rl)
		return;
	pthread_mutex_lock(&rl->lock);
	for (struct session *s = rl->list; s; s = s->next)
		s->stop = true;
	pthread_cond_broadcast(&rl->cond);
	pthread_mutex_unlock(&rl->lock);
	while (rl->list) {
		struct session *s = rl->list;
		rl->list = s->next;
		pthread_join(s->th, NULL);
		session_free(s);
	}
	pthread_cond_destroy(&rl->cond);
	pthread_mutex_destroy(&rl->lock);
	free(rl);
}

void dmar_relay_chunk(struct dmar_relay *rl, uint64_t upload, const struct dmar_hops *hops, const struct dmar_id *id,
		      uint32_t len)
{
	if (!rl || !hops || !hops->n || !upload)
		return;
	pthread_mutex_lock(&rl->lock);
	struct session *s = session_find(rl, upload);
	if (!s) {
		reap(rl);
		if (rl->nsessions >= DMAR_RELAY_SESSIONS || !(s = calloc(1, sizeof(*s))))
			goto out;
		s->rl = rl;
		s->upload = upload;
		s->hops = *hops;
		s->last_ms = dmar_mono_ms();
		if (!(s->fw = calloc(hops->n, sizeof(*s->fw))) ||
		    pthread_create(&s->th, NULL, session_run, s) != 0) {
			session_free(s);
			goto out;
		}
		s->next = rl->list;
		rl->list = s;
		rl->nsessions++;
	}
	if (s->n == s->cap) {
		if (s->cap >= DMAR_RELAY_QUEUED)
			goto out;
		size_t cap = s->cap ? 2 * s->cap : 1024;
		struct dmar_id *ni = realloc(s->ids, cap * sizeof(*ni));
		if (ni)
			s->ids = ni;
		uint32_t *nl = ni ? realloc(s->lens, cap * sizeof(*nl)) : NULL;
		if (nl)
			s->lens = nl;
		if (!ni || !nl)
			goto out;
		s->cap = cap;
	}
	uint64_t t = dmar_mono_ms();
	if (!s->n)
		s->first_ms = t;
	s->last_ms = t;
	s->ids[s->n] = *id;
	s->lens[s->n++] = len;
	s->bytes += len;
	if (s->bytes >= RELAY_MIN_BYTES)
		pthread_cond_broadcast(&rl->cond);
out:
	pthread_mutex_unlock(&rl->lock);
}

json_t *dmar_relay_finish(struct dmar_relay *rl, uint64_t upload)
{
	if (!rl || !upload)
		return NULL;
	pthread_mutex_lock(&rl->lock);
	struct session *s = session_find(rl, upload);
	if (!s) {
		pthread_mutex_unlock(&rl->lock);
		return NULL;
	}
	s->flush = true;
	pthread_cond_broadcast(&rl->cond);
	while ((s->n || s->busy) && !s->done)
		pthread_cond_wait(&rl->cond, &rl->lock);
	s->stop = true;
	pthread_cond_broadcast(&rl->cond);
	for (struct session **p = &rl->list; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	rl->nsessions--;
	pthread_mutex_unlock(&rl->lock);
	pthread_join(s->th, NULL);
	json_t *o = json_object();
	for (size_t i = 0; o && i < s->hops.n; i++) {
		struct fwd *f = &s->fw[i];
		if (!f->sent.chunks && !f->sent.wire_bytes && !f->err)
			continue;
		if (rl->cfg.progress)
			rl->cfg.progress(rl->cfg.progress_ctx, upload, s->hops.name[i], &f->sent);
		json_t *h = json_pack("{s:I, s:I, s:I, s:f}", "wire_bytes", (json_int_t)f->sent.wire_bytes,
				      "chunks_sent", (json_int_t)f->sent.chunks, "chunk_bytes",
				      (json_int_t)f->sent.chunk_bytes, "seconds", f->sent.seconds);
		if (h && f->err) {
			json_object_set_new(h, "errno", json_string(dmar_wire_errno_name(f->err)));
			json_object_set_new(h, "error", json_string(f->msg));
		}
		json_object_set_new(o, s->hops.name[i], h);
	}
	session_free(s);
	return o;
}

json_t *dmar_relay_info(struct dmar_relay *rl)
{
	pthread_mutex_lock(&rl->lock);
	reap(rl);
	json_t *o = json_pack("{s:I, s:I, s:I}", "sessions", (json_int_t)rl->nsessions, "chunks_forwarded",
			      (json_int_t)rl->chunks, "wire_bytes", (json_int_t)rl->wire);
	pthread_mutex_unlock(&rl->lock);
	return o;
}
