/* SPDX-License-Identifier: MIT */
/*
 * arena_test - /dev/dmar_arena (kmod/) from user space, run inside the
 * QEMU guest of tests/kmod/run.sh (built static, no libc beyond glibc's).
 *
 * Arenas of 4 KiB pages, of 2 MiB pages and contiguous (past the page
 * allocator's largest block too: one physical run): create, mmap,
 * write and read back; query; sysfs; 2 MiB pages mapped with PMDs; the limits and bad arguments, each
 * with its errno; a dma-buf exported and mapped, then imported into vgem
 * (DRM_IOCTL_PRIME_FD_TO_HANDLE, as the kernel's dma-buf selftests do)
 * and given back by it, mapped and checked both ways; an arena kept after its
 * creator exits, found again; destroy.  TAP-like output; the last line is
 * "arena_test: PASS" or "arena_test: FAIL (N)".
 *
 * "arena_test import FILE [OFFSET]" and "arena_test recv SOCKET FILE"
 * check a dma-buf from dmar export-dmabuf instead: inherited (its fd in
 * DMAR_DMABUF_FD) or received over a Unix socket.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kmod/include/uapi/dmar_arena.h"

/* The few DRM ioctls the vgem import needs (include/uapi/drm/drm.h). */
struct drm_prime_handle {
	uint32_t handle, flags;
	int32_t fd;
};
struct drm_gem_close {
	uint32_t handle, pad;
};
struct drm_version {
	int major, minor, patch;
	size_t name_len;
	char *name;
	size_t date_len;
	char *date;
	size_t desc_len;
	char *desc;
};
#define DRM_IOCTL_VERSION _IOWR('d', 0x00, struct drm_version)
#define DRM_IOCTL_GEM_CLOSE _IOW('d', 0x09, struct drm_gem_close)
#define DRM_IOCTL_PRIME_HANDLE_TO_FD _IOWR('d', 0x2d, struct drm_prime_handle)
#define DRM_IOCTL_PRIME_FD_TO_HANDLE _IOWR('d', 0x2e, struct drm_prime_handle)

#define MiB (1u << 20)

static int failures, n;

static void check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s %d - ", ok ? "ok" : "not ok", ++n);
	vprintf(fmt, ap);
	printf("%s%s\n", ok ? "" : ": ", ok ? "" : strerror(errno));
	va_end(ap);
	fflush(stdout);
	if (!ok)
		failures++;
}

static int dev(void)
{
	int fd = open("/dev/dmar_arena", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("/dev/dmar_arena");
		exit(1);
	}
	return fd;
}

static int create(int fd, const char *name, uint64_t size, uint32_t page, uint32_t flags)
{
	struct dmar_arena_create c = { .struct_size = sizeof(c), .flags = flags, .size = size, .page_size = page,
				       .numa_node = -1 };
	snprintf(c.name, sizeof(c.name), "%s", name);
	return ioctl(fd, DMAR_ARENA_IOC_CREATE, &c);
}

static int by_name_flags(int fd, unsigned long cmd, const char *name, uint32_t flags)
{
	struct dmar_arena_name a = { .struct_size = sizeof(a), .flags = flags };
	snprintf(a.name, sizeof(a.name), "%s", name);
	return ioctl(fd, cmd, &a);
}

static int by_name(int fd, unsigned long cmd, const char *name)
{
	struct dmar_arena_name a = { .struct_size = sizeof(a) };
	snprintf(a.name, sizeof(a.name), "%s", name);
	return ioctl(fd, cmd, &a);
}

static int export(int fd, uint64_t off, uint64_t len)
{
	struct dmar_arena_export e = { .struct_size = sizeof(e), .flags = O_RDWR | O_CLOEXEC, .offset = off,
				       .length = len };
	return ioctl(fd, DMAR_ARENA_IOC_EXPORT, &e) < 0 ? -1 : e.fd;
}

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i += 4) {
		seed = seed * 1103515245u + 12345u;
		memcpy(p + i, &seed, len - i < 4 ? len - i : 4);
	}
}

