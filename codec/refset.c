/* SPDX-License-Identifier: MIT */
/*
 * The chunks of the bases in order, and an open-addressing hash table of
 * indices into them keyed by chunk id.  Ids are SHA-256 outputs, so their
 * first 8 bytes are already a uniform hash.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "encoder.h"
#include "format.h"
#include "refset.h"

/* Every chunk of every base, in file order: runs of absent chunks are
 * "the chunks that follow this one in the base". */
struct ref_chunk {
	struct dmar_id id;
	uint64_t offset;
	uint32_t len;
	uint32_t source;
};

struct ref_source {
	int fd;               /* -1 for memory sources */
	const uint8_t *mem;
	struct dmar_id file_id; /* SHA-256 of its recipe, as in artifacts */
	uint64_t size;
};

struct dmar_refset {
	struct dmar_chunker ck;
	struct ref_chunk *chunks;  /* in order */
	uint64_t nchunks, chunks_cap;
	uint64_t *tab;        /* index + 1 into chunks of an id's first occurrence; 0 empty */
	size_t cap, used;     /* cap is a power of two */
	struct ref_source *src;
	unsigned nsrc;
	uint64_t bytes;
};

int dmar_refset_new(struct dmar_refset **out, const struct dmar_chunker *ck)
{
	struct dmar_refset *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	rs->ck = *ck;
	rs->cap = 1024;
	rs->tab = calloc(rs->cap, sizeof(*rs->tab));
	if (!rs->tab) {
		free(rs);
		return -ENOMEM;
	}
	*out = rs;
	return 0;
}

static size_t slot_of(const struct dmar_id *id, size_t cap)
{
	return (size_t)dmar_get_le64(id->b) & (cap - 1);
}

/* Index into chunks of the first chunk with this id, or -1. */
static int64_t find(const struct dmar_refset *rs, const struct dmar_id *id)
{
	for (size_t i = slot_of(id, rs->cap);; i = (i + 1) & (rs->cap - 1)) {
		uint64_t v = rs->tab[i];
		if (!v)
			return -1;
		if (!memcmp(rs->chunks[v - 1].id.b, id->b, DMAR_HASH_SIZE))
			return (int64_t)(v - 1);
	}
}

static void put(const struct ref_chunk *chunks, uint64_t *tab, size_t cap, uint64_t idx)
{
	size_t i = slot_of(&chunks[idx].id, cap);
	while (tab[i])
		i = (i + 1) & (cap - 1);
	tab[i] = idx + 1;
}

static int grow(struct dmar_refset *rs)
{
	size_t cap = rs->cap * 2;
	uint64_t *t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < rs->cap; i++)
		if (rs->tab[i])
			put(rs->chunks, t, cap, rs->tab[i] - 1);
	free(rs->tab);
	rs->tab = t;
	rs->cap = cap;
	return 0;
}

struct add_ctx {
	struct dmar_refset *rs;
	uint32_t source;
};

static int add_chunks(void *ctx, uint64_t offset, const struct dmar_id *ids, const uint32_t *lens,
		      const uint8_t *data, unsigned n)
{
	struct add_ctx *a = ctx;
	struct dmar_refset *rs = a->rs;
	if (rs->nchunks + n > rs->chunks_cap) {
		uint64_t c = rs->chunks_cap ? rs->chunks_cap * 2 : 4096;
		while (c < rs->nchunks + n)
			c *= 2;
		struct ref_chunk *nc = realloc(rs->chunks, c * sizeof(*nc));
		if (!nc)
			return -ENOMEM;
		rs->chunks = nc;
		rs->chunks_cap = c;
	}
	for (unsigned i = 0; i < n; i++) {
		uint64_t idx = rs->nchunks++;
		rs->chunks[idx] = (struct ref_chunk){ ids[i], offset, lens[i], a->source };
		if (find(rs, &ids[i]) < 0) {
			if ((rs->used + 1) * 2 > rs->cap) {
				int r = grow(rs);
				if (r < 0)
					return r;
			}
			put(rs->chunks, rs->tab, rs->cap, idx);
			rs->used++;
		}
		offset += lens[i];
	}
	return 0;
}

/* Index-only encoding of one source: the encoder does the cutting and the
 * parallel hashing, we only keep the ids. */
