/* SPDX-License-Identifier: MIT */
/*
 * The wire formats of wire.h: recipes, chunk batches, API paths and the
 * errno names both ends agree on.
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

#include "format.h"
#include "wire.h"

/* ---- recipes ------------------------------------------------------------ */

size_t dmar_recipe_wire_size(size_t n)
{
	return DMAR_RECIPE_HDR_SIZE + n * DMAR_RECIPE_ENTRY_SIZE + DMAR_RECIPE_TRAILER_SIZE;
}

/* The 48-byte recipe header of r with n entries. */
static void head_write(const struct dmar_recipe *r, size_t n, uint8_t *out)
{
	memset(out, 0, DMAR_RECIPE_HDR_SIZE);
	memcpy(out, DMAR_RECIPE_MAGIC, 4);
	dmar_put_le16(out + 4, DMAR_RECIPE_VERSION);
	dmar_put_le64(out + 8, r->size);
	dmar_put_le32(out + 16, r->mode & 07777);
	dmar_put_le64(out + 24, (uint64_t)r->mtime_sec);
	dmar_put_le32(out + 32, r->mtime_nsec);
	dmar_put_le32(out + 36, (uint32_t)n);
}

static void entry_write(const struct dmar_recipe_entry *e, uint8_t *p)
{
	if (e->kind == DMAR_RECIPE_HOLE)
		memset(p, 0, DMAR_HASH_SIZE);
	else
		memcpy(p, e->id.b, DMAR_HASH_SIZE);
	dmar_put_le64(p + 32, e->len);
	dmar_put_le32(p + 40, e->kind == DMAR_RECIPE_HOLE ? 0 : e->skip);
	dmar_put_le32(p + 44, e->kind);
}

/* The recipe id of the 48-byte header head and content id cid. */
static void id_from_head(const uint8_t *head, const struct dmar_id *cid, struct dmar_id *rid)
{
	uint8_t b[DMAR_RECIPE_HDR_SIZE + DMAR_HASH_SIZE];
	memcpy(b, head, DMAR_RECIPE_HDR_SIZE);
	memcpy(b + DMAR_RECIPE_HDR_SIZE, cid->b, DMAR_HASH_SIZE);
	dmar_hash(b, sizeof(b), rid);
}

void dmar_recipe_id_of(const struct dmar_recipe *r, size_t n, const struct dmar_id *cid, struct dmar_id *rid)
{
	uint8_t head[DMAR_RECIPE_HDR_SIZE];
	head_write(r, n, head);
	id_from_head(head, cid, rid);
}

int dmar_recipe_ids(const struct dmar_recipe *r, struct dmar_id *rid, struct dmar_id *cid)
{
	/* Through a small buffer: a 1 GiB file's 1.5 MiB of entries need
	 * not exist at once. */
	enum { PER = 1024 };
	uint8_t *buf = malloc(PER * DMAR_RECIPE_ENTRY_SIZE);
	struct dmar_hash_ctx *h = dmar_hash_ctx_new();
	if (!buf || !h) {
		free(buf);
		dmar_hash_ctx_free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->n;) {
		size_t k = 0;
		for (; k < PER && i < r->n; k++, i++)
			entry_write(&r->e[i], buf + k * DMAR_RECIPE_ENTRY_SIZE);
		dmar_hash_ctx_update(h, buf, k * DMAR_RECIPE_ENTRY_SIZE);
	}
	struct dmar_id c;
	dmar_hash_ctx_final(h, &c);
	dmar_hash_ctx_free(h);
	free(buf);
	if (rid)
		dmar_recipe_id_of(r, r->n, &c, rid);
	if (cid)
		*cid = c;
	return 0;
}

