// SPDX-License-Identifier: GPL-2.0
/*
 * dmar_arena - named memory arenas for dmarfs: /dev/dmar_arena.
 *
 * An arena is pages the module allocates (4 KiB ones, 2 MiB compound
 * pages, or one physically contiguous block of any size the memory
 * allows), zeroed, on a NUMA node if asked.  A file of /dev/dmar_arena binds to one arena (CREATE or
 * ATTACH); mmap(2) of the file then maps it, and EXPORT makes a dma-buf
 * of a range, which DRM devices and RDMA NICs import.  An arena made with
 * DMAR_ARENA_KEEP stays, by name, after every user is gone -- dmarfs keeps
 * its files there across a restart of its daemon -- until DESTROY; one
 * without goes with its last user.  include/uapi/dmar_arena.h is the
 * interface, docs/kmod.md the manual.
 *
 * Lifetime: each arena has a kref, held by the registry while it is named
 * and KEEP, by every bound file, every mapping (vm_ops open/close) and
 * every dma-buf.  DESTROY takes the name away (a new arena may take it)
 * and drops the registry's reference; the pages go with the last one.
 *
 * Locking: arenas_lock (a mutex) protects the registry, the totals and
 * each file's binding; an arena's fields are fixed once it is made, but
 * for its user count (atomic).
 */
#include <linux/ctype.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/kobject.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/memory_hotplug.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/nodemask.h>
#include <linux/pageblock-flags.h>
#include <linux/scatterlist.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/vmalloc.h>

#include "include/uapi/dmar_arena.h"

#define HUGE_2M (2u << 20)

/* Orders below this one can be allocated (MAX_ORDER became inclusive in
 * 6.4, and MAX_PAGE_ORDER in 6.8).
 */
#if defined(MAX_PAGE_ORDER)
#define ORDER_LIMIT (MAX_PAGE_ORDER + 1)
#elif LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
#define ORDER_LIMIT (MAX_ORDER + 1)
#else
#define ORDER_LIMIT MAX_ORDER
#endif

/* alloc_contig_range's third argument: a migrate type until 6.16, flags
 * since.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
#define CONTIG_RANGE_ARG ACR_FLAGS_NONE
#else
#define CONTIG_RANGE_ARG MIGRATE_MOVABLE
#endif

static unsigned int max_arenas = 64;
module_param(max_arenas, uint, 0644);
MODULE_PARM_DESC(max_arenas, "most arenas at once (default 64)");

static unsigned long max_total_mb;
module_param(max_total_mb, ulong, 0644);
MODULE_PARM_DESC(max_total_mb, "most MiB in all arenas together (default 0: half of RAM)");

struct arena {
	struct kref ref;
	struct list_head node; /* in arenas while named */
	bool named;
	char name[DMAR_ARENA_NAME_MAX];
	u64 size;
	u32 page_size, flags;
	int nid;
	unsigned int order;  /* of each allocation unit */
	unsigned long nr_pages; /* of 4 KiB */
	struct page **pages; /* every 4 KiB page, in order */
	atomic_t users;
	struct file *excl; /* the one file bound with DMAR_ARENA_EXCL, or NULL; arenas_lock */
	struct kobject kobj; /* /sys/kernel/dmar_arena/NAME */
	bool kobj_added;
};

struct afile {
	struct arena *a; /* NULL until CREATE or ATTACH */
	struct file *file;
};

static DEFINE_MUTEX(arenas_lock);
static LIST_HEAD(arenas);
static unsigned int nr_arenas;
static u64 total_bytes;
static struct kobject *sys_dir;

/* ---- arenas ------------------------------------------------------------ */

static u64 total_limit(void)
{
	if (max_total_mb)
		return (u64)max_total_mb << 20;
	return ((u64)totalram_pages() << PAGE_SHIFT) / 2;
}