/* errno of a call that must fail, as "want" */
#define FAILS(call, want, what)                                                                       \
	do {                                                                                          \
		errno = 0;                                                                            \
		int rc_ = (call);                                                                     \
		int e_ = errno;                                                                       \
		check(rc_ < 0 && e_ == (want), "%s: %s (got %d, %s)", what, #want, rc_, strerror(e_)); \
	} while (0)

/* An arena of size bytes of page-size pages: mapped, written, read back
 * through a second mapping. */
static void arena_rw(const char *name, uint64_t size, uint32_t page, uint32_t flags)
{
	int fd = dev();
	check(create(fd, name, size, page, flags) == 0, "create %s (%llu MiB, pages of %u, flags %u)", name,
	      (unsigned long long)(size / MiB), page, flags);
	uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(m != MAP_FAILED, "mmap %s", name);
	if (m == MAP_FAILED)
		return;
	int zero = 1;
	for (uint64_t i = 0; i < size && zero; i += 4096)
		zero = m[i] == 0 && m[i + 4095] == 0;
	check(zero, "%s starts zeroed", name);
	fill(m, size, 1);
	uint8_t *m2 = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	check(m2 != MAP_FAILED && memcmp(m, m2, size) == 0, "%s: a second mapping sees the bytes", name);
	struct dmar_arena_info q = { .struct_size = sizeof(q) };
	int qr = ioctl(fd, DMAR_ARENA_IOC_QUERY, &q);
	check(qr == 0 && q.size == size && q.page_size == page && !strcmp(q.name, name) && q.users == 3,
	      "query %s: size %llu, page %u, users %u (the file and two mappings)", name, (unsigned long long)q.size,
	      q.page_size, q.users);
	char path[128], buf[64] = "";
	snprintf(path, sizeof(path), "/sys/kernel/dmar_arena/%s/size", name);
	int s = open(path, O_RDONLY);
	ssize_t got = s >= 0 ? read(s, buf, sizeof(buf) - 1) : -1;
	if (s >= 0)
		close(s);
	check(got > 0 && strtoull(buf, NULL, 10) == size, "sysfs %s: %s", path, buf);
	munmap(m2, size);
	munmap(m, size);
	close(fd); /* no KEEP: the arena goes */
	fd = dev();
	FAILS(by_name(fd, DMAR_ARENA_IOC_ATTACH, name), ENOENT, "an arena without keep is gone after its last user");
	close(fd);
}

/* A field ("FilePmdMapped:") of the mapping holding addr in
 * /proc/self/smaps, in kB; -1 if not found. */
static long smaps_kb(const void *addr, const char *field)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[256];
	int in = 0;
	long v = -1;
	unsigned long lo, hi;

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (in && !strncmp(line, field, strlen(field))) {
			v = strtol(line + strlen(field), NULL, 10);
			break;
		}
	}
	if (f)
		fclose(f);
	return v;
}

