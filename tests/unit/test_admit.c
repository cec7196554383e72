/* SPDX-License-Identifier: MIT */
/*
 * test_admit - connection admission (net/admit.h): which pending
 * connections are closed (oldest first, per address, past the head
 * deadline), that trusted ones never are, the counts and the log lines.
 * Connections are socket pairs: a closed one reads end-of-stream at the
 * other end.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/admit.h"

struct tconn {
	int server, client; /* the pair: the admission shuts down server */
	struct dmar_admit_conn *c;
};

static struct sockaddr_in addr_of(const char *ip)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(40000) };
	assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	return a;
}

static void conn_open(struct dmar_admit *a, struct tconn *t, const char *ip)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	t->server = sv[0];
	t->client = sv[1];
	fcntl(t->client, F_SETFL, O_NONBLOCK);
	struct sockaddr_in sa = addr_of(ip);
	t->c = dmar_admit_open(a, t->server, (struct sockaddr *)&sa);
	assert_non_null(t->c);
}

/* Whether the admission closed it: its client reads end-of-stream. */
static bool closed(const struct tconn *t)
{
	char b;
	return read(t->client, &b, 1) == 0;
}

static void conn_close(struct dmar_admit *a, struct tconn *t)
{
	dmar_admit_close(a, t->c);
	close(t->server);
	close(t->client);
}

static char logged[4096];

static void log_line(void *ctx, const char *line)
{
	(void)ctx;
	strncat(logged, line, sizeof(logged) - strlen(logged) - 2);
	strcat(logged, "\n");
}

static void test_oldest_go(void **state)
{
	(void)state;
	struct dmar_admit *a;
	struct dmar_admit_opts o = { .pending_max = 4, .pending_per_addr = 4, .head_ms = 60000 };
	assert_int_equal(dmar_admit_new(&a, &o), 0);
	struct tconn t[8];
	/* four pending from four addresses, one of them then trusted */
	const char *ips[] = { "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7" };
	for (int k = 0; k < 4; k++)
		conn_open(a, &t[k], ips[k]);
	dmar_admit_head(a, t[0].c, true);
	struct dmar_admit_stats st;
	dmar_admit_stats(a, &st);
	assert_int_equal(st.pending, 3);
	assert_int_equal(st.trusted, 1);
	/* a fifth: room for it without closing anything (the trusted one
	 * does not count) */
	conn_open(a, &t[4], ips[4]);
	for (int k = 0; k < 5; k++)
		assert_false(closed(&t[k]));
	/* a sixth and a seventh: the oldest pending go, never the trusted */
	conn_open(a, &t[5], ips[5]);
	assert_true(closed(&t[1]));
	assert_false(closed(&t[0]));
	assert_false(closed(&t[2]));
	conn_open(a, &t[6], ips[6]);
	assert_true(closed(&t[2]));
	assert_false(closed(&t[0]));
	dmar_admit_stats(a, &st);
	assert_int_equal(st.pending, 4);
	assert_int_equal(st.evicted, 2);
	/* an untrusted head (a 401) leaves it pending */
	dmar_admit_head(a, t[3].c, false);
	conn_open(a, &t[7], "10.0.0.8");
	assert_true(closed(&t[3]));
	for (int k = 0; k < 8; k++)
		conn_close(a, &t[k]);
	dmar_admit_stats(a, &st);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.trusted, 0);
	dmar_admit_free(a);
}

static void test_per_address(void **state)
{
	(void)state;
	struct dmar_admit *a;
	logged[0] = 0;
	struct dmar_admit_opts o = { .pending_max = 100, .pending_per_addr = 3, .head_ms = 60000, .log = log_line };
	assert_int_equal(dmar_admit_new(&a, &o), 0);
	struct tconn flood[6], peer;
	conn_open(a, &flood[0], "192.0.2.9");
	conn_open(a, &peer, "192.0.2.1");
	for (int k = 1; k < 6; k++)
		conn_open(a, &flood[k], "192.0.2.9");
	/* the flooding address keeps its 3 newest; the other is untouched */
	for (int k = 0; k < 3; k++)
		assert_true(closed(&flood[k]));
	for (int k = 3; k < 6; k++)
		assert_false(closed(&flood[k]));
	assert_false(closed(&peer));
	for (int k = 0; k < 6; k++)
		conn_close(a, &flood[k]);
	conn_close(a, &peer);
	dmar_admit_free(a); /* says what it closed on its way out */
	assert_non_null(strstr(logged, "closed 3 connections without a complete request for room: 3 at most from one "
				       "address (its oldest go; last from 192.0.2.9)"));
}