static void arena_free_pages(struct arena *a)
{
	unsigned long step = 1ul << a->order, i;

	if (!a->pages)
		return;
	for (i = 0; i < a->nr_pages; i += step)
		if (a->pages[i])
			__free_pages(a->pages[i], a->order);
	kvfree(a->pages);
	a->pages = NULL;
}

static void arena_release(struct kref *ref)
{
	struct arena *a = container_of(ref, struct arena, ref);

	mutex_lock(&arenas_lock);
	if (a->named)
		list_del(&a->node); /* an arena without KEEP goes with its last user */
	a->named = false;
	total_bytes -= a->size;
	nr_arenas--;
	mutex_unlock(&arenas_lock);
	arena_free_pages(a);
	if (a->kobj_added)
		kobject_put(&a->kobj); /* frees a (arena_kobj_release) */
	else
		kfree(a);
}

static void arena_get(struct arena *a)
{
	kref_get(&a->ref);
	atomic_inc(&a->users);
}

static void arena_put(struct arena *a)
{
	atomic_dec(&a->users);
	kref_put(&a->ref, arena_release);
}

static bool name_ok(const char *n)
{
	size_t len = strnlen(n, DMAR_ARENA_NAME_MAX), i;

	if (len == 0 || len == DMAR_ARENA_NAME_MAX)
		return false;
	for (i = 0; i < len; i++)
		if (!isalnum(n[i]) && n[i] != '.' && n[i] != '_' && n[i] != '-')
			return false;
	return strcmp(n, ".") && strcmp(n, "..");
}

static struct arena *find_locked(const char *name)
{
	struct arena *a;

	list_for_each_entry(a, &arenas, node)
		if (!strcmp(a->name, name))
			return a;
	return NULL;
}

/* ---- sysfs: /sys/kernel/dmar_arena/NAME/{size,page_size,backing,users,flags} */

#define ARENA_OF(k) container_of(k, struct arena, kobj)

static ssize_t size_show(struct kobject *k, struct kobj_attribute *at, char *buf)
{
	return sysfs_emit(buf, "%llu\n", ARENA_OF(k)->size);
}

static ssize_t page_size_show(struct kobject *k, struct kobj_attribute *at, char *buf)
{
	return sysfs_emit(buf, "%u\n", ARENA_OF(k)->page_size);
}

static ssize_t backing_show(struct kobject *k, struct kobj_attribute *at, char *buf)
{
	struct arena *a = ARENA_OF(k);

	return sysfs_emit(buf, "%s%s, node %d\n", a->flags & DMAR_ARENA_CONTIG ? "contiguous" : "pages",
			  a->page_size == HUGE_2M ? " of 2 MiB" : " of 4 KiB", a->nid);
}

static ssize_t users_show(struct kobject *k, struct kobj_attribute *at, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&ARENA_OF(k)->users));
}

static ssize_t flags_show(struct kobject *k, struct kobj_attribute *at, char *buf)
{
	struct arena *a = ARENA_OF(k);

	return sysfs_emit(buf, "%s%s\n", a->flags & DMAR_ARENA_KEEP ? "keep" : "-",
			  a->flags & DMAR_ARENA_CONTIG ? " contig" : "");
}

static struct kobj_attribute attr_size = __ATTR_RO(size);
static struct kobj_attribute attr_page_size = __ATTR_RO(page_size);
static struct kobj_attribute attr_backing = __ATTR_RO(backing);
static struct kobj_attribute attr_users = __ATTR_RO(users);
static struct kobj_attribute attr_flags = __ATTR_RO(flags);

static struct attribute *arena_attrs[] = {
	&attr_size.attr, &attr_page_size.attr, &attr_backing.attr, &attr_users.attr, &attr_flags.attr, NULL,
};
ATTRIBUTE_GROUPS(arena);

static void arena_kobj_release(struct kobject *k)
{
	kfree(ARENA_OF(k));
}

static struct kobj_type arena_ktype = {
	.release = arena_kobj_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = arena_groups,
};