void dmar_recipe_write(const struct dmar_recipe *r, uint8_t *out, struct dmar_id *id)
{
	head_write(r, r->n, out);
	uint8_t *p = out + DMAR_RECIPE_HDR_SIZE;
	for (size_t i = 0; i < r->n; i++, p += DMAR_RECIPE_ENTRY_SIZE)
		entry_write(&r->e[i], p);
	struct dmar_id cid, sum;
	dmar_hash(out + DMAR_RECIPE_HDR_SIZE, (size_t)(p - out) - DMAR_RECIPE_HDR_SIZE, &cid);
	id_from_head(out, &cid, &sum);
	memcpy(p, sum.b, DMAR_HASH_SIZE);
	if (id)
		*id = sum;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* The header fields both recipe forms share (bytes 8..47), checked; the
 * caller has checked magic, version and bytes 6-7.  what: "recipe" or
 * "short recipe", for messages. */
static int header_parse(const uint8_t *b, const char *what, struct dmar_recipe *r, uint32_t *n,
			struct dmar_error *err)
{
	if (dmar_get_le32(b + 20) != 0 || dmar_get_le64(b + 40) != 0)
		return dmar_error_set(err, -EBADMSG, "%s: unknown flags or nonzero reserved header fields", what);
	r->size = dmar_get_le64(b + 8);
	r->mode = dmar_get_le32(b + 16);
	r->mtime_sec = (int64_t)dmar_get_le64(b + 24);
	r->mtime_nsec = dmar_get_le32(b + 32);
	*n = dmar_get_le32(b + 36);
	if (r->size > DMAR_RECIPE_MAX_SIZE)
		return dmar_error_set(err, -EBADMSG, "%s: size %" PRIu64 " is beyond the limit", what, r->size);
	if (r->mode & ~07777u)
		return dmar_error_set(err, -EBADMSG, "%s: mode %#o has bits beyond 07777", what, r->mode);
	if (r->mtime_nsec >= 1000000000u)
		return dmar_error_set(err, -EBADMSG, "%s: mtime nanoseconds %u >= 10^9", what, r->mtime_nsec);
	if (*n > DMAR_RECIPE_MAX_ENTRIES)
		return dmar_error_set(err, -EBADMSG, "%s: %u entries, the limit is %u", what, *n,
				      DMAR_RECIPE_MAX_ENTRIES);
	return 0;
}

/* What is wrong with entry e of a recipe of size bytes, total of them
 * covered before it; NULL if nothing.  A hole's id and skip are the
 * caller's to check. */
static const char *entry_bad(const struct dmar_recipe_entry *e, uint64_t size, uint64_t total)
{
	if (e->len == 0)
		return "length 0";
	if (e->kind == DMAR_RECIPE_CHUNK) {
		if (e->len > DMAR_WIRE_CHUNK_MAX || e->skip > DMAR_WIRE_CHUNK_MAX - e->len)
			return "range beyond the largest chunk";
	} else if (e->kind != DMAR_RECIPE_HOLE) {
		return "unknown kind";
	}
	if (e->len > size - total)
		return "lengths add up to more than the size";
	return NULL;
}

/* A recipe's header and length, checked: h's fields and *n. */
static int full_head(const uint8_t *b, size_t len, struct dmar_recipe *h, uint32_t *n, struct dmar_error *err)
{
	if (len < DMAR_RECIPE_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE)
		return dmar_error_set(err, -EBADMSG, "recipe: truncated: %zu bytes, a recipe has at least %d", len,
				      DMAR_RECIPE_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE);
	if (memcmp(b, DMAR_RECIPE_MAGIC, 4) != 0)
		return dmar_error_set(err, -EBADMSG, "recipe: bad magic (not a dmar recipe)");
	if (dmar_get_le16(b + 4) != DMAR_RECIPE_VERSION)
		return dmar_error_set(err, -EBADMSG, "recipe: unsupported version %u (this build reads %d)",
				      dmar_get_le16(b + 4), DMAR_RECIPE_VERSION);
	if (dmar_get_le16(b + 6) != 0)
		return dmar_error_set(err, -EBADMSG, "recipe: unknown flags or nonzero reserved header fields");
	int rc = header_parse(b, "recipe", h, n, err);
	if (rc < 0)
		return rc;
	if (len != dmar_recipe_wire_size(*n))
		return dmar_error_set(err, -EBADMSG, "recipe: %zu bytes, but %u entries make %zu (%s)", len, *n,
				      dmar_recipe_wire_size(*n),
				      len < dmar_recipe_wire_size(*n) ? "truncated" : "trailing bytes");
	return 0;
}

int dmar_recipe_parse(const void *buf, size_t len, struct dmar_recipe *r, struct dmar_error *err)
{
	struct dmar_id cid;
	return dmar_recipe_parse_cid(buf, len, r, &cid, err);
}

int dmar_recipe_parse_cid(const void *buf, size_t len, struct dmar_recipe *r, struct dmar_id *cid,
			  struct dmar_error *err)
{
	const uint8_t *b = buf;
	struct dmar_recipe h;
	uint32_t n;
	int rc = full_head(b, len, &h, &n, err);
	if (rc < 0)
		return rc;
	size_t body = len - DMAR_RECIPE_TRAILER_SIZE;
	struct dmar_id c, sum;
	dmar_hash(b + DMAR_RECIPE_HDR_SIZE, body - DMAR_RECIPE_HDR_SIZE, &c);
	id_from_head(b, &c, &sum);
	if (memcmp(sum.b, b + body, DMAR_HASH_SIZE) != 0)
		return dmar_error_set(err, -EBADMSG, "recipe: checksum mismatch (corrupt or truncated)");

	struct dmar_recipe_entry *e = NULL;
	if (n && !(e = malloc((size_t)n * sizeof(*e))))
		return -ENOMEM;
	uint64_t total = 0;
	const uint8_t *p = b + DMAR_RECIPE_HDR_SIZE;
	for (uint32_t i = 0; i < n; i++, p += DMAR_RECIPE_ENTRY_SIZE) {
		memcpy(e[i].id.b, p, DMAR_HASH_SIZE);
		e[i].len = dmar_get_le64(p + 32);
		e[i].skip = dmar_get_le32(p + 40);
		e[i].kind = dmar_get_le32(p + 44);
		const char *bad = entry_bad(&e[i], h.size, total);
		if (!bad && e[i].kind == DMAR_RECIPE_HOLE && (e[i].skip || !all_zero(p, DMAR_HASH_SIZE)))
			bad = "hole with an id or skip";
		if (bad) {
			free(e);
			return dmar_error_set(err, -EBADMSG, "recipe: entry %u: %s", i, bad);
		}
		total += e[i].len;
	}
	if (total != h.size) {
		free(e);
		return dmar_error_set(err, -EBADMSG, "recipe: entries cover %" PRIu64 " bytes, size says %" PRIu64,
				      total, h.size);
	}
	h.n = n;
	h.e = e;
	*r = h;
	*cid = c;
	return 0;
}

/* ---- short recipes -------------------------------------------------------- */

enum { SHORT_CHUNK = 0, SHORT_HOLE = 1, SHORT_CHUNK_SKIP = 2 };

/* The largest entry: tag, a whole id, len and skip of a chunk (each < 2^28,
 * 4 ULEB128 bytes); a hole's len (< 2^63, 9 bytes) is shorter. */
#define SHORT_ENTRY_MAX (1 + DMAR_HASH_SIZE + 4 + 4)

size_t dmar_recipe_short_max_size(size_t n)
{
	return DMAR_RECIPE_SHORT_HDR_SIZE + n * SHORT_ENTRY_MAX;
}

static uint8_t *uleb_put(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* A canonical ULEB128 from [*p, end): 0 and *v, *p moved past it; -1 if
 * truncated, longer than 64 bits or not in its fewest bytes. */
static int uleb_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t c = *(*p)++;
		if (shift == 63 && c > 1)
			return -1;
		x |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			if (!c && shift)
				return -1; /* a trailing zero group */
			*v = x;
			return 0;
		}
	}
	return -1;
}

