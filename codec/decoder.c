/* SPDX-License-Identifier: MIT */
/*
 * The decoder mirrors the encoder's pipeline: the caller thread parses and
 * validates each record and reads its payload; workers decompress, fetch
 * absent chunks from the reference set, re-hash every chunk and compare the
 * block check; the caller writes verified blocks in order, and decodes
 * queued blocks itself while it waits for the next one to write.
 *
 * Every length comes from outside, so each is checked against format.h's
 * limits before it sizes an allocation, and buffers grow only to the
 * largest block seen.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "block.h"
#include "decoder.h"
#include "pool.h"

/* zstd frames in an artifact decode to at most 8 MiB, so a window above
 * 16 MiB can only come from a hostile frame: refuse it rather than
 * allocate it. */
#define DEC_WINDOW_LOG_MAX 24

/* The most any block buffer needs: a payload is at most
 * ZSTD_compressBound(raw_len), and raw_len and a block's length at most
 * DMAR_BLOCK_MAX_RAW. */
#define DEC_BLOCK_BUF_MAX ZSTD_COMPRESSBOUND(DMAR_BLOCK_MAX_RAW)

/* Room for n bytes; the old contents are not kept (every caller fills
 * the buffer afresh).  Block-sized buffers go on huge pages, see
 * dmar_block_buf_alloc: read(), zstd, SHA-256 and write() each stream
 * through them.  They are reserved for the largest block at once (see
 * dmar_block_buf_reserve): growing them as bigger blocks came also cost a
 * fresh, zeroed huge page each time (19 huge-page faults, 15-22% of perf
 * samples in clear_page for unpack -t of the tar corpus). */
static int buf_reserve(struct dmar_block_buf *b, size_t n)
{
	return dmar_block_buf_reserve(b, n, DEC_BLOCK_BUF_MAX);
}

struct dec_job {
	struct dmar_pool_job pj;
	struct dec *d;
	uint64_t index;          /* block number */
	uint64_t offset;         /* of the block's first byte in the file */
	uint64_t first_chunk;
	uint8_t hdr[DMAR_BLOCK_HDR_SIZE];
	unsigned n;
	uint8_t enc;
	uint32_t raw_len, stored_len;
	size_t logical;
	unsigned absent_n;
	struct dmar_block_buf table; /* as stored */
	size_t table_len;
	struct dmar_block_buf payload;
	struct dmar_block_buf raw;   /* decompressed present chunks, when needed */
	struct dmar_block_buf out;   /* assembled block, when needed */
	uint32_t *lens;
	uint8_t *absent;
	struct dmar_id *ids;
	const uint8_t *result;   /* the verified block bytes */
	int rc;
	struct dmar_error err;
	/* Positional output: the write of the verified block, on the
	 * writer pool; the slot is reused only once it is done. */
	struct dmar_pool_job wj;
	bool writing;
	int wrc;
};

/* Input staging: records are read a few bytes at a time (a type byte, a
 * 19-byte header, a 4-byte word per chunk), and a read(2) apiece cost
 * ~7000 syscalls for a 258 MB tar.  Payloads bigger than what is left in
 * the buffer go straight to their own buffer, so they are not copied
 * twice. */
#define DEC_RBUF_SIZE (128u << 10)

struct dec {
	const struct dmar_decoder_opts *o;
	dmar_read_fn read;
	void *rctx;
	uint8_t *rbuf;           /* DEC_RBUF_SIZE bytes */
	size_t rpos, rlen;       /* unconsumed input is rbuf[rpos..rlen) */
	struct dmar_header_info h;
	struct dmar_pool *pool;
	struct dmar_pool *wpool; /* one thread writing verified blocks (opts.pwrite) */
	/* Held across each positional write.  The caller also runs queued
	 * write jobs while it waits for a slot, and two writes at once to
	 * one file only meet on its inode lock in the kernel, where the
	 * second spins (perf, unpack -T2 of the tar corpus: 3.5 % of samples
	 * in rwsem_spin_on_owner); here it sleeps and yields the core. */
	pthread_mutex_t wlock;
	ZSTD_DCtx **dctx;        /* one per worker, no dictionary */
	ZSTD_DCtx **dctx_pack;   /* one per worker, with the byte pack */
	struct dec_job *ring;
	unsigned ring_cap, ring_head, ring_count;
	struct dmar_hash_ctx *recipe, *endck;
	struct dmar_decode_stats st;
	struct dmar_error *err;
	bool lens_unknown;       /* info mode met runs it cannot resolve */
	bool lens_unknown_before; /* ... in an earlier block */
};