/* ---- create, attach, destroy --------------------------------------------- */

/* The first pfn of [pfn, pfn + nr) that a contiguous block cannot take
 * (offline, in another zone, reserved, or a hugetlb page), or pfn + nr.
 */
static unsigned long first_unusable(struct zone *zone, unsigned long pfn, unsigned long nr)
{
	unsigned long i;

	for (i = pfn; i < pfn + nr; i++) {
		struct page *p = pfn_to_online_page(i);

		if (!p || page_zone(p) != zone || PageReserved(p) || PageHuge(p))
			return i;
	}
	return i;
}

/*
 * nr physically contiguous 4 KiB pages, more than the page allocator's
 * largest order gives, found as the kernel finds a gigantic huge page at
 * run time (alloc_contig_pages, which is not exported): scan each zone of
 * the node (or of every node) for a pageblock-aligned range of usable
 * pages and let alloc_contig_range migrate the movable pages in use there
 * away.  Debian's kernels have no CMA area to take such a block from.
 * Each page comes back as an order-0 page with one reference, not zeroed.
 * The first page, or NULL.
 */
static struct page *contig_alloc(int nid, unsigned long nr)
{
	const gfp_t gfp = GFP_KERNEL | __GFP_RETRY_MAYFAIL | __GFP_NOWARN;
	int n, z;

	for_each_online_node(n) {
		if (nid >= 0 && n != nid)
			continue;
		for (z = MAX_NR_ZONES - 1; z >= 0; z--) {
			struct zone *zone = &NODE_DATA(n)->node_zones[z];
			unsigned long pfn, bad, end = zone_end_pfn(zone);

			if (!populated_zone(zone))
				continue;
			pfn = ALIGN(zone->zone_start_pfn, pageblock_nr_pages);
			while (pfn + nr <= end) {
				if (fatal_signal_pending(current))
					return NULL;
				bad = first_unusable(zone, pfn, nr);
				if (bad == pfn + nr) {
					if (!alloc_contig_range(pfn, pfn + nr, CONTIG_RANGE_ARG, gfp))
						return pfn_to_page(pfn);
					bad = pfn + nr - 1; /* busy: the next range */
				}
				pfn = ALIGN(bad + 1, pageblock_nr_pages);
				cond_resched();
			}
		}
	}
	return NULL;
}

static int arena_alloc_pages(struct arena *a)
{
	gfp_t gfp = GFP_HIGHUSER | __GFP_ZERO | __GFP_NOWARN | __GFP_RETRY_MAYFAIL;
	unsigned long step, i, j;
	struct page *p;

	a->nr_pages = a->size >> PAGE_SHIFT;
	if (a->flags & DMAR_ARENA_CONTIG)
		a->order = get_order(a->size);
	else
		a->order = a->page_size == HUGE_2M ? get_order(HUGE_2M) : 0;
	a->pages = kvcalloc(a->nr_pages, sizeof(*a->pages), GFP_KERNEL);
	if (!a->pages)
		return -ENOMEM;
	if (a->order >= ORDER_LIMIT) {
		/* a contiguous block past one allocation: order-0 pages,
		 * freed one by one like the others
		 */
		a->order = 0;
		p = contig_alloc(a->nid, a->nr_pages);
		if (!p)
			return -ENOMEM;
		for (i = 0; i < a->nr_pages; i++) {
			a->pages[i] = pfn_to_page(page_to_pfn(p) + i);
			clear_highpage(a->pages[i]);
			if (!(i & 511))
				cond_resched();
		}
		return 0;
	}
	step = 1ul << a->order;
	if (a->order)
		gfp |= __GFP_COMP;
	for (i = 0; i < a->nr_pages; i += step) {
		p = a->nid >= 0 ? alloc_pages_node(a->nid, gfp, a->order) : alloc_pages(gfp, a->order);
		if (!p)
			return -ENOMEM; /* arena_free_pages frees what came */
		for (j = 0; j < step && i + j < a->nr_pages; j++)
			a->pages[i + j] = p + j;
		cond_resched();
	}
	return 0;
}

