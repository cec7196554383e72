/* SPDX-License-Identifier: MIT */
/*
 * The journal's layout in the arena (docs/format.md, "Arena files"):
 *
 *   segment  = header (32 bytes) + records, allocated whole from the arena
 *   header   = "DMARSEG\0", size (u64), next (u64: the next segment's
 *              offset, 0 while this is the last), crc (u32: magic and size)
 *   record   = len (u32), crc (u32), seq (u64), len bytes, zeros to a
 *              multiple of 8; crc is CRC-32C of len, seq and the bytes
 *
 * The superblock's root names the first segment and the sequence number
 * of its first record; each record's number is one more than the last's.
 *
 * Why replay can trust the end it finds: records are written one at a
 * time under the mutex, each followed by 16 zero bytes (an end marker the
 * next record overwrites), so after a crash the log is a run of whole
 * records, then at most one torn record or a marker.  A torn record fails
 * its crc.  Bytes of an older log in reused space can pass their crc, but
 * never carry the number replay expects next: numbers only grow, across
 * rewrites too.  A segment is linked into the chain only once its header
 * and first end marker are written, and only when a record did not fit in
 * the one before, whose records are then all whole.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena_i.h"
#include "journal.h"
#include "codec/crc32c.h"

#define SEG_MAGIC "DMARSEG"
#define SEG_HDR 32
#define REC_HDR 16
/* The first segment, and the most each new one doubles to. */
#define SEG_FIRST (64u << 10)
#define SEG_MAX (4u << 20)

struct seg_hdr {
	char magic[8];
	uint64_t size;
	uint64_t next;
	uint32_t crc;
	uint32_t pad;
};

struct rec_hdr {
	uint32_t len;
	uint32_t crc;
	uint64_t seq;
};

/* A chain of segments: the log appends go to, or the one a rewrite
 * replaces. */
struct chain {
	uint64_t head, tail; /* segment offsets; 0: no segment yet */
	uint64_t pos;        /* where the next record goes in tail */
	uint64_t first_seq;
	uint64_t bytes, nseg;
	uint64_t records, record_bytes;
};

struct dmar_journal {
	struct dmar_arena *a;
	pthread_mutex_t mu;
	struct chain cur;
	struct chain old;     /* the committed log during a rewrite */
	bool rewriting;
	bool must_replay;     /* attached and not replayed yet */
	uint64_t seq;         /* the next record's number */
	uint64_t next_size;   /* of the next segment */
	uint64_t spare, spare_len; /* kept back for must appends */
	uint64_t rewrites;
};

static uint64_t pad8(uint64_t n)
{
	return (n + 7) & ~7ull;
}

static struct seg_hdr *seg_at(struct dmar_journal *j, uint64_t off)
{
	return (struct seg_hdr *)(dmar_arena_base(j->a) + off);
}

static uint32_t seg_crc(const struct seg_hdr *h)
{
	return dmar_crc32c(dmar_crc32c(0, h->magic, sizeof(h->magic)), &h->size, sizeof(h->size));
}

static uint32_t rec_crc(uint32_t len, uint64_t seq, const void *p)
{
	uint32_t c = dmar_crc32c(0, &len, sizeof(len));
	c = dmar_crc32c(c, &seq, sizeof(seq));
	return dmar_crc32c(c, p, len);
}

static uint32_t root_crc(const struct dmar_sb_root *r)
{
	return dmar_crc32c(0, r, offsetof(struct dmar_sb_root, crc));
}

/* The valid root with the highest gen, or NULL. */
static const struct dmar_sb_root *root_current(const struct dmar_sb *sb)
{
	const struct dmar_sb_root *best = NULL;
	for (int i = 0; i < 2; i++) {
		const struct dmar_sb_root *r = &sb->root[i];
		if (r->gen && root_crc(r) == r->crc && (!best || r->gen > best->gen))
			best = r;
	}
	return best;
}

/* Point the superblock at a log: the slot not current gets the next gen,
 * written whole before its crc makes it count. */
