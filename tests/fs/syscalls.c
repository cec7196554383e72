/* SPDX-License-Identifier: MIT */
/*
 * tests/fs/syscalls.c - a POSIX syscall exerciser for a mounted dmarfs.
 *
 *     syscalls MOUNTDIR [ARENA_BYTES [ENCODE]]
 *
 * Runs every check in a fresh subdirectory of MOUNTDIR, prints "ok" or
 * "FAIL" for each, and exits 1 if any failed (0 otherwise).  ARENA_BYTES is
 * the mount's size= in bytes (the statfs checks need it; 0 or absent skips
 * the f_blocks comparison); ENCODE is none|dedup|zstd (default dedup): with
 * none nothing is chunked, so the encoding and by-reference checks relax.
 * The permission check needs root (it drops to uid 65534 in a child) and a
 * mount with allow_other.  Data comes from a fixed-seed PRNG, so a failure
 * reproduces.  Modelled on libfuse's test/test_syscalls.c.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024u * 1024u)

static const char *g_mnt;   /* the mount */
static char g_dir[PATH_MAX]; /* this run's working directory inside it */
static uint64_t g_arena;    /* size= in bytes, 0 unknown */
static const char *g_encode = "dedup";
static int g_failed, g_passed, g_skipped;
static const char *g_cur;   /* the running check */

/* ---- reporting --------------------------------------------------------- */

/* A check fails with a message naming the call, what was expected and what
 * came back (with errno); the check function then returns at once. */
#define FAIL(...)                                  \
	do {                                       \
		fail_msg(__LINE__, __VA_ARGS__); \
		return -1;                         \
	} while (0)
#define EXPECT(cond, ...)              \
	do {                           \
		if (!(cond))           \
			FAIL(__VA_ARGS__); \
	} while (0)
/* A call that must succeed. */
#define OK(call)                                                            \
	do {                                                                \
		errno = 0;                                                  \
		if ((call) < 0)                                             \
			FAIL("%s: expected success, got errno %d (%s)", #call, \
			     errno, strerror(errno));                       \
	} while (0)
/* A call that must fail with errno e. */
#define ERR(call, e)                                                              \
	do {                                                                      \
		errno = 0;                                                        \
		long r_ = (long)(call);                                           \
		if (r_ >= 0 || errno != (e))                                      \
			FAIL("%s: expected -1/%s, got %ld/%s", #call, strerrorname_np(e), r_, \
			     errno ? strerrorname_np(errno) : "no error");        \
	} while (0)

static void fail_msg(int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stdout, "FAIL: %s (line %d): ", g_cur, line);
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

static void note(const char *fmt, ...)
{
	va_list ap;
	fprintf(stdout, "note: %s: ", g_cur);
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* ---- helpers ------------------------------------------------------------- */

static char *P(const char *name)
{
	static char buf[8][PATH_MAX];
	static unsigned k;
	char *b = buf[k++ % 8];
	if (snprintf(b, PATH_MAX, "%s/%s", g_dir, name) >= PATH_MAX) {
		fprintf(stderr, "syscalls: path too long: %s/%s\n", g_dir, name);
		exit(2);
	}
	return b;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* splitmix64: a fixed-seed PRNG for test data.  The seed is mixed into the
 * start state, so the streams of nearby seeds do not overlap (with a
 * plain seed*constant start, seed n+1 is seed n shifted by 8 bytes, and a
 * content-defined chunker would dedup them). */
static void prng_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = mix64(seed + 0x632BE59BD9B4E019ull);
	while (len) {
		uint64_t z = mix64(s += 0x9E3779B97F4A7C15ull);
		size_t n = len < 8 ? len : 8;
		memcpy(p, &z, n);
		p += n;
		len -= n;
	}
}

/* Buffers of the running check: a check that fails returns at once, so
 * main frees what it left (the exerciser stays clean under LeakSanitizer). */
static void *g_allocs[64];

static void *track(void *p)
{
	if (!p) {
		perror("malloc");
		exit(2);
	}
	for (size_t k = 0; k < sizeof(g_allocs) / sizeof(g_allocs[0]); k++)
		if (!g_allocs[k]) {
			g_allocs[k] = p;
			return p;
		}
	fprintf(stderr, "syscalls: too many buffers in one check\n");
	exit(2);
}

static void *xmalloc(size_t n)
{
	return track(malloc(n ? n : 1));
}

static void *xcalloc(size_t n, size_t size)
{
	return track(calloc(n ? n : 1, size));
}

static void xfree(void *p)
{
	for (size_t k = 0; p && k < sizeof(g_allocs) / sizeof(g_allocs[0]); k++)
		if (g_allocs[k] == p)
			g_allocs[k] = NULL;
	free(p);
}

static void xfree_all(void)
{
	for (size_t k = 0; k < sizeof(g_allocs) / sizeof(g_allocs[0]); k++) {
		free(g_allocs[k]);
		g_allocs[k] = NULL;
	}
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	const char *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

static ssize_t read_all(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, p + done, len - done, off + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/* Make a file of exactly these bytes (closed afterwards). */
static int make_file(const char *path, const void *buf, size_t len, mode_t mode)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, mode);
	if (fd < 0)
		return -1;
	if (write_all(fd, buf, len, 0) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return close(fd);
}

static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (a[i] != b[i])
			return i;
	return len;
}

static size_t first_nonzero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return i;
	return len;
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* Read the file as the filesystem holds it, not as the kernel page cache
 * does: drop the cached pages first (they are clean after fsync). */
static ssize_t read_uncached(const char *path, void *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	ssize_t n = read_all(fd, buf, len, 0);
	int e = errno;
	close(fd);
	errno = e;
	return n;
}

/* compare path's contents (uncached) with want; a FAIL-style message on
 * mismatch; returns 0 or -1. */
static int same_content(const char *path, const uint8_t *want, size_t len)
{
	uint8_t *got = xmalloc(len + 1);
	ssize_t n = read_uncached(path, got, len + 1);
	int r = 0;
	if (n < 0) {
		fail_msg(__LINE__, "read %s: errno %s", path, strerrorname_np(errno));
		r = -1;
	} else if ((size_t)n != len) {
		fail_msg(__LINE__, "read %s: expected %zu bytes, got %zd", path, len, n);
		r = -1;
	} else {
		size_t d = first_diff(got, want, len);
		if (d != len) {
			fail_msg(__LINE__, "%s: content differs at byte %zu: expected 0x%02x, got 0x%02x", path, d,
				 want[d], got[d]);
			r = -1;
		}
	}
	xfree(got);
	return r;
}

static int get_state(const char *path, char *out, size_t cap)
{
	ssize_t n = getxattr(path, "user.dmar.state", out, cap - 1);
	if (n < 0)
		return -1;
	out[n] = '\0';
	return 0;
}

/* The state of a file closed just now: the kernel sends its RELEASE after
 * close(2) returns, so the daemon may answer once before it knows the file
 * is closed (and encodes it). Waits up to 5 s for WANT; OUT has the last. */
static int wait_state(const char *path, const char *want, char *out, size_t cap)
{
	for (int k = 0; k < 100; k++) {
		if (get_state(path, out, cap) < 0)
			return -1;
		if (!strcmp(out, want))
			return 0;
		struct timespec d = { 0, 50 * 1000 * 1000 };
		nanosleep(&d, NULL);
	}
	return 0;
}

static long long get_num_xattr(const char *path, const char *name)
{
	char buf[64];
	ssize_t n = getxattr(path, name, buf, sizeof(buf) - 1);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return strtoll(buf, NULL, 10);
}

/* Bytes of the arena in use, per statfs. */
static int arena_used(uint64_t *used)
{
	struct statvfs sv;
	if (statvfs(g_mnt, &sv) < 0)
		return -1;
	*used = ((uint64_t)sv.f_blocks - (uint64_t)sv.f_bfree) * sv.f_frsize;
	return 0;
}

static double ts_diff(struct timespec a, struct timespec b) /* a - b, seconds */
{
	return (double)(a.tv_sec - b.tv_sec) + (double)(a.tv_nsec - b.tv_nsec) / 1e9;
}

static bool ts_eq(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Let the clock move past t (timestamps have a granularity: the kernel's
 * coarse clock ticks every few ms).  Bounded: at most ~1 s. */
static void wait_clock_past(struct timespec t)
{
	for (int k = 0; k < 100; k++) {
		struct timespec n;
		clock_gettime(CLOCK_REALTIME_COARSE, &n);
		if (ts_diff(n, t) > 0.02)
			return;
		struct timespec d = { 0, 10 * 1000 * 1000 };
		nanosleep(&d, NULL);
	}
}

static bool encoding(void)
{
	return strcmp(g_encode, "none") != 0;
}

/* Whether SEEK_DATA/SEEK_HOLE find holes: not with DMAR_NO_HOLES=1 (a
 * mount with writeback, whose kernel answers them itself: the whole file
 * is data). */
static bool holes(void)
{
	const char *e = getenv("DMAR_NO_HOLES");
	return !e || !*e;
}

/* ---- checks -------------------------------------------------------------- */

static int t_create_rw(void)
{
	const size_t len = 3 * MiB + 12345;
	uint8_t *buf = xmalloc(len), *got = xmalloc(len);
	prng_fill(buf, len, 1);
	int fd = open(P("rw"), O_CREAT | O_EXCL | O_RDWR, 0644);
	EXPECT(fd >= 0, "open(O_CREAT|O_EXCL): errno %s", strerrorname_np(errno));
	ERR(open(P("rw"), O_CREAT | O_EXCL | O_RDWR, 0644), EEXIST);
	/* sequential writes of odd sizes */
	size_t done = 0, step = 4097;
	while (done < len) {
		size_t n = len - done < step ? len - done : step;
		ssize_t w = write(fd, buf + done, n);
		EXPECT(w == (ssize_t)n, "write(%zu) at %zu returned %zd errno %s", n, done, w, strerrorname_np(errno));
		done += n;
		step = step * 3 % 200003 + 1;
	}
	struct stat st;
	OK(fstat(fd, &st));
	EXPECT(st.st_size == (off_t)len, "st_size %lld, expected %zu", (long long)st.st_size, len);
	EXPECT(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644, "mode 0%o, expected 0100644", st.st_mode);
	/* overwrite at unaligned offsets */
	static const char patch[] = "dmarfs-patch";
	off_t offs[] = { 0, 1, 4095, 4096, 65535, 1048577, (off_t)len - (off_t)sizeof(patch) };
	for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]); k++) {
		EXPECT(pwrite(fd, patch, sizeof(patch), offs[k]) == (ssize_t)sizeof(patch), "pwrite at %lld: %s",
		       (long long)offs[k], strerrorname_np(errno));
		memcpy(buf + offs[k], patch, sizeof(patch));
	}
	EXPECT(read_all(fd, got, len, 0) == (ssize_t)len, "pread whole file");
	size_t d = first_diff(got, buf, len);
	EXPECT(d == len, "pread after pwrite: differs at %zu", d);
	/* read at EOF and past it */
	char c;
	EXPECT(pread(fd, &c, 1, (off_t)len) == 0, "pread at EOF did not return 0");
	EXPECT(pread(fd, &c, 1, (off_t)len + 100000) == 0, "pread past EOF did not return 0");
	/* lseek + read */
	EXPECT(lseek(fd, 4096, SEEK_SET) == 4096, "lseek SEEK_SET");
	EXPECT(read(fd, got, 100) == 100 && !memcmp(got, buf + 4096, 100), "read after lseek");
	EXPECT(lseek(fd, 0, SEEK_END) == (off_t)len, "lseek SEEK_END");
	OK(close(fd));
	if (same_content(P("rw"), buf, len) < 0)
		return -1;
	/* O_TRUNC empties it */
	fd = open(P("rw"), O_RDWR | O_TRUNC);
	EXPECT(fd >= 0, "open(O_TRUNC): %s", strerrorname_np(errno));
	OK(fstat(fd, &st));
	EXPECT(st.st_size == 0, "size after O_TRUNC: %lld", (long long)st.st_size);
	OK(close(fd));
	OK(unlink(P("rw")));
	xfree(buf);
	xfree(got);
	return 0;
}

