/* SPDX-License-Identifier: MIT */
/*
 * Tree commits (client.h): a body of operations and the chunks their
 * files need, built in memory, sent as one POST /v1/tree.
 */
#include "config.h"

#include "client_i.h"
#include "codec/clock.h"

struct dmar_tree_body {
	uint8_t *ops;          /* op records */
	size_t ops_len, ops_cap;
	uint32_t nops;
	uint8_t *chunks;       /* chunk batch records with raw payloads */
	size_t chunks_len, chunks_cap;
	uint32_t nchunks;
	uint64_t zable;        /* payload bytes the probe found compressible */
	struct dmar_zchunk *z; /* the probe */
	ZSTD_CCtx *bz;         /* the whole body's compressor, kept across requests */
};

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64 << 10;
	while (c < need)
		c *= 2;
	uint8_t *b = realloc(*buf, c);
	if (!b)
		return -ENOMEM;
	*buf = b;
	*cap = c;
	return 0;
}

int dmar_tree_body_new(struct dmar_tree_body **out)
{
	struct dmar_tree_body *b = calloc(1, sizeof(*b));
	if (!b || dmar_zchunk_new(&b->z, 1, NULL) < 0 || !(b->bz = ZSTD_createCCtx())) {
		if (b)
			dmar_zchunk_free(b->z);
		free(b);
		return -ENOMEM;
	}
	*out = b;
	return 0;
}

void dmar_tree_body_free(struct dmar_tree_body *b)
{
	if (!b)
		return;
	free(b->ops);
	free(b->chunks);
	dmar_zchunk_free(b->z);
	ZSTD_freeCCtx(b->bz);
	free(b);
}

void dmar_tree_body_reset(struct dmar_tree_body *b)
{
	b->ops_len = b->chunks_len = 0;
	b->nops = b->nchunks = 0;
	b->zable = 0;
}

uint32_t dmar_tree_body_ops(const struct dmar_tree_body *b)
{
	return b->nops;
}

uint64_t dmar_tree_body_bytes(const struct dmar_tree_body *b)
{
	return DMAR_TREE_HDR_SIZE + b->ops_len + DMAR_BATCH_HDR_SIZE + b->chunks_len;
}

int dmar_tree_body_op(struct dmar_tree_body *b, const struct dmar_tree_op *op)
{
	size_t pl = strlen(op->path);
	if (!pl || pl > DMAR_TREE_PATH_MAX || op->data_len > UINT32_MAX)
		return -EINVAL;
	size_t n = dmar_tree_op_size(pl, op->data_len);
	if (b->nops == DMAR_TREE_OPS_MAX || b->ops_len + n > DMAR_TREE_OPS_BYTES_MAX)
		return -E2BIG;
	if (grow(&b->ops, &b->ops_cap, b->ops_len + n) < 0)
		return -ENOMEM;
	b->ops_len += dmar_tree_write_op(b->ops + b->ops_len, op);
	b->nops++;
	return 0;
}

int dmar_tree_body_chunk(struct dmar_tree_body *b, const struct dmar_id *id, const void *payload, uint32_t len)
{
	if (!len || len > DMAR_WIRE_CHUNK_MAX)
		return -EINVAL;
	if (grow(&b->chunks, &b->chunks_cap, b->chunks_len + DMAR_BATCH_REC_SIZE + len) < 0)
		return -ENOMEM;
	struct dmar_wire_chunk w = { .id = *id, .enc = DMAR_WIRE_RAW, .len = len, .stored = len };
	dmar_batch_write_record(b->chunks + b->chunks_len, &w);
	memcpy(b->chunks + b->chunks_len + DMAR_BATCH_REC_SIZE, payload, len);
	b->chunks_len += DMAR_BATCH_REC_SIZE + len;
	b->nchunks++;
	if (dmar_zchunk_probe(b->z, payload, len))
		b->zable += len;
	return 0;
}