static int arena_create(struct afile *f, const struct dmar_arena_create *c)
{
	struct arena *a;
	int r;

	if (c->flags & ~DMAR_ARENA_FLAGS_ALL || c->reserved[0] || c->reserved[1] || c->reserved[2] ||
	    c->reserved[3])
		return -EINVAL;
	if (c->page_size != PAGE_SIZE && c->page_size != HUGE_2M)
		return -EINVAL;
	if (!c->size || c->size % c->page_size || !name_ok(c->name))
		return -EINVAL;
	if (c->numa_node < -1 || (c->numa_node >= 0 && (c->numa_node >= MAX_NUMNODES || !node_online(c->numa_node))))
		return -EINVAL;
	if (f->a)
		return -EBUSY; /* this file is bound already */
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	kref_init(&a->ref);
	atomic_set(&a->users, 1); /* the file */
	INIT_LIST_HEAD(&a->node);
	memcpy(a->name, c->name, sizeof(a->name));
	a->size = c->size;
	a->page_size = c->page_size;
	a->flags = c->flags & ~DMAR_ARENA_EXCL;
	if (c->flags & DMAR_ARENA_EXCL)
		a->excl = f->file;
	a->nid = c->numa_node;

	mutex_lock(&arenas_lock);
	if (find_locked(a->name)) {
		r = -EEXIST;
	} else if (nr_arenas >= max_arenas) {
		r = -EMFILE;
	} else if (a->size > total_limit() || total_bytes > total_limit() - a->size) {
		r = -ENOSPC;
	} else {
		r = 0;
		nr_arenas++;
		total_bytes += a->size; /* claimed before the slow allocation */
		list_add(&a->node, &arenas);
		a->named = true;
	}
	mutex_unlock(&arenas_lock);
	if (r) {
		kfree(a);
		return r;
	}
	r = arena_alloc_pages(a);
	if (!r) {
		kobject_init(&a->kobj, &arena_ktype);
		r = kobject_add(&a->kobj, sys_dir, "%s", a->name);
	}
	mutex_lock(&arenas_lock);
	if (r) {
		list_del(&a->node);
		total_bytes -= a->size;
		nr_arenas--;
	} else {
		a->kobj_added = true;
		if (a->flags & DMAR_ARENA_KEEP)
			kref_get(&a->ref); /* the registry's */
		f->a = a;
	}
	mutex_unlock(&arenas_lock);
	if (r) {
		arena_free_pages(a);
		if (a->kobj.state_initialized)
			kobject_put(&a->kobj); /* frees a */
		else
			kfree(a);
	}
	return r;
}

static int arena_attach(struct afile *f, const struct dmar_arena_name *n)
{
	struct arena *a;
	int r = 0;

	if (n->flags & ~DMAR_ARENA_EXCL || !name_ok(n->name))
		return -EINVAL;
	mutex_lock(&arenas_lock);
	a = find_locked(n->name);
	if (f->a)
		r = -EBUSY;
	else if (!a)
		r = -ENOENT;
	else if (a->excl || ((n->flags & DMAR_ARENA_EXCL) && atomic_read(&a->users)))
		r = -EBUSY; /* bound exclusively, or in use and exclusivity asked for */
	else if (!kref_get_unless_zero(&a->ref))
		r = -ENOENT;
	else {
		atomic_inc(&a->users);
		if (n->flags & DMAR_ARENA_EXCL)
			a->excl = f->file;
		f->a = a;
	}
	mutex_unlock(&arenas_lock);
	return r;
}

