/* SPDX-License-Identifier: MIT */
/*
 * dmar_client_push (client.h): have/want, the chunks the peer lacks in
 * batches over parallel streams, then the commit.
 */
#include "config.h"

#include "client_i.h"
#include "codec/clock.h"

struct push {
	struct engine e;
	const struct dmar_chunk_source *src;
	const uint32_t *todo; /* set indices to upload in this phase */
	size_t ntodo;
	atomic_size_t next;   /* the next todo entry a stream takes */
	bool second_try;      /* this phase re-sends 422'd chunks: no third chance */
	char upload[32];      /* "X-Dmar-Upload: ..." of this transfer (net/wire.h) */
	char *relay;          /* "X-Dmar-Relay: ..." or NULL */
	uint32_t *retry;      /* 422'd chunks for the next phase; protected by e.lock */
	size_t nretry;
	uint32_t *hint;       /* by set index: the longest skip + len seen, a lower bound of the chunk's length */
	struct dmar_zmeter zm; /* whether compressing pays on this link; protected by e.lock */
};

struct push_rec {
	uint8_t h[DMAR_BATCH_REC_SIZE];
	struct dmar_wire_chunk src;  /* as the source filled it, for put */
	const uint8_t *payload;      /* what goes on the wire */
	uint32_t stored;
	uint32_t idx;
	bool framed;                 /* goes as a zstd frame (per-chunk encoding) */
	enum dmar_zx zx;             /* the source's zstd (PLAIN), or the form the probe chose for a raw chunk */
};

struct push_stream {
	struct push *p;
	struct dmar_zchunk *z; /* per-chunk frames, level 1, and the probe */
	bool compress;    /* this batch: the link meter says compressing pays */
	double z_seconds; /* this batch's time in probes and compression */
	unsigned misses;  /* probes that failed in a row */
	unsigned skipped; /* chunks not probed since the last probe */
	uint8_t *scratch; /* compressed payloads of the batch */
	size_t scratch_cap, scratch_used;
	struct push_rec rec[DMAR_BATCH_CHUNKS];
	unsigned n;
	uint64_t raw_bytes, zable_bytes; /* the batch's decoded bytes, those of chunks for the plain form */
	/* whole-batch compression (Content-Encoding: zstd) */
	ZSTD_CCtx *bzc;   /* DMAR_BATCH_ZSTD_LEVEL, standard frame */
	ZSTD_DCtx *dz;    /* decodes the source's zstd chunks */
	uint8_t *zbody;   /* the compressed body */
	size_t zbody_cap, zbody_len;
	uint8_t *plain;   /* one decoded chunk (DMAR_WIRE_CHUNK_MAX) */
	uint8_t hdr[DMAR_BATCH_HDR_SIZE];
	/* read cursor: part 0 is the batch header, then 2 parts a record */
	size_t part, off;
	curl_off_t body;
	uint64_t requests;
};

/*
 * The compress policy's probe (codec/compress.h) for the stream's next
 * raw chunk, but a long run of
 * incompressible chunks -- random data, media, compressed archives: on a
 * 1 GiB random file the probes are 5-6 % of both nodes' CPU (perf,
 * bench-net (a)) -- is probed only one chunk in DMAR_PROBE_STRIDE after
 * DMAR_PROBE_RUN failures in a row, the others taken as incompressible,
 * until a probe passes.  After such a run, when the file turns
 * compressible, at most STRIDE - 1 chunks of the new kind go raw; a run
 * shorter than DMAR_PROBE_RUN (text every few chunks among random ones, a
 * tar of .gz and text members) is probed whole.  Chunks too small for the
 * sampled probe say nothing about their neighbours and leave the run as
 * it is.
 */
static enum dmar_zx stream_probe(struct push_stream *s, const struct dmar_wire_chunk *w)
{
	if (w->len < DMAR_COMPRESS_SAMPLED)
		return dmar_zchunk_choose(s->z, w->payload, w->len, w->tried);
	if (s->misses >= DMAR_PROBE_RUN && ++s->skipped < DMAR_PROBE_STRIDE)
		return DMAR_ZX_RAW;
	s->skipped = 0;
	enum dmar_zx zx = dmar_zchunk_choose(s->z, w->payload, w->len, w->tried);
	if (zx != DMAR_ZX_RAW) {
		s->misses = 0;
		return zx;
	}
	s->misses++;
	return DMAR_ZX_RAW;
}

static void batch_release(struct push_stream *s)
{
	for (unsigned i = 0; i < s->n; i++)
		if (s->p->src->put)
			s->p->src->put(s->p->src->ctx, &s->rec[i].src);
	s->n = 0;
	s->scratch_used = 0;
	s->raw_bytes = s->zable_bytes = 0;
	s->zbody_len = 0;
	s->z_seconds = 0;
}

/* Take chunks from the shared cursor until the batch is full.  Returns the
 * number taken (0: nothing left) or a negative errno. */
