/* SPDX-License-Identifier: MIT */
/*
 * The records (docs/format.md, "The journal's records").  A journal
 * record is a run of operations, applied in order and all or none:
 *
 *   op      = type (u8), 3 zero bytes, len (u32: the body's bytes, a
 *             multiple of 8), body
 *   INODE   = ino, mode, uid, gid, target length, rdev, atime, mtime,
 *             ctime, then the symlink target: an inode's attributes (it
 *             is made when the number is new)
 *   LINK    = parent, ino, time, flags (REPLACE, TOUCH), name length, name
 *   UNLINK  = parent, time, name length, name
 *   RENAME  = parent, new parent, time, flags (rename(2)'s), the two
 *             name lengths, the names
 *   XSET    = ino, ctime, name length, value length, name, value
 *   XDEL    = ino, ctime, name length, 0, name
 *   CONTENT = ino, size, mode, mtime, ctime, lo, hi, n, then n extents
 *             making [lo, hi): the file gets that size, then those
 *             extents for that range (file.h: dmar_file_replay)
 *   STATE   = the next inode number (a checkpoint's first op)
 *   extent  = kind (u8), enc (u8), 0 (u16), skip (u32), len (u64), then
 *             RAW: allocation offset and bytes (u64 each); CHUNK: payload
 *             offset (u64), chunk and payload bytes (u32 each), id (32)
 * Times are seconds and nanoseconds (i64 each).  Integers are
 * little-endian, as the arena they describe is this machine's memory.
 *
 * Replay keeps a lookup reference on every inode it meets, so that an
 * inode removed partway stays a valid target for the records that follow
 * (a sync recorded just after an unlink); it drops them all at the end,
 * which frees the inodes left without a name.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "persist.h"
#include "arena/journal.h"
#include "codec/clock.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the journal's records are little-endian"
#endif

enum { OP_INODE = 1, OP_LINK, OP_UNLINK, OP_RENAME, OP_XSET, OP_XDEL, OP_CONTENT, OP_STATE };
enum { LINK_REPLACE = 1, LINK_TOUCH = 2 };

struct op_hdr {
	uint8_t type;
	uint8_t pad[3];
	uint32_t len;
};

struct ts {
	int64_t sec, nsec;
};

struct op_inode {
	uint64_t ino;
	uint32_t mode, uid, gid, tlen;
	uint64_t rdev;
	struct ts at, mt, ct;
};

struct op_link {
	uint64_t parent, ino;
	struct ts t;
	uint32_t flags, nlen;
};

struct op_unlink {
	uint64_t parent;
	struct ts t;
	uint32_t nlen, pad;
};

struct op_rename {
	uint64_t parent, newparent;
	struct ts t;
	uint32_t flags;
	uint16_t nlen, nnlen;
};

struct op_xattr {
	uint64_t ino;
	struct ts ct;
	uint32_t nlen, vlen;
};

struct op_content {
	uint64_t ino, size;
	uint32_t mode, pad;
	struct ts mt, ct;
	uint64_t lo, hi, n;
};

struct op_ext {
	uint8_t kind, enc;
	uint16_t pad;
	uint32_t skip;
	uint64_t len;
};

struct op_raw {
	uint64_t aoff, acap;
};

struct op_chunk {
	uint64_t aoff;
	uint32_t clen, stored;
	uint8_t id[32];
};

/* A record being built.  Big ones (a checkpoint, a sync of a big file)
 * go out in pieces of about FLUSH_AT bytes, at operation boundaries. */
#define FLUSH_AT (8u << 20)
/* A log shorter than this is never rewritten (a checkpoint then would
 * cost more than the replay it saves).  DMARFS_CHECKPOINT_MIN (bytes)
 * overrides it: the crash tests make checkpoints frequent with it. */
#define CKPT_MIN (4u << 20)

static uint64_t ckpt_min(void)
{
	static uint64_t v;
	return ns_env_knob("DMARFS_CHECKPOINT_MIN", CKPT_MIN, &v);
}
/* Extents per CONTENT operation at most (a range with more is cut). */
#define EXTS_PER_OP 65536

struct rec {
	uint8_t *b;
	size_t n, cap;
	int err; /* -ENOMEM while building */
	uint64_t appended; /* records appended */
};

static void *rec_grow(struct rec *r, size_t n)
{
	if (r->err)
		return NULL;
	if (r->n + n > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		while (cap < r->n + n)
			cap *= 2;
		uint8_t *b = realloc(r->b, cap);
		if (!b) {
			r->err = -ENOMEM;
			return NULL;
		}
		r->b = b;
		r->cap = cap;
	}
	void *p = r->b + r->n;
	r->n += n;
	return p;
}

/* Make room for n more bytes without writing them. */
static void rec_reserve(struct rec *r, size_t n)
{
	size_t at = r->n;
	if (rec_grow(r, n))
		r->n = at;
}

