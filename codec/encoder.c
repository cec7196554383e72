/* SPDX-License-Identifier: MIT */
/*
 * The encoder is a three-stage pipeline:
 *   caller thread: fills a window, cuts it into chunks (the chunker is
 *                  cheap and inherently serial), hands a block to the pool;
 *   workers:       hash each chunk, drop the ones the reference set holds,
 *                  compress, build the block record;
 *   caller thread: collects finished blocks in submission order and writes
 *                  them, folding their checks into the end record; while
 *                  it waits for one, it runs queued blocks itself.
 * A ring of `threads + 2` block slots bounds memory and keeps every worker
 * busy while the caller reads the next window.
 *
 * With a positional output (opts.pwrite) the workers write instead: a block
 * record's size is known once it is encoded, so its offset is known once
 * the blocks before it are encoded (not written), and each worker writes
 * its own block there.  Writing a fresh tmpfs file runs at 0.6-3.7 GB/s
 * on the test VM (first-touch page faults), slower than cutting and
 * hashing together, so on the caller's thread it set the pace of pack -T2:
 * 0.98 CPUs used of 2.
 *
 * Only one thread writes at a time, though: writes to one file serialize
 * on its inode lock in the kernel anyway, and a second writer there spins
 * on the lock (perf on pack -T2: 2.5-17 % of samples in
 * rwsem_spin_on_owner, the high end when first-touch faults made writes
 * slow).  A placed block goes on a write queue; whoever finds no write in
 * progress drains the queue, anyone else goes back to hashing.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "block.h"
#include "compress.h"
#include "encoder.h"
#include "pool.h"

struct block_job {
	struct dmar_pool_job pj; /* first: the pool hands us this pointer */
	struct dmar_encoder *e;
	const uint8_t *src;      /* the block's bytes: in data, or in the caller's mapping */
	uint8_t *data;           /* window buffer owned by this job, or NULL */
	struct dmar_block_buf scratch; /* present chunks gathered, when some are absent */
	size_t logical;          /* bytes of the block in data */
	uint64_t offset;         /* of the block in the file */
	uint64_t index;          /* block number */
	unsigned n;
	uint32_t *lens;
	struct dmar_id *ids;
	uint8_t *absent;
	/* results, written by the worker */
	uint8_t *rec;            /* record header + chunk table */
	size_t rec_len;
	const uint8_t *payload;
	size_t payload_len;
	struct dmar_block_buf zbuf; /* compressed payload */
	unsigned absent_n;
	uint64_t absent_bytes;
	bool raw;
	int rc;
	struct dmar_error err;
	/* Positional output: at is the record's offset; the job is on the
	 * write queue from place() until written (protected by seq.lock). */
	uint64_t at;
	struct block_job *wnext;
	bool queued, written;
	int wrc;
};

/* Where positional writes go next: the offset of block `next`. */
struct place_seq {
	pthread_mutex_t lock;
	pthread_cond_t moved;    /* broadcast when next advances or breaks */
	uint64_t next;           /* protected by lock */
	uint64_t pos;            /* protected by lock */
	bool broken;             /* protected by lock: a block failed, none after it is placed */
	/* Placed blocks not yet written, oldest first, and whether a thread
	 * is writing them out (all protected by lock). */
	struct block_job *wq_head, *wq_tail;
	bool writing;
	pthread_cond_t wrote;    /* broadcast when a queued block is written */
};