static int batch_fill(struct push_stream *s, struct dmar_error *err)
{
	struct push *p = s->p;
	size_t bytes = 0;
	char hex[17];
	pthread_mutex_lock(&p->e.lock);
	s->compress = dmar_zmeter_compress(&p->zm);
	pthread_mutex_unlock(&p->e.lock);
	double t0;
	while (s->n < DMAR_BATCH_CHUNKS && bytes < DMAR_BATCH_BYTES) {
		size_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->ntodo)
			break;
		uint32_t idx = p->todo[i];
		const struct dmar_id *id = &p->e.set.ids[idx];
		struct push_rec *rec = &s->rec[s->n];
		memset(&rec->src, 0, sizeof(rec->src));
		int r = p->src->get(p->src->ctx, id, p->hint[idx], &rec->src);
		if (r < 0) {
			dmar_hex(id->b, 8, hex);
			return dmar_error_set(err, r, "push: chunk %s...: %s", hex, strerror(-r));
		}
		s->n++; /* from here on batch_release puts it back */
		const struct dmar_wire_chunk *w = &rec->src;
		if (memcmp(w->id.b, id->b, DMAR_HASH_SIZE) != 0 || w->len == 0 || w->len > DMAR_WIRE_CHUNK_MAX ||
		    (w->enc == DMAR_WIRE_RAW && w->stored != w->len) ||
		    (w->enc == DMAR_WIRE_ZSTD && (w->stored == 0 || w->stored > ZSTD_COMPRESSBOUND(w->len))) ||
		    (w->enc != DMAR_WIRE_RAW && w->enc != DMAR_WIRE_ZSTD)) {
			dmar_hex(id->b, 8, hex);
			return dmar_error_set(err, -EINVAL, "push: chunk %s...: the source gave a malformed chunk",
					      hex);
		}
		rec->idx = idx;
		/* Of a chunk its source already found not worth the plain
		 * form only the grouped ones are probed (stream_probe says
		 * what the probes cost); none where compressing does not pay
		 * on this link.  The source's own frames go as they are. */
		if (w->enc == DMAR_WIRE_ZSTD || !s->compress) {
			rec->zx = w->enc == DMAR_WIRE_ZSTD ? DMAR_ZX_PLAIN : DMAR_ZX_RAW;
		} else {
			t0 = dmar_mono_s();
			rec->zx = stream_probe(s, w);
			s->z_seconds += (dmar_mono_s() - t0);
		}
		s->raw_bytes += w->len;
		if (rec->zx == DMAR_ZX_PLAIN)
			s->zable_bytes += w->len;
		/* Counted decoded: a compressible batch goes compressed as a whole. */
		bytes += DMAR_BATCH_REC_SIZE + w->len;
	}
	return (int)s->n;
}

/* The per-chunk encoding (a batch of mostly incompressible or grouped
 * chunks, or one whole-batch compression did not shrink): raw chunks the
 * probe passed as level-1 frames in the form it chose. */
static void batch_per_chunk(struct push_stream *s)
{
	s->scratch_used = 0;
	for (unsigned i = 0; i < s->n; i++) {
		struct push_rec *rec = &s->rec[i];
		const struct dmar_wire_chunk *w = &rec->src;
		struct dmar_wire_chunk out = *w;
		if (w->enc == DMAR_WIRE_RAW && rec->zx != DMAR_ZX_RAW) {
			size_t z = dmar_zchunk_compress_as(s->z, s->scratch + s->scratch_used,
							   s->scratch_cap - s->scratch_used, w->payload, w->len, rec->zx);
			if (z) {
				out.enc = dmar_wire_zx_enc(rec->zx);
				out.stored = (uint32_t)z;
				out.payload = s->scratch + s->scratch_used;
				s->scratch_used += z;
			}
		}
		dmar_batch_write_record(rec->h, &out);
		rec->payload = out.payload;
		rec->stored = out.stored;
		rec->framed = out.enc != DMAR_WIRE_RAW;
	}
}

static int zfeed(struct push_stream *s, const void *p, size_t n, ZSTD_EndDirective end)
{
	ZSTD_inBuffer in = { p, n, 0 };
	for (;;) {
		ZSTD_outBuffer out = { s->zbody, s->zbody_cap, s->zbody_len };
		size_t r = ZSTD_compressStream2(s->bzc, &out, &in, end);
		s->zbody_len = out.pos;
		if (ZSTD_isError(r))
			return -EIO;
		if (end == ZSTD_e_end ? r == 0 : in.pos == in.size)
			return 0;
		if (out.pos == out.size)
			return -ENOSPC; /* bigger than it was worth */
	}
}

/*
 * The whole batch -- header, records with raw payloads (the source's zstd
 * chunks decoded) -- as one standard zstd frame, DMAR_BATCH_ZSTD_LEVEL, in s->zbody.
 * 0, or a negative errno when it failed or would not pay (compress.h's
 * rule): the batch then goes per chunk.
 */
static int batch_compress(struct push_stream *s)
{
	uint64_t plain = DMAR_BATCH_HDR_SIZE + (uint64_t)s->n * DMAR_BATCH_REC_SIZE + s->raw_bytes;
	size_t want = (size_t)(plain - plain / 32);
	if (want > s->zbody_cap) {
		free(s->zbody);
		s->zbody_cap = 0;
		if (!(s->zbody = malloc(want)))
			return -ENOMEM;
		s->zbody_cap = want;
	}
	size_t cap = s->zbody_cap;
	s->zbody_cap = want; /* no room past the 3 % mark: zfeed gives up there */
	s->zbody_len = 0;
	ZSTD_CCtx_reset(s->bzc, ZSTD_reset_session_only);
	uint8_t hdr[DMAR_BATCH_HDR_SIZE];
	dmar_batch_write_header(hdr, s->n);
	int r = zfeed(s, hdr, sizeof(hdr), ZSTD_e_continue);
	for (unsigned i = 0; i < s->n && r == 0; i++) {
		const struct dmar_wire_chunk *w = &s->rec[i].src;
		struct dmar_wire_chunk out = *w;
		if (w->enc == DMAR_WIRE_ZSTD) {
			size_t d = ZSTD_decompressDCtx(s->dz, s->plain, DMAR_WIRE_CHUNK_MAX, w->payload, w->stored);
			if (ZSTD_isError(d) || d != w->len) {
				r = -EILSEQ;
				break;
			}
			out.payload = s->plain;
		}
		out.enc = DMAR_WIRE_RAW;
		out.stored = out.len;
		uint8_t rh[DMAR_BATCH_REC_SIZE];
		dmar_batch_write_record(rh, &out);
		if ((r = zfeed(s, rh, sizeof(rh), ZSTD_e_continue)) == 0)
			r = zfeed(s, out.payload, out.len, ZSTD_e_continue);
	}
	if (r == 0)
		r = zfeed(s, NULL, 0, ZSTD_e_end);
	s->zbody_cap = cap;
	return r;
}

