/* SPDX-License-Identifier: MIT */
/*
 * The backing of an arena, best first:
 *
 *  hugetlb   memfd_create(MFD_HUGETLB | MFD_HUGE_xx) and fallocate() of the
 *            whole size.  The fallocate is the point: hugetlb memory comes
 *            from a fixed pool, and a page that cannot be had at fault time
 *            is a SIGBUS in whichever thread touched it.  Allocating every
 *            page up front turns a short pool into -ENOSPC here, where it can
 *            be reported ("3 free, 512 needed") and fallen back from.  The
 *            pool pages are the machine's already, so this costs only their
 *            zeroing.  Sizes come from libhugetlbfs, which knows what the
 *            kernel offers.
 *  THP       transparent huge pages.  For a memfd these depend on
 *            shmem_enabled, for anonymous memory on enabled, and the two
 *            are set independently (Debian's default is shmem "never",
 *            anon "madvise", where MADV_HUGEPAGE on a memfd does nothing).
 *            So a memfd is used when shmem THP can work, else anonymous
 *            memory when anonymous THP can, and describe says which and
 *            what the kernel actually gave after populate (smaps).
 *  normal    a memfd of base pages.
 *
 * A named region (rundir.h) is a file instead of a memfd, in a hugetlbfs
 * mount for hugetlb pages and in a tmpfs mount otherwise (ours has
 * huge=within_size, which gives shmem THP whatever shmem_enabled says short
 * of "deny", so no anonymous memory is ever needed there): it outlives the
 * process, and the next open of the name maps the same pages.  Without a
 * name, a memfd is preferred wherever it gives the same pages, because a
 * file descriptor can be passed on (or dma-buf'd) and anonymous memory
 * cannot.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <hugetlbfs.h>

#include "region.h"
#include "kmod.h"
#include "rundir.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HUGEPAGES_SYSFS "/sys/kernel/mm/hugepages"
#define THP_SYSFS "/sys/kernel/mm/transparent_hugepage"
#define MAX_HUGE_SIZES 16

/* Reasons a better backing was not used, joined with "; ". */
struct why {
	char buf[384];
	size_t n;
	size_t last; /* start of the reason added last */
};

static void __attribute__((format(printf, 2, 3))) why_add(struct why *w, const char *fmt, ...)
{
	if (w->n + 3 >= sizeof(w->buf))
		return;
	if (w->n) {
		memcpy(w->buf + w->n, "; ", 3);
		w->n += 2;
	}
	w->last = w->n;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(w->buf + w->n, sizeof(w->buf) - w->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		w->n += (size_t)k < sizeof(w->buf) - w->n ? (size_t)k : sizeof(w->buf) - w->n - 1;
}

/* The reason added last, for a strict failure's message. */
static const char *why_last(const struct why *w)
{
	return w->buf + w->last;
}

static const char *size_str(uint64_t b, char *out, size_t cap)
{
	if (b >= (1ull << 30) && !(b & ((1ull << 30) - 1)))
		snprintf(out, cap, "%llu GiB", (unsigned long long)(b >> 30));
	else if (b >= (1ull << 20) && !(b & ((1ull << 20) - 1)))
		snprintf(out, cap, "%llu MiB", (unsigned long long)(b >> 20));
	else
		snprintf(out, cap, "%llu KiB", (unsigned long long)(b >> 10));
	return out;
}

static int read_u64(const char *path, uint64_t *v)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	unsigned long long x;
	int ok = fscanf(f, "%llu", &x) == 1;
	fclose(f);
	if (!ok)
		return -EINVAL;
	*v = x;
	return 0;
}