struct dmar_encoder {
	struct dmar_encoder_opts o;
	dmar_write_fn write;
	void *wctx;
	struct dmar_error *err;
	struct dmar_pool *pool;
	ZSTD_CCtx **cctx;        /* one per worker */
	ZSTD_CCtx **sctx;        /* one per worker, for the compressibility probe */
	size_t win_cap;          /* DMAR_BLOCK_TARGET + max chunk */
	size_t zcap;             /* compressed payload of a whole window, at worst */
	unsigned max_chunks;
	uint8_t *win;            /* window being filled by the caller */
	size_t win_len;
	uint8_t **spare;         /* free window buffers */
	unsigned nspare;
	struct block_job *ring;
	unsigned ring_cap, ring_head, ring_count;
	struct dmar_hash_ctx *recipe; /* file id: over (id, le32 len) */
	struct dmar_hash_ctx *endck;  /* header, block checks, end record */
	uint64_t offset;         /* logical bytes handed to blocks so far */
	uint64_t nblocks;        /* blocks handed to workers so far */
	bool fed;                /* bytes came in through space/commit */
	struct dmar_encode_stats st;
	int rc;                  /* sticky first error */
	bool finished;
	bool maps_used;          /* fed by feed_map: nothing else may follow */
	struct place_seq seq;    /* positional output only */
	bool seq_init;
};

/* The header, references and end records, from the caller's thread while
 * no block is being placed (before the first submit, after the last
 * collect). */
static int emit(struct dmar_encoder *e, const void *buf, size_t len)
{
	if (!len)
		return 0;
	int r;
	if (e->o.pwrite) {
		r = e->o.pwrite(e->o.pwrite_ctx, buf, len, e->seq.pos);
		if (r == 0)
			e->seq.pos += len;
	} else {
		r = e->write(e->wctx, buf, len);
	}
	if (r < 0)
		return dmar_error_errno(e->err, r, "write");
	e->st.stored += len;
	return 0;
}

/* Positional output: wait until the blocks before j have their offsets
 * (they were taken from the pool's FIFO before j, so they are running or
 * done: the wait always ends), take the next offset, and write j there
 * outside the lock, beside the other workers.  A failed block breaks the
 * sequence so that no later block waits for it forever; the caller
 * collects in order and reports that first failure. */
static void place(struct dmar_encoder *e, struct block_job *j)
{
	struct place_seq *q = &e->seq;
	pthread_mutex_lock(&q->lock);
	while (q->next != j->index && !q->broken)
		pthread_cond_wait(&q->moved, &q->lock);
	if (j->rc < 0 || q->broken) {
		q->broken = true;
		pthread_cond_broadcast(&q->moved);
		pthread_mutex_unlock(&q->lock);
		if (j->rc == 0)
			j->rc = dmar_error_set(&j->err, -ECANCELED, "block %" PRIu64 ": an earlier block failed",
					       j->index);
		return;
	}
	j->at = q->pos;
	q->pos += j->rec_len + j->payload_len;
	q->next++;
	pthread_cond_broadcast(&q->moved);
	j->wnext = NULL;
	j->queued = true;
	j->written = false;
	if (q->wq_tail)
		q->wq_tail->wnext = j;
	else
		q->wq_head = j;
	q->wq_tail = j;
	if (q->writing) {
		/* The thread writing will take this block too. */
		pthread_mutex_unlock(&q->lock);
		return;
	}
	q->writing = true;
	struct block_job *w;
	while ((w = q->wq_head)) {
		q->wq_head = w->wnext;
		if (!q->wq_head)
			q->wq_tail = NULL;
		pthread_mutex_unlock(&q->lock);
		int r = e->o.pwrite(e->o.pwrite_ctx, w->rec, w->rec_len, w->at);
		if (r == 0 && w->payload_len)
			r = e->o.pwrite(e->o.pwrite_ctx, w->payload, w->payload_len, w->at + w->rec_len);
		pthread_mutex_lock(&q->lock);
		w->wrc = r;
		w->written = true;
		pthread_cond_broadcast(&q->wrote);
	}
	q->writing = false;
	pthread_mutex_unlock(&q->lock);
}

/* Positional output: wait until j's bytes are written (its buffers may be
 * reused then), hashing queued blocks meanwhile rather than idling: the
 * thread writing may be a worker that would otherwise hash them. */
static int wait_written(struct dmar_encoder *e, struct block_job *j)
{
	struct place_seq *q = &e->seq;
	pthread_mutex_lock(&q->lock);
	while (j->queued && !j->written) {
		pthread_mutex_unlock(&q->lock);
		bool ran = dmar_pool_run_one(e->pool);
		pthread_mutex_lock(&q->lock);
		if (!ran && !j->written)
			pthread_cond_wait(&q->wrote, &q->lock);
	}
	j->queued = false;
	pthread_mutex_unlock(&q->lock);
	if (j->wrc < 0)
		return dmar_error_errno(e->err, j->wrc, "write");
	return 0;
}