static int arena_rename(struct afile *f, const struct dmar_arena_name *n)
{
	struct arena *a;
	int r = 0;

	if (n->flags & ~DMAR_ARENA_KEEP || !name_ok(n->name))
		return -EINVAL;
	mutex_lock(&arenas_lock);
	a = f->a;
	if (!a)
		r = -ENODEV;
	else if (!a->named)
		r = -ENOENT; /* destroyed: it has no name to change */
	else if (find_locked(n->name))
		r = strcmp(a->name, n->name) ? -EEXIST : 0;
	else
		memcpy(a->name, n->name, sizeof(a->name));
	if (!r && (n->flags & DMAR_ARENA_KEEP) && !(a->flags & DMAR_ARENA_KEEP)) {
		a->flags |= DMAR_ARENA_KEEP;
		kref_get(&a->ref); /* the registry's */
	}
	mutex_unlock(&arenas_lock);
	if (!r && a->kobj_added)
		r = kobject_rename(&a->kobj, a->name);
	return r;
}

static int arena_destroy(const struct dmar_arena_name *n)
{
	struct arena *a;
	bool kept;

	if (n->flags || !name_ok(n->name))
		return -EINVAL;
	mutex_lock(&arenas_lock);
	a = find_locked(n->name);
	if (!a) {
		mutex_unlock(&arenas_lock);
		return -ENOENT;
	}
	list_del_init(&a->node);
	a->named = false;
	kept = a->flags & DMAR_ARENA_KEEP;
	mutex_unlock(&arenas_lock);
	if (a->kobj_added)
		kobject_del(&a->kobj); /* the name is free again in sysfs too */
	if (kept)
		kref_put(&a->ref, arena_release); /* the registry's */
	return 0;
}

static int arena_query(struct afile *f, struct dmar_arena_info *q)
{
	struct arena *a;
	int r = 0;

	if (q->reserved0 || q->reserved[0] || q->reserved[1] || q->reserved[2] || q->reserved[3])
		return -EINVAL;
	mutex_lock(&arenas_lock);
	if (!q->name[0])
		a = f->a;
	else
		a = name_ok(q->name) ? find_locked(q->name) : NULL;
	if (!a) {
		r = q->name[0] && !name_ok(q->name) ? -EINVAL : -ENOENT;
	} else {
		memcpy(q->name, a->name, sizeof(q->name));
		q->flags = a->flags;
		q->size = a->size;
		q->page_size = a->page_size;
		q->numa_node = a->nid;
		q->users = atomic_read(&a->users);
	}
	mutex_unlock(&arenas_lock);
	return r;
}

/* ---- mappings ------------------------------------------------------------ */

static void vm_open(struct vm_area_struct *vma)
{
	arena_get(vma->vm_private_data);
}

static void vm_close(struct vm_area_struct *vma)
{
	arena_put(vma->vm_private_data);
}

/*
 * Pages are mapped as they are touched.  The fault hands the core the
 * page with a reference; for a page of a 2 MiB compound unit, where the
 * mapping's address and offset agree modulo 2 MiB (dev_fops'
 * get_unmapped_area arranges it), the core maps the whole unit with one
 * PMD (finish_fault, do_set_pmd) and takes the mapcount and counters
 * as for a file's huge page; elsewhere it maps the one 4 KiB page.  The
 * mapping is a plain one (not VM_MIXEDMAP, which the core would treat as
 * special at unmap and leave a huge page's reference behind), so
 * get_user_pages works on it: FUSE's replies from a dmarfs arena need
 * it.  VM_DONTEXPAND keeps it out of mlock and khugepaged.
 */
static vm_fault_t vm_fault(struct vm_fault *vmf)
{
	struct arena *a = vmf->vma->vm_private_data;
	struct page *p;

	if (vmf->pgoff >= a->nr_pages)
		return VM_FAULT_SIGBUS;
	p = a->pages[vmf->pgoff];
	get_page(p);
	vmf->page = p;
	return 0;
}

static const struct vm_operations_struct arena_vm_ops = {
	.open = vm_open,
	.close = vm_close,
	.fault = vm_fault,
};