static void root_write(struct dmar_journal *j, uint64_t head, uint64_t first_seq)
{
	struct dmar_sb *sb = j->a->sb;
	const struct dmar_sb_root *cur = root_current(sb);
	struct dmar_sb_root *slot = cur == &sb->root[0] ? &sb->root[1] : &sb->root[0];
	struct dmar_sb_root n = { .gen = cur ? cur->gen + 1 : 1, .head = head, .first_seq = first_seq };
	n.crc = root_crc(&n);
	slot->crc = ~n.crc; /* invalid while the fields change */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	slot->gen = n.gen;
	slot->head = n.head;
	slot->first_seq = n.first_seq;
	slot->spare = 0;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	slot->crc = n.crc;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

int dmar_journal_open(struct dmar_journal **out, struct dmar_arena *a, struct dmar_error *err)
{
	if (!a->sb)
		return dmar_error_set(err, -EINVAL, "a journal needs a named arena");
	struct dmar_journal *j = calloc(1, sizeof(*j));
	if (!j)
		return dmar_error_errno(err, -ENOMEM, "journal");
	j->a = a;
	pthread_mutex_init(&j->mu, NULL);
	j->must_replay = dmar_arena_attached(a);
	j->seq = 1;
	j->next_size = SEG_FIRST;
	*out = j;
	return 0;
}

static void release_chain(struct dmar_journal *j, const struct chain *c)
{
	for (uint64_t off = c->head; off;) {
		struct seg_hdr *h = seg_at(j, off);
		uint64_t next = h->next, size = h->size;
		memset(h, 0, sizeof(*h)); /* never mistaken for a segment again */
		dmar_arena_release(j->a, off, size);
		off = off == c->tail ? 0 : next;
	}
}

void dmar_journal_free(struct dmar_journal *j)
{
	if (!j)
		return;
	if (j->rewriting)
		dmar_journal_rewrite_abort(j);
	if (j->spare_len)
		dmar_arena_release(j->a, j->spare, j->spare_len);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

/* Is there a valid segment at off?  Its size in *size. */
static bool seg_ok(struct dmar_journal *j, uint64_t off, uint64_t *size)
{
	uint64_t asz = dmar_arena_size(j->a);
	if (!off || off % DMAR_ARENA_UNIT || off >= asz || asz - off < SEG_HDR + REC_HDR)
		return false;
	const struct seg_hdr *h = seg_at(j, off);
	if (memcmp(h->magic, SEG_MAGIC, sizeof(SEG_MAGIC)) || seg_crc(h) != h->crc || h->size < SEG_HDR + REC_HDR ||
	    h->size > asz - off)
		return false;
	*size = h->size;
	return true;
}

int dmar_journal_replay(struct dmar_journal *j, int (*fn)(void *ctx, uint64_t seq, const void *rec, size_t len),
			void *ctx, struct dmar_error *err)
{
	int r = 0;
	pthread_mutex_lock(&j->mu);
	j->must_replay = false;
	const struct dmar_sb_root *root = root_current(j->a->sb);
	if (!root || !root->head) {
		if (root)
			j->seq = j->cur.first_seq = root->first_seq;
		goto out;
	}
	uint64_t off = root->head, size = 0, expect = root->first_seq;
	j->cur = (struct chain){ .head = off, .first_seq = expect };
	for (;;) {
		if (!seg_ok(j, off, &size)) {
			r = dmar_error_set(err, -EUCLEAN, "journal segment %llu of the chain at %llu is damaged",
					   (unsigned long long)j->cur.nseg, (unsigned long long)off);
			goto out;
		}
		if (dmar_arena_claim(j->a, off, size) < 0) {
			r = dmar_error_set(err, -EUCLEAN, "journal segment at %llu overlaps other arena space",
					   (unsigned long long)off);
			goto out;
		}
		j->cur.tail = off;
		j->cur.nseg++;
		j->cur.bytes += size;
		uint8_t *base = (uint8_t *)seg_at(j, off);
		uint64_t pos = SEG_HDR;
		while (pos + REC_HDR <= size) {
			const struct rec_hdr *h = (const struct rec_hdr *)(base + pos);
			if (!h->len || h->len > DMAR_JOURNAL_RECORD_MAX || h->len > size - pos - REC_HDR ||
			    h->seq != expect || rec_crc(h->len, h->seq, h + 1) != h->crc)
				break;
			if (fn && (r = fn(ctx, h->seq, h + 1, h->len)) != 0)
				goto out;
			pos += REC_HDR + pad8(h->len);
			expect++;
			j->cur.records++;
			j->cur.record_bytes += REC_HDR + pad8(h->len);
		}
		j->cur.pos = pos;
		uint64_t next = seg_at(j, off)->next;
		if (!next)
			break;
		off = next;
	}
	j->seq = expect;
	/* The next segment grows from the last one's size. */
	j->next_size = size * 2 > SEG_MAX ? SEG_MAX : size * 2;
out:
	pthread_mutex_unlock(&j->mu);
	return r;
}

/* A new segment with room for a record of need bytes (header included),
 * initialized and not yet linked: 0 and *off, or -ENOSPC. */
static int seg_new(struct dmar_journal *j, uint64_t need, bool must, uint64_t *off)
{
	uint64_t min = pad8(SEG_HDR + need + REC_HDR), size = j->next_size > min ? j->next_size : min;
	int r = dmar_arena_alloc_meta(j->a, size, off);
	if (r == -ENOSPC && size > min)
		r = dmar_arena_alloc_meta(j->a, size = min, off);
	if (r == -ENOSPC && must && j->spare_len >= min) {
		*off = j->spare;
		size = j->spare_len;
		j->spare_len = 0;
		r = 0;
	}
	if (r < 0)
		return r;
	size = (size + DMAR_ARENA_UNIT - 1) / DMAR_ARENA_UNIT * DMAR_ARENA_UNIT;
	struct seg_hdr *h = seg_at(j, *off);
	memset(h, 0, SEG_HDR + REC_HDR);
	memcpy(h->magic, SEG_MAGIC, sizeof(SEG_MAGIC));
	h->size = size;
	h->crc = seg_crc(h);
	j->next_size = size * 2 > SEG_MAX ? SEG_MAX : size * 2;
	return 0;
}

/* Keep a segment back for must appends; quietly none in a full arena. */
static void spare_refill(struct dmar_journal *j)
{
	if (j->spare_len || dmar_arena_alloc_meta(j->a, SEG_FIRST, &j->spare) < 0)
		return;
	j->spare_len = SEG_FIRST;
}

int dmar_journal_append(struct dmar_journal *j, const struct iovec *iov, int n, bool must)
{
	uint64_t len = 0;
	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	if (!len || len > DMAR_JOURNAL_RECORD_MAX)
		return -EINVAL;
	uint64_t need = REC_HDR + pad8(len);
	int r = 0;
	pthread_mutex_lock(&j->mu);
	if (j->must_replay) {
		r = -EINVAL; /* would write over a log not read yet */
		goto out;
	}
	struct chain *c = &j->cur;
	if (!c->tail || seg_at(j, c->tail)->size - c->pos < need) {
		uint64_t off;
		if ((r = seg_new(j, need, must, &off)) < 0)
			goto out;
		if (!c->head) {
			c->head = off;
			c->first_seq = j->seq;
			if (!j->rewriting)
				root_write(j, off, j->seq);
		} else {
			__atomic_thread_fence(__ATOMIC_RELEASE);
			seg_at(j, c->tail)->next = off;
		}
		c->tail = off;
		c->pos = SEG_HDR;
		c->nseg++;
		c->bytes += seg_at(j, off)->size;
	}
	uint8_t *at = (uint8_t *)seg_at(j, c->tail) + c->pos;
	uint8_t *p = at + REC_HDR;
	for (int i = 0; i < n; i++) {
		memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	memset(p, 0, (size_t)(pad8(len) - len));
	uint64_t size = seg_at(j, c->tail)->size;
	if (c->pos + need + REC_HDR <= size)
		memset(at + need, 0, REC_HDR); /* the end marker */
	struct rec_hdr h = { .len = (uint32_t)len, .seq = j->seq };
	h.crc = rec_crc(h.len, h.seq, at + REC_HDR);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memcpy(at, &h, sizeof(h));
	__atomic_thread_fence(__ATOMIC_RELEASE);
	c->pos += need;
	c->records++;
	c->record_bytes += need;
	j->seq++;
	spare_refill(j);
out:
	pthread_mutex_unlock(&j->mu);
	return r;
}

int dmar_journal_rewrite_begin(struct dmar_journal *j)
{
	pthread_mutex_lock(&j->mu);
	int r = j->rewriting || j->must_replay ? -EINVAL : 0;
	if (!r) {
		j->old = j->cur;
		j->cur = (struct chain){ .first_seq = j->seq };
		j->rewriting = true;
		/* The new log's segments grow from the first size again: the
		 * state it holds may be far smaller than the history was. */
		j->next_size = SEG_FIRST;
	}
	pthread_mutex_unlock(&j->mu);
	return r;
}

void dmar_journal_rewrite_commit(struct dmar_journal *j)
{
	pthread_mutex_lock(&j->mu);
	if (j->rewriting) {
		root_write(j, j->cur.head, j->cur.head ? j->cur.first_seq : j->seq);
		release_chain(j, &j->old);
		j->old = (struct chain){ 0 };
		j->rewriting = false;
		j->rewrites++;
	}
	pthread_mutex_unlock(&j->mu);
}

void dmar_journal_rewrite_abort(struct dmar_journal *j)
{
	pthread_mutex_lock(&j->mu);
	if (j->rewriting) {
		release_chain(j, &j->cur);
		j->cur = j->old;
		j->old = (struct chain){ 0 };
		j->rewriting = false;
		/* The numbers the new log used are gone with it; the old
		 * log's next record must follow its own last one. */
		j->seq = j->cur.first_seq + j->cur.records;
	}
	pthread_mutex_unlock(&j->mu);
}

void dmar_journal_stats(struct dmar_journal *j, struct dmar_journal_stats *st)
{
	pthread_mutex_lock(&j->mu);
	*st = (struct dmar_journal_stats){
		.bytes = j->cur.bytes + j->old.bytes + j->spare_len,
		.segments = j->cur.nseg + j->old.nseg + (j->spare_len != 0),
		.records = j->cur.records,
		.record_bytes = j->cur.record_bytes,
		.rewrites = j->rewrites,
		.seq = j->seq,
	};
	pthread_mutex_unlock(&j->mu);
}

static void each_in(struct dmar_journal *j, const struct chain *c, void (*fn)(void *ctx, uint64_t off, uint64_t len),
		    void *ctx)
{
	for (uint64_t off = c->head; off;) {
		fn(ctx, off, seg_at(j, off)->size);
		off = off == c->tail ? 0 : seg_at(j, off)->next;
	}
}

void dmar_journal_each_segment(struct dmar_journal *j, void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx)
{
	pthread_mutex_lock(&j->mu);
	each_in(j, &j->cur, fn, ctx);
	each_in(j, &j->old, fn, ctx);
	if (j->spare_len)
		fn(ctx, j->spare, j->spare_len);
	pthread_mutex_unlock(&j->mu);
}