/* Does a chunk occur twice in the block?  zstd then finds the repeat
 * (the window covers the block) however incompressible each copy looks to
 * worth_compressing's samples: a tar holding the same .gz in several
 * packages.  Ids are compared by their first 8 bytes; a false match costs
 * only a compression attempt. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static bool has_repeat(const struct dmar_id *ids, unsigned n)
{
	uint64_t k[DMAR_BLOCK_MAX_CHUNKS];
	if (n < 2 || n > DMAR_BLOCK_MAX_CHUNKS)
		return false;
	for (unsigned i = 0; i < n; i++)
		memcpy(&k[i], ids[i].b, sizeof(k[i]));
	qsort(k, n, sizeof(k[0]), cmp_u64);
	for (unsigned i = 1; i < n; i++)
		if (k[i] == k[i - 1])
			return true;
	return false;
}

static void encode_one(struct block_job *j, unsigned worker)
{
	struct dmar_encoder *e = j->e;
	size_t off = 0;

	j->absent_n = 0;
	j->absent_bytes = 0;
	/* The whole block at once: hash.c hashes its chunks side by side
	 * (two SHA-NI or sixteen AVX-512 lanes). */
	dmar_hash_chunks(j->src, j->lens, NULL, j->n, j->ids);
	for (unsigned i = 0; i < j->n; i++) {
		j->absent[i] = e->o.ref && dmar_refset_has(e->o.ref, &j->ids[i]);
		if (j->absent[i]) {
			j->absent_n++;
			j->absent_bytes += j->lens[i];
		}
	}
	if (e->o.on_chunks)
		return;

	/* The payload is the present chunks only: gather them when some
	 * are absent (the source may be a read-only mapping). */
	const uint8_t *present = j->src;
	size_t raw_len = j->logical;
	if (j->absent_n) {
		if (dmar_block_buf_reserve(&j->scratch, j->logical - j->absent_bytes, e->win_cap) < 0) {
			j->rc = dmar_error_errno(&j->err, -ENOMEM, "encoder");
			return;
		}
		raw_len = 0;
		off = 0;
		for (unsigned i = 0; i < j->n; i++) {
			if (!j->absent[i]) {
				memcpy(j->scratch.p + raw_len, j->src + off, j->lens[i]);
				raw_len += j->lens[i];
			}
			off += j->lens[i];
		}
		present = j->scratch.p;
	}

	uint8_t enc = DMAR_ENC_RAW;
	j->payload = present;
	j->payload_len = raw_len;
	if (raw_len && e->o.level > 0 &&
	    (dmar_compress_probe(e->sctx[worker], present, raw_len) || has_repeat(j->ids, j->n))) {
		if (dmar_block_buf_reserve(&j->zbuf, ZSTD_compressBound(raw_len), e->zcap) < 0) {
			j->rc = dmar_error_errno(&j->err, -ENOMEM, "encoder");
			return;
		}
		size_t c = ZSTD_compress2(e->cctx[worker], j->zbuf.p, j->zbuf.cap, present, raw_len);
		if (!ZSTD_isError(c) && dmar_compress_pays(raw_len, c)) {
			enc = e->o.pack ? DMAR_ENC_ZSTD_PACK : DMAR_ENC_ZSTD;
			j->payload = j->zbuf.p;
			j->payload_len = c;
		}
	}
	j->raw = enc == DMAR_ENC_RAW;

	uint8_t *r = j->rec;
	r[0] = DMAR_REC_BLOCK;
	r[1] = enc;
	dmar_put_le16(r + 2, (uint16_t)j->n);
	dmar_put_le32(r + 4, (uint32_t)raw_len);
	dmar_put_le32(r + 8, (uint32_t)j->payload_len);
	uint8_t *t = r + DMAR_BLOCK_HDR_SIZE;
	for (unsigned i = 0; i < j->n;) {
		if (!j->absent[i]) {
			dmar_put_le32(t, j->lens[i]);
			t += 4;
			i++;
			continue;
		}
		/* Absent chunks that follow each other in the base as they do
		 * here become one run: 36 bytes for what may be a whole block,
		 * so a thin artifact of a huge, barely changed file stays small. */
		unsigned m = 1;
		int64_t k = dmar_refset_find(e->o.ref, &j->ids[i]);
		while (k >= 0 && i + m < j->n && j->absent[i + m]) {
			struct dmar_id id;
			uint32_t len;
			if (dmar_refset_at(e->o.ref, (uint64_t)k + m, (uint64_t)k, &id, &len) < 0 ||
			    len != j->lens[i + m] || memcmp(id.b, j->ids[i + m].b, DMAR_HASH_SIZE))
				break;
			m++;
		}
		dmar_put_le32(t, m > 1 ? DMAR_CHUNK_ABSENT | DMAR_CHUNK_RUN | m : DMAR_CHUNK_ABSENT | j->lens[i]);
		memcpy(t + 4, j->ids[i].b, DMAR_HASH_SIZE);
		t += 4 + DMAR_HASH_SIZE;
		i += m;
	}
	j->rec_len = (size_t)(t - r);
	dmar_block_check(j->index, j->offset, r, r + DMAR_BLOCK_HDR_SIZE, j->rec_len - DMAR_BLOCK_HDR_SIZE,
			 j->ids, j->n, r + 12);
	j->rc = 0;
}