static int t_sparse(void)
{
	const off_t far = 10 * (off_t)MiB;
	int fd = open(P("sparse"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	EXPECT(pwrite(fd, "head-bytes", 10, 0) == 10, "pwrite at 0");
	EXPECT(pwrite(fd, "tail-bytes", 10, far) == 10, "pwrite at 10 MiB: %s", strerrorname_np(errno));
	struct stat st;
	OK(fsync(fd));
	OK(fstat(fd, &st));
	EXPECT(st.st_size == far + 10, "size %lld, expected %lld", (long long)st.st_size, (long long)(far + 10));
	EXPECT((off_t)st.st_blocks * 512 < 2 * (off_t)MiB,
	       "st_blocks %lld (%lld bytes) for a 10 MiB file with 20 bytes of data: not sparse",
	       (long long)st.st_blocks, (long long)st.st_blocks * 512);
	uint8_t *got = xmalloc((size_t)far + 10);
	EXPECT(read_all(fd, got, (size_t)far + 10, 0) == far + 10, "read back");
	EXPECT(!memcmp(got, "head-bytes", 10) && !memcmp(got + far, "tail-bytes", 10), "data around the hole");
	EXPECT(all_zero(got + 10, (size_t)far - 10), "the hole does not read as zeros (first non-zero at %zu)",
	       10 + first_nonzero(got + 10, (size_t)far - 10));
	OK(close(fd));
	/* and from the filesystem, not the page cache */
	uint8_t *want = xcalloc(1, (size_t)far + 10);
	memcpy(want, "head-bytes", 10);
	memcpy(want + far, "tail-bytes", 10);
	int r = same_content(P("sparse"), want, (size_t)far + 10);
	xfree(want);
	xfree(got);
	if (r < 0)
		return -1;
	OK(unlink(P("sparse")));

	/* 64-bit offsets: a byte at 1 TiB, and the limit */
	const off_t tib = (off_t)1 << 40;
	fd = open(P("sparse-tib"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	EXPECT(pwrite(fd, "T", 1, tib) == 1, "pwrite at 1 TiB: %s", strerrorname_np(errno));
	OK(fsync(fd));
	OK(fstat(fd, &st));
	EXPECT(st.st_size == tib + 1, "size after a byte at 1 TiB: %lld", (long long)st.st_size);
	EXPECT(st.st_blocks * 512 < 4 * (off_t)MiB, "a 1 TiB sparse file has %lld blocks", (long long)st.st_blocks);
	char two[2] = { 1, 1 };
	EXPECT(pread(fd, two, 2, tib - 1) == 2 && two[0] == 0 && two[1] == 'T', "read around 1 TiB: %d %d", two[0],
	       two[1]);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	EXPECT(pread(fd, two, 2, tib - 1) == 2 && two[0] == 0 && two[1] == 'T', "uncached read around 1 TiB");
	if (holes())
		EXPECT(lseek(fd, 0, SEEK_DATA) == (tib & ~(off_t)0xffff) || lseek(fd, 0, SEEK_DATA) == tib,
		       "SEEK_DATA in a 1 TiB sparse file: %lld", (long long)lseek(fd, 0, SEEK_DATA));
	else
		EXPECT(lseek(fd, 0, SEEK_DATA) == 0, "SEEK_DATA without holes: %lld", (long long)lseek(fd, 0, SEEK_DATA));
	OK(ftruncate(fd, 4096));
	OK(fstat(fd, &st));
	EXPECT(st.st_size == 4096, "shrink from 1 TiB: size %lld", (long long)st.st_size);
	OK(close(fd));
	OK(unlink(P("sparse-tib")));
	return 0;
}

/* Two O_APPEND descriptors interleave whole records, and a pwrite through
 * a third (non-append) descriptor lands where it says. */
static int t_append(void)
{
	enum { N = 200, REC = 16 };
	int a = open(P("append"), O_CREAT | O_WRONLY | O_APPEND, 0644);
	int b = open(P("append"), O_WRONLY | O_APPEND);
	EXPECT(a >= 0 && b >= 0, "open O_APPEND: %s", strerrorname_np(errno));
	char rec[REC + 1];
	for (int i = 0; i < N; i++) {
		int fd = (i % 2) ? b : a;
		snprintf(rec, sizeof(rec), "%c%013d\n", (i % 2) ? 'B' : 'A', i);
		EXPECT(write(fd, rec, REC) == REC, "append write %d: %s", i, strerrorname_np(errno));
		/* O_APPEND: even after seeking to 0, writes go to the end */
		if (i == N / 2)
			lseek(fd, 0, SEEK_SET);
	}
	int c = open(P("append"), O_RDWR);
	EXPECT(c >= 0, "open O_RDWR: %s", strerrorname_np(errno));
	EXPECT(pwrite(c, "X", 1, 0) == 1, "pwrite through a non-append fd");
	/* the page the pwrite dirtied must not be written back as an append */
	OK(fsync(c));
	snprintf(rec, sizeof(rec), "%c%013d\n", 'C', N);
	EXPECT(write(a, rec, REC) == REC, "append after pwrite");
	OK(fsync(a));
	struct stat st;
	OK(fstat(c, &st));
	EXPECT(st.st_size == (N + 1) * REC, "size %lld, expected %d", (long long)st.st_size, (N + 1) * REC);
	close(a);
	close(b);
	close(c);
	char *got = xmalloc((N + 1) * REC + 1);
	ssize_t n = read_uncached(P("append"), got, (N + 1) * REC + 1);
	EXPECT(n == (N + 1) * REC, "read %zd bytes, expected %d", n, (N + 1) * REC);
	for (int i = 0; i <= N; i++) {
		snprintf(rec, sizeof(rec), "%c%013d\n", i == N ? 'C' : (i % 2) ? 'B' : 'A', i);
		if (i == 0)
			rec[0] = 'X';
		EXPECT(!memcmp(got + i * REC, rec, REC), "record %d is '%.*s', expected '%.*s'", i, REC - 1,
		       got + i * REC, REC - 1, rec);
	}
	xfree(got);
	OK(unlink(P("append")));
	return 0;
}

static int t_truncate(void)
{
	const size_t len = 1 * MiB, cut = 300001, grow = 2 * MiB;
	uint8_t *buf = xmalloc(grow), *got = xmalloc(grow);
	prng_fill(buf, len, 2);
	for (int encoded = 0; encoded < 2; encoded++) {
		if (make_file(P("trunc"), buf, len, 0644) < 0)
			FAIL("make file: %s", strerrorname_np(errno));
		int fd = open(P("trunc"), O_RDWR);
		EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
		if (encoded)
			OK(fsync(fd)); /* chunks, not RAW extents */
		OK(ftruncate(fd, (off_t)cut));
		struct stat st;
		OK(fstat(fd, &st));
		EXPECT(st.st_size == (off_t)cut, "ftruncate shrink: size %lld, expected %zu", (long long)st.st_size, cut);
		OK(ftruncate(fd, (off_t)grow));
		OK(fstat(fd, &st));
		EXPECT(st.st_size == (off_t)grow, "ftruncate grow: size %lld", (long long)st.st_size);
		OK(close(fd));
		memset(buf + cut, 0, grow - cut);
		if (same_content(P("trunc"), buf, grow) < 0)
			return -1;
		/* path truncate, to a size inside the first page, then back:
		 * the old bytes must not come back */
		OK(truncate(P("trunc"), 100));
		OK(stat(P("trunc"), &st));
		EXPECT(st.st_size == 100, "truncate(100): size %lld", (long long)st.st_size);
		OK(truncate(P("trunc"), 5000));
		memset(buf + 100, 0, 4900);
		if (same_content(P("trunc"), buf, 5000) < 0)
			return -1;
		/* write past the shrunk end: the gap is zeros */
		fd = open(P("trunc"), O_RDWR);
		OK(ftruncate(fd, 50));
		EXPECT(pwrite(fd, "Z", 1, 70000) == 1, "pwrite after shrink");
		OK(close(fd));
		uint8_t *want = xcalloc(1, 70001);
		memcpy(want, buf, 50);
		want[70000] = 'Z';
		int r = same_content(P("trunc"), want, 70001);
		xfree(want);
		if (r < 0)
			return -1;
		ERR(truncate(P("trunc"), -1), EINVAL);
		OK(unlink(P("trunc")));
		prng_fill(buf, len, 2);
	}
	ERR(truncate(g_dir, 0), EISDIR);
	xfree(buf);
	xfree(got);
	return 0;
}

static int t_fallocate(void)
{
	const off_t len = 4 * (off_t)MiB;
	uint64_t u0, u1;
	int fd = open(P("falloc"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	OK(arena_used(&u0));
	OK(fallocate(fd, 0, 0, len));
	struct stat st;
	OK(fstat(fd, &st));
	EXPECT(st.st_size == len, "fallocate mode 0: size %lld, expected %lld", (long long)st.st_size, (long long)len);
	EXPECT((off_t)st.st_blocks * 512 >= len, "fallocate mode 0: st_blocks %lld (%lld bytes) < %lld",
	       (long long)st.st_blocks, (long long)st.st_blocks * 512, (long long)len);
	OK(arena_used(&u1));
	EXPECT(u1 >= u0 + (uint64_t)len - MiB, "fallocate did not reserve arena memory: used %" PRIu64 " -> %" PRIu64,
	       u0, u1);
	uint8_t *got = xmalloc((size_t)len);
	EXPECT(read_all(fd, got, (size_t)len, 0) == len && all_zero(got, (size_t)len),
	       "fallocated range does not read as zeros");
	/* more than the arena holds: ENOSPC, and nothing changes */
	if (g_arena) {
		int fd2 = open(P("falloc-big"), O_CREAT | O_RDWR | O_TRUNC, 0644);
		EXPECT(fd2 >= 0, "open: %s", strerrorname_np(errno));
		ERR(fallocate(fd2, 0, 0, (off_t)g_arena * 2), ENOSPC);
		OK(fstat(fd2, &st));
		EXPECT(st.st_size == 0, "a failed fallocate left size %lld", (long long)st.st_size);
		OK(close(fd2));
		OK(unlink(P("falloc-big")));
	}
	/* fallocate inside: size unchanged */
	OK(fallocate(fd, 0, 1000, 5000));
	OK(fstat(fd, &st));
	EXPECT(st.st_size == len, "fallocate inside the file changed its size to %lld", (long long)st.st_size);
	OK(close(fd));
	OK(unlink(P("falloc")));

	/* punch a hole into data (RAW, then encoded) */
	const size_t plen = 1 * MiB;
	const off_t hoff = 256 * 1024, hlen = 128 * 1024;
	uint8_t *buf = xmalloc(plen);
	for (int encoded = 0; encoded < 2; encoded++) {
		prng_fill(buf, plen, 3);
		if (make_file(P("punch"), buf, plen, 0644) < 0)
			FAIL("make file: %s", strerrorname_np(errno));
		fd = open(P("punch"), O_RDWR);
		EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
		if (encoded)
			OK(fsync(fd));
		struct stat st0;
		OK(fstat(fd, &st0));
		OK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, hoff, hlen));
		OK(fstat(fd, &st));
		EXPECT(st.st_size == (off_t)plen, "punch changed the size: %lld", (long long)st.st_size);
		memset(buf + hoff, 0, (size_t)hlen);
		EXPECT(read_all(fd, got, plen, 0) == (ssize_t)plen, "read after punch");
		size_t d = first_diff(got, buf, plen);
		EXPECT(d == plen, "after punch (%s): differs at %zu", encoded ? "encoded" : "raw", d);
		OK(fsync(fd));
		OK(fstat(fd, &st));
		EXPECT(st.st_blocks < st0.st_blocks, "punch did not free blocks: st_blocks %lld -> %lld",
		       (long long)st0.st_blocks, (long long)st.st_blocks);
		OK(close(fd));
		if (same_content(P("punch"), buf, plen) < 0)
			return -1;
		/* the punched range is a hole */
		fd = open(P("punch"), O_RDONLY);
		off_t h = lseek(fd, 0, SEEK_HOLE), dd = lseek(fd, hoff, SEEK_DATA);
		off_t wh = holes() ? hoff : (off_t)plen, wd = holes() ? hoff + hlen : hoff;
		EXPECT(h == wh, "SEEK_HOLE after punch at %lld: got %lld (%s)", (long long)hoff, (long long)h,
		       strerrorname_np(errno));
		EXPECT(dd == wd, "SEEK_DATA from the punched hole: got %lld, expected %lld", (long long)dd,
		       (long long)wd);
		OK(close(fd));
		OK(unlink(P("punch")));
	}
	xfree(buf);
	xfree(got);
	return 0;
}

/* A file of 64 KiB data, an 8 MiB hole, 64 KiB data. */
static int seek_checks(int fd, off_t gap, off_t dlen, const char *when)
{
	const off_t size = gap + dlen;
	const bool h = holes(); /* without: the whole file is data */
	off_t r;
	EXPECT((r = lseek(fd, 0, SEEK_DATA)) == 0, "%s: SEEK_DATA(0) = %lld (%s), expected 0", when, (long long)r,
	       strerrorname_np(errno));
	r = lseek(fd, 0, SEEK_HOLE);
	EXPECT(r == (h ? dlen : size), "%s: SEEK_HOLE(0) = %lld, expected %lld (the hole after the first 64 KiB)", when,
	       (long long)r, (long long)(h ? dlen : size));
	r = lseek(fd, dlen + 4096, SEEK_DATA);
	EXPECT(r == (h ? gap : dlen + 4096), "%s: SEEK_DATA(in hole) = %lld, expected %lld", when, (long long)r,
	       (long long)(h ? gap : dlen + 4096));
	r = lseek(fd, dlen + 4096, SEEK_HOLE);
	EXPECT(r == (h ? dlen + 4096 : size), "%s: SEEK_HOLE(in hole) = %lld, expected %lld", when, (long long)r,
	       (long long)(h ? dlen + 4096 : size));
	r = lseek(fd, gap + 100, SEEK_HOLE);
	EXPECT(r == size, "%s: SEEK_HOLE(in last data) = %lld, expected EOF %lld", when, (long long)r, (long long)size);
	ERR(lseek(fd, size, SEEK_DATA), ENXIO);
	ERR(lseek(fd, size + 1, SEEK_HOLE), ENXIO);
	return 0;
}

static int seek_file(bool flush)
{
	const off_t gap = 8 * (off_t)MiB, dlen = 64 * 1024;
	uint8_t *buf = xmalloc((size_t)dlen);
	prng_fill(buf, (size_t)dlen, 4);
	int fd = open(P("seek"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	OK(write_all(fd, buf, (size_t)dlen, 0));
	OK(write_all(fd, buf, (size_t)dlen, gap));
	xfree(buf);
	int r = 0;
	if (flush) {
		OK(fsync(fd)); /* encoded (or flushed RAW with encode=none) */
		r = seek_checks(fd, gap, dlen, "after fsync");
	} else {
		/* straight after write(): the data may still be only in the
		 * kernel's page cache (writeback cache), and must count */
		r = seek_checks(fd, gap, dlen, "before fsync");
	}
	close(fd);
	OK(unlink(P("seek")));
	return r;
}

static int t_seek_flushed(void)
{
	return seek_file(true);
}

static int t_seek_unflushed(void)
{
	return seek_file(false);
}

static int t_unlink_open(void)
{
	const size_t len = 256 * 1024;
	uint8_t *buf = xmalloc(len + 10), *got = xmalloc(len + 10);
	prng_fill(buf, len, 5);
	if (make_file(P("doomed"), buf, len, 0644) < 0)
		FAIL("make file: %s", strerrorname_np(errno));
	int fd = open(P("doomed"), O_RDWR);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	OK(unlink(P("doomed")));
	struct stat st;
	ERR(stat(P("doomed"), &st), ENOENT);
	ERR(open(P("doomed"), O_RDONLY), ENOENT);
	DIR *d = opendir(g_dir);
	EXPECT(d, "opendir: %s", strerrorname_np(errno));
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strcmp(e->d_name, "doomed")) {
			closedir(d);
			FAIL("unlinked file still listed by readdir");
		}
	closedir(d);
	OK(fstat(fd, &st));
	EXPECT(st.st_nlink == 0, "fstat of unlinked file: st_nlink %lu, expected 0", (unsigned long)st.st_nlink);
	EXPECT(st.st_size == (off_t)len, "fstat of unlinked file: size %lld", (long long)st.st_size);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	EXPECT(read_all(fd, got, len, 0) == (ssize_t)len && !memcmp(got, buf, len), "read of unlinked open file");
	EXPECT(pwrite(fd, "0123456789", 10, (off_t)len) == 10, "write to unlinked open file: %s",
	       strerrorname_np(errno));
	memcpy(buf + len, "0123456789", 10);
	OK(fsync(fd));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	EXPECT(read_all(fd, got, len + 10, 0) == (ssize_t)len + 10 && !memcmp(got, buf, len + 10),
	       "read back of write to unlinked file");
	/* a new file of the same name is a different file */
	if (make_file(P("doomed"), "new", 3, 0644) < 0)
		FAIL("recreate: %s", strerrorname_np(errno));
	struct stat st2;
	OK(stat(P("doomed"), &st2));
	EXPECT(st2.st_ino != st.st_ino && st2.st_size == 3, "recreated name shares the unlinked inode");
	EXPECT(read_all(fd, got, 10, (off_t)len) == 10 && !memcmp(got, "0123456789", 10), "old fd after recreate");
	OK(close(fd));
	OK(unlink(P("doomed")));
	xfree(buf);
	xfree(got);
	return 0;
}

static int read_small(const char *path, char *out, size_t cap)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, out, cap - 1);
	close(fd);
	if (n < 0)
		return -1;
	out[n] = '\0';
	return 0;
}

static int t_rename(void)
{
	char got[64];
	if (make_file(P("ra"), "content-A", 9, 0644) < 0 || make_file(P("rb"), "content-B", 9, 0644) < 0)
		FAIL("make files: %s", strerrorname_np(errno));
	struct stat sa;
	OK(stat(P("ra"), &sa));
	int old = open(P("rb"), O_RDONLY);
	EXPECT(old >= 0, "open rb");
	OK(rename(P("ra"), P("rb")));
	struct stat st;
	ERR(stat(P("ra"), &st), ENOENT);
	OK(stat(P("rb"), &st));
	EXPECT(st.st_ino == sa.st_ino, "after rename ra->rb, rb has st_ino %llu, expected ra's %llu",
	       (unsigned long long)st.st_ino, (unsigned long long)sa.st_ino);
	OK(read_small(P("rb"), got, sizeof(got)));
	EXPECT(!strcmp(got, "content-A"), "rb holds '%s' after replace, expected content-A", got);
	EXPECT(pread(old, got, 9, 0) == 9 && !memcmp(got, "content-B", 9), "the replaced file's open fd");
	close(old);
	/* rename onto itself (a hard link of the same inode): nothing happens */
	OK(link(P("rb"), P("rb2")));
	OK(rename(P("rb"), P("rb2")));
	OK(stat(P("rb"), &st));
	OK(stat(P("rb2"), &st));
	EXPECT(st.st_nlink == 2, "rename between two links of one inode changed nlink to %lu", (unsigned long)st.st_nlink);
	OK(unlink(P("rb2")));

	/* RENAME_NOREPLACE */
	if (make_file(P("rc"), "content-C", 9, 0644) < 0)
		FAIL("make rc");
	ERR(renameat2(AT_FDCWD, P("rc"), AT_FDCWD, P("rb"), RENAME_NOREPLACE), EEXIST);
	OK(read_small(P("rb"), got, sizeof(got)));
	EXPECT(!strcmp(got, "content-A"), "RENAME_NOREPLACE failure changed the target: '%s'", got);
	OK(renameat2(AT_FDCWD, P("rc"), AT_FDCWD, P("rd"), RENAME_NOREPLACE));
	ERR(stat(P("rc"), &st), ENOENT);
	OK(read_small(P("rd"), got, sizeof(got)));
	EXPECT(!strcmp(got, "content-C"), "RENAME_NOREPLACE to a new name: '%s'", got);

	/* RENAME_EXCHANGE: files, then a file and a directory */
	OK(renameat2(AT_FDCWD, P("rb"), AT_FDCWD, P("rd"), RENAME_EXCHANGE));
	OK(read_small(P("rb"), got, sizeof(got)));
	EXPECT(!strcmp(got, "content-C"), "after RENAME_EXCHANGE rb holds '%s', expected content-C", got);
	OK(read_small(P("rd"), got, sizeof(got)));
	EXPECT(!strcmp(got, "content-A"), "after RENAME_EXCHANGE rd holds '%s', expected content-A", got);
	ERR(renameat2(AT_FDCWD, P("rb"), AT_FDCWD, P("nonexistent"), RENAME_EXCHANGE), ENOENT);
	OK(mkdir(P("rdir"), 0755));
	if (make_file(P("rdir/inner"), "in", 2, 0644) < 0)
		FAIL("make rdir/inner");
	OK(renameat2(AT_FDCWD, P("rb"), AT_FDCWD, P("rdir"), RENAME_EXCHANGE));
	OK(stat(P("rb"), &st));
	EXPECT(S_ISDIR(st.st_mode), "after exchanging a file and a dir, rb is not a directory");
	OK(stat(P("rb/inner"), &st));
	OK(read_small(P("rdir"), got, sizeof(got)));
	EXPECT(!strcmp(got, "content-C"), "exchanged file holds '%s'", got);
	OK(renameat2(AT_FDCWD, P("rb"), AT_FDCWD, P("rdir"), RENAME_EXCHANGE));
	/* across directories, a dir for a file: both parents' link counts
	 * and the dir's ".." follow */
	OK(mkdir(P("xa1"), 0755));
	OK(mkdir(P("xa1/sub"), 0755));
	OK(mkdir(P("xa2"), 0755));
	if (make_file(P("xa2/file"), "F", 1, 0644) < 0)
		FAIL("make xa2/file");
	OK(renameat2(AT_FDCWD, P("xa1/sub"), AT_FDCWD, P("xa2/file"), RENAME_EXCHANGE));
	struct stat x1, x2, xs;
	OK(stat(P("xa1"), &x1));
	OK(stat(P("xa2"), &x2));
	OK(stat(P("xa2/file/.."), &xs));
	EXPECT(x1.st_nlink == 2 && x2.st_nlink == 3,
	       "after exchanging xa1/sub (dir) and xa2/file: nlink xa1 %lu (expected 2), xa2 %lu (expected 3)",
	       (unsigned long)x1.st_nlink, (unsigned long)x2.st_nlink);
	EXPECT(xs.st_ino == x2.st_ino, "'..' of the exchanged dir is not its new parent");
	OK(stat(P("xa1/sub"), &xs));
	EXPECT(S_ISREG(xs.st_mode), "xa1/sub is not the file after the exchange");
	OK(unlink(P("xa1/sub")));
	OK(rmdir(P("xa2/file")));
	OK(rmdir(P("xa1")));
	OK(rmdir(P("xa2")));

	/* directories: into its own subdirectory is EINVAL; onto a
	 * non-empty one ENOTEMPTY; onto an empty one replaces it */
	OK(mkdir(P("rdir/sub"), 0755));
	ERR(rename(P("rdir"), P("rdir/sub/x")), EINVAL);
	ERR(rename(P("rdir"), P("rdir/sub")), EINVAL);
	OK(mkdir(P("rdir2"), 0755));
	OK(mkdir(P("rdir2/full"), 0755));
	ERR(rename(P("rdir2"), P("rdir")), ENOTEMPTY);
	OK(mkdir(P("rempty"), 0755));
	ERR(rename(P("rd"), P("rempty")), EISDIR);
	ERR(rename(P("rempty"), P("rd")), ENOTDIR);
	OK(rename(P("rdir2"), P("rempty")));
	OK(stat(P("rempty/full"), &st));
	/* a directory moved to another parent: ".." and link counts follow */
	struct stat p0, p1;
	OK(stat(P("rdir"), &p0));
	OK(rename(P("rempty"), P("rdir/moved")));
	OK(stat(P("rdir"), &p1));
	EXPECT(p1.st_nlink == p0.st_nlink + 1, "moving a dir into rdir: rdir nlink %lu -> %lu, expected +1",
	       (unsigned long)p0.st_nlink, (unsigned long)p1.st_nlink);
	OK(stat(P("rdir/moved/.."), &st));
	EXPECT(st.st_ino == p1.st_ino, "'..' of the moved dir is not its new parent");
	/* many renames keep the directory consistent */
	for (int i = 0; i < 200; i++) {
		char a[32], b[32];
		snprintf(a, sizeof(a), "rdir/chain%d", i);
		snprintf(b, sizeof(b), "rdir/chain%d", i + 1);
		if (i == 0 && make_file(P(a), "chain", 5, 0644) < 0)
			FAIL("make chain0");
		OK(rename(P(a), P(b)));
	}
	OK(read_small(P("rdir/chain200"), got, sizeof(got)));
	EXPECT(!strcmp(got, "chain"), "chain200 holds '%s'", got);
	ERR(stat(P("rdir/chain199"), &st), ENOENT);
	/* clean up */
	OK(unlink(P("rdir/chain200")));
	OK(rmdir(P("rdir/moved/full")));
	OK(rmdir(P("rdir/moved")));
	OK(rmdir(P("rdir/sub")));
	OK(unlink(P("rdir/inner")));
	OK(rmdir(P("rdir")));
	OK(unlink(P("rb")));
	OK(unlink(P("rd")));
	return 0;
}

static int t_mkdir_rmdir(void)
{
	struct stat st, pst0, pst;
	OK(stat(g_dir, &pst0));
	OK(mkdir(P("d"), 0750));
	OK(stat(P("d"), &st));
	EXPECT(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0750, "mkdir mode 0%o", st.st_mode);
	EXPECT(st.st_nlink == 2, "new dir nlink %lu, expected 2", (unsigned long)st.st_nlink);
	OK(stat(g_dir, &pst));
	EXPECT(pst.st_nlink == pst0.st_nlink + 1, "parent nlink %lu -> %lu after mkdir", (unsigned long)pst0.st_nlink,
	       (unsigned long)pst.st_nlink);
	ERR(mkdir(P("d"), 0755), EEXIST);
	OK(mkdir(P("d/e"), 0755));
	OK(stat(P("d"), &st));
	EXPECT(st.st_nlink == 3, "dir with one subdir: nlink %lu, expected 3", (unsigned long)st.st_nlink);
	if (make_file(P("d/e/f"), "x", 1, 0644) < 0)
		FAIL("make d/e/f");
	ERR(rmdir(P("d")), ENOTEMPTY);
	ERR(rmdir(P("d/e")), ENOTEMPTY);
	ERR(rmdir(P("d/e/f")), ENOTDIR);
	ERR(unlink(P("d/e")), EISDIR);
	ERR(mkdir(P("d/e/f/g"), 0755), ENOTDIR);
	ERR(mkdir(P("nope/x"), 0755), ENOENT);
	OK(unlink(P("d/e/f")));
	OK(rmdir(P("d/e")));
	ERR(stat(P("d/e"), &st), ENOENT);
	OK(stat(P("d"), &st));
	EXPECT(st.st_nlink == 2, "after rmdir of the subdir: nlink %lu, expected 2", (unsigned long)st.st_nlink);
	/* a removed directory that is still the cwd of someone: no creates */
	int dfd = open(P("d"), O_RDONLY | O_DIRECTORY);
	EXPECT(dfd >= 0, "open dir");
	OK(rmdir(P("d")));
	ERR(openat(dfd, "child", O_CREAT | O_WRONLY, 0644), ENOENT);
	close(dfd);
	OK(stat(g_dir, &pst));
	EXPECT(pst.st_nlink == pst0.st_nlink, "parent nlink %lu after rmdir, expected %lu", (unsigned long)pst.st_nlink,
	       (unsigned long)pst0.st_nlink);
	char longname[300];
	memset(longname, 'n', 256);
	longname[256] = '\0';
	ERR(mkdir(P(longname), 0755), ENAMETOOLONG);
	return 0;
}

/* Names seen by one pass of readdir over dir: fills seen[idx] counts by a
 * parsed name "<prefix><number>"; returns entries, -1 on error. */
struct listing {
	int *f, *g;       /* counts for f%04d and g%04d */
	int dot, dotdot, other;
};

static void count_name(struct listing *l, const char *name, int n)
{
	int k;
	if (!strcmp(name, "."))
		l->dot++;
	else if (!strcmp(name, ".."))
		l->dotdot++;
	else if (sscanf(name, "f%d", &k) == 1 && k >= 0 && k < n)
		l->f[k]++;
	else if (sscanf(name, "g%d", &k) == 1 && k >= 0 && k < n)
		l->g[k]++;
	else
		l->other++;
}

static int t_readdir(void)
{
	enum { N = 2000 };
	char name[NAME_MAX + 16];
	OK(mkdir(P("many"), 0755));
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "many/f%04d", i);
		int fd = open(P(name), O_CREAT | O_WRONLY | O_EXCL, 0644);
		EXPECT(fd >= 0, "create %s: %s", name, strerrorname_np(errno));
		close(fd);
	}
	struct listing l = { xcalloc(N, sizeof(int)), xcalloc(N, sizeof(int)), 0, 0, 0 };
	DIR *d = opendir(P("many"));
	EXPECT(d, "opendir: %s", strerrorname_np(errno));
	struct dirent *e;
	struct stat st;
	while ((e = readdir(d))) {
		count_name(&l, e->d_name, N);
		if (e->d_name[0] == 'f') {
			snprintf(name, sizeof(name), "many/%s", e->d_name);
			OK(lstat(P(name), &st));
			EXPECT(st.st_ino == e->d_ino, "%s: d_ino %llu != st_ino %llu", e->d_name,
			       (unsigned long long)e->d_ino, (unsigned long long)st.st_ino);
			EXPECT(e->d_type == DT_REG || e->d_type == DT_UNKNOWN, "%s: d_type %d", e->d_name, e->d_type);
		}
	}
	closedir(d);
	EXPECT(l.dot == 1 && l.dotdot == 1 && l.other == 0, "listing: %d '.', %d '..', %d unexpected names", l.dot,
	       l.dotdot, l.other);
	for (int i = 0; i < N; i++)
		EXPECT(l.f[i] == 1, "f%04d listed %d times in a listing of %d files", i, l.f[i], N);

	/* Stability: while a listing is under way, add N/4 new names and
	 * remove N/4 of the names not seen yet.  Unchanged entries must all be
	 * seen, and no entry twice. */
	memset(l.f, 0, N * sizeof(int));
	l.dot = l.dotdot = l.other = 0;
	d = opendir(P("many"));
	EXPECT(d, "opendir: %s", strerrorname_np(errno));
	bool *removed = xcalloc(N, sizeof(bool));
	int seen = 0;
	while ((e = readdir(d))) {
		count_name(&l, e->d_name, N);
		if (++seen == N / 4) {
			for (int i = 0; i < N / 4; i++) {
				snprintf(name, sizeof(name), "many/g%04d", i);
				int fd = open(P(name), O_CREAT | O_WRONLY | O_EXCL, 0644);
				EXPECT(fd >= 0, "create %s during readdir: %s", name, strerrorname_np(errno));
				close(fd);
			}
			int gone = 0;
			for (int i = N - 1; i >= 0 && gone < N / 4; i -= 3) {
				if (l.f[i])
					continue;
				snprintf(name, sizeof(name), "many/f%04d", i);
				OK(unlink(P(name)));
				removed[i] = true;
				gone++;
			}
			/* a renamed unchanged entry is a change too: leave them */
		}
	}
	closedir(d);
	EXPECT(l.dot == 1 && l.dotdot == 1 && l.other == 0, "listing during changes: %d '.', %d '..', %d other", l.dot,
	       l.dotdot, l.other);
	for (int i = 0; i < N; i++) {
		EXPECT(l.f[i] <= 1, "f%04d seen %d times during concurrent changes", i, l.f[i]);
		EXPECT(removed[i] || l.f[i] == 1, "unchanged entry f%04d not seen during concurrent changes", i);
	}
	for (int i = 0; i < N / 4; i++)
		EXPECT(l.g[i] <= 1, "new entry g%04d seen %d times", i, l.g[i]);
	/* seekdir/telldir: resume at a remembered position */
	d = opendir(P("many"));
	long pos = -1;
	char want[NAME_MAX + 1] = "";
	for (int i = 0; (e = readdir(d)); i++) {
		if (i == 700)
			pos = telldir(d);
		if (i == 701) {
			snprintf(want, sizeof(want), "%s", e->d_name);
			break;
		}
	}
	EXPECT(pos >= 0 && want[0], "telldir in a long listing");
	rewinddir(d);
	seekdir(d, pos);
	e = readdir(d);
	EXPECT(e && !strcmp(e->d_name, want), "seekdir(telldir) resumed at '%s', expected '%s'", e ? e->d_name : "(end)",
	       want);
	closedir(d);
	/* clean up; the directory then lists only . and .. */
	d = opendir(P("many"));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(name, sizeof(name), "many/%s", e->d_name);
		OK(unlink(P(name)));
	}
	closedir(d);
	OK(rmdir(P("many")));
	xfree(l.f);
	xfree(l.g);
	xfree(removed);
	return 0;
}