static void vma_dont_copy(struct vm_area_struct *vma)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
#else
	vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP;
#endif
}

/* Map pages [first, first + n) of a into vma, whose vm_pgoff is relative
 * to first: from here on it is the arena's page index, which the fault
 * reads.
 */
static int map_range(struct arena *a, struct vm_area_struct *vma, unsigned long first, unsigned long n)
{
	unsigned long len = vma->vm_end - vma->vm_start;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL; /* a private copy of an arena is not a thing to share */
	if (vma->vm_pgoff >= n || len >> PAGE_SHIFT > n - vma->vm_pgoff)
		return -EINVAL; /* past the end */
	vma_dont_copy(vma);
	vma->vm_pgoff += first;
	vma->vm_ops = &arena_vm_ops;
	vma->vm_private_data = a;
	arena_get(a); /* vm_ops close drops it */
	return 0;
}

static int dev_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct afile *f = file->private_data;
	struct arena *a;

	mutex_lock(&arenas_lock);
	a = f->a;
	mutex_unlock(&arenas_lock);
	if (!a)
		return -ENODEV;
	return map_range(a, vma, 0, a->nr_pages);
}

/* ---- dma-buf export ------------------------------------------------------ */

struct abuf {
	struct arena *a;
	unsigned long first, n; /* 4 KiB pages */
	struct mutex lock;
	struct list_head maps; /* struct amap: mapped attachments, for CPU access syncs */
};

struct amap {
	struct list_head node;
	struct device *dev;
	struct sg_table sgt;
	enum dma_data_direction dir;
};

static struct sg_table *buf_map(struct dma_buf_attachment *at, enum dma_data_direction dir)
{
	struct abuf *b = at->dmabuf->priv;
	struct amap *m = kzalloc(sizeof(*m), GFP_KERNEL);
	int r;

	if (!m)
		return ERR_PTR(-ENOMEM);
	r = sg_alloc_table_from_pages(&m->sgt, b->a->pages + b->first, b->n, 0, b->n << PAGE_SHIFT, GFP_KERNEL);
	if (r)
		goto fail;
	r = dma_map_sgtable(at->dev, &m->sgt, dir, 0);
	if (r) {
		sg_free_table(&m->sgt);
		goto fail;
	}
	m->dev = at->dev;
	m->dir = dir;
	mutex_lock(&b->lock);
	list_add(&m->node, &b->maps);
	mutex_unlock(&b->lock);
	return &m->sgt;
fail:
	kfree(m);
	return ERR_PTR(r);
}

static void buf_unmap(struct dma_buf_attachment *at, struct sg_table *sgt, enum dma_data_direction dir)
{
	struct abuf *b = at->dmabuf->priv;
	struct amap *m = container_of(sgt, struct amap, sgt);

	mutex_lock(&b->lock);
	list_del(&m->node);
	mutex_unlock(&b->lock);
	dma_unmap_sgtable(at->dev, sgt, dir, 0);
	sg_free_table(sgt);
	kfree(m);
}

static int buf_cpu_access(struct dma_buf *buf, enum dma_data_direction dir, bool begin)
{
	struct abuf *b = buf->priv;
	struct amap *m;

	mutex_lock(&b->lock);
	list_for_each_entry(m, &b->maps, node) {
		if (begin)
			dma_sync_sgtable_for_cpu(m->dev, &m->sgt, m->dir);
		else
			dma_sync_sgtable_for_device(m->dev, &m->sgt, m->dir);
	}
	mutex_unlock(&b->lock);
	return 0;
}

static int buf_begin_cpu(struct dma_buf *buf, enum dma_data_direction dir)
{
	return buf_cpu_access(buf, dir, true);
}

static int buf_end_cpu(struct dma_buf *buf, enum dma_data_direction dir)
{
	return buf_cpu_access(buf, dir, false);
}