static void encode_block(struct dmar_pool_job *pj, unsigned worker)
{
	struct block_job *j = (struct block_job *)pj;
	j->rc = 0;
	encode_one(j, worker);
	if (j->e->o.pwrite && !j->e->o.on_chunks)
		place(j->e, j);
}

/* Write out a finished block and fold it into the running hashes. */
static int collect(struct dmar_encoder *e, struct block_job *j)
{
	dmar_pool_wait(e->pool, &j->pj);
	int r = j->rc;
	if (r < 0)
		return dmar_error_set(e->err, r, "%s", j->err.msg);
	if (e->o.pwrite && !e->o.on_chunks && (r = wait_written(e, j)) < 0)
		return r;

	e->st.chunks += j->n;
	e->st.absent_chunks += j->absent_n;
	e->st.absent_bytes += j->absent_bytes;
	e->st.blocks++;
	for (unsigned i = 0; i < j->n; i++) {
		uint8_t le[4];
		dmar_put_le32(le, j->lens[i]);
		dmar_hash_ctx_update(e->recipe, j->ids[i].b, DMAR_HASH_SIZE);
		dmar_hash_ctx_update(e->recipe, le, 4);
	}
	if (e->o.on_chunks) {
		r = e->o.on_chunks(e->o.on_chunks_ctx, j->offset, j->ids, j->lens, j->src, j->n);
		if (r < 0)
			return dmar_error_errno(e->err, r, "indexing");
	} else {
		e->st.raw_blocks += j->raw;
		dmar_hash_ctx_update(e->endck, j->rec + 12, 8);
		if (e->o.pwrite) {
			e->st.stored += j->rec_len + j->payload_len; /* placed by the worker */
		} else {
			r = emit(e, j->rec, j->rec_len);
			if (r == 0)
				r = emit(e, j->payload, j->payload_len);
			if (r < 0)
				return r;
		}
	}
	if (j->data)
		e->spare[e->nspare++] = j->data;
	j->data = NULL;
	return 0;
}

static int collect_oldest(struct dmar_encoder *e)
{
	struct block_job *j = &e->ring[e->ring_head];
	e->ring_head = (e->ring_head + 1) % e->ring_cap;
	e->ring_count--;
	return collect(e, j);
}

