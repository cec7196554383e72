/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "probe.h"
#include "wire.h"
#include "codec/clock.h"

#define PROBE_THREADS 16

struct row {
	const struct dmar_peer *p; /* NULL: the asker, not in the file */
	const char *name;
	char address[DMAR_PEER_URL_MAX], url[DMAR_PEER_URL_MAX];
	json_t *info; /* the answer, or NULL */
	int r;        /* 0 or the failure */
	double ms;
	struct dmar_error err;
};

struct job {
	const struct dmar_probe_opts *o;
	struct row *rows;
	size_t n;
	size_t next; /* atomic */
};

static bool is_self(const struct dmar_probe_opts *o, const struct row *w)
{
	return o->self && !strcmp(w->name, o->self);
}

static void probe_one(const struct dmar_probe_opts *o, struct row *w)
{
	if (is_self(o, w) && o->self_info) {
		w->r = o->self_info(o->self_ctx, &w->info, &w->err);
		return;
	}
	struct dmar_client_opts co = {
		.name = w->name,
		.url = w->url,
		.token = o->token,
		.tls_ca = o->tls_ca,
		.connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DMAR_PROBE_CONNECT_MS,
		.timeout_ms = o->timeout_ms ? o->timeout_ms : DMAR_PROBE_TIMEOUT_MS,
	};
	struct dmar_client *c = NULL;
	if ((w->r = dmar_client_new(&c, &co, &w->err)) == 0)
		w->r = dmar_client_info(c, &w->info, &w->err);
	dmar_client_free(c);
}

static void *worker(void *arg)
{
	struct job *j = arg;
	for (;;) {
		size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (i >= j->n)
			return NULL;
		double t0 = dmar_mono_s();
		probe_one(j->o, &j->rows[i]);
		j->rows[i].ms = (dmar_mono_s() - t0) * 1e3;
	}
}

static json_t *row_json(const struct dmar_probe_opts *o, struct row *w)
{
	json_t *r = json_pack("{s:s, s:s, s:s, s:b}", "name", w->name, "address", w->address, "url", w->url,
			      "reachable", w->r == 0);
	if (!r)
		return NULL;
	if (is_self(o, w))
		json_object_set_new(r, "self", json_true());
	if (w->r == 0) {
		json_object_set_new(r, "ms", json_real((double)(long)(w->ms * 1000) / 1000));
		json_object_set(r, "node", w->info);
	} else {
		json_object_set_new(r, "error", json_string(w->err.code && w->err.msg[0] ? w->err.msg : strerror(-w->r)));
		json_object_set_new(r, "errno", json_string(dmar_wire_errno_name(w->r)));
	}
	return r;
}

int dmar_probe_peers(const struct dmar_peers *peers, const struct dmar_probe_opts *o, json_t **out)
{
	/* the asker's own row first when the file does not list it */
	bool own = o->self && o->self_url && !dmar_peers_find(peers, o->self);
	size_t n = dmar_peers_count(peers) + own;
	struct row *rows = calloc(n ? n : 1, sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	if (own) {
		rows[0].name = o->self;
		const char *sep = strstr(o->self_url, "://");
		snprintf(rows[0].url, sizeof(rows[0].url), "%s", o->self_url);
		snprintf(rows[0].address, sizeof(rows[0].address), "%s", sep ? sep + 3 : o->self_url);
	}
	for (size_t i = own; i < n; i++) {
		struct row *w = &rows[i];
		w->p = dmar_peers_get(peers, i - own);
		w->name = w->p->name;
		dmar_peers_address(w->p, w->address, sizeof(w->address));
		if (dmar_peers_url(w->p, w->url, sizeof(w->url)) < 0) /* DMAR_PEER_URL_MAX always suffices */
			w->url[0] = 0;
	}
	struct job j = { .o = o, .rows = rows, .n = n };
	unsigned nt = n < PROBE_THREADS ? (unsigned)n : PROBE_THREADS, started = 0;
	pthread_t tid[PROBE_THREADS];
	for (; started + 1 < nt; started++)
		if (pthread_create(&tid[started], NULL, worker, &j) != 0)
			break;
	worker(&j);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		if (json_array_append_new(arr, row_json(o, &rows[i])) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	for (size_t i = 0; i < n; i++)
		json_decref(rows[i].info);
	free(rows);
	if (!arr)
		return -ENOMEM;
	*out = arr;
	return 0;
}
