/* SPDX-License-Identifier: MIT */
/*
 * The chunk endpoints of the REST server (server_i.h): query, upload
 * (verified as the batch arrives), download and fetch.
 */
#include "config.h"

#include "server_i.h"


/* POST /v1/chunks/query: the missing ids, in request order */
enum MHD_Result srv_h_query(struct req *q)
{
	size_t n;
	if (!srv_id_list(q, &n))
		return q->answered ? MHD_YES : MHD_NO;
	const struct dmar_id *ids = (const struct dmar_id *)q->body;
	uint8_t *missing = calloc(n, 1);
	if (!missing)
		return srv_reply_error(q, -ENOMEM, 0, NULL);
	int r = q->s->ops->have(q->s->ctx, ids, n, missing, &q->err);
	if (r < 0) {
		free(missing);
		return srv_reply_ops_error(q, r);
	}
	/* Compact the missing ids to the front of the body buffer. */
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (missing[i])
			memmove(q->body + DMAR_HASH_SIZE * m++, q->body + DMAR_HASH_SIZE * i, DMAR_HASH_SIZE);
	free(missing);
	uint8_t *out = q->body;
	q->body = NULL;
	struct MHD_Response *resp = MHD_create_response_from_buffer(m * DMAR_HASH_SIZE, m ? out : (void *)"",
								    m ? MHD_RESPMEM_MUST_FREE
								      : MHD_RESPMEM_PERSISTENT);
	if (!resp || !m)
		free(out);
	if (!resp)
		return MHD_NO;
	char num[24];
	snprintf(num, sizeof(num), "%zu", m);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, "X-Dmar-Missing", num);
	return srv_queue(q, MHD_HTTP_OK, resp);
}

/* The connection's zstd context and scratch, made on first use. */
static int conn_zstd(struct conn *cn)
{
	if (!cn->dctx && !(cn->dctx = ZSTD_createDCtx()))
		return -ENOMEM;
	if (!cn->scratch && !(cn->scratch = malloc(DMAR_WIRE_SCRATCH)))
		return -ENOMEM;
	return 0;
}

/* A chunk's verdict (v: 0 or dmar_wire_chunk_verify's error, verr its
 * message): store its decoded bytes, or list it as bad. */
static int chunk_verdict(struct req *q, const struct dmar_wire_chunk *c, int v, const struct dmar_error *verr,
			 const uint8_t *decoded)
{
	if (v < 0) {
		if (!q->bad_count++)
			snprintf(q->bad_msg, sizeof(q->bad_msg), "%s", verr->msg);
		if (json_array_size(q->bad) < DMAR_SERVER_MISSING_LIST)
			json_array_append_new(q->bad, srv_hex_id(&c->id));
		return 0;
	}
	int r = q->s->ops->put_chunk(q->s->ctx, c, decoded, &q->tags, &q->err);
	if (r < 0)
		return r;
	q->received++;
	q->bytes += c->len;
	return 0;
}

/* Verify the raw chunks held since the last flush together (two SHA-NI or
 * sixteen AVX-512 lanes side by side: hashing is most of what receiving
 * costs), then store each or list it as bad.  Runs before their payloads
 * go: after each feed of the parser, or when the group is full. */