/* The bytes of part k of the batch body. */
static const uint8_t *batch_part(const struct push_stream *s, size_t k, size_t *len)
{
	if (k == 0) {
		*len = DMAR_BATCH_HDR_SIZE;
		return s->hdr;
	}
	const struct push_rec *rec = &s->rec[(k - 1) / 2];
	if ((k - 1) % 2 == 0) {
		*len = DMAR_BATCH_REC_SIZE;
		return rec->h;
	}
	*len = rec->stored;
	return rec->payload;
}

/* curl's read callback: the body is generated from the batch's parts as
 * curl's upload buffer drains. */
static size_t batch_read(char *buf, size_t size, size_t nitems, void *ud)
{
	struct push_stream *s = ud;
	if (atomic_load(&s->p->e.failed))
		return CURL_READFUNC_ABORT;
	size_t room = size * nitems, done = 0;
	size_t parts = 1 + 2 * (size_t)s->n;
	while (room && s->part < parts) {
		size_t len;
		const uint8_t *b = batch_part(s, s->part, &len);
		size_t take = len - s->off < room ? len - s->off : room;
		memcpy(buf + done, b + s->off, take);
		done += take;
		room -= take;
		s->off += take;
		if (s->off == len) {
			s->part++;
			s->off = 0;
		}
	}
	return done;
}

/* curl rewinds when it re-sends a request on a fresh connection (the
 * reused one turned out closed by the peer). */
static int batch_seek(void *ud, curl_off_t offset, int origin)
{
	struct push_stream *s = ud;
	if (origin != SEEK_SET || offset < 0 || offset > s->body)
		return CURL_SEEKFUNC_FAIL;
	s->part = 0;
	s->off = 0;
	size_t left = (size_t)offset, parts = 1 + 2 * (size_t)s->n;
	while (s->part < parts) {
		size_t len;
		batch_part(s, s->part, &len);
		if (left < len) {
			s->off = left;
			break;
		}
		left -= len;
		s->part++;
	}
	return CURL_SEEKFUNC_OK;
}

/* 422: the peer names the chunks that failed verification and stored the
 * others.  Queue each for one re-send (from the source again: a transient
 * fault in memory or on the way), or fail if this already was the re-send. */
static int batch_rejected(struct push_stream *s, struct call *k, uint64_t *ok_chunks, uint64_t *ok_bytes,
			  struct dmar_error *err)
{
	struct push *p = s->p;
	json_t *j = cl_resp_json(k);
	json_t *bad = j ? json_object_get(j, "bad") : NULL;
	const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
	int r = 0;
	if (!json_is_array(bad) || json_array_size(bad) == 0 || json_array_size(bad) > s->n) {
		r = dmar_error_set(err, -EILSEQ, "%s: chunks rejected: %s", p->e.c->label,
				   msg ? msg : "(no list of bad chunks)");
		goto out;
	}
	bool rejected[DMAR_BATCH_CHUNKS] = { false };
	size_t i;
	json_t *v;
	json_array_foreach(bad, i, v) {
		struct dmar_id id;
		const char *hex = json_string_value(v);
		unsigned b = 0;
		if (hex && dmar_id_parse(hex, &id) == 0)
			for (; b < s->n; b++)
				if (memcmp(p->e.set.ids[s->rec[b].idx].b, id.b, DMAR_HASH_SIZE) == 0)
					break;
		if (!hex || b == s->n) {
			r = dmar_error_set(err, -EBADMSG, "%s: 422 lists a chunk that was not in the batch",
					   p->e.c->label);
			goto out;
		}
		if (p->second_try) {
			char h[17];
			dmar_hex(id.b, 8, h);
			r = dmar_error_set(err, -EILSEQ, "%s: chunk %s... rejected twice: %s", p->e.c->label, h,
					   msg ? msg : "does not match its id");
			goto out;
		}
		rejected[b] = true;
	}
	pthread_mutex_lock(&p->e.lock);
	for (unsigned b = 0; b < s->n; b++) {
		if (rejected[b])
			p->retry[p->nretry++] = s->rec[b].idx;
		else {
			(*ok_chunks)++;
			*ok_bytes += s->rec[b].src.len;
		}
	}
	pthread_mutex_unlock(&p->e.lock);
out:
	json_decref(j);
	return r;
}

