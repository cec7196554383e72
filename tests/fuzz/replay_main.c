/* SPDX-License-Identifier: MIT */
/*
 * replay_main - run a fuzz target over files without libFuzzer.
 *
 *   replay_TARGET PATH...
 *
 * Each PATH is a file or a directory (its regular files, in name order,
 * not recursing).  LLVMFuzzerInitialize runs first if the target has one.
 * A target reports a problem by aborting (or through a sanitizer); this
 * program itself fails (exit 1) when a path cannot be read, when no file
 * at all was given, or when the target returns non-zero.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned files, failures;
static unsigned long long total_bytes;

static int read_file(const char *path, uint8_t **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	size_t cap = 4096, n = 0;
	uint8_t *b = malloc(cap);
	while (b) {
		size_t got = fread(b + n, 1, cap - n, f);
		n += got;
		if (n < cap)
			break;
		cap *= 2;
		uint8_t *nb = realloc(b, cap);
		if (!nb)
			free(b);
		b = nb;
	}
	int r = b ? 0 : -ENOMEM;
	if (b && ferror(f))
		r = -EIO;
	fclose(f);
	if (r < 0) {
		free(b);
		return r;
	}
	*buf = b;
	*len = n;
	return 0;
}

static void run_file(const char *path)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int r = read_file(path, &buf, &len);
	if (r < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(-r));
		failures++;
		return;
	}
	/* An exact-size copy, so that ASan sees any read past the end. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		fprintf(stderr, "replay: %s: out of memory\n", path);
		failures++;
		free(buf);
		return;
	}
	memcpy(exact, buf, len);
	free(buf);
	if (LLVMFuzzerTestOneInput(exact, len) != 0) {
		fprintf(stderr, "replay: %s: target returned non-zero\n", path);
		failures++;
	}
	free(exact);
	files++;
	total_bytes += len;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		failures++;
		return;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			char **nn = realloc(names, cap * sizeof(*names));
			if (!nn)
				abort();
			names = nn;
		}
		size_t l = strlen(dir) + strlen(de->d_name) + 2;
		names[n] = malloc(l);
		if (!names[n])
			abort();
		snprintf(names[n], l, "%s/%s", dir, de->d_name);
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
			run_file(names[i]);
		free(names[i]);
	}
	free(names);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			failures++;
		} else if (S_ISDIR(st.st_mode)) {
			run_dir(argv[i]);
		} else {
			run_file(argv[i]);
		}
	}
	if (!files && !failures) {
		fprintf(stderr, "replay: no input files\n");
		failures++;
	}
	printf("replay: %u files, %llu bytes, %u problems\n", files, total_bytes, failures);
	return failures ? 1 : 0;
}
