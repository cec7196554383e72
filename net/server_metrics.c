/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics (metrics.h): the server's figures -- requests by route and
 * status, their latencies, error answers by errno, connections and the
 * admission's closings, chunks served -- then the node's (its metrics
 * op).  Authenticated like every route: a scraper sends the token.
 */
#include "config.h"

#include "server_i.h"

const unsigned srv_codes[SRV_CODES] = { 101, 200, 201, 204, 206, 207, 400, 401, 403, 404, 405, 409,
					411, 413, 414, 415, 416, 422, 431, 500, 501, 503, 507, 0 };

unsigned srv_code_index(unsigned status)
{
	for (unsigned k = 0; k + 1 < SRV_CODES; k++)
		if (srv_codes[k] == status)
			return k;
	return SRV_CODES - 1;
}

/* Request latencies, seconds: 100 us to 10 s. */
static const double latency_bounds[] = { 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
					 5e-2, 0.1,    0.25,   0.5,  1,    2.5,    10 };

void srv_metrics_init(struct dmar_server *s)
{
	for (unsigned k = 0; k <= SRV_ROUTES_MAX; k++)
		dmar_hist_init(&s->rstats[k].seconds, latency_bounds,
			       sizeof(latency_bounds) / sizeof(latency_bounds[0]), 1e6);
}

static void requests(struct dmar_server *s, struct dmar_prom *p)
{
	unsigned n = srv_route_count();
	char name[64], esc[96], labels[160];
	dmar_prom_head(p, "dmar_http_requests_total", "counter",
		       "Requests that ended, by route (method and path prefix; other: refused before routing, "
		       "as without the token, or no such route) and the status answered (other: none, or one "
		       "not listed)");
	for (unsigned k = 0; k <= n; k++)
		for (unsigned c = 0; c < SRV_CODES; c++) {
			uint64_t v = atomic_load_explicit(&s->rstats[k].codes[c], memory_order_relaxed);
			if (!v)
				continue;
			char code[16];
			if (srv_codes[c])
				snprintf(code, sizeof(code), "%u", srv_codes[c]);
			else
				snprintf(code, sizeof(code), "other");
			snprintf(labels, sizeof(labels), "route=\"%s\",code=\"%s\"",
				 dmar_prom_label_value(srv_route_name(k, name, sizeof(name)), esc, sizeof(esc)), code);
			dmar_prom_sample(p, "dmar_http_requests_total", labels, (double)v);
		}
	dmar_prom_head(p, "dmar_http_request_duration_seconds", "histogram",
		       "Time from a request's head to its end (the whole upload and answer), by route");
	for (unsigned k = 0; k <= n; k++) {
		snprintf(labels, sizeof(labels), "route=\"%s\"",
			 dmar_prom_label_value(srv_route_name(k, name, sizeof(name)), esc, sizeof(esc)));
		dmar_prom_hist(p, "dmar_http_request_duration_seconds", labels, &s->rstats[k].seconds);
	}
	dmar_prom_head(p, "dmar_http_refusals_total", "counter",
		       "Error answers, by the errno they carry (EKEYREJECTED: no or a wrong token; ENOSPC: the arena "
		       "is full; EDQUOT: past mem_max; docs/rest-api.md has the rest)");
	for (unsigned e = 1; e < SRV_ERRNO_MAX; e++) {
		uint64_t v = atomic_load_explicit(&s->refused[e], memory_order_relaxed);
		if (!v)
			continue;
		snprintf(labels, sizeof(labels), "reason=\"%s\"", dmar_wire_errno_name(-(int)e));
		dmar_prom_sample(p, "dmar_http_refusals_total", labels, (double)v);
	}
}

static void connections(struct dmar_server *s, struct dmar_prom *p)
{
	struct dmar_admit_stats as;
	dmar_admit_stats(s->admit, &as);
	pthread_mutex_lock(&s->lock);
	unsigned ws = s->nclients;
	pthread_mutex_unlock(&s->lock);
	dmar_prom_one(p, "dmar_http_connections_total", "counter", "Connections accepted",
		      (double)atomic_load(&s->connections));
	dmar_prom_one(p, "dmar_http_connections_pending", "gauge",
		      "Open connections that have not yet sent an authenticated request head", (double)as.pending);
	dmar_prom_one(p, "dmar_http_connections_trusted", "gauge", "Open connections that have authenticated",
		      (double)as.trusted);
	dmar_prom_head(p, "dmar_http_connections_closed_total", "counter",
		       "Pending connections the admission closed: slow (no authenticated head in time), room (for "
		       "a newer one, past the limits)");
	dmar_prom_sample(p, "dmar_http_connections_closed_total", "reason=\"slow\"", (double)as.expired);
	dmar_prom_sample(p, "dmar_http_connections_closed_total", "reason=\"room\"", (double)as.evicted);
	dmar_prom_one(p, "dmar_events_clients", "gauge", "Clients following GET /v1/events", (double)ws);
	dmar_prom_one(p, "dmar_chunks_served_total", "counter",
		      "Chunks sent by GET /v1/chunks/ID and POST /v1/chunks/fetch", (double)atomic_load(&s->served));
	dmar_prom_one(p, "dmar_chunk_served_bytes_total", "counter", "Their decoded bytes",
		      (double)atomic_load(&s->served_bytes));
}

enum MHD_Result srv_h_metrics(struct req *q)
{
	struct dmar_prom p = { 0 };
	char esc[64], labels[96];
	dmar_prom_head(&p, "dmar_build_info", "gauge", "1, labelled with the version of dmarfs");
	snprintf(labels, sizeof(labels), "version=\"%s\"", dmar_prom_label_value(PACKAGE_VERSION, esc, sizeof(esc)));
	dmar_prom_sample(&p, "dmar_build_info", labels, 1);
	requests(q->s, &p);
	connections(q->s, &p);
	if (q->s->ops->metrics)
		q->s->ops->metrics(q->s->ctx, &p);
	if (p.err) {
		dmar_prom_free(&p);
		return srv_reply_error(q, p.err, 0, "metrics: out of memory");
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(p.len, p.buf, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		dmar_prom_free(&p);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
	return srv_queue(q, MHD_HTTP_OK, resp);
}