static ssize_t read_full(struct dec *d, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;
	while (got < len) {
		if (d->rpos < d->rlen) {
			size_t n = d->rlen - d->rpos;
			if (n > len - got)
				n = len - got;
			memcpy(p + got, d->rbuf + d->rpos, n);
			d->rpos += n;
			got += n;
			continue;
		}
		bool direct = len - got >= DEC_RBUF_SIZE;
		ssize_t n = d->read(d->rctx, direct ? p + got : d->rbuf, direct ? len - got : DEC_RBUF_SIZE);
		if (n < 0)
			return n;
		if (n == 0)
			break;
		if (direct) {
			got += (size_t)n;
		} else {
			d->rpos = 0;
			d->rlen = (size_t)n;
		}
	}
	d->st.stored += got;
	return (ssize_t)got;
}

/* Read exactly len bytes; a short read is reported as truncation of what. */
static int read_exact(struct dec *d, void *buf, size_t len, const char *what, uint64_t index)
{
	ssize_t n = read_full(d, buf, len);
	if (n < 0)
		return dmar_error_errno(d->err, (int)n, "read");
	if ((size_t)n < len)
		return dmar_error_set(d->err, -ENODATA, "truncated: %s %" PRIu64 " (%zd of %zu bytes)", what,
				      index, n, len);
	return 0;
}

static void decode_block(struct dmar_pool_job *pj, unsigned worker)
{
	struct dec_job *j = (struct dec_job *)pj;
	struct dec *d = j->d;
	const uint8_t *present = j->payload.p;

	j->rc = 0;
	if (j->enc != DMAR_ENC_RAW) {
		uint8_t *dst = j->absent_n ? j->raw.p : j->out.p;
		/* Frame header descriptor: bit 2 content checksum, bits 0-1
		 * dictionary id size; the format allows neither. */
		if (j->payload.p[0] & 0x07) {
			j->rc = dmar_error_set(&j->err, -EBADMSG,
					       "block %" PRIu64 ": zstd frame has a checksum or dictionary id", j->index);
			return;
		}
		/* One frame, decoded straight into dst: decompressStream stops
		 * at the end of the first frame, so trailing bytes show. */
		ZSTD_DCtx *dc = j->enc == DMAR_ENC_ZSTD_PACK ? d->dctx_pack[worker] : d->dctx[worker];
		ZSTD_DCtx_reset(dc, ZSTD_reset_session_only);
		ZSTD_inBuffer in = { j->payload.p, j->stored_len, 0 };
		ZSTD_outBuffer out = { dst, j->raw_len, 0 };
		size_t r = ZSTD_decompressStream(dc, &out, &in);
		if (ZSTD_isError(r)) {
			j->rc = dmar_error_set(&j->err, -EBADMSG, "block %" PRIu64 ": zstd: %s", j->index,
					       ZSTD_getErrorName(r));
			return;
		}
		if (r != 0 && in.pos == j->stored_len) {
			j->rc = dmar_error_set(&j->err, -EBADMSG, "block %" PRIu64 ": zstd frame is truncated",
					       j->index);
			return;
		}
		if (r != 0 || out.pos != j->raw_len) {
			j->rc = dmar_error_set(&j->err, -EBADMSG,
					       "block %" PRIu64 ": payload decodes to %s%zu bytes, expected %u", j->index,
					       r != 0 ? "more than " : "", out.pos, j->raw_len);
			return;
		}
		if (in.pos != j->stored_len) {
			j->rc = dmar_error_set(&j->err, -EBADMSG,
					       "block %" PRIu64 ": %zu bytes after the zstd frame", j->index,
					       j->stored_len - in.pos);
			return;
		}
		present = dst;
	}

	/* The present chunks' ids, many side by side (hash.c); the absent ones
	 * keep the ids the table gave them. */
	dmar_hash_chunks(present, j->lens, j->absent, j->n, j->ids);
	size_t pos = 0, out_pos = 0;
	for (unsigned i = 0; i < j->n; i++) {
		uint64_t ci = j->first_chunk + i;
		if (!j->absent[i]) {
			const uint8_t *c = present + pos;
			if (j->absent_n)
				memcpy(j->out.p + out_pos, c, j->lens[i]);
			pos += j->lens[i];
		} else {
			char hex[DMAR_HASH_HEX_SIZE];
			int r = d->o->ref ? dmar_refset_read(d->o->ref, &j->ids[i], j->lens[i], j->out.p + out_pos)
					  : -ENOENT;
			if (r < 0) {
				dmar_hex(j->ids[i].b, DMAR_HASH_SIZE, hex);
				if (!d->o->ref)
					j->rc = dmar_error_set(&j->err, -ENOENT,
							       "chunk %" PRIu64 " is absent (thin artifact) and no reference data was given (--ref)",
							       ci);
				else if (r == -ENOENT)
					j->rc = dmar_error_set(&j->err, -ENOENT,
							       "reference data missing chunk %" PRIu64 " (id %s, %u bytes)", ci,
							       hex, j->lens[i]);
				else if (r == -EBADMSG)
					j->rc = dmar_error_set(&j->err, -EBADMSG,
							       "reference data for chunk %" PRIu64 " (id %s) changed: hash mismatch",
							       ci, hex);
				else
					j->rc = dmar_error_errno(&j->err, r, "reading reference data");
				return;
			}
		}
		out_pos += j->lens[i];
	}
	j->result = j->absent_n ? j->out.p : present;

	uint8_t ck[8];
	dmar_block_check(j->index, j->offset, j->hdr, j->table.p, j->table_len, j->ids, j->n, ck);
	if (memcmp(ck, j->hdr + 12, 8) != 0)
		j->rc = dmar_error_set(&j->err, -EBADMSG,
				       "block %" PRIu64 " (chunks %" PRIu64 "..%" PRIu64 "): hash mismatch%s", j->index,
				       j->first_chunk, j->first_chunk + j->n - 1,
				       j->absent_n ? " (corrupt, or reference data other than at packing, or in another order)"
						   : "");
}