static int batch_send(struct push_stream *s, struct dmar_error *err)
{
	struct push *p = s->p;
	struct call k;
	uint64_t ok_chunks = 0, ok_bytes = 0;
	int r = cl_call_begin(&k, p->e.c, "POST", "/v1/chunks", NULL, err);
	if (r < 0)
		goto out;
	k.abort_flag = &p->e.failed;
	/* Mostly compressible as it is: the whole body as one zstd stream,
	 * which sees across chunks (per-chunk level 1 cannot); else per
	 * chunk, the incompressible ones costing no more than the probe and
	 * the grouped ones in their own form (the whole stream would see
	 * them ungrouped). */
	double t0;
	t0 = dmar_mono_s();
	bool whole = s->compress && s->zable_bytes && s->zable_bytes * 2 >= s->raw_bytes && batch_compress(s) == 0;
	if (!whole) {
		batch_per_chunk(s);
		dmar_batch_write_header(s->hdr, s->n);
		s->body = DMAR_BATCH_HDR_SIZE;
		for (unsigned i = 0; i < s->n; i++)
			s->body += DMAR_BATCH_REC_SIZE + s->rec[i].stored;
		s->part = s->off = 0;
	}
	uint64_t wire = whole ? s->zbody_len : (uint64_t)s->body;
	s->z_seconds += (dmar_mono_s() - t0);
	if ((r = cl_call_header(&k, "Content-Type: application/x-dmar-chunks")) < 0 ||
	    (r = cl_call_header(&k, p->upload)) < 0 || (p->relay && (r = cl_call_header(&k, p->relay)) < 0))
		goto out;
	if (whole) {
		if ((r = cl_call_header(&k, "Content-Encoding: zstd")) < 0)
			goto out;
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDS, s->zbody);
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->zbody_len);
	} else {
		curl_easy_setopt(k.h, CURLOPT_POST, 1L);
		curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, s->body);
		curl_easy_setopt(k.h, CURLOPT_READFUNCTION, batch_read);
		curl_easy_setopt(k.h, CURLOPT_READDATA, s);
		curl_easy_setopt(k.h, CURLOPT_SEEKFUNCTION, batch_seek);
		curl_easy_setopt(k.h, CURLOPT_SEEKDATA, s);
	}
	curl_easy_setopt(k.h, CURLOPT_UPLOAD_BUFFERSIZE, DMAR_BULK_BUFFER);
	t0 = dmar_mono_s();
	r = cl_call_perform(&k);
	double send_seconds = (dmar_mono_s() - t0);
	if (r == 0) {
		pthread_mutex_lock(&p->e.lock);
		dmar_zmeter_sent(&p->zm, wire, send_seconds);
		if (s->compress)
			dmar_zmeter_compressed(&p->zm, s->raw_bytes, wire, s->z_seconds);
		pthread_mutex_unlock(&p->e.lock);
	}
	if (r == -ECANCELED)
		goto out; /* another stream failed; its error is the one to report */
	if (r < 0)
		goto out;
	s->requests++;
	if (cl_ok_status(k.status)) {
		uint64_t zbytes = 0;
		for (unsigned i = 0; i < s->n; i++) {
			ok_bytes += s->rec[i].src.len;
			zbytes += whole || s->rec[i].framed ? s->rec[i].src.len : 0;
		}
		ok_chunks = s->n;
		pthread_mutex_lock(&p->e.lock);
		p->e.st.zchunk_bytes += zbytes;
		pthread_mutex_unlock(&p->e.lock);
	} else if (k.status == 422) {
		r = batch_rejected(s, &k, &ok_chunks, &ok_bytes, err);
	} else {
		r = cl_call_http_error(&k, NULL);
	}
out:
	cl_engine_account(&p->e, ok_chunks, ok_bytes, &k);
	cl_call_end(&k, NULL);
	return r;
}

static void *push_stream_run(void *arg)
{
	struct push_stream *s = arg;
	struct push *p = s->p;
	while (!atomic_load(&p->e.failed)) {
		struct dmar_error err = { 0 };
		int r = batch_fill(s, &err);
		if (r == 0)
			break; /* nothing left to take */
		if (r > 0)
			r = batch_send(s, &err);
		batch_release(s);
		if (r < 0) {
			if (r != -ECANCELED)
				cl_engine_fail(&p->e, r, &err);
			break;
		}
	}
	return NULL;
}

/* Upload set indices todo[0..n) over the streams; chunks the peer rejects
 * go once more in a second phase.  Adds its rounds to *rounds. */