static long meminfo_kb(const char *field)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			v = strtol(line + strlen(field), NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/*
 * A contiguous arena past the page allocator's largest block (4 MiB on
 * x86-64): one run of physical pages, as their frame numbers in
 * /proc/self/pagemap (which root reads) show, zeroed, written and read
 * back like the others; and every page back after it goes.
 */
static void contig_large(uint32_t page)
{
	const uint64_t size = 40 * MiB;
	long free0 = meminfo_kb("MemFree:");
	char name[32];
	snprintf(name, sizeof(name), "contig40-%u", page);
	arena_rw(name, size, page, DMAR_ARENA_CONTIG);
	int fd = dev();
	check(create(fd, name, size, page, DMAR_ARENA_CONTIG) == 0, "create %s again", name);
	uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(m != MAP_FAILED, "mmap %s", name);
	if (m == MAP_FAILED) {
		close(fd);
		return;
	}
	for (uint64_t i = 0; i < size; i += 4096)
		m[i] = 1;
	int pm = open("/proc/self/pagemap", O_RDONLY);
	uint64_t first = 0, bad = 0, e;
	for (uint64_t i = 0; i < size / 4096; i++) {
		if (pread(pm, &e, 8, (off_t)(((uintptr_t)m / 4096 + i) * 8)) != 8 || !(e >> 63)) {
			bad++;
			continue;
		}
		e &= (1ull << 55) - 1;
		if (i == 0)
			first = e;
		else if (e != first + i)
			bad++;
	}
	if (pm >= 0)
		close(pm);
	check(pm >= 0 && first && !bad, "%s is one physical run from frame %#llx (%llu pages out of place)", name,
	      (unsigned long long)first, (unsigned long long)bad);
	munmap(m, size);
	close(fd);
	long free1 = meminfo_kb("MemFree:");
	check(free1 > free0 - 8192, "its pages came back (MemFree %ld -> %ld kB)", free0, free1);
}

/*
 * An arena of 2 MiB pages is mapped with PMDs (an address the module
 * aligns); get_user_pages works through them (process_vm_readv's slow
 * path, vmsplice's fast one), an munmap inside one splits it and the rest
 * reads right, and every page comes back after.
 */
static void huge_mappings(void)
{
	const uint64_t size = 32 * MiB;
	long free0 = meminfo_kb("MemFree:");
	int fd = dev();

	check(create(fd, "pmd", size, 2 * MiB, 0) == 0, "create pmd (32 MiB of 2 MiB pages)");
	uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(m != MAP_FAILED && ((uintptr_t)m & (2 * MiB - 1)) == 0, "mmap pmd at a 2 MiB-aligned address (%p)", m);
	if (m == MAP_FAILED)
		return;
	fill(m, size, 4);
	long pmd = smaps_kb(m, "FilePmdMapped:");
	check(pmd == (long)(size >> 10), "mapped with PMDs: FilePmdMapped %ld kB", pmd);
	uint8_t *want = malloc(size), *got = malloc(size);
	memcpy(want, m, size);
	struct iovec li = { .iov_base = got, .iov_len = size }, ri = { .iov_base = m, .iov_len = size };
	check(process_vm_readv(getpid(), &li, 1, &ri, 1, 0) == (ssize_t)size && memcmp(got, want, size) == 0,
	      "get_user_pages through the PMDs (process_vm_readv)");
	int p[2];
	struct iovec vi = { .iov_base = m + 3 * MiB + 8192, .iov_len = 65536 };
	check(pipe(p) == 0 && vmsplice(p[1], &vi, 1, 0) == 65536 && read(p[0], got, 65536) == 65536 &&
		      memcmp(got, want + 3 * MiB + 8192, 65536) == 0,
	      "get_user_pages_fast through them (vmsplice)");
	close(p[0]);
	close(p[1]);
	check(munmap(m + 5 * MiB, MiB) == 0, "munmap 1 MiB inside a PMD");
	check(memcmp(m, want, 5 * MiB) == 0 && memcmp(m + 6 * MiB, want + 6 * MiB, size - 6 * MiB) == 0,
	      "the rest reads right after the split");
	pmd = smaps_kb(m + 8 * MiB, "FilePmdMapped:");
	check(pmd == (long)((size - 6 * MiB) >> 10), "the mapping after the hole keeps its PMDs (%ld kB)", pmd);
	munmap(m, 5 * MiB);
	munmap(m + 6 * MiB, size - 6 * MiB);
	close(fd);
	free(want);
	free(got);
	long free1 = meminfo_kb("MemFree:");
	check(free1 > free0 - 8192, "the pages came back after unmap and close (MemFree %ld -> %ld kB)", free0, free1);
}

static void bad_arguments(void)
{
	int fd = dev();
	FAILS(create(fd, "z", 0, 4096, 0), EINVAL, "size 0");
	FAILS(create(fd, "z", 4097, 4096, 0), EINVAL, "size not a multiple of the page");
	FAILS(create(fd, "z", 3 * MiB, 2 * MiB, 0), EINVAL, "3 MiB of 2 MiB pages");
	FAILS(create(fd, "z", 4096, 12345, 0), EINVAL, "page size 12345");
	FAILS(create(fd, "z", 4096, 4096, 1u << 7), EINVAL, "unknown flag");
	FAILS(create(fd, "", 4096, 4096, 0), EINVAL, "empty name");
	FAILS(create(fd, "a/b", 4096, 4096, 0), EINVAL, "name with '/'");
	FAILS(create(fd, "..", 4096, 4096, 0), EINVAL, "name '..'");
	FAILS(create(fd, "big", 128 * MiB, 4096, 0), ENOSPC, "past max_total_mb (64)");
	FAILS(create(fd, "huge", 128 * MiB, 4096, DMAR_ARENA_CONTIG), ENOSPC, "contiguous past max_total_mb");
	struct dmar_arena_create c = { .struct_size = 8, .size = 4096, .page_size = 4096 };
	snprintf(c.name, sizeof(c.name), "small");
	FAILS(ioctl(fd, DMAR_ARENA_IOC_CREATE, &c), EINVAL, "struct_size smaller than version 1's");
	struct {
		struct dmar_arena_create c;
		uint64_t later;
	} big = { .c = { .struct_size = sizeof(big), .size = 4096, .page_size = 4096 }, .later = 1 };
	snprintf(big.c.name, sizeof(big.c.name), "later");
	FAILS(ioctl(fd, DMAR_ARENA_IOC_CREATE, &big), E2BIG, "a later version's field set");
	big.later = 0;
	check(ioctl(fd, DMAR_ARENA_IOC_CREATE, &big) == 0, "a larger struct with zeros beyond ours is fine");
	FAILS(create(fd, "again", 4096, 4096, 0), EBUSY, "a second create on a bound file");
	int fd2 = dev();
	FAILS(create(fd2, "later", 4096, 4096, 0), EEXIST, "a name in use");
	FAILS(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd2, 0) == MAP_FAILED ? -1 : 0, ENODEV,
	      "mmap of a file bound to no arena");
	FAILS(export(fd2, 0, 4096), ENODEV, "export from a file bound to no arena");
	FAILS(mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0, EINVAL, "mmap past the end");
	FAILS(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 4096) == MAP_FAILED ? -1 : 0, EINVAL, "mmap at the end");
	FAILS(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) == MAP_FAILED ? -1 : 0, EINVAL,
	      "a private mapping");
	FAILS(export(fd, 0, 8192), EINVAL, "export past the end");
	FAILS(export(fd, 100, 4096), EINVAL, "export at an odd offset");
	FAILS(export(fd, 0, 0), EINVAL, "export of nothing");
	FAILS(by_name(fd2, DMAR_ARENA_IOC_DESTROY, "nosuch"), ENOENT, "destroy of an unknown arena");
	FAILS(ioctl(fd, _IO(DMAR_ARENA_IOC_MAGIC, 99), 0), ENOTTY, "an unknown ioctl");
	check(by_name(fd2, DMAR_ARENA_IOC_DESTROY, "later") == 0, "destroy (the name goes; its users keep it)");
	FAILS(by_name(fd2, DMAR_ARENA_IOC_DESTROY, "later"), ENOENT, "a second destroy");
	close(fd2);
	close(fd);
}