static void write_block(struct dmar_pool_job *pj, unsigned worker)
{
	(void)worker;
	struct dec_job *j = (struct dec_job *)((char *)pj - offsetof(struct dec_job, wj));
	struct dec *d = j->d;
	pthread_mutex_lock(&d->wlock);
	j->wrc = d->o->pwrite(d->o->pwrite_ctx, j->result, j->logical, j->offset);
	pthread_mutex_unlock(&d->wlock);
}

/* Before slot j takes a new block: its last block must be written. */
static int wait_write(struct dec *d, struct dec_job *j)
{
	if (!j->writing)
		return 0;
	dmar_pool_wait(d->wpool, &j->wj);
	j->writing = false;
	if (j->wrc < 0)
		return dmar_error_errno(d->err, j->wrc, "write");
	return 0;
}

static int collect(struct dec *d, struct dec_job *j, dmar_write_fn write, void *wctx)
{
	dmar_pool_wait(d->pool, &j->pj);
	if (j->rc < 0)
		return dmar_error_set(d->err, j->rc, "%s", j->err.msg);
	for (unsigned i = 0; i < j->n; i++) {
		uint8_t le[4];
		dmar_put_le32(le, j->lens[i]);
		dmar_hash_ctx_update(d->recipe, j->ids[i].b, DMAR_HASH_SIZE);
		dmar_hash_ctx_update(d->recipe, le, 4);
	}
	dmar_hash_ctx_update(d->endck, j->hdr + 12, 8);
	if (d->wpool && j->logical) {
		/* Verified: its bytes may go out, while the next block decodes. */
		j->writing = true;
		dmar_pool_submit(d->wpool, &j->wj);
	} else if (d->o->pwrite && j->logical) {
		/* -T1: written here, in order (setup says why). */
		int r = d->o->pwrite(d->o->pwrite_ctx, j->result, j->logical, j->offset);
		if (r < 0)
			return dmar_error_errno(d->err, r, "write");
	} else if (write && j->logical) {
		int r = write(wctx, j->result, j->logical);
		if (r < 0)
			return dmar_error_errno(d->err, r, "write");
	}
	return 0;
}

static int collect_oldest(struct dec *d, dmar_write_fn write, void *wctx)
{
	struct dec_job *j = &d->ring[d->ring_head];
	d->ring_head = (d->ring_head + 1) % d->ring_cap;
	d->ring_count--;
	return collect(d, j, write, wctx);
}

static int parse_header(struct dec *d)
{
	uint8_t h[DMAR_HDR_SIZE];
	ssize_t n = read_full(d, h, sizeof(h));
	if (n < 0)
		return dmar_error_errno(d->err, (int)n, "read");
	if (n >= 4 && memcmp(h, DMAR_MAGIC, 4) != 0)
		return dmar_error_set(d->err, -EBADMSG, "not a dmar artifact (bad magic)");
	if (n < (ssize_t)sizeof(h))
		return dmar_error_set(d->err, -ENODATA, "truncated: header (%zd of %d bytes)", n,
				      DMAR_HDR_SIZE);
	if (h[4] != DMAR_VERSION)
		return dmar_error_set(d->err, -EPROTO, "unsupported version %u (this dmar reads version %d)",
				      h[4], DMAR_VERSION);
	struct dmar_id ck;
	dmar_hash(h, 36, &ck);
	if (memcmp(ck.b, h + 36, 4) != 0)
		return dmar_error_set(d->err, -EBADMSG, "header: checksum mismatch");
	if (h[5] & ~DMAR_HDR_KNOWN_FLAGS)
		return dmar_error_set(d->err, -EPROTO, "header: unknown flags 0x%02x", h[5]);
	if (h[9] || h[10] || h[11])
		return dmar_error_set(d->err, -EBADMSG, "header: reserved bytes not zero");
	if (dmar_chunker_init_log2(&d->h.chunker, h[6], h[7], h[8]) < 0)
		return dmar_error_set(d->err, -EBADMSG, "header: invalid chunk sizes 2^%u/2^%u/2^%u", h[6],
				      h[7], h[8]);
	d->h.version = h[4];
	d->h.flags = h[5];
	d->h.meta.valid = h[5] & DMAR_HDR_META;
	d->h.meta.mode = dmar_get_le32(h + 12);
	d->h.meta.mtime_sec = (int64_t)dmar_get_le64(h + 16);
	d->h.meta.mtime_nsec = dmar_get_le32(h + 24);
	d->h.pack_id = dmar_get_le64(h + 28);
	if (d->h.meta.valid && d->h.meta.mtime_nsec >= 1000000000u)
		return dmar_error_set(d->err, -EBADMSG, "header: mtime nanoseconds out of range");
	if (!(h[5] & DMAR_HDR_PACK) != !d->h.pack_id)
		return dmar_error_set(d->err, -EBADMSG, "header: byte pack flag and id disagree");
	dmar_hash_ctx_update(d->endck, h, sizeof(h));
	return 0;
}

