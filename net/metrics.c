/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text format (metrics.h).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

void dmar_hist_init(struct dmar_hist *h, const double *bounds, unsigned n, double scale)
{
	memset(h, 0, sizeof(*h));
	h->bounds = bounds;
	h->n = n > DMAR_HIST_MAX ? DMAR_HIST_MAX : n;
	h->scale = scale;
}

void dmar_hist_observe(struct dmar_hist *h, double v)
{
	if (!(v >= 0)) /* NaN, negative: nothing to count */
		return;
	unsigned k = 0;
	while (k < h->n && v > h->bounds[k])
		k++;
	atomic_fetch_add_explicit(&h->count[k], 1, memory_order_relaxed);
	double s = v * h->scale;
	atomic_fetch_add_explicit(&h->sum, s < 1.8e19 ? (uint64_t)llround(s) : UINT64_MAX / 2, memory_order_relaxed);
}

static void add(struct dmar_prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct dmar_prom *p, const char *fmt, ...)
{
	if (p->err)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(p->buf ? p->buf + p->len : NULL, p->buf ? p->cap - p->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			p->err = -EINVAL;
			return;
		}
		if (p->buf && p->len + (size_t)n < p->cap) {
			p->len += (size_t)n;
			return;
		}
		size_t cap = p->cap ? p->cap : 4096;
		while (cap <= p->len + (size_t)n)
			cap *= 2;
		char *b = realloc(p->buf, cap);
		if (!b) {
			p->err = -ENOMEM;
			return;
		}
		p->buf = b;
		p->cap = cap;
	}
}

void dmar_prom_head(struct dmar_prom *p, const char *name, const char *type, const char *help)
{
	add(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* v as Prometheus reads it: integers as integers, other values in the
 * fewest of 15 or 17 significant digits that read back as v (0.1, not
 * 0.10000000000000001), the infinities and NaN as it spells them. */
static const char *num(double v, char out[32])
{
	if (isnan(v))
		return "NaN";
	if (isinf(v))
		return v > 0 ? "+Inf" : "-Inf";
	if (v == floor(v) && fabs(v) < 9e15)
		snprintf(out, 32, "%.0f", v);
	else if (snprintf(out, 32, "%.15g", v), strtod(out, NULL) != v)
		snprintf(out, 32, "%.17g", v);
	return out;
}

static void value(struct dmar_prom *p, double v)
{
	char b[32];
	add(p, "%s\n", num(v, b));
}

void dmar_prom_sample(struct dmar_prom *p, const char *name, const char *labels, double v)
{
	if (labels && *labels)
		add(p, "%s{%s} ", name, labels);
	else
		add(p, "%s ", name);
	value(p, v);
}

void dmar_prom_one(struct dmar_prom *p, const char *name, const char *type, const char *help, double v)
{
	dmar_prom_head(p, name, type, help);
	dmar_prom_sample(p, name, NULL, v);
}

void dmar_prom_hist(struct dmar_prom *p, const char *name, const char *labels, const struct dmar_hist *h)
{
	const char *sep = labels && *labels ? "," : "";
	const char *l = labels ? labels : "";
	uint64_t cum = 0;
	for (unsigned k = 0; k <= h->n; k++) {
		cum += atomic_load_explicit(&h->count[k], memory_order_relaxed);
		char b[32];
		if (k < h->n)
			add(p, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, l, sep, num(h->bounds[k], b),
			    (unsigned long long)cum);
		else
			add(p, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, sep, (unsigned long long)cum);
	}
	char sn[128], cn[128];
	snprintf(sn, sizeof(sn), "%s_sum", name);
	snprintf(cn, sizeof(cn), "%s_count", name);
	dmar_prom_sample(p, sn, labels, (double)atomic_load_explicit(&h->sum, memory_order_relaxed) / h->scale);
	dmar_prom_sample(p, cn, labels, (double)cum);
}

const char *dmar_prom_label_value(const char *v, char *out, size_t cap)
{
	size_t o = 0;
	for (; *v && o + 3 < cap; v++) {
		if (*v == '\\' || *v == '"') {
			out[o++] = '\\';
			out[o++] = *v;
		} else if (*v == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *v;
		}
	}
	out[o] = 0;
	return out;
}

void dmar_prom_free(struct dmar_prom *p)
{
	free(p->buf);
	*p = (struct dmar_prom){ 0 };
}