static int push_upload(struct push *p, const uint32_t *todo, size_t n, uint64_t *rounds)
{
	unsigned ns = p->e.c->streams;
	struct push_stream *s = calloc(ns, sizeof(*s));
	uint32_t *retry = malloc((n ? n : 1) * sizeof(*retry));
	int r = 0;
	if (!s || !retry) {
		r = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < ns; i++) {
		s[i].p = p;
		s[i].scratch_cap = DMAR_BATCH_BYTES + ZSTD_COMPRESSBOUND(DMAR_WIRE_CHUNK_MAX);
		s[i].scratch = malloc(s[i].scratch_cap);
		s[i].bzc = ZSTD_createCCtx();
		s[i].dz = ZSTD_createDCtx();
		s[i].plain = malloc(DMAR_WIRE_CHUNK_MAX);
		if (!s[i].scratch || dmar_zchunk_new(&s[i].z, 1, NULL) < 0 || !s[i].bzc || !s[i].dz || !s[i].plain) {
			r = -ENOMEM;
			goto out;
		}
		ZSTD_CCtx_setParameter(s[i].bzc, ZSTD_c_compressionLevel, DMAR_BATCH_ZSTD_LEVEL);
	}
	p->retry = retry;
	for (int phase = 0; phase < 2; phase++) {
		p->todo = todo;
		p->ntodo = n;
		p->nretry = 0;
		p->second_try = phase == 1;
		atomic_store(&p->next, 0);
		for (unsigned i = 0; i < ns; i++)
			s[i].requests = 0;
		/* No more streams than batches could keep busy. */
		size_t want = (n + DMAR_BATCH_CHUNKS - 1) / DMAR_BATCH_CHUNKS;
		unsigned nt = want < ns ? (unsigned)want : ns;
		pthread_mutex_lock(&p->e.lock);
		p->zm.streams = nt;
		pthread_mutex_unlock(&p->e.lock);
		if ((r = cl_run_streams(push_stream_run, s, sizeof(*s), nt)) < 0)
			goto out;
		uint64_t most = 0;
		for (unsigned i = 0; i < nt; i++)
			if (s[i].requests > most)
				most = s[i].requests;
		*rounds += most; /* the streams ran side by side: the longest one counts */
		if (atomic_load(&p->e.failed)) {
			r = p->e.err.code ? p->e.err.code : -EIO;
			goto out;
		}
		/* Phase 1 reads the rejected list as its todo; a chunk rejected
		 * again there fails the push instead of queueing. */
		if (phase == 1 || !p->nretry)
			break;
		todo = retry;
		n = p->nretry;
		p->retry = NULL;
	}
out:
	if (s)
		for (unsigned i = 0; i < ns; i++) {
			free(s[i].scratch);
			dmar_zchunk_free(s[i].z);
			ZSTD_freeCCtx(s[i].bzc);
			ZSTD_freeDCtx(s[i].dz);
			free(s[i].zbody);
			free(s[i].plain);
		}
	free(s);
	free(retry);
	p->retry = NULL;
	return r;
}

/* The 409 answer's missing_bits (bit i: recipe entry i's chunk is
 * missing) as set indices in *todo, each once (seen: per set index). */
static int missing_from_bits(struct push *p, const struct dmar_recipe *r, const char *hex, uint8_t *seen,
			     uint32_t *todo, size_t *n, struct dmar_error *err)
{
	size_t nb = (r->n + 7) / 8;
	if (strlen(hex) != 2 * nb)
		return dmar_error_set(err, -EBADMSG, "%s: commit answer's missing_bits has %zu hex digits for %zu entries",
				      p->e.c->label, strlen(hex), r->n);
	memset(seen, 0, p->e.set.n ? p->e.set.n : 1);
	*n = 0;
	for (size_t j = 0; j < nb; j++) {
		int hi = dmar_hexval(hex[2 * j]), lo = dmar_hexval(hex[2 * j + 1]);
		if (hi < 0 || lo < 0)
			return dmar_error_set(err, -EBADMSG, "%s: commit answer's missing_bits is not hex", p->e.c->label);
		unsigned byte = (unsigned)(hi << 4 | lo);
		for (unsigned b = 0; b < 8 && byte; b++) {
			size_t i = j * 8 + b;
			if (!(byte & (1u << b)))
				continue;
			if (i >= r->n || r->e[i].kind != DMAR_RECIPE_CHUNK)
				return dmar_error_set(err, -EBADMSG,
						      "%s: commit answer's missing_bits marks entry %zu, not a chunk",
						      p->e.c->label, i);
			int64_t idx = dmar_idset_find(&p->e.set, &r->e[i].id);
			if (idx >= 0 && !seen[idx]) {
				seen[idx] = 1;
				todo[(*n)++] = (uint32_t)idx;
			}
		}
	}
	return 0;
}

/* The 409 answer's missing ids as set indices in *todo.  *requery when the
 * list was truncated (or is empty): then every chunk is queried again. */
static int missing_from_answer(struct push *p, json_t *ans, uint32_t *todo, size_t *n, bool *requery,
			       struct dmar_error *err)
{
	json_t *list = ans ? json_object_get(ans, "missing") : NULL;
	json_int_t count = ans ? json_integer_value(json_object_get(ans, "missing_count")) : 0;
	*n = 0;
	*requery = !json_is_array(list) || json_array_size(list) == 0 || count > (json_int_t)json_array_size(list);
	if (*requery)
		return 0;
	size_t i;
	json_t *v;
	json_array_foreach(list, i, v) {
		struct dmar_id id;
		const char *hex = json_string_value(v);
		int64_t idx = hex && dmar_id_parse(hex, &id) == 0 ? dmar_idset_find(&p->e.set, &id) : -1;
		if (idx < 0)
			return dmar_error_set(err, -EBADMSG, "%s: commit answer lists a chunk the recipe does not have",
					      p->e.c->label);
		if (*n < p->e.set.n)
			todo[(*n)++] = (uint32_t)idx;
	}
	return 0;
}

static int query_todo(struct push *p, uint8_t *missing, uint32_t *todo, size_t *n, struct tally *t,
		      struct dmar_error *err)
{
	int r = cl_query_all(p->e.c, p->e.set.ids, p->e.set.n, missing, t, err);
	if (r < 0)
		return r;
	*n = 0;
	for (size_t i = 0; i < p->e.set.n; i++)
		if (missing[i])
			todo[(*n)++] = (uint32_t)i;
	return 0;
}

/* The chunks to send before the first commit, as set indices in todo:
 * those the peer is not known to hold, when it is known to hold all but a
 * few (predicted); else none, and the commit's refusal says. */