/* Read one block record into j, validating every field. */
static int parse_block(struct dec *d, struct dec_job *j)
{
	uint64_t bi = d->st.blocks;
	uint8_t *h = j->hdr;
	int r = read_exact(d, h + 1, DMAR_BLOCK_HDR_SIZE - 1, "block header", bi);
	if (r < 0)
		return r;
	j->enc = h[1];
	j->n = dmar_get_le16(h + 2);
	j->raw_len = dmar_get_le32(h + 4);
	j->stored_len = dmar_get_le32(h + 8);
	j->index = bi;
	j->offset = d->st.logical;
	j->first_chunk = d->st.chunks;
	if (j->enc > DMAR_ENC_ZSTD_PACK)
		return dmar_error_set(d->err, -EBADMSG, "block %" PRIu64 ": unknown encoding %u", bi, j->enc);
	if (j->enc == DMAR_ENC_ZSTD_PACK && !(d->h.flags & DMAR_HDR_PACK))
		return dmar_error_set(d->err, -EBADMSG,
				      "block %" PRIu64 ": uses a byte pack but the header names none", bi);
	if (j->n < 1 || j->n > DMAR_BLOCK_MAX_CHUNKS)
		return dmar_error_set(d->err, -EBADMSG, "block %" PRIu64 ": chunk count %u out of range (1..%d)",
				      bi, j->n, DMAR_BLOCK_MAX_CHUNKS);
	if (j->raw_len > DMAR_BLOCK_MAX_RAW)
		return dmar_error_set(d->err, -EBADMSG, "block %" PRIu64 ": raw length %u over the limit %u", bi,
				      j->raw_len, DMAR_BLOCK_MAX_RAW);
	if (j->enc == DMAR_ENC_RAW ? j->stored_len != j->raw_len
				   : (j->raw_len == 0 || j->stored_len == 0 ||
				      j->stored_len > ZSTD_compressBound(j->raw_len)))
		return dmar_error_set(d->err, -EBADMSG,
				      "block %" PRIu64 ": stored length %u does not fit raw length %u", bi,
				      j->stored_len, j->raw_len);

	/* Chunk table: 4 bytes an entry, plus 32 for an absent chunk's id. */
	r = buf_reserve(&j->table, (size_t)j->n * (4 + DMAR_HASH_SIZE));
	if (r < 0)
		return dmar_error_errno(d->err, r, "decoder");
	size_t tl = 0;
	uint64_t present = 0, logical = 0;
	j->absent_n = 0;
	for (unsigned i = 0; i < j->n;) {
		uint64_t ci = j->first_chunk + i;
		uint8_t *e = j->table.p + tl;
		r = read_exact(d, e, 4, "chunk table of block", bi);
		if (r < 0)
			return r;
		tl += 4;
		uint32_t w = dmar_get_le32(e);
		uint32_t v = w & DMAR_CHUNK_VALUE_MASK;
		if ((w & DMAR_CHUNK_RUN) && !(w & DMAR_CHUNK_ABSENT))
			return dmar_error_set(d->err, -EBADMSG, "block %" PRIu64 ": chunk %" PRIu64 ": run flag without absent flag",
					      bi, ci);
		if (!(w & DMAR_CHUNK_ABSENT)) {
			if (v < 1 || v > d->h.chunker.max)
				return dmar_error_set(d->err, -EBADMSG,
						      "block %" PRIu64 ": chunk %" PRIu64 " length %u out of range (1..%u)", bi,
						      ci, v, d->h.chunker.max);
			j->lens[i] = v;
			j->absent[i] = 0;
			present += v;
			logical += v;
			i++;
			continue;
		}
		r = read_exact(d, j->table.p + tl, DMAR_HASH_SIZE, "chunk table of block", bi);
		if (r < 0)
			return r;
		struct dmar_id first;
		memcpy(first.b, j->table.p + tl, DMAR_HASH_SIZE);
		tl += DMAR_HASH_SIZE;
		uint32_t count = (w & DMAR_CHUNK_RUN) ? v : 1;
		if (count < 1 || count > j->n - i)
			return dmar_error_set(d->err, -EBADMSG, "block %" PRIu64 ": run of %u chunks at chunk %" PRIu64 " overruns the block's %u",
					      bi, count, ci, j->n);
		if (!(w & DMAR_CHUNK_RUN) && (v < 1 || v > d->h.chunker.max))
			return dmar_error_set(d->err, -EBADMSG,
					      "block %" PRIu64 ": chunk %" PRIu64 " length %u out of range (1..%u)", bi, ci, v,
					      d->h.chunker.max);
		if (!(d->h.flags & DMAR_HDR_THIN))
			return dmar_error_set(d->err, -EBADMSG,
					      "block %" PRIu64 ": chunk %" PRIu64 " is absent but the header does not say thin", bi, ci);
		char hex[DMAR_HASH_HEX_SIZE];
		dmar_hex(first.b, DMAR_HASH_SIZE, hex);
		if (!d->o->ref && !d->o->info_only)
			return dmar_error_set(d->err, -ENOENT,
					      "chunk %" PRIu64 " is absent (thin artifact) and no reference data was given (--ref)", ci);
		int64_t k = d->o->ref ? dmar_refset_find(d->o->ref, &first) : -1;
		if (d->o->ref && k < 0)
			return dmar_error_set(d->err, -ENOENT, "reference data missing chunk %" PRIu64 " (id %s)", ci, hex);
		for (uint32_t m = 0; m < count; m++) {
			j->absent[i + m] = 1;
			if (k < 0 && !(w & DMAR_CHUNK_RUN)) {
				j->lens[i + m] = v; /* info without reference data */
				logical += v;
				continue;
			}
			if (k < 0) {
				/* Info without reference data: a run's chunks
				 * are known only by count. */
				j->absent[i + m] = m ? 3 : 2;
				j->lens[i + m] = 0;
				d->lens_unknown = true;
				continue;
			}
			uint32_t len;
			if (dmar_refset_at(d->o->ref, (uint64_t)k + m, (uint64_t)k, &j->ids[i + m], &len) < 0)
				return dmar_error_set(d->err, -ENOENT,
						      "reference data ends inside a run of %u chunks starting at chunk %" PRIu64 " (id %s)",
						      count, ci, hex);
			if (!(w & DMAR_CHUNK_RUN) && len != v)
				return dmar_error_set(d->err, -ENOENT,
						      "reference data has chunk %" PRIu64 " (id %s) with length %u, not %u", ci,
						      hex, len, v);
			j->lens[i + m] = len;
			logical += len;
		}
		if (k < 0)
			memcpy(j->ids[i].b, first.b, DMAR_HASH_SIZE); /* info: the entry's own id */
		j->absent_n += count;
		i += count;
	}
	j->table_len = tl;
	if (present != j->raw_len)
		return dmar_error_set(d->err, -EBADMSG,
				      "block %" PRIu64 ": chunk lengths add up to %" PRIu64 ", raw length says %u", bi,
				      present, j->raw_len);
	if (logical > DMAR_BLOCK_MAX_RAW)
		return dmar_error_set(d->err, -EBADMSG, "block %" PRIu64 ": %" PRIu64 " bytes over the limit %u",
				      bi, logical, DMAR_BLOCK_MAX_RAW);
	j->logical = (size_t)logical;

	if (buf_reserve(&j->payload, j->stored_len ? j->stored_len : 1) < 0 ||
	    (j->enc != DMAR_ENC_RAW && j->absent_n && buf_reserve(&j->raw, j->raw_len) < 0) ||
	    ((j->absent_n || j->enc != DMAR_ENC_RAW) && buf_reserve(&j->out, j->logical) < 0))
		return dmar_error_errno(d->err, -ENOMEM, "decoder");
	return read_exact(d, j->payload.p, j->stored_len, "payload of block", bi);
}

