/* SPDX-License-Identifier: MIT */
/*
 * The wire formats of wire.h: chunk batches, API paths and the errno names
 * both ends agree on.  Recipes are codec/recipe.c's.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_d_format: magicless frames */
#include <zstd.h>

#include "wire.h"
#include "codec/format.h"

/* ---- chunk batches ---------------------------------------------------- */

void dmar_batch_write_header(uint8_t out[DMAR_BATCH_HDR_SIZE], uint32_t count)
{
	memset(out, 0, DMAR_BATCH_HDR_SIZE);
	memcpy(out, DMAR_BATCH_MAGIC, 4);
	dmar_put_le16(out + 4, DMAR_BATCH_VERSION);
	dmar_put_le32(out + 8, count);
}

void dmar_batch_write_record(uint8_t out[DMAR_BATCH_REC_SIZE], const struct dmar_wire_chunk *c)
{
	memcpy(out, c->id.b, DMAR_HASH_SIZE);
	out[32] = c->enc;
	out[33] = out[34] = out[35] = 0;
	dmar_put_le32(out + 36, c->len);
	dmar_put_le32(out + 40, c->stored);
}

/*
 * The parser keeps at most one incomplete piece (the header, or a record
 * with its payload) in a buffer; a record that arrives whole in one feed is
 * handed to fn in place, so a large body costs no copy.
 *
 * Two buffers, used in turn: the piece a feed completes (delivered first
 * in that feed) stays in its buffer while the feed's trailing partial
 * piece goes to the other one.  So every payload delivered during a feed
 * stays valid until the next call on the parser, and a caller can verify
 * the records of one feed together (hash.c hashes many side by side) after
 * the feed returns, instead of one at a time inside fn.
 */
struct dmar_batch_parser {
	dmar_batch_fn fn;
	void *ctx;
	uint32_t max_count;
	uint32_t count;   /* from the header */
	uint32_t seen;    /* records delivered */
	bool have_hdr;
	int failed;       /* sticky error */
	uint8_t *bufs[2];
	size_t caps[2];   /* bytes allocated at bufs[i] (<= BATCH_BUF_MAX) */
	unsigned cur;     /* the buffer of the piece in progress */
	uint8_t *buf;     /* bufs[cur] */
	size_t have;      /* bytes in buf */
	size_t need;      /* bytes the piece in buf needs in all (header, record) */
};

#define BATCH_BUF_MAX (DMAR_BATCH_REC_SIZE + ZSTD_COMPRESSBOUND(DMAR_WIRE_CHUNK_MAX))

int dmar_batch_parser_new(struct dmar_batch_parser **out, uint32_t max_count, dmar_batch_fn fn, void *ctx)
{
	struct dmar_batch_parser *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->fn = fn;
	p->ctx = ctx;
	p->max_count = max_count;
	*out = p;
	return 0;
}

void dmar_batch_parser_free(struct dmar_batch_parser *p)
{
	if (!p)
		return;
	free(p->bufs[0]);
	free(p->bufs[1]);
	free(p);
}

uint32_t dmar_batch_parser_count(const struct dmar_batch_parser *p)
{
	return p->have_hdr ? p->count : 0;
}

static int fail(struct dmar_batch_parser *p, int code)
{
	p->failed = code;
	return code;
}

static int parse_header(struct dmar_batch_parser *p, const uint8_t *h, struct dmar_error *err)
{
	if (memcmp(h, DMAR_BATCH_MAGIC, 4) != 0)
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: bad magic (not a dmar chunk batch)"));
	if (dmar_get_le16(h + 4) != DMAR_BATCH_VERSION)
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: unsupported version %u",
					      dmar_get_le16(h + 4)));
	if (dmar_get_le16(h + 6) != 0 || dmar_get_le32(h + 12) != 0)
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: unknown flags or nonzero reserved field"));
	p->count = dmar_get_le32(h + 8);
	if (p->count > p->max_count)
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: %u records, the limit is %u", p->count,
					      p->max_count));
	p->have_hdr = true;
	return 0;
}