/* Cut blocks from the window while it is full (or, at eof, not empty). */
static int cut_blocks(struct dmar_encoder *e, bool eof)
{
	while (e->win_len >= e->win_cap || (eof && e->win_len > 0)) {
		if (e->ring_count == e->ring_cap) {
			int r = collect_oldest(e);
			if (r < 0)
				return r;
		}
		struct block_job *j = &e->ring[(e->ring_head + e->ring_count) % e->ring_cap];
		j->err.code = 0;
		/* The window holds target + max bytes, so below the target
		 * there is always a whole max-size chunk ahead of a cut and the
		 * chunker never needs more data. */
		size_t pos;
		unsigned n = dmar_chunker_cut(&e->o.chunker, e->win, e->win_len, eof, DMAR_BLOCK_TARGET, j->lens,
					      e->max_chunks, &pos);
		uint8_t *next = e->spare[--e->nspare];
		memcpy(next, e->win + pos, e->win_len - pos);
		j->data = e->win;
		j->src = j->data;
		j->logical = pos;
		j->offset = e->offset;
		j->index = e->nblocks++;
		j->n = n;
		j->rc = 0;
		e->offset += pos;
		e->win = next;
		e->win_len -= pos;
		e->ring_count++;
		dmar_pool_submit(e->pool, &j->pj);
	}
	return 0;
}

/* log2 of DMAR_BLOCK_MAX_RAW, within the format's 16 MiB window limit. */
#define BLOCK_WINDOW_LOG 23
_Static_assert((1u << BLOCK_WINDOW_LOG) == DMAR_BLOCK_MAX_RAW, "window covers the largest block");

static ZSTD_CCtx *new_cctx(const struct dmar_encoder_opts *o)
{
	ZSTD_CCtx *c = ZSTD_createCCtx_advanced((ZSTD_customMem){ dmar_block_zalloc, dmar_block_zfree, NULL });
	if (!c)
		return NULL;
	/* Our record already carries sizes and a check, and the header names
	 * the dictionary: chunk frames (compress.h), ~14 bytes a block less,
	 * which matters for small files. */
	int level = o->level > 0 ? o->level : 1;
	if (dmar_compress_setup(c, level, o->pack) < 0) {
		ZSTD_freeCCtx(c);
		return NULL;
	}
	/* A window as big as the block: blocks are independent anyway, and
	 * the low levels' 2 MiB window misses repeats (the same changelog.gz
	 * in several packages of a tar) that zstd run over the whole file
	 * finds.  Single-shot compression needs no window buffer, and zstd
	 * shrinks the window to a smaller block's size by itself.  On the
	 * benchmark's tar corpus, 4 MiB pieces at level 3: 78.2 MB with the
	 * level's window, 75.4 MB with this one (zstd -3 on the whole tar:
	 * 75.2 MB). */
	ZSTD_compressionParameters cp = ZSTD_getCParams(level, DMAR_BLOCK_MAX_RAW, 0);
	if (cp.windowLog < BLOCK_WINDOW_LOG)
		ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, BLOCK_WINDOW_LOG);
	return c;
}

static void write_header(const struct dmar_encoder_opts *o, uint8_t h[DMAR_HDR_SIZE])
{
	memset(h, 0, DMAR_HDR_SIZE);
	memcpy(h, DMAR_MAGIC, 4);
	h[4] = DMAR_VERSION;
	h[5] = (uint8_t)((o->pack ? DMAR_HDR_PACK : 0) | (o->ref ? DMAR_HDR_THIN : 0) |
			 (o->meta.valid ? DMAR_HDR_META : 0));
	h[6] = (uint8_t)dmar_log2(o->chunker.min);
	h[7] = (uint8_t)dmar_log2(o->chunker.avg);
	h[8] = (uint8_t)dmar_log2(o->chunker.max);
	if (o->meta.valid) {
		dmar_put_le32(h + 12, o->meta.mode);
		dmar_put_le64(h + 16, (uint64_t)o->meta.mtime_sec);
		dmar_put_le32(h + 24, o->meta.mtime_nsec);
	}
	dmar_put_le64(h + 28, o->pack ? dmar_bytepack_id(o->pack) : 0);
	struct dmar_id ck;
	dmar_hash(h, 36, &ck);
	memcpy(h + 36, ck.b, 4);
}

