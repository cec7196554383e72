/* SPDX-License-Identifier: MIT */
/*
 * An arena is a region (region.c), a unit allocator over it (alloc.c) and
 * a chunk store (store.c).  This file composes them, converts between
 * bytes and DMAR_ARENA_UNIT units, and keeps a named arena's superblock.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arena_i.h"
#include "kmod.h"
#include "rundir.h"
#include "codec/crc32c.h"

static uint32_t head_crc(const struct dmar_sb *sb)
{
	return dmar_crc32c(0, sb, offsetof(struct dmar_sb, crc));
}

static uint32_t owner_crc(const struct dmar_sb_owner *o)
{
	return dmar_crc32c(0, o, offsetof(struct dmar_sb_owner, crc));
}

/* Is the superblock at p (of a file of size bytes) one we can use?  A
 * message in why when not. */
static bool sb_valid(const struct dmar_sb *sb, uint64_t size, char *why, size_t cap)
{
	if (memcmp(sb->magic, DMAR_SB_MAGIC, sizeof(DMAR_SB_MAGIC)) != 0) {
		snprintf(why, cap, "no dmarfs arena superblock (bad magic)");
		return false;
	}
	if (head_crc(sb) != sb->crc) {
		snprintf(why, cap, "superblock checksum mismatch (damaged)");
		return false;
	}
	if (sb->version != DMAR_SB_VERSION) {
		snprintf(why, cap, "arena format version %u, this dmarfs reads version %u", sb->version,
			 DMAR_SB_VERSION);
		return false;
	}
	if (sb->unit != DMAR_ARENA_UNIT || sb->size != size || sb->backing < DMAR_BACKING_HUGETLB ||
	    sb->backing > DMAR_BACKING_KMOD || !sb->pagesize) {
		snprintf(why, cap, "superblock says unit %u, size %llu (file: %llu), backing %u: inconsistent",
			 sb->unit, (unsigned long long)sb->size, (unsigned long long)size, sb->backing);
		return false;
	}
	return true;
}

static void set_owner(struct dmar_sb *sb, const struct dmar_arena_opts *o)
{
	struct dmar_sb_owner w = { .pid = getpid(), .since = time(NULL), .flags = o->keep ? DMAR_SB_KEEP : 0 };
	snprintf(w.mountpoint, sizeof(w.mountpoint), "%s", o->owner ? o->owner : "");
	w.crc = owner_crc(&w);
	sb->owner = w;
}

static void sb_init(struct dmar_arena *a, const struct dmar_arena_opts *o)
{
	struct dmar_sb *sb = a->sb;
	memset(sb, 0, DMAR_SB_BYTES);
	memcpy(sb->magic, DMAR_SB_MAGIC, sizeof(DMAR_SB_MAGIC));
	sb->version = DMAR_SB_VERSION;
	sb->unit = DMAR_ARENA_UNIT;
	sb->size = a->region.size;
	sb->pagesize = a->region.pagesize;
	sb->backing = a->region.backing;
	sb->created = time(NULL);
	if (getrandom(sb->uuid, sizeof(sb->uuid), GRND_NONBLOCK) != sizeof(sb->uuid))
		memcpy(sb->uuid, &sb->created, sizeof(sb->created));
	snprintf(sb->name, sizeof(sb->name), "%s", o->name);
	sb->crc = head_crc(sb);
	set_owner(sb, o);
}

/* The region of an attached arena says only what its filesystem knows;
 * the superblock says what it was made as. */