/* The [selected] word of a sysfs choice file such as "always [madvise] never". */
static int read_choice(const char *path, char *out, size_t cap)
{
	char line[256];
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char *ok = fgets(line, sizeof(line), f);
	fclose(f);
	if (!ok)
		return -EINVAL;
	char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
	if (!b || (size_t)(b - a - 1) >= cap)
		return -EINVAL;
	memcpy(out, a + 1, (size_t)(b - a - 1));
	out[b - a - 1] = '\0';
	return 0;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int memfd(unsigned flags)
{
	/* MFD_NOEXEC_SEAL (6.3+) keeps the kernel from warning about an
	 * executable memfd; older kernels reject the flag, so retry. */
	int fd = memfd_create("dmar-arena", MFD_CLOEXEC | MFD_NOEXEC_SEAL | flags);
	if (fd < 0 && errno == EINVAL)
		fd = memfd_create("dmar-arena", MFD_CLOEXEC | flags);
	return fd < 0 ? -errno : fd;
}

/* The file of a new named region: unnamed (O_TMPFILE) in the directory of
 * its backing until dmar_region_publish links it, so that a crash while
 * it is sized and populated leaves nothing behind; locked from the start. */
static int named_fd(struct dmar_region *r, const struct dmar_arena_opts *o, uint64_t ps, struct why *why)
{
	char dir[PATH_MAX];
	struct dmar_error e = { 0 };
	int fd = dmar_rundir_dir(ps, true, dir, &e);
	if (fd < 0) {
		why_add(why, "%s", e.msg);
		return fd;
	}
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		fd = -errno;
		why_add(why, "a new file in %s: %s", dir, strerror(-fd));
		return fd;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e2 = -errno;
		close(fd);
		return e2;
	}
	snprintf(r->path, sizeof(r->path), "%.*s/%s.arena", PATH_MAX - 200, dir, o->name);
	r->named = true;
	return fd;
}

/* Build the page tables of a mapping of pages that exist already (an
 * attached file): MADV_POPULATE_WRITE leaves the contents alone; a kernel
 * without it faults them in as they are touched. */
static void populate_existing(uint8_t *p, uint64_t len)
{
	while (madvise(p, len, MADV_POPULATE_WRITE) < 0 && errno == EINTR)
		;
}

/* Fault every page in now, so the first write later does not pay for it. */
static int populate(uint8_t *p, uint64_t len, uint64_t step)
{
	for (;;) {
		if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EINVAL)
			return -errno;
		break;
	}
	/* Before 5.14: a write per page.  The region is fresh, so writing a
	 * zero changes nothing but makes the fault a write fault (a read
	 * fault would map the shared zero page and allocate nothing). */
	for (uint64_t o = 0; o < len; o += step)
		((volatile uint8_t *)p)[o] = 0;
	return 0;
}

struct pool {
	uint64_t free, total, resv, surplus_max;
	bool known; /* free_hugepages could be read */
};

static void hugetlb_pool(uint64_t ps, struct pool *p)
{
	static const char *const f[] = { "free_hugepages", "nr_hugepages", "resv_hugepages",
					 "nr_overcommit_hugepages" };
	uint64_t *v[] = { &p->free, &p->total, &p->resv, &p->surplus_max };
	char path[128];

	for (int i = 0; i < 4; i++) {
		*v[i] = 0;
		snprintf(path, sizeof(path), HUGEPAGES_SYSFS "/hugepages-%llukB/%s",
			 (unsigned long long)(ps >> 10), f[i]);
		int e = read_u64(path, v[i]);
		if (i == 0)
			p->known = e == 0;
	}
}

/* The kernel's default huge page size (the one vm.nr_hugepages sizes). */
static uint64_t default_huge_size(void)
{
	char line[128];
	uint64_t kb = 0;
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1) {
			kb = v;
			break;
		}
	}
	fclose(f);
	return kb << 10;
}