static void rec_put(struct rec *r, const void *p, size_t n)
{
	void *d = rec_grow(r, n);
	if (d && n)
		memcpy(d, p, n);
}

/* Start an operation: its header's offset, for op_end. */
static size_t op_begin(struct rec *r, uint8_t type)
{
	size_t at = r->n;
	struct op_hdr h = { .type = type };
	rec_put(r, &h, sizeof(h));
	return at;
}

static void op_end(struct rec *r, size_t at)
{
	size_t body = r->n - at - sizeof(struct op_hdr), pad = (8 - body % 8) % 8;
	static const uint8_t zero[8];
	rec_put(r, zero, pad);
	if (!r->err)
		((struct op_hdr *)(r->b + at))->len = (uint32_t)(body + pad);
}

static struct ts ts_of(struct timespec t)
{
	return (struct ts){ t.tv_sec, t.tv_nsec };
}

static struct timespec timespec_of(struct ts t)
{
	return (struct timespec){ .tv_sec = t.sec, .tv_nsec = t.nsec };
}

/* Append what r holds as one record. */
static int rec_flush(struct dmarfs *fs, struct rec *r, bool must)
{
	if (r->err)
		return r->err;
	if (!r->n)
		return 0;
	struct iovec v = { r->b, r->n };
	int e = dmar_journal_append(fs->cfg.journal, &v, 1, must);
	if (e == 0) {
		r->n = 0;
		r->appended++;
	}
	return e;
}

static void rec_free(struct rec *r)
{
	free(r->b);
}

/* A record that may be big (a file's contents) starts with the kept
 * buffer, and its buffer is kept after (the bigger of the two, up to
 * REC_KEEP_MAX). */
#define REC_KEEP_MAX (FLUSH_AT + (8u << 20))

static void rec_take(struct dmarfs *fs, struct rec *r)
{
	pthread_mutex_lock(&fs->rec_mu);
	r->b = fs->rec_spare;
	r->cap = fs->rec_spare_cap;
	fs->rec_spare = NULL;
	fs->rec_spare_cap = 0;
	pthread_mutex_unlock(&fs->rec_mu);
}

static void rec_keep(struct dmarfs *fs, struct rec *r)
{
	if (r->cap <= REC_KEEP_MAX) {
		pthread_mutex_lock(&fs->rec_mu);
		if (r->cap > fs->rec_spare_cap) {
			uint8_t *b = fs->rec_spare;
			fs->rec_spare = r->b;
			fs->rec_spare_cap = r->cap;
			r->b = b;
		}
		pthread_mutex_unlock(&fs->rec_mu);
	}
	rec_free(r);
}

/* ---- building operations ----------------------------------------------- */

/* i->lock held (shared is enough) or i private. */
static void put_inode(struct rec *r, const struct inode *i)
{
	size_t at = op_begin(r, OP_INODE);
	size_t tlen = S_ISLNK(i->mode) && i->target ? strlen(i->target) : 0;
	struct op_inode o = { .ino = i->st_ino, .mode = i->mode, .uid = i->uid, .gid = i->gid,
			      .tlen = (uint32_t)tlen, .rdev = i->rdev, .at = ts_of(i->atime),
			      .mt = ts_of(i->mtime), .ct = ts_of(i->ctime) };
	rec_put(r, &o, sizeof(o));
	rec_put(r, i->target, tlen);
	op_end(r, at);
}

static void put_link(struct rec *r, const struct inode *d, const char *name, const struct inode *i,
		     struct timespec t, uint32_t flags)
{
	size_t at = op_begin(r, OP_LINK), n = strlen(name);
	struct op_link o = { .parent = d->st_ino, .ino = i->st_ino, .t = ts_of(t), .flags = flags, .nlen = (uint32_t)n };
	rec_put(r, &o, sizeof(o));
	rec_put(r, name, n);
	op_end(r, at);
}

static void put_xattr(struct rec *r, const struct inode *i, const char *name, const void *value, size_t len,
		      bool remove)
{
	size_t at = op_begin(r, remove ? OP_XDEL : OP_XSET), n = strlen(name);
	struct op_xattr o = { .ino = i->st_ino, .ct = ts_of(i->ctime), .nlen = (uint32_t)n,
			      .vlen = remove ? 0 : (uint32_t)len };
	rec_put(r, &o, sizeof(o));
	rec_put(r, name, n);
	if (!remove)
		rec_put(r, value, len);
	op_end(r, at);
}

static void put_ext(struct rec *r, const struct dmar_rext *x)
{
	struct op_ext e = { .kind = x->kind, .enc = x->enc, .skip = x->skip, .len = x->len };
	rec_put(r, &e, sizeof(e));
	if (x->kind == DMAR_REXT_RAW) {
		struct op_raw w = { x->aoff, x->acap };
		rec_put(r, &w, sizeof(w));
	} else if (x->kind == DMAR_REXT_CHUNK) {
		struct op_chunk c = { .aoff = x->aoff, .clen = x->clen, .stored = x->stored };
		memcpy(c.id, x->id.b, sizeof(c.id));
		rec_put(r, &c, sizeof(c));
	}
}

