/* SPDX-License-Identifier: MIT */
/*
 * tests/fs/fsutil.c - small helpers for the shell tests of tests/fs/, so
 * they need no getfattr (attr package) or drop_caches:
 *
 *   fsutil getxattr FILE NAME           print the value (no newline added)
 *   fsutil wait-state FILE STATE SECS   poll user.dmar.state until it is
 *                                       STATE; exit 1 after SECS seconds
 *   fsutil dropcache FILE...            fdatasync, then drop the file's
 *                                       clean cached pages, so the next
 *                                       read asks the filesystem
 *   fsutil hold-write FILE SRC          write SRC's bytes into FILE (created
 *                                       or truncated) with one fd, print
 *                                       "ready", then keep FILE open, with
 *                                       no close, fsync or flush, until
 *                                       stdin reaches EOF; then close it
 *
 * Exit status: 0 success, 1 failure (message on stderr), 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static int cmd_getxattr(const char *file, const char *name)
{
	char buf[65536];
	ssize_t n = getxattr(file, name, buf, sizeof(buf));
	if (n < 0) {
		fprintf(stderr, "fsutil: getxattr %s %s: %s\n", file, name, strerror(errno));
		return 1;
	}
	fwrite(buf, 1, (size_t)n, stdout);
	return 0;
}

static int cmd_wait_state(const char *file, const char *want, double secs)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	char buf[256];
	for (;;) {
		ssize_t n = getxattr(file, "user.dmar.state", buf, sizeof(buf) - 1);
		if (n >= 0) {
			buf[n] = '\0';
			if (!strcmp(buf, want))
				return 0;
		} else {
			snprintf(buf, sizeof(buf), "(%s)", strerror(errno));
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 > secs) {
			fprintf(stderr, "fsutil: %s: user.dmar.state is '%s' after %.0f s, expected '%s'\n", file, buf,
				secs, want);
			return 1;
		}
		struct timespec d = { 0, 50 * 1000 * 1000 };
		nanosleep(&d, NULL);
	}
}

static int cmd_dropcache(const char *file)
{
	int fd = open(file, O_RDONLY);
	if (fd < 0) {
		fprintf(stderr, "fsutil: open %s: %s\n", file, strerror(errno));
		return 1;
	}
	int r = 0;
	/* a read-only fd can still fdatasync: dirty pages go first */
	if (fdatasync(fd) < 0 && errno != EINVAL) {
		fprintf(stderr, "fsutil: fdatasync %s: %s\n", file, strerror(errno));
		r = 1;
	}
	int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (e) {
		fprintf(stderr, "fsutil: posix_fadvise %s: %s\n", file, strerror(e));
		r = 1;
	}
	close(fd);
	return r;
}

static int cmd_hold_write(const char *file, const char *src)
{
	int in = open(src, O_RDONLY);
	if (in < 0) {
		fprintf(stderr, "fsutil: open %s: %s\n", src, strerror(errno));
		return 1;
	}
	int out = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	if (out < 0) {
		fprintf(stderr, "fsutil: open %s: %s\n", file, strerror(errno));
		return 1;
	}
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			fprintf(stderr, "fsutil: write %s: %s\n", file, strerror(errno));
			return 1;
		}
	close(in);
	/* stdout is not FILE: announcing is no close of FILE */
	printf("ready\n");
	fflush(stdout);
	while (read(0, buf, sizeof(buf)) > 0)
		;
	if (close(out) < 0) {
		fprintf(stderr, "fsutil: close %s: %s\n", file, strerror(errno));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "hold-write"))
		return cmd_hold_write(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "getxattr"))
		return cmd_getxattr(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "wait-state"))
		return cmd_wait_state(argv[2], argv[3], atof(argv[4]));
	if (argc >= 3 && !strcmp(argv[1], "dropcache")) {
		int r = 0;
		for (int i = 2; i < argc; i++)
			r |= cmd_dropcache(argv[i]);
		return r;
	}
	fprintf(stderr, "usage: fsutil getxattr FILE NAME | wait-state FILE STATE SECS | dropcache FILE... | "
			"hold-write FILE SRC\n");
	return 2;
}