/* The payload size the record header h announces, or -EBADMSG. */
static int64_t record_payload(struct dmar_batch_parser *p, const uint8_t *h, struct dmar_wire_chunk *c,
			      struct dmar_error *err)
{
	memcpy(c->id.b, h, DMAR_HASH_SIZE);
	c->enc = h[32];
	c->len = dmar_get_le32(h + 36);
	c->stored = dmar_get_le32(h + 40);
	const char *bad = NULL;
	if (h[33] || h[34] || h[35])
		bad = "nonzero reserved bytes";
	else if (c->enc != DMAR_WIRE_RAW && dmar_wire_enc_zx(c->enc) == DMAR_ZX_RAW)
		bad = "unknown encoding";
	else if (c->len == 0 || c->len > DMAR_WIRE_CHUNK_MAX)
		bad = "length out of range";
	else if (c->enc == DMAR_WIRE_RAW && c->stored != c->len)
		bad = "raw payload size differs from its length";
	else if (c->enc != DMAR_WIRE_RAW && (c->stored == 0 || c->stored > ZSTD_COMPRESSBOUND(c->len)))
		bad = "zstd payload size out of range";
	if (bad) {
		char hex[17];
		dmar_hex(c->id.b, 8, hex);
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: record %u (chunk %s...): %s", p->seen,
					      hex, bad));
	}
	return c->stored;
}

static int deliver(struct dmar_batch_parser *p, struct dmar_wire_chunk *c, const uint8_t *payload)
{
	c->payload = payload;
	int r = p->fn(p->ctx, c);
	if (r < 0)
		return fail(p, r);
	p->seen++;
	return 0;
}

/*
 * Append n bytes of the piece in progress (p->have + n <= p->need <=
 * BATCH_BUF_MAX).  A new piece takes the other buffer (see the top).  A
 * buffer grows with the largest piece seen, not to the maximum at once: a
 * batch of small chunks split across feeds costs a few KiB, not 4 MiB, per
 * parser.
 */
static int buffer(struct dmar_batch_parser *p, const uint8_t *d, size_t n)
{
	if (p->have == 0) {
		p->cur ^= 1;
		p->buf = p->bufs[p->cur];
	}
	size_t *capp = &p->caps[p->cur];
	if (p->need > *capp) {
		size_t cap = *capp * 2 > p->need ? *capp * 2 : p->need;
		if (cap < 4096)
			cap = 4096;
		if (cap > BATCH_BUF_MAX)
			cap = BATCH_BUF_MAX;
		/* Only the piece in progress is in this buffer: its bytes move,
		 * the other buffer's (a record of this feed) stay put. */
		uint8_t *b = realloc(p->bufs[p->cur], cap);
		if (!b)
			return fail(p, -ENOMEM);
		p->bufs[p->cur] = p->buf = b;
		*capp = cap;
	}
	memcpy(p->buf + p->have, d, n);
	p->have += n;
	return 0;
}

int dmar_batch_parser_feed(struct dmar_batch_parser *p, const void *data, size_t len, struct dmar_error *err)
{
	const uint8_t *d = data;
	if (p->failed)
		return dmar_error_set(err, p->failed, "chunk batch: parsing stopped at an earlier error");
	while (len) {
		if (p->have_hdr && p->seen == p->count && p->have == 0)
			return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: %zu bytes after the last record",
						      len));
		/* An incomplete piece first: fill it up to what it needs. */
		if (p->have) {
			size_t take = p->need - p->have;
			if (take > len)
				take = len;
			if (buffer(p, d, take) < 0)
				return p->failed;
			d += take;
			len -= take;
			if (p->have < p->need)
				return 0;
			if (!p->have_hdr) {
				p->have = 0;
				if (parse_header(p, p->buf, err) < 0)
					return p->failed;
				continue;
			}
			struct dmar_wire_chunk c;
			int64_t pay = record_payload(p, p->buf, &c, err);
			if (pay < 0)
				return p->failed;
			if (p->need == DMAR_BATCH_REC_SIZE && pay > 0) {
				p->need += (size_t)pay; /* header complete: now its payload */
				continue;
			}
			p->have = 0;
			if (deliver(p, &c, p->buf + DMAR_BATCH_REC_SIZE) < 0)
				return p->failed;
			continue;
		}
		if (!p->have_hdr) {
			if (len < DMAR_BATCH_HDR_SIZE) {
				p->need = DMAR_BATCH_HDR_SIZE;
				return buffer(p, d, len) < 0 ? p->failed : 0;
			}
			if (parse_header(p, d, err) < 0)
				return p->failed;
			d += DMAR_BATCH_HDR_SIZE;
			len -= DMAR_BATCH_HDR_SIZE;
			continue;
		}
		if (len < DMAR_BATCH_REC_SIZE) {
			p->need = DMAR_BATCH_REC_SIZE;
			return buffer(p, d, len) < 0 ? p->failed : 0;
		}
		struct dmar_wire_chunk c;
		int64_t pay = record_payload(p, d, &c, err);
		if (pay < 0)
			return p->failed;
		size_t whole = DMAR_BATCH_REC_SIZE + (size_t)pay;
		if (len < whole) {
			p->need = whole;
			if (buffer(p, d, len) < 0)
				return p->failed;
			return 0;
		}
		if (deliver(p, &c, d + DMAR_BATCH_REC_SIZE) < 0)
			return p->failed;
		d += whole;
		len -= whole;
	}
	return 0;
}

