/* SPDX-License-Identifier: MIT */
/*
 * dmar_client_pull (client.h): the chunks a node lacks, in batches over
 * parallel streams, each verified against its id as it arrives.
 */
#include "config.h"

#include "client_i.h"

struct pull {
	struct engine e;
	const struct dmar_chunk_sink *sink;
	uint8_t *got; /* per set index: delivered; each index is written by the one stream that asked for it */
	atomic_size_t next;
};

struct pull_stream {
	struct pull *p;
	ZSTD_DCtx *dz;
	uint8_t *scratch; /* DMAR_WIRE_SCRATCH: a decoded chunk */
	struct dmar_batch_parser *parser;
	size_t first, count; /* the set indices of the batch in flight */
	uint64_t chunks, bytes;
	uint64_t requests;
};

static int pull_record(void *ctx, const struct dmar_wire_chunk *c)
{
	struct pull_stream *s = ctx;
	struct pull *p = s->p;
	struct dmar_error verr = { 0 };
	char hex[17];
	/* In request order normally; any order is accepted as long as every
	 * record is one asked for in this batch and comes once. */
	int64_t idx = dmar_idset_find(&p->e.set, &c->id);
	if (idx < 0 || (size_t)idx < s->first || (size_t)idx >= s->first + s->count || p->got[idx]) {
		dmar_hex(c->id.b, 8, hex);
		struct dmar_error e = { 0 };
		dmar_error_set(&e, -EBADMSG, "%s: fetch answer has chunk %s..., not asked or twice", p->e.c->label,
			       hex);
		cl_engine_fail(&p->e, -EBADMSG, &e);
		return -EBADMSG;
	}
	const uint8_t *decoded;
	int r = dmar_wire_chunk_verify(c, s->dz, s->scratch, &decoded, &verr);
	if (r < 0) {
		struct dmar_error e = { 0 };
		dmar_error_set(&e, r, "%s: %s", p->e.c->label, verr.msg);
		cl_engine_fail(&p->e, r, &e);
		return r;
	}
	r = p->sink->put(p->sink->ctx, c, decoded);
	if (r < 0) {
		dmar_hex(c->id.b, 8, hex);
		struct dmar_error e = { 0 };
		dmar_error_set(&e, r, "pull: chunk %s...: %s", hex, strerror(-r));
		cl_engine_fail(&p->e, r, &e);
		return r;
	}
	p->got[idx] = 1;
	s->chunks++;
	s->bytes += c->len;
	return 0;
}

static int pull_sink(void *ctx, const uint8_t *data, size_t n, struct dmar_error *err)
{
	struct pull_stream *s = ctx;
	struct dmar_error perr = { 0 };
	int r = dmar_batch_parser_feed(s->parser, data, n, &perr);
	if (r < 0 && perr.code)
		dmar_error_set(err, r, "%s: %s", s->p->e.c->label, perr.msg);
	return r;
}

static int pull_batch(struct pull_stream *s, struct dmar_error *err)
{
	struct pull *p = s->p;
	struct call k;
	s->chunks = s->bytes = 0;
	int r = dmar_batch_parser_new(&s->parser, (uint32_t)s->count, pull_record, s);
	if (r < 0)
		return r;
	if ((r = cl_call_begin(&k, p->e.c, "POST", "/v1/chunks/fetch", NULL, err)) < 0)
		goto out;
	k.abort_flag = &p->e.failed;
	k.sink = pull_sink;
	k.sink_ctx = s;
	k.resp_max = 1u << 20; /* an error answer */
	if ((r = cl_call_body(&k, "application/octet-stream", p->e.set.ids + s->first, s->count * DMAR_HASH_SIZE)) < 0)
		goto out;
	curl_easy_setopt(k.h, CURLOPT_BUFFERSIZE, DMAR_BULK_BUFFER);
	if ((r = cl_call_perform(&k)) < 0)
		goto out;
	s->requests++;
	if (!cl_ok_status(k.status)) {
		r = cl_call_http_error(&k, NULL);
		goto out;
	}
	struct dmar_error perr = { 0 };
	if ((r = dmar_batch_parser_finish(s->parser, &perr)) < 0)
		dmar_error_set(err, r, "%s: %s", p->e.c->label, perr.msg);
out:
	cl_engine_account(&p->e, s->chunks, s->bytes, &k);
	cl_call_end(&k, NULL);
	dmar_batch_parser_free(s->parser);
	s->parser = NULL;
	return r;
}

static void *pull_stream_run(void *arg)
{
	struct pull_stream *s = arg;
	struct pull *p = s->p;
	while (!atomic_load(&p->e.failed)) {
		size_t first = atomic_fetch_add(&p->next, DMAR_FETCH_CHUNKS);
		if (first >= p->e.set.n)
			break;
		s->first = first;
		s->count = p->e.set.n - first < DMAR_FETCH_CHUNKS ? p->e.set.n - first : DMAR_FETCH_CHUNKS;
		struct dmar_error err = { 0 };
		int r = pull_batch(s, &err);
		if (r < 0 && r != -ECANCELED) {
			cl_engine_fail(&p->e, r, &err);
			break;
		}
	}
	return NULL;
}

int dmar_client_pull(struct dmar_client *c, const struct dmar_id *ids, size_t n, const struct dmar_chunk_sink *sink,
		     dmar_xfer_progress_fn progress, void *pctx, struct dmar_xfer_stats *st, struct dmar_error *err)
{
	struct pull p;
	memset(&p, 0, sizeof(p));
	cl_engine_init(&p.e, c, progress, pctx);
	p.sink = sink;
	unsigned ns = c->streams;
	struct pull_stream *s = NULL;
	int ret = dmar_idset_init(&p.e.set, n);
	if (ret < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		dmar_idset_add(&p.e.set, &ids[i], NULL);
	p.e.st.chunks = p.e.set.n;
	size_t batches = (p.e.set.n + DMAR_FETCH_CHUNKS - 1) / DMAR_FETCH_CHUNKS;
	if (batches < ns)
		ns = (unsigned)batches;
	if (!ns)
		goto out;
	p.got = calloc(p.e.set.n, 1);
	s = calloc(ns, sizeof(*s));
	if (!p.got || !s) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < ns; i++) {
		s[i].p = &p;
		s[i].dz = ZSTD_createDCtx();
		s[i].scratch = malloc(DMAR_WIRE_SCRATCH);
		if (!s[i].dz || !s[i].scratch) {
			ret = -ENOMEM;
			goto out;
		}
	}
	if ((ret = cl_run_streams(pull_stream_run, s, sizeof(*s), ns)) < 0)
		goto out;
	uint64_t most = 0;
	for (unsigned i = 0; i < ns; i++)
		if (s[i].requests > most)
			most = s[i].requests;
	p.e.st.round_trips = most;
	p.e.st.logical = p.e.st.chunk_bytes;
	if (atomic_load(&p.e.failed))
		ret = p.e.err.code ? p.e.err.code : -EIO;
out:
	if (s)
		for (unsigned i = 0; i < ns; i++) {
			ZSTD_freeDCtx(s[i].dz);
			free(s[i].scratch);
		}
	free(s);
	free(p.got);
	cl_engine_finish(&p.e, st, ret, err);
	return ret;
}
