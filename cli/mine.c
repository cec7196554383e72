/* SPDX-License-Identifier: MIT */
/*
 * Gathering samples to mine a byte pack from: files, directory trees, or
 * the memory of a running process.
 *
 * The trainer wants many small samples rather than a few big ones, so big
 * inputs are cut into SAMPLE_PIECE pieces; when the inputs exceed the
 * budget, pieces are taken at an even stride across each input so the
 * pack sees all of it, not just its beginning.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define SAMPLE_PIECE (32u << 10)

static int add_sample(struct cli_samples *s, const uint8_t *p, size_t len)
{
	if (!len)
		return 0;
	if (s->len + len > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : (1u << 20);
		while (cap < s->len + len)
			cap *= 2;
		uint8_t *b = realloc(s->buf, cap);
		if (!b)
			return -ENOMEM;
		s->buf = b;
		s->cap = cap;
	}
	if (s->n == s->ncap) {
		unsigned nc = s->ncap ? s->ncap * 2 : 1024;
		size_t *z = realloc(s->sizes, nc * sizeof(*z));
		if (!z)
			return -ENOMEM;
		s->sizes = z;
		s->ncap = nc;
	}
	memcpy(s->buf + s->len, p, len);
	s->len += len;
	s->sizes[s->n++] = len;
	return 0;
}

/* Read pieces of [0, size) from fd: all of it if keep >= size, else an even
 * spread of about keep bytes.  Short reads (files that shrank, unreadable
 * holes in a process) end the input quietly. */
static int sample_fd(struct cli_samples *s, int fd, uint64_t base, uint64_t size, uint64_t keep)
{
	uint8_t buf[SAMPLE_PIECE];
	uint64_t pieces = (size + SAMPLE_PIECE - 1) / SAMPLE_PIECE;
	uint64_t want = (keep + SAMPLE_PIECE - 1) / SAMPLE_PIECE;
	if (want == 0)
		want = 1;
	for (uint64_t k = 0; k < want && k < pieces; k++) {
		uint64_t idx = pieces <= want ? k : k * pieces / want;
		uint64_t off = idx * SAMPLE_PIECE;
		size_t len = size - off < SAMPLE_PIECE ? (size_t)(size - off) : SAMPLE_PIECE;
		ssize_t n = pread(fd, buf, len, (off_t)(base + off));
		if (n <= 0)
			return n < 0 && errno != EIO && errno != EFAULT ? -errno : 0;
		int r = add_sample(s, buf, (size_t)n);
		if (r < 0)
			return r;
	}
	return 0;
}

/* How much of an input of size bytes (of total) to read.  Each input earns
 * budget credit in proportion to its size and spends it on whole inputs or
 * whole pieces, so the sum stays within the budget even for many inputs
 * smaller than a piece. */
static uint64_t take_budget(double *credit, uint64_t size, uint64_t total, uint64_t budget)
{
	if (total <= budget)
		return size;
	*credit += (double)size * (double)budget / (double)total;
	uint64_t keep = size <= *credit ? size : (uint64_t)(*credit / SAMPLE_PIECE) * SAMPLE_PIECE;
	*credit -= (double)keep;
	return keep;
}

struct file_list {
	char **paths;
	uint64_t *sizes;
	size_t n, cap;
	uint64_t total;
};

static int list_add(struct file_list *l, const char *path, uint64_t size)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 256;
		char **p = realloc(l->paths, c * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->paths = p;
		uint64_t *z = realloc(l->sizes, c * sizeof(*z));
		if (!z)
			return -ENOMEM;
		l->sizes = z;
		l->cap = c;
	}
	l->paths[l->n] = strdup(path);
	if (!l->paths[l->n])
		return -ENOMEM;
	l->sizes[l->n++] = size;
	l->total += size;
	return 0;
}

