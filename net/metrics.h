/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - GET /metrics: counters, gauges and histograms in the
 * Prometheus text format (version 0.0.4), written by the server for what
 * it sees (requests, latencies, refusals, connections) and by the node
 * for what it holds (arena, chunks, transfers, the encode backlog).
 * docs/rest-api.md lists every metric and its meaning.
 */
#ifndef DMAR_NET_METRICS_H
#define DMAR_NET_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A histogram of fixed upper bounds (ascending, at most DMAR_HIST_MAX),
 * safe to observe from any thread.  The sum is kept in units of 1/scale
 * (scale 1e6 for seconds: microseconds), so that it stays an integer. */
#define DMAR_HIST_MAX 16
struct dmar_hist {
	const double *bounds;
	unsigned n;
	double scale;
	_Atomic uint64_t count[DMAR_HIST_MAX + 1]; /* the last: past every bound (+Inf) */
	_Atomic uint64_t sum;
};

void dmar_hist_init(struct dmar_hist *h, const double *bounds, unsigned n, double scale);
void dmar_hist_observe(struct dmar_hist *h, double v);

/* The text, built up in memory. */
struct dmar_prom {
	char *buf;
	size_t len, cap;
	int err; /* -ENOMEM once an append failed; the text is then incomplete */
};

/* # HELP and # TYPE lines (type: "counter", "gauge", "histogram"). */
void dmar_prom_head(struct dmar_prom *p, const char *name, const char *type, const char *help);
/* One sample: name{labels} value; labels may be NULL or "" (none), else
 * already formatted: key="value",key="value" (values from
 * dmar_prom_label_value). */
void dmar_prom_sample(struct dmar_prom *p, const char *name, const char *labels, double value);
/* A metric of one unlabelled sample: its HELP, TYPE and value. */
void dmar_prom_one(struct dmar_prom *p, const char *name, const char *type, const char *help, double value);
/* A histogram's _bucket, _sum and _count samples. */
void dmar_prom_hist(struct dmar_prom *p, const char *name, const char *labels, const struct dmar_hist *h);
/* A label value with \, " and newlines escaped, into out (cap bytes). */
const char *dmar_prom_label_value(const char *v, char *out, size_t cap);
void dmar_prom_free(struct dmar_prom *p);

#endif /* DMAR_NET_METRICS_H */