static int buf_mmap(struct dma_buf *buf, struct vm_area_struct *vma)
{
	struct abuf *b = buf->priv;

	return map_range(b->a, vma, b->first, b->n);
}

static int buf_vmap(struct dma_buf *buf, struct iosys_map *map)
{
	struct abuf *b = buf->priv;
	void *v = vmap(b->a->pages + b->first, b->n, VM_MAP, PAGE_KERNEL);

	if (!v)
		return -ENOMEM;
	iosys_map_set_vaddr(map, v);
	return 0;
}

static void buf_vunmap(struct dma_buf *buf, struct iosys_map *map)
{
	vunmap(map->vaddr);
}

static void buf_release(struct dma_buf *buf)
{
	struct abuf *b = buf->priv;

	arena_put(b->a);
	kfree(b);
}

static const struct dma_buf_ops buf_ops = {
	.map_dma_buf = buf_map,
	.unmap_dma_buf = buf_unmap,
	.begin_cpu_access = buf_begin_cpu,
	.end_cpu_access = buf_end_cpu,
	.mmap = buf_mmap,
	.vmap = buf_vmap,
	.vunmap = buf_vunmap,
	.release = buf_release,
};

static int arena_export(struct afile *f, struct dmar_arena_export *e)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	struct dma_buf *buf;
	struct arena *a;
	struct abuf *b;
	int fd;

	if (e->reserved0 || e->reserved[0] || e->reserved[1] ||
	    e->flags & ~(u32)(O_CLOEXEC | O_ACCMODE) || (e->flags & O_ACCMODE) == O_WRONLY)
		return -EINVAL;
	mutex_lock(&arenas_lock);
	a = f->a;
	mutex_unlock(&arenas_lock);
	if (!a)
		return -ENODEV;
	if (!e->length || e->offset % PAGE_SIZE || e->length % PAGE_SIZE || e->offset > a->size ||
	    e->length > a->size - e->offset)
		return -EINVAL;
	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return -ENOMEM;
	mutex_init(&b->lock);
	INIT_LIST_HEAD(&b->maps);
	b->a = a;
	b->first = e->offset >> PAGE_SHIFT;
	b->n = e->length >> PAGE_SHIFT;
	info.ops = &buf_ops;
	info.size = e->length;
	info.flags = O_RDWR; /* the buffer; the fd's access is e->flags' */
	info.priv = b;
	arena_get(a); /* buf_release drops it */
	buf = dma_buf_export(&info);
	if (IS_ERR(buf)) {
		arena_put(a);
		kfree(b);
		return PTR_ERR(buf);
	}
	fd = dma_buf_fd(buf, e->flags);
	if (fd < 0) {
		dma_buf_put(buf); /* releases b and its reference */
		return fd;
	}
	e->fd = fd;
	return 0;
}

/* ---- the device ---------------------------------------------------------- */

/* The caller's argument at arg into out (size bytes): 0, -EFAULT,
 * -EINVAL (its struct_size is smaller than version 1's: every field is
 * needed), -E2BIG (bytes beyond ours that are not zero: a later version's
 * fields this module does not know).
 */
static int copy_arg(void *out, size_t size, unsigned long arg)
{
	u32 n;

	if (get_user(n, (u32 __user *)arg))
		return -EFAULT;
	if (n < size)
		return -EINVAL;
	return copy_struct_from_user(out, size, (const void __user *)arg, n);
}

