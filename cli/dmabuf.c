/* SPDX-License-Identifier: MIT */
/*
 * dmar export-dmabuf: a file's bytes in a dma-buf (arena/dmabuf.h), handed
 * to a command that inherits it or sent over a Unix socket, for a GPU
 * driver or an RDMA stack to import.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "arena/dmabuf.h"
#include "cli.h"
#include "codec/size.h"

static const char export_help[] =
	"Usage: dmar export-dmabuf [OPTIONS] FILE -- COMMAND [ARG...]\n"
	"       dmar export-dmabuf [OPTIONS] FILE --send SOCKET\n"
	"Put FILE's bytes (a file of a dmarfs mount, or any file) in a new dma-buf\n"
	"and hand it over: run COMMAND with the dma-buf open (its fd number in\n"
	"DMAR_DMABUF_FD, its size in DMAR_DMABUF_SIZE, the file's bytes in it in\n"
	"DMAR_DMABUF_LENGTH), or send it to the Unix stream socket SOCKET (one\n"
	"message: the line 'dmabuf SIZE LENGTH' with the fd as SCM_RIGHTS).\n"
	"The dma-buf holds a copy of the bytes, zero past LENGTH up to SIZE (its\n"
	"pages); it lives until the last fd, mapping and importer let it go.\n"
	"  -o, --offset N   from byte N of FILE (default 0)\n"
	"  -l, --length N   N bytes (default: to the end of FILE)\n"
	"      --via MODE   auto (the dmar_arena module when /dev/dmar_arena\n"
	"                   opens, else /dev/udmabuf), kmod or udmabuf\n"
	"      --send SOCK  send the dma-buf to SOCK instead of running a command\n"
	"  -v, --verbose    say what was exported, and from where\n"
	"  -h, --help       this help\n";

static int fill(int fd, const char *path, uint8_t *dst, uint64_t off, uint64_t len)
{
	for (uint64_t done = 0; done < len;) {
		size_t want = len - done > (1u << 30) ? 1u << 30 : (size_t)(len - done);
		ssize_t n = pread(fd, dst + done, want, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			cli_err("%s: %s at byte %llu", path, n < 0 ? strerror(errno) : "ends early",
				(unsigned long long)(off + done));
			return -1;
		}
		done += (uint64_t)n;
	}
	return 0;
}

static int send_fd(const char *sock, int fd, uint64_t size, uint64_t len)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof(a.sun_path)) {
		cli_err("%s: a socket path of at most %zu bytes", sock, sizeof(a.sun_path) - 1);
		return -1;
	}
	memcpy(a.sun_path, sock, strlen(sock));
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		cli_err("%s: %s", sock, strerror(errno));
		if (s >= 0)
			close(s);
		return -1;
	}
	char line[64];
	int n = snprintf(line, sizeof(line), "dmabuf %llu %llu\n", (unsigned long long)size, (unsigned long long)len);
	struct iovec io = { .iov_base = line, .iov_len = (size_t)n };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	ssize_t w;
	while ((w = sendmsg(s, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (w != n)
		cli_err("%s: sending the dma-buf: %s", sock, w < 0 ? strerror(errno) : "short write");
	close(s);
	return w == n ? 0 : -1;
}

int cmd_export_dmabuf(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "offset", required_argument, NULL, 'o' }, { "length", required_argument, NULL, 'l' },
		{ "via", required_argument, NULL, 'V' },    { "send", required_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'v' },      { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t off = 0, len = 0;
	bool have_len = false;
	enum dmar_dmabuf_via via = DMAR_DMABUF_AUTO;
	const char *sock = NULL;
	int c;
	/* '+': options end at FILE, so COMMAND's own options stay its own. */
	while ((c = getopt_long(argc, argv, "+:o:l:vh", lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (dmar_size_parse(optarg, 0, &off) < 0)
				return cli_usage("--offset: '%s' is not a size", optarg);
			break;
		case 'l':
			if (dmar_size_parse(optarg, 0, &len) < 0 || !len)
				return cli_usage("--length: '%s' is not a size above 0", optarg);
			have_len = true;
			break;
		case 'V':
			if (dmar_dmabuf_via_parse(optarg, &via) < 0)
				return cli_usage("--via: '%s' is not auto, kmod or udmabuf", optarg);
			break;
		case 'S':
			sock = optarg;
			break;
		case 'v':
			cli_verbosity = 2;
			break;
		case 'h':
			fputs(export_help, stdout);
			return 0;
		default:
			return cli_bad_option(c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage("export-dmabuf takes a FILE%s", "");
	const char *path = argv[optind++];
	/* FILE --send SOCKET, as the usage writes it (options end at FILE) */
	if (optind < argc && !strcmp(argv[optind], "--send")) {
		if (optind + 1 >= argc)
			return cli_usage("--send takes a SOCKET%s", "");
		sock = argv[optind + 1];
		optind += 2;
	}
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	bool run = optind < argc;
	if (run == (sock != NULL))
		return cli_usage("%s", run ? "either -- COMMAND or --send SOCKET, not both"
					   : "a COMMAND after -- (or --send SOCKET) to hand the dma-buf to");

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		cli_err("%s: %s", path, strerror(errno));
		return 1;
	}
	if (!S_ISREG(st.st_mode) || off > (uint64_t)st.st_size || (!have_len && off == (uint64_t)st.st_size) ||
	    (have_len && len > (uint64_t)st.st_size - off)) {
		cli_err("%s: %s", path,
			!S_ISREG(st.st_mode) ? "not a regular file"
			: st.st_size == 0    ? "an empty file: a dma-buf has at least one page"
					     : "the range asked for is past the end of the file");
		close(fd);
		return 1;
	}
	if (!have_len)
		len = (uint64_t)st.st_size - off;

	struct dmar_error err = { 0 };
	struct dmar_dmabuf *b;
	if (dmar_dmabuf_new(&b, len, via, &err) < 0) {
		cli_err("%s", err.msg);
		close(fd);
		return 1;
	}
	uint64_t size = dmar_dmabuf_size(b);
	char via_name[16];
	snprintf(via_name, sizeof(via_name), "%s", dmar_dmabuf_via_name(b));
	int r = fill(fd, path, dmar_dmabuf_mem(b), off, len);
	close(fd);
	if (r < 0) {
		dmar_dmabuf_free(b);
		return 1;
	}
	int buf = dmar_dmabuf_export(b, &err);
	if (buf < 0) {
		cli_err("%s", err.msg);
		return 1;
	}
	if (cli_verbosity > 1) {
		char h1[32], h2[32];
		fprintf(stderr, "dmar export-dmabuf: %s: %s from byte %llu in a dma-buf of %s (%s)\n", path,
			dmar_size_format(len, h1), (unsigned long long)off, dmar_size_format(size, h2), via_name);
	}
	if (sock) {
		r = send_fd(sock, buf, size, len);
		close(buf);
		return r < 0 ? 1 : 0;
	}
	char v[32];
	if (fcntl(buf, F_SETFD, 0) < 0) {
		cli_err("the dma-buf's fd: %s", strerror(errno));
		return 1;
	}
	snprintf(v, sizeof(v), "%d", buf);
	setenv("DMAR_DMABUF_FD", v, 1);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)size);
	setenv("DMAR_DMABUF_SIZE", v, 1);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)len);
	setenv("DMAR_DMABUF_LENGTH", v, 1);
	execvp(argv[optind], argv + optind);
	cli_err("%s: %s", argv[optind], strerror(errno));
	return 127;
}
