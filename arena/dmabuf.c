/* SPDX-License-Identifier: MIT */
/*
 * dma-bufs of memory this process fills (dmabuf.h): an arena of the
 * dmar_arena module made for the one dma-buf (no KEEP: it goes with the
 * dma-buf), or a sealed memfd given to /dev/udmabuf.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dmabuf.h"
#include "kmod.h"

#define KIB4 4096u
#define MIB2 (2u << 20)

struct dmar_dmabuf {
	enum dmar_dmabuf_via via; /* KMOD or UDMABUF, never AUTO */
	struct dmar_kmod k;       /* KMOD: the bound arena and its mapping */
	int memfd;                /* UDMABUF */
	uint8_t *mem;
	uint64_t size;
};

int dmar_dmabuf_via_parse(const char *s, enum dmar_dmabuf_via *out)
{
	static const char *const names[] = { "auto", "kmod", "udmabuf" };
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, names[i])) {
			*out = (enum dmar_dmabuf_via)i;
			return 0;
		}
	return -EINVAL;
}

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

/* A 2 MiB-paged arena for a buffer of 2 MiB or more (fewer, larger
 * segments for the importer's DMA mapping); 4 KiB pages when the module
 * has no free huge page for it. */
static int kmod_new(struct dmar_dmabuf *b, uint64_t len, struct dmar_error *err)
{
	int r = -ENOMEM;
	if (len >= MIB2) {
		b->size = round_up(len, MIB2);
		r = dmar_kmod_create(&b->k, "dmabuf-", b->size, MIB2, err);
	}
	if (r == -ENOMEM) {
		b->size = round_up(len, KIB4);
		r = dmar_kmod_create(&b->k, "dmabuf-", b->size, KIB4, err);
	}
	if (r < 0)
		return r;
	b->mem = b->k.base;
	return 0;
}

/* udmabuf refuses a buffer past its size_limit_mb (64 by default) with
 * EINVAL, which says nothing: say it here, with the remedy. */
static int udmabuf_limit_check(uint64_t size, struct dmar_error *err)
{
	FILE *f = fopen(DMAR_UDMABUF_LIMIT, "r");
	unsigned long long mb;
	if (!f)
		return 0;
	int n = fscanf(f, "%llu", &mb);
	fclose(f);
	if (n == 1 && size > (uint64_t)mb << 20)
		return dmar_error_set(err, -E2BIG,
				      DMAR_UDMABUF_DEVICE ": %llu bytes is past its size_limit_mb=%llu "
				      "(modprobe udmabuf size_limit_mb=N, or load the dmar_arena module)",
				      (unsigned long long)size, mb);
	return 0;
}

static int udmabuf_new(struct dmar_dmabuf *b, uint64_t len, struct dmar_error *err)
{
	b->size = round_up(len, (uint64_t)sysconf(_SC_PAGESIZE));
	int r = udmabuf_limit_check(b->size, err);
	if (r < 0)
		return r;
	if (access(DMAR_UDMABUF_DEVICE, F_OK) < 0)
		return dmar_error_set(err, -ENODEV,
				      "no dma-buf exporter here: neither " DMAR_KMOD_DEVICE " (the dmar_arena module, "
				      "docs/kmod.md) nor " DMAR_UDMABUF_DEVICE " (a kernel with CONFIG_UDMABUF)");
	b->memfd = memfd_create("dmar-dmabuf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (b->memfd < 0)
		return dmar_error_set(err, -errno, "memfd_create: %s", strerror(errno));
	if (ftruncate(b->memfd, (off_t)b->size) < 0)
		return dmar_error_set(err, -errno, "a memfd of %llu bytes: %s", (unsigned long long)b->size,
				      strerror(errno));
	/* udmabuf takes only memfds that cannot shrink under its pages. */
	if (fcntl(b->memfd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
		return dmar_error_set(err, -errno, "sealing the memfd: %s", strerror(errno));
	void *p = mmap(NULL, (size_t)b->size, PROT_READ | PROT_WRITE, MAP_SHARED, b->memfd, 0);
	if (p == MAP_FAILED)
		return dmar_error_set(err, -errno, "mapping the memfd: %s", strerror(errno));
	b->mem = p;
	return 0;
}

int dmar_dmabuf_new(struct dmar_dmabuf **out, uint64_t len, enum dmar_dmabuf_via via, struct dmar_error *err)
{
	*out = NULL;
	if (!len)
		return dmar_error_set(err, -EINVAL, "a dma-buf of 0 bytes");
	struct dmar_dmabuf *b = calloc(1, sizeof(*b));
	if (!b)
		return dmar_error_set(err, -ENOMEM, "out of memory");
	b->k.fd = -1;
	b->memfd = -1;
	if (via == DMAR_DMABUF_AUTO)
		via = dmar_kmod_available() ? DMAR_DMABUF_KMOD : DMAR_DMABUF_UDMABUF;
	b->via = via;
	int r = via == DMAR_DMABUF_KMOD ? kmod_new(b, len, err) : udmabuf_new(b, len, err);
	if (r < 0) {
		dmar_dmabuf_free(b);
		return r;
	}
	*out = b;
	return 0;
}

uint8_t *dmar_dmabuf_mem(const struct dmar_dmabuf *b)
{
	return b->mem;
}

uint64_t dmar_dmabuf_size(const struct dmar_dmabuf *b)
{
	return b->size;
}

const char *dmar_dmabuf_via_name(const struct dmar_dmabuf *b)
{
	return b->via == DMAR_DMABUF_KMOD ? "kmod" : "udmabuf";
}

int dmar_dmabuf_export(struct dmar_dmabuf *b, struct dmar_error *err)
{
	int fd;
	if (b->via == DMAR_DMABUF_KMOD) {
		fd = dmar_kmod_export(&b->k, 0, b->size, err);
	} else {
		struct udmabuf_create c = { .memfd = (uint32_t)b->memfd, .flags = UDMABUF_FLAGS_CLOEXEC,
					    .offset = 0, .size = b->size };
		int dev = open(DMAR_UDMABUF_DEVICE, O_RDWR | O_CLOEXEC);
		fd = dev < 0 ? -1 : ioctl(dev, UDMABUF_CREATE, &c);
		if (fd < 0)
			fd = dmar_error_set(err, -errno, DMAR_UDMABUF_DEVICE ": a dma-buf of %llu bytes: %s",
					    (unsigned long long)b->size, strerror(errno));
		if (dev >= 0)
			close(dev);
	}
	dmar_dmabuf_free(b);
	return fd;
}

void dmar_dmabuf_free(struct dmar_dmabuf *b)
{
	if (!b)
		return;
	if (b->via == DMAR_DMABUF_KMOD) {
		dmar_kmod_close(&b->k); /* the arena stays while its dma-buf does */
	} else {
		if (b->mem)
			munmap(b->mem, (size_t)b->size);
		if (b->memfd >= 0)
			close(b->memfd);
	}
	free(b);
}