/* CONTENT operations for i's sync s (i->lock held exclusively): one per
 * range, cut every EXTS_PER_OP extents, the record flushed between
 * operations once it passes FLUSH_AT.  A size-only change (or a file
 * with nothing in range) is one operation with an empty range. */
static int put_contents(struct dmarfs *fs, struct rec *r, const struct inode *i, const struct dmar_file_sync *s,
			bool must)
{
	struct op_content base = { .ino = i->st_ino, .size = i->f.size, .mode = i->mode, .mt = ts_of(i->mtime),
				   .ct = ts_of(i->ctime) };
	unsigned nr = dmar_file_sync_ranges(s);
	bool any = false;
	for (unsigned k = 0; k < nr; k++) {
		uint64_t lo, hi;
		size_t first, n;
		dmar_file_sync_range(s, k, &lo, &hi, &first, &n);
		for (size_t done = 0; done < n || (!n && !done && !any);) {
			size_t take = n - done < EXTS_PER_OP ? n - done : EXTS_PER_OP;
			struct dmar_rext x;
			uint64_t plo = lo, len = 0;
			/* The range's last operation ends where the range does. */
			if (done + take == n) {
				len = hi - lo;
			} else {
				for (size_t j = 0; j < take; j++) {
					dmar_file_sync_ext(&i->f, first + done + j, &x);
					len += x.len;
				}
			}
			/* Room for the operation at once: a 1 GiB file's 2 MiB
			 * would be reached by ten doublings, each a copy. */
			rec_reserve(r, sizeof(struct op_hdr) + sizeof(struct op_content) +
					       take * (sizeof(struct op_ext) + sizeof(struct op_chunk)) + 8);
			struct op_content o = base;
			o.lo = plo;
			o.hi = plo + len;
			o.n = take;
			size_t at = op_begin(r, OP_CONTENT);
			rec_put(r, &o, sizeof(o));
			for (size_t j = 0; j < take; j++) {
				dmar_file_sync_ext(&i->f, first + done + j, &x);
				put_ext(r, &x);
			}
			op_end(r, at);
			any = true;
			lo += len;
			done += take;
			if (!take)
				break;
			int e;
			if (r->n >= FLUSH_AT && (e = rec_flush(fs, r, must)) < 0)
				return e;
		}
	}
	if (!any) {
		struct op_content o = base;
		size_t at = op_begin(r, OP_CONTENT);
		rec_put(r, &o, sizeof(o));
		op_end(r, at);
	}
	return r->err;
}

/* ---- namespace records ---------------------------------------------- */

static bool recording(const struct dmarfs *fs)
{
	return fs->cfg.journal && !fs->replaying;
}

int persist_make(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, struct timespec t)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	put_inode(&r, i);
	put_link(&r, d, name, i, t, LINK_TOUCH);
	int e = rec_flush(fs, &r, false);
	rec_free(&r);
	return e;
}

int persist_link(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, struct timespec t)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	put_link(&r, d, name, i, t, LINK_TOUCH);
	int e = rec_flush(fs, &r, false);
	rec_free(&r);
	return e;
}

int persist_remove(struct dmarfs *fs, struct inode *d, const char *name, struct timespec t)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	size_t at = op_begin(&r, OP_UNLINK), n = strlen(name);
	struct op_unlink o = { .parent = d->st_ino, .t = ts_of(t), .nlen = (uint32_t)n };
	rec_put(&r, &o, sizeof(o));
	rec_put(&r, name, n);
	op_end(&r, at);
	int e = rec_flush(fs, &r, true);
	rec_free(&r);
	return e;
}

int persist_rename(struct dmarfs *fs, struct inode *d, const char *name, struct inode *nd, const char *newname,
		   unsigned flags, struct inode *whiteout, struct timespec t)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	size_t at = op_begin(&r, OP_RENAME), n = strlen(name), nn = strlen(newname);
	struct op_rename o = { .parent = d->st_ino, .newparent = nd->st_ino, .t = ts_of(t), .flags = flags,
			       .nlen = (uint16_t)n, .nnlen = (uint16_t)nn };
	rec_put(&r, &o, sizeof(o));
	rec_put(&r, name, n);
	rec_put(&r, newname, nn);
	op_end(&r, at);
	if (whiteout) {
		put_inode(&r, whiteout);
		put_link(&r, d, name, whiteout, t, LINK_TOUCH);
	}
	/* A rename over a file frees it: it may use the spare. */
	int e = rec_flush(fs, &r, true);
	rec_free(&r);
	return e;
}

