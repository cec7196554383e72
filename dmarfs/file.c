/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "file.h"
#include "codec/compress.h"
#include "codec/cutter.h"

enum { EXT_HOLE, EXT_RAW, EXT_CHUNK };

struct dmar_extent {
	uint64_t off, len;   /* logical range [off, off+len) */
	uint8_t kind;
	uint8_t enc;         /* CHUNK: payload encoding */
	uint8_t durable;     /* RAW: a durable state may show this allocation (its
			      * space goes to the pending list, not back to the
			      * arena, until the next sync) */
	uint32_t skip;       /* CHUNK: first byte of the chunk this extent shows;
			      * RAW: bytes of the allocation before the first one
			      * (< DMAR_ARENA_UNIT: left by encode_commit's trim) */
	uint32_t clen;       /* CHUNK: whole chunk length */
	uint32_t stored;     /* CHUNK: payload bytes */
	uint64_t aoff;       /* RAW: allocation; CHUNK: payload offset (stable while referenced) */
	uint64_t acap;       /* RAW: allocation size (from aoff, skip included) */
	struct dmar_id id;   /* CHUNK */
};

/* Writes into a hole allocate at this alignment, so a run of small writes
 * into a sparse file does not make one extent per write. */
#define HOLE_GRAIN (64u << 10)
/* Appends reserve this much room at the end of the last RAW extent. */
#define APPEND_GRAIN (1u << 20)
/* One encode step converts about this many RAW bytes, then swaps them
 * for chunks and frees them before the next step: encoding a file needs
 * room for one step's chunks, not for a second copy of the file. */
#define ENCODE_PIECE (8u << 20)

void dmar_file_init(struct dmar_file *f)
{
	memset(f, 0, sizeof(*f));
}

static uint8_t *raw_ptr(struct dmar_fsctx *c, const struct dmar_extent *e)
{
	return dmar_arena_base(c->arena) + e->aoff + e->skip;
}

static void raw_release(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len, bool durable);
static void changed(struct dmar_file *f, uint64_t lo, uint64_t hi);

/* RAW extent e now holds its bytes at allocation a of its own size, not
 * yet recorded by a sync. */
static void raw_moved(struct dmar_file *f, struct dmar_extent *e, uint64_t a)
{
	e->aoff = a;
	e->acap = e->len;
	e->skip = 0;
	e->durable = 0;
	changed(f, e->off, e->off + e->len);
}

/* Give back what extent e of f (NULL: of a table, which has no RAW) holds. */
static void ext_drop(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_extent *e)
{
	if (e->kind == EXT_RAW)
		raw_release(f, c, e->aoff, e->acap, e->durable);
	else if (e->kind == EXT_CHUNK)
		dmar_store_unref(c->arena, &e->id);
	e->kind = EXT_HOLE;
}

/* Drop n extents: the chunk references in one batch (a 1 GiB file holds
 * 32768); one by one if there is no memory for the list. */
static void drop_all(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_extent *ext, size_t n)
{
	struct dmar_id *ids = n > 1 ? malloc(n * sizeof(*ids)) : NULL;
	size_t nids = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids && ext[i].kind == EXT_CHUNK) {
			ids[nids++] = ext[i].id;
			ext[i].kind = EXT_HOLE;
		} else {
			ext_drop(f, c, &ext[i]);
		}
	}
	if (nids)
		dmar_store_unref_many(c->arena, ids, nids);
	free(ids);
}

/* ---- shared extent tables ---------------------------------------------- */

/*
 * An extent table shared read-only by the files that show the same
 * content: a whole file copied with copy_file_range, a commit of content
 * the node holds under another name.  Cloning a 1 GiB file is then one
 * reference, where a copy of its 32768 extents costs 2.5 MiB of fresh
 * memory (page faults) and a chunk reference per extent, at each end of a
 * transfer.  The table holds one chunk reference per extent for all its
 * files.  Chunks and holes only: a RAW allocation has one owner.
 */
struct dmar_xtab {
	atomic_size_t refs;      /* files showing it */
	struct dmar_extent *ext; /* n of them, cap allocated */
	size_t n, cap;
	uint64_t size;
	/* protected by tab_mu: */
	bool published;          /* cid is its content id */
	bool sent;               /* that content went to a peer or came from one */
	struct dmar_id cid;
	struct dmar_content_index *index; /* the index it is in, or NULL */
	struct dmar_xtab *next;  /* that index's chain */
};

/* Content id -> published table, chained buckets (a power of two). */
struct dmar_content_index {
	struct dmar_xtab **b;
	size_t nb, n;
};

/* One lock for every index and every table's publication: taken once per
 * publish, lookup and table death, never around work per extent. */
static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket_of(const struct dmar_content_index *x, const struct dmar_id *cid)
{
	uint64_t h;
	memcpy(&h, cid->b, sizeof(h)); /* a SHA-256: already uniform */
	return (size_t)(h & (x->nb - 1));
}

struct dmar_content_index *dmar_content_index_new(void)
{
	struct dmar_content_index *x = calloc(1, sizeof(*x));
	if (x && !(x->b = calloc(x->nb = 64, sizeof(*x->b)))) {
		free(x);
		x = NULL;
	}
	return x;
}

void dmar_content_index_free(struct dmar_content_index *x)
{
	if (!x)
		return;
	free(x->b);
	free(x);
}

/* tab_mu held: the published table of x with content cid and size. */
static struct dmar_xtab *index_find(struct dmar_content_index *x, const struct dmar_id *cid, uint64_t size)
{
	for (struct dmar_xtab *t = x->b[bucket_of(x, cid)]; t; t = t->next)
		if (t->size == size && !memcmp(t->cid.b, cid->b, DMAR_HASH_SIZE))
			return t;
	return NULL;
}

/* tab_mu held.  Out of memory to grow is no error: chains get longer. */
static void index_add(struct dmar_content_index *x, struct dmar_xtab *t)
{
	if (x->n >= x->nb) {
		struct dmar_xtab **nb = calloc(2 * x->nb, sizeof(*nb));
		if (nb) {
			struct dmar_content_index y = { .b = nb, .nb = 2 * x->nb };
			for (size_t i = 0; i < x->nb; i++)
				for (struct dmar_xtab *u = x->b[i], *next; u; u = next) {
					next = u->next;
					size_t k = bucket_of(&y, &u->cid);
					u->next = nb[k];
					nb[k] = u;
				}
			free(x->b);
			x->b = nb;
			x->nb = y.nb;
		}
	}
	size_t k = bucket_of(x, &t->cid);
	t->next = x->b[k];
	x->b[k] = t;
	t->index = x;
	x->n++;
}

/* tab_mu held. */
static void index_remove(struct dmar_xtab *t)
{
	struct dmar_content_index *x = t->index;
	if (!x)
		return;
	for (struct dmar_xtab **p = &x->b[bucket_of(x, &t->cid)]; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			x->n--;
			break;
		}
	t->index = NULL;
}

static void tab_put(struct dmar_xtab *t, struct dmar_fsctx *c)
{
	if (atomic_fetch_sub(&t->refs, 1) != 1)
		return;
	/* The last file: no new reference can come but from the index,
	 * whose lookups skip a table at 0. */
	pthread_mutex_lock(&tab_mu);
	index_remove(t);
	pthread_mutex_unlock(&tab_mu);
	drop_all(NULL, c, t->ext, t->n);
	free(t->ext);
	free(t);
}

/* f shows table t from now on (t's reference is the caller's). */
static void show_tab(struct dmar_file *f, struct dmar_xtab *t)
{
	f->tab = t;
	f->ext = t->ext;
	f->n = t->n;
	f->cap = 0;
	f->size = t->size;
	f->dirty = false;
}

/* f's extents as a table (f held exclusively): -EAGAIN if some are RAW. */
static int tab_of(struct dmar_file *f, struct dmar_xtab **out)
{
	if (!f->tab) {
		for (size_t i = 0; i < f->n; i++)
			if (f->ext[i].kind == EXT_RAW)
				return -EAGAIN;
		struct dmar_xtab *t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		atomic_init(&t->refs, 1);
		t->ext = f->ext;
		t->n = f->n;
		t->cap = f->cap;
		t->size = f->size;
		show_tab(f, t);
	}
	*out = f->tab;
	return 0;
}

/* Before f changes: give it extents of its own.  A table only f shows
 * is taken over; otherwise f gets a copy with its own chunk references. */
static int own(struct dmar_file *f, struct dmar_fsctx *c)
{
	struct dmar_xtab *t = f->tab;
	if (!t)
		return 0;
	pthread_mutex_lock(&tab_mu);
	/* Under tab_mu no lookup can add a reference: 1 stays 1. */
	if (atomic_load(&t->refs) == 1) {
		index_remove(t);
		pthread_mutex_unlock(&tab_mu);
		f->tab = NULL;
		f->cap = t->cap;
		free(t);
		return 0;
	}
	pthread_mutex_unlock(&tab_mu);
	struct dmar_extent *e = malloc((t->n ? t->n : 1) * sizeof(*e));
	struct dmar_id *ids = malloc((t->n ? t->n : 1) * sizeof(*ids));
	struct dmar_chunk_info *info = malloc((t->n ? t->n : 1) * sizeof(*info));
	int r = -ENOMEM;
	if (e && ids && info) {
		size_t nids = 0;
		for (size_t i = 0; i < t->n; i++)
			if (t->ext[i].kind == EXT_CHUNK)
				ids[nids++] = t->ext[i].id;
		/* The table holds each of them: none can be missing. */
		r = dmar_store_ref_all(c->arena, ids, nids, info);
	}
	free(ids);
	free(info);
	if (r < 0) {
		free(e);
		return r == -ENOENT ? -EIO : r;
	}
	if (t->n) /* an empty file's table has no array */
		memcpy(e, t->ext, t->n * sizeof(*e));
	f->tab = NULL;
	f->ext = e;
	f->cap = t->n ? t->n : 1;
	tab_put(t, c);
	return 0;
}