static void describe_attached(struct dmar_arena *a)
{
	struct dmar_region *r = &a->region;
	if (r->backing == DMAR_BACKING_KMOD)
		return; /* the module said what it is (region.c) */
	if (r->backing != DMAR_BACKING_HUGETLB) {
		r->backing = a->sb->backing;
		r->pagesize = a->sb->pagesize;
	}
	char what[96];
	if (r->backing == DMAR_BACKING_HUGETLB)
		snprintf(what, sizeof(what), "hugetlb %llu KiB pages", (unsigned long long)(r->pagesize >> 10));
	else if (r->backing == DMAR_BACKING_THP)
		snprintf(what, sizeof(what), "transparent huge pages (%llu of %llu MiB in huge pages)",
			 (unsigned long long)(dmar_region_huge_bytes(r) >> 20), (unsigned long long)(r->size >> 20));
	else
		snprintf(what, sizeof(what), "normal %llu KiB pages", (unsigned long long)(r->pagesize >> 10));
	snprintf(r->desc, sizeof(r->desc), "%s (re-attached %.*s)", what, 400, r->path);
}

int dmar_arena_new(struct dmar_arena **out, const struct dmar_arena_opts *o, struct dmar_error *err)
{
	struct dmar_arena *a;
	int r;

	if (!o || (!o->size && !o->name))
		return dmar_error_set(err, -EINVAL, "arena size must be > 0");
	a = calloc(1, sizeof(*a));
	if (!a)
		return dmar_error_errno(err, -ENOMEM, "arena");
	struct dmar_arena_opts oo = *o;
	if (o->name && !o->size)
		oo.size = 1; /* only an attach knows no size; a create then fails below */
	r = dmar_region_open(&a->region, &oo, err);
	if (r < 0) {
		free(a);
		return r;
	}
	if (o->name && !a->region.attached && !o->size) {
		dmar_arena_free(a);
		return dmar_error_set(err, -EINVAL, "no arena named %s: a new one needs size=", o->name);
	}
	if (o->name && a->region.size < 2 * DMAR_SB_BYTES) {
		dmar_arena_free(a);
		return dmar_error_set(err, -EINVAL, "arena size must be at least %d bytes", 2 * DMAR_SB_BYTES);
	}
	if (o->name) {
		a->sb = (struct dmar_sb *)a->region.base;
		if (a->region.attached) {
			char why[160];
			if (!sb_valid(a->sb, a->region.size, why, sizeof(why))) {
				int e = dmar_error_set(err, -EUCLEAN, "%s: %s", a->region.path, why);
				dmar_arena_free(a);
				return e;
			}
			if (o->owner)
				set_owner(a->sb, o);
			describe_attached(a);
		} else {
			sb_init(a, o);
		}
	}
	/* Region sizes are page multiples, so the units cover all of it. */
	r = dmar_alloc_new(&a->alloc, a->region.size / DMAR_ARENA_UNIT);
	if (r == 0)
		r = dmar_store_create(&a->store);
	if (r == 0 && a->sb)
		r = dmar_arena_claim(a, 0, DMAR_SB_BYTES);
	if (a->sb) {
		uint64_t keep = a->region.size / 64;
		keep = keep < (256u << 10) ? 256u << 10 : keep > (64u << 20) ? 64u << 20 : keep;
		if (keep > a->region.size / 4)
			keep = a->region.size / 4;
		a->reserve_units = keep / DMAR_ARENA_UNIT;
	}
	if (r < 0) {
		dmar_arena_free(a);
		return dmar_error_errno(err, r, "arena metadata");
	}
	if (o->name && !a->region.attached && (r = dmar_region_publish(&a->region)) < 0) {
		int e = dmar_error_set(err, r == -EEXIST ? -EBUSY : r, "naming %s: %s", a->region.path,
				       r == -EEXIST ? "another arena of that name appeared meanwhile" : strerror(-r));
		dmar_arena_free(a);
		return e;
	}
	*out = a;
	return 0;
}

void dmar_arena_free(struct dmar_arena *a)
{
	if (!a)
		return;
	dmar_store_destroy(a->store);
	dmar_alloc_free(a->alloc);
	dmar_region_close(&a->region);
	free(a);
}

bool dmar_arena_attached(const struct dmar_arena *a)
{
	return a->region.attached;
}

const char *dmar_arena_path(const struct dmar_arena *a)
{
	return a->region.named ? a->region.path : NULL;
}