void dmar_recipe_short_head_write(const struct dmar_recipe *r, const struct dmar_id *id, unsigned idlen, uint8_t *out)
{
	memset(out, 0, DMAR_RECIPE_SHORT_HDR_SIZE);
	memcpy(out, DMAR_RECIPE_SHORT_MAGIC, 4);
	dmar_put_le16(out + 4, DMAR_RECIPE_VERSION);
	out[6] = (uint8_t)idlen;
	dmar_put_le64(out + 8, r->size);
	dmar_put_le32(out + 16, r->mode & 07777);
	dmar_put_le64(out + 24, (uint64_t)r->mtime_sec);
	dmar_put_le32(out + 32, r->mtime_nsec);
	dmar_put_le32(out + 36, (uint32_t)r->n);
	memcpy(out + 48, id->b, DMAR_HASH_SIZE);
}

size_t dmar_recipe_short_write(const struct dmar_recipe *r, const struct dmar_id *id, unsigned idlen, uint8_t *out)
{
	dmar_recipe_short_head_write(r, id, idlen, out);
	uint8_t *p = out + DMAR_RECIPE_SHORT_HDR_SIZE;
	for (size_t i = 0; i < r->n; i++) {
		const struct dmar_recipe_entry *e = &r->e[i];
		if (e->kind == DMAR_RECIPE_HOLE) {
			*p++ = SHORT_HOLE;
			p = uleb_put(p, e->len);
			continue;
		}
		*p++ = e->skip ? SHORT_CHUNK_SKIP : SHORT_CHUNK;
		memcpy(p, e->id.b, idlen);
		p = uleb_put(p + idlen, e->len);
		if (e->skip)
			p = uleb_put(p, e->skip);
	}
	return (size_t)(p - out);
}

