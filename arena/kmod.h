/* SPDX-License-Identifier: MIT */
/*
 * kmod.h - arenas of the dmar_arena kernel module (kmod/, /dev/dmar_arena)
 * as the memory behind a named arena (private to arena/).
 *
 * Such an arena lives in the kernel, not in a file of a memory
 * filesystem: it survives its process (a crash, kill -9, an upgrade) until
 * it is destroyed, and one process at a time binds it (DMAR_ARENA_EXCL).
 * A new one is made under a temporary name, without KEEP, so that it goes
 * if its maker dies first; dmar_kmod_publish gives it its name and keeps
 * it once its superblock is valid.
 */
#ifndef DMAR_ARENA_KMOD_H
#define DMAR_ARENA_KMOD_H

#include <stdbool.h>
#include <stdint.h>

#include "codec/error.h"

#define DMAR_KMOD_DEVICE "/dev/dmar_arena"
#define DMAR_KMOD_SYSFS "/sys/kernel/dmar_arena"

/* Whether the module's device opens here. */
bool dmar_kmod_available(void);
/* Whether name is one the module can hold (1..63 of [A-Za-z0-9._-]). */
bool dmar_kmod_name_ok(const char *name);
/* Whether the module holds an arena called name. */
bool dmar_kmod_exists(const char *name);

/* A bound arena: the device file and the mapping. */
struct dmar_kmod {
	int fd;
	uint8_t *base;
	uint64_t size;
	uint32_t page_size;
};

/* Bind name exclusively and map it: 0, -ENOENT, -EBUSY (bound by another
 * process: mounted), -errno, with err. */
int dmar_kmod_attach(struct dmar_kmod *k, const char *name, struct dmar_error *err);
/* Make a new arena of size bytes (page_size 4096 or 2 MiB) under a
 * temporary name (prefix and 16 random hex digits), bound exclusively,
 * without KEEP, and map it: 0 or -errno with err. */
int dmar_kmod_create(struct dmar_kmod *k, const char *prefix, uint64_t size, uint32_t page_size,
		     struct dmar_error *err);
/* A dma-buf of [off, off + len) of the bound arena (multiples of 4096):
 * its fd (O_RDWR, O_CLOEXEC), which holds the arena's pages until it and
 * every importer let go, or -errno with err. */
int dmar_kmod_export(struct dmar_kmod *k, uint64_t off, uint64_t len, struct dmar_error *err);
/* The bound arena takes name and is kept: 0, -EEXIST, -errno. */
int dmar_kmod_publish(struct dmar_kmod *k, const char *name);
/* Take the arena's name away: it goes with its last user. 0 or -errno. */
int dmar_kmod_destroy(const char *name);
/* Destroy name unless it is bound (mounted): 0, -ENOENT, -EBUSY, with err. */
int dmar_kmod_drop(const char *name, struct dmar_error *err);
void dmar_kmod_close(struct dmar_kmod *k); /* unmap and unbind; the arena stays if kept */

/* Each arena the module holds: fn(ctx, name, size, users), stopping at a
 * non-zero return (returned). */
int dmar_kmod_each(int (*fn)(void *ctx, const char *name, uint64_t size, unsigned users), void *ctx);

#endif /* DMAR_ARENA_KMOD_H */