int dmar_batch_parser_finish(struct dmar_batch_parser *p, struct dmar_error *err)
{
	if (p->failed)
		return dmar_error_set(err, p->failed, "chunk batch: parsing stopped at an earlier error");
	if (!p->have_hdr)
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: truncated: %zu of %d header bytes",
					      p->have, DMAR_BATCH_HDR_SIZE));
	if (p->seen != p->count || p->have)
		return fail(p, dmar_error_set(err, -EBADMSG, "chunk batch: truncated: %u of %u records%s", p->seen,
					      p->count, p->have ? " and part of the next" : ""));
	return 0;
}

int dmar_wire_chunk_verify(const struct dmar_wire_chunk *c, struct ZSTD_DCtx_s *dctx, uint8_t *scratch,
			   const uint8_t **decoded, struct dmar_error *err)
{
	char hex[17];
	const uint8_t *bytes = c->payload;
	enum dmar_zx zx = dmar_wire_enc_zx(c->enc);
	if (zx != DMAR_ZX_RAW) {
		size_t r = dmar_chunk_frame_decode(dctx, scratch, c->len, c->payload, c->stored, zx, scratch + c->len);
		if (ZSTD_isError(r)) {
			dmar_hex(c->id.b, 8, hex);
			return dmar_error_set(err, -EILSEQ, "chunk %s...: zstd frame corrupt (%s)", hex,
					      ZSTD_getErrorName(r));
		}
		if (r != c->len) {
			dmar_hex(c->id.b, 8, hex);
			return dmar_error_set(err, -EILSEQ, "chunk %s...: decodes to %zu bytes, declared %u", hex, r,
					      c->len);
		}
		bytes = scratch;
	} else if (c->enc != DMAR_WIRE_RAW || c->stored != c->len) {
		dmar_hex(c->id.b, 8, hex);
		return dmar_error_set(err, -EILSEQ, "chunk %s...: bad encoding", hex);
	}
	struct dmar_id got;
	dmar_hash(bytes, c->len, &got);
	if (memcmp(got.b, c->id.b, DMAR_HASH_SIZE) != 0) {
		dmar_hex(c->id.b, 8, hex);
		return dmar_error_set(err, -EILSEQ, "chunk %s...: hash mismatch (payload does not match its id)", hex);
	}
	*decoded = bytes;
	return 0;
}