int dmar_arena_remove(struct dmar_arena *a)
{
	return dmar_region_unlink(&a->region);
}

uint8_t *dmar_arena_base(const struct dmar_arena *a)
{
	return a->region.base;
}

uint64_t dmar_arena_size(const struct dmar_arena *a)
{
	return a->region.size;
}

enum dmar_backing dmar_arena_backing(const struct dmar_arena *a)
{
	return a->region.backing;
}

uint64_t dmar_arena_pagesize(const struct dmar_arena *a)
{
	return a->region.pagesize;
}

const char *dmar_arena_describe(const struct dmar_arena *a)
{
	return a->region.desc;
}

int dmar_arena_fd(const struct dmar_arena *a)
{
	return a->region.fd;
}

uint64_t dmar_arena_huge_bytes(const struct dmar_arena *a)
{
	return dmar_region_huge_bytes(&a->region);
}

static int alloc_units(struct dmar_arena *a, uint64_t len, uint64_t *off, uint64_t keep)
{
	uint64_t u, n = (len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT;
	int r;

	if (!len)
		return -EINVAL;
	if (len > a->region.size)
		return -ENOSPC;
	/* Soft: two racing callers may both pass; the reserve is a margin. */
	if (keep && dmar_alloc_used(a->alloc) + n + keep > dmar_alloc_units(a->alloc))
		return -ENOSPC;
	r = dmar_alloc_get(a->alloc, n, &u);
	if (r < 0)
		return r;
	*off = u * DMAR_ARENA_UNIT;
	return 0;
}

int dmar_arena_alloc(struct dmar_arena *a, uint64_t len, uint64_t *off)
{
	int r = alloc_units(a, len, off, a->reserve_units);
	if (r == -ENOSPC && a->reclaim && a->reclaim(a->reclaim_ctx))
		r = alloc_units(a, len, off, a->reserve_units);
	return r;
}

void dmar_arena_set_reclaim(struct dmar_arena *a, size_t (*fn)(void *ctx), void *ctx)
{
	a->reclaim = fn;
	a->reclaim_ctx = ctx;
}

int dmar_arena_alloc_meta(struct dmar_arena *a, uint64_t len, uint64_t *off)
{
	return alloc_units(a, len, off, 0);
}

uint64_t dmar_arena_reserve(const struct dmar_arena *a)
{
	return a->reserve_units * DMAR_ARENA_UNIT;
}

void dmar_arena_abandon(struct dmar_arena *a)
{
	atomic_store(&a->abandoned, true);
}

void dmar_arena_release(struct dmar_arena *a, uint64_t off, uint64_t len)
{
	if (!len || atomic_load_explicit(&a->abandoned, memory_order_relaxed))
		return;
	/* A range that is not reserved as a whole means two owners think
	 * they hold it; carrying on would hand the same bytes out twice. */
	if (off % DMAR_ARENA_UNIT ||
	    dmar_alloc_put(a->alloc, off / DMAR_ARENA_UNIT,
			   (len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT) < 0)
		abort();
}

int dmar_arena_claim(struct dmar_arena *a, uint64_t off, uint64_t len)
{
	if (!len || off % DMAR_ARENA_UNIT || off >= a->region.size || len > a->region.size - off)
		return -EINVAL;
	return dmar_alloc_claim(a->alloc, off / DMAR_ARENA_UNIT, (len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT);
}

uint64_t dmar_arena_used(const struct dmar_arena *a)
{
	return dmar_alloc_used(a->alloc) * DMAR_ARENA_UNIT;
}

/* ---- listing ---------------------------------------------------------- */

struct list_walk {
	int (*fn)(void *ctx, const struct dmar_arena_info *i);
	void *ctx;
};

static void info_of_file(const char *path, struct dmar_arena_info *in)
{
	struct stat st;
	struct dmar_sb sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(in->error, sizeof(in->error), "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	in->size = (uint64_t)st.st_size;
	in->resident = (uint64_t)st.st_blocks * 512;
	in->in_use = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	/* hugetlbfs has no read(): map the superblock instead. */
	void *p = st.st_size >= DMAR_SB_BYTES ? mmap(NULL, DMAR_SB_BYTES, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(in->error, sizeof(in->error), "cannot map its superblock");
		return;
	}
	memcpy(&sb, p, sizeof(sb));
	munmap(p, DMAR_SB_BYTES);
	if (!sb_valid(&sb, in->size, in->error, sizeof(in->error)))
		return;
	in->valid = true;
	in->backing = (enum dmar_backing)sb.backing;
	in->pagesize = sb.pagesize;
	in->created = sb.created;
	if (owner_crc(&sb.owner) == sb.owner.crc) {
		in->keep = sb.owner.flags & DMAR_SB_KEEP;
		in->pid = sb.owner.pid;
		in->since = sb.owner.since;
		snprintf(in->owner, sizeof(in->owner), "%.*s", (int)sizeof(sb.owner.mountpoint), sb.owner.mountpoint);
	}
}

static int list_dir(void *ctx, const char *dir)
{
	struct list_walk *w = ctx;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int r = 0;
	for (struct dirent *e; !r && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n <= 6 || strcmp(e->d_name + n - 6, ".arena"))
			continue;
		struct dmar_arena_info *in = calloc(1, sizeof(*in));
		if (!in) {
			r = -ENOMEM;
			break;
		}
		snprintf(in->name, sizeof(in->name), "%.*s", (int)(n - 6), e->d_name);
		snprintf(in->path, sizeof(in->path), "%.*s/%s", (int)sizeof(in->path) - 200, dir, e->d_name);
		info_of_file(in->path, in);
		r = w->fn(w->ctx, in);
		free(in);
	}
	closedir(d);
	return r;
}

/* An arena of the kernel module: its figures from sysfs, its superblock
 * through a binding of it when nobody holds one (a mounted one is bound
 * exclusively: then in_use, and no superblock to read). */
static int list_kmod(void *ctx, const char *name, uint64_t size, unsigned users)
{
	struct list_walk *w = ctx;
	struct dmar_arena_info *in = calloc(1, sizeof(*in));
	if (!in)
		return -ENOMEM;
	snprintf(in->name, sizeof(in->name), "%s", name);
	snprintf(in->path, sizeof(in->path), "kmod:%s", name);
	in->size = in->resident = size;
	in->backing = DMAR_BACKING_KMOD;
	struct dmar_kmod k;
	struct dmar_error err = { 0 };
	if (users) {
		in->in_use = true;
		in->valid = true; /* its mount checked it */
	} else if (dmar_kmod_attach(&k, name, &err) == 0) {
		struct dmar_sb sb;
		memcpy(&sb, k.base, sizeof(sb));
		in->pagesize = k.page_size;
		dmar_kmod_close(&k);
		if (sb_valid(&sb, size, in->error, sizeof(in->error))) {
			in->valid = true;
			in->created = sb.created;
			if (owner_crc(&sb.owner) == sb.owner.crc) {
				in->keep = sb.owner.flags & DMAR_SB_KEEP;
				in->pid = sb.owner.pid;
				in->since = sb.owner.since;
				snprintf(in->owner, sizeof(in->owner), "%.*s", (int)sizeof(sb.owner.mountpoint),
					 sb.owner.mountpoint);
			}
		}
	} else {
		in->in_use = err.code == -EBUSY;
		in->valid = in->in_use;
		snprintf(in->error, sizeof(in->error), "%.*s", (int)sizeof(in->error) - 1, err.msg);
	}
	int r = w->fn(w->ctx, in);
	free(in);
	return r;
}

int dmar_arena_list(int (*fn)(void *ctx, const struct dmar_arena_info *i), void *ctx)
{
	struct list_walk w = { .fn = fn, .ctx = ctx };
	int r = dmar_rundir_each(list_dir, &w);
	return r ? r : dmar_kmod_each(list_kmod, &w);
}

int dmar_arena_drop(const char *name, struct dmar_error *err)
{
	char path[PATH_MAX];
	int r = dmar_region_find(name, path);
	if (r == -ENOENT && dmar_kmod_exists(name))
		return dmar_kmod_drop(name, err);
	if (r == -EINVAL)
		return dmar_error_set(err, r, "'%s' is not an arena name", name);
	if (r < 0)
		return dmar_error_set(err, r, "no arena named %s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dmar_error_set(err, -errno, "%s: %s", path, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return dmar_error_set(err, r, "%s: %s", path,
				      r == -EBUSY ? "in use: unmount it first" : strerror(-r));
	}
	r = unlink(path) < 0 ? -errno : 0;
	close(fd);
	return r < 0 ? dmar_error_set(err, r, "%s: %s", path, strerror(-r)) : 0;
}

/* ---- consistency ---------------------------------------------------------- */

struct dmar_arena_check {
	struct dmar_alloc *shadow;
	struct dmar_arena_report *rep;
	uint64_t units;
};

void dmar_arena_check_claim(struct dmar_arena_check *c, uint64_t off, uint64_t len, const char *what)
{
	if (!len)
		return;
	uint64_t u = off / DMAR_ARENA_UNIT, n = (off % DMAR_ARENA_UNIT + len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT;
	int r = off % DMAR_ARENA_UNIT ? -EINVAL : dmar_alloc_claim(c->shadow, u, n);
	if (r == 0) {
		c->rep->owned += n * DMAR_ARENA_UNIT;
		return;
	}
	c->rep->doubled += n * DMAR_ARENA_UNIT;
	if (!c->rep->problem[0])
		snprintf(c->rep->problem, sizeof(c->rep->problem), "%s at %llu (+%llu): %s", what,
			 (unsigned long long)off, (unsigned long long)len,
			 r == -EEXIST ? "claimed by another owner too" : "outside the arena or misaligned");
}

static void claim_chunk(void *ctx, const struct dmar_id *id, const struct dmar_chunk_info *ci)
{
	(void)id;
	struct dmar_arena_check *c = ctx;
	c->rep->chunks++;
	c->rep->chunk_bytes += (ci->stored_len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT * DMAR_ARENA_UNIT;
	dmar_arena_check_claim(c, ci->off, ci->stored_len, "chunk payload");
}

int dmar_arena_check(struct dmar_arena *a, void (*owners)(void *ctx, struct dmar_arena_check *c), void *ctx,
		     struct dmar_arena_report *rep)
{
	struct dmar_arena_check c = { .rep = rep, .units = a->region.size / DMAR_ARENA_UNIT };
	memset(rep, 0, sizeof(*rep));
	if (dmar_alloc_new(&c.shadow, c.units) < 0)
		return -ENOMEM;
	if (a->sb)
		dmar_arena_check_claim(&c, 0, DMAR_SB_BYTES, "superblock");
	dmar_store_each(a, claim_chunk, &c);
	if (owners)
		owners(ctx, &c);
	uint64_t only_real, only_shadow, first;
	dmar_alloc_diff(a->alloc, c.shadow, &only_real, &only_shadow, &first);
	rep->used = dmar_arena_used(a);
	rep->leaked = only_real * DMAR_ARENA_UNIT;
	rep->unreserved = only_shadow * DMAR_ARENA_UNIT;
	dmar_alloc_free(c.shadow);
	if (!rep->problem[0] && first != UINT64_MAX)
		snprintf(rep->problem, sizeof(rep->problem), "%s at offset %llu: %llu bytes leaked, %llu owned but free",
			 only_real ? "space reserved by no owner" : "space owned but not reserved",
			 (unsigned long long)(first * DMAR_ARENA_UNIT), (unsigned long long)rep->leaked,
			 (unsigned long long)rep->unreserved);
	return rep->problem[0] ? -EUCLEAN : 0;
}