/* The references record: which bases the absent chunks come from. */
static int write_refs(struct dmar_encoder *e)
{
	unsigned k = dmar_refset_sources(e->o.ref);
	uint8_t rec[8 + DMAR_MAX_REFS * 40] = { DMAR_REC_REFS };
	dmar_put_le32(rec + 4, k);
	for (unsigned i = 0; i < k; i++) {
		struct dmar_id id;
		uint64_t size;
		dmar_refset_source(e->o.ref, i, &id, &size);
		memcpy(rec + 8 + 40 * i, id.b, DMAR_HASH_SIZE);
		dmar_put_le64(rec + 8 + 40 * i + 32, size);
	}
	size_t len = 8 + 40 * (size_t)k;
	dmar_hash_ctx_update(e->endck, rec, len);
	return emit(e, rec, len);
}

int dmar_encoder_new(struct dmar_encoder **out, const struct dmar_encoder_opts *o,
		     dmar_write_fn write, void *wctx, struct dmar_error *err)
{
	struct dmar_chunker chk;
	if (o->threads < 1 || o->level < 0 || o->level > ZSTD_maxCLevel() ||
	    (!write && !o->on_chunks && !o->pwrite) ||
	    dmar_chunker_init(&chk, o->chunker.min, o->chunker.avg, o->chunker.max) < 0 ||
	    (o->meta.valid && o->meta.mtime_nsec >= 1000000000u))
		return dmar_error_set(err, -EINVAL, "invalid encoder options");
	if (o->ref) {
		const struct dmar_chunker *rc = dmar_refset_chunker(o->ref);
		if (rc->min != chk.min || rc->avg != chk.avg || rc->max != chk.max)
			return dmar_error_set(err, -EINVAL, "reference set was cut with other chunk sizes");
		if (dmar_refset_sources(o->ref) < 1 || dmar_refset_sources(o->ref) > DMAR_MAX_REFS)
			return dmar_error_set(err, -EINVAL, "need 1 to %d reference files", DMAR_MAX_REFS);
	}

	struct dmar_encoder *e = calloc(1, sizeof(*e));
	if (!e)
		return dmar_error_errno(err, -ENOMEM, "encoder");
	e->o = *o;
	e->o.chunker = chk;
	e->write = write;
	e->wctx = wctx;
	e->err = err;
	e->win_cap = DMAR_BLOCK_TARGET + chk.max;
	pthread_mutex_init(&e->seq.lock, NULL);
	pthread_cond_init(&e->seq.moved, NULL);
	pthread_cond_init(&e->seq.wrote, NULL);
	e->seq_init = true;
	e->max_chunks = dmar_block_max_chunks(&chk);
	/* The caller thread reads and cuts (about half the work per byte:
	 * the chunker runs near the speed of SHA-256), so it counts as one
	 * of the threads: -T2 is the caller plus one hashing worker.  When
	 * the ring is full the caller hashes queued blocks itself (the pool
	 * lets the owner help), so neither core idles whichever stage is
	 * slower; it uses the last compression context. */
	unsigned workers = o->threads > 1 ? o->threads - 1 : 0;
	e->ring_cap = workers ? workers + 3 : 1;
	int r = -ENOMEM;

	if (dmar_pool_new(&e->pool, workers) < 0)
		goto fail;
	e->cctx = calloc(o->threads, sizeof(*e->cctx));
	e->sctx = calloc(o->threads, sizeof(*e->sctx));
	e->ring = calloc(e->ring_cap, sizeof(*e->ring));
	e->spare = calloc(e->ring_cap + 1, sizeof(*e->spare));
	e->recipe = dmar_hash_ctx_new();
	e->endck = dmar_hash_ctx_new();
	if (!e->cctx || !e->sctx || !e->ring || !e->spare || !e->recipe || !e->endck)
		goto fail;
	if (!o->on_chunks) {
		for (unsigned i = 0; i < o->threads; i++) {
			e->cctx[i] = new_cctx(o);
			e->sctx[i] = ZSTD_createCCtx();
			if (!e->cctx[i] || !e->sctx[i])
				goto fail;
		}
	}
	e->zcap = ZSTD_compressBound(e->win_cap);
	size_t rec_cap = DMAR_BLOCK_HDR_SIZE + (size_t)e->max_chunks * (4 + DMAR_HASH_SIZE);
	for (unsigned i = 0; i < e->ring_cap; i++) {
		struct block_job *j = &e->ring[i];
		j->pj.fn = encode_block;
		j->e = e;
		j->lens = malloc(e->max_chunks * sizeof(*j->lens));
		j->ids = malloc(e->max_chunks * sizeof(*j->ids));
		j->absent = malloc(e->max_chunks);
		j->rec = malloc(rec_cap);
		if (!j->lens || !j->ids || !j->absent || !j->rec)
			goto fail;
	}
	for (unsigned i = 0; i < e->ring_cap + 1; i++) {
		e->spare[i] = dmar_block_buf_alloc(e->win_cap);
		if (!e->spare[i])
			goto fail;
		e->nspare++;
	}
	e->win = e->spare[--e->nspare];

	uint8_t h[DMAR_HDR_SIZE];
	write_header(&e->o, h);
	dmar_hash_ctx_update(e->endck, h, sizeof(h));
	if (!o->on_chunks) {
		r = emit(e, h, sizeof(h));
		if (r < 0)
			goto fail_quiet;
		if (o->ref && (r = write_refs(e)) < 0)
			goto fail_quiet;
	}
	*out = e;
	return 0;

fail:
	dmar_error_errno(err, r, "encoder");
fail_quiet:
	dmar_encoder_free(e);
	return r;
}