static long dev_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct afile *f = file->private_data;
	union {
		struct dmar_arena_create c;
		struct dmar_arena_name n;
		struct dmar_arena_info q;
		struct dmar_arena_export e;
	} u;
	int r;

	if (_IOC_TYPE(cmd) != DMAR_ARENA_IOC_MAGIC)
		return -ENOTTY;
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(DMAR_ARENA_IOC_CREATE):
		r = copy_arg(&u.c, sizeof(u.c), arg);
		return r ? r : arena_create(f, &u.c);
	case _IOC_NR(DMAR_ARENA_IOC_ATTACH):
		r = copy_arg(&u.n, sizeof(u.n), arg);
		return r ? r : arena_attach(f, &u.n);
	case _IOC_NR(DMAR_ARENA_IOC_DESTROY):
		r = copy_arg(&u.n, sizeof(u.n), arg);
		return r ? r : arena_destroy(&u.n);
	case _IOC_NR(DMAR_ARENA_IOC_QUERY):
		r = copy_arg(&u.q, sizeof(u.q), arg);
		if (!r)
			r = arena_query(f, &u.q);
		if (!r && copy_to_user((void __user *)arg, &u.q, sizeof(u.q)))
			r = -EFAULT;
		return r;
	case _IOC_NR(DMAR_ARENA_IOC_RENAME):
		r = copy_arg(&u.n, sizeof(u.n), arg);
		return r ? r : arena_rename(f, &u.n);
	case _IOC_NR(DMAR_ARENA_IOC_EXPORT):
		r = copy_arg(&u.e, sizeof(u.e), arg);
		if (!r)
			r = arena_export(f, &u.e);
		if (!r && put_user(u.e.fd, (s32 __user *)(arg + offsetof(struct dmar_arena_export, fd))))
			r = -EFAULT; /* the fd stays open: the caller cannot learn it, as with any lost result */
		return r;
	default:
		return -ENOTTY;
	}
}

static int dev_open(struct inode *inode, struct file *file)
{
	struct afile *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	f->file = file;
	file->private_data = f;
	return 0;
}

static int dev_release(struct inode *inode, struct file *file)
{
	struct afile *f = file->private_data;

	if (f->a) {
		mutex_lock(&arenas_lock);
		if (f->a->excl == file)
			f->a->excl = NULL;
		mutex_unlock(&arenas_lock);
		arena_put(f->a);
	}
	kfree(f);
	return 0;
}

static const struct file_operations dev_fops = {
	.owner = THIS_MODULE,
	.open = dev_open,
	.release = dev_release,
	.unlocked_ioctl = dev_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = dev_mmap,
	/* an address that agrees with the offset modulo 2 MiB, for PMDs */
	.get_unmapped_area = thp_get_unmapped_area,
};

static struct miscdevice dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "dmar_arena",
	.fops = &dev_fops,
	.mode = 0600,
};

static int __init dmar_arena_init(void)
{
	int r;

	sys_dir = kobject_create_and_add("dmar_arena", kernel_kobj);
	if (!sys_dir)
		return -ENOMEM;
	r = misc_register(&dev);
	if (r)
		kobject_put(sys_dir);
	return r;
}

static void __exit dmar_arena_exit(void)
{
	struct arena *a, *t;

	misc_deregister(&dev);
	/* No file is open (the module is held while one is): what is left
	 * is kept arenas, each held by the registry alone, or by mappings
	 * and dma-bufs, which hold the module too.
	 */
	mutex_lock(&arenas_lock);
	list_for_each_entry_safe(a, t, &arenas, node) {
		list_del_init(&a->node);
		a->named = false;
		mutex_unlock(&arenas_lock);
		if (a->kobj_added)
			kobject_del(&a->kobj);
		if (a->flags & DMAR_ARENA_KEEP)
			kref_put(&a->ref, arena_release);
		mutex_lock(&arenas_lock);
	}
	mutex_unlock(&arenas_lock);
	kobject_put(sys_dir);
}

module_init(dmar_arena_init);
module_exit(dmar_arena_exit);
MODULE_LICENSE("GPL");
MODULE_AUTHOR("dmarfs");
MODULE_DESCRIPTION("Named memory arenas with mmap and dma-buf export (/dev/dmar_arena)");
MODULE_VERSION("1");
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
MODULE_IMPORT_NS("DMA_BUF");
#else
MODULE_IMPORT_NS(DMA_BUF);
#endif