/* vgem's card (DRM_IOCTL_VERSION names the driver), or -1. */
static int vgem_card(void)
{
	char path[32], name[32];
	for (int k = 0; k < 8; k++) {
		snprintf(path, sizeof(path), "/dev/dri/card%d", k);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct drm_version v = { .name_len = sizeof(name) - 1, .name = name };
		memset(name, 0, sizeof(name));
		if (ioctl(fd, DRM_IOCTL_VERSION, &v) == 0 && !strcmp(name, "vgem"))
			return fd;
		close(fd);
	}
	return -1;
}

/*
 * buf imported into vgem and given back by it: the mapping of the
 * dma-buf vgem makes of its handle (len bytes), or NULL.  The import
 * attaches and maps it (the exporter's sg table, DMA-mapped for vgem's
 * device); vgem maps no imported object itself (drm_gem_dumb_map_offset
 * refuses), so the bytes are seen through the dma-buf it gives back.  The
 * handle is closed before returning: the mapping holds the dma-buf.
 */
static uint8_t *through_vgem(int buf, size_t len)
{
	int card = vgem_card();
	check(card >= 0, "vgem's /dev/dri/card");
	if (card < 0)
		return NULL;
	struct drm_prime_handle h = { .fd = buf };
	int r = ioctl(card, DRM_IOCTL_PRIME_FD_TO_HANDLE, &h);
	check(r == 0 && h.handle != 0, "vgem imports the dma-buf (handle %u)", h.handle);
	struct drm_prime_handle back = { .handle = h.handle, .flags = O_CLOEXEC | O_RDWR, .fd = -1 };
	r = r ? r : ioctl(card, DRM_IOCTL_PRIME_HANDLE_TO_FD, &back);
	check(r == 0 && back.fd >= 0, "vgem exports the handle back as a dma-buf");
	uint8_t *v = back.fd >= 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, back.fd, 0) : MAP_FAILED;
	check(v != MAP_FAILED, "vgem's dma-buf maps");
	if (back.fd >= 0)
		close(back.fd);
	struct drm_gem_close gc = { .handle = h.handle };
	if (h.handle)
		check(ioctl(card, DRM_IOCTL_GEM_CLOSE, &gc) == 0, "vgem lets it go");
	close(card);
	return v == MAP_FAILED ? NULL : v;
}