bool dmar_file_content_known(const struct dmar_file *f, struct dmar_id *cid, bool *sent)
{
	bool known = false;
	if (!f->tab)
		return false;
	pthread_mutex_lock(&tab_mu);
	if ((known = f->tab->published)) {
		*cid = f->tab->cid;
		if (sent)
			*sent = f->tab->sent;
	}
	pthread_mutex_unlock(&tab_mu);
	return known;
}

int dmar_file_publish(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_id *cid, bool sent)
{
	struct dmar_xtab *t;
	int r = tab_of(f, &t);
	if (r < 0)
		return r;
	pthread_mutex_lock(&tab_mu);
	if (!t->published) {
		t->published = true;
		t->cid = *cid;
		/* One table per content is enough to clone from. */
		if (c->index && !index_find(c->index, cid, t->size))
			index_add(c->index, t);
	}
	t->sent |= sent;
	pthread_mutex_unlock(&tab_mu);
	return 0;
}

int dmar_file_content_id(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_recipe *r,
			 struct dmar_id *cid, bool *known)
{
	bool sent = false;
	int e = 0;
	if (!dmar_file_content_known(f, cid, &sent))
		e = dmar_recipe_ids(r, NULL, cid);
	*known = sent;
	if (e == 0 && !sent)
		(void)dmar_file_publish(f, c, cid, true); /* an optimisation: may fail */
	return e;
}

/* Would f reach past the mount's largest file at end?  A file already
 * bigger (max_file_size lowered since) may change below its size. */
static bool too_big(const struct dmar_file *f, const struct dmar_fsctx *c, uint64_t end)
{
	return c->max_size && end > c->max_size && end > f->size;
}

int dmar_file_from_content(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_id *cid, uint64_t size)
{
	struct dmar_xtab *t = NULL;
	if (too_big(f, c, size))
		return -EFBIG;
	if (!c->index)
		return -ENOENT;
	pthread_mutex_lock(&tab_mu);
	struct dmar_xtab *u = index_find(c->index, cid, size);
	size_t refs = u ? atomic_load(&u->refs) : 0;
	/* A table at 0 refs is on its way out: not ours to revive. */
	while (refs && !atomic_compare_exchange_weak(&u->refs, &refs, refs + 1))
		;
	if (refs)
		t = u;
	pthread_mutex_unlock(&tab_mu);
	if (!t)
		return -ENOENT;
	dmar_file_clear(f, c);
	show_tab(f, t);
	changed(f, 0, f->size);
	return 0;
}

/* Drop f's extents, leaving an empty file (its durability kept). */
static void clear_extents(struct dmar_file *f, struct dmar_fsctx *c)
{
	if (f->tab)
		tab_put(f->tab, c);
	else {
		drop_all(f, c, f->ext, f->n);
		free(f->ext);
	}
	f->tab = NULL;
	f->ext = NULL;
	f->n = f->cap = 0;
	f->size = 0;
	f->dirty = false;
	f->gen++;
}

void dmar_file_clear(struct dmar_file *f, struct dmar_fsctx *c)
{
	changed(f, 0, f->size);
	clear_extents(f, c);
}

/* Make room for need extents in a growable array (doubling). */
static int grow_extents(struct dmar_extent **a, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 8;
	while (c < need)
		c *= 2;
	struct dmar_extent *e = realloc(*a, c * sizeof(*e));
	if (!e)
		return -ENOMEM;
	*a = e;
	*cap = c;
	return 0;
}

static int reserve(struct dmar_file *f, size_t extra)
{
	return grow_extents(&f->ext, &f->cap, f->n + extra);
}