static int t_hardlink(void)
{
	if (make_file(P("h1"), "shared-content", 14, 0644) < 0)
		FAIL("make h1");
	OK(link(P("h1"), P("h2")));
	ERR(link(P("h1"), P("h2")), EEXIST);
	OK(mkdir(P("hd"), 0755));
	ERR(link(P("hd"), P("hd2")), EPERM);
	OK(link(P("h1"), P("hd/h3")));
	struct stat a, b, c;
	OK(stat(P("h1"), &a));
	OK(stat(P("h2"), &b));
	OK(stat(P("hd/h3"), &c));
	EXPECT(a.st_ino == b.st_ino && a.st_ino == c.st_ino, "hard links have different st_ino");
	EXPECT(a.st_nlink == 3 && b.st_nlink == 3, "nlink %lu/%lu, expected 3", (unsigned long)a.st_nlink,
	       (unsigned long)b.st_nlink);
	int fd = open(P("h2"), O_WRONLY);
	EXPECT(pwrite(fd, "SHARED", 6, 0) == 6, "write via h2");
	close(fd);
	char got[64];
	OK(read_small(P("hd/h3"), got, sizeof(got)));
	EXPECT(!strcmp(got, "SHARED-content"), "h3 reads '%s' after a write via h2", got);
	OK(unlink(P("h1")));
	OK(stat(P("h2"), &b));
	EXPECT(b.st_nlink == 2, "nlink after unlinking one name: %lu, expected 2", (unsigned long)b.st_nlink);
	OK(unlink(P("hd/h3")));
	OK(stat(P("h2"), &b));
	EXPECT(b.st_nlink == 1, "nlink after unlinking two names: %lu", (unsigned long)b.st_nlink);
	OK(read_small(P("h2"), got, sizeof(got)));
	EXPECT(!strcmp(got, "SHARED-content"), "h2 reads '%s' after unlinking the others", got);
	OK(unlink(P("h2")));
	OK(rmdir(P("hd")));
	return 0;
}