static void dmabuf(void)
{
	const uint64_t size = 4 * MiB, off = MiB, len = 2 * MiB;
	int fd = dev();
	check(create(fd, "dmabuf", size, 4096, 0) == 0, "create dmabuf");
	uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(m != MAP_FAILED, "mmap dmabuf");
	if (m == MAP_FAILED)
		return;
	fill(m, size, 2);
	int buf = export(fd, off, len);
	check(buf >= 0, "export [1 MiB, 3 MiB) as a dma-buf");
	uint8_t *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, buf, 0);
	check(b != MAP_FAILED && memcmp(b, m + off, len) == 0, "the dma-buf's mapping shows its range");
	FAILS(mmap(NULL, len + 4096, PROT_READ, MAP_SHARED, buf, 0) == MAP_FAILED ? -1 : 0, EINVAL,
	      "mmap past the dma-buf's end");
	uint8_t *v = through_vgem(buf, len);
	if (v) {
		check(memcmp(v, m + off, len) == 0, "that dma-buf shows the arena's bytes");
		memcpy(v + 4096, "written through vgem", 20);
		check(memcmp(m + off + 4096, "written through vgem", 20) == 0, "a write through it is in the arena");
		munmap(v, len);
	}
	/* The dma-buf holds the arena after every fd and mapping went. */
	uint8_t *want = malloc(len);
	memcpy(want, m + off, len);
	munmap(m, size);
	close(fd);
	check(b != MAP_FAILED && memcmp(b, want, len) == 0, "the dma-buf's mapping outlives the arena's file");
	free(want);
	munmap(b, len);
	close(buf);
	fd = dev();
	FAILS(by_name(fd, DMAR_ARENA_IOC_ATTACH, "dmabuf"), ENOENT, "gone with its last dma-buf");
	close(fd);
}