/* A short recipe's header, checked: h's fields, *n and *il. */
static int short_head(const uint8_t *b, size_t len, struct dmar_recipe *h, uint32_t *n, unsigned *il,
		      struct dmar_error *err)
{
	if (len < DMAR_RECIPE_SHORT_HDR_SIZE)
		return dmar_error_set(err, -EBADMSG, "short recipe: truncated: %zu bytes, one has at least %d", len,
				      DMAR_RECIPE_SHORT_HDR_SIZE);
	if (memcmp(b, DMAR_RECIPE_SHORT_MAGIC, 4) != 0)
		return dmar_error_set(err, -EBADMSG, "short recipe: bad magic (not a dmar short recipe)");
	if (dmar_get_le16(b + 4) != DMAR_RECIPE_VERSION)
		return dmar_error_set(err, -EBADMSG, "short recipe: unsupported version %u (this build reads %d)",
				      dmar_get_le16(b + 4), DMAR_RECIPE_VERSION);
	*il = b[6];
	if (*il < DMAR_RECIPE_SHORT_IDLEN_MIN || *il > DMAR_HASH_SIZE)
		return dmar_error_set(err, -EBADMSG, "short recipe: id prefix of %u bytes (%d to %d)", *il,
				      DMAR_RECIPE_SHORT_IDLEN_MIN, DMAR_HASH_SIZE);
	if (b[7] != 0)
		return dmar_error_set(err, -EBADMSG, "short recipe: unknown flags or nonzero reserved header fields");
	return header_parse(b, "short recipe", h, n, err);
}

int dmar_recipe_head_parse(const void *buf, size_t len, bool is_short, struct dmar_recipe *r, struct dmar_id *id,
			   struct dmar_error *err)
{
	const uint8_t *b = buf;
	struct dmar_recipe h;
	uint32_t n;
	unsigned il;
	int rc = is_short ? short_head(b, len, &h, &n, &il, err) : full_head(b, len, &h, &n, err);
	if (rc < 0)
		return rc;
	memcpy(id->b, is_short ? b + 48 : b + len - DMAR_RECIPE_TRAILER_SIZE, DMAR_HASH_SIZE);
	h.n = n;
	h.e = NULL;
	*r = h;
	return 0;
}