static void test_deadline(void **state)
{
	(void)state;
	struct dmar_admit *a;
	logged[0] = 0;
	struct dmar_admit_opts o = { .head_ms = 200, .log = log_line };
	assert_int_equal(dmar_admit_new(&a, &o), 0);
	struct tconn slow, fast;
	conn_open(a, &slow, "198.51.100.7");
	conn_open(a, &fast, "198.51.100.8");
	usleep(50000);
	dmar_admit_head(a, fast.c, true);
	/* the sweeping thread closes the slow one within its step */
	for (int k = 0; k < 100 && !closed(&slow); k++)
		usleep(20000);
	assert_true(closed(&slow));
	assert_false(closed(&fast));
	struct dmar_admit_stats st;
	dmar_admit_stats(a, &st);
	assert_int_equal(st.expired, 1);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.trusted, 1);
	assert_non_null(strstr(logged, "closed 1 connection with no complete request 200 ms after connecting (last from "
				       "198.51.100.7)"));
	conn_close(a, &slow);
	conn_close(a, &fast);
	dmar_admit_free(a);
}

/* When the pending are too many, the address holding the most loses its
 * oldest: a peer's one pending connection survives a flood from a few
 * addresses even when it is the oldest of all. */
static void test_most_first(void **state)
{
	(void)state;
	struct dmar_admit *a;
	struct dmar_admit_opts o = { .pending_max = 6, .pending_per_addr = 16, .head_ms = 60000 };
	assert_int_equal(dmar_admit_new(&a, &o), 0);
	struct tconn peer, fl[8];
	conn_open(a, &peer, "203.0.113.1"); /* the oldest */
	const char *ips[] = { "203.0.113.7", "203.0.113.8" };
	for (int k = 0; k < 5; k++)
		conn_open(a, &fl[k], ips[k % 2]);
	/* full: 7 holds 3, 8 holds 2, the peer 1; the next goes from 7 */
	conn_open(a, &fl[5], ips[1]);
	assert_false(closed(&peer));
	assert_true(closed(&fl[0]));
	conn_open(a, &fl[6], ips[1]); /* now 8 holds the most: its oldest goes */
	assert_true(closed(&fl[1]));
	conn_open(a, &fl[7], ips[0]);
	assert_false(closed(&peer));
	conn_close(a, &peer);
	for (int k = 0; k < 8; k++)
		conn_close(a, &fl[k]);
	struct dmar_admit_stats st;
	dmar_admit_stats(a, &st);
	assert_int_equal(st.pending, 0);
	dmar_admit_free(a);
}

/* A connection with no address known (a Unix socket, an odd family) is
 * admitted, counted once, and only the total limit applies. */
static void test_no_address(void **state)
{
	(void)state;
	struct dmar_admit *a;
	struct dmar_admit_opts o = { .pending_max = 2, .pending_per_addr = 1, .head_ms = 60000 };
	assert_int_equal(dmar_admit_new(&a, &o), 0);
	struct tconn t[3];
	for (int k = 0; k < 3; k++) {
		int sv[2];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		t[k].server = sv[0];
		t[k].client = sv[1];
		fcntl(t[k].client, F_SETFL, O_NONBLOCK);
		assert_non_null(t[k].c = dmar_admit_open(a, t[k].server, NULL));
	}
	assert_true(closed(&t[0]));
	assert_false(closed(&t[1]));
	assert_false(closed(&t[2]));
	for (int k = 0; k < 3; k++)
		conn_close(a, &t[k]);
	dmar_admit_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oldest_go),
		cmocka_unit_test(test_per_address),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_most_first),
		cmocka_unit_test(test_no_address),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