size_t dmar_wire_chunks_verify(const struct dmar_wire_chunk *c, size_t n, bool *ok, struct dmar_error *err)
{
	enum { GROUP = 128 }; /* on the stack (6 KiB); enough to keep sixteen AVX-512 lanes busy */
	struct iovec v[GROUP];
	struct dmar_id got[GROUP];
	size_t bad = 0;
	for (size_t i = 0; i < n; i += GROUP) {
		size_t m = n - i < GROUP ? n - i : GROUP, k = 0;
		for (size_t j = 0; j < m; j++)
			if (c[i + j].enc == DMAR_WIRE_RAW && c[i + j].stored == c[i + j].len)
				v[k++] = (struct iovec){ (void *)c[i + j].payload, c[i + j].len };
		if (k)
			dmar_hash_many(v, k, got);
		k = 0;
		for (size_t j = 0; j < m; j++) {
			const struct dmar_wire_chunk *x = &c[i + j];
			const char *why = NULL;
			if (x->enc != DMAR_WIRE_RAW || x->stored != x->len)
				why = "bad encoding";
			else if (memcmp(got[k++].b, x->id.b, DMAR_HASH_SIZE) != 0)
				why = "hash mismatch (payload does not match its id)";
			ok[i + j] = !why;
			if (why && !bad++) {
				char hex[17];
				dmar_hex(x->id.b, 8, hex);
				dmar_error_set(err, -EILSEQ, "chunk %s...: %s", hex, why);
			}
		}
	}
	return bad;
}

/* ---- tree commits ------------------------------------------------------ */

size_t dmar_tree_op_size(size_t path_len, size_t data_len)
{
	return (DMAR_TREE_OP_SIZE + path_len + data_len + 7) & ~(size_t)7;
}

void dmar_tree_write_header(uint8_t out[DMAR_TREE_HDR_SIZE], uint32_t count, uint32_t ops_len)
{
	memset(out, 0, DMAR_TREE_HDR_SIZE);
	memcpy(out, DMAR_TREE_MAGIC, 4);
	dmar_put_le16(out + 4, DMAR_TREE_VERSION);
	dmar_put_le32(out + 8, count);
	dmar_put_le32(out + 12, ops_len);
}

size_t dmar_tree_write_op(uint8_t *out, const struct dmar_tree_op *op)
{
	size_t pl = strlen(op->path), n = dmar_tree_op_size(pl, op->data_len);
	memset(out, 0, n);
	out[0] = op->kind;
	out[1] = op->flags;
	dmar_put_le16(out + 2, (uint16_t)pl);
	dmar_put_le32(out + 4, op->mode);
	dmar_put_le32(out + 8, (uint32_t)op->data_len);
	memcpy(out + DMAR_TREE_OP_SIZE, op->path, pl);
	if (op->data_len)
		memcpy(out + DMAR_TREE_OP_SIZE + pl, op->data, op->data_len);
	return n;
}

int dmar_tree_header_parse(const uint8_t in[DMAR_TREE_HDR_SIZE], uint32_t *count, uint32_t *ops_len,
			   struct dmar_error *err)
{
	if (memcmp(in, DMAR_TREE_MAGIC, 4) != 0)
		return dmar_error_set(err, -EBADMSG, "tree: bad magic (not a tree commit)");
	if (dmar_get_le16(in + 4) != DMAR_TREE_VERSION)
		return dmar_error_set(err, -EBADMSG, "tree: version %u (this node reads %u)", dmar_get_le16(in + 4),
				      DMAR_TREE_VERSION);
	if (dmar_get_le16(in + 6) != 0)
		return dmar_error_set(err, -EBADMSG, "tree: flags 0x%x: none are defined", dmar_get_le16(in + 6));
	uint32_t n = dmar_get_le32(in + 8), len = dmar_get_le32(in + 12);
	if (n == 0 || n > DMAR_TREE_OPS_MAX)
		return dmar_error_set(err, -EBADMSG, "tree: %" PRIu32 " operations (1..%u)", n, DMAR_TREE_OPS_MAX);
	if (len < (uint64_t)n * (DMAR_TREE_OP_SIZE + 8) || len > DMAR_TREE_OPS_BYTES_MAX || len % 8)
		return dmar_error_set(err, -EBADMSG, "tree: %" PRIu32 " bytes of operations cannot hold %" PRIu32
				      " (at least 24 each, a multiple of 8, at most %u in all)",
				      len, n, DMAR_TREE_OPS_BYTES_MAX);
	*count = n;
	*ops_len = len;
	return 0;
}

