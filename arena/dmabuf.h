/* SPDX-License-Identifier: MIT */
/*
 * dmabuf.h - dma-bufs of memory this process fills, for dmar
 * export-dmabuf: a file's bytes handed to a GPU or an RDMA NIC, which
 * import dma-bufs, on a host with or without the kernel module.
 *
 * The memory comes from an arena of the dmar_arena module (kmod/) when
 * /dev/dmar_arena opens, else from a memfd sealed against shrinking
 * through the kernel's /dev/udmabuf (CONFIG_UDMABUF).  Either way it
 * belongs to the dma-buf: it stays while the dma-buf's fd, a mapping of
 * it or an importer holds it, and goes with the last of them, whatever
 * happens to the process that made it.
 */
#ifndef DMAR_ARENA_DMABUF_H
#define DMAR_ARENA_DMABUF_H

#include <stdint.h>

#include "codec/error.h"

enum dmar_dmabuf_via {
	DMAR_DMABUF_AUTO,    /* the module if it is loaded, else udmabuf */
	DMAR_DMABUF_KMOD,    /* /dev/dmar_arena only */
	DMAR_DMABUF_UDMABUF, /* /dev/udmabuf only */
};

#define DMAR_UDMABUF_DEVICE "/dev/udmabuf"
#define DMAR_UDMABUF_LIMIT "/sys/module/udmabuf/parameters/size_limit_mb"

/* "auto", "kmod", "udmabuf": 0, or -EINVAL. */
int dmar_dmabuf_via_parse(const char *s, enum dmar_dmabuf_via *out);

struct dmar_dmabuf;

/* Memory for a dma-buf of len bytes (> 0), zeroed, mapped for filling:
 * 0, or -errno with err saying which exporter refused and why (neither
 * present, past udmabuf's size_limit_mb or the module's max_total_mb). */
int dmar_dmabuf_new(struct dmar_dmabuf **out, uint64_t len, enum dmar_dmabuf_via via, struct dmar_error *err);
uint8_t *dmar_dmabuf_mem(const struct dmar_dmabuf *b);
/* The dma-buf's size: len rounded up to its pages (4 KiB or 2 MiB). */
uint64_t dmar_dmabuf_size(const struct dmar_dmabuf *b);
const char *dmar_dmabuf_via_name(const struct dmar_dmabuf *b); /* "kmod" or "udmabuf" */
/* The dma-buf (O_RDWR, O_CLOEXEC): its fd, or -errno with err.  Unmaps
 * the memory and frees b either way. */
int dmar_dmabuf_export(struct dmar_dmabuf *b, struct dmar_error *err);
void dmar_dmabuf_free(struct dmar_dmabuf *b); /* without exporting */

#endif /* DMAR_ARENA_DMABUF_H */