static int t_symlink(void)
{
	const char *target = "some/relative/../target-file";
	OK(symlink(target, P("sl")));
	char buf[PATH_MAX];
	ssize_t n = readlink(P("sl"), buf, sizeof(buf));
	EXPECT(n == (ssize_t)strlen(target) && !memcmp(buf, target, (size_t)n), "readlink: '%.*s'", (int)(n > 0 ? n : 0),
	       buf);
	struct stat st;
	OK(lstat(P("sl"), &st));
	EXPECT(S_ISLNK(st.st_mode), "lstat: not a symlink (mode 0%o)", st.st_mode);
	EXPECT(st.st_size == (off_t)strlen(target), "lstat size %lld, expected %zu", (long long)st.st_size,
	       strlen(target));
	ERR(stat(P("sl"), &st), ENOENT); /* dangling */
	ERR(symlink("x", P("sl")), EEXIST);
	if (make_file(P("sl-target"), "via-link", 8, 0644) < 0)
		FAIL("make target");
	OK(symlink("sl-target", P("sl2")));
	char got[64];
	OK(read_small(P("sl2"), got, sizeof(got)));
	EXPECT(!strcmp(got, "via-link"), "read through symlink: '%s'", got);
	OK(stat(P("sl2"), &st));
	EXPECT(S_ISREG(st.st_mode) && st.st_size == 8, "stat through symlink");
	ERR(readlink(P("sl-target"), buf, sizeof(buf)), EINVAL);
	/* a symlink to a directory, and a loop */
	OK(symlink(".", P("selfloop-dir")));
	OK(stat(P("selfloop-dir/sl-target"), &st));
	OK(symlink("loop-b", P("loop-a")));
	OK(symlink("loop-a", P("loop-b")));
	ERR(open(P("loop-a"), O_RDONLY), ELOOP);
	/* a long target */
	char longt[4000];
	memset(longt, 'x', sizeof(longt) - 1);
	longt[sizeof(longt) - 1] = '\0';
	OK(symlink(longt, P("sl-long")));
	n = readlink(P("sl-long"), buf, sizeof(buf));
	EXPECT(n == (ssize_t)strlen(longt), "readlink of a 3999-byte target returned %zd", n);
	const char *names[] = { "sl", "sl2", "sl-target", "selfloop-dir", "loop-a", "loop-b", "sl-long" };
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		OK(unlink(P(names[k])));
	return 0;
}