int persist_commit(struct dmarfs *fs, struct inode *d, const char *name, struct inode *i, bool replace,
		   struct timespec t)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	struct dmar_file_sync *s = NULL;
	rec_take(fs, &r);
	pthread_rwlock_wrlock(&i->lock);
	int e = dmar_file_sync_begin(&i->f, &fs->cfg.ctx, true, &s);
	if (!e) {
		put_inode(&r, i);
		e = put_contents(fs, &r, i, s, false);
	}
	if (!e) {
		put_link(&r, d, name, i, t, LINK_TOUCH | (replace ? LINK_REPLACE : 0));
		e = rec_flush(fs, &r, false);
	}
	if (s)
		dmar_file_sync_end(&i->f, &fs->cfg.ctx, s, e == 0);
	pthread_rwlock_unlock(&i->lock);
	rec_keep(fs, &r);
	return e;
}

int persist_attr(struct dmarfs *fs, struct inode *i)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	put_inode(&r, i);
	int e = rec_flush(fs, &r, false);
	rec_free(&r);
	return e;
}

int persist_xattr(struct dmarfs *fs, struct inode *i, const char *name, const void *value, size_t len, bool remove)
{
	if (!recording(fs))
		return 0;
	struct rec r = { 0 };
	put_xattr(&r, i, name, value, len, remove);
	int e = rec_flush(fs, &r, remove);
	rec_free(&r);
	return e;
}

/* ---- syncs ------------------------------------------------------------ */

int persist_sync_locked(struct dmarfs *fs, struct inode *i)
{
	if (!recording(fs) || !S_ISREG(i->mode) || !dmar_file_sync_needed(&i->f))
		return 0;
	/* A file no name leads to is gone from the journal already. */
	if (!__atomic_load_n(&i->nlink, __ATOMIC_RELAXED))
		return 0;
	struct dmar_file_sync *s;
	int e = dmar_file_sync_begin(&i->f, &fs->cfg.ctx, false, &s);
	if (e < 0)
		return e;
	struct rec r = { 0 };
	rec_take(fs, &r);
	e = put_contents(fs, &r, i, s, false);
	if (!e)
		e = rec_flush(fs, &r, false);
	/* Pieces flushed before a failure are in the journal, but the state
	 * they describe is not whole there: nothing is dropped. */
	dmar_file_sync_end(&i->f, &fs->cfg.ctx, s, e == 0);
	rec_keep(fs, &r);
	return e;
}

int persist_sync(struct dmarfs *fs, struct inode *i)
{
	if (!recording(fs))
		return 0;
	pthread_rwlock_rdlock(&fs->ckpt);
	pthread_rwlock_wrlock(&i->lock);
	int e = persist_sync_locked(fs, i);
	pthread_rwlock_unlock(&i->lock);
	pthread_rwlock_unlock(&fs->ckpt);
	return e;
}

/* ---- checkpoints ------------------------------------------------------- */

/* A checkpoint's syncs end after the commit (or the abort). */
struct ckpt_sync {
	struct inode *i;
	struct dmar_file_sync *s;
};

struct ckpt {
	struct dmarfs *fs;
	struct rec r;
	struct ckpt_sync *syncs;
	size_t nsyncs, cap;
	struct inode **queue; /* directories to walk, breadth first */
	size_t qhead, qn, qcap;
	uint64_t stamp;       /* marks the inodes written */
	int err;
};

/* The inode's attributes, xattrs and (a file) contents, once per inode.
 * ns held. */
static void ckpt_inode(struct ckpt *c, struct inode *i)
{
	if (i->ckpt_stamp == c->stamp)
		return;
	i->ckpt_stamp = c->stamp;
	pthread_rwlock_wrlock(&i->lock);
	put_inode(&c->r, i);
	for (size_t k = 0; k < i->nxa; k++)
		put_xattr(&c->r, i, i->xa[k].name, i->xa[k].value, i->xa[k].len, false);
	if (S_ISREG(i->mode) && !c->err) {
		struct dmar_file_sync *s = NULL;
		int e = c->nsyncs == c->cap ? -ENOMEM : 0;
		if (e) {
			size_t cap = c->cap ? 2 * c->cap : 256;
			struct ckpt_sync *n = realloc(c->syncs, cap * sizeof(*n));
			if (n) {
				c->syncs = n;
				c->cap = cap;
				e = 0;
			}
		}
		if (!e)
			e = dmar_file_sync_begin(&i->f, &c->fs->cfg.ctx, true, &s);
		if (!e) {
			c->syncs[c->nsyncs++] = (struct ckpt_sync){ i, s };
			e = put_contents(c->fs, &c->r, i, s, true);
		}
		if (e)
			c->err = e;
	}
	pthread_rwlock_unlock(&i->lock);
	if (!c->err && c->r.n >= FLUSH_AT)
		c->err = rec_flush(c->fs, &c->r, true);
}

