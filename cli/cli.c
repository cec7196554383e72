/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "codec/size.h"
#include "codec/clock.h"

const char *cli_cmd = NULL;
int cli_verbosity = 1;

/* The temp file of the output being written, removed if a signal ends us
 * first: an interrupted pack or unpack must leave nothing behind. */
static char *volatile pending_tmp;

static void on_fatal_signal(int sig)
{
	char *t = pending_tmp;
	if (t)
		unlink(t);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void watch_signals(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal_signal;
	sigemptyset(&sa.sa_mask);
	int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

/* "dmar: CMD: message" without the newline. */
static void vmsg(const char *fmt, va_list ap)
{
	fputs("dmar: ", stderr);
	if (cli_cmd)
		fprintf(stderr, "%s: ", cli_cmd);
	vfprintf(stderr, fmt, ap);
}

void cli_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'dmar %s%s--help'.\n", cli_cmd ? cli_cmd : "", cli_cmd ? " " : "");
	return CLI_EXIT_USAGE;
}

int cli_bad_option(int c, char **argv)
{
	return cli_usage(c == ':' ? "option '%s' needs an argument" : "unknown option '%s'", argv[optind - 1]);
}


const char *cli_rate(double v, char *buf)
{
	static const char *u[] = { "B/s", "kB/s", "MB/s", "GB/s", "TB/s" };
	int i = 0;
	while (v >= 1000 && i < 4) {
		v /= 1000;
		i++;
	}
	snprintf(buf, 32, v < 10 && i ? "%.1f %s" : "%.0f %s", v, u[i]);
	return buf;
}

unsigned cli_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1)
		n = 1;
	return n > 8 ? 8 : (unsigned)n;
}

int cli_parse_threads(const char *s, unsigned *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 256)
		return -EINVAL;
	if (v == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		v = n < 1 ? 1 : n;
	}
	*out = (unsigned)v;
	return 0;
}

int cli_out_open(struct cli_out *o, const char *path, bool force)
{
	memset(o, 0, sizeof(*o));
	if (!path) {
		o->fd = STDOUT_FILENO;
		return 0;
	}
	struct stat st;
	if (!force && lstat(path, &st) == 0)
		return -EEXIST;
	o->path = strdup(path);
	size_t n = strlen(path);
	o->tmp = malloc(n + 16);
	if (!o->path || !o->tmp) {
		free(o->path);
		free(o->tmp);
		return -ENOMEM;
	}
	/* Temp file in the target's directory, so rename is atomic. */
	const char *slash = strrchr(path, '/');
	size_t dirlen = slash ? (size_t)(slash - path + 1) : 0;
	snprintf(o->tmp, n + 16, "%.*s.%s.XXXXXX", (int)dirlen, path, path + dirlen);
	watch_signals();
	/* Block the fatal signals while the temp file exists but is not yet
	 * known to the handler; one that arrives meanwhile is handled (and
	 * the file removed) as soon as they are unblocked. */
	sigset_t fatal, old;
	sigemptyset(&fatal);
	int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&fatal, sigs[i]);
	pthread_sigmask(SIG_BLOCK, &fatal, &old);
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd >= 0)
		pending_tmp = o->tmp;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (o->fd < 0) {
		int r = -errno;
		free(o->path);
		free(o->tmp);
		o->path = o->tmp = NULL;
		return r;
	}
	return 0;
}

int cli_out_write(void *ctx, const void *buf, size_t len)
{
	struct cli_out *o = ctx;
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = write(o->fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int cli_out_pwrite(void *ctx, const void *buf, size_t len, uint64_t off)
{
	struct cli_out *o = ctx;
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = pwrite(o->fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int cli_out_commit(struct cli_out *o, const struct dmar_meta *meta)
{
	if (!o->path)
		return 0;
	int r = 0;
	mode_t mode = 0644;
	if (meta && meta->valid)
		mode = meta->mode & 07777;
	else {
		mode_t um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	if (fchmod(o->fd, mode) < 0)
		r = -errno;
	if (!r && meta && meta->valid) {
		struct timespec ts[2] = {
			{ .tv_sec = 0, .tv_nsec = UTIME_OMIT },
			{ .tv_sec = (time_t)meta->mtime_sec, .tv_nsec = meta->mtime_nsec },
		};
		if (futimens(o->fd, ts) < 0)
			r = -errno;
	}
	if (close(o->fd) < 0 && !r)
		r = -errno;
	o->fd = -1;
	if (!r && rename(o->tmp, o->path) < 0)
		r = -errno;
	if (r)
		unlink(o->tmp);
	pending_tmp = NULL;
	free(o->path);
	free(o->tmp);
	o->path = o->tmp = NULL;
	return r;
}

void cli_out_abort(struct cli_out *o)
{
	if (!o->path)
		return;
	if (o->fd >= 0)
		close(o->fd);
	unlink(o->tmp);
	pending_tmp = NULL;
	free(o->path);
	free(o->tmp);
	o->path = o->tmp = NULL;
}

void cli_progress_init(struct cli_progress *p, const char *what, uint64_t total)
{
	p->on = cli_verbosity > 0 && isatty(STDERR_FILENO);
	p->start = p->last = dmar_mono_s();
	p->total = total;
	p->what = what;
}

void cli_progress_cb(void *ctx, uint64_t done)
{
	struct cli_progress *p = ctx;
	if (!p->on)
		return;
	double now = dmar_mono_s();
	if (now - p->last < 0.25)
		return;
	p->last = now;
	char a[32], b[32];
	double speed = done / (now - p->start) / 1e6;
	if (p->total)
		fprintf(stderr, "\r%s %s / %s (%3.0f%%) %.0f MB/s   ", p->what, dmar_size_format(done, a),
			dmar_size_format(p->total, b), 100.0 * done / p->total, speed);
	else
		fprintf(stderr, "\r%s %s %.0f MB/s   ", p->what, dmar_size_format(done, a), speed);
}

void cli_progress_end(struct cli_progress *p)
{
	if (p->on && p->last > p->start)
		fputs("\r\033[K", stderr);
}