static int t_times_modes(void)
{
	if (make_file(P("tm"), "abc", 3, 0644) < 0)
		FAIL("make tm");
	/* utimensat sets exact times */
	struct timespec ts[2] = { { 1000000000, 123456789 }, { 1200000000, 987654321 } };
	OK(utimensat(AT_FDCWD, P("tm"), ts, 0));
	struct stat st;
	OK(stat(P("tm"), &st));
	EXPECT(ts_eq(st.st_atim, ts[0]), "atime %lld.%09ld, expected 1000000000.123456789", (long long)st.st_atim.tv_sec,
	       st.st_atim.tv_nsec);
	EXPECT(ts_eq(st.st_mtim, ts[1]), "mtime %lld.%09ld, expected 1200000000.987654321", (long long)st.st_mtim.tv_sec,
	       st.st_mtim.tv_nsec);
	struct timespec c0 = st.st_ctim;
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	EXPECT(ts_diff(wall, c0) < 5 && ts_diff(wall, c0) > -5, "ctime after utimensat is not now: %lld",
	       (long long)c0.tv_sec);
	/* UTIME_OMIT leaves one alone, UTIME_NOW sets now */
	struct timespec ts2[2] = { { 0, UTIME_OMIT }, { 0, UTIME_NOW } };
	OK(utimensat(AT_FDCWD, P("tm"), ts2, 0));
	OK(stat(P("tm"), &st));
	EXPECT(ts_eq(st.st_atim, ts[0]), "UTIME_OMIT changed atime");
	EXPECT(ts_diff(wall, st.st_mtim) < 5 && ts_diff(st.st_mtim, wall) < 5, "UTIME_NOW: mtime %lld, now %lld",
	       (long long)st.st_mtim.tv_sec, (long long)wall.tv_sec);
	OK(utimensat(AT_FDCWD, P("tm"), ts, 0));
	OK(stat(P("tm"), &st));
	c0 = st.st_ctim;

	/* chmod changes ctime only */
	wait_clock_past(c0);
	OK(chmod(P("tm"), 0600));
	OK(stat(P("tm"), &st));
	EXPECT((st.st_mode & 07777) == 0600, "chmod: mode 0%o", st.st_mode & 07777);
	EXPECT(ts_eq(st.st_mtim, ts[1]), "chmod changed mtime to %lld.%09ld", (long long)st.st_mtim.tv_sec,
	       st.st_mtim.tv_nsec);
	EXPECT(ts_eq(st.st_atim, ts[0]), "chmod changed atime");
	EXPECT(ts_diff(st.st_ctim, c0) > 0, "chmod did not advance ctime (%lld.%09ld -> %lld.%09ld)",
	       (long long)c0.tv_sec, c0.tv_nsec, (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	c0 = st.st_ctim;

	/* chown (root only: a plain user may only chgrp to own groups) */
	if (geteuid() == 0) {
		wait_clock_past(c0);
		OK(chown(P("tm"), 65534, 65534));
		OK(stat(P("tm"), &st));
		EXPECT(st.st_uid == 65534 && st.st_gid == 65534, "chown: %u:%u", st.st_uid, st.st_gid);
		EXPECT(ts_eq(st.st_mtim, ts[1]), "chown changed mtime");
		EXPECT(ts_diff(st.st_ctim, c0) > 0, "chown did not advance ctime");
		OK(chown(P("tm"), 0, 0));
		OK(stat(P("tm"), &st));
		c0 = st.st_ctim;
	} else {
		OK(chown(P("tm"), (uid_t)-1, getegid()));
	}

	/* write changes mtime and ctime */
	wait_clock_past(c0);
	struct timespec before;
	clock_gettime(CLOCK_REALTIME_COARSE, &before);
	int fd = open(P("tm"), O_WRONLY);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	EXPECT(write(fd, "xyz", 3) == 3, "write");
	OK(fsync(fd));
	OK(fstat(fd, &st));
	close(fd);
	EXPECT(ts_diff(st.st_mtim, before) > -0.05, "write did not update mtime: %lld.%09ld (before the write: %lld.%09ld)",
	       (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)before.tv_sec, before.tv_nsec);
	EXPECT(ts_diff(st.st_ctim, c0) > 0, "write did not advance ctime: %lld.%09ld -> %lld.%09ld", (long long)c0.tv_sec,
	       c0.tv_nsec, (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	/* also seen after the attribute cache expires (the daemon's view) */
	struct stat st2;
	OK(stat(P("tm"), &st2));
	EXPECT(ts_diff(st2.st_mtim, before) > -0.05, "stat after write: mtime %lld", (long long)st2.st_mtim.tv_sec);
	/* truncate changes mtime+ctime too */
	OK(utimensat(AT_FDCWD, P("tm"), ts, 0));
	OK(stat(P("tm"), &st));
	c0 = st.st_ctim;
	wait_clock_past(c0);
	OK(truncate(P("tm"), 1));
	OK(stat(P("tm"), &st));
	EXPECT(!ts_eq(st.st_mtim, ts[1]), "truncate did not change mtime");
	EXPECT(ts_diff(st.st_ctim, c0) > 0, "truncate did not advance ctime");
	/* the mode bits of a directory and of special bits */
	OK(chmod(P("tm"), 04755));
	OK(stat(P("tm"), &st));
	EXPECT((st.st_mode & 07777) == 04755, "chmod 4755: mode 0%o", st.st_mode & 07777);
	OK(unlink(P("tm")));
	/* creating and removing a name changes the directory's mtime+ctime */
	OK(mkdir(P("tdir"), 0755));
	OK(utimensat(AT_FDCWD, P("tdir"), ts, 0));
	OK(stat(P("tdir"), &st));
	c0 = st.st_ctim;
	wait_clock_past(c0);
	if (make_file(P("tdir/new"), "n", 1, 0644) < 0)
		FAIL("create in tdir");
	OK(stat(P("tdir"), &st));
	EXPECT(!ts_eq(st.st_mtim, ts[1]) && ts_diff(st.st_ctim, c0) > 0,
	       "create did not update the directory's mtime/ctime (mtime %lld)", (long long)st.st_mtim.tv_sec);
	OK(utimensat(AT_FDCWD, P("tdir"), ts, 0));
	OK(unlink(P("tdir/new")));
	OK(stat(P("tdir"), &st));
	EXPECT(!ts_eq(st.st_mtim, ts[1]), "unlink did not update the directory's mtime");
	OK(rmdir(P("tdir")));
	/* mknod of a device node (root only): the numbers are kept */
	if (geteuid() == 0) {
		OK(mknod(P("cdev"), S_IFCHR | 0600, makedev(1, 3)));
		OK(lstat(P("cdev"), &st));
		EXPECT(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3), "mknod: mode 0%o rdev %u:%u", st.st_mode,
		       major(st.st_rdev), minor(st.st_rdev));
		OK(unlink(P("cdev")));
	}
	/* mknod of a FIFO */
	OK(mkfifo(P("fifo"), 0640));
	OK(lstat(P("fifo"), &st));
	EXPECT(S_ISFIFO(st.st_mode) && (st.st_mode & 0777) == 0640, "mkfifo: mode 0%o", st.st_mode);
	OK(unlink(P("fifo")));
	return 0;
}

/* Runs in a child as uid/gid 65534; returns 0 when every access decision is
 * right, else the number of wrong ones (messages on stdout). */
/* Where dmarfs once differed from tmpfs (pjdfstest-style cases). */
static int t_posix_edges(void)
{
	/* A component longer than NAME_MAX: ENAMETOOLONG, also on the way to
	 * something that exists (the lookup of the long name, not ENOENT). */
	char longname[NAME_MAX + 2];
	memset(longname, 'n', NAME_MAX + 1);
	longname[NAME_MAX + 1] = 0;
	char through[PATH_MAX];
	snprintf(through, sizeof(through), "%s/f", longname);
	if (make_file(P("nf"), "x", 1, 0644) < 0)
		FAIL("make nf: %s", strerrorname_np(errno));
	OK(mkdir(P("nd"), 0755));
	const char *paths[] = { longname, through };
	for (int k = 0; k < 2; k++) {
		const char *x = P(paths[k]);
		struct stat st;
		ERR(stat(x, &st), ENAMETOOLONG);
		ERR(chmod(x, 0644), ENAMETOOLONG);
		ERR(chown(x, 0, 0), ENAMETOOLONG);
		ERR(lchown(x, 0, 0), ENAMETOOLONG);
		ERR(truncate(x, 0), ENAMETOOLONG);
		ERR(unlink(x), ENAMETOOLONG);
		ERR(rmdir(x), ENAMETOOLONG);
		ERR(link(x, P("nl")), ENAMETOOLONG);
		ERR(rename(x, P("nl")), ENAMETOOLONG);
		ERR(open(x, O_RDONLY), ENAMETOOLONG);
		ERR(open(x, O_CREAT | O_WRONLY, 0644), ENAMETOOLONG);
		ERR(mkdir(x, 0755), ENAMETOOLONG);
		ERR(rename(P("nf"), x), ENAMETOOLONG);
		ERR(link(P("nf"), x), ENAMETOOLONG);
		ERR(symlink("nf", x), ENAMETOOLONG);
	}
	/* NAME_MAX itself is a valid name. */
	longname[NAME_MAX] = 0;
	OK(rename(P("nf"), P(longname)));
	OK(unlink(P(longname)));
	OK(rmdir(P("nd")));

	/* rename over a file that has other hard links: its ctime changes,
	 * as seen through another link (its attributes are cached there). */
	if (make_file(P("rx"), "x", 1, 0644) < 0 || make_file(P("ry"), "y", 1, 0644) < 0)
		FAIL("make files: %s", strerrorname_np(errno));
	OK(link(P("ry"), P("ry2")));
	struct stat before, after;
	OK(stat(P("ry2"), &before));
	usleep(30000);
	OK(rename(P("rx"), P("ry")));
	OK(stat(P("ry2"), &after));
	EXPECT(after.st_nlink == 1, "the replaced file has nlink %lu, expected 1", (unsigned long)after.st_nlink);
	EXPECT(after.st_ctim.tv_sec > before.st_ctim.tv_sec ||
		       (after.st_ctim.tv_sec == before.st_ctim.tv_sec && after.st_ctim.tv_nsec > before.st_ctim.tv_nsec),
	       "rename over a file with another link left its ctime at %lld.%09ld", (long long)after.st_ctim.tv_sec,
	       after.st_ctim.tv_nsec);
	/* and as the filesystem keeps it, once the kernel's cached
	 * attributes (1 s on dmarfs) have expired */
	usleep(1100000);
	struct stat later;
	OK(stat(P("ry2"), &later));
	EXPECT(later.st_ctim.tv_sec > before.st_ctim.tv_sec ||
		       (later.st_ctim.tv_sec == before.st_ctim.tv_sec && later.st_ctim.tv_nsec > before.st_ctim.tv_nsec),
	       "1 s after a rename over it, a file with another link has its old ctime %lld.%09ld",
	       (long long)later.st_ctim.tv_sec, later.st_ctim.tv_nsec);
	OK(unlink(P("ry")));
	OK(unlink(P("ry2")));

	/* RENAME_WHITEOUT (overlayfs's upper directory): the source name
	 * becomes a whiteout, a character device 0:0. */
	if (geteuid() != 0) {
		note("RENAME_WHITEOUT needs CAP_MKNOD: not tried");
		return 0;
	}
	if (make_file(P("wa"), "w", 1, 0644) < 0)
		FAIL("make wa: %s", strerrorname_np(errno));
	struct stat wa, wo;
	OK(stat(P("wa"), &wa));
	OK(renameat2(AT_FDCWD, P("wa"), AT_FDCWD, P("wb"), RENAME_WHITEOUT));
	OK(lstat(P("wa"), &wo));
	EXPECT(S_ISCHR(wo.st_mode) && wo.st_rdev == makedev(0, 0), "the whiteout is mode %o rdev %lx",
	       (unsigned)wo.st_mode, (unsigned long)wo.st_rdev);
	OK(stat(P("wb"), &wo));
	EXPECT(wo.st_ino == wa.st_ino, "wb is not the renamed file");
	/* over an existing target too */
	if (make_file(P("wc"), "c", 1, 0644) < 0)
		FAIL("make wc: %s", strerrorname_np(errno));
	OK(renameat2(AT_FDCWD, P("wb"), AT_FDCWD, P("wc"), RENAME_WHITEOUT));
	OK(lstat(P("wb"), &wo));
	EXPECT(S_ISCHR(wo.st_mode), "no whiteout over an existing target");
	ERR(renameat2(AT_FDCWD, P("wc"), AT_FDCWD, P("wb"), RENAME_WHITEOUT | RENAME_EXCHANGE), EINVAL);
	OK(unlink(P("wa")));
	OK(unlink(P("wb")));
	OK(unlink(P("wc")));
	return 0;
}

static int perm_child(void)
{
	int bad = 0;
	/* The directory above the mount is not ours: if 65534 cannot get
	 * through it, the check cannot run (the test's temp dir is 0700?). */
	char above[PATH_MAX];
	snprintf(above, sizeof(above), "%s/..", g_mnt);
	struct stat ast;
	if (stat(above, &ast) < 0 && errno == EACCES)
		return 101;
#define CHILD_EXPECT(cond, ...)                                    \
	do {                                                       \
		if (!(cond)) {                                     \
			fail_msg(__LINE__, __VA_ARGS__);           \
			bad++;                                     \
		}                                                  \
	} while (0)
	errno = 0;
	int fd = open(P("secret"), O_RDONLY);
	CHILD_EXPECT(fd < 0 && errno == EACCES, "uid 65534 opened a root 0600 file: fd %d errno %s", fd,
		     strerrorname_np(errno));
	if (fd >= 0)
		close(fd);
	errno = 0;
	fd = open(P("public"), O_RDONLY);
	CHILD_EXPECT(fd >= 0, "uid 65534 cannot read a 0644 file: errno %s (is the mount allow_other?)",
		     strerrorname_np(errno));
	if (fd >= 0)
		close(fd);
	errno = 0;
	fd = open(P("public"), O_WRONLY);
	CHILD_EXPECT(fd < 0 && errno == EACCES, "uid 65534 opened a root 0644 file for writing: errno %s",
		     strerrorname_np(errno));
	if (fd >= 0)
		close(fd);
	errno = 0;
	CHILD_EXPECT(truncate(P("public"), 0) < 0 && errno == EACCES, "truncate of a root 0644 file: errno %s",
		     strerrorname_np(errno));
	errno = 0;
	fd = open(P("closed/new"), O_CREAT | O_WRONLY, 0644);
	CHILD_EXPECT(fd < 0 && errno == EACCES, "create in a root 0755 dir: errno %s", strerrorname_np(errno));
	if (fd >= 0)
		close(fd);
	struct stat st;
	errno = 0;
	CHILD_EXPECT(stat(P("private/x"), &st) < 0 && errno == EACCES, "lookup in a root 0700 dir: errno %s",
		     strerrorname_np(errno));
	errno = 0;
	CHILD_EXPECT(chmod(P("public"), 0666) < 0 && errno == EPERM, "chmod of another's file: errno %s",
		     strerrorname_np(errno));
	errno = 0;
	CHILD_EXPECT(chown(P("mine"), 0, 0) < 0 && errno == EPERM, "chown to root: errno %s", strerrorname_np(errno));
	errno = 0;
	CHILD_EXPECT(setxattr(P("public"), "user.x", "1", 1, 0) < 0 && (errno == EACCES || errno == EPERM),
		     "setxattr on another's file: errno %s", strerrorname_np(errno));
	/* sticky world-writable dir: own files yes, others' no */
	fd = open(P("sticky/own"), O_CREAT | O_WRONLY, 0644);
	CHILD_EXPECT(fd >= 0, "create in a 1777 dir: errno %s", strerrorname_np(errno));
	if (fd >= 0) {
		CHILD_EXPECT(write(fd, "x", 1) == 1, "write own file");
		close(fd);
		CHILD_EXPECT(fstatat(AT_FDCWD, P("sticky/own"), &st, 0) == 0 && st.st_uid == 65534 && st.st_gid == 65534,
			     "new file owner %u:%u, expected 65534:65534", st.st_uid, st.st_gid);
		CHILD_EXPECT(unlink(P("sticky/own")) == 0, "unlink own file in sticky dir: %s", strerrorname_np(errno));
	}
	errno = 0;
	CHILD_EXPECT(unlink(P("sticky/roots")) < 0 && errno == EPERM, "unlink root's file in a sticky dir: errno %s",
		     strerrorname_np(errno));
	errno = 0;
	CHILD_EXPECT(utimensat(AT_FDCWD, P("public"), (struct timespec[2]){ { 1, 0 }, { 1, 0 } }, 0) < 0 && errno == EPERM,
		     "utimensat with explicit times on another's file: errno %s", strerrorname_np(errno));
	return bad;
#undef CHILD_EXPECT
}

static int t_permissions(void)
{
	if (geteuid() != 0) {
		g_skipped++;
		note("skipped: needs root to switch to uid 65534");
		return 1;
	}
	if (make_file(P("secret"), "s", 1, 0600) < 0 || make_file(P("public"), "p", 1, 0644) < 0 ||
	    make_file(P("mine"), "m", 1, 0644) < 0)
		FAIL("make files: %s", strerrorname_np(errno));
	OK(chown(P("mine"), 65534, 65534));
	OK(mkdir(P("closed"), 0755));
	OK(mkdir(P("private"), 0700));
	OK(mkdir(P("sticky"), 01777));
	OK(chmod(P("sticky"), 01777));
	if (make_file(P("private/x"), "x", 1, 0644) < 0 || make_file(P("sticky/roots"), "r", 1, 0666) < 0)
		FAIL("make files");
	/* the dir chain down to g_dir must be searchable for 65534 */
	OK(chmod(g_dir, 0755));
	fflush(stdout);
	pid_t pid = fork();
	EXPECT(pid >= 0, "fork");
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0) {
			perror("drop privileges");
			_exit(100);
		}
		int bad = perm_child();
		fflush(stdout);
		_exit(bad == 101 ? 101 : bad > 99 ? 99 : bad);
	}
	int status;
	EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
	OK(unlink(P("secret")));
	OK(unlink(P("public")));
	OK(unlink(P("mine")));
	OK(unlink(P("private/x")));
	OK(unlink(P("sticky/roots")));
	OK(rmdir(P("closed")));
	OK(rmdir(P("private")));
	OK(rmdir(P("sticky")));
	EXPECT(WIFEXITED(status), "permission child died (signal %d)", WTERMSIG(status));
	EXPECT(WEXITSTATUS(status) != 100, "could not drop privileges in the child");
	if (WEXITSTATUS(status) == 101) {
		g_skipped++;
		note("skipped: uid 65534 cannot reach %s (a directory above it is closed to others)", g_mnt);
		return 1;
	}
	EXPECT(WEXITSTATUS(status) == 0, "%d wrong access decisions as uid 65534 (see above)", WEXITSTATUS(status));
	return 0;
}

/* The mode bits of path, or -1. */
static int mode_of(const char *path)
{
	struct stat st;
	return stat(path, &st) < 0 ? -1 : (int)(st.st_mode & 07777);
}

/* The privileges a write, a truncate, an O_TRUNC open and a chown take
 * away (the filesystem's to do: the mount handles FUSE's killpriv): set-
 * user-ID, set-group-ID where group execute is on, security.capability;
 * a root writer keeps the set-ID bits. */
static int t_killpriv(void)
{
	if (geteuid() != 0) {
		g_skipped++;
		note("skipped: needs root to switch to uid 65534 and to set security.capability");
		return 1;
	}
	static const struct {
		const char *name;
		mode_t mode, after;
		int how; /* 0 write, 1 truncate, 2 O_TRUNC open */
	} cases[] = {
		{ "kp-sx", 06775, 0775, 0 }, { "kp-sg", 02664, 02664, 0 }, { "kp-st", 04644, 0644, 1 },
		{ "kp-ot", 04666, 0666, 2 },
	};
	const size_t n = sizeof(cases) / sizeof(cases[0]);
	OK(chmod(g_dir, 0755));
	for (size_t k = 0; k < n; k++) {
		if (make_file(P(cases[k].name), "abc", 3, 0600) < 0)
			FAIL("make %s: %s", cases[k].name, strerrorname_np(errno));
		OK(chown(P(cases[k].name), 65534, 65534));
		OK(chmod(P(cases[k].name), cases[k].mode)); /* after the chown, which clears them */
		EXPECT(mode_of(P(cases[k].name)) == (int)cases[k].mode, "%s: mode 0%o after chmod", cases[k].name,
		       mode_of(P(cases[k].name)));
	}
	fflush(stdout);
	pid_t pid = fork();
	EXPECT(pid >= 0, "fork");
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(100);
		for (size_t k = 0; k < n; k++) {
			const char *f = P(cases[k].name);
			int fd = open(f, cases[k].how == 2 ? O_WRONLY | O_TRUNC : O_WRONLY);
			if (fd < 0)
				_exit(101);
			if ((cases[k].how == 0 && pwrite(fd, "x", 1, 1) != 1) || (cases[k].how == 1 && ftruncate(fd, 1) < 0))
				_exit(102);
			close(fd);
		}
		_exit(0);
	}
	int status;
	EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "killpriv child");
	EXPECT(WEXITSTATUS(status) != 101, "uid 65534 could not open its own file (or %s is closed to it)", g_mnt);
	EXPECT(WEXITSTATUS(status) == 0, "killpriv child: exit %d", WEXITSTATUS(status));
	for (size_t k = 0; k < n; k++)
		EXPECT(mode_of(P(cases[k].name)) == (int)cases[k].after, "%s (0%o) after uid 65534's %s: mode 0%o, expected 0%o",
		       cases[k].name, (unsigned)cases[k].mode,
		       cases[k].how == 0 ? "write" : cases[k].how == 1 ? "truncate" : "O_TRUNC open",
		       mode_of(P(cases[k].name)), (unsigned)cases[k].after);
	/* root: a write keeps set-user-ID, a chown clears it */
	if (make_file(P("kp-root"), "abc", 3, 0755) < 0)
		FAIL("make kp-root");
	OK(chmod(P("kp-root"), 04755));
	int fd = open(P("kp-root"), O_WRONLY);
	EXPECT(fd >= 0 && pwrite(fd, "y", 1, 0) == 1, "root's write");
	close(fd);
	EXPECT(mode_of(P("kp-root")) == 04755, "root's write changed the mode to 0%o", mode_of(P("kp-root")));
	OK(chown(P("kp-root"), 1, 1));
	EXPECT(mode_of(P("kp-root")) == 0755, "chown left mode 0%o, expected 0755", mode_of(P("kp-root")));
	/* security.capability: gone after a write (v2: cap_effective, no caps) */
	static const uint8_t cap[20] = { 0x01, 0, 0, 0x02, 0x00, 0x04, 0, 0 }; /* revision 2, effective; CAP_NET_BIND... */
	if (setxattr(P("kp-root"), "security.capability", cap, sizeof(cap), 0) == 0) {
		EXPECT(getxattr(P("kp-root"), "security.capability", NULL, 0) > 0, "security.capability not set");
		fd = open(P("kp-root"), O_WRONLY);
		EXPECT(fd >= 0 && pwrite(fd, "z", 1, 0) == 1, "write");
		close(fd);
		EXPECT(getxattr(P("kp-root"), "security.capability", NULL, 0) < 0 && errno == ENODATA,
		       "security.capability still there after a write (%s)", strerrorname_np(errno));
	} else {
		note("security.capability could not be set (%s): not checked", strerrorname_np(errno));
	}
	for (size_t k = 0; k < n; k++)
		OK(unlink(P(cases[k].name)));
	OK(unlink(P("kp-root")));
	return 0;
}