static void ckpt_walk(struct ckpt *c)
{
	struct dmarfs *fs = c->fs;
	ckpt_inode(c, fs->root);
	c->queue = malloc(64 * sizeof(*c->queue));
	if (!c->queue) {
		c->err = -ENOMEM;
		return;
	}
	c->qcap = 64;
	c->queue[c->qn++] = fs->root;
	while (c->qhead < c->qn && !c->err) {
		struct inode *d = c->queue[c->qhead++];
		size_t pos = dmar_dir_seek(&d->dir, 0);
		for (struct dmar_dirent *e; !c->err && (e = dmar_dir_next(&d->dir, &pos));) {
			struct inode *i = ENTRY_INO(e);
			ckpt_inode(c, i);
			put_link(&c->r, d, e->name, i, (struct timespec){ 0 }, 0);
			if (S_ISDIR(i->mode)) {
				if (c->qn == c->qcap) {
					struct inode **q = realloc(c->queue, 2 * c->qcap * sizeof(*q));
					if (!q) {
						c->err = -ENOMEM;
						break;
					}
					c->queue = q;
					c->qcap *= 2;
				}
				c->queue[c->qn++] = i;
			}
		}
	}
	if (!c->err)
		c->err = c->r.err;
}

int persist_checkpoint(struct dmarfs *fs, bool force)
{
	if (!recording(fs))
		return 0;
	struct dmar_journal_stats js;
	dmar_journal_stats(fs->cfg.journal, &js);
	uint64_t last = __atomic_load_n(&fs->ckpt_bytes, __ATOMIC_RELAXED);
	if (!force && (js.record_bytes < ckpt_min() || js.record_bytes < 2 * last))
		return 0;
	static uint64_t stamps;
	struct ckpt c = { .fs = fs, .stamp = __atomic_add_fetch(&stamps, 1, __ATOMIC_RELAXED) };
	pthread_rwlock_wrlock(&fs->ckpt);
	pthread_mutex_lock(&fs->ns);
	int e = dmar_journal_rewrite_begin(fs->cfg.journal);
	if (e == 0) {
		size_t at = op_begin(&c.r, OP_STATE);
		uint64_t next = fs->next_ino;
		rec_put(&c.r, &next, sizeof(next));
		op_end(&c.r, at);
		ckpt_walk(&c);
		e = c.err;
		if (!e)
			e = rec_flush(fs, &c.r, true);
		if (e == 0)
			dmar_journal_rewrite_commit(fs->cfg.journal);
		else
			dmar_journal_rewrite_abort(fs->cfg.journal);
	}
	for (size_t k = 0; k < c.nsyncs; k++) {
		pthread_rwlock_wrlock(&c.syncs[k].i->lock);
		dmar_file_sync_end(&c.syncs[k].i->f, &fs->cfg.ctx, c.syncs[k].s, e == 0);
		pthread_rwlock_unlock(&c.syncs[k].i->lock);
	}
	if (e == 0) {
		dmar_journal_stats(fs->cfg.journal, &js);
		__atomic_store_n(&fs->ckpt_bytes, js.record_bytes, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&fs->ns);
	pthread_rwlock_unlock(&fs->ckpt);
	free(c.syncs);
	free(c.queue);
	rec_free(&c.r);
	return e < 0 ? e : 1;
}

/* ---- replay ------------------------------------------------------------ */

struct replay {
	struct dmarfs *fs;
	struct dmar_error *err;
	struct inode **tab;  /* by inode number, chained through hnext */
	size_t nb, n;
	uint64_t seq;        /* the record being read, for messages */
	struct dmar_rext *x; /* a CONTENT operation's extents */
	size_t xcap;
	uint64_t records, bytes;
};

static struct inode *rp_get(struct replay *p, uint64_t ino)
{
	for (struct inode *i = p->tab[ino & (p->nb - 1)]; i; i = i->hnext)
		if (i->st_ino == ino)
			return i;
	return NULL;
}

static int rp_add(struct replay *p, struct inode *i)
{
	if (p->n >= p->nb) {
		size_t nb = 2 * p->nb;
		struct inode **t = calloc(nb, sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (size_t b = 0; b < p->nb; b++)
			for (struct inode *j = p->tab[b], *next; j; j = next) {
				next = j->hnext;
				j->hnext = t[j->st_ino & (nb - 1)];
				t[j->st_ino & (nb - 1)] = j;
			}
		free(p->tab);
		p->tab = t;
		p->nb = nb;
	}
	i->hnext = p->tab[i->st_ino & (p->nb - 1)];
	p->tab[i->st_ino & (p->nb - 1)] = i;
	p->n++;
	i->nlookup++; /* replay's reference: see the top of this file */
	return 0;
}

#define BAD(p, ...) dmar_error_set((p)->err, -EUCLEAN, __VA_ARGS__)

/* A cursor over one operation's body. */
struct cur {
	const uint8_t *p, *end;
};

static const void *take(struct cur *c, size_t n)
{
	if ((size_t)(c->end - c->p) < n)
		return NULL;
	const void *r = c->p;
	c->p += n;
	return r;
}

/* A name of n bytes from c, NUL-terminated in out (256 bytes): NULL if
 * short, empty, too long, or holding '/' or NUL. */
static const char *take_name(struct cur *c, size_t n, char *out)
{
	const char *s = take(c, n);
	if (!s || !n || n > NAME_MAX || memchr(s, '/', n) || memchr(s, 0, n))
		return NULL;
	memcpy(out, s, n);
	out[n] = 0;
	return out;
}

static struct inode *rp_dir(struct replay *p, uint64_t ino)
{
	struct inode *d = rp_get(p, ino);
	return d && S_ISDIR(d->mode) && d->nlink ? d : NULL;
}

static int rp_inode(struct replay *p, struct cur *c)
{
	const struct op_inode *o = take(c, sizeof(*o));
	if (!o)
		return BAD(p, "short INODE");
	const char *tgt = take(c, o->tlen);
	if (!tgt || !o->ino || (o->tlen && !S_ISLNK(o->mode)) || o->tlen > PATH_MAX)
		return BAD(p, "bad INODE of inode %" PRIu64, o->ino);
	struct inode *i = rp_get(p, o->ino);
	if (i && (i->mode & S_IFMT) != (o->mode & S_IFMT))
		return BAD(p, "INODE changes the type of inode %" PRIu64, o->ino);
	if (!i) {
		if (!(o->mode & S_IFMT) || !(i = ns_inode_new(p->fs, o->ino, o->mode, o->uid, o->gid)))
			return i ? -ENOMEM : BAD(p, "bad INODE of inode %" PRIu64, o->ino);
		int e = rp_add(p, i);
		if (e < 0)
			return e;
	}
	i->mode = o->mode;
	i->uid = o->uid;
	i->gid = o->gid;
	i->rdev = o->rdev;
	i->atime = timespec_of(o->at);
	i->mtime = timespec_of(o->mt);
	i->ctime = timespec_of(o->ct);
	if (S_ISLNK(o->mode)) {
		char *t = malloc(o->tlen + 1);
		if (!t)
			return -ENOMEM;
		memcpy(t, tgt, o->tlen);
		t[o->tlen] = 0;
		free(i->target);
		i->target = t;
	}
	return 0;
}

static int rp_link(struct replay *p, struct cur *c)
{
	const struct op_link *o = take(c, sizeof(*o));
	char name[NAME_MAX + 1];
	if (!o || !take_name(c, o->nlen, name))
		return BAD(p, "bad LINK");
	struct inode *d = rp_dir(p, o->parent), *i = rp_get(p, o->ino);
	if (!d || !i || i == p->fs->root || (S_ISDIR(i->mode) && i->nlink))
		return BAD(p, "LINK of inode %" PRIu64 " into %" PRIu64 ": no such directory or inode", o->ino,
			   o->parent);
	struct dmar_dirent *e = dmar_dir_find(&d->dir, name);
	if (e) {
		if (!(o->flags & LINK_REPLACE) || S_ISDIR(ENTRY_INO(e)->mode))
			return BAD(p, "LINK to %s in %" PRIu64 ", which exists", name, o->parent);
		ns_apply_remove(p->fs, d, e, timespec_of(o->t));
	}
	return ns_apply_link(p->fs, d, name, i, timespec_of(o->t), o->flags & LINK_TOUCH);
}

static int rp_unlink(struct replay *p, struct cur *c)
{
	const struct op_unlink *o = take(c, sizeof(*o));
	char name[NAME_MAX + 1];
	if (!o || !take_name(c, o->nlen, name))
		return BAD(p, "bad UNLINK");
	struct inode *d = rp_dir(p, o->parent);
	struct dmar_dirent *e = d ? dmar_dir_find(&d->dir, name) : NULL;
	if (!e)
		return BAD(p, "UNLINK of %s in %" PRIu64 ": no such name", name, o->parent);
	struct inode *i = ENTRY_INO(e);
	if (S_ISDIR(i->mode) && dmar_dir_count(&i->dir))
		return BAD(p, "UNLINK of %s in %" PRIu64 ": a directory not empty", name, o->parent);
	ns_apply_remove(p->fs, d, e, timespec_of(o->t));
	return 0;
}

static int rp_rename(struct replay *p, struct cur *c)
{
	const struct op_rename *o = take(c, sizeof(*o));
	char name[NAME_MAX + 1], newname[NAME_MAX + 1];
	if (!o || !take_name(c, o->nlen, name) || !take_name(c, o->nnlen, newname))
		return BAD(p, "bad RENAME");
	struct inode *d = rp_dir(p, o->parent), *nd = rp_dir(p, o->newparent);
	struct dmar_dirent *e = d ? dmar_dir_find(&d->dir, name) : NULL;
	struct dmar_dirent *t = nd ? dmar_dir_find(&nd->dir, newname) : NULL;
	if (!e || !nd || (o->flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    ((o->flags & RENAME_EXCHANGE) && !t) || (t && (o->flags & RENAME_NOREPLACE)))
		return BAD(p, "RENAME of %s in %" PRIu64 ": does not apply", name, o->parent);
	if (t && ENTRY_INO(t) == ENTRY_INO(e))
		return 0;
	if (t && !(o->flags & RENAME_EXCHANGE)) {
		struct inode *i = ENTRY_INO(e), *j = ENTRY_INO(t);
		if (S_ISDIR(i->mode) != S_ISDIR(j->mode) || (S_ISDIR(j->mode) && dmar_dir_count(&j->dir)))
			return BAD(p, "RENAME of %s over %s: does not apply", name, newname);
	}
	/* A directory into itself would make a loop replay cannot see. */
	for (struct inode *x = nd; x && x != p->fs->root; x = x->parent)
		if (x == ENTRY_INO(e) || (t && (o->flags & RENAME_EXCHANGE) && x == ENTRY_INO(t) && d != nd))
			return BAD(p, "RENAME of %s into itself", name);
	return ns_apply_rename(p->fs, d, name, nd, newname, o->flags, timespec_of(o->t));
}

static int rp_xattr(struct replay *p, struct cur *c, bool remove)
{
	const struct op_xattr *o = take(c, sizeof(*o));
	const char *name = o ? take(c, o->nlen) : NULL;
	const void *value = name ? take(c, o->vlen) : NULL;
	struct inode *i = o ? rp_get(p, o->ino) : NULL;
	if (!value || !i || !o->nlen || o->nlen > XATTR_NAME_MAX || o->vlen > 65536 || memchr(name, 0, o->nlen))
		return BAD(p, "bad X%s", remove ? "DEL" : "SET");
	char nm[XATTR_NAME_MAX + 1];
	memcpy(nm, name, o->nlen);
	nm[o->nlen] = 0;
	int e = remove ? ns_xattr_remove_locked(i, nm) : ns_xattr_set_locked(i, nm, value, o->vlen);
	if (e == -ENODATA)
		return BAD(p, "XDEL of %s, which inode %" PRIu64 " does not have", nm, o->ino);
	i->ctime = timespec_of(o->ct);
	return e;
}

static int rp_content(struct replay *p, struct cur *c)
{
	const struct op_content *o = take(c, sizeof(*o));
	if (!o || o->n > EXTS_PER_OP)
		return BAD(p, "bad CONTENT");
	struct inode *i = rp_get(p, o->ino);
	if (!i || !S_ISREG(i->mode))
		return BAD(p, "CONTENT of inode %" PRIu64 ", which is no regular file", o->ino);
	if (o->n > p->xcap) {
		struct dmar_rext *x = realloc(p->x, o->n * sizeof(*x));
		if (!x)
			return -ENOMEM;
		p->x = x;
		p->xcap = o->n;
	}
	for (uint64_t k = 0; k < o->n; k++) {
		const struct op_ext *e = take(c, sizeof(*e));
		struct dmar_rext *x = &p->x[k];
		if (!e)
			return BAD(p, "short CONTENT of inode %" PRIu64, o->ino);
		*x = (struct dmar_rext){ .len = e->len, .kind = e->kind, .enc = e->enc, .skip = e->skip };
		if (e->kind == DMAR_REXT_RAW) {
			const struct op_raw *w = take(c, sizeof(*w));
			if (!w)
				return BAD(p, "short CONTENT of inode %" PRIu64, o->ino);
			x->aoff = w->aoff;
			x->acap = w->acap;
		} else if (e->kind == DMAR_REXT_CHUNK) {
			const struct op_chunk *ch = take(c, sizeof(*ch));
			if (!ch)
				return BAD(p, "short CONTENT of inode %" PRIu64, o->ino);
			x->aoff = ch->aoff;
			x->clen = ch->clen;
			x->stored = ch->stored;
			memcpy(x->id.b, ch->id, sizeof(ch->id));
		} else if (e->kind != DMAR_REXT_HOLE) {
			return BAD(p, "CONTENT of inode %" PRIu64 ": extent of unknown kind %u", o->ino, e->kind);
		}
	}
	int e = dmar_file_replay(&i->f, o->size, o->lo, o->hi, p->x, o->n);
	if (e == -EINVAL)
		return BAD(p, "CONTENT of inode %" PRIu64 ": its extents do not make [%" PRIu64 ", %" PRIu64 ")",
			   o->ino, o->lo, o->hi);
	i->mode = (i->mode & S_IFMT) | (o->mode & 07777);
	i->mtime = timespec_of(o->mt);
	i->ctime = timespec_of(o->ct);
	return e;
}

static int rp_record(void *ctx, uint64_t seq, const void *rec, size_t len)
{
	struct replay *p = ctx;
	struct cur c = { rec, (const uint8_t *)rec + len };
	p->seq = seq;
	p->records++;
	p->bytes += len;
	while (c.p < c.end) {
		const struct op_hdr *h = take(&c, sizeof(*h));
		const uint8_t *body = h ? take(&c, h->len) : NULL;
		if (!body)
			return BAD(p, "journal record %" PRIu64 ": an operation runs past its end", seq);
		if (h->len % 8) /* the next header would be misaligned */
			return BAD(p, "journal record %" PRIu64 ": an operation of %" PRIu32 " bytes, not a multiple of 8",
				   seq, h->len);
		struct cur b = { body, body + h->len };
		int e;
		switch (h->type) {
		case OP_INODE: e = rp_inode(p, &b); break;
		case OP_LINK: e = rp_link(p, &b); break;
		case OP_UNLINK: e = rp_unlink(p, &b); break;
		case OP_RENAME: e = rp_rename(p, &b); break;
		case OP_XSET: e = rp_xattr(p, &b, false); break;
		case OP_XDEL: e = rp_xattr(p, &b, true); break;
		case OP_CONTENT: e = rp_content(p, &b); break;
		case OP_STATE: {
			const uint64_t *next = take(&b, sizeof(*next));
			if (!next)
				return BAD(p, "journal record %" PRIu64 ": short STATE", seq);
			if (*next > p->fs->next_ino)
				p->fs->next_ino = *next;
			e = 0;
			break;
		}
		default:
			return BAD(p, "journal record %" PRIu64 ": unknown operation %u", seq, h->type);
		}
		if (e == -EUCLEAN && p->err && !strstr(p->err->msg, "journal record")) {
			char m[sizeof(p->err->msg)];
			snprintf(m, sizeof(m), "journal record %" PRIu64 ": %.280s", seq, p->err->msg);
			memcpy(p->err->msg, m, sizeof(m));
		}
		if (e < 0)
			return e;
	}
	return 0;
}

int persist_attach(struct dmarfs *fs, struct persist_stats *st, struct dmar_error *err)
{
	double t0 = dmar_mono_s();
	struct replay p = { .fs = fs, .err = err, .nb = 1024 };
	memset(st, 0, sizeof(*st));
	if (!(p.tab = calloc(p.nb, sizeof(*p.tab))))
		return -ENOMEM;
	uint64_t nr_inodes = fs->cfg.nr_inodes;
	fs->cfg.nr_inodes = UINT64_MAX; /* what the arena holds comes back, whatever nr_inodes says */
	fs->replaying = true;
	pthread_mutex_lock(&fs->ns);
	int e = rp_add(&p, fs->root);
	if (!e)
		e = dmar_journal_replay(fs->cfg.journal, rp_record, &p, err);
	/* Replay's references go: what no name leads to is freed. */
	for (size_t b = 0; b < p.nb; b++)
		for (struct inode *i = p.tab[b], *next; i; i = next) {
			next = i->hnext;
			i->hnext = NULL;
			ns_forget_locked(fs, i, 1);
		}
	fs->root->nlookup = 1;
	fs->replaying = false;
	fs->cfg.nr_inodes = nr_inodes;
	/* The contents claim their space; RAW pieces replay left sharing an
	 * allocation are copied once all of it is claimed. */
	for (struct inode *i = fs->all; !e && i; i = i->all_next) {
		st->inodes++;
		if (!S_ISREG(i->mode))
			continue;
		st->files++;
		if ((e = dmar_file_activate(&i->f, &fs->cfg.ctx)) == -EUCLEAN)
			dmar_error_set(err, e, "inode %" PRIu64 ": its extents overlap other arena space",
				       (uint64_t)i->st_ino);
		else if (e == -EINVAL)
			e = dmar_error_set(err, -EUCLEAN, "inode %" PRIu64 ": an extent lies outside the arena",
					   (uint64_t)i->st_ino);
	}
	for (struct inode *i = fs->all; !e && i; i = i->all_next)
		if (S_ISREG(i->mode))
			e = dmar_file_activate_copies(&i->f, &fs->cfg.ctx);
	pthread_mutex_unlock(&fs->ns);
	struct dmar_store_stats ss;
	dmar_store_stats(fs->cfg.ctx.arena, &ss);
	st->chunks = ss.chunks;
	st->records = p.records;
	st->bytes = p.bytes;
	st->seconds = dmar_mono_s() - t0;
	struct dmar_journal_stats js;
	dmar_journal_stats(fs->cfg.journal, &js);
	fs->ckpt_bytes = js.record_bytes / 2; /* unknown: as if half of it were state */
	free(p.tab);
	free(p.x);
	/* Refused: the files activated so far claimed space the rest of the
	 * records may also claim; tearing them down must not give it back. */
	if (e < 0)
		dmar_arena_abandon(fs->cfg.ctx.arena);
	return e;
}