static int parse_end(struct dec *d, bool verify)
{
	uint8_t e[DMAR_END_SIZE];
	e[0] = DMAR_REC_END;
	int r = read_exact(d, e + 1, DMAR_END_SIZE - 1, "end record after block", d->st.blocks);
	if (r < 0)
		return r;
	for (int i = 1; i < 8; i++)
		if (e[i])
			return dmar_error_set(d->err, -EBADMSG, "end record: reserved bytes not zero");
	uint64_t size = dmar_get_le64(e + 8), chunks = dmar_get_le64(e + 16);
	if (d->lens_unknown && size >= d->st.logical) {
		/* Info mode: what the runs hold is what the end record says is
		 * missing from the sum. */
		d->st.absent_bytes += size - d->st.logical;
		d->st.logical = size;
	}
	if (size != d->st.logical)
		return dmar_error_set(d->err, -EBADMSG,
				      "end record: size %" PRIu64 " but the blocks hold %" PRIu64 " bytes", size,
				      d->st.logical);
	if (chunks != d->st.chunks)
		return dmar_error_set(d->err, -EBADMSG,
				      "end record: %" PRIu64 " chunks but the blocks hold %" PRIu64, chunks,
				      d->st.chunks);
	if (verify) {
		struct dmar_id ck;
		dmar_hash_ctx_update(d->endck, e, 24);
		dmar_hash_ctx_final(d->endck, &ck);
		if (memcmp(ck.b, e + 24, 8) != 0)
			return dmar_error_set(d->err, -EBADMSG, "end record: checksum mismatch");
	}
	uint8_t extra;
	ssize_t n = read_full(d, &extra, 1);
	if (n < 0)
		return dmar_error_errno(d->err, (int)n, "read");
	if (n > 0)
		return dmar_error_set(d->err, -EBADMSG, "trailing data after the end record");
	return 0;
}

