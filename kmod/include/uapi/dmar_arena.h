/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * dmar_arena.h - the user-space interface of /dev/dmar_arena (kmod/):
 * named memory arenas that a program creates, maps and exports as
 * dma-bufs, and that may outlive it.  docs/kmod.md describes it.
 *
 * Every ioctl argument starts with its own size (struct_size, set by the
 * caller to sizeof the struct it was built with): a later version may
 * append fields, and the module reads what the caller's size covers (the
 * rest as zero) and refuses a size smaller than version 1's.  Reserved
 * fields must be zero.  Errors are the ioctl's -1 and errno.
 *
 * One open file of /dev/dmar_arena refers to at most one arena: CREATE or
 * ATTACH binds it, after which mmap(2) of the file maps the arena (from
 * offset 0, MAP_SHARED only) and EXPORT makes dma-bufs of it.
 */
#ifndef _UAPI_DMAR_ARENA_H
#define _UAPI_DMAR_ARENA_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define DMAR_ARENA_VERSION 1
#define DMAR_ARENA_NAME_MAX 64 /* with the NUL: 1..63 of [A-Za-z0-9._-] */

/* Flags of an arena. */
#define DMAR_ARENA_KEEP (1u << 0)   /* stays after its last user closes, until DESTROY */
#define DMAR_ARENA_CONTIG (1u << 1) /* one physically contiguous block (ENOMEM when
				     * no such range can be freed)
				     */
#define DMAR_ARENA_EXCL (1u << 2)   /* CREATE, ATTACH: this file is the arena's only
				     * binding until it closes (EBUSY otherwise), as one
				     * mount of an arena at a time needs
				     */
#define DMAR_ARENA_FLAGS_ALL (DMAR_ARENA_KEEP | DMAR_ARENA_CONTIG | DMAR_ARENA_EXCL)

struct dmar_arena_create {
	__u32 struct_size;
	__u32 flags;         /* DMAR_ARENA_* */
	__u64 size;          /* bytes, a multiple of page_size, > 0 */
	__u32 page_size;     /* 4096, or 2097152 (huge pages) */
	__s32 numa_node;     /* -1: any */
	char name[DMAR_ARENA_NAME_MAX];
	__u64 reserved[4];
};

/* ATTACH (flags: DMAR_ARENA_EXCL or 0) and DESTROY (flags 0) name an
 * arena; RENAME gives the arena this file is bound to the name in name
 * (EEXIST if taken), and with flags DMAR_ARENA_KEEP makes it kept: a new
 * arena made under a temporary name, without KEEP (so that it goes if its
 * maker dies first), is given its real name and kept once valid.
 */
struct dmar_arena_name {
	__u32 struct_size;
	__u32 flags;
	char name[DMAR_ARENA_NAME_MAX];
};

struct dmar_arena_info {
	__u32 struct_size;
	__u32 flags;         /* out: DMAR_ARENA_* */
	char name[DMAR_ARENA_NAME_MAX]; /* in: the arena ("" = the one this file is bound to) */
	__u64 size;          /* out */
	__u32 page_size;     /* out */
	__s32 numa_node;     /* out: asked for (-1 any) */
	__u32 users;         /* out: files bound, mappings, dma-bufs */
	__u32 reserved0;
	__u64 reserved[4];
};

struct dmar_arena_export {
	__u32 struct_size;
	__u32 flags;         /* O_CLOEXEC, and O_RDWR or O_RDONLY, for the dma-buf's fd */
	__u64 offset;        /* a multiple of 4096 */
	__u64 length;        /* a multiple of 4096, > 0; offset + length <= size */
	__s32 fd;            /* out */
	__u32 reserved0;
	__u64 reserved[2];
};

#define DMAR_ARENA_IOC_MAGIC 0xDA
#define DMAR_ARENA_IOC_CREATE _IOW(DMAR_ARENA_IOC_MAGIC, 1, struct dmar_arena_create)
#define DMAR_ARENA_IOC_ATTACH _IOW(DMAR_ARENA_IOC_MAGIC, 2, struct dmar_arena_name)
#define DMAR_ARENA_IOC_DESTROY _IOW(DMAR_ARENA_IOC_MAGIC, 3, struct dmar_arena_name)
#define DMAR_ARENA_IOC_QUERY _IOWR(DMAR_ARENA_IOC_MAGIC, 4, struct dmar_arena_info)
#define DMAR_ARENA_IOC_EXPORT _IOWR(DMAR_ARENA_IOC_MAGIC, 5, struct dmar_arena_export)
#define DMAR_ARENA_IOC_RENAME _IOW(DMAR_ARENA_IOC_MAGIC, 6, struct dmar_arena_name)

#endif /* _UAPI_DMAR_ARENA_H */