static size_t predict_todo(struct push *p, uint32_t *todo)
{
	const struct dmar_idcache *held = p->e.c->held;
	size_t n = p->e.set.n, lack = 0;
	for (size_t i = 0; i < n; i++)
		if (!dmar_idcache_has(held, &p->e.set.ids[i]))
			todo[lack++] = (uint32_t)i;
	if (lack == n || lack * CL_PREDICT_SHARE > n)
		return 0;
	p->e.st.predicted_chunks = lack;
	return lack;
}

/* The transfer's X-Dmar-Upload and X-Dmar-Relay header lines. */
static int push_headers(struct push *p, const struct dmar_push_opts *o, struct dmar_error *err)
{
	uint64_t upload = o ? o->upload : 0;
	int r;
	if (!upload && (r = dmar_wire_upload_new(&upload)) < 0)
		return dmar_error_errno(err, r, "getrandom");
	snprintf(p->upload, sizeof(p->upload), "X-Dmar-Upload: %016" PRIx64, upload);
	if (o && o->relay && o->relay[0]) {
		if (!(p->relay = malloc(sizeof("X-Dmar-Relay: ") + strlen(o->relay))))
			return -ENOMEM;
		sprintf(p->relay, "X-Dmar-Relay: %s", o->relay);
	}
	return 0;
}

/* The end of a push or send: the figures (the engine counted the uploads,
 * t the rest), the first stream's error over the caller's. */
static int push_finish(struct push *p, const struct tally *t, int ret, struct dmar_xfer_stats *st,
		       struct dmar_error *err)
{
	p->e.st.wire_bytes += t->wire;
	p->e.st.requests += t->requests;
	p->e.st.connects += t->connects;
	p->e.st.round_trips = t->rounds;
	if (ret < 0 && p->e.err.code)
		ret = p->e.err.code;
	cl_engine_finish(&p->e, st, ret, err);
	free(p->hint);
	free(p->relay);
	return ret;
}

/*
 * A new version of the file the peer holds at path as a recipe delta
 * against o->base: the chunks it adds that the peer is not known to hold
 * go first, then the commit of the delta.  0 when the peer made the
 * file; -EAGAIN when it could not from the delta (no such base there,
 * chunks missing, or no deltas), for the recipe's way to take over;
 * else the push's error.
 */