int srv_group_flush(struct req *q)
{
	size_t n = q->ngroup;
	q->ngroup = 0;
	if (!n)
		return 0;
	struct dmar_error verr = { 0 };
	dmar_wire_chunks_verify(q->group, n, q->group_ok, &verr);
	for (size_t i = 0; i < n; i++) {
		int r = chunk_verdict(q, &q->group[i], q->group_ok[i] ? 0 : -EILSEQ, &verr, q->group[i].payload);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The batch parser's callback.  A raw chunk joins the group verified
 * after this feed (its payload stays valid until the parser's next call);
 * a zstd one is decoded into the connection's scratch, which the next one
 * reuses, so it is verified and stored at once. */
int srv_on_chunk(void *ctx, const struct dmar_wire_chunk *c)
{
	struct req *q = ctx;
	if (c->enc == DMAR_WIRE_RAW) {
		q->group[q->ngroup++] = *c;
		return q->ngroup == VERIFY_GROUP ? srv_group_flush(q) : 0;
	}
	int r = conn_zstd(q->conn);
	if (r < 0)
		return r;
	const uint8_t *decoded = NULL;
	struct dmar_error verr = { 0 };
	int v = dmar_wire_chunk_verify(c, q->conn->dctx, q->conn->scratch, &decoded, &verr);
	return chunk_verdict(q, c, v, &verr, decoded);
}

/* One piece of the decoded batch into the parser, then the group it left
 * verified and stored (also when the parser stopped at a malformed record:
 * the records before it count, as they did when each was stored in its
 * callback). */
int srv_batch_feed(struct req *q, const void *data, size_t len)
{
	int r = dmar_batch_parser_feed(q->bp, data, len, &q->err);
	int f = srv_group_flush(q);
	return r < 0 ? r : f;
}

/* A tree commit's body as it is decoded: its 16-byte header, then its
 * operations (buffered: they are applied once every chunk is in), then a
 * chunk batch, stored as it comes (as POST /v1/chunks). */
int srv_tree_feed(struct req *q, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len) {
		if (q->thave < DMAR_TREE_HDR_SIZE) {
			size_t take = DMAR_TREE_HDR_SIZE - q->thave < len ? DMAR_TREE_HDR_SIZE - q->thave : len;
			memcpy(q->thdr + q->thave, p, take);
			q->thave += take;
			p += take;
			len -= take;
			if (q->thave < DMAR_TREE_HDR_SIZE)
				return 0;
			int r = dmar_tree_header_parse(q->thdr, &q->tcount, &q->tops_len, &q->err);
			if (r < 0)
				return r;
			if (!(q->body = malloc(q->tops_len)))
				return -ENOMEM;
			q->cap = q->tops_len;
		} else if (q->len < q->tops_len) {
			size_t take = q->tops_len - q->len < len ? q->tops_len - q->len : len;
			memcpy(q->body + q->len, p, take);
			q->len += take;
			p += take;
			len -= take;
		} else {
			return srv_batch_feed(q, p, len);
		}
	}
	return 0;
}

/* 422: chunks that did not match their ids; the others were stored. */
enum MHD_Result srv_reply_bad_chunks(struct req *q)
{
	json_t *extra = json_pack("{s:O, s:I, s:I, s:I}", "bad", q->bad, "bad_count", (json_int_t)q->bad_count,
				  "received", (json_int_t)q->received, "bytes", (json_int_t)q->bytes);
	return srv_reply_error_full(q, -EILSEQ, 0, q->bad_msg, extra, NULL, NULL);
}

/* POST /v1/chunks: the batch has been parsed as it came; sum up. */
enum MHD_Result srv_h_put_chunks(struct req *q)
{
	if (q->zstd && !q->zdone)
		return srv_reply_error(q, -EBADMSG, 0, "zstd body: the frame is truncated");
	int r = dmar_batch_parser_finish(q->bp, &q->err);
	if (r < 0)
		return srv_reply_ops_error(q, r);
	if (q->bad_count)
		return srv_reply_bad_chunks(q);
	return srv_reply_json(q, MHD_HTTP_OK,
			  json_pack("{s:I, s:I}", "received", (json_int_t)q->received, "bytes", (json_int_t)q->bytes));
}

/* GET /v1/chunks/ID */
enum MHD_Result srv_h_get_chunk(struct req *q)
{
	struct dmar_wire_chunk c = { 0 };
	uint8_t *buf = NULL;
	int r = q->s->ops->get_chunk(q->s->ctx, &q->id, &c, &buf, &q->err);
	if (r < 0) {
		free(buf);
		return srv_reply_ops_error(q, r);
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(c.stored, c.stored ? buf : (void *)"",
								    c.stored ? MHD_RESPMEM_MUST_FREE
									     : MHD_RESPMEM_PERSISTENT);
	if (!resp || !c.stored)
		free(buf);
	if (!resp)
		return MHD_NO;
	atomic_fetch_add(&q->s->served, 1);
	atomic_fetch_add(&q->s->served_bytes, c.len);
	char num[16];
	snprintf(num, sizeof(num), "%u", c.len);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, "X-Dmar-Encoding", c.enc == DMAR_WIRE_ZSTD ? "zstd" : "raw");
	MHD_add_response_header(resp, "X-Dmar-Length", num);
	return srv_queue(q, MHD_HTTP_OK, resp);
}

/*
 * POST /v1/chunks/fetch streams its answer: one chunk in memory at a time
 * (the node's copy and, for a raw chunk, its compressed form), the next
 * fetched when MHD has sent the last.  A chunk that vanishes between the
 * up-front check and its turn ends the stream early; the client sees a
 * truncated batch.
 */
struct fetch {
	struct dmar_server *s;
	uint8_t *ids;
	size_t n, next; /* ids to send, the next one */
	bool started;   /* the batch srv_header is out */
	const uint8_t *seg[2];
	size_t seg_len[2];
	int nseg, cur;
	size_t off;
	uint8_t hdr[DMAR_BATCH_REC_SIZE > DMAR_BATCH_HDR_SIZE ? DMAR_BATCH_REC_SIZE : DMAR_BATCH_HDR_SIZE];
	uint8_t *chunk; /* the node's copy of the current chunk */
	struct dmar_zchunk *z;
	uint8_t *zbuf;  /* its compressed form */
	size_t zbuf_cap;
};

static void fetch_free(void *cls)
{
	struct fetch *f = cls;
	free(f->ids);
	free(f->chunk);
	free(f->zbuf);
	dmar_zchunk_free(f->z);
	free(f);
}

/* A raw payload as a level-1 chunk frame, in the form the compress
 * policy (codec/compress.h) chooses; of a chunk its source already judged
 * (the plain form does not pay), only the grouped forms are tried. */
static bool fetch_compress(struct fetch *f, struct dmar_wire_chunk *c)
{
	if (c->enc != DMAR_WIRE_RAW)
		return false;
	if (!f->z && dmar_zchunk_new(&f->z, 1, NULL) < 0)
		return false;
	enum dmar_zx zx = dmar_zchunk_choose(f->z, c->payload, c->len, c->tried);
	if (zx == DMAR_ZX_RAW)
		return false;
	if (f->zbuf_cap < c->len) {
		uint8_t *z = realloc(f->zbuf, c->len);
		if (!z)
			return false;
		f->zbuf = z;
		f->zbuf_cap = c->len;
	}
	size_t r = dmar_zchunk_compress_as(f->z, f->zbuf, c->len, c->payload, c->len, zx);
	if (!r)
		return false;
	c->enc = dmar_wire_zx_enc(zx);
	c->stored = (uint32_t)r;
	c->payload = f->zbuf;
	return true;
}

/* Ready the next piece of the stream; false when there is none (or the
 * chunk could not be had). */
static bool fetch_next(struct fetch *f, bool *failed)
{
	f->cur = f->nseg = 0;
	f->off = 0;
	if (!f->started) {
		dmar_batch_write_header(f->hdr, (uint32_t)f->n);
		f->seg[0] = f->hdr;
		f->seg_len[0] = DMAR_BATCH_HDR_SIZE;
		f->nseg = 1;
		f->started = true;
		return true;
	}
	if (f->next == f->n)
		return false;
	free(f->chunk);
	f->chunk = NULL;
	struct dmar_wire_chunk c = { 0 };
	struct dmar_error err = { 0 };
	const struct dmar_id *id = (const struct dmar_id *)(f->ids + DMAR_HASH_SIZE * f->next++);
	if (f->s->ops->get_chunk(f->s->ctx, id, &c, &f->chunk, &err) < 0) {
		*failed = true;
		return false;
	}
	c.id = *id;
	atomic_fetch_add(&f->s->served, 1);
	atomic_fetch_add(&f->s->served_bytes, c.len);
	fetch_compress(f, &c);
	dmar_batch_write_record(f->hdr, &c);
	f->seg[0] = f->hdr;
	f->seg_len[0] = DMAR_BATCH_REC_SIZE;
	f->seg[1] = c.payload;
	f->seg_len[1] = c.stored;
	f->nseg = 2;
	return true;
}

static ssize_t fetch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fetch *f = cls;
	size_t w = 0;
	while (w < max) {
		if (f->cur == f->nseg) {
			bool failed = false;
			if (!fetch_next(f, &failed)) {
				if (w)
					return (ssize_t)w;
				return failed ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
			}
			continue;
		}
		size_t take = f->seg_len[f->cur] - f->off;
		if (take > max - w)
			take = max - w;
		memcpy(buf + w, f->seg[f->cur] + f->off, take);
		w += take;
		f->off += take;
		if (f->off == f->seg_len[f->cur]) {
			f->cur++;
			f->off = 0;
		}
	}
	return (ssize_t)w;
}

/* POST /v1/chunks/fetch: every id is checked with have() before the first
 * byte, so an absent one is a clean 404. */
enum MHD_Result srv_h_fetch(struct req *q)
{
	size_t n;
	if (!srv_id_list(q, &n))
		return q->answered ? MHD_YES : MHD_NO;
	if (n > UINT32_MAX)
		return srv_reply_error(q, -E2BIG, 0, "fetch: too many ids");
	uint8_t *missing = calloc(n, 1);
	if (!missing)
		return srv_reply_error(q, -ENOMEM, 0, NULL);
	const struct dmar_id *ids = (const struct dmar_id *)q->body;
	int r = q->s->ops->have(q->s->ctx, ids, n, missing, &q->err);
	if (r < 0) {
		free(missing);
		return srv_reply_ops_error(q, r);
	}
	json_t *list = json_array();
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (missing[i] && m++ < DMAR_SERVER_MISSING_LIST)
			json_array_append_new(list, srv_hex_id(&ids[i]));
	free(missing);
	if (m) {
		char msg[128];
		snprintf(msg, sizeof(msg), "fetch: %zu of %zu chunks are not held here", m, n);
		json_t *extra = json_pack("{s:I, s:o}", "missing_count", (json_int_t)m, "missing", list);
		return srv_reply_error_full(q, -ENOENT, 0, msg, extra, NULL, NULL);
	}
	json_decref(list);
	struct fetch *f = calloc(1, sizeof(*f));
	if (!f)
		return srv_reply_error(q, -ENOMEM, 0, NULL);
	f->s = q->s;
	f->ids = q->body;
	f->n = n;
	q->body = NULL;
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, FETCH_BLOCK, fetch_read, f, fetch_free);
	if (!resp) {
		fetch_free(f);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-dmar-chunks");
	return srv_queue(q, MHD_HTTP_OK, resp);
}