static void why_short(struct why *why, uint64_t ps, const struct pool *p, uint64_t need)
{
	char pss[32], knob[96];

	if (ps == default_huge_size())
		snprintf(knob, sizeof(knob), "vm.nr_hugepages");
	else
		snprintf(knob, sizeof(knob), HUGEPAGES_SYSFS "/hugepages-%llukB/nr_hugepages",
			 (unsigned long long)(ps >> 10));
	why_add(why,
		"not enough free %s huge pages: %llu free (%llu reserved) of %llu in the pool, %llu needed (raise %s, see scripts/dmar-hugepages)",
		size_str(ps, pss, sizeof(pss)), (unsigned long long)p->free,
		(unsigned long long)p->resv, (unsigned long long)p->total,
		(unsigned long long)need, knob);
}

/* The region is the mapping p of len bytes (of fd, or -1) now. */
static void mapped(struct dmar_region *r, void *p, uint64_t len, int fd, enum dmar_backing backing,
		   uint64_t pagesize)
{
	r->base = p;
	r->size = len;
	r->fd = fd;
	r->backing = backing;
	r->pagesize = pagesize;
}

static int try_hugetlb(struct dmar_region *r, const struct dmar_arena_opts *o, uint64_t ps,
		       struct why *why)
{
	char pss[32];
	uint64_t len = round_up(o->size, ps), need = len / ps;
	struct pool pool;
	int fd, e;

	/* Read the pool first: a failed fallocate holds the pages it got
	 * until the memfd is closed, so afterwards the pool looks empty.
	 * And when the pool plainly cannot cover the size (no surplus pages
	 * allowed), do not zero pages only to give them back. */
	hugetlb_pool(ps, &pool);
	if (pool.known && !pool.surplus_max &&
	    (pool.free < pool.resv || pool.free - pool.resv < need)) {
		why_short(why, ps, &pool, need);
		return -ENOMEM;
	}
	size_str(ps, pss, sizeof(pss));
	if (o->name) {
		if ((fd = named_fd(r, o, ps, why)) < 0)
			return -ENOMEM; /* no hugetlbfs: a lesser backing */
	} else {
		fd = memfd(MFD_HUGETLB | ((unsigned)__builtin_ctzll(ps) << MFD_HUGE_SHIFT));
		if (fd < 0) {
			why_add(why, "memfd_create for %s huge pages: %s", pss, strerror(-fd));
			return fd == -ENOMEM ? -ENOMEM : fd;
		}
	}
	if (ftruncate(fd, (off_t)len) < 0) {
		e = -errno;
		why_add(why, "ftruncate of a %s hugetlb memfd: %s", pss, strerror(-e));
		goto fail;
	}
	while (fallocate(fd, 0, 0, (off_t)len) < 0) {
		e = -errno;
		if (e == -EINTR)
			continue;
		if (e == -ENOSPC || e == -ENOMEM) {
			/* Raced with another user of the pool, or a hugetlb
			 * cgroup limit: report the pool as it was. */
			why_short(why, ps, &pool, need);
			e = -ENOMEM;
		} else {
			why_add(why, "fallocate of %s huge pages: %s", pss, strerror(-e));
		}
		goto fail;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		e = -errno;
		why_add(why, "mmap of %s huge pages: %s", pss, strerror(-e));
		goto fail;
	}
	if (o->populate) {
		/* The pages exist already; this only builds the page tables. */
		e = populate(p, len, ps);
		if (e < 0) {
			why_add(why, "populate of %s huge pages: %s", pss, strerror(-e));
			munmap(p, len);
			goto fail;
		}
	}
	mapped(r, p, len, fd, DMAR_BACKING_HUGETLB, ps);
	return 0;
fail:
	close(fd);
	return e;
}

struct thp_mode {
	char anon[16];  /* effective "enabled" for PMD-sized anonymous THP */
	char shmem[16]; /* effective "shmem_enabled" for PMD-sized shmem THP */
	uint64_t pmd;
};

/* The top-level files apply to the PMD size unless its per-size file (mTHP,
 * 6.8+) overrides them with something other than "inherit". */
