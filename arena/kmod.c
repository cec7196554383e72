/* SPDX-License-Identifier: MIT */
/*
 * The kernel module's arenas (kmod.h), through its ioctls
 * (kmod/include/uapi/dmar_arena.h).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "kmod.h"
#include "kmod/include/uapi/dmar_arena.h"

bool dmar_kmod_available(void)
{
	int fd = open(DMAR_KMOD_DEVICE, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

bool dmar_kmod_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (!n || n >= DMAR_ARENA_NAME_MAX || !strcmp(name, ".") || !strcmp(name, ".."))
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
		      *p == '_' || *p == '-'))
			return false;
	return true;
}

bool dmar_kmod_exists(const char *name)
{
	char path[128];
	if (!dmar_kmod_name_ok(name))
		return false;
	snprintf(path, sizeof(path), "%s/%s/size", DMAR_KMOD_SYSFS, name);
	return access(path, R_OK) == 0;
}

static int by_name(int fd, unsigned long cmd, const char *name, uint32_t flags)
{
	struct dmar_arena_name a = { .struct_size = sizeof(a), .flags = flags };
	snprintf(a.name, sizeof(a.name), "%s", name);
	return ioctl(fd, cmd, &a) < 0 ? -errno : 0;
}

/* Map k's bound arena (size and page size from the module). */
static int map(struct dmar_kmod *k, struct dmar_error *err)
{
	struct dmar_arena_info q = { .struct_size = sizeof(q) };
	if (ioctl(k->fd, DMAR_ARENA_IOC_QUERY, &q) < 0)
		return dmar_error_set(err, -errno, DMAR_KMOD_DEVICE ": query: %s", strerror(errno));
	void *p = mmap(NULL, (size_t)q.size, PROT_READ | PROT_WRITE, MAP_SHARED, k->fd, 0);
	if (p == MAP_FAILED)
		return dmar_error_set(err, -errno, DMAR_KMOD_DEVICE ": mapping %llu bytes: %s",
				      (unsigned long long)q.size, strerror(errno));
	k->base = p;
	k->size = q.size;
	k->page_size = q.page_size;
	return 0;
}

static int open_dev(struct dmar_kmod *k, struct dmar_error *err)
{
	*k = (struct dmar_kmod){ .fd = open(DMAR_KMOD_DEVICE, O_RDWR | O_CLOEXEC) };
	if (k->fd < 0)
		return dmar_error_set(err, -errno, DMAR_KMOD_DEVICE ": %s%s", strerror(errno),
				      errno == ENOENT ? " (load the dmar_arena module: docs/kmod.md)" : "");
	return 0;
}

int dmar_kmod_attach(struct dmar_kmod *k, const char *name, struct dmar_error *err)
{
	int r = open_dev(k, err);
	if (r < 0)
		return r;
	if ((r = by_name(k->fd, DMAR_ARENA_IOC_ATTACH, name, DMAR_ARENA_EXCL)) < 0) {
		dmar_kmod_close(k);
		return dmar_error_set(err, r, DMAR_KMOD_DEVICE ": arena %s: %s", name,
				      r == -EBUSY ? "in use by another dmarfs (one mount per arena)" : strerror(-r));
	}
	if ((r = map(k, err)) < 0)
		dmar_kmod_close(k);
	return r;
}

int dmar_kmod_create(struct dmar_kmod *k, const char *prefix, uint64_t size, uint32_t page_size,
		     struct dmar_error *err)
{
	int r = open_dev(k, err);
	if (r < 0)
		return r;
	struct dmar_arena_create c = { .struct_size = sizeof(c), .flags = DMAR_ARENA_EXCL, .size = size,
				       .page_size = page_size, .numa_node = -1 };
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
		rnd = (uint64_t)getpid() << 20 ^ (uint64_t)(uintptr_t)k;
	snprintf(c.name, sizeof(c.name), "%.40s%016llx", prefix, (unsigned long long)rnd);
	if (ioctl(k->fd, DMAR_ARENA_IOC_CREATE, &c) < 0) {
		r = -errno;
		dmar_kmod_close(k);
		return dmar_error_set(err, r, DMAR_KMOD_DEVICE ": a new arena of %llu bytes: %s%s",
				      (unsigned long long)size, strerror(-r),
				      r == -ENOSPC ? " (past the module's max_total_mb)" : "");
	}
	if ((r = map(k, err)) < 0)
		dmar_kmod_close(k);
	return r;
}

int dmar_kmod_export(struct dmar_kmod *k, uint64_t off, uint64_t len, struct dmar_error *err)
{
	struct dmar_arena_export e = { .struct_size = sizeof(e), .flags = O_RDWR | O_CLOEXEC, .offset = off,
				       .length = len };
	if (ioctl(k->fd, DMAR_ARENA_IOC_EXPORT, &e) < 0)
		return dmar_error_set(err, -errno, DMAR_KMOD_DEVICE ": a dma-buf of [%llu, %llu): %s",
				      (unsigned long long)off, (unsigned long long)(off + len), strerror(errno));
	return e.fd;
}

int dmar_kmod_publish(struct dmar_kmod *k, const char *name)
{
	return by_name(k->fd, DMAR_ARENA_IOC_RENAME, name, DMAR_ARENA_KEEP);
}

int dmar_kmod_destroy(const char *name)
{
	int fd = open(DMAR_KMOD_DEVICE, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = by_name(fd, DMAR_ARENA_IOC_DESTROY, name, 0);
	close(fd);
	return r;
}

int dmar_kmod_drop(const char *name, struct dmar_error *err)
{
	struct dmar_kmod k;
	/* Bound exclusively here, nobody else has it: then it may go. */
	int r = open_dev(&k, err);
	if (r < 0)
		return r;
	r = by_name(k.fd, DMAR_ARENA_IOC_ATTACH, name, DMAR_ARENA_EXCL);
	if (r == 0)
		r = by_name(k.fd, DMAR_ARENA_IOC_DESTROY, name, 0);
	dmar_kmod_close(&k);
	if (r < 0)
		return dmar_error_set(err, r, DMAR_KMOD_DEVICE ": arena %s: %s", name,
				      r == -EBUSY ? "in use: unmount it first" : strerror(-r));
	return 0;
}

void dmar_kmod_close(struct dmar_kmod *k)
{
	if (k->base)
		munmap(k->base, k->size);
	if (k->fd >= 0)
		close(k->fd);
	k->base = NULL;
	k->fd = -1;
}

static uint64_t read_num(const char *name, const char *what)
{
	char path[160], buf[32] = "";
	snprintf(path, sizeof(path), "%s/%s/%s", DMAR_KMOD_SYSFS, name, what);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return strtoull(buf, NULL, 10);
}

int dmar_kmod_each(int (*fn)(void *ctx, const char *name, uint64_t size, unsigned users), void *ctx)
{
	DIR *d = opendir(DMAR_KMOD_SYSFS);
	if (!d)
		return 0;
	int r = 0;
	for (struct dirent *e; !r && (e = readdir(d));) {
		if (e->d_name[0] == '.' || !dmar_kmod_name_ok(e->d_name))
			continue;
		r = fn(ctx, e->d_name, read_num(e->d_name, "size"), (unsigned)read_num(e->d_name, "users"));
	}
	closedir(d);
	return r;
}