/* Index of the extent containing off (off < size). */
static size_t find(const struct dmar_file *f, uint64_t off)
{
	size_t lo = 0, hi = f->n;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (f->ext[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static void insert_at(struct dmar_file *f, size_t i, const struct dmar_extent *e, size_t n)
{
	memmove(&f->ext[i + n], &f->ext[i], (f->n - i) * sizeof(*e));
	memcpy(&f->ext[i], e, n * sizeof(*e));
	f->n += n;
}

static void remove_at(struct dmar_file *f, size_t i, size_t n)
{
	memmove(&f->ext[i], &f->ext[i + n], (f->n - i - n) * sizeof(f->ext[0]));
	f->n -= n;
}

/* Where a cut at off falls inside an extent: false when off is 0, the
 * end, or already an extent's start; else the extent's index *i, the
 * length its head keeps, and its tail *t as a copy to adjust. */
static bool split_point(const struct dmar_file *f, uint64_t off, size_t *i, uint64_t *head, struct dmar_extent *t)
{
	if (off == 0 || off >= f->size)
		return false;
	*i = find(f, off);
	const struct dmar_extent *e = &f->ext[*i];
	if (e->off == off)
		return false;
	*head = off - e->off;
	*t = *e;
	t->off = off;
	t->len = e->len - *head;
	return true;
}

/* Cut extent i to head and put tail t after it: 0 or -ENOMEM. */
static int split_finish(struct dmar_file *f, size_t i, uint64_t head, const struct dmar_extent *t)
{
	int r = reserve(f, 1);
	if (r < 0)
		return r;
	f->ext[i].len = head;
	insert_at(f, i + 1, t, 1);
	return 0;
}

/* Split so that an extent starts exactly at off (0 < off < size).  The
 * second half of a chunk takes its own reference; a RAW extent is never
 * split (it would share its allocation): its tail is copied out instead. */
static int split_at(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off)
{
	size_t i;
	uint64_t head;
	struct dmar_extent t;
	if (!split_point(f, off, &i, &head, &t))
		return 0;
	struct dmar_extent *e = &f->ext[i];
	if (e->kind == EXT_CHUNK) {
		int r = dmar_store_ref_existing(c->arena, &e->id);
		if (r < 0)
			return r;
		t.skip = e->skip + (uint32_t)head;
	} else if (e->kind == EXT_RAW) {
		uint64_t a;
		int r = dmar_arena_alloc(c->arena, t.len, &a);
		if (r < 0)
			return r;
		memcpy(dmar_arena_base(c->arena) + a, raw_ptr(c, e) + head, t.len);
		t.aoff = a;
		t.acap = t.len;
		t.skip = 0;
		t.durable = 0;
		/* The tail moved to its own allocation. */
		changed(f, off, off + t.len);
	}
	int r = split_finish(f, i, head, &t);
	if (r < 0)
		ext_drop(f, c, &t);
	return r;
}

/* --- chunk payloads ---------------------------------------------------- */

struct tls_codec {
	struct dmar_zchunk *z;
	ZSTD_DCtx *dctx, *dctx_pack;
	uint8_t *cache;          /* last decoded chunk */
	struct dmar_id cache_id;
	bool cache_valid;
	uint8_t *zbuf;
	size_t zcap;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
	struct tls_codec *t = p;
	dmar_zchunk_free(t->z);
	ZSTD_freeDCtx(t->dctx);
	ZSTD_freeDCtx(t->dctx_pack);
	free(t->cache);
	free(t->zbuf);
	free(t);
}

static void tls_init(void)
{
	pthread_key_create(&tls_key, tls_free);
}

static void set_magicless(ZSTD_DCtx *d)
{
	ZSTD_DCtx_setParameter(d, ZSTD_d_format, ZSTD_f_zstd1_magicless);
}

/* Per-thread codec state: FUSE runs requests on several threads and each
 * needs its own zstd contexts and decoded-chunk cache. */
static struct tls_codec *tls(struct dmar_fsctx *c)
{
	pthread_once(&tls_once, tls_init);
	struct tls_codec *t = pthread_getspecific(tls_key);
	if (t && (dmar_zchunk_pack(t->z) != c->pack || dmar_zchunk_level(t->z) != c->level)) {
		tls_free(t);
		t = NULL;
	}
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->dctx = ZSTD_createDCtx();
		t->cache = malloc(c->chunker.max);
		t->zcap = ZSTD_compressBound(c->chunker.max);
		t->zbuf = malloc(t->zcap);
		if (dmar_zchunk_new(&t->z, c->level, c->pack) < 0 || !t->dctx || !t->cache || !t->zbuf) {
			tls_free(t);
			return NULL;
		}
		set_magicless(t->dctx);
		if (c->pack) {
			t->dctx_pack = ZSTD_createDCtx();
			const ZSTD_DDict *dd = (const ZSTD_DDict *)dmar_bytepack_ddict(c->pack);
			if (!t->dctx_pack || !dd) {
				tls_free(t);
				return NULL;
			}
			set_magicless(t->dctx_pack);
			ZSTD_DCtx_refDDict(t->dctx_pack, dd);
		}
		pthread_setspecific(tls_key, t);
	}
	return t;
}

/* The decoded bytes of a chunk extent's chunk. */
static const uint8_t *chunk_bytes(struct dmar_fsctx *c, const struct dmar_extent *e, int *err)
{
	const uint8_t *p = dmar_arena_base(c->arena) + e->aoff;
	if (e->enc == DMAR_CHUNK_RAW)
		return p;
	struct tls_codec *t = tls(c);
	if (!t) {
		*err = -ENOMEM;
		return NULL;
	}
	if (t->cache_valid && !memcmp(t->cache_id.b, e->id.b, DMAR_HASH_SIZE))
		return t->cache;
	ZSTD_DCtx *d = e->enc == DMAR_CHUNK_ZSTD_PACK ? t->dctx_pack : t->dctx;
	if (!d) {
		*err = -EIO;
		return NULL;
	}
	size_t r = ZSTD_decompressDCtx(d, t->cache, c->chunker.max, p, e->stored);
	if (ZSTD_isError(r) || r != e->clen) {
		/* Our own arena memory failed to decode: a bug or memory
		 * corruption, never silently wrong data. */
		t->cache_valid = false;
		*err = -EIO;
		return NULL;
	}
	t->cache_id = e->id;
	t->cache_valid = true;
	return t->cache;
}

/* --- read -------------------------------------------------------------- */


static const uint8_t zero_page[65536];

int dmar_file_read_iov(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, size_t len, struct iovec *iov,
		       int max, uint8_t *scratch, size_t *got)
{
	*got = 0;
	if (off >= f->size)
		return 0;
	if (len > f->size - off)
		len = (size_t)(f->size - off);
	size_t done = 0;
	int n = 0;
	for (size_t i = find(f, off); done < len && n < max; i++) {
		const struct dmar_extent *e = &f->ext[i];
		uint64_t in = off + done - e->off;
		size_t k = e->len - in < len - done ? (size_t)(e->len - in) : len - done;
		const uint8_t *p;
		if (e->kind == EXT_HOLE) {
			if (k > sizeof(zero_page))
				k = sizeof(zero_page);
			p = zero_page;
		} else if (e->kind == EXT_RAW) {
			p = raw_ptr(c, e) + in;
		} else if (e->enc == DMAR_CHUNK_RAW) {
			p = dmar_arena_base(c->arena) + e->aoff + e->skip + in;
		} else {
			int err = 0;
			const uint8_t *d = chunk_bytes(c, e, &err);
			if (!d)
				return err;
			/* The per-thread cache is reused by the next chunk:
			 * copy out of it. */
			memcpy(scratch + done, d + e->skip + in, k);
			p = scratch + done;
		}
		iov[n].iov_base = (void *)p;
		iov[n].iov_len = k;
		n++;
		done += k;
		if (e->kind == EXT_HOLE && in + k < e->len)
			i--; /* more of the same hole */
	}
	*got = done;
	return n;
}

/* --- write ------------------------------------------------------------- */

static int append_hole(struct dmar_file *f, uint64_t len)
{
	if (!len)
		return 0;
	changed(f, f->size, f->size + len);
	if (f->n && f->ext[f->n - 1].kind == EXT_HOLE) {
		f->ext[f->n - 1].len += len;
	} else {
		int r = reserve(f, 1);
		if (r < 0)
			return r;
		struct dmar_extent h = { .off = f->size, .len = len, .kind = EXT_HOLE };
		f->ext[f->n++] = h;
	}
	f->size += len;
	return 0;
}

/* Turn the extent at i into RAW: a chunk is decoded whole (it is at most
 * the max chunk size), so later writes to it land in place. */
static int make_raw(struct dmar_file *f, struct dmar_fsctx *c, size_t i)
{
	struct dmar_extent *e = &f->ext[i];
	uint64_t a;
	int r = dmar_arena_alloc(c->arena, e->len, &a);
	if (r < 0)
		return r;
	uint8_t *dst = dmar_arena_base(c->arena) + a;
	if (e->kind == EXT_HOLE) {
		memset(dst, 0, e->len);
	} else {
		int err = 0;
		const uint8_t *p = chunk_bytes(c, e, &err);
		if (!p) {
			dmar_arena_release(c->arena, a, e->len);
			return err;
		}
		memcpy(dst, p + e->skip, e->len);
		dmar_store_unref(c->arena, &e->id);
	}
	e->kind = EXT_RAW;
	raw_moved(f, e, a);
	return 0;
}

/* Grow the file by len bytes of RAW memory whose contents the caller
 * fills in next. */
static int append_space(struct dmar_file *f, struct dmar_fsctx *c, size_t len)
{
	struct dmar_extent *last = f->n ? &f->ext[f->n - 1] : NULL;
	changed(f, f->size, f->size + len);
	if (last && last->kind == EXT_RAW && last->acap - last->skip - last->len >= len) {
		last->len += len;
		f->size += len;
		return 0;
	}
	int r = reserve(f, 1);
	if (r < 0)
		return r;
	/* Room to grow: a sequential writer then fills one allocation with
	 * many writes instead of one extent per write. */
	uint64_t cap = len < APPEND_GRAIN ? APPEND_GRAIN : len, a;
	r = dmar_arena_alloc(c->arena, cap, &a);
	if (r == -ENOSPC && cap > len) {
		cap = len;
		r = dmar_arena_alloc(c->arena, cap, &a);
	}
	if (r < 0)
		return r;
	struct dmar_extent e = { .off = f->size, .len = len, .kind = EXT_RAW, .aoff = a, .acap = cap };
	f->ext[f->n++] = e;
	f->size += len;
	return 0;
}

void dmar_file_trim(struct dmar_file *f, struct dmar_fsctx *c)
{
	if (f->tab || !f->n)
		return;
	struct dmar_extent *e = &f->ext[f->n - 1];
	if (e->kind != EXT_RAW)
		return;
	uint64_t keep = (e->skip + e->len + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT * DMAR_ARENA_UNIT;
	if (keep >= e->acap)
		return;
	/* A journal state may show the old allocation: the tail stays out
	 * of use until the next sync records the extent as it is now. */
	raw_release(f, c, e->aoff + keep, e->acap - keep, e->durable);
	e->acap = keep;
	f->gen++;
	changed(f, e->off, e->off + e->len);
}

/* How a write or an allocation of [off, off + len) begins: 0 to go on,
 * 1 for nothing to do (len 0), -errno (-EFBIG past max_size). */
static int range_begin(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len)
{
	f->gen++;
	if (!len)
		return 1;
	int r = own(f, c);
	if (r < 0)
		return r;
	if (off > UINT64_MAX - len || too_big(f, c, off + len))
		return -EFBIG;
	return 0;
}

int dmar_file_write_with(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, size_t len,
			 int (*copy)(void *ctx, uint8_t *dst, size_t len), void *ctx)
{
	int rb = range_begin(f, c, off, len);
	if (rb)
		return rb > 0 ? 0 : rb;
	uint64_t end = off + len, old_size = f->size;
	uint64_t stop = end < f->size ? end : f->size;
	int r = 0;

	/* First make room, then copy: a failure (ENOSPC) before any byte is
	 * copied leaves the file's contents as they were.  Past the end the
	 * file grows by a hole and fresh RAW space; inside it, HOLE and CHUNK
	 * extents in the range become RAW (a hole only around the write, at
	 * HOLE_GRAIN bounds; a chunk whole, so later writes land in place). */
	if (off > f->size && (r = append_hole(f, off - f->size)) < 0)
		goto fail;
	if (end > f->size && (r = append_space(f, c, (size_t)(end - f->size))) < 0)
		goto fail;
	for (uint64_t pos = off; pos < stop;) {
		size_t i = find(f, pos);
		struct dmar_extent *e = &f->ext[i];
		if (e->kind == EXT_HOLE) {
			uint64_t g = HOLE_GRAIN;
			uint64_t a = pos & ~(g - 1), b = (stop + g - 1) & ~(g - 1);
			if (a < e->off)
				a = e->off;
			if (b > e->off + e->len)
				b = e->off + e->len;
			if (a > e->off || b < e->off + e->len) {
				if ((r = split_at(f, c, a)) < 0 || (r = split_at(f, c, b)) < 0)
					goto fail;
				continue;
			}
		}
		if (e->kind != EXT_RAW && (r = make_raw(f, c, i)) < 0)
			goto fail;
		pos = f->ext[i].off + f->ext[i].len;
	}
	f->dirty = true;
	changed(f, off, end);
	for (uint64_t pos = off; pos < end;) {
		struct dmar_extent *e = &f->ext[find(f, pos)];
		uint64_t in = pos - e->off;
		uint64_t n = e->len - in < end - pos ? e->len - in : end - pos;
		if ((r = copy(ctx, raw_ptr(c, e) + in, (size_t)n)) < 0)
			return r; /* the source failed: the range holds part of it */
		pos += n;
	}
	return 0;
fail:
	if (f->size > old_size)
		dmar_file_truncate(f, c, old_size);
	return r;
}

/* --- size, holes, allocation ------------------------------------------ */

int dmar_file_truncate(struct dmar_file *f, struct dmar_fsctx *c, uint64_t size)
{
	f->gen++;
	if (size == f->size)
		return 0;
	if (size == 0) {
		dmar_file_clear(f, c);
		return 0;
	}
	if (too_big(f, c, size))
		return -EFBIG;
	int r = own(f, c);
	if (r < 0)
		return r;
	if (size > f->size)
		return append_hole(f, size - f->size);
	changed(f, size, f->size);
	size_t i = find(f, size);
	struct dmar_extent *e = &f->ext[i];
	size_t first_gone = i + 1;
	if (e->off == size)
		first_gone = i;
	else
		e->len = size - e->off; /* a RAW extent keeps its allocation */
	for (size_t k = first_gone; k < f->n; k++)
		ext_drop(f, c, &f->ext[k]);
	f->n = first_gone;
	f->size = size;
	return 0;
}

int dmar_file_punch(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len)
{
	f->gen++;
	if (off >= f->size || !len)
		return 0;
	int ro = own(f, c);
	if (ro < 0)
		return ro;
	uint64_t end = len > f->size - off ? f->size : off + len;
	int r;
	if ((r = reserve(f, 3)) < 0 || (r = split_at(f, c, off)) < 0 || (r = split_at(f, c, end)) < 0)
		return r;
	size_t i = find(f, off), j = i;
	while (j < f->n && f->ext[j].off < end)
		ext_drop(f, c, &f->ext[j++]);
	changed(f, off, end);
	struct dmar_extent h = { .off = off, .len = end - off, .kind = EXT_HOLE };
	remove_at(f, i, j - i);
	insert_at(f, i, &h, 1);
	return 0;
}

int dmar_file_allocate(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len, bool keep_size)
{
	int rb = range_begin(f, c, off, len);
	if (rb)
		return rb > 0 ? 0 : rb;
	uint64_t end = off + len, old_size = f->size;
	int r;
	if (!keep_size && end > f->size && (r = append_hole(f, end - f->size)) < 0)
		return r;
	uint64_t stop = end < f->size ? end : f->size;
	/* Holes in range become zeroed RAW memory, so later writes cannot
	 * fail for lack of space. */
	for (uint64_t pos = off; pos < stop;) {
		size_t i = find(f, pos);
		struct dmar_extent *e = &f->ext[i];
		if (e->kind == EXT_HOLE) {
			if ((r = split_at(f, c, pos)) < 0 || (r = split_at(f, c, stop)) < 0)
				goto fail;
			i = find(f, pos);
			if ((r = make_raw(f, c, i)) < 0)
				goto fail;
			e = &f->ext[i];
		}
		pos = e->off + e->len;
	}
	return 0;
fail:
	if (f->size > old_size)
		dmar_file_truncate(f, c, old_size);
	return r;
}

int dmar_file_seek(const struct dmar_file *f, uint64_t off, bool data, uint64_t *out)
{
	if (off >= f->size)
		return -ENXIO;
	for (size_t i = find(f, off); i < f->n; i++) {
		const struct dmar_extent *e = &f->ext[i];
		if ((e->kind != EXT_HOLE) == data) {
			*out = e->off > off ? e->off : off;
			return 0;
		}
	}
	if (data)
		return -ENXIO;
	*out = f->size;
	return 0;
}

int dmar_file_fallocate(struct dmar_file *f, struct dmar_fsctx *c, int mode, int64_t off, int64_t len)
{
	if (off < 0 || len <= 0)
		return -EINVAL;
	if (mode == 0 || mode == FALLOC_FL_KEEP_SIZE)
		return dmar_file_allocate(f, c, (uint64_t)off, (uint64_t)len, mode != 0);
	if (mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		return dmar_file_punch(f, c, (uint64_t)off, (uint64_t)len);
	return -EOPNOTSUPP;
}

int dmar_file_lseek(const struct dmar_file *f, int64_t off, int whence, uint64_t *out)
{
	if (whence != SEEK_DATA && whence != SEEK_HOLE)
		return -EINVAL;
	if (off < 0)
		return -ENXIO;
	return dmar_file_seek(f, (uint64_t)off, whence == SEEK_DATA, out);
}

/* --- encoding ---------------------------------------------------------- */

/* Add one reference on chunk id (its len bytes p) to c's store, storing
 * it first when the store lacks it: zstd-compressed when the mount says
 * encode=zstd and that pays, with the byte pack if it has one, else raw.
 * The one storage policy of local writes and of chunks from the wire. */
/* Whether store_ref_policy tries zstd on a chunk of len bytes.  A chunk
 * from a peer that cuts bigger chunks than this mount stays raw: the
 * decoded-chunk cache holds chunker.max bytes. */
static bool policy_compresses(const struct dmar_fsctx *c, uint32_t len)
{
	return c->encode == DMAR_ENCODE_ZSTD && len <= c->chunker.max;
}

static int store_ref_policy(struct dmar_fsctx *c, const struct dmar_id *id, const uint8_t *p, uint32_t len)
{
	if (dmar_store_ref_existing(c->arena, id) == 0)
		return 0; /* compressed only when the store lacks it */
	const void *payload = p;
	uint32_t stored = len;
	uint8_t enc = DMAR_CHUNK_RAW;
	if (policy_compresses(c, len)) {
		struct tls_codec *t = tls(c);
		if (!t)
			return -ENOMEM;
		size_t z = dmar_zchunk_probe(t->z, p, len) ? dmar_zchunk_compress(t->z, t->zbuf, t->zcap, p, len) : 0;
		if (z) {
			payload = t->zbuf;
			stored = (uint32_t)z;
			enc = c->pack ? DMAR_CHUNK_ZSTD_PACK : DMAR_CHUNK_ZSTD;
		}
	}
	return dmar_store_ref(c->arena, id, enc, len, payload, stored, NULL);
}

/* Store chunk id (its len bytes at p) and describe it as an extent. */
static int store_chunk(struct dmar_fsctx *c, const struct dmar_id *id, const uint8_t *p, uint32_t len,
		       struct dmar_extent *out)
{
	struct dmar_chunk_info info;
	int r = store_ref_policy(c, id, p, len);
	if (r < 0)
		return r;
	r = dmar_store_lookup(c->arena, id, &info);
	if (r < 0)
		return r;
	*out = (struct dmar_extent){ .len = len, .kind = EXT_CHUNK, .enc = info.enc, .clen = len,
				     .stored = info.stored_len, .aoff = info.off, .id = *id };
	return 0;
}

/*
 * Encoding goes step by step.  A step (prepare) takes the first RAW run
 * of the file and cuts, hashes and stores about ENCODE_PIECE bytes of it,
 * stopping at a cut the chunker made on its own (content-defined or at
 * the maximum size), never at one forced by the step's end: the chunker is
 * stateless, so a file encoded in steps is cut exactly as it would be in
 * one go and dedups the same.  Commit then swaps those bytes for the chunk
 * extents and frees the RAW memory they lived in, extent by extent, and
 * the head of the extent the step ended in.  The next step starts where
 * the RAW bytes now start.  Peak use is the file plus one step's chunks.
 */
struct dmar_encode_plan {
	uint64_t gen;            /* the file's generation when planned */
	size_t i;                /* the first RAW extent of the step ... */
	uint64_t end;            /* ... up to this logical offset ... */
	struct dmar_extent *out; /* ... becomes these chunk extents */
	size_t nout;
};

static void plan_free(struct dmar_encode_plan *p, struct dmar_fsctx *c, bool drop_refs)
{
	if (!p)
		return;
	for (size_t m = 0; drop_refs && m < p->nout; m++)
		dmar_store_unref(c->arena, &p->out[m].id);
	free(p->out);
	free(p);
}

struct encode_cut {
	struct dmar_fsctx *c;
	uint64_t start, cut;
	struct dmar_extent *out;
	size_t nout, capout;
};

/* One chunk of the step: stored, an extent in the plan.  Stops the
 * cutter once the step has ENCODE_PIECE bytes. */
static int encode_chunk(void *ctx, const uint8_t *p, uint32_t len, const struct dmar_id *id)
{
	struct encode_cut *ec = ctx;
	int r = grow_extents(&ec->out, &ec->capout, ec->nout + 1);
	if (r < 0 || (r = store_chunk(ec->c, id, p, len, &ec->out[ec->nout])) < 0)
		return r;
	ec->out[ec->nout++].off = ec->start + ec->cut;
	ec->cut += len;
	return ec->cut >= ENCODE_PIECE;
}

/* Cut, hash and store the bytes of the RAW run starting at extent i, up
 * to about ENCODE_PIECE of them; the chunk extents (with their references
 * taken) go to p.  Reads the file only.  A store failure after some chunks
 * (-ENOSPC: the arena is full) ends the step early with what it has, so
 * that commit frees their RAW memory and the next step finds room; with
 * no chunk stored it is the step's error. */
static int encode_step(const struct dmar_file *f, struct dmar_fsctx *c, size_t i, struct dmar_encode_plan *p)
{
	struct encode_cut ec = { .c = c, .start = f->ext[i].off };
	struct dmar_cutter *cut;
	int r = dmar_cutter_new(&cut, &c->chunker, encode_chunk, &ec);
	if (r < 0)
		return r;
	for (size_t k = i; k < f->n && f->ext[k].kind == EXT_RAW && r == 0; k++)
		r = dmar_cutter_feed(cut, raw_ptr(c, &f->ext[k]), f->ext[k].len);
	if (r == 0)
		r = dmar_cutter_finish(cut);
	dmar_cutter_free(cut);
	if (r < 0 && !ec.nout) {
		free(ec.out);
		return r;
	}
	p->i = i;
	p->end = ec.start + ec.cut;
	p->out = ec.out;
	p->nout = ec.nout;
	return 0;
}

int dmar_file_encode_prepare(const struct dmar_file *f, struct dmar_fsctx *c, struct dmar_encode_plan **out)
{
	*out = NULL;
	if (!f->dirty || c->encode == DMAR_ENCODE_NONE)
		return 0;
	size_t i = 0;
	while (i < f->n && f->ext[i].kind != EXT_RAW)
		i++;
	if (i == f->n)
		return 0; /* dirty, but the RAW bytes were truncated or punched away */
	struct dmar_encode_plan *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->gen = f->gen;
	int r = encode_step(f, c, i, p);
	if (r < 0) {
		/* ENOSPC before the first chunk: the file stays RAW from
		 * here on, which is correct, only not encoded. */
		free(p);
		return r;
	}
	*out = p;
	return 0;
}

/* Drop the first h bytes of RAW extent e (h < e->len), giving back the
 * whole units of its allocation they held.  The memory is free for other
 * allocations at once: the caller holds the exclusive lock, so no reader
 * of this file holds a pointer into it (readers reply under the shared
 * lock), and no other file ever pointed at it. */
static void raw_trim_head(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_extent *e, uint64_t h)
{
	uint64_t from = e->skip + h;
	uint64_t give = from / DMAR_ARENA_UNIT * DMAR_ARENA_UNIT;
	raw_release(f, c, e->aoff, give, e->durable);
	e->aoff += give;
	e->acap -= give;
	e->skip = (uint32_t)(from - give);
	e->off += h;
	e->len -= h;
}

int dmar_file_encode_commit(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_encode_plan *p)
{
	if (!p)
		return 0;
	/* A plan comes from RAW extents, which a shared table never has:
	 * if f shows one now, it changed since prepare (gen below). */
	if (p->gen != f->gen || f->tab) {
		plan_free(p, c, true);
		return -EAGAIN;
	}
	int r = reserve(f, p->nout);
	if (r < 0) {
		plan_free(p, c, true);
		return r;
	}
	/* RAW extents [i, j) lie wholly before the step's end and go; the
	 * one the end falls inside (if any) loses its head. */
	size_t i = p->i, j = i;
	/* The step's range, and the extent whose head it takes, change. */
	uint64_t lo = f->ext[i].off, hi = p->end;
	while (j < f->n && f->ext[j].off + f->ext[j].len <= p->end)
		ext_drop(f, c, &f->ext[j++]);
	if (j < f->n && f->ext[j].off < p->end) {
		hi = f->ext[j].off + f->ext[j].len;
		raw_trim_head(f, c, &f->ext[j], p->end - f->ext[j].off);
	}
	changed(f, lo, hi);
	remove_at(f, i, j - i);
	insert_at(f, i, p->out, p->nout);
	bool raw = false;
	for (size_t k = i + p->nout; k < f->n && !raw; k++)
		raw = f->ext[k].kind == EXT_RAW;
	f->dirty = raw;
	f->gen++;
	plan_free(p, c, false);
	return 0;
}

int dmar_file_encode(struct dmar_file *f, struct dmar_fsctx *c)
{
	for (;;) {
		struct dmar_encode_plan *p;
		int r = dmar_file_encode_prepare(f, c, &p);
		if (r < 0 || !p)
			return r;
		if ((r = dmar_file_encode_commit(f, c, p)) < 0)
			return r;
	}
}

/* --- sharing (copy_file_range) ----------------------------------------- */

ssize_t dmar_file_share(struct dmar_file *dst, struct dmar_file *src, struct dmar_fsctx *c, uint64_t doff,
			uint64_t soff, uint64_t len)
{
	dst->gen++;
	if (soff >= src->size || !len)
		return 0;
	if (len > src->size - soff)
		len = src->size - soff;
	int r;
	if (doff == 0 && soff == 0 && len == src->size && dst->size == 0 && !dst->tab) {
		/* All of src into an empty file: share src's table. */
		struct dmar_xtab *t;
		if ((r = tab_of(src, &t)) == 0) {
			atomic_fetch_add(&t->refs, 1);
			dmar_file_clear(dst, c);
			show_tab(dst, t);
			changed(dst, 0, dst->size);
			return (ssize_t)len;
		}
		if (r != -EAGAIN)
			return r;
		/* RAW extents: copied below. */
	}
	if ((r = own(dst, c)) < 0)
		return r;
	/* Collect src's extents for the range: one allocation (the range's
	 * extent count is known), the chunk references in one batch. */
	size_t first = find(src, soff), last = find(src, soff + len - 1), nt = 0, nids = 0;
	struct dmar_extent *tmp = malloc((last - first + 1) * sizeof(*tmp));
	struct dmar_id *ids = malloc((last - first + 1) * sizeof(*ids));
	struct dmar_chunk_info *info = malloc((last - first + 1) * sizeof(*info));
	r = 0;
	if (!tmp || !ids || !info) {
		r = -ENOMEM;
		goto fail_early;
	}
	uint64_t done = 0;
	for (size_t i = first; done < len; i++) {
		const struct dmar_extent *e = &src->ext[i];
		uint64_t in = soff + done - e->off;
		uint64_t n = e->len - in < len - done ? e->len - in : len - done;
		struct dmar_extent x = *e;
		x.off = doff + done;
		x.len = n;
		x.durable = 0;
		if (e->kind == EXT_CHUNK) {
			ids[nids++] = e->id;
			x.skip = e->skip + (uint32_t)in;
		} else if (e->kind == EXT_RAW) {
			x.skip = (uint32_t)in; /* where to copy from, until the copy below */
		}
		tmp[nt++] = x;
		done += n;
	}
	if ((r = dmar_store_ref_all(c->arena, ids, nids, info)) < 0)
		goto fail_early;
	/* RAW extents (encode=none, or written since the caller encoded src):
	 * the bytes are copied. */
	size_t m = 0;
	for (; m < nt; m++) {
		struct dmar_extent *x = &tmp[m];
		if (x->kind != EXT_RAW)
			continue;
		const struct dmar_extent *e = &src->ext[first + m];
		uint64_t a;
		if ((r = dmar_arena_alloc(c->arena, x->len, &a)) < 0)
			break;
		memcpy(dmar_arena_base(c->arena) + a, raw_ptr(c, e) + x->skip, x->len);
		x->aoff = a;
		x->acap = x->len;
		x->skip = 0;
	}
	if (r < 0) {
		/* Chunks all referenced; RAW copies made only before m. */
		for (size_t k = 0; k < nt; k++)
			if (tmp[k].kind == EXT_CHUNK || k < m)
				ext_drop(dst, c, &tmp[k]);
		goto fail_early;
	}
	free(ids);
	free(info);
	ids = NULL;
	info = NULL;
	/* Make room in dst: [doff, doff+len) becomes exactly tmp. */
	if (doff > dst->size && (r = append_hole(dst, doff - dst->size)) < 0)
		goto fail;
	uint64_t end = doff + len;
	if ((r = reserve(dst, nt + 3)) < 0 || (r = split_at(dst, c, doff)) < 0 ||
	    (end < dst->size && (r = split_at(dst, c, end)) < 0))
		goto fail;
	size_t i = doff < dst->size ? find(dst, doff) : dst->n, j = i;
	while (j < dst->n && dst->ext[j].off < end)
		ext_drop(dst, c, &dst->ext[j++]);
	remove_at(dst, i, j - i);
	insert_at(dst, i, tmp, nt);
	if (end > dst->size)
		dst->size = end;
	changed(dst, doff, end);
	free(tmp);
	return (ssize_t)len;
fail:
	for (size_t k = 0; k < nt; k++)
		ext_drop(dst, c, &tmp[k]);
fail_early:
	free(tmp);
	free(ids);
	free(info);
	return r;
}

void dmar_file_stats(const struct dmar_file *f, struct dmar_fsctx *c, struct dmar_file_stats *st)
{
	(void)c;
	/* The cache is not part of the file's value: const does not cover it. */
	struct dmar_file *w = (struct dmar_file *)f;
	uint64_t *v[6] = { &st->logical, &st->raw, &st->chunked, &st->holes, &st->chunks, &st->stored };
	if (atomic_load_explicit(&w->stats_gen, memory_order_acquire) == f->gen + 1) {
		for (int k = 0; k < 6; k++)
			*v[k] = atomic_load_explicit(&w->stats[k], memory_order_relaxed);
		return;
	}
	memset(st, 0, sizeof(*st));
	st->logical = f->size;
	for (size_t i = 0; i < f->n; i++) {
		const struct dmar_extent *e = &f->ext[i];
		if (e->kind == EXT_HOLE) {
			st->holes += e->len;
		} else if (e->kind == EXT_RAW) {
			st->raw += e->len;
			st->stored += e->acap;
		} else {
			st->chunked += e->len;
			st->chunks++;
			st->stored += e->stored;
		}
	}
	for (int k = 0; k < 6; k++)
		atomic_store_explicit(&w->stats[k], *v[k], memory_order_relaxed);
	atomic_store_explicit(&w->stats_gen, f->gen + 1, memory_order_release);
}

/* --- recipes and the wire ---------------------------------------------- */

int dmar_file_recipe(const struct dmar_file *f, struct dmar_recipe *r)
{
	struct dmar_recipe_entry *e = f->n ? malloc(f->n * sizeof(*e)) : NULL;
	if (f->n && !e)
		return -ENOMEM;
	for (size_t i = 0; i < f->n; i++) {
		const struct dmar_extent *x = &f->ext[i];
		if (x->kind == EXT_RAW) {
			free(e);
			return -EAGAIN; /* not encoded yet */
		}
		memset(&e[i], 0, sizeof(e[i]));
		e[i].len = x->len;
		if (x->kind == EXT_HOLE) {
			e[i].kind = DMAR_RECIPE_HOLE;
		} else {
			e[i].kind = DMAR_RECIPE_CHUNK;
			e[i].id = x->id;
			e[i].skip = x->skip;
		}
	}
	memset(r, 0, sizeof(*r));
	r->size = f->size;
	r->n = f->n;
	r->e = e;
	return 0;
}

/* Append id to a growable array of missing ids (duplicates are rare:
 * the caller reports counts, not a set). */
static int add_missing(struct dmar_id **a, size_t *n, size_t *cap, const struct dmar_id *id)
{
	if (*n && !memcmp((*a)[*n - 1].b, id->b, DMAR_HASH_SIZE))
		return 0;
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		struct dmar_id *x = realloc(*a, c * sizeof(*x));
		if (!x)
			return -ENOMEM;
		*a = x;
		*cap = c;
	}
	(*a)[(*n)++] = *id;
	return 0;
}

size_t dmar_file_extent_bytes(size_t n)
{
	return n * sizeof(struct dmar_extent);
}

/* Recipe entries referenced in one batch by dmar_file_from_recipe: the
 * references of a 10^5-entry recipe need no table of its size. */
#define FROM_RECIPE_BLOCK 1024

int dmar_file_from_recipe(struct dmar_file *f, struct dmar_fsctx *c, const struct dmar_recipe *r,
			  struct dmar_id **missing, size_t *nmissing)
{
	if (too_big(f, c, r->size))
		return -EFBIG;
	struct dmar_file nf;
	dmar_file_init(&nf);
	struct dmar_id *miss = NULL;
	size_t nmiss = 0, capmiss = 0;
	int r2 = 0;
	if (r->n && (r2 = reserve(&nf, r->n)) < 0)
		return r2;
	struct dmar_id *ids = malloc(FROM_RECIPE_BLOCK * sizeof(*ids));
	struct dmar_chunk_info *info = malloc(FROM_RECIPE_BLOCK * sizeof(*info));
	if (!ids || !info) {
		free(ids);
		free(info);
		free(nf.ext);
		return -ENOMEM;
	}
	/* Block by block, every chunk of a block referenced first, in one
	 * batch, then looked at: a payload cannot move while we hold its
	 * reference. */
	for (size_t b = 0; b < r->n && r2 == 0; b += FROM_RECIPE_BLOCK) {
		size_t end = r->n - b < FROM_RECIPE_BLOCK ? r->n : b + FROM_RECIPE_BLOCK, nids = 0, k = 0;
		for (size_t i = b; i < end; i++)
			if (r->e[i].kind == DMAR_RECIPE_CHUNK)
				ids[nids++] = r->e[i].id;
		dmar_store_ref_many(c->arena, ids, nids, info);
		for (size_t i = b; i < end; i++) {
			const struct dmar_recipe_entry *e = &r->e[i];
			struct dmar_extent x = { .off = nf.size, .len = e->len, .kind = EXT_HOLE };
			if (e->kind == DMAR_RECIPE_CHUNK) {
				const struct dmar_chunk_info *ci = &info[k++];
				if (!ci->refs) {
					if ((r2 = add_missing(&miss, &nmiss, &capmiss, &e->id)) < 0)
						break;
					nf.size += e->len;
					continue;
				}
				if ((uint64_t)e->skip + e->len > ci->len) {
					dmar_store_unref(c->arena, &e->id);
					r2 = -EINVAL;
					break;
				}
				x = (struct dmar_extent){ .off = nf.size, .len = e->len, .kind = EXT_CHUNK, .enc = ci->enc,
							  .skip = e->skip, .clen = ci->len, .stored = ci->stored_len,
							  .aoff = ci->off, .id = e->id };
			}
			nf.ext[nf.n++] = x;
			nf.size += e->len;
		}
		if (r2 < 0) {
			/* The block's references beyond where the walk stopped. */
			size_t left = 0;
			for (size_t j = k; j < nids; j++)
				if (info[j].refs)
					ids[left++] = ids[j];
			dmar_store_unref_many(c->arena, ids, left);
		}
	}
	if (r2 == 0 && nmiss)
		r2 = -ENODATA;
	free(ids);
	free(info);
	if (r2 < 0)
		goto fail;
	free(miss);
	dmar_file_clear(f, c);
	f->ext = nf.ext;
	f->n = nf.n;
	f->cap = nf.cap;
	f->size = nf.size;
	changed(f, 0, f->size);
	return 0;
fail:
	for (size_t i = 0; i < nf.n; i++)
		ext_drop(NULL, c, &nf.ext[i]);
	free(nf.ext);
	if (r2 == -ENODATA && missing) {
		*missing = miss;
		*nmissing = nmiss;
	} else {
		free(miss);
	}
	return r2;
}

/* How far from where the walk expects it a repeated id is looked for. */
#define COMPLETE_SLACK 64

static bool prefix_is(const struct dmar_extent *e, const struct dmar_id *id, unsigned idlen)
{
	return e->kind == EXT_CHUNK && !memcmp(e->id.b, id->b, idlen);
}

size_t dmar_file_complete_ids(const struct dmar_file *f, struct dmar_id *ids, size_t n, unsigned idlen,
			      uint8_t *state)
{
	/* j: the extent of f the next id most likely repeats; lost: ids not
	 * found since the last one that was.  A region rewritten in place
	 * replaces about as many chunks as it had, so after one the old ids
	 * resume about lost extents past j; an insertion or a deletion
	 * shifts them by a few. */
	size_t j = 0, lost = 0, done = 0;
	/* Comparisons left: a file that repeats nothing of f (another file
	 * under the old name) costs a few per id, then the store's lookups
	 * as before. */
	size_t budget = 8 * n + 4 * COMPLETE_SLACK;
	for (size_t k = 0; k < n && f->n && budget >= 2 * (COMPLETE_SLACK + 1); k++) {
		size_t hit = SIZE_MAX, x;
		for (x = j; x <= j + COMPLETE_SLACK && x < f->n && hit == SIZE_MAX; x++)
			if (prefix_is(&f->ext[x], &ids[k], idlen))
				hit = x;
		budget -= x - j;
		if (hit == SIZE_MAX && lost > COMPLETE_SLACK / 2) {
			size_t lo = j + lost - COMPLETE_SLACK / 2, hi = j + lost + COMPLETE_SLACK / 2;
			for (x = lo; x <= hi && x < f->n && hit == SIZE_MAX; x++)
				if (prefix_is(&f->ext[x], &ids[k], idlen))
					hit = x;
			budget -= x > lo ? x - lo : 0;
		}
		if (hit == SIZE_MAX) {
			lost++;
			continue;
		}
		ids[k] = f->ext[hit].id;
		state[k] = 0;
		done++;
		j = hit + 1;
		lost = 0;
	}
	return done;
}

int dmar_fsctx_chunk_wire(struct dmar_fsctx *c, const struct dmar_id *id, struct dmar_wire_chunk *w, uint8_t **buf)
{
	struct dmar_chunk_info info;
	*buf = NULL;
	int r = dmar_store_lookup(c->arena, id, &info);
	if (r < 0)
		return r;
	const uint8_t *p = dmar_arena_base(c->arena) + info.off;
	*w = (struct dmar_wire_chunk){ .id = *id, .len = info.len, .stored = info.stored_len, .payload = p };
	if (info.enc == DMAR_CHUNK_RAW) {
		w->enc = DMAR_WIRE_RAW;
		/* Every chunk goes into the store through store_ref_policy, so
		 * one it would compress and is raw saved too little. */
		w->tried = policy_compresses(c, info.len);
	} else if (info.enc == DMAR_CHUNK_ZSTD) {
		w->enc = DMAR_WIRE_ZSTD; /* already a magicless frame without dictionary */
	} else {
		/* The byte pack is this mount's own: a peer may not have it, so
		 * such chunks travel decoded (the wire recompresses them). */
		struct dmar_extent e = { .kind = EXT_CHUNK, .enc = info.enc, .clen = info.len,
					 .stored = info.stored_len, .aoff = info.off, .id = *id };
		const uint8_t *d = chunk_bytes(c, &e, &r);
		if (!d)
			return r;
		if (!(*buf = malloc(info.len)))
			return -ENOMEM;
		memcpy(*buf, d, info.len);
		w->enc = DMAR_WIRE_RAW;
		w->stored = info.len;
		w->payload = *buf;
	}
	return 0;
}

int dmar_fsctx_chunk_put(struct dmar_fsctx *c, const struct dmar_wire_chunk *w, const uint8_t *decoded)
{
	/* Keep a zstd frame as it came when this mount compresses: the
	 * sender paid for it, and recompressing (with the byte pack) would
	 * cost a decode and an encode per chunk on the receive path.  A raw
	 * chunk goes through the local write's policy: it came raw inside a
	 * zstd batch (Content-Encoding: zstd) or from a sender with
	 * encode=none, so its being raw says nothing about this mount's
	 * encode=.  Chunks are stored once, here: staging only holds a
	 * reference, and a stored chunk is never re-encoded (files' extents
	 * hold its arena offset), so this is where it becomes what it stays. */
	if (c->encode == DMAR_ENCODE_ZSTD && w->enc == DMAR_WIRE_ZSTD && w->len <= c->chunker.max)
		return dmar_store_ref(c->arena, &w->id, DMAR_CHUNK_ZSTD, w->len, w->payload, w->stored, NULL);
	return store_ref_policy(c, &w->id, decoded, w->len);
}

/* --- durability ---------------------------------------------------------- */

struct range {
	uint64_t off, len;
};

/* A state the journal may show: the chunk references it holds. */
struct dstate {
	struct dmar_xtab *tab; /* its extents as one table: one reference */
	struct dmar_id *ids;   /* or the chunks it shows: a reference each */
	size_t nids;
	struct dstate *next;   /* older */
};

struct dmar_dur {
	struct dstate *states; /* newest first */
	struct range *pending; /* RAW space the live file gave back */
	size_t npending, cap;
	bool synced;           /* a sync was recorded: the changes since are tracked */
};

struct dmar_file_sync {
	struct dstate *st;
	struct range *detached; /* the pending space when the sync began */
	size_t ndetached;
	uint64_t chg[DMAR_FILE_CHG_MAX][2]; /* f's changes, put back if not recorded */
	unsigned nchg;
	unsigned nr;
	struct {
		uint64_t lo, hi;
		size_t first, n;
	} r[DMAR_FILE_CHG_MAX];
};

/* Widen the ranges changed since the last sync by [lo, hi): sorted,
 * disjoint, at most DMAR_FILE_CHG_MAX (the two nearest merge). */
static void changed(struct dmar_file *f, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return;
	unsigned n = f->nchg, k = 0;
	uint64_t (*c)[2] = f->chg;
	while (k < n && c[k][1] < lo)
		k++;
	unsigned j = k;
	while (j < n && c[j][0] <= hi) {
		lo = c[j][0] < lo ? c[j][0] : lo;
		hi = c[j][1] > hi ? c[j][1] : hi;
		j++;
	}
	/* [k, j) merge into one at k. */
	if (j == k) {
		if (n == DMAR_FILE_CHG_MAX) {
			/* Full: merge the closest neighbours (the new range
			 * counted among them) until there is room. */
			uint64_t tmp[DMAR_FILE_CHG_MAX + 1][2];
			memcpy(tmp, c, k * sizeof(c[0]));
			tmp[k][0] = lo;
			tmp[k][1] = hi;
			memcpy(tmp + k + 1, c + k, (n - k) * sizeof(c[0]));
			unsigned best = 0;
			for (unsigned i = 1; i < n; i++)
				if (tmp[i + 1][0] - tmp[i][1] < tmp[best + 1][0] - tmp[best][1])
					best = i;
			tmp[best][1] = tmp[best + 1][1];
			memmove(tmp + best + 1, tmp + best + 2, (n - best - 1) * sizeof(tmp[0]));
			memcpy(c, tmp, n * sizeof(c[0]));
			return;
		}
		memmove(c + k + 1, c + k, (n - k) * sizeof(c[0]));
		f->nchg = n + 1;
	} else if (j > k + 1) {
		memmove(c + k + 1, c + j, (n - j) * sizeof(c[0]));
		f->nchg = n - (j - k - 1);
	}
	c[k][0] = lo;
	c[k][1] = hi;
}

/* Space a RAW extent gave back.  If a durable state may show it, it waits
 * in the pending list for the next sync; with no memory for that, it is
 * kept for good (a leak the check reports, never reuse under a state). */
static void raw_release(struct dmar_file *f, struct dmar_fsctx *c, uint64_t off, uint64_t len, bool durable)
{
	if (!len)
		return;
	if (!durable || !f || !f->dur) {
		dmar_arena_release(c->arena, off, len);
		return;
	}
	struct dmar_dur *d = f->dur;
	if (d->npending == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 16;
		struct range *p = realloc(d->pending, cap * sizeof(*p));
		if (!p)
			return;
		d->pending = p;
		d->cap = cap;
	}
	d->pending[d->npending++] = (struct range){ off, len };
}

static void release_ranges(struct dmar_fsctx *c, struct range *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dmar_arena_release(c->arena, r[i].off, r[i].len);
	free(r);
}

static void dstate_drop(struct dstate *st, struct dmar_fsctx *c)
{
	while (st) {
		struct dstate *next = st->next;
		if (st->tab)
			tab_put(st->tab, c);
		else if (st->nids)
			dmar_store_unref_many(c->arena, st->ids, st->nids);
		free(st->ids);
		free(st);
		st = next;
	}
}

void dmar_file_destroy(struct dmar_file *f, struct dmar_fsctx *c)
{
	clear_extents(f, c);
	if (f->dur) {
		dstate_drop(f->dur->states, c);
		release_ranges(c, f->dur->pending, f->dur->npending);
		free(f->dur);
	}
	uint64_t gen = f->gen;
	dmar_file_init(f);
	f->gen = gen + 1;
}

/* The state f shows now, with its own references: f's table (made of f's
 * extents if it has no RAW one), or its chunk ids. */
static int dstate_new(struct dmar_file *f, struct dmar_fsctx *c, struct dstate **out)
{
	struct dstate *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	struct dmar_xtab *t;
	int r = tab_of(f, &t);
	if (r == 0) {
		atomic_fetch_add(&t->refs, 1);
		st->tab = t;
	} else if (r == -EAGAIN) {
		size_t n = 0;
		for (size_t i = 0; i < f->n; i++)
			n += f->ext[i].kind == EXT_CHUNK;
		st->ids = malloc((n ? n : 1) * sizeof(*st->ids));
		struct dmar_chunk_info *info = malloc((n ? n : 1) * sizeof(*info));
		r = st->ids && info ? 0 : -ENOMEM;
		for (size_t i = 0; !r && i < f->n; i++)
			if (f->ext[i].kind == EXT_CHUNK)
				st->ids[st->nids++] = f->ext[i].id;
		/* f holds each of them: none can be missing. */
		if (!r && (r = dmar_store_ref_all(c->arena, st->ids, st->nids, info)) < 0)
			r = -EIO;
		free(info);
		if (r < 0)
			st->nids = 0;
	}
	if (r < 0) {
		free(st->ids);
		free(st);
		return r;
	}
	for (size_t i = 0; !f->tab && i < f->n; i++)
		if (f->ext[i].kind == EXT_RAW)
			f->ext[i].durable = 1;
	*out = st;
	return 0;
}

bool dmar_file_sync_needed(const struct dmar_file *f)
{
	return !f->dur || !f->dur->synced || f->nchg;
}

int dmar_file_sync_begin(struct dmar_file *f, struct dmar_fsctx *c, bool full, struct dmar_file_sync **out)
{
	if (!f->dur && !(f->dur = calloc(1, sizeof(*f->dur))))
		return -ENOMEM;
	struct dmar_file_sync *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int r = dstate_new(f, c, &s->st);
	if (r < 0) {
		free(s);
		return r;
	}
	full = full || !f->dur->synced;
	uint64_t ranges[DMAR_FILE_CHG_MAX][2];
	unsigned nin = 0;
	if (full) {
		ranges[nin][0] = 0;
		ranges[nin++][1] = f->size;
	} else {
		memcpy(ranges, f->chg, f->nchg * sizeof(f->chg[0]));
		nin = f->nchg;
	}
	/* Whole extents, clipped to the size; ranges that come to overlap
	 * once widened merge. */
	for (unsigned k = 0; k < nin; k++) {
		uint64_t lo = ranges[k][0], hi = ranges[k][1] < f->size ? ranges[k][1] : f->size;
		if (lo >= hi) {
			if (!(full && f->size == 0))
				continue;
		}
		size_t a = 0, b = 0;
		if (lo < hi) {
			a = find(f, lo);
			b = find(f, hi - 1) + 1;
			lo = f->ext[a].off;
			hi = f->ext[b - 1].off + f->ext[b - 1].len;
		}
		if (s->nr && s->r[s->nr - 1].hi >= lo && lo < hi) {
			size_t first = s->r[s->nr - 1].first;
			s->r[s->nr - 1].hi = hi > s->r[s->nr - 1].hi ? hi : s->r[s->nr - 1].hi;
			s->r[s->nr - 1].n = b > first + s->r[s->nr - 1].n ? b - first : s->r[s->nr - 1].n;
			continue;
		}
		s->r[s->nr].lo = lo;
		s->r[s->nr].hi = hi;
		s->r[s->nr].first = a;
		s->r[s->nr].n = b - a;
		s->nr++;
	}
	memcpy(s->chg, f->chg, sizeof(f->chg));
	s->nchg = f->nchg;
	f->nchg = 0;
	s->detached = f->dur->pending;
	s->ndetached = f->dur->npending;
	f->dur->pending = NULL;
	f->dur->npending = f->dur->cap = 0;
	*out = s;
	return 0;
}

unsigned dmar_file_sync_ranges(const struct dmar_file_sync *s)
{
	return s->nr;
}

void dmar_file_sync_range(const struct dmar_file_sync *s, unsigned k, uint64_t *lo, uint64_t *hi, size_t *first,
			  size_t *n)
{
	*lo = s->r[k].lo;
	*hi = s->r[k].hi;
	*first = s->r[k].first;
	*n = s->r[k].n;
}

void dmar_file_sync_ext(const struct dmar_file *f, size_t i, struct dmar_rext *x)
{
	const struct dmar_extent *e = &f->ext[i];
	*x = (struct dmar_rext){ .len = e->len, .skip = e->skip };
	if (e->kind == EXT_RAW) {
		x->kind = DMAR_REXT_RAW;
		x->aoff = e->aoff;
		x->acap = e->acap;
	} else if (e->kind == EXT_CHUNK) {
		x->kind = DMAR_REXT_CHUNK;
		x->enc = e->enc;
		x->aoff = e->aoff;
		x->clen = e->clen;
		x->stored = e->stored;
		x->id = e->id;
	} else {
		x->kind = DMAR_REXT_HOLE;
		x->skip = 0;
	}
}

void dmar_file_sync_end(struct dmar_file *f, struct dmar_fsctx *c, struct dmar_file_sync *s, bool recorded)
{
	struct dmar_dur *d = f->dur;
	if (recorded) {
		dstate_drop(d->states, c);
		d->states = s->st;
		d->synced = true;
		release_ranges(c, s->detached, s->ndetached);
	} else {
		/* Nothing recorded: every state may still be the journal's,
		 * every pending range still shown by one. */
		s->st->next = d->states;
		d->states = s->st;
		for (size_t i = 0; i < s->ndetached; i++)
			raw_release(f, c, s->detached[i].off, s->detached[i].len, true);
		free(s->detached);
		for (unsigned k = 0; k < s->nchg; k++)
			changed(f, s->chg[k][0], s->chg[k][1]);
	}
	free(s);
}

/* --- replay -------------------------------------------------------------- */

/* Replay's split: bookkeeping only (a RAW piece after the cut shows the
 * same allocation further in; activation gives it its own). */
static int rsplit(struct dmar_file *f, uint64_t off)
{
	size_t i;
	uint64_t head;
	struct dmar_extent t;
	if (!split_point(f, off, &i, &head, &t))
		return 0;
	const struct dmar_extent *e = &f->ext[i];
	if (e->kind != EXT_HOLE) {
		if ((uint64_t)e->skip + head > UINT32_MAX)
			return -EINVAL;
		t.skip = e->skip + (uint32_t)head;
	}
	return split_finish(f, i, head, &t);
}

int dmar_file_replay(struct dmar_file *f, uint64_t size, uint64_t lo, uint64_t hi, const struct dmar_rext *x,
		     size_t n)
{
	uint64_t sum = 0;
	if (lo > hi || hi > size)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!x[i].len || x[i].kind > DMAR_REXT_CHUNK || x[i].len > UINT64_MAX - sum)
			return -EINVAL;
		sum += x[i].len;
	}
	if (sum != hi - lo)
		return -EINVAL;
	int r;
	/* The size first: cut or grown by a hole. */
	if (size < f->size) {
		if ((r = rsplit(f, size)) < 0)
			return r;
		size_t k = size ? find(f, size - 1) + 1 : 0;
		f->n = k;
		f->size = size;
	} else if (size > f->size && (r = append_hole(f, size - f->size)) < 0) {
		return r;
	}
	if (lo == hi)
		return 0;
	if ((r = reserve(f, n + 2)) < 0 || (r = rsplit(f, lo)) < 0 || (r = rsplit(f, hi)) < 0)
		return r;
	size_t a = find(f, lo), b = a;
	while (b < f->n && f->ext[b].off < hi)
		b++;
	remove_at(f, a, b - a);
	if ((r = reserve(f, n)) < 0)
		return r;
	uint64_t at = lo;
	for (size_t i = 0; i < n; i++) {
		struct dmar_extent e = { .off = at, .len = x[i].len };
		if (x[i].kind == DMAR_REXT_RAW) {
			if (x[i].skip >= x[i].acap || x[i].len > x[i].acap - x[i].skip)
				return -EINVAL;
			e.kind = EXT_RAW;
			e.aoff = x[i].aoff;
			e.acap = x[i].acap;
			e.skip = x[i].skip;
		} else if (x[i].kind == DMAR_REXT_CHUNK) {
			if ((uint64_t)x[i].skip + x[i].len > x[i].clen)
				return -EINVAL;
			e.kind = EXT_CHUNK;
			e.enc = x[i].enc;
			e.skip = x[i].skip;
			e.clen = x[i].clen;
			e.stored = x[i].stored;
			e.aoff = x[i].aoff;
			e.id = x[i].id;
		}
		insert_at(f, a + i, &e, 1);
		at += x[i].len;
	}
	return 0;
}

void dmar_file_forget(struct dmar_file *f)
{
	if (!f->tab)
		free(f->ext);
	uint64_t gen = f->gen;
	dmar_file_init(f);
	f->gen = gen + 1;
}

static int cmp_aoff(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

int dmar_file_activate(struct dmar_file *f, struct dmar_fsctx *c)
{
	int r = 0;
	f->nchg = 0;
	f->gen++;
	/* RAW pieces of one allocation: the first claims it, the others are
	 * marked (durable 2) for dmar_file_activate_copies. */
	size_t nraw = 0;
	for (size_t i = 0; i < f->n; i++)
		nraw += f->ext[i].kind == EXT_RAW;
	uint64_t *seen = nraw ? malloc(nraw * sizeof(*seen)) : NULL;
	if (nraw && !seen)
		return -ENOMEM;
	size_t nseen = 0;
	for (size_t i = 0; i < f->n && !r; i++) {
		struct dmar_extent *e = &f->ext[i];
		if (e->kind == EXT_CHUNK) {
			r = dmar_store_adopt(c->arena, &e->id, e->enc, e->clen, e->aoff, e->stored);
		} else if (e->kind == EXT_RAW) {
			e->durable = 1;
			if (nseen && bsearch(&e->aoff, seen, nseen, sizeof(*seen), cmp_aoff)) {
				e->durable = 2;
				continue;
			}
			r = dmar_arena_claim(c->arena, e->aoff, e->acap);
			if (r == -EEXIST)
				r = -EUCLEAN;
			seen[nseen++] = e->aoff;
			qsort(seen, nseen, sizeof(*seen), cmp_aoff);
		}
		if (!r)
			f->dirty |= e->kind == EXT_RAW;
	}
	free(seen);
	if (r < 0)
		return r;
	if (!f->dur && !(f->dur = calloc(1, sizeof(*f->dur))))
		return -ENOMEM;
	struct dstate *st;
	if ((r = dstate_new(f, c, &st)) < 0)
		return r;
	st->next = f->dur->states;
	f->dur->states = st;
	f->dur->synced = true;
	return 0;
}

int dmar_file_activate_copies(struct dmar_file *f, struct dmar_fsctx *c)
{
	for (size_t i = 0; !f->tab && i < f->n; i++) {
		struct dmar_extent *e = &f->ext[i];
		if (e->kind != EXT_RAW || e->durable != 2)
			continue;
		uint64_t a;
		int r = dmar_arena_alloc(c->arena, e->len, &a);
		if (r < 0)
			return r;
		memcpy(dmar_arena_base(c->arena) + a, raw_ptr(c, e), e->len);
		raw_moved(f, e, a);
	}
	return 0;
}

/* --- checks -------------------------------------------------------------- */

void dmar_file_refs(const struct dmar_file *f, const struct dmar_file_refs *r)
{
	if (f->tab) {
		r->table(r->ctx, f->tab);
	} else {
		for (size_t i = 0; i < f->n; i++) {
			const struct dmar_extent *e = &f->ext[i];
			if (e->kind == EXT_RAW)
				r->raw(r->ctx, e->aoff, e->acap);
			else if (e->kind == EXT_CHUNK)
				r->chunk(r->ctx, &e->id);
		}
	}
	if (!f->dur)
		return;
	for (size_t i = 0; i < f->dur->npending; i++)
		r->raw(r->ctx, f->dur->pending[i].off, f->dur->pending[i].len);
	for (const struct dstate *st = f->dur->states; st; st = st->next) {
		if (st->tab)
			r->table(r->ctx, st->tab);
		for (size_t i = 0; i < st->nids; i++)
			r->chunk(r->ctx, &st->ids[i]);
	}
}

void dmar_file_table_ids(const struct dmar_xtab *t, void (*fn)(void *ctx, const struct dmar_id *id), void *ctx)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->ext[i].kind == EXT_CHUNK)
			fn(ctx, &t->ext[i].id);
}