static int walk(struct file_list *l, const char *path, int depth)
{
	struct stat st;
	if (lstat(path, &st) < 0) {
		cli_err("%s: %s", path, strerror(errno));
		return -errno;
	}
	if (S_ISREG(st.st_mode))
		return st.st_size ? list_add(l, path, (uint64_t)st.st_size) : 0;
	if (!S_ISDIR(st.st_mode) || depth > 64)
		return 0; /* symlinks, devices: not sample data */
	DIR *d = opendir(path);
	if (!d) {
		cli_err("%s: %s", path, strerror(errno));
		return -errno;
	}
	struct dirent *de;
	int r = 0;
	while (r == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *sub;
		if (asprintf(&sub, "%s/%s", path, de->d_name) < 0) {
			r = -ENOMEM;
			break;
		}
		r = walk(l, sub, depth + 1);
		/* An unreadable entry deep in a tree is not worth failing for. */
		if (r == -EACCES || r == -ENOENT)
			r = 0;
		free(sub);
	}
	closedir(d);
	return r;
}

int mine_from_paths(struct cli_samples *s, char **paths, int n, size_t budget)
{
	struct file_list l = { 0 };
	int r = 0;
	for (int i = 0; i < n && r == 0; i++)
		r = walk(&l, paths[i], 0);
	double credit = 0;
	for (size_t i = 0; i < l.n && r == 0; i++) {
		uint64_t size = l.sizes[i], keep = take_budget(&credit, size, l.total, budget);
		if (keep == 0)
			continue;
		int fd = open(l.paths[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		r = sample_fd(s, fd, 0, size, keep);
		close(fd);
	}
	for (size_t i = 0; i < l.n; i++)
		free(l.paths[i]);
	free(l.paths);
	free(l.sizes);
	return r;
}

/* Private mappings hold what the process made (heap, stacks, data); shared
 * ones are files and device memory that other tools can sample directly. */
int mine_from_pid(struct cli_samples *s, long pid, size_t budget)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	FILE *maps = fopen(path, "re");
	if (!maps) {
		int r = -errno;
		if (r == -ENOENT)
			cli_err("--pid %ld: no such process", pid);
		else
			cli_err("%s: %s", path, strerror(-r));
		return r;
	}
	snprintf(path, sizeof(path), "/proc/%ld/mem", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		if (r == -EACCES || r == -EPERM)
			cli_err("%s: %s: reading another process's memory needs ptrace permission "
				"(run as root or as its owner, and check /proc/sys/kernel/yama/ptrace_scope)",
				path, strerror(-r));
		else
			cli_err("%s: %s", path, strerror(-r));
		fclose(maps);
		return r;
	}

	struct region { uint64_t lo, hi; } *reg = NULL;
	size_t nreg = 0, capreg = 0;
	uint64_t total = 0;
	char line[512];
	int r = 0;
	while (fgets(line, sizeof(line), maps)) {
		unsigned long long lo, hi;
		char perms[8] = "";
		if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3)
			continue;
		if (perms[0] != 'r' || perms[3] != 'p' || strstr(line, "[vvar]") || strstr(line, "[vsyscall]"))
			continue;
		if (nreg == capreg) {
			capreg = capreg ? capreg * 2 : 64;
			struct region *nr = realloc(reg, capreg * sizeof(*nr));
			if (!nr) {
				r = -ENOMEM;
				break;
			}
			reg = nr;
		}
		reg[nreg].lo = lo;
		reg[nreg].hi = hi;
		nreg++;
		total += hi - lo;
	}
	fclose(maps);
	double credit = 0;
	for (size_t i = 0; i < nreg && r == 0; i++) {
		uint64_t size = reg[i].hi - reg[i].lo, keep = take_budget(&credit, size, total, budget);
		if (keep)
			r = sample_fd(s, fd, reg[i].lo, size, keep);
	}
	if (r == 0 && s->n == 0) {
		/* open() succeeds but reads fail when ptrace access is denied. */
		cli_err("%s: nothing readable (ptrace permission denied?)", path);
		r = -EACCES;
	}
	free(reg);
	close(fd);
	return r;
}

void mine_samples_free(struct cli_samples *s)
{
	free(s->buf);
	free(s->sizes);
	memset(s, 0, sizeof(*s));
}