static int push_delta(struct push *p, const char *path, const struct dmar_recipe *r, const struct dmar_push_opts *o,
		      struct commit_req *cq, struct tally *t, json_t **answer, struct dmar_error *err)
{
	struct dmar_client *c = p->e.c;
	uint8_t *db = NULL;
	size_t dlen = 0;
	int ret = dmar_recipe_delta_make(o->base, o->base_cid, r, r->n / CL_PREDICT_SHARE, &db, &dlen);
	if (ret < 0)
		return ret == -E2BIG ? -EAGAIN : ret;
	struct dmar_recipe_delta d;
	uint32_t *todo = NULL;
	if ((ret = dmar_recipe_delta_parse(db, dlen, &d, NULL)) < 0) {
		free(db);
		return ret;
	}
	if ((ret = dmar_idset_init(&p->e.set, d.ne ? d.ne : 1)) < 0 ||
	    !(p->hint = calloc(d.ne ? d.ne : 1, sizeof(*p->hint))) || !(todo = malloc((d.ne ? d.ne : 1) * sizeof(*todo)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < d.ne; i++) {
		const struct dmar_recipe_entry *e = &d.e[i];
		bool added;
		if (e->kind != DMAR_RECIPE_CHUNK || dmar_idcache_has(c->held, &e->id))
			continue;
		int64_t k = dmar_idset_add(&p->e.set, &e->id, &added);
		uint32_t end = (uint32_t)(e->skip + e->len);
		if (k >= 0 && (added || end > p->hint[k]))
			p->hint[k] = end;
	}
	for (size_t i = 0; i < r->n; i++)
		p->e.st.chunks += r->e[i].kind == DMAR_RECIPE_CHUNK; /* no set of them all */
	size_t n = p->e.set.n;
	for (size_t i = 0; i < n; i++) {
		todo[i] = (uint32_t)i;
		p->e.st.todo_bytes += p->hint[i];
	}
	p->e.st.predicted_chunks = n;
	if (n && (ret = push_upload(p, todo, n, &t->rounds)) < 0)
		goto out;
	json_t *ans = NULL;
	struct dmar_error cerr = { 0 };
	long status = 0;
	cq->ctype = CT_RECIPE_DELTA;
	cq->recipe = db;
	cq->len = dlen;
	cq->content = NULL;
	ret = cl_commit_one(c, path, cq, &ans, t, &status, &cerr);
	/* Refused, the ones sent are staged there. */
	if (ret == -ENODATA)
		dmar_idcache_add(c->held, p->e.set.ids, p->e.set.n);
	/* Made: the base's chunks the edits took out likely went with it
	 * (unless another file there holds them), and the ones they put in
	 * (the sent ones among them) are held.  Else a next version that
	 * brings an old region back would be predicted held and refused. */
	for (uint32_t j = 0; ret == 0 && j < d.m; j++)
		for (uint32_t k = d.edits[j].at; k < d.edits[j].at + d.edits[j].del; k++)
			if (o->base->e[k].kind == DMAR_RECIPE_CHUNK)
				dmar_idcache_drop(c->held, &o->base->e[k].id);
	for (size_t i = 0; ret == 0 && i < d.ne; i++)
		if (d.e[i].kind == DMAR_RECIPE_CHUNK)
			dmar_idcache_add(c->held, &d.e[i].id, 1);
	if (ret == 0 && answer)
		*answer = ans;
	else
		json_decref(ans);
	if (status == 415) {
		atomic_store(&c->no_delta, true);
		ret = -EAGAIN;
	} else if (ret == -ENODATA) {
		ret = -EAGAIN;
	} else if (ret < 0) {
		dmar_error_set(err, ret, "%s", cerr.msg);
	}
out:
	free(todo);
	free(db);
	dmar_recipe_delta_free(&d);
	if (ret == -EAGAIN) { /* the recipe's way starts afresh */
		dmar_idset_free(&p->e.set);
		free(p->hint);
		p->hint = NULL;
		p->e.st.chunks = p->e.st.predicted_chunks = p->e.st.todo_bytes = 0;
	}
	return ret;
}

int dmar_client_push(struct dmar_client *c, const char *path, const struct dmar_recipe *r,
		     const struct dmar_id *cid, const struct dmar_chunk_source *src, const struct dmar_push_opts *o,
		     dmar_xfer_progress_fn progress, void *pctx, struct dmar_xfer_stats *st, struct dmar_error *err)
{
	unsigned flags = o ? o->flags : 0;
	bool noreplace = flags & DMAR_PUSH_NOREPLACE;
	json_t **answer = o ? o->answer : NULL;
	struct push p;
	memset(&p, 0, sizeof(p));
	cl_engine_init(&p.e, c, progress, pctx);
	p.src = src;
	struct tally t = { 0 };
	uint8_t *missing = NULL, *rb = NULL, *sb = NULL;
	uint32_t *todo = NULL;
	size_t rlen = 0, slen = 0, ntodo = 0;
	int ret = dmar_wire_path_check(path, err);
	if (ret < 0 || (ret = push_headers(&p, o, err)) < 0)
		goto out;
	struct commit_req cq = { .noreplace = noreplace, .upload = p.upload, .relay = p.relay };
	p.e.st.logical = r->size;
	/* The recipe id from the content id: a file whose content id is
	 * known (a copy of one shipped before) is not hashed again. */
	struct dmar_id rid, content;
	if (cid) {
		content = *cid;
		dmar_recipe_id_of(r, r->n, &content, &rid);
	} else if ((ret = dmar_recipe_ids(r, &rid, &content)) < 0) {
		goto out;
	}
	/*
	 * Commit first: a file the peer holds (chunks shared with any of its
	 * files) costs one round trip, and a refusal says which chunks to
	 * send as a bitmap over the recipe (about what a have/want query
	 * costs).  The commit names each chunk by 8 bytes of its id (a short
	 * recipe: about 12 bytes an entry, where the recipe spends 48), so a
	 * new version of a file the peer has costs a quarter of its recipe,
	 * twice; the peer completes the ids and checks the result against
	 * the recipe id.  A peer that cannot (415), or whose chunks leave a
	 * prefix ambiguous, gets the full recipe.
	 */
	bool use_short = !atomic_load(&c->no_short);
	/* The content id goes with the first commit only: a refusal says
	 * the peer does not hold the content. */
	bool ask_content = true;
	if ((flags & DMAR_PUSH_CONTENT_FIRST) && use_short && r->n) {
		/* The peer likely holds the content: ask with the 80-byte
		 * header alone, not the recipe (393 KB for 1 GiB). */
		uint8_t head[DMAR_RECIPE_SHORT_HDR_SIZE];
		dmar_recipe_short_head_write(r, &rid, DMAR_RECIPE_SHORT_IDLEN, head);
		json_t *ans = NULL;
		struct dmar_error cerr = { 0 };
		long status = 0;
		cq.ctype = CT_RECIPE_SHORT;
		cq.recipe = head;
		cq.len = sizeof(head);
		cq.content = &content;
		ret = cl_commit_one(c, path, &cq, &ans, &t, &status, &cerr);
		const char *resend = json_string_value(json_object_get(ans, "resend"));
		bool more = (ret == -ENODATA && resend && !strcmp(resend, "recipe")) || status == 415;
		if (status == 415) {
			atomic_store(&c->no_short, true);
			use_short = false;
		}
		if (ret == 0 && answer)
			*answer = ans;
		else
			json_decref(ans);
		if (ret == 0) {
			/* No set was built: every chunk entry counts. */
			for (size_t i = 0; i < r->n; i++)
				p.e.st.chunks += r->e[i].kind == DMAR_RECIPE_CHUNK;
			goto out;
		}
		if (!more) {
			dmar_error_set(err, ret, "%s", cerr.msg);
			goto out;
		}
		ask_content = false;
	}
	if (o && o->base && o->base_cid && !p.relay && r->n && !atomic_load(&c->no_delta) &&
	    (ret = push_delta(&p, path, r, o, &cq, &t, answer, err)) != -EAGAIN)
		goto out;
	/*
	 * The distinct chunks, what a refusal's bitmap and the uploads index,
	 * only now: for a 1 GiB file they are 1.5 MiB of tables, which a
	 * content-only commit does not need, and fresh memory costs more to
	 * fault in (about 4 ms here) than that whole commit.
	 */
	if ((ret = dmar_idset_init(&p.e.set, r->n)) < 0 || !(p.hint = malloc((r->n ? r->n : 1) * sizeof(*p.hint)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < r->n; i++) {
		if (r->e[i].kind != DMAR_RECIPE_CHUNK)
			continue;
		bool added;
		int64_t k = dmar_idset_add(&p.e.set, &r->e[i].id, &added);
		uint32_t end = (uint32_t)(r->e[i].skip + r->e[i].len);
		if (added || end > p.hint[k])
			p.hint[k] = end;
	}
	p.e.st.chunks = p.e.set.n;
	missing = malloc(p.e.set.n ? p.e.set.n : 1);
	todo = malloc((p.e.set.n ? p.e.set.n : 1) * sizeof(*todo));
	if (!missing || !todo || !(sb = malloc(dmar_recipe_short_max_size(r->n)))) {
		ret = -ENOMEM;
		goto out;
	}
	slen = dmar_recipe_short_write(r, &rid, DMAR_RECIPE_SHORT_IDLEN, sb);
	/* Chained nodes each lack their own chunks: only the peer's
	 * refusal, which the relay completes, says which. */
	if (!p.relay)
		ntodo = predict_todo(&p, todo);
	/* Predicted and not refused: the cache had every chunk but the ones
	 * sent, and only those need adding at the end. */
	size_t npredicted = ntodo;
	for (int attempt = 0;;) {
		pthread_mutex_lock(&p.e.lock);
		for (size_t i = 0; i < ntodo; i++)
			p.e.st.todo_bytes += p.hint[todo[i]];
		pthread_mutex_unlock(&p.e.lock);
		if (ntodo && (ret = push_upload(&p, todo, ntodo, &t.rounds)) < 0)
			goto out;
		ntodo = 0;
		json_t *ans = NULL;
		struct dmar_error cerr = { 0 };
		long status = 0;
		if (!use_short && !rb && !(rb = cl_recipe_bytes(r, &rlen, NULL))) {
			ret = -ENOMEM;
			goto out;
		}
		cq.ctype = use_short ? CT_RECIPE_SHORT : CT_RECIPE;
		cq.recipe = use_short ? sb : rb;
		cq.len = use_short ? slen : rlen;
		cq.content = ask_content ? &content : NULL;
		ret = cl_commit_one(c, path, &cq, &ans, &t, &status, &cerr);
		ask_content = false;
		if (ret == 0) {
			if (npredicted)
				for (size_t i = 0; i < npredicted; i++)
					dmar_idcache_add(c->held, &p.e.set.ids[todo[i]], 1);
			else
				dmar_idcache_add(c->held, p.e.set.ids, p.e.set.n);
			if (answer)
				*answer = ans;
			else
				json_decref(ans);
			break;
		}
		if (use_short && status == 415) {
			/* An older peer: full recipes from now on, and this
			 * refusal does not count as an attempt. */
			atomic_store(&c->no_short, true);
			use_short = false;
			json_decref(ans);
			continue;
		}
		if (ret != -ENODATA || attempt == DMAR_COMMIT_RETRIES + 1) {
			json_decref(ans);
			dmar_error_set(err, ret, "%s", cerr.msg);
			goto out;
		}
		attempt++;
		npredicted = 0; /* todo is the refusal's list from here on */
		if (use_short && json_string_value(json_object_get(ans, "resend"))) {
			use_short = false;
			json_decref(ans);
			continue;
		}
		bool requery = false;
		const char *bits = json_string_value(json_object_get(ans, "missing_bits"));
		ret = bits ? missing_from_bits(&p, r, bits, missing, todo, &ntodo, err)
			   : missing_from_answer(&p, ans, todo, &ntodo, &requery, err);
		json_decref(ans);
		if (ret < 0)
			goto out;
		if (requery && (ret = query_todo(&p, missing, todo, &ntodo, &t, err)) < 0)
			goto out;
		for (size_t i = 0; i < ntodo; i++)
			dmar_idcache_drop(c->held, &p.e.set.ids[todo[i]]);
	}
out:
	ret = push_finish(&p, &t, ret, st, err);
	free(missing);
	free(todo);
	free(rb);
	free(sb);
	return ret;
}

int dmar_client_send(struct dmar_client *c, const struct dmar_id *ids, const uint32_t *lens, size_t n,
		     const struct dmar_chunk_source *src, const struct dmar_push_opts *o, struct dmar_xfer_stats *st,
		     struct dmar_error *err)
{
	struct push p;
	memset(&p, 0, sizeof(p));
	cl_engine_init(&p.e, c, NULL, NULL);
	p.src = src;
	struct tally t = { 0 };
	uint8_t *missing = NULL;
	uint32_t *todo = NULL;
	size_t ntodo = 0;
	int ret = push_headers(&p, o, err);
	if (ret < 0)
		goto out;
	if ((ret = dmar_idset_init(&p.e.set, n ? n : 1)) < 0 || !(p.hint = calloc(n ? n : 1, sizeof(*p.hint))) ||
	    !(missing = malloc(n ? n : 1)) || !(todo = malloc((n ? n : 1) * sizeof(*todo)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		bool added;
		int64_t k = dmar_idset_add(&p.e.set, &ids[i], &added);
		if (k >= 0 && lens && lens[i] > p.hint[k])
			p.hint[k] = lens[i];
	}
	p.e.st.chunks = p.e.set.n;
	if ((ret = query_todo(&p, missing, todo, &ntodo, &t, err)) == 0 && ntodo)
		ret = push_upload(&p, todo, ntodo, &t.rounds);
	p.e.st.logical = p.e.st.chunk_bytes;
out:
	ret = push_finish(&p, &t, ret, st, err);
	free(missing);
	free(todo);
	return ret;
}