static int t_fsync(void)
{
	const size_t len = 2 * MiB;
	uint8_t *buf = xmalloc(len);
	prng_fill(buf, len, 6);
	int fd = open(P("sync"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	OK(write_all(fd, buf, len, 0));
	OK(fdatasync(fd));
	OK(fsync(fd));
	/* a small rewrite, synced again */
	EXPECT(pwrite(fd, "rewrite", 7, 1000000) == 7, "pwrite");
	memcpy(buf + 1000000, "rewrite", 7);
	OK(fdatasync(fd));
	/* fsync of a read-only fd and of a directory */
	int ro = open(P("sync"), O_RDONLY);
	OK(fsync(ro));
	close(ro);
	int dfd = open(g_dir, O_RDONLY | O_DIRECTORY);
	OK(fsync(dfd));
	close(dfd);
	OK(close(fd));
	/* fsync records without encoding; the encode after the close is
	 * settled by reading the state of the closed file */
	char state[64];
	OK(wait_state(P("sync"), encoding() ? "encoded" : "raw", state, sizeof(state)));
	if (encoding())
		EXPECT(!strcmp(state, "encoded"), "after the close user.dmar.state is '%s', expected encoded", state);
	else
		EXPECT(!strcmp(state, "raw"), "encode=none: user.dmar.state is '%s', expected raw", state);
	long long chunks = get_num_xattr(P("sync"), "user.dmar.chunks");
	if (encoding())
		EXPECT(chunks >= 2, "a 2 MiB file encoded into %lld chunks", chunks);
	else
		EXPECT(chunks == 0, "encode=none: %lld chunks", chunks);
	if (same_content(P("sync"), buf, len) < 0)
		return -1;
	OK(unlink(P("sync")));
	xfree(buf);
	return 0;
}

static int t_locks(void)
{
	if (make_file(P("lock"), "0123456789", 10, 0644) < 0)
		FAIL("make file");
	int fd = open(P("lock"), O_RDWR);
	EXPECT(fd >= 0, "open");
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100 };
	OK(fcntl(fd, F_SETLK, &fl));
	OK(flock(fd, LOCK_EX));
	int go[2], done[2];
	OK(pipe(go));
	OK(pipe(done));
	pid_t parent = getpid();
	fflush(stdout);
	pid_t pid = fork();
	EXPECT(pid >= 0, "fork");
	if (pid == 0) {
		int bad = 0;
		int cfd = open(P("lock"), O_RDWR);
		struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 10 };
		if (cfd < 0 || fcntl(cfd, F_GETLK, &q) < 0) {
			fail_msg(__LINE__, "child F_GETLK: %s", strerrorname_np(errno));
			_exit(1);
		}
		if (q.l_type != F_WRLCK || q.l_pid != parent) {
			fail_msg(__LINE__, "F_GETLK: l_type %d l_pid %d, expected F_WRLCK held by %d", q.l_type, q.l_pid,
				 parent);
			bad++;
		}
		struct flock w = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 10 };
		errno = 0;
		if (fcntl(cfd, F_SETLK, &w) == 0 || (errno != EAGAIN && errno != EACCES)) {
			fail_msg(__LINE__, "F_SETLK on a locked range: errno %s, expected EAGAIN", strerrorname_np(errno));
			bad++;
		}
		struct flock r = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
		errno = 0;
		if (fcntl(cfd, F_SETLK, &r) == 0 || (errno != EAGAIN && errno != EACCES)) {
			fail_msg(__LINE__, "F_RDLCK under a write lock: errno %s, expected EAGAIN", strerrorname_np(errno));
			bad++;
		}
		struct flock free_ = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 200, .l_len = 100 };
		if (fcntl(cfd, F_SETLK, &free_) < 0) {
			fail_msg(__LINE__, "F_SETLK on a free range: %s", strerrorname_np(errno));
			bad++;
		}
		errno = 0;
		if (flock(cfd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
			fail_msg(__LINE__, "flock(LOCK_EX|LOCK_NB) on a locked file: errno %s, expected EWOULDBLOCK",
				 strerrorname_np(errno));
			bad++;
		}
		errno = 0;
		if (flock(cfd, LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
			fail_msg(__LINE__, "flock(LOCK_SH|LOCK_NB) under LOCK_EX: errno %s", strerrorname_np(errno));
			bad++;
		}
		/* tell the parent, wait for it to unlock, then take both */
		char c = 'x';
		if (write(done[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		w.l_type = F_WRLCK;
		if (fcntl(cfd, F_SETLK, &w) < 0) {
			fail_msg(__LINE__, "F_SETLK after the holder unlocked: %s", strerrorname_np(errno));
			bad++;
		}
		if (flock(cfd, LOCK_EX | LOCK_NB) < 0) {
			fail_msg(__LINE__, "flock after the holder unlocked: %s", strerrorname_np(errno));
			bad++;
		}
		fflush(stdout);
		_exit(bad);
	}
	char c;
	EXPECT(read(done[0], &c, 1) == 1, "child did not report (it exited early)");
	fl.l_type = F_UNLCK;
	OK(fcntl(fd, F_SETLK, &fl));
	OK(flock(fd, LOCK_UN));
	EXPECT(write(go[1], "g", 1) == 1, "signal child");
	int status;
	EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "lock child: %d failures (see above)",
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	/* OFD locks conflict between two opens in one process */
	int fd2 = open(P("lock"), O_RDWR);
	struct flock o = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
	OK(fcntl(fd, F_OFD_SETLK, &o));
	errno = 0;
	ERR(fcntl(fd2, F_OFD_SETLK, &o), EAGAIN);
	close(fd2);
	close(fd);
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
	OK(unlink(P("lock")));
	return 0;
}

static int t_mmap(void)
{
	const size_t len = 1 * MiB;
	uint8_t *buf = xmalloc(len), *got = xmalloc(len);
	prng_fill(buf, len, 7);
	int fd = open(P("mm"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	OK(ftruncate(fd, (off_t)len));
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	EXPECT(m != MAP_FAILED, "mmap(MAP_SHARED, PROT_WRITE): %s", strerrorname_np(errno));
	EXPECT(all_zero(m, len), "fresh mapping of a hole is not zero");
	memcpy(m, buf, len);
	OK(msync(m, len, MS_SYNC));
	int fd2 = open(P("mm"), O_RDONLY);
	EXPECT(read_all(fd2, got, len, 0) == (ssize_t)len, "read after msync");
	size_t d = first_diff(got, buf, len);
	EXPECT(d == len, "read() after mmap write + msync differs at %zu", d);
	/* write() is seen through the mapping */
	EXPECT(pwrite(fd, "through-write", 13, 4096 * 3 + 5) == 13, "pwrite");
	memcpy(buf + 4096 * 3 + 5, "through-write", 13);
	EXPECT(!memcmp(m + 4096 * 3 + 5, "through-write", 13), "mapping does not show a write() ('%.13s')",
	       m + 4096 * 3 + 5);
	/* a second mapping of the same file shares the pages */
	uint8_t *m2 = mmap(NULL, len, PROT_READ, MAP_SHARED, fd2, 0);
	EXPECT(m2 != MAP_FAILED, "second mmap: %s", strerrorname_np(errno));
	m[len - 1] ^= 0xff;
	buf[len - 1] ^= 0xff;
	EXPECT(m2[len - 1] == buf[len - 1], "second mapping does not see a store through the first");
	OK(msync(m, len, MS_SYNC));
	OK(munmap(m2, len));
	OK(munmap(m, len));
	close(fd2);
	OK(close(fd));
	/* the filesystem got every byte */
	if (same_content(P("mm"), buf, len) < 0)
		return -1;
	/* a mapping of encoded data reads right */
	if (encoding()) {
		char state[64];
		OK(wait_state(P("mm"), "encoded", state, sizeof(state)));
		EXPECT(!strcmp(state, "encoded"), "state after the close '%s'", state);
		fd = open(P("mm"), O_RDWR);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		EXPECT(m != MAP_FAILED, "mmap encoded: %s", strerrorname_np(errno));
		d = first_diff(m, buf, len);
		EXPECT(d == len, "mapping of the encoded file differs at %zu", d);
		m[12345] = 'Q';
		buf[12345] = 'Q';
		OK(munmap(m, len)); /* no msync: close/fsync must still write it */
		OK(fsync(fd));
		OK(close(fd));
		if (same_content(P("mm"), buf, len) < 0)
			return -1;
	}
	OK(unlink(P("mm")));
	xfree(buf);
	xfree(got);
	return 0;
}

/* A write-only open writes around the page cache (dmarfs opens it with
 * direct I/O): readers that have the old bytes cached, by read() or by a
 * shared mapping, must see the new ones at once, and so must a new open. */
static int t_wronly_coherent(void)
{
	const size_t len = 1 * MiB;
	uint8_t *buf = xmalloc(len), *got = xmalloc(len);
	prng_fill(buf, len, 21);
	if (make_file(P("wo"), buf, len, 0644) < 0)
		return -1;
	int r = open(P("wo"), O_RDONLY);
	EXPECT(r >= 0, "open: %s", strerrorname_np(errno));
	EXPECT(read_all(r, got, len, 0) == (ssize_t)len, "first read");
	uint8_t *m = mmap(NULL, len, PROT_READ, MAP_SHARED, r, 0);
	EXPECT(m != MAP_FAILED, "mmap: %s", strerrorname_np(errno));
	EXPECT(m[8192 + 7] == buf[8192 + 7], "mapping differs before the write");
	int w = open(P("wo"), O_WRONLY);
	EXPECT(w >= 0, "open O_WRONLY: %s", strerrorname_np(errno));
	EXPECT(pwrite(w, "write-only-bytes", 16, 8192) == 16, "pwrite: %s", strerrorname_np(errno));
	memcpy(buf + 8192, "write-only-bytes", 16);
	EXPECT(read_all(r, got, len, 0) == (ssize_t)len, "read after the write");
	size_t d = first_diff(got, buf, len);
	EXPECT(d == len, "a reader open before the O_WRONLY write reads old bytes (differs at %zu)", d);
	EXPECT(!memcmp(m + 8192, "write-only-bytes", 16), "the shared mapping shows old bytes ('%.16s')", m + 8192);
	/* appends grow the size every open sees */
	int a = open(P("wo"), O_WRONLY | O_APPEND);
	EXPECT(a >= 0, "open O_WRONLY|O_APPEND: %s", strerrorname_np(errno));
	EXPECT(write(a, "tail", 4) == 4, "append: %s", strerrorname_np(errno));
	struct stat st;
	OK(fstat(r, &st));
	EXPECT(st.st_size == (off_t)len + 4, "size after an append through O_WRONLY: %lld", (long long)st.st_size);
	char tail[4];
	EXPECT(pread(r, tail, 4, (off_t)len) == 4 && !memcmp(tail, "tail", 4), "the appended bytes do not read back");
	OK(close(a));
	OK(close(w));
	OK(munmap(m, len));
	OK(close(r));
	int r2 = open(P("wo"), O_RDONLY);
	EXPECT(r2 >= 0, "reopen: %s", strerrorname_np(errno));
	EXPECT(read_all(r2, got, len, 0) == (ssize_t)len, "read after reopen");
	d = first_diff(got, buf, len);
	EXPECT(d == len, "a new open reads old bytes (differs at %zu)", d);
	OK(close(r2));
	OK(unlink(P("wo")));
	xfree(buf);
	xfree(got);
	return 0;
}

static bool list_has(const char *list, ssize_t len, const char *name)
{
	for (ssize_t k = 0; k < len; k += (ssize_t)strlen(list + k) + 1)
		if (!strcmp(list + k, name))
			return true;
	return false;
}

static int t_xattr(void)
{
	const size_t flen = 123457;
	uint8_t *data = xmalloc(flen);
	prng_fill(data, flen, 8);
	if (make_file(P("xa"), data, flen, 0644) < 0)
		FAIL("make file");
	char buf[8192];
	OK(setxattr(P("xa"), "user.test", "value-1", 7, XATTR_CREATE));
	ERR(setxattr(P("xa"), "user.test", "value-2", 7, XATTR_CREATE), EEXIST);
	ERR(setxattr(P("xa"), "user.absent", "v", 1, XATTR_REPLACE), ENODATA);
	ssize_t n = getxattr(P("xa"), "user.test", buf, sizeof(buf));
	EXPECT(n == 7 && !memcmp(buf, "value-1", 7), "getxattr: %zd '%.*s'", n, (int)(n > 0 ? n : 0), buf);
	OK(setxattr(P("xa"), "user.test", "value-22", 8, XATTR_REPLACE));
	n = getxattr(P("xa"), "user.test", NULL, 0);
	EXPECT(n == 8, "getxattr size query: %zd, expected 8", n);
	ERR(getxattr(P("xa"), "user.test", buf, 3), ERANGE);
	n = getxattr(P("xa"), "user.test", buf, sizeof(buf));
	EXPECT(n == 8 && !memcmp(buf, "value-22", 8), "after XATTR_REPLACE: '%.*s'", (int)(n > 0 ? n : 0), buf);
	/* empty and binary values, and a larger one */
	OK(setxattr(P("xa"), "user.empty", "", 0, 0));
	n = getxattr(P("xa"), "user.empty", buf, sizeof(buf));
	EXPECT(n == 0, "empty value: getxattr returned %zd (%s)", n, strerrorname_np(errno));
	uint8_t big[4000];
	prng_fill(big, sizeof(big), 9);
	OK(setxattr(P("xa"), "user.big", big, sizeof(big), 0));
	n = getxattr(P("xa"), "user.big", buf, sizeof(buf));
	EXPECT(n == (ssize_t)sizeof(big) && !memcmp(buf, big, sizeof(big)), "4000-byte value round trip: %zd", n);
	/* list */
	n = listxattr(P("xa"), buf, sizeof(buf));
	EXPECT(n > 0, "listxattr: %s", strerrorname_np(errno));
	EXPECT(list_has(buf, n, "user.test") && list_has(buf, n, "user.empty") && list_has(buf, n, "user.big"),
	       "listxattr lacks a user.* name");
	const char *virt[] = { "user.dmar.logical", "user.dmar.stored", "user.dmar.chunks",
			       "user.dmar.raw",     "user.dmar.state",  "user.dmar.backing" };
	for (size_t k = 0; k < sizeof(virt) / sizeof(virt[0]); k++) {
		EXPECT(list_has(buf, n, virt[k]), "listxattr lacks %s", virt[k]);
		/* size query, then exactly that: a text value, the same twice */
		ssize_t m0 = getxattr(P("xa"), virt[k], NULL, 0);
		EXPECT(m0 > 0 && m0 < 4096, "getxattr %s size query: %zd %s", virt[k], m0, strerrorname_np(errno));
		char v[4096], v2[4096];
		ssize_t m = getxattr(P("xa"), virt[k], v, (size_t)m0);
		EXPECT(m == m0, "getxattr %s with a buffer of the size it gave (%zd): %zd %s", virt[k], m0, m,
		       m < 0 ? strerrorname_np(errno) : "");
		EXPECT(!memchr(v, '\0', (size_t)m), "%s: value of %zd bytes has a NUL at byte %td (truncated or garbage)",
		       virt[k], m, (char *)memchr(v, '\0', (size_t)m) - v);
		for (ssize_t q = 0; q < m; q++)
			EXPECT(v[q] >= 0x20 && v[q] < 0x7f, "%s: byte %zd of %zd is 0x%02x: not text", virt[k], q, m,
			       (unsigned char)v[q]);
		ssize_t m2 = getxattr(P("xa"), virt[k], v2, sizeof(v2));
		/* (the others may change under a background encode) */
		if (!strcmp(virt[k], "user.dmar.backing") || !strcmp(virt[k], "user.dmar.logical"))
			EXPECT(m2 == m && !memcmp(v, v2, (size_t)m), "%s differs between two reads", virt[k]);
		if (m0 > 1)
			ERR(getxattr(P("xa"), virt[k], v, (size_t)m0 - 1), ERANGE);
		ERR(setxattr(P("xa"), virt[k], "1", 1, 0), EPERM);
		ERR(removexattr(P("xa"), virt[k]), EPERM);
	}
	ssize_t need = listxattr(P("xa"), NULL, 0);
	EXPECT(need == n, "listxattr size query %zd, list %zd", need, n);
	ERR(listxattr(P("xa"), buf, 5), ERANGE);
	EXPECT(get_num_xattr(P("xa"), "user.dmar.logical") == (long long)flen, "user.dmar.logical = %lld, expected %zu",
	       get_num_xattr(P("xa"), "user.dmar.logical"), flen);
	ERR(setxattr(P("xa"), "user.dmar.new-name", "1", 1, 0), EPERM);
	ERR(getxattr(P("xa"), "user.dmar.nonexistent", buf, sizeof(buf)), ENODATA);
	char state[64];
	OK(get_state(P("xa"), state, sizeof(state)));
	EXPECT(!strcmp(state, "raw") || !strcmp(state, "encoded") || !strcmp(state, "partly-encoded"),
	       "user.dmar.state '%s' is not one of raw/encoded/partly-encoded", state);
	/* remove */
	OK(removexattr(P("xa"), "user.test"));
	ERR(getxattr(P("xa"), "user.test", buf, sizeof(buf)), ENODATA);
	ERR(removexattr(P("xa"), "user.test"), ENODATA);
	n = listxattr(P("xa"), buf, sizeof(buf));
	EXPECT(n > 0 && !list_has(buf, n, "user.test") && list_has(buf, n, "user.big"), "list after remove");
	/* xattrs on a directory and on an empty file */
	OK(mkdir(P("xdir"), 0755));
	OK(setxattr(P("xdir"), "user.d", "dir", 3, 0));
	n = getxattr(P("xdir"), "user.d", buf, sizeof(buf));
	EXPECT(n == 3 && !memcmp(buf, "dir", 3), "dir xattr");
	OK(rmdir(P("xdir")));
	if (make_file(P("xempty"), "", 0, 0644) < 0)
		FAIL("make empty");
	OK(get_state(P("xempty"), state, sizeof(state)));
	EXPECT(!strcmp(state, "empty"), "state of an empty file: '%s'", state);
	OK(unlink(P("xempty")));
	/* other namespaces are not ours */
	errno = 0;
	int r = setxattr(P("xa"), "trusted.x", "1", 1, 0);
	if (r == 0)
		note("trusted.* accepted (root)");
	/* data unaffected */
	if (same_content(P("xa"), data, flen) < 0)
		return -1;
	OK(unlink(P("xa")));
	xfree(data);
	return 0;
}

/* Wait (bounded) until statfs says at most `target` bytes are used. */
static int wait_used_at_most(uint64_t target, double seconds, uint64_t *last)
{
	for (int k = 0; k < (int)(seconds * 20); k++) {
		if (arena_used(last) < 0)
			return -1;
		if (*last <= target)
			return 0;
		struct timespec d = { 0, 50 * 1000 * 1000 };
		nanosleep(&d, NULL);
	}
	return 1;
}

static int t_statfs(void)
{
	struct statvfs sv;
	OK(statvfs(g_mnt, &sv));
	uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
	if (g_arena) {
		EXPECT(total <= g_arena && total + 4 * MiB >= g_arena,
		       "statfs f_blocks*f_frsize = %" PRIu64 ", expected size= %" PRIu64, total, g_arena);
	}
	EXPECT(sv.f_bavail <= sv.f_bfree && sv.f_bfree <= sv.f_blocks, "statfs: bavail %llu bfree %llu blocks %llu",
	       (unsigned long long)sv.f_bavail, (unsigned long long)sv.f_bfree, (unsigned long long)sv.f_blocks);
	EXPECT(sv.f_files > 0 && sv.f_ffree < sv.f_files, "statfs: files %llu ffree %llu",
	       (unsigned long long)sv.f_files, (unsigned long long)sv.f_ffree);
	EXPECT(sv.f_namemax == 255, "f_namemax %lu", (unsigned long)sv.f_namemax);
	uint64_t used0 = 0, used1 = 0, used2 = 0;
	OK(arena_used(&used0));
	/* Inodes of files removed by earlier checks are freed when the
	 * kernel forgets them, asynchronously: wait (bounded) until the
	 * free count is steady before counting on it. */
	for (int k = 0; k < 40; k++) {
		struct statvfs sv2;
		usleep(50000);
		OK(statvfs(g_mnt, &sv2));
		if (sv2.f_ffree == sv.f_ffree)
			break;
		sv = sv2;
	}
	fsfilcnt_t ffree0 = sv.f_ffree;
	const size_t len = 64 * MiB, blk = 1 * MiB;
	if (g_arena && g_arena < used0 + len + 16 * MiB) {
		g_skipped++;
		note("skipped the 64 MiB part: arena of %" PRIu64 " bytes is too small", g_arena);
		return 1;
	}
	uint8_t *buf = xmalloc(blk);
	int fd = open(P("big"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "open: %s", strerrorname_np(errno));
	for (size_t off = 0; off < len; off += blk) {
		prng_fill(buf, blk, 1000 + off / blk);
		EXPECT(write_all(fd, buf, blk, (off_t)off) == 0, "write at %zu: %s", off, strerrorname_np(errno));
	}
	OK(fsync(fd));
	OK(statvfs(g_mnt, &sv));
	OK(arena_used(&used1));
	/* A late FORGET of an earlier check's file can free an inode in
	 * between (more free, not fewer): then measure again with a probe
	 * file, a few times.  Fewer free than expected is always a failure. */
	for (int k = 0; k < 5 && sv.f_ffree > ffree0 - 1; k++) {
		usleep(200000);
		OK(statvfs(g_mnt, &sv));
		ffree0 = sv.f_ffree;
		char probe[64];
		snprintf(probe, sizeof(probe), "ino-probe-%d", k);
		int pfd = open(P(probe), O_CREAT | O_WRONLY, 0644);
		EXPECT(pfd >= 0, "open %s: %s", probe, strerrorname_np(errno));
		close(pfd);
		OK(statvfs(g_mnt, &sv));
		unlink(P(probe));
	}
	EXPECT(sv.f_ffree == ffree0 - 1, "f_ffree %llu -> %llu after one create", (unsigned long long)ffree0,
	       (unsigned long long)sv.f_ffree);
	EXPECT(used1 >= used0 + len - len / 16,
	       "after writing 64 MiB of random data, used grew by %" PRIu64 " bytes only (%" PRIu64 " -> %" PRIu64 ")",
	       used1 - used0, used0, used1);
	EXPECT(used1 <= used0 + len + len / 4, "64 MiB of data use %" PRIu64 " bytes of arena", used1 - used0);
	long long stored = get_num_xattr(P("big"), "user.dmar.stored");
	EXPECT(stored >= (long long)(len - len / 16), "user.dmar.stored %lld for 64 MiB of random data", stored);
	OK(close(fd));
	OK(unlink(P("big")));
	int w = wait_used_at_most(used0 + MiB, 10, &used2);
	EXPECT(w == 0, "10 s after unlink, used is %" PRIu64 ", was %" PRIu64 " before the file (freed %" PRIu64 " of %" PRIu64 ")",
	       used2, used0, used1 - used2, used1 - used0);
	xfree(buf);
	return 0;
}

/* copy_file_range all of src (len bytes) into a new dst. */
static int copy_whole(const char *src, const char *dst, size_t len)
{
	int in = open(src, O_RDONLY), out = open(dst, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	loff_t oi = 0, oo = 0;
	ssize_t n = in >= 0 && out >= 0 ? copy_file_range(in, &oi, out, &oo, len, 0) : -1;
	int e = errno;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0 && n == (ssize_t)len)
		n = -1;
	errno = e;
	return n == (ssize_t)len ? 0 : -1;
}

static int t_copy_file_range(void)
{
	const size_t len = 8 * MiB;
	uint8_t *buf = xmalloc(len), *got = xmalloc(len);
	prng_fill(buf, len, 10);
	if (make_file(P("cfr-src"), buf, len, 0644) < 0)
		FAIL("make src: %s", strerrorname_np(errno));
	int in = open(P("cfr-src"), O_RDONLY);
	EXPECT(in >= 0, "open src");
	OK(fsync(in));
	uint64_t u0 = 0, u1 = 0;
	OK(arena_used(&u0));
	int out = open(P("cfr-dst"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
	EXPECT(out >= 0, "open dst");
	loff_t oi = 0, oo = 0;
	ssize_t n = copy_file_range(in, &oi, out, &oo, len, 0);
	EXPECT(n == (ssize_t)len, "copy_file_range(%zu) returned %zd (%s), expected the full length", len, n,
	       n < 0 ? strerrorname_np(errno) : "short");
	EXPECT(oi == (loff_t)len && oo == (loff_t)len, "offsets after copy: in %lld out %lld", (long long)oi,
	       (long long)oo);
	ssize_t z = copy_file_range(in, &oi, out, &oo, len, 0);
	EXPECT(z == 0, "copy_file_range at src EOF returned %zd", z);
	OK(close(out));
	if (same_content(P("cfr-dst"), buf, len) < 0)
		return -1;
	/* after close, the copy shares the source's chunks: arena use grows
	 * by far less than the file */
	if (encoding()) {
		int w = wait_used_at_most(u0 + len / 8, 5, &u1);
		EXPECT(w == 0, "copy_file_range of %zu bytes grew arena use by %" PRIu64 " bytes (not shared)", len, u1 - u0);
		char state[64];
		OK(get_state(P("cfr-dst"), state, sizeof(state)));
		EXPECT(!strcmp(state, "encoded"), "copy's state '%s', expected encoded", state);
		EXPECT(get_num_xattr(P("cfr-dst"), "user.dmar.chunks") == get_num_xattr(P("cfr-src"), "user.dmar.chunks"),
		       "copy has %lld chunks, source %lld", get_num_xattr(P("cfr-dst"), "user.dmar.chunks"),
		       get_num_xattr(P("cfr-src"), "user.dmar.chunks"));
	} else {
		OK(arena_used(&u1));
		note("encode=none: copy grew arena use by %" PRIu64 " bytes (no sharing expected)", u1 - u0);
	}
	/* unaligned ranges into an existing file: the bytes around stay */
	const size_t mlen = 1 * MiB + 333;
	const off_t soff = 12345, doff = 777;
	uint8_t *base = xmalloc(2 * MiB);
	prng_fill(base, 2 * MiB, 11);
	if (make_file(P("cfr-mid"), base, 2 * MiB, 0644) < 0)
		FAIL("make mid");
	out = open(P("cfr-mid"), O_WRONLY);
	oi = soff;
	oo = doff;
	n = copy_file_range(in, &oi, out, &oo, mlen, 0);
	EXPECT(n == (ssize_t)mlen, "unaligned copy_file_range returned %zd (%s)", n, strerrorname_np(errno));
	OK(close(out));
	memcpy(base + doff, buf + soff, mlen);
	if (same_content(P("cfr-mid"), base, 2 * MiB) < 0)
		return -1;
	/* past the end of dst: a hole in between */
	out = open(P("cfr-mid"), O_WRONLY);
	oi = 0;
	oo = 3 * (loff_t)MiB;
	n = copy_file_range(in, &oi, out, &oo, 1000, 0);
	EXPECT(n == 1000, "copy_file_range past dst EOF returned %zd", n);
	OK(close(out));
	uint8_t *want = xcalloc(1, 3 * MiB + 1000);
	memcpy(want, base, 2 * MiB);
	memcpy(want + 3 * MiB, buf, 1000);
	int r = same_content(P("cfr-mid"), want, 3 * MiB + 1000);
	xfree(want);
	if (r < 0)
		return -1;
	/* the source is unchanged, and writing the copy leaves it so */
	int fd = open(P("cfr-dst"), O_WRONLY);
	EXPECT(pwrite(fd, "changed", 7, 100) == 7, "write to copy");
	OK(close(fd));
	if (same_content(P("cfr-src"), buf, len) < 0)
		return -1;
	close(in);
	/* Whole-file copies share one extent table (copy on write): a copy
	 * of a copy, then each changed in its own way, leaves the others
	 * as they were; when all are gone, so are their chunks. */
	OK(copy_whole(P("cfr-src"), P("cfr-c2"), len));
	OK(copy_whole(P("cfr-c2"), P("cfr-c3"), len));
	OK(truncate(P("cfr-c2"), (off_t)(len / 2)));
	if (same_content(P("cfr-c2"), buf, len / 2) < 0 || same_content(P("cfr-c3"), buf, len) < 0 ||
	    same_content(P("cfr-src"), buf, len) < 0)
		return -1;
	fd = open(P("cfr-src"), O_WRONLY);
	EXPECT(fd >= 0, "open src for a punch");
	OK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1 * MiB, 2 * MiB));
	OK(close(fd));
	if (same_content(P("cfr-c3"), buf, len) < 0)
		return -1;
	uint8_t *punched = xmalloc(len);
	memcpy(punched, buf, len);
	memset(punched + MiB, 0, 2 * MiB);
	r = same_content(P("cfr-src"), punched, len);
	xfree(punched);
	if (r < 0)
		return -1;
	OK(unlink(P("cfr-src")));
	OK(unlink(P("cfr-dst")));
	OK(unlink(P("cfr-mid")));
	OK(unlink(P("cfr-c2")));
	OK(unlink(P("cfr-c3")));
	if (encoding()) {
		int w = wait_used_at_most(u0 + MiB, 10, &u1);
		EXPECT(w == 0, "10 s after the copies were removed, arena use is %" PRIu64 ", was %" PRIu64 " before",
		       u1, u0);
	}
	xfree(buf);
	xfree(got);
	xfree(base);
	return 0;
}

/* O_DIRECT bypasses the kernel page cache: reads and writes at odd
 * offsets and sizes go to the filesystem as they are. */
static int t_direct(void)
{
	const size_t len = 2 * MiB;
	uint8_t *buf = xmalloc(len), *got = xmalloc(len);
	prng_fill(buf, len, 12);
	int fd = open(P("direct"), O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0 && errno == EINVAL) {
		g_skipped++;
		note("skipped: O_DIRECT not supported (EINVAL)");
		return 1;
	}
	EXPECT(fd >= 0, "open(O_DIRECT): %s", strerrorname_np(errno));
	/* odd pieces, out of order */
	size_t cuts[] = { 0, 1, 4096, 7000, 65536, 300001, 1048576, 1048577 + 4095, len };
	for (int k = (int)(sizeof(cuts) / sizeof(cuts[0])) - 2; k >= 0; k--)
		EXPECT(write_all(fd, buf + cuts[k], cuts[k + 1] - cuts[k], (off_t)cuts[k]) == 0,
		       "O_DIRECT pwrite [%zu, %zu): %s", cuts[k], cuts[k + 1], strerrorname_np(errno));
	EXPECT(read_all(fd, got, len, 0) == (ssize_t)len, "O_DIRECT read");
	size_t d = first_diff(got, buf, len);
	EXPECT(d == len, "O_DIRECT read back differs at %zu", d);
	EXPECT(read_all(fd, got, 1000, 12345) == 1000 && !memcmp(got, buf + 12345, 1000), "O_DIRECT unaligned read");
	OK(fsync(fd));
	/* after encoding, a direct read of a range that spans chunks */
	EXPECT(read_all(fd, got, 777777, 99999) == 777777 && !memcmp(got, buf + 99999, 777777),
	       "O_DIRECT read of encoded data");
	/* a buffered fd sees direct writes */
	int bfd = open(P("direct"), O_RDWR);
	EXPECT(bfd >= 0, "open buffered");
	EXPECT(pread(bfd, got, 10, 5000) == 10, "buffered pread");
	EXPECT(pwrite(fd, "direct-write", 12, 5000) == 12, "O_DIRECT overwrite");
	memcpy(buf + 5000, "direct-write", 12);
	EXPECT(pread(bfd, got, 12, 5000) == 12 && !memcmp(got, "direct-write", 12),
	       "buffered read after an O_DIRECT write shows stale data '%.12s'", got);
	close(bfd);
	OK(close(fd));
	if (same_content(P("direct"), buf, len) < 0)
		return -1;
	OK(unlink(P("direct")));
	xfree(buf);
	xfree(got);
	return 0;
}

/* Several processes write interleaved blocks of one file at once (the
 * daemon is multi-threaded), while another reads a second file. */
static int t_concurrent(void)
{
	enum { WRITERS = 4, BLK = 64 * 1024, NBLK = 256 };
	const size_t len = (size_t)BLK * NBLK;
	uint8_t *want = xmalloc(len);
	for (int b = 0; b < NBLK; b++)
		prng_fill(want + (size_t)b * BLK, BLK, 5000 + (uint64_t)b);
	const size_t rlen = 4 * MiB;
	uint8_t *rdata = xmalloc(rlen);
	prng_fill(rdata, rlen, 13);
	if (make_file(P("conc-read"), rdata, rlen, 0644) < 0)
		FAIL("make file");
	int fd = open(P("conc"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	EXPECT(fd >= 0, "create");
	close(fd);
	fflush(stdout);
	pid_t pids[WRITERS + 1];
	for (int w = 0; w <= WRITERS; w++) {
		pids[w] = fork();
		EXPECT(pids[w] >= 0, "fork");
		if (pids[w] > 0)
			continue;
		if (w == WRITERS) { /* the reader */
			uint8_t *got = xmalloc(rlen);
			for (int pass = 0; pass < 8; pass++) {
				int rfd = open(P("conc-read"), O_RDONLY | (pass % 2 ? O_DIRECT : 0));
				if (rfd < 0 || read_all(rfd, got, rlen, 0) != (ssize_t)rlen || memcmp(got, rdata, rlen)) {
					fail_msg(__LINE__, "concurrent reader pass %d: wrong data", pass);
					_exit(1);
				}
				close(rfd);
			}
			_exit(0);
		}
		int wfd = open(P("conc"), O_RDWR | (w % 2 ? O_DIRECT : 0));
		if (wfd < 0)
			_exit(1);
		for (int b = w; b < NBLK; b += WRITERS)
			if (write_all(wfd, want + (size_t)b * BLK, BLK, (off_t)b * BLK) < 0) {
				fail_msg(__LINE__, "writer %d block %d: %s", w, b, strerrorname_np(errno));
				_exit(1);
			}
		if (w == 0)
			fsync(wfd); /* an encode while the others still write */
		_exit(close(wfd) == 0 ? 0 : 1);
	}
	int bad = 0;
	for (int w = 0; w <= WRITERS; w++) {
		int status;
		if (waitpid(pids[w], &status, 0) != pids[w] || !WIFEXITED(status) || WEXITSTATUS(status))
			bad++;
	}
	EXPECT(bad == 0, "%d of %d concurrent processes failed", bad, WRITERS + 1);
	fd = open(P("conc"), O_RDWR);
	OK(fsync(fd));
	close(fd);
	if (same_content(P("conc"), want, len) < 0)
		return -1;
	OK(unlink(P("conc")));
	OK(unlink(P("conc-read")));
	xfree(want);
	xfree(rdata);
	return 0;
}

/* ---- main ------------------------------------------------------------------ */

struct check {
	const char *name;
	int (*fn)(void);
};

static const struct check checks[] = {
	{ "create/open/read/write at offsets", t_create_rw },
	{ "pwrite beyond EOF is sparse and reads zeros", t_sparse },
	{ "O_APPEND from two fds", t_append },
	{ "truncate/ftruncate grow and shrink", t_truncate },
	{ "fallocate mode 0 and PUNCH_HOLE|KEEP_SIZE", t_fallocate },
	{ "SEEK_DATA/SEEK_HOLE after fsync", t_seek_flushed },
	{ "SEEK_DATA/SEEK_HOLE straight after write", t_seek_unflushed },
	{ "unlink of an open file", t_unlink_open },
	{ "rename, RENAME_NOREPLACE, RENAME_EXCHANGE, dir rules", t_rename },
	{ "mkdir/rmdir", t_mkdir_rmdir },
	{ "readdir: 2000 entries, stable under changes", t_readdir },
	{ "hard links", t_hardlink },
	{ "symlinks", t_symlink },
	{ "chmod/chown/utimensat and ctime/mtime rules", t_times_modes },
	{ "permissions for uid 65534", t_permissions },
	{ "set-ID bits and capabilities a write, truncate or chown takes away", t_killpriv },
	{ "NAME_MAX lookups, rename ctime, RENAME_WHITEOUT", t_posix_edges },
	{ "fsync/fdatasync (and encoding state)", t_fsync },
	{ "fcntl and flock locks between processes", t_locks },
	{ "shared writable mmap coherent with read/write", t_mmap },
	{ "O_WRONLY writes (direct I/O) seen by cached readers and mappings", t_wronly_coherent },
	{ "user.* xattrs and read-only user.dmar.*", t_xattr },
	{ "statfs: size, used after 64 MiB and after unlink", t_statfs },
	{ "copy_file_range by reference", t_copy_file_range },
	{ "O_DIRECT at odd offsets", t_direct },
	{ "concurrent writers and a reader", t_concurrent },
};

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: %s MOUNTDIR [ARENA_BYTES [none|dedup|zstd]]\n", argv[0]);
		return 2;
	}
	g_mnt = argv[1];
	if (argc > 2)
		g_arena = strtoull(argv[2], NULL, 10);
	if (argc > 3)
		g_encode = argv[3];
	const char *only = getenv("SYSCALLS_ONLY"); /* substring of a check's name */
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(g_dir, sizeof(g_dir), "%s/syscalls.%ld", g_mnt, (long)getpid());
	if (mkdir(g_dir, 0755) < 0) {
		fprintf(stderr, "syscalls: mkdir %s: %s\n", g_dir, strerror(errno));
		return 2;
	}
	umask(022);
	printf("syscalls: %s (arena %" PRIu64 " bytes, encode=%s)\n", g_dir, g_arena, g_encode);
	size_t n = sizeof(checks) / sizeof(checks[0]);
	for (size_t k = 0; k < n; k++) {
		if (only && !strstr(checks[k].name, only))
			continue;
		g_cur = checks[k].name;
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int r = checks[k].fn();
		xfree_all();
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (r < 0)
			g_failed++;
		else if (r == 0) {
			g_passed++;
			printf("ok %zu - %s (%.2fs)\n", k + 1, g_cur, ts_diff(t1, t0));
		} else {
			printf("skip %zu - %s\n", k + 1, g_cur);
		}
	}
	if (!g_failed && rmdir(g_dir) < 0) {
		printf("FAIL: cleanup: rmdir %s: %s (something was left behind)\n", g_dir, strerror(errno));
		g_failed++;
	}
	printf("syscalls: %d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
	return g_failed ? 1 : 0;
}