int dmar_tree_op_parse(const uint8_t *ops, size_t len, size_t *pos, uint32_t k, struct dmar_tree_op *op,
		       struct dmar_error *err)
{
	size_t at = *pos;
	if (at > len || len - at < DMAR_TREE_OP_SIZE)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": truncated", k);
	const uint8_t *h = ops + at;
	uint8_t kind = h[0], flags = h[1];
	size_t pl = dmar_get_le16(h + 2), dl = dmar_get_le32(h + 8);
	uint32_t mode = dmar_get_le32(h + 4);
	if (kind < DMAR_TREE_DIR || kind > DMAR_TREE_SYMLINK)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": unknown kind %u", k, kind);
	if (flags & ~(kind == DMAR_TREE_DIR ? 0u : DMAR_TREE_NOREPLACE))
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": flags 0x%x", k, flags);
	if (dmar_get_le32(h + 12) != 0)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": reserved bytes not zero", k);
	if (pl == 0 || pl > DMAR_TREE_PATH_MAX)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": path of %zu bytes (1..%u)", k, pl,
				      DMAR_TREE_PATH_MAX);
	if (kind == DMAR_TREE_DIR ? mode > 07777 : mode != 0)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": mode 0%" PRIo32 "%s", k, mode,
				      kind == DMAR_TREE_DIR ? " (permission bits only)" : " (only a directory has one)");
	if (kind == DMAR_TREE_DIR ? dl != 0
	    : kind == DMAR_TREE_SYMLINK ? dl == 0 || dl > DMAR_TREE_PATH_MAX
					: dl < DMAR_RECIPE_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": %zu bytes of %s", k, dl,
				      kind == DMAR_TREE_DIR ? "data for a directory (none)"
				      : kind == DMAR_TREE_SYMLINK ? "target (1..4095)"
								  : "recipe (too short for one)");
	size_t n = dmar_tree_op_size(pl, dl);
	if (n > len - at)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": runs past the operations' end", k);
	const uint8_t *path = h + DMAR_TREE_OP_SIZE, *data = path + pl;
	if (memchr(path, 0, pl) || (kind == DMAR_TREE_SYMLINK && memchr(data, 0, dl)))
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": a NUL byte in its %s", k,
				      memchr(path, 0, pl) ? "path" : "target");
	for (size_t i = DMAR_TREE_OP_SIZE + pl + dl; i < n; i++)
		if (h[i])
			return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": padding not zero", k);
	memcpy(op->path, path, pl);
	op->path[pl] = 0;
	if (op->path[pl - 1] == '/')
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": path %s ends in '/'", k, op->path);
	struct dmar_error perr = { 0 };
	if (dmar_wire_path_check(op->path, &perr) < 0)
		return dmar_error_set(err, -EBADMSG, "tree: operation %" PRIu32 ": %s", k, perr.msg);
	op->kind = kind;
	op->flags = flags;
	op->mode = mode;
	op->data = data;
	op->data_len = dl;
	*pos = at + n;
	return 0;
}

/* ---- paths and errors --------------------------------------------------- */

int dmar_wire_upload_new(uint64_t *id)
{
	do {
		if (getrandom(id, sizeof(*id), 0) != (ssize_t)sizeof(*id))
			return -errno;
	} while (!*id);
	return 0;
}

int dmar_wire_upload_parse(const char *s, uint64_t *id)
{
	uint64_t v = 0;
	size_t i;
	for (i = 0; s[i] && i < 16; i++) {
		int d = dmar_hexval(s[i]);
		if (d < 0)
			return -EINVAL;
		v = v << 4 | (uint64_t)d;
	}
	if (i != 16 || s[i] || !v)
		return -EINVAL;
	*id = v;
	return 0;
}