static void thp_mode(struct thp_mode *m)
{
	char path[128], v[16];

	strcpy(m->anon, "never");
	strcpy(m->shmem, "never");
	if (read_u64(THP_SYSFS "/hpage_pmd_size", &m->pmd) < 0)
		m->pmd = 0;
	read_choice(THP_SYSFS "/enabled", m->anon, sizeof(m->anon));
	read_choice(THP_SYSFS "/shmem_enabled", m->shmem, sizeof(m->shmem));
	if (!m->pmd)
		return;
	snprintf(path, sizeof(path), THP_SYSFS "/hugepages-%llukB/enabled",
		 (unsigned long long)(m->pmd >> 10));
	if (read_choice(path, v, sizeof(v)) == 0 && strcmp(v, "inherit"))
		strcpy(m->anon, v);
	snprintf(path, sizeof(path), THP_SYSFS "/hugepages-%llukB/shmem_enabled",
		 (unsigned long long)(m->pmd >> 10));
	if (read_choice(path, v, sizeof(v)) == 0 && strcmp(v, "inherit"))
		strcpy(m->shmem, v);
}

static bool shmem_thp_on(const struct thp_mode *m)
{
	/* "within_size" is on for us: the memfd is never written past i_size. */
	return !strcmp(m->shmem, "always") || !strcmp(m->shmem, "within_size") ||
	       !strcmp(m->shmem, "advise") || !strcmp(m->shmem, "force");
}

static bool anon_thp_on(const struct thp_mode *m)
{
	return !strcmp(m->anon, "always") || !strcmp(m->anon, "madvise");
}

/* Anonymous memory aligned to align, so THP can cover it from the first
 * byte: map more and cut the ends off. */