static int index_source(struct dmar_refset *rs, int fd, const uint8_t *mem, size_t len,
			unsigned threads, const char *name, struct dmar_error *err)
{
	struct ref_source *s = realloc(rs->src, (rs->nsrc + 1) * sizeof(*s));
	if (!s)
		return dmar_error_errno(err, -ENOMEM, name);
	rs->src = s;
	rs->src[rs->nsrc] = (struct ref_source){ .fd = fd, .mem = mem };
	struct add_ctx a = { rs, rs->nsrc };

	struct dmar_encoder_opts o = {
		.chunker = rs->ck,
		.threads = threads ? threads : 1,
		.on_chunks = add_chunks,
		.on_chunks_ctx = &a,
	};
	struct dmar_encoder *e;
	struct dmar_error e2 = { 0 };
	struct dmar_encode_stats st;
	int r = dmar_encoder_new(&e, &o, NULL, NULL, &e2);
	if (r == 0)
		r = fd >= 0 ? dmar_encoder_feed_fd(e, fd, NULL, NULL) : dmar_encoder_feed(e, mem, len);
	if (r == 0)
		r = dmar_encoder_finish(e, &st);
	dmar_encoder_free(e);
	if (r < 0)
		return dmar_error_set(err, r, "%s: %s", name, e2.code ? e2.msg : strerror(-r));
	rs->src[rs->nsrc].file_id = st.file_id;
	rs->src[rs->nsrc].size = st.logical;
	rs->nsrc++;
	rs->bytes += st.logical;
	return 0;
}

int dmar_refset_add_file(struct dmar_refset *rs, const char *path, unsigned threads,
			 struct dmar_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dmar_error_errno(err, -errno, path);
	int r = index_source(rs, fd, NULL, 0, threads, path, err);
	if (r < 0)
		close(fd);
	return r;
}

int dmar_refset_add_mem(struct dmar_refset *rs, const void *buf, size_t len, unsigned threads,
			struct dmar_error *err)
{
	return index_source(rs, -1, buf, len, threads, "reference buffer", err);
}

bool dmar_refset_has(const struct dmar_refset *rs, const struct dmar_id *id)
{
	return find(rs, id) >= 0;
}

int64_t dmar_refset_find(const struct dmar_refset *rs, const struct dmar_id *id)
{
	return find(rs, id);
}

int dmar_refset_at(const struct dmar_refset *rs, uint64_t index, uint64_t first,
		   struct dmar_id *id, uint32_t *len)
{
	if (index >= rs->nchunks || rs->chunks[index].source != rs->chunks[first].source)
		return -ENOENT;
	*id = rs->chunks[index].id;
	*len = rs->chunks[index].len;
	return 0;
}

int dmar_refset_read(const struct dmar_refset *rs, const struct dmar_id *id, uint32_t len,
		     uint8_t *dst)
{
	int64_t k = find(rs, id);
	if (k < 0 || rs->chunks[k].len != len)
		return -ENOENT;
	const struct ref_chunk *e = &rs->chunks[k];
	const struct ref_source *s = &rs->src[e->source];
	if (s->fd < 0) {
		memcpy(dst, s->mem + e->offset, len);
	} else {
		size_t got = 0;
		while (got < len) {
			ssize_t n = pread(s->fd, dst + got, len - got, (off_t)(e->offset + got));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			if (n == 0)
				return -EBADMSG; /* the base shrank */
			got += (size_t)n;
		}
	}
	struct dmar_id h;
	dmar_hash(dst, len, &h);
	if (memcmp(h.b, id->b, DMAR_HASH_SIZE))
		return -EBADMSG;
	return 0;
}

unsigned dmar_refset_sources(const struct dmar_refset *rs)
{
	return rs->nsrc;
}

void dmar_refset_source(const struct dmar_refset *rs, unsigned k, struct dmar_id *file_id, uint64_t *size)
{
	*file_id = rs->src[k].file_id;
	*size = rs->src[k].size;
}

uint64_t dmar_refset_chunks(const struct dmar_refset *rs)
{
	return rs->used;
}

uint64_t dmar_refset_bytes(const struct dmar_refset *rs)
{
	return rs->bytes;
}

const struct dmar_chunker *dmar_refset_chunker(const struct dmar_refset *rs)
{
	return &rs->ck;
}

void dmar_refset_free(struct dmar_refset *rs)
{
	if (!rs)
		return;
	for (unsigned i = 0; i < rs->nsrc; i++)
		if (rs->src[i].fd >= 0)
			close(rs->src[i].fd);
	free(rs->src);
	free(rs->chunks);
	free(rs->tab);
	free(rs);
}