/* The whole body as one zstd frame into *out (malloc'd), if mostly
 * compressible and it pays (compress.h's rule); 0 bytes otherwise.  The
 * body's compressor is reset, not made anew: a new one's first frame sets
 * up its whole workspace, which cost more than compressing a small
 * file's body (cp -r into @PEER/ ships one body a file). */
static size_t compress_body(const struct dmar_tree_body *b, const uint8_t *hdr, const uint8_t *bhdr, uint8_t **out)
{
	size_t plain = (size_t)dmar_tree_body_bytes(b);
	*out = NULL;
	/* Without chunks the body is paths and recipes: ids do not shrink. */
	if (!b->nchunks || b->zable * 2 < (uint64_t)(b->chunks_len - (size_t)b->nchunks * DMAR_BATCH_REC_SIZE))
		return 0;
	ZSTD_CCtx *z = b->bz;
	size_t cap = ZSTD_compressBound(plain);
	uint8_t *dst = malloc(cap);
	size_t len = 0;
	if (!dst)
		return 0;
	ZSTD_CCtx_reset(z, ZSTD_reset_session_and_parameters);
	ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, DMAR_BATCH_ZSTD_LEVEL);
	ZSTD_CCtx_setPledgedSrcSize(z, plain);
	ZSTD_outBuffer o = { dst, cap, 0 };
	const struct {
		const void *p;
		size_t n;
	} parts[] = { { hdr, DMAR_TREE_HDR_SIZE }, { b->ops, b->ops_len }, { bhdr, DMAR_BATCH_HDR_SIZE },
		      { b->chunks, b->chunks_len } };
	for (size_t k = 0; k < 4; k++) {
		ZSTD_inBuffer in = { parts[k].p, parts[k].n, 0 };
		ZSTD_EndDirective end = k == 3 ? ZSTD_e_end : ZSTD_e_continue;
		size_t r;
		do {
			r = ZSTD_compressStream2(z, &o, &in, end);
			if (ZSTD_isError(r))
				goto fail;
		} while (end == ZSTD_e_end ? r != 0 : in.pos < in.size);
	}
	len = o.pos;
	if (!dmar_compress_pays(plain, len))
		goto fail;
	*out = dst;
	return len;
fail:
	free(dst);
	return 0;
}

/* curl's read callback over the plain body's four parts. */
struct body_reader {
	const void *p[4];
	size_t n[4];
	size_t part, off;
};

static size_t body_read(char *buf, size_t size, size_t nitems, void *ud)
{
	struct body_reader *r = ud;
	size_t room = size * nitems, done = 0;
	while (room && r->part < 4) {
		size_t left = r->n[r->part] - r->off, take = left < room ? left : room;
		if (take) /* an empty part may have no buffer at all */
			memcpy(buf + done, (const uint8_t *)r->p[r->part] + r->off, take);
		done += take;
		room -= take;
		r->off += take;
		if (r->off == r->n[r->part]) {
			r->part++;
			r->off = 0;
		}
	}
	return done;
}

static int body_seek(void *ud, curl_off_t offset, int origin)
{
	struct body_reader *r = ud;
	if (origin != SEEK_SET || offset < 0)
		return CURL_SEEKFUNC_FAIL;
	size_t left = (size_t)offset;
	for (r->part = 0; r->part < 4 && left >= r->n[r->part]; r->part++)
		left -= r->n[r->part];
	r->off = left;
	return r->part < 4 || left == 0 ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL;
}