void dmar_encoder_space(struct dmar_encoder *e, uint8_t **buf, size_t *cap)
{
	*buf = e->win + e->win_len;
	*cap = e->win_cap - e->win_len;
}

int dmar_encoder_commit(struct dmar_encoder *e, size_t n)
{
	if (e->rc < 0)
		return e->rc;
	if (e->finished || e->maps_used || n > e->win_cap - e->win_len)
		return -EINVAL;
	e->fed = true;
	e->win_len += n;
	e->st.logical += n;
	if (e->win_len == e->win_cap)
		e->rc = cut_blocks(e, false);
	return e->rc;
}

int dmar_encoder_feed(struct dmar_encoder *e, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		uint8_t *dst;
		size_t cap;
		dmar_encoder_space(e, &dst, &cap);
		size_t n = len < cap ? len : cap;
		memcpy(dst, p, n);
		int r = dmar_encoder_commit(e, n);
		if (r < 0)
			return r;
		p += n;
		len -= n;
	}
	return 0;
}

int dmar_encoder_feed_map(struct dmar_encoder *e, const void *buf, size_t len)
{
	if (e->rc < 0)
		return e->rc;
	/* The map must be the whole input: cuts are final at its end. */
	if (e->finished || e->fed || e->maps_used)
		return -EINVAL;
	e->maps_used = true;
	const uint8_t *p = buf;
	size_t pos = 0;
	e->st.logical += len;
	while (pos < len) {
		if (e->ring_count == e->ring_cap && (e->rc = collect_oldest(e)) < 0)
			return e->rc;
		struct block_job *j = &e->ring[(e->ring_head + e->ring_count) % e->ring_cap];
		size_t start = pos, cut;
		/* The whole input is here, so every cut is final (eof). */
		unsigned n = dmar_chunker_cut(&e->o.chunker, p + pos, len - pos, true, DMAR_BLOCK_TARGET, j->lens,
					      e->max_chunks, &cut);
		pos += cut;
		j->err.code = 0;
		j->data = NULL;
		j->src = p + start;
		j->logical = pos - start;
		j->offset = e->offset;
		j->index = e->nblocks++;
		j->n = n;
		j->rc = 0;
		e->offset += j->logical;
		e->ring_count++;
		dmar_pool_submit(e->pool, &j->pj);
	}
	return 0;
}