static void *map_anon_aligned(uint64_t len, uint64_t align)
{
	uint8_t *p = mmap(NULL, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	if (p == MAP_FAILED)
		return MAP_FAILED;
	uint8_t *a = (uint8_t *)round_up((uintptr_t)p, align);
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (a + len < p + len + align)
		munmap(a + len, (size_t)(p + len + align - (a + len)));
	return a;
}

static int try_thp(struct dmar_region *r, const struct dmar_arena_opts *o, uint64_t base_ps,
		   struct why *why, const char **how)
{
	struct thp_mode m;
	uint64_t len = round_up(o->size, base_ps);
	void *p;
	int fd = -1, e;

	thp_mode(&m);
	if (o->name) {
		/* Our tmpfs has huge=within_size: only "deny" or no THP at all
		 * keeps huge pages away. */
		if (!m.pmd || !strcmp(m.shmem, "deny")) {
			why_add(why, "transparent huge pages are off (shmem_enabled=%s)", m.shmem);
			return -EOPNOTSUPP;
		}
		if ((fd = named_fd(r, o, 0, why)) < 0)
			return fd;
		if (ftruncate(fd, (off_t)len) < 0 || fallocate(fd, 0, 0, (off_t)len) < 0) {
			e = -errno;
			why_add(why, "sizing %s: %s", r->path, strerror(-e));
			close(fd);
			return e == -ENOSPC ? -ENOMEM : e;
		}
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		*how = "tmpfs huge=within_size";
	} else if (!m.pmd || (!shmem_thp_on(&m) && !anon_thp_on(&m))) {
		why_add(why, "transparent huge pages are off (enabled=%s, shmem_enabled=%s)", m.anon,
			m.shmem);
		return -EOPNOTSUPP;
	} else if (shmem_thp_on(&m)) {
		fd = memfd(0);
		if (fd < 0)
			return fd;
		if (ftruncate(fd, (off_t)len) < 0) {
			e = -errno;
			close(fd);
			return e;
		}
		/* shmem_get_unmapped_area() aligns this to the PMD size. */
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		*how = "memfd";
	} else {
		p = map_anon_aligned(len, m.pmd);
		*how = "anonymous memory: shmem THP is off";
	}
	if (p == MAP_FAILED) {
		e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	if (madvise(p, len, MADV_HUGEPAGE) < 0) {
		e = -errno;
		why_add(why, "MADV_HUGEPAGE: %s", strerror(-e));
		munmap(p, len);
		if (fd >= 0)
			close(fd);
		return e;
	}
	mapped(r, p, len, fd, DMAR_BACKING_THP, m.pmd);
	return 0;
}

static int map_normal(struct dmar_region *r, const struct dmar_arena_opts *o, uint64_t base_ps,
		      bool no_huge, struct why *why)
{
	uint64_t len = round_up(o->size, base_ps);
	int fd = o->name ? named_fd(r, o, 0, why) : memfd(0), e;

	if (fd < 0)
		return fd;
	/* A file is sized with its pages (fallocate): a tmpfs short of room
	 * fails here, not with SIGBUS at some later write. */
	if (ftruncate(fd, (off_t)len) < 0 || (o->name && fallocate(fd, 0, 0, (off_t)len) < 0)) {
		e = -errno;
		close(fd);
		return e == -ENOSPC ? -ENOMEM : e;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		e = -errno;
		close(fd);
		return e;
	}
	/* pagesize=4K asked for no huge pages: say so even where shmem THP
	 * is "always" (only "force" overrides this). */
	if (no_huge)
		madvise(p, len, MADV_NOHUGEPAGE);
	mapped(r, p, len, fd, DMAR_BACKING_NORMAL, base_ps);
	return 0;
}

struct find {
	const char *name;
	char *path;
};

static int find_in(void *ctx, const char *dir)
{
	struct find *f = ctx;
	struct stat st;
	snprintf(f->path, PATH_MAX, "%.*s/%s.arena", PATH_MAX - 200, dir, f->name);
	return stat(f->path, &st) == 0 && S_ISREG(st.st_mode);
}

int dmar_region_find(const char *name, char path[PATH_MAX])
{
	struct find f = { .name = name, .path = path };
	if (!dmar_rundir_name_ok(name))
		return -EINVAL;
	return dmar_rundir_each(find_in, &f) == 1 ? 0 : -ENOENT;
}

/* Map the existing arena file at path; err says why not. */
static int attach(struct dmar_region *r, const char *path, bool populate, struct dmar_error *err)
{
	struct stat st;
	struct statfs sf;
	int fd = open(path, O_RDWR | O_CLOEXEC), e;
	if (fd < 0)
		return dmar_error_set(err, -errno, "%s: %s", path, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		e = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return dmar_error_set(err, e, "%s: %s", path,
				      e == -EBUSY ? "in use by another dmarfs (one mount per arena)" : strerror(-e));
	}
	if (fstat(fd, &st) < 0 || fstatfs(fd, &sf) < 0) {
		e = -errno;
		close(fd);
		return dmar_error_set(err, e, "%s: %s", path, strerror(-e));
	}
	uint64_t base_ps = (uint64_t)sysconf(_SC_PAGESIZE);
	if (sf.f_type == HUGETLBFS_MAGIC) {
		r->backing = DMAR_BACKING_HUGETLB;
		r->pagesize = (uint64_t)sf.f_bsize;
	} else {
		/* THP or not is the superblock's to say (arena.c). */
		r->backing = DMAR_BACKING_NORMAL;
		r->pagesize = base_ps;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size % r->pagesize) {
		close(fd);
		return dmar_error_set(err, -EUCLEAN, "%s: size %lld is not a multiple of its %llu-byte pages", path,
				      (long long)st.st_size, (unsigned long long)r->pagesize);
	}
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		e = -errno;
		close(fd);
		return dmar_error_set(err, e, "mapping %s: %s", path, strerror(-e));
	}
	/* The pages exist: this only builds the page tables, which the first
	 * touches would otherwise fault in one by one. */
	if (populate)
		populate_existing(p, (uint64_t)st.st_size);
	r->base = p;
	r->size = (uint64_t)st.st_size;
	r->fd = fd;
	r->attached = r->named = r->linked = true;
	snprintf(r->path, sizeof(r->path), "%s", path);
	snprintf(r->desc, sizeof(r->desc), "re-attached %.*s", 400, path);
	return 0;
}

/* The module's name of a kmod region (its path is "kmod:NAME"). */
static const char *kmod_name(const struct dmar_region *r)
{
	return r->path + 5;
}

/* A kmod region of o's name: the module's arena of that name bound (attach)
 * or a new one made. */
static int kmod_open(struct dmar_region *r, const struct dmar_arena_opts *o, bool attach, struct dmar_error *err)
{
	struct dmar_kmod k;
	uint32_t ps = o->pagesize == (uint64_t)sysconf(_SC_PAGESIZE) ? 4096u : 2u << 20;
	int e = attach ? dmar_kmod_attach(&k, o->name, err)
		       : dmar_kmod_create(&k, "dmarfs-new-", round_up(o->size, ps), ps, err);
	if (e < 0)
		return e;
	mapped(r, k.base, k.size, k.fd, DMAR_BACKING_KMOD, k.page_size);
	r->named = true;
	r->attached = r->linked = attach;
	snprintf(r->path, sizeof(r->path), "kmod:%s", o->name);
	/* The module's pages are all mapped at mmap: nothing to populate. */
	snprintf(r->desc, sizeof(r->desc), "%sdmar_arena kernel module, %s pages (%llu; kept by the kernel across daemon restarts)",
		 attach ? "re-attached " : "", k.page_size == 4096 ? "4 KiB" : "2 MiB",
		 (unsigned long long)(k.size / k.page_size));
	return 0;
}

int dmar_region_publish(struct dmar_region *r)
{
	if (!r->named || r->linked)
		return 0;
	if (r->backing == DMAR_BACKING_KMOD) {
		struct dmar_kmod k = { .fd = r->fd };
		int e = dmar_kmod_publish(&k, kmod_name(r));
		if (e == 0)
			r->linked = true;
		return e;
	}
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", r->fd);
	if (linkat(AT_FDCWD, self, AT_FDCWD, r->path, AT_SYMLINK_FOLLOW) < 0)
		return -errno;
	r->linked = true;
	return 0;
}

int dmar_region_unlink(struct dmar_region *r)
{
	if (!r->named || !r->linked)
		return 0;
	r->linked = false;
	if (r->backing == DMAR_BACKING_KMOD)
		return dmar_kmod_destroy(kmod_name(r));
	return unlink(r->path) < 0 ? -errno : 0;
}

/* Remove the arena file at path unless it is in use. */
static int remove_unused(const char *path, struct dmar_error *err)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return dmar_error_set(err, -errno, "%s: %s", path, strerror(errno));
	int e = flock(fd, LOCK_EX | LOCK_NB) < 0 ? (errno == EWOULDBLOCK ? -EBUSY : -errno) : 0;
	if (!e && unlink(path) < 0)
		e = -errno;
	close(fd);
	if (e)
		return dmar_error_set(err, e, "%s: %s", path,
				      e == -EBUSY ? "in use by another dmarfs" : strerror(-e));
	return 0;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

int dmar_region_open(struct dmar_region *r, const struct dmar_arena_opts *o,
		     struct dmar_error *err)
{
	uint64_t base_ps = (uint64_t)sysconf(_SC_PAGESIZE);
	long sizes[MAX_HUGE_SIZES];
	struct why why = { .n = 0 };
	uint64_t want = 0;
	bool no_huge = false, have = false;
	const char *how = NULL;
	char pss[32];
	int n, e;

	*r = (struct dmar_region){ .fd = -1 };
	if (o->name) {
		char path[PATH_MAX];
		if (!dmar_rundir_name_ok(o->name))
			return dmar_error_set(err, -EINVAL,
					      "arena name '%s': 1 to 128 of A-Z a-z 0-9 . _ @ + -, not starting with '.'",
					      o->name);
		if (dmar_region_find(o->name, path) == 0) {
			if (!o->fresh)
				return attach(r, path, o->populate, err);
			if ((e = remove_unused(path, err)) < 0)
				return e;
		}
		/* An arena the kernel module holds is bound wherever it is
		 * (whatever want says: it stays what it was made as); a new
		 * one is the module's when asked, or when the module is
		 * there and can hold the name. */
		if (o->want != DMAR_WANT_MEMORY && dmar_kmod_exists(o->name)) {
			if (!o->fresh)
				return kmod_open(r, o, true, err);
			if ((e = dmar_kmod_drop(o->name, err)) < 0)
				return e;
		}
		if (o->want == DMAR_WANT_KMOD && !dmar_kmod_name_ok(o->name))
			return dmar_error_set(err, -EINVAL, "backing=kmod: the module's arena names are 1 to 63 of A-Z a-z 0-9 . _ -, not '%s'",
					      o->name);
		if (o->want == DMAR_WANT_KMOD && !dmar_kmod_available()) {
			e = open(DMAR_KMOD_DEVICE, O_RDWR | O_CLOEXEC) < 0 ? -errno : -ENODEV;
			return dmar_error_set(err, e, "backing=kmod: " DMAR_KMOD_DEVICE ": %s (load the dmar_arena module: docs/kmod.md)",
					      strerror(-e));
		}
		if (o->want != DMAR_WANT_MEMORY && dmar_kmod_name_ok(o->name) && dmar_kmod_available()) {
			if (o->size > UINT64_MAX - (4u << 20))
				return dmar_error_set(err, -EINVAL, "arena size %llu is too large", (unsigned long long)o->size);
			return kmod_open(r, o, false, err);
		}
	}
	if (o->size > UINT64_MAX - (1ull << 31) || o->size > (uint64_t)PTRDIFF_MAX / 2)
		return dmar_error_set(err, -EINVAL, "arena size %llu is too large",
				      (unsigned long long)o->size);
	n = gethugepagesizes(sizes, MAX_HUGE_SIZES);
	if (n < 0)
		n = 0;
	qsort(sizes, (size_t)n, sizeof(sizes[0]), cmp_long);
	for (int i = 0; i < n; i++)
		if ((uint64_t)sizes[i] == (o->pagesize ? o->pagesize : 2ull << 20))
			have = true;
	if (o->pagesize == base_ps) {
		no_huge = true;
	} else if (o->pagesize == 0) {
		/* Default 2 MiB; on machines without it, the smallest offered. */
		want = have ? 2ull << 20 : n ? (uint64_t)sizes[0] : 0;
		if (!want)
			why_add(&why, "no hugetlb support in this kernel");
	} else if (have) {
		want = o->pagesize;
	} else {
		char list[128] = "";
		size_t k = 0;
		for (int i = 0; i < n && k < sizeof(list) - 16; i++)
			k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s", i ? ", " : "",
					      size_str((uint64_t)sizes[i], pss, sizeof(pss)));
		return dmar_error_set(err, -EINVAL,
				      "pagesize=%llu: not a page size of this machine (base %llu; huge: %s)",
				      (unsigned long long)o->pagesize,
				      (unsigned long long)base_ps, n ? list : "none");
	}

	/* hugetlb at the wanted size, then (unless strict) smaller sizes. */
	for (int i = n - 1; want && i >= 0; i--) {
		uint64_t ps = (uint64_t)sizes[i];
		if (ps > want || ps <= base_ps || (o->strict && ps != want))
			continue;
		e = try_hugetlb(r, o, ps, &why);
		if (e == 0)
			goto mapped;
		if (o->strict)
			return dmar_error_set(err, e, "%s (strict: no fallback)", why_last(&why));
	}
	if (o->strict && !no_huge)
		return dmar_error_set(err, -ENOMEM, "no huge pages: %s (strict: no fallback)",
				      why.n ? why.buf : "none offered");

	if (!no_huge) {
		e = try_thp(r, o, base_ps, &why, &how);
		if (e == 0)
			goto mapped;
		if (e != -EOPNOTSUPP && e != -EINVAL)
			return dmar_error_errno(err, e, "mapping a transparent huge page arena");
	}
	e = map_normal(r, o, base_ps, no_huge, &why);
	if (e < 0)
		return dmar_error_set(err, e, "mapping the arena: %s", why.n ? why_last(&why) : strerror(-e));

mapped:
	if (o->populate && r->backing != DMAR_BACKING_HUGETLB) {
		e = populate(r->base, r->size, base_ps);
		if (e < 0) {
			dmar_region_close(r);
			return dmar_error_set(err, e == -EFAULT ? -ENOMEM : e,
					      "populating %llu bytes of arena: %s",
					      (unsigned long long)o->size, strerror(-e));
		}
	}

	/* what (< 160) + "; fell back because: " + why (< 384) fits desc. */
	_Static_assert(160 + 21 + sizeof(why.buf) <= DMAR_ARENA_DESCRIBE_MAX, "desc too small");
	char what[160];
	size_str(r->pagesize, pss, sizeof(pss));
	switch (r->backing) {
	case DMAR_BACKING_HUGETLB:
		snprintf(what, sizeof(what), "hugetlb %s pages (%s, %llu preallocated)", pss,
			 r->named ? "hugetlbfs file" : "memfd", (unsigned long long)(r->size / r->pagesize));
		break;
	case DMAR_BACKING_THP:
		if (o->populate) {
			/* Say what the kernel gave, not what was asked for. */
			snprintf(what, sizeof(what),
				 "transparent huge pages (%s, MADV_HUGEPAGE): %llu of %llu MiB in huge pages after populate",
				 how, (unsigned long long)(dmar_region_huge_bytes(r) >> 20),
				 (unsigned long long)(r->size >> 20));
		} else {
			snprintf(what, sizeof(what),
				 "transparent huge pages (%s, MADV_HUGEPAGE; given on first touch where the kernel has them)",
				 how);
		}
		break;
	default:
		snprintf(what, sizeof(what), "normal %s pages (%s%s)", pss, r->named ? "tmpfs file" : "memfd",
			 no_huge ? ", huge pages not asked for" : "");
		break;
	}
	snprintf(r->desc, sizeof(r->desc), "%s%s%s", what, why.n ? "; fell back because: " : "",
		 why.buf);
	return 0;
}