/* The answer's errors into status[] (0 for the others): how many failed. */
static int read_answer(const struct dmar_tree_body *b, json_t *ans, int *status, const char *label,
		       struct dmar_error *err)
{
	json_t *errors = json_object_get(ans, "errors");
	json_int_t failed = json_integer_value(json_object_get(ans, "failed"));
	if (!json_is_array(errors) || json_integer_value(json_object_get(ans, "ops")) != b->nops || failed < 0 ||
	    (size_t)failed != json_array_size(errors))
		return dmar_error_set(err, -EBADMSG, "%s: tree commit: a malformed answer", label);
	for (uint32_t k = 0; status && k < b->nops; k++)
		status[k] = 0;
	size_t i;
	json_t *e;
	json_array_foreach(errors, i, e) {
		json_int_t k = json_integer_value(json_object_get(e, "op"));
		const char *name = json_string_value(json_object_get(e, "errno"));
		const char *msg = json_string_value(json_object_get(e, "error"));
		const char *path = json_string_value(json_object_get(e, "path"));
		if (k < 0 || k >= b->nops)
			return dmar_error_set(err, -EBADMSG, "%s: tree commit: an answer for operation %lld of %u", label,
					      (long long)k, b->nops);
		int code = dmar_wire_errno_from_name(name);
		if (status)
			status[k] = code;
		dmar_error_set(err, code, "%s: %s: %s", label, path ? path : "?", msg ? msg : strerror(-code));
	}
	return (int)failed;
}

int dmar_client_tree(struct dmar_client *c, const struct dmar_tree_body *b, int *status, struct dmar_xfer_stats *st,
		     struct dmar_error *err)
{
	if (!b->nops)
		return -EINVAL;
	uint8_t hdr[DMAR_TREE_HDR_SIZE], bhdr[DMAR_BATCH_HDR_SIZE];
	dmar_tree_write_header(hdr, b->nops, (uint32_t)b->ops_len);
	dmar_batch_write_header(bhdr, b->nchunks);
	double t0 = dmar_mono_s();
	uint8_t *z = NULL;
	size_t zlen = compress_body(b, hdr, bhdr, &z);
	struct body_reader rd = { .p = { hdr, b->ops, bhdr, b->chunks },
				  .n = { DMAR_TREE_HDR_SIZE, b->ops_len, DMAR_BATCH_HDR_SIZE, b->chunks_len } };
	struct call k;
	struct tally t = { 0 };
	json_t *ans = NULL;
	int r = cl_call_begin(&k, c, "POST", "/v1/tree", NULL, err);
	if (r < 0)
		goto out;
	if ((r = cl_call_header(&k, "Content-Type: application/x-dmar-tree")) < 0 ||
	    (zlen && (r = cl_call_header(&k, "Content-Encoding: zstd")) < 0))
		goto out;
	if (zlen) {
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDS, z);
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)zlen);
	} else {
		curl_easy_setopt(k.h, CURLOPT_POST, 1L);
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)dmar_tree_body_bytes(b));
		curl_easy_setopt(k.h, CURLOPT_READFUNCTION, body_read);
		curl_easy_setopt(k.h, CURLOPT_READDATA, &rd);
		curl_easy_setopt(k.h, CURLOPT_SEEKFUNCTION, body_seek);
		curl_easy_setopt(k.h, CURLOPT_SEEKDATA, &rd);
	}
	curl_easy_setopt(k.h, CURLOPT_UPLOAD_BUFFERSIZE, DMAR_BULK_BUFFER);
	if ((r = cl_call_perform(&k)) < 0)
		goto out;
	t.rounds++;
	if (!cl_ok_status(k.status)) {
		r = cl_call_http_error(&k, NULL);
		goto out;
	}
	if (!(ans = cl_resp_json(&k))) {
		r = dmar_error_set(err, -EBADMSG, "%s: tree commit: the answer is not JSON", c->label);
		goto out;
	}
	r = read_answer(b, ans, status, c->label, err);
out:
	cl_call_end(&k, &t);
	if (st) {
		memset(st, 0, sizeof(*st));
		st->sent_chunks = b->nchunks;
		st->chunk_bytes = b->chunks_len - (uint64_t)b->nchunks * DMAR_BATCH_REC_SIZE;
		st->wire_bytes = t.wire;
		st->round_trips = t.rounds;
		st->requests = t.requests;
		st->connects = t.connects;
		st->seconds = dmar_mono_s() - t0;
	}
	json_decref(ans);
	free(z);
	return r;
}