/* Bytes of the UTF-8 sequence at s (at most n), or 0 if it is not one:
 * no overlong forms, surrogates or code points past U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	uint32_t cp, min;
	if (c < 0x80)
		return 1;
	if ((c & 0xe0) == 0xc0)
		len = 2, cp = c & 0x1f, min = 0x80;
	else if ((c & 0xf0) == 0xe0)
		len = 3, cp = c & 0x0f, min = 0x800;
	else if ((c & 0xf8) == 0xf0)
		len = 4, cp = c & 0x07, min = 0x10000;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int dmar_wire_name_check(const char *name, size_t n, bool at_root, struct dmar_error *err)
{
	const unsigned char *s = (const unsigned char *)name;
	if (n == 0)
		return dmar_error_set(err, -EINVAL, "path: empty component ('//')");
	if (n > 255)
		return dmar_error_set(err, -EINVAL, "path: a component is longer than 255 bytes");
	if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return dmar_error_set(err, -EINVAL, "path: '.' and '..' components are not allowed");
	if (at_root && s[0] == '@')
		return dmar_error_set(err, -EINVAL, "path: names starting with '@' at the root are the peers'");
	for (size_t k = 0; k < n;) {
		if (s[k] < 0x20 || s[k] == 0x7f)
			return dmar_error_set(err, -EINVAL, "path: a control character (byte 0x%02x) in a name", s[k]);
		size_t q = utf8_seq(s + k, n - k);
		if (!q)
			return dmar_error_set(err, -EINVAL, "path: a name that is not valid UTF-8 (byte %zu)", k);
		k += q;
	}
	return 0;
}


int dmar_wire_path_check(const char *path, struct dmar_error *err)
{
	if (!path)
		return dmar_error_set(err, -EINVAL, "path: missing");
	size_t len = strlen(path);
	if (len > 4095)
		return dmar_error_set(err, -EINVAL, "path: longer than 4095 bytes");
	if (path[0] == '/')
		return dmar_error_set(err, -EINVAL, "path: absolute (starts with '/')");
	for (const char *p = path; *p;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		int r = dmar_wire_name_check(p, n, p == path, err);
		if (r < 0)
			return r;
		if (!slash)
			break;
		p = slash + 1;
	}
	return 0;
}

static const struct {
	int e;
	const char *name;
	int status;
} errnos[] = {
	{ ENOENT, "ENOENT", 404 },   { EEXIST, "EEXIST", 409 },     { ENOTEMPTY, "ENOTEMPTY", 409 },
	{ ENODATA, "ENODATA", 409 },
	{ ENOSPC, "ENOSPC", 507 },   { EDQUOT, "EDQUOT", 507 },     { EACCES, "EACCES", 403 },
	{ EPERM, "EPERM", 403 },     { EROFS, "EROFS", 403 },       { EINVAL, "EINVAL", 400 },
	{ EBADMSG, "EBADMSG", 400 }, { ENOTDIR, "ENOTDIR", 400 },   { EISDIR, "EISDIR", 400 },
	{ ENAMETOOLONG, "ENAMETOOLONG", 400 },                       { EFBIG, "EFBIG", 413 },
	{ E2BIG, "E2BIG", 413 },     { EKEYREJECTED, "EKEYREJECTED", 401 },
	{ EILSEQ, "EILSEQ", 422 },   { EAGAIN, "EAGAIN", 503 },     { ENOMEM, "ENOMEM", 503 },
	{ EMLINK, "EMLINK", 409 },   { EXDEV, "EXDEV", 400 },       { ENOTSUP, "ENOTSUP", 501 },
	{ ECONNREFUSED, "ECONNREFUSED", 502 },                      { EHOSTUNREACH, "EHOSTUNREACH", 502 },
	{ ETIMEDOUT, "ETIMEDOUT", 504 },                             { EIO, "EIO", 500 },
};

/* The table entry for e or -e; -1 for an unnamed one (and for INT_MIN,
 * which has no positive counterpart to negate into). */
static int errno_index(int e)
{
	if (e == INT_MIN)
		return -1;
	if (e < 0)
		e = -e;
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (errnos[i].e == e)
			return (int)i;
	return -1;
}

const char *dmar_wire_errno_name(int e)
{
	int i = errno_index(e);
	return i < 0 ? "EIO" : errnos[i].name;
}

int dmar_wire_errno_from_name(const char *name)
{
	if (name)
		for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
			if (strcmp(errnos[i].name, name) == 0)
				return -errnos[i].e;
	return -EIO;
}

int dmar_wire_http_status(int e)
{
	int i = errno_index(e);
	return i < 0 ? 500 : errnos[i].status;
}