void dmar_region_close(struct dmar_region *r)
{
	if (r->base)
		munmap(r->base, r->size);
	if (r->fd >= 0)
		close(r->fd);
	r->base = NULL;
	r->fd = -1;
}

uint64_t dmar_region_huge_bytes(const struct dmar_region *r)
{
	if (r->backing == DMAR_BACKING_HUGETLB)
		return r->size;
	if (r->backing != DMAR_BACKING_THP)
		return 0;

	uintptr_t start = (uintptr_t)r->base, end = start + r->size;
	uint64_t total = 0;
	bool in = false;
	char *line = NULL;
	size_t cap = 0;
	FILE *f = fopen("/proc/self/smaps", "re");
	if (!f)
		return 0;
	while (getline(&line, &cap, f) > 0) {
		unsigned long s, e, kb;
		if (sscanf(line, "%lx-%lx ", &s, &e) == 2) {
			/* Our range may be one VMA or several (split by madvise). */
			in = s >= start && s < end;
		} else if (in && (sscanf(line, "AnonHugePages: %lu kB", &kb) == 1 ||
				  sscanf(line, "ShmemPmdMapped: %lu kB", &kb) == 1)) {
			total += (uint64_t)kb << 10;
		}
	}
	free(line);
	fclose(f);
	return total < r->size ? total : r->size;
}