int dmar_recipe_short_parse(const void *buf, size_t len, struct dmar_recipe *r, struct dmar_id *id, unsigned *idlen,
			    struct dmar_error *err)
{
	const uint8_t *b = buf, *end = b + len;
	struct dmar_recipe h;
	uint32_t n;
	unsigned il;
	int rc = short_head(b, len, &h, &n, &il, err);
	if (rc < 0)
		return rc;
	/* Every entry takes at least 2 bytes: no allocation beyond what the
	 * body could describe. */
	if ((len - DMAR_RECIPE_SHORT_HDR_SIZE) / 2 < n)
		return dmar_error_set(err, -EBADMSG, "short recipe: %zu bytes cannot hold %u entries (truncated)", len,
				      n);
	struct dmar_recipe_entry *e = NULL;
	if (n && !(e = calloc(n, sizeof(*e))))
		return -ENOMEM;
	uint64_t total = 0;
	const uint8_t *p = b + DMAR_RECIPE_SHORT_HDR_SIZE;
	const char *bad = NULL;
	uint32_t i;
	for (i = 0; i < n && !bad; i++) {
		if (p == end) {
			bad = "truncated";
			break;
		}
		uint8_t tag = *p++;
		uint64_t v = 0, skip = 0;
		if (tag > SHORT_CHUNK_SKIP) {
			bad = "unknown tag";
			break;
		}
		if (tag != SHORT_HOLE) {
			if ((size_t)(end - p) < il) {
				bad = "truncated";
				break;
			}
			memcpy(e[i].id.b, p, il);
			p += il;
		}
		if (uleb_get(&p, end, &v) < 0 || (tag == SHORT_CHUNK_SKIP && uleb_get(&p, end, &skip) < 0)) {
			bad = "truncated or non-canonical number";
			break;
		}
		if (tag == SHORT_CHUNK_SKIP && (skip == 0 || skip > UINT32_MAX)) {
			bad = skip ? "range beyond the largest chunk" : "tag 2 with skip 0";
			break;
		}
		e[i].len = v;
		e[i].skip = (uint32_t)skip;
		e[i].kind = tag == SHORT_HOLE ? DMAR_RECIPE_HOLE : DMAR_RECIPE_CHUNK;
		if ((bad = entry_bad(&e[i], h.size, total)))
			break;
		total += e[i].len;
	}
	if (bad) {
		free(e);
		return dmar_error_set(err, -EBADMSG, "short recipe: entry %u: %s", i, bad);
	}
	if (p != end) {
		free(e);
		return dmar_error_set(err, -EBADMSG, "short recipe: %zu bytes after the last entry", (size_t)(end - p));
	}
	if (total != h.size) {
		free(e);
		return dmar_error_set(err, -EBADMSG,
				      "short recipe: entries cover %" PRIu64 " bytes, size says %" PRIu64, total, h.size);
	}
	memcpy(id->b, b + 48, DMAR_HASH_SIZE);
	*idlen = il;
	h.n = n;
	h.e = e;
	*r = h;
	return 0;
}

struct dmar_id *dmar_recipe_chunk_ids(const struct dmar_recipe *r, size_t *n)
{
	struct dmar_id *ids = malloc((r->n ? r->n : 1) * sizeof(*ids));
	*n = 0;
	for (size_t i = 0; ids && i < r->n; i++)
		if (r->e[i].kind == DMAR_RECIPE_CHUNK)
			ids[(*n)++] = r->e[i].id;
	return ids;
}

void dmar_recipe_free(struct dmar_recipe *r)
{
	if (!r)
		return;
	free(r->e);
	r->e = NULL;
	r->n = 0;
}

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
	else if (c->enc != DMAR_WIRE_RAW && c->enc != DMAR_WIRE_ZSTD)
		bad = "unknown encoding";
	else if (c->len == 0 || c->len > DMAR_WIRE_CHUNK_MAX)
		bad = "length out of range";
	else if (c->enc == DMAR_WIRE_RAW && c->stored != c->len)
		bad = "raw payload size differs from its length";
	else if (c->enc == DMAR_WIRE_ZSTD && (c->stored == 0 || c->stored > ZSTD_COMPRESSBOUND(c->len)))
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
	if (c->enc == DMAR_WIRE_ZSTD) {
		ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters);
		ZSTD_DCtx_setParameter(dctx, ZSTD_d_format, ZSTD_f_zstd1_magicless);
		size_t r = ZSTD_decompressDCtx(dctx, scratch, c->len, c->payload, c->stored);
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