int dmar_encoder_feed_fd(struct dmar_encoder *e, int fd, void (*progress)(void *, uint64_t),
			 void *pctx)
{
	/* read() into the window, not mmap: the copy costs less than the
	 * page faults and 4 KiB-page TLB misses of walking a mapping of the
	 * file (pack -0 -T1 of 1 GiB on tmpfs: 2.3 s mapped, 1.64 s read),
	 * and a file that shrinks meanwhile is a short read, not a SIGBUS. */
	uint64_t last = 0;
	for (;;) {
		uint8_t *dst;
		size_t cap;
		dmar_encoder_space(e, &dst, &cap);
		ssize_t n = read(fd, dst, cap);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return dmar_error_errno(e->err, -errno, "read");
		}
		if (n == 0)
			break;
		int r = dmar_encoder_commit(e, (size_t)n);
		if (r < 0)
			return r;
		if (progress && e->st.logical - last >= (8u << 20)) {
			last = e->st.logical;
			progress(pctx, last);
		}
	}
	if (progress && e->st.logical > last)
		progress(pctx, e->st.logical);
	return 0;
}

int dmar_encoder_finish(struct dmar_encoder *e, struct dmar_encode_stats *st)
{
	if (e->rc < 0)
		return e->rc;
	if (e->finished)
		return -EINVAL;
	e->finished = true;
	int r = cut_blocks(e, true);
	while (r == 0 && e->ring_count)
		r = collect_oldest(e);
	if (r < 0)
		return e->rc = r;
	dmar_hash_ctx_final(e->recipe, &e->st.file_id);

	if (!e->o.on_chunks) {
		uint8_t end[DMAR_END_SIZE] = { DMAR_REC_END };
		dmar_put_le64(end + 8, e->st.logical);
		dmar_put_le64(end + 16, e->st.chunks);
		struct dmar_id ck;
		dmar_hash_ctx_update(e->endck, end, 24);
		dmar_hash_ctx_final(e->endck, &ck);
		memcpy(end + 24, ck.b, 8);
		r = emit(e, end, sizeof(end));
		if (r < 0)
			return e->rc = r;
	}
	if (st)
		*st = e->st;
	return 0;
}

const struct dmar_encode_stats *dmar_encoder_stats(const struct dmar_encoder *e)
{
	return &e->st;
}

void dmar_encoder_free(struct dmar_encoder *e)
{
	if (!e)
		return;
	/* Jobs still in flight (after an error) must finish before their
	 * buffers go away. */
	for (unsigned k = 0; k < e->ring_count; k++)
		dmar_pool_wait(e->pool, &e->ring[(e->ring_head + k) % e->ring_cap].pj);
	dmar_pool_free(e->pool);
	/* Every placed block was written by the thread that was writing
	 * when it was queued, and all of them have returned: nothing is
	 * left on the write queue. */
	if (e->ring) {
		for (unsigned i = 0; i < e->ring_cap; i++) {
			struct block_job *j = &e->ring[i];
			free(j->data);
			dmar_block_buf_free(&j->scratch);
			free(j->lens);
			free(j->ids);
			free(j->absent);
			free(j->rec);
			dmar_block_buf_free(&j->zbuf);
		}
	}
	if (e->spare) {
		for (unsigned i = 0; i < e->nspare; i++)
			free(e->spare[i]);
	}
	free(e->win);
	free(e->spare);
	free(e->ring);
	for (unsigned i = 0; e->cctx && i < e->o.threads; i++)
		ZSTD_freeCCtx(e->cctx[i]);
	for (unsigned i = 0; e->sctx && i < e->o.threads; i++)
		ZSTD_freeCCtx(e->sctx[i]);
	free(e->cctx);
	free(e->sctx);
	dmar_hash_ctx_free(e->recipe);
	dmar_hash_ctx_free(e->endck);
	if (e->seq_init) {
		pthread_mutex_destroy(&e->seq.lock);
		pthread_cond_destroy(&e->seq.moved);
		pthread_cond_destroy(&e->seq.wrote);
	}
	free(e);
}
