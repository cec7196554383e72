/* SPDX-License-Identifier: MIT */
/*
 * test_metrics - the Prometheus text writer and histograms (net/metrics.h).
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "net/metrics.h"

static void assert_text(const struct dmar_prom *p, const char *want)
{
	assert_int_equal(p->err, 0);
	if (p->len != strlen(want) || memcmp(p->buf, want, p->len) != 0)
		fail_msg("text:\n%.*s\nexpected:\n%s", (int)p->len, p->buf, want);
}

static void test_samples(void **state)
{
	(void)state;
	struct dmar_prom p = { 0 };
	dmar_prom_head(&p, "dmar_x_bytes", "gauge", "What x holds");
	dmar_prom_sample(&p, "dmar_x_bytes", NULL, 1073741824);
	dmar_prom_sample(&p, "dmar_x_bytes", "", 0.5);
	dmar_prom_sample(&p, "dmar_x_bytes", "kind=\"a\"", 3);
	dmar_prom_sample(&p, "dmar_x_bytes", NULL, INFINITY);
	dmar_prom_sample(&p, "dmar_x_bytes", NULL, NAN);
	assert_text(&p, "# HELP dmar_x_bytes What x holds\n# TYPE dmar_x_bytes gauge\n"
			"dmar_x_bytes 1073741824\ndmar_x_bytes 0.5\ndmar_x_bytes{kind=\"a\"} 3\n"
			"dmar_x_bytes +Inf\ndmar_x_bytes NaN\n");
	dmar_prom_free(&p);
	assert_null(p.buf);
	dmar_prom_one(&p, "dmar_y_total", "counter", "How many y", 7);
	assert_text(&p, "# HELP dmar_y_total How many y\n# TYPE dmar_y_total counter\ndmar_y_total 7\n");
	dmar_prom_free(&p);
}

static void test_grows(void **state)
{
	(void)state;
	struct dmar_prom p = { 0 };
	for (int k = 0; k < 5000; k++)
		dmar_prom_sample(&p, "dmar_many", "n=\"x\"", k);
	assert_int_equal(p.err, 0);
	assert_true(p.len > 5000 * 16);
	const char *last = "dmar_many{n=\"x\"} 4999\n";
	assert_memory_equal(p.buf + p.len - strlen(last), last, strlen(last));
	dmar_prom_free(&p);
}

static void test_label_value(void **state)
{
	(void)state;
	char out[64];
	assert_string_equal(dmar_prom_label_value("PUT /v1/files", out, sizeof(out)), "PUT /v1/files");
	assert_string_equal(dmar_prom_label_value("a\"b\\c\nd", out, sizeof(out)), "a\\\"b\\\\c\\nd");
	/* cut short, never past the buffer, never half an escape */
	assert_string_equal(dmar_prom_label_value("\"\"\"\"", out, 6), "\\\"\\\"");
}

static void test_hist(void **state)
{
	(void)state;
	static const double b[] = { 0.001, 0.01, 0.1 };
	struct dmar_hist h;
	dmar_hist_init(&h, b, 3, 1e6);
	dmar_hist_observe(&h, 0.0005);
	dmar_hist_observe(&h, 0.001); /* on a bound: in that bucket (le) */
	dmar_hist_observe(&h, 0.05);
	dmar_hist_observe(&h, 7);
	dmar_hist_observe(&h, -1);  /* not counted */
	dmar_hist_observe(&h, NAN); /* not counted */
	struct dmar_prom p = { 0 };
	dmar_prom_hist(&p, "dmar_t_seconds", "route=\"r\"", &h);
	assert_text(&p, "dmar_t_seconds_bucket{route=\"r\",le=\"0.001\"} 2\n"
			"dmar_t_seconds_bucket{route=\"r\",le=\"0.01\"} 2\n"
			"dmar_t_seconds_bucket{route=\"r\",le=\"0.1\"} 3\n"
			"dmar_t_seconds_bucket{route=\"r\",le=\"+Inf\"} 4\n"
			"dmar_t_seconds_sum{route=\"r\"} 7.0515\n"
			"dmar_t_seconds_count{route=\"r\"} 4\n");
	dmar_prom_free(&p);
	dmar_prom_hist(&p, "dmar_u", NULL, &h);
	assert_non_null(strstr(p.buf, "dmar_u_bucket{le=\"+Inf\"} 4\ndmar_u_sum 7.05"));
	dmar_prom_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_samples),
		cmocka_unit_test(test_grows),
		cmocka_unit_test(test_label_value),
		cmocka_unit_test(test_hist),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