static void kept(void)
{
	const uint64_t size = 2 * MiB;
	pid_t pid = fork();
	if (pid == 0) {
		int fd = dev();
		if (create(fd, "kept", size, 2 * MiB, DMAR_ARENA_KEEP) < 0)
			_exit(2);
		uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			_exit(3);
		fill(m, size, 3);
		_exit(0); /* no munmap, no close: the exit does both */
	}
	int st;
	check(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child creates arena kept and exits");
	int fd = dev();
	check(by_name(fd, DMAR_ARENA_IOC_ATTACH, "kept") == 0, "kept is found again after its creator exited");
	uint8_t *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	uint8_t *want = malloc(size);
	fill(want, size, 3);
	check(m != MAP_FAILED && memcmp(m, want, size) == 0, "kept holds what its creator wrote");
	struct dmar_arena_info q = { .struct_size = sizeof(q) };
	snprintf(q.name, sizeof(q.name), "kept");
	int qfd = dev();
	int qr = ioctl(qfd, DMAR_ARENA_IOC_QUERY, &q);
	check(qr == 0 && (q.flags & DMAR_ARENA_KEEP) && q.users == 2,
	      "query by name: keep, users %u (this file and its mapping)", q.users);
	check(by_name(qfd, DMAR_ARENA_IOC_DESTROY, "kept") == 0, "destroy kept");
	FAILS(ioctl(qfd, DMAR_ARENA_IOC_QUERY, &q), ENOENT, "destroyed: no longer found by name");
	check(m != MAP_FAILED && memcmp(m, want, size) == 0, "its mapping still holds the bytes after the destroy");
	free(want);
	munmap(m, size);
	close(fd);
	close(qfd);
	check(access("/sys/kernel/dmar_arena/kept", F_OK) < 0, "its sysfs entry is gone");
}

/* One binding at a time (DMAR_ARENA_EXCL), and RENAME: how dmarfs makes
 * an arena under a temporary name and gives it its own when valid. */
static void exclusive_rename(void)
{
	int fd = dev(), fd2 = dev();
	check(create(fd, "tmp.1", 2 * MiB, 4096, DMAR_ARENA_EXCL) == 0, "create tmp.1, exclusive, not kept");
	FAILS(by_name(fd2, DMAR_ARENA_IOC_ATTACH, "tmp.1"), EBUSY, "attach of an arena bound exclusively");
	FAILS(by_name_flags(fd2, DMAR_ARENA_IOC_ATTACH, "tmp.1", DMAR_ARENA_EXCL), EBUSY, "exclusive attach of it");
	check(by_name_flags(fd, DMAR_ARENA_IOC_RENAME, "final", DMAR_ARENA_KEEP) == 0, "rename tmp.1 to final, kept");
	check(access("/sys/kernel/dmar_arena/final/size", R_OK) == 0 && access("/sys/kernel/dmar_arena/tmp.1", F_OK) < 0,
	      "sysfs follows the rename");
	FAILS(by_name(fd2, DMAR_ARENA_IOC_RENAME, "x"), ENODEV, "rename from a file bound to no arena");
	int fd3 = dev();
	check(create(fd3, "other", 4096, 4096, 0) == 0, "create other");
	FAILS(by_name(fd3, DMAR_ARENA_IOC_RENAME, "final"), EEXIST, "rename onto a name in use");
	close(fd3);
	close(fd); /* kept by the rename: final stays, free to bind again */
	check(by_name_flags(fd2, DMAR_ARENA_IOC_ATTACH, "final", DMAR_ARENA_EXCL) == 0,
	      "exclusive attach once the exclusive file closed");
	int fd4 = dev();
	FAILS(by_name(fd4, DMAR_ARENA_IOC_ATTACH, "final"), EBUSY, "another attach meanwhile");
	close(fd2);
	check(by_name(fd4, DMAR_ARENA_IOC_ATTACH, "final") == 0, "a plain attach after it closed");
	int fd5 = dev();
	FAILS(by_name_flags(fd5, DMAR_ARENA_IOC_ATTACH, "final", DMAR_ARENA_EXCL), EBUSY,
	      "exclusive attach while another file is bound");
	close(fd5);
	check(by_name(fd4, DMAR_ARENA_IOC_DESTROY, "final") == 0, "destroy final");
	close(fd4);
}

/* FILE's bytes: a malloc'd copy of its whole content, its size in *len. */
static uint8_t *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t end = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);
	uint8_t *b = end > 0 ? malloc((size_t)end) : NULL;
	if (!b || pread(fd, b, (size_t)end, 0) != end) {
		printf("arena_test: cannot read %s\n", path);
		exit(1);
	}
	close(fd);
	*len = (size_t)end;
	return b;
}