/* The references record: check that the reference data given is the one
 * the artifact was made against, before any block depends on it. */
static int parse_refs(struct dec *d)
{
	uint8_t h[8];
	int r = read_exact(d, h, sizeof(h), "references record", 0);
	if (r < 0)
		return r;
	if (h[0] != DMAR_REC_REFS)
		return dmar_error_set(d->err, -EBADMSG, "thin artifact without a references record");
	if (h[1] || h[2] || h[3])
		return dmar_error_set(d->err, -EBADMSG, "references record: reserved bytes not zero");
	uint32_t k = dmar_get_le32(h + 4);
	if (k < 1 || k > DMAR_MAX_REFS)
		return dmar_error_set(d->err, -EBADMSG, "references record: %u bases (1..%d)", k, DMAR_MAX_REFS);
	dmar_hash_ctx_update(d->endck, h, sizeof(h));
	d->st.refs = k;
	for (uint32_t i = 0; i < k; i++) {
		uint8_t e[40];
		if ((r = read_exact(d, e, sizeof(e), "references record entry", i)) < 0)
			return r;
		dmar_hash_ctx_update(d->endck, e, sizeof(e));
		uint64_t size = dmar_get_le64(e + 32);
		if (i < DMAR_MAX_REFS) {
			memcpy(d->st.ref_ids[i].b, e, DMAR_HASH_SIZE);
			d->st.ref_sizes[i] = size;
		}
		if (!d->o->ref)
			continue;
		if (i >= dmar_refset_sources(d->o->ref))
			return dmar_error_set(d->err, -ENOENT,
					      "made against %u reference files, only %u given (--ref, in the same order)", k,
					      dmar_refset_sources(d->o->ref));
		struct dmar_id id;
		uint64_t have;
		dmar_refset_source(d->o->ref, i, &id, &have);
		if (have != size || memcmp(id.b, e, DMAR_HASH_SIZE)) {
			char want[DMAR_HASH_HEX_SIZE], got[DMAR_HASH_HEX_SIZE];
			dmar_hex(e, 8, want);
			dmar_hex(id.b, 8, got);
			return dmar_error_set(d->err, -ENOENT,
					      "reference file %u is not the one used at packing: %" PRIu64 " bytes, id %s..., expected %" PRIu64 " bytes, id %s... (give the same --ref files in the same order)",
					      i + 1, have, got, size, want);
		}
	}
	return 0;
}

