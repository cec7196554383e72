/* SPDX-License-Identifier: MIT */
/*
 * flood - a bounded slow-client flood for the admission tests
 * (tests/net/flood.sh): holds up to N connections to HOST:PORT, each
 * sending the start of a request head and then one more header line every
 * DRIP ms, never finishing it, with no token.  A connection the server
 * closes is opened again (at most RATE opens a second), so the pressure
 * stays for the whole run.  Source addresses (--bind A,B,...) are used in
 * turn, as a flood from several hosts.
 *
 *   flood HOST PORT [--conns N] [--seconds S] [--drip MS] [--rate R]
 *         [--bind ADDR,...]
 *
 * Prints one line: opened, closed by the server, most held at once.
 * Exits 0, or 2 for a usage error.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 4096
#define MAX_BINDS 64

struct slot {
	int fd;
	bool started;       /* the start of the head is sent */
	uint64_t next_drip; /* when the next header line goes */
};

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int usage(void)
{
	fprintf(stderr, "usage: flood HOST PORT [--conns N] [--seconds S] [--drip MS] [--rate R] [--bind ADDR,...]\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return usage();
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1)
		return usage();
	unsigned conns = 1000, seconds = 10, drip = 2000, rate = 1000;
	struct in_addr binds[MAX_BINDS];
	unsigned nbinds = 0;
	for (int i = 3; i < argc; i++) {
		if (i + 1 >= argc)
			return usage();
		const char *v = argv[++i];
		if (!strcmp(argv[i - 1], "--conns"))
			conns = (unsigned)atoi(v);
		else if (!strcmp(argv[i - 1], "--seconds"))
			seconds = (unsigned)atoi(v);
		else if (!strcmp(argv[i - 1], "--drip"))
			drip = (unsigned)atoi(v);
		else if (!strcmp(argv[i - 1], "--rate"))
			rate = (unsigned)atoi(v);
		else if (!strcmp(argv[i - 1], "--bind")) {
			char *list = strdup(v), *save = NULL;
			for (char *t = strtok_r(list, ",", &save); t && nbinds < MAX_BINDS; t = strtok_r(NULL, ",", &save))
				if (inet_pton(AF_INET, t, &binds[nbinds++]) != 1)
					return usage();
			free(list);
		} else
			return usage();
	}
	if (!conns || conns > MAX_CONNS || !seconds || seconds > 600 || !drip || !rate)
		return usage();
	struct rlimit rl = { conns + 64, conns + 64 };
	setrlimit(RLIMIT_NOFILE, &rl);

	static struct slot s[MAX_CONNS];
	static struct pollfd p[MAX_CONNS];
	for (unsigned k = 0; k < conns; k++)
		s[k].fd = -1;
	uint64_t opened = 0, closed = 0, held_max = 0, bind_turn = 0;
	uint64_t t0 = now_ms(), end = t0 + seconds * 1000ull;
	static const char start[] = "GET /v1/node HTTP/1.1\r\nHost: flood\r\nUser-Agent: flood\r\n";
	static const char more[] = "X-Drip: 1\r\n";
	while (now_ms() < end) {
		uint64_t t = now_ms();
		/* open what is missing, within the rate */
		uint64_t allowed = (t - t0) * rate / 1000 + rate / 10;
		for (unsigned k = 0; k < conns && opened < allowed; k++) {
			if (s[k].fd >= 0)
				continue;
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (fd < 0)
				break;
			if (nbinds) {
				struct sockaddr_in b = { .sin_family = AF_INET, .sin_addr = binds[bind_turn++ % nbinds] };
				if (bind(fd, (struct sockaddr *)&b, sizeof(b)) < 0) {
					close(fd);
					continue;
				}
			}
			if (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS) {
				close(fd);
				continue;
			}
			s[k].fd = fd;
			s[k].started = false;
			s[k].next_drip = t;
			opened++;
		}
		unsigned held = 0;
		for (unsigned k = 0; k < conns; k++) {
			p[k].fd = s[k].fd;
			p[k].events = POLLIN | (s[k].fd >= 0 && s[k].next_drip <= t ? POLLOUT : 0);
			p[k].revents = 0;
			held += s[k].fd >= 0;
		}
		if (held > held_max)
			held_max = held;
		poll(p, conns, 50);
		t = now_ms();
		for (unsigned k = 0; k < conns; k++) {
			if (s[k].fd < 0 || !p[k].revents)
				continue;
			bool gone = p[k].revents & (POLLERR | POLLHUP);
			if (!gone && (p[k].revents & POLLIN)) {
				char b[512];
				/* end of stream, an error, or an answer to a head
				 * never finished: this connection is over */
				(void)recv(s[k].fd, b, sizeof(b), 0);
				gone = true;
			}
			if (!gone && (p[k].revents & POLLOUT)) {
				const char *w = s[k].started ? more : start;
				size_t len = s[k].started ? sizeof(more) - 1 : sizeof(start) - 1;
				if (send(s[k].fd, w, len, MSG_NOSIGNAL) < 0 && errno != EAGAIN)
					gone = true;
				s[k].started = true;
				s[k].next_drip = t + drip;
			}
			if (gone) {
				close(s[k].fd);
				s[k].fd = -1;
				closed++;
			}
		}
	}
	unsigned left = 0;
	for (unsigned k = 0; k < conns; k++)
		if (s[k].fd >= 0) {
			close(s[k].fd);
			left++;
		}
	printf("flood: %u s, opened %llu, closed by the server %llu, held at most %llu at once, %u open at the end\n",
	       seconds, (unsigned long long)opened, (unsigned long long)closed, (unsigned long long)held_max, left);
	return 0;
}