/*
 * A dma-buf from dmar export-dmabuf (fd buf, size bytes, its first len
 * FILE's bytes from offset off): its own mapping and vgem's round trip
 * show those bytes, zeros after them.
 */
static void imported(int buf, uint64_t size, uint64_t len, const char *file, uint64_t off)
{
	size_t flen;
	uint8_t *want = slurp(file, &flen);
	check(off + len <= flen && size >= len && size % 4096 == 0, "dma-buf of %llu bytes (%llu of %s from %llu)",
	      (unsigned long long)size, (unsigned long long)len, file, (unsigned long long)off);
	if (off + len > flen)
		return;
	uint8_t *b = mmap(NULL, size, PROT_READ, MAP_SHARED, buf, 0);
	check(b != MAP_FAILED, "the dma-buf maps");
	if (b != MAP_FAILED) {
		check(memcmp(b, want + off, len) == 0, "it holds the file's bytes");
		int zero = 1;
		for (uint64_t k = len; k < size; k++)
			zero &= b[k] == 0;
		check(zero, "zeros after them, to its end");
		munmap(b, size);
	}
	uint8_t *v = through_vgem(buf, size);
	if (v) {
		check(memcmp(v, want + off, len) == 0, "vgem's import of it holds the file's bytes");
		munmap(v, size);
	}
	free(want);
}

static uint64_t env_num(const char *name)
{
	const char *v = getenv(name);
	if (!v) {
		printf("arena_test: no %s\n", name);
		exit(1);
	}
	return strtoull(v, NULL, 10);
}

/* arena_test import FILE [OFFSET]: the dma-buf this process inherited. */
static int mode_import(const char *file, uint64_t off)
{
	imported((int)env_num("DMAR_DMABUF_FD"), env_num("DMAR_DMABUF_SIZE"), env_num("DMAR_DMABUF_LENGTH"), file, off);
	return failures != 0;
}

/* arena_test recv SOCKET FILE: listen at SOCKET, take one dma-buf sent
 * with its "dmabuf SIZE LENGTH" line, check it. */
static int mode_recv(const char *sock, const char *file)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	unlink(sock);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0) {
		perror(sock);
		return 1;
	}
	int s = accept(l, NULL, NULL);
	char line[64] = { 0 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec io = { .iov_base = line, .iov_len = sizeof(line) - 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	ssize_t got = s < 0 ? -1 : recvmsg(s, &m, 0);
	struct cmsghdr *c = got > 0 ? CMSG_FIRSTHDR(&m) : NULL;
	unsigned long long size = 0, len = 0;
	int fd = -1;
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	check(fd >= 0 && sscanf(line, "dmabuf %llu %llu", &size, &len) == 2, "a dma-buf came with '%.*s'",
	      (int)strcspn(line, "\n"), line);
	if (fd >= 0)
		imported(fd, size, len, file, 0);
	unlink(sock);
	return failures != 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "import"))
		return mode_import(argv[2], argc > 3 ? strtoull(argv[3], NULL, 0) : 0);
	if (argc == 4 && !strcmp(argv[1], "recv"))
		return mode_recv(argv[2], argv[3]);
	arena_rw("a4k", 8 * MiB, 4096, 0);
	arena_rw("a2m", 16 * MiB, 2 * MiB, 0);
	arena_rw("contig", 2 * MiB, 4096, DMAR_ARENA_CONTIG);
	contig_large(4096);
	contig_large(2 * MiB);
	huge_mappings();
	bad_arguments();
	dmabuf();
	kept();
	exclusive_rename();
	if (failures)
		printf("arena_test: FAIL (%d)\n", failures);
	else
		printf("arena_test: PASS\n");
	return failures != 0;
}