static int setup(struct dec *d)
{
	const struct dmar_decoder_opts *o = d->o;
	if ((d->h.flags & DMAR_HDR_PACK) && !o->info_only) {
		if (!o->pack)
			return dmar_error_set(d->err, -ENOKEY, "needs byte pack id %016" PRIx64 " (pass -D PACK)",
					      d->h.pack_id);
		if (dmar_bytepack_id(o->pack) != d->h.pack_id)
			return dmar_error_set(d->err, -ENOKEY,
					      "needs byte pack id %016" PRIx64 ", but the given pack is %016" PRIx64,
					      d->h.pack_id, dmar_bytepack_id(o->pack));
	}
	if (o->ref) {
		const struct dmar_chunker *rc = dmar_refset_chunker(o->ref);
		if (rc->min != d->h.chunker.min || rc->avg != d->h.chunker.avg || rc->max != d->h.chunker.max)
			return dmar_error_set(d->err, -EINVAL,
					      "reference data was cut with other chunk sizes than the artifact's");
	}
	unsigned t = o->threads ? o->threads : 1;
	/* Parsing and writing are cheap, and while it waits for a block the
	 * caller decodes queued ones itself (with the last context), so it
	 * counts as one of the threads: -T2 is the caller plus one worker. */
	int r = dmar_pool_new(&d->pool, t - 1);
	if (r < 0)
		return dmar_error_errno(d->err, r, "decoder");
	/* From -T2 on, positional output gets a thread of its own for
	 * writing, as zstd -d writes on an I/O thread, so that writing a block
	 * overlaps the decoding of the next instead of holding up the caller,
	 * which decodes too.  -T still counts the threads that decompress and
	 * verify.  At -T1 the caller writes each block itself once it is
	 * verified: a writer beside the one decoding thread made the decoding
	 * slower than the write it hid (unpack -T1 of the tar corpus into
	 * tmpfs, 5 runs each: 0.29 s with the writer, 0.21 s without, libzstd
	 * taking three times the samples while the other core copied the
	 * previous block), and -T1 then means one thread. */
	if (o->pwrite && !o->info_only && t > 1) {
		r = dmar_pool_new(&d->wpool, 1);
		if (r < 0)
			return dmar_error_errno(d->err, r, "decoder");
	}
	/* With the writer, one more slot: the block being written. */
	d->ring_cap = (t > 1 ? t + 2 : 1) + (d->wpool ? 1 : 0);
	d->dctx = calloc(t, sizeof(*d->dctx));
	d->dctx_pack = calloc(t, sizeof(*d->dctx_pack));
	d->ring = calloc(d->ring_cap, sizeof(*d->ring));
	if (!d->dctx || !d->dctx_pack || !d->ring)
		return dmar_error_errno(d->err, -ENOMEM, "decoder");
	bool use_pack = (d->h.flags & DMAR_HDR_PACK) && !o->info_only;
	for (unsigned i = 0; i < t; i++) {
		for (int k = 0; k < 1 + use_pack; k++) {
			ZSTD_DCtx *c = ZSTD_createDCtx();
			if (!c)
				return dmar_error_errno(d->err, -ENOMEM, "decoder");
			*(k ? &d->dctx_pack[i] : &d->dctx[i]) = c;
			ZSTD_DCtx_setParameter(c, ZSTD_d_format, ZSTD_f_zstd1_magicless);
			ZSTD_DCtx_setParameter(c, ZSTD_d_windowLogMax, DEC_WINDOW_LOG_MAX);
			ZSTD_DCtx_setParameter(c, ZSTD_d_stableOutBuffer, 1);
			if (k) {
				const ZSTD_DDict *dd = (const ZSTD_DDict *)dmar_bytepack_ddict(o->pack);
				if (!dd || ZSTD_isError(ZSTD_DCtx_refDDict(c, dd)))
					return dmar_error_errno(d->err, -ENOMEM, "decoder");
			}
		}
	}
	unsigned mc = DMAR_BLOCK_MAX_CHUNKS;
	for (unsigned i = 0; i < d->ring_cap; i++) {
		struct dec_job *j = &d->ring[i];
		j->pj.fn = decode_block;
		j->wj.fn = write_block;
		j->d = d;
		j->lens = malloc(mc * sizeof(*j->lens));
		j->absent = malloc(mc);
		j->ids = malloc(mc * sizeof(*j->ids));
		if (!j->lens || !j->absent || !j->ids)
			return dmar_error_errno(d->err, -ENOMEM, "decoder");
	}
	return 0;
}

static void teardown(struct dec *d)
{
	for (unsigned k = 0; k < d->ring_count; k++)
		dmar_pool_wait(d->pool, &d->ring[(d->ring_head + k) % d->ring_cap].pj);
	for (unsigned i = 0; d->ring && i < d->ring_cap; i++)
		if (d->ring[i].writing)
			dmar_pool_wait(d->wpool, &d->ring[i].wj);
	dmar_pool_free(d->wpool);
	dmar_pool_free(d->pool);
	pthread_mutex_destroy(&d->wlock);
	unsigned t = d->o->threads ? d->o->threads : 1;
	for (unsigned i = 0; i < t; i++) {
		if (d->dctx)
			ZSTD_freeDCtx(d->dctx[i]);
		if (d->dctx_pack)
			ZSTD_freeDCtx(d->dctx_pack[i]);
	}
	free(d->dctx);
	free(d->dctx_pack);
	for (unsigned i = 0; d->ring && i < d->ring_cap; i++) {
		struct dec_job *j = &d->ring[i];
		dmar_block_buf_free(&j->table);
		dmar_block_buf_free(&j->payload);
		dmar_block_buf_free(&j->raw);
		dmar_block_buf_free(&j->out);
		free(j->lens);
		free(j->absent);
		free(j->ids);
	}
	free(d->ring);
	free(d->rbuf);
	dmar_hash_ctx_free(d->recipe);
	dmar_hash_ctx_free(d->endck);
}

static void info_chunks(struct dec *d, struct dec_job *j)
{
	/* Offsets are known until the first run whose lengths are not. */
	uint64_t off = d->lens_unknown_before ? UINT64_MAX : d->st.logical;
	for (unsigned i = 0; i < j->n; i++) {
		if (j->absent[i] >= 2)
			off = UINT64_MAX;
		if (d->o->on_chunk)
			d->o->on_chunk(d->o->on_chunk_ctx, j->first_chunk + i, off, j->lens[i], j->absent[i],
				       j->absent[i] == 1 || j->absent[i] == 2 ? &j->ids[i] : NULL);
		if (off != UINT64_MAX)
			off += j->lens[i];
	}
	d->lens_unknown_before = d->lens_unknown;
}

int dmar_decode(const struct dmar_decoder_opts *o, dmar_read_fn read, void *rctx,
		dmar_write_fn write, void *wctx, void (*progress)(void *, uint64_t), void *pctx,
		struct dmar_decode_stats *st, struct dmar_error *err)
{
	struct dec d = { .o = o, .read = read, .rctx = rctx, .err = err, .wlock = PTHREAD_MUTEX_INITIALIZER };
	struct dmar_error local = { 0 };
	if (!d.err)
		d.err = &local;
	int r = -ENOMEM;
	d.recipe = dmar_hash_ctx_new();
	d.endck = dmar_hash_ctx_new();
	d.rbuf = malloc(DEC_RBUF_SIZE);
	if (!d.recipe || !d.endck || !d.rbuf) {
		dmar_error_errno(d.err, r, "decoder");
		goto out;
	}
	r = parse_header(&d);
	if (r < 0)
		goto out;
	d.st.header = d.h;
	if (o->on_header && (r = o->on_header(o->on_header_ctx, &d.h)) < 0) {
		dmar_error_errno(d.err, r, "reference data");
		goto out;
	}
	if ((r = setup(&d)) < 0)
		goto out;
	if ((d.h.flags & DMAR_HDR_THIN) && (r = parse_refs(&d)) < 0)
		goto out;

	uint64_t last_progress = 0;
	for (;;) {
		uint8_t type;
		ssize_t n = read_full(&d, &type, 1);
		if (n < 0) {
			r = dmar_error_errno(d.err, (int)n, "read");
			goto out;
		}
		if (n == 0) {
			r = dmar_error_set(d.err, -ENODATA, "truncated: no end record after block %" PRIu64,
					   d.st.blocks);
			goto out;
		}
		if (type == DMAR_REC_END)
			break;
		if (type != DMAR_REC_BLOCK) {
			r = dmar_error_set(d.err, -EBADMSG, "block %" PRIu64 ": unknown record type 0x%02x",
					   d.st.blocks, type);
			goto out;
		}
		if (d.ring_count == d.ring_cap && (r = collect_oldest(&d, write, wctx)) < 0)
			goto out;
		struct dec_job *j = &d.ring[(d.ring_head + d.ring_count) % d.ring_cap];
		if ((r = wait_write(&d, j)) < 0)
			goto out;
		j->hdr[0] = type;
		if ((r = parse_block(&d, j)) < 0)
			goto out;
		d.st.blocks++;
		d.st.chunks += j->n;
		d.st.logical += j->logical;
		d.st.absent_chunks += j->absent_n;
		d.st.raw_blocks += j->enc == DMAR_ENC_RAW;
		for (unsigned i = 0; i < j->n; i++)
			if (j->absent[i])
				d.st.absent_bytes += j->lens[i];
		if (o->info_only) {
			d.st.logical -= j->logical;
			info_chunks(&d, j);
			d.st.logical += j->logical;
			continue;
		}
		d.ring_count++;
		dmar_pool_submit(d.pool, &j->pj);
		/* Hand decoded blocks to the writer as soon as they are done
		 * (without decode workers, at once), so that they are written
		 * while the next ones decode, and their slots come free. */
		while (d.wpool && d.ring_count && dmar_pool_done(d.pool, &d.ring[d.ring_head].pj))
			if ((r = collect_oldest(&d, write, wctx)) < 0)
				goto out;
		if (progress && d.st.logical - last_progress >= (8u << 20)) {
			last_progress = d.st.logical;
			progress(pctx, last_progress);
		}
	}
	while (d.ring_count)
		if ((r = collect_oldest(&d, write, wctx)) < 0)
			goto out;
	for (unsigned i = 0; i < d.ring_cap; i++)
		if ((r = wait_write(&d, &d.ring[i])) < 0)
			goto out;
	r = parse_end(&d, !o->info_only);
	if (r < 0)
		goto out;
	dmar_hash_ctx_final(d.recipe, &d.st.file_id);
out:
	if (st)
		*st = d.st;
	teardown(&d);
	return r;
}

struct mem_reader {
	const uint8_t *p;
	size_t left;
};

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
	struct mem_reader *m = ctx;
	size_t n = len < m->left ? len : m->left;
	memcpy(buf, m->p, n);
	m->p += n;
	m->left -= n;
	return (ssize_t)n;
}

int dmar_decode_mem(const struct dmar_decoder_opts *o, const void *buf, size_t len,
		    dmar_write_fn write, void *wctx, struct dmar_decode_stats *st,
		    struct dmar_error *err)
{
	struct mem_reader m = { buf, len };
	return dmar_decode(o, mem_read, &m, write, wctx, NULL, NULL, st, err);
}
