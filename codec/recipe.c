/* SPDX-License-Identifier: MIT */
/*
 * Recipes (recipe.h): writing, ids, and the parsers of untrusted recipes,
 * full and short.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "recipe.h"

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
		if (e->len > DMAR_RECIPE_CHUNK_MAX || e->skip > DMAR_RECIPE_CHUNK_MAX - e->len)
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

/* ---- recipe deltas ------------------------------------------------------ */

static bool entry_eq(const struct dmar_recipe_entry *a, const struct dmar_recipe_entry *b)
{
	if (a->kind != b->kind || a->len != b->len)
		return false;
	return a->kind == DMAR_RECIPE_HOLE || (a->skip == b->skip && !memcmp(a->id.b, b->id.b, DMAR_HASH_SIZE));
}

/* How far (entries, each way) a differing run is looked past for the
 * entries to agree again. */
#define DELTA_SLACK 32

struct delta_buf {
	uint8_t *b;
	size_t n, cap;
	uint32_t nedits;
	size_t ins;
};

static uint8_t *delta_grow(struct delta_buf *o, size_t n)
{
	if (o->n + n > o->cap) {
		size_t cap = o->cap ? o->cap : 4096;
		while (cap < o->n + n)
			cap *= 2;
		uint8_t *b = realloc(o->b, cap);
		if (!b)
			return NULL;
		o->b = b;
		o->cap = cap;
	}
	uint8_t *p = o->b + o->n;
	o->n += n;
	return p;
}

static int delta_edit(struct delta_buf *o, const struct dmar_recipe *r, size_t at, size_t del, size_t k, size_t ins)
{
	uint8_t *p = delta_grow(o, DMAR_RECIPE_DELTA_EDIT_SIZE + ins * DMAR_RECIPE_ENTRY_SIZE);
	if (!p)
		return -ENOMEM;
	dmar_put_le32(p, (uint32_t)at);
	dmar_put_le32(p + 4, (uint32_t)del);
	dmar_put_le32(p + 8, (uint32_t)ins);
	dmar_put_le32(p + 12, 0);
	for (size_t j = 0; j < ins; j++)
		entry_write(&r->e[k + j], p + DMAR_RECIPE_DELTA_EDIT_SIZE + j * DMAR_RECIPE_ENTRY_SIZE);
	o->nedits++;
	o->ins += ins;
	return 0;
}

int dmar_recipe_delta_make(const struct dmar_recipe *base, const struct dmar_id *base_cid,
			   const struct dmar_recipe *r, size_t max_ins, uint8_t **out, size_t *len)
{
	struct delta_buf o = { 0 };
	if (!delta_grow(&o, DMAR_RECIPE_DELTA_HDR_SIZE))
		return -ENOMEM;
	size_t i = 0, k = 0, bn = base->n, n = r->n;
	/* Comparisons left: a file unlike its base gives up soon (-E2BIG). */
	size_t budget = 16 * (n + bn) + 4 * DELTA_SLACK * DELTA_SLACK;
	int rc = 0;
	while (rc == 0 && (i < bn || k < n)) {
		if (i < bn && k < n && entry_eq(&base->e[i], &r->e[k])) {
			i++;
			k++;
			continue;
		}
		/* The nearest place where they agree again: di base entries
		 * dropped, dk new ones put in, di + dk smallest. */
		size_t di = 0, dk = 0;
		bool found = false;
		for (size_t s = 1; s <= 2 * DELTA_SLACK && !found && budget; s++)
			for (size_t x = s > DELTA_SLACK ? s - DELTA_SLACK : 0; x <= s && x <= DELTA_SLACK && !found; x++) {
				size_t y = s - x;
				budget -= budget > 0;
				if (i + y < bn && k + x < n && entry_eq(&base->e[i + y], &r->e[k + x])) {
					di = y;
					dk = x;
					found = true;
				}
			}
		/* A longer rewritten region: the old entries resume about as
		 * far into the base as the new ones are into r. */
		for (size_t x = DELTA_SLACK + 1; !found && k + x < n && budget; x++) {
			size_t lo = i + x > i + DELTA_SLACK / 2 ? i + x - DELTA_SLACK / 2 : i;
			for (size_t y = lo; y <= i + x + DELTA_SLACK / 2 && y < bn && !found; y++) {
				budget -= budget > 0;
				if (entry_eq(&base->e[y], &r->e[k + x])) {
					di = y - i;
					dk = x;
					found = true;
				}
			}
		}
		if (!found) {
			di = bn - i;
			dk = n - k;
		}
		rc = delta_edit(&o, r, i, di, k, dk);
		if (rc == 0 && o.ins > max_ins)
			rc = -E2BIG;
		i += di;
		k += dk;
	}
	if (rc < 0) {
		free(o.b);
		return rc;
	}
	uint8_t *h = o.b, head[DMAR_RECIPE_HDR_SIZE];
	head_write(r, n, head);
	memset(h, 0, DMAR_RECIPE_DELTA_HDR_SIZE);
	memcpy(h, DMAR_RECIPE_DELTA_MAGIC, 4);
	dmar_put_le16(h + 4, DMAR_RECIPE_VERSION);
	memcpy(h + 8, head + 8, 40);
	memcpy(h + 48, base_cid->b, DMAR_HASH_SIZE);
	dmar_put_le32(h + 80, (uint32_t)bn);
	dmar_put_le32(h + 84, o.nedits);
	uint8_t *t = delta_grow(&o, DMAR_RECIPE_TRAILER_SIZE);
	if (!t) {
		free(o.b);
		return -ENOMEM;
	}
	struct dmar_id sum;
	dmar_hash(o.b, o.n - DMAR_RECIPE_TRAILER_SIZE, &sum);
	memcpy(t, sum.b, DMAR_HASH_SIZE);
	*out = o.b;
	*len = o.n;
	return 0;
}

static void entry_read(const uint8_t *p, struct dmar_recipe_entry *e)
{
	memcpy(e->id.b, p, DMAR_HASH_SIZE);
	e->len = dmar_get_le64(p + 32);
	e->skip = dmar_get_le32(p + 40);
	e->kind = dmar_get_le32(p + 44);
}

int dmar_recipe_delta_parse(const void *buf, size_t len, struct dmar_recipe_delta *d, struct dmar_error *err)
{
	const uint8_t *b = buf;
	if (len < DMAR_RECIPE_DELTA_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE)
		return dmar_error_set(err, -EBADMSG, "recipe delta: truncated: %zu bytes, a delta has at least %d",
				      len, DMAR_RECIPE_DELTA_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE);
	if (memcmp(b, DMAR_RECIPE_DELTA_MAGIC, 4) != 0)
		return dmar_error_set(err, -EBADMSG, "recipe delta: bad magic (not a dmar recipe delta)");
	if (dmar_get_le16(b + 4) != DMAR_RECIPE_VERSION)
		return dmar_error_set(err, -EBADMSG, "recipe delta: unsupported version %u (this build reads %d)",
				      dmar_get_le16(b + 4), DMAR_RECIPE_VERSION);
	if (dmar_get_le16(b + 6) != 0 || dmar_get_le64(b + 88) != 0)
		return dmar_error_set(err, -EBADMSG, "recipe delta: unknown flags or nonzero reserved header fields");
	struct dmar_recipe h = { 0 };
	uint32_t n;
	int rc = header_parse(b, "recipe delta", &h, &n, err);
	if (rc < 0)
		return rc;
	struct dmar_id sum;
	dmar_hash(b, len - DMAR_RECIPE_TRAILER_SIZE, &sum);
	if (memcmp(sum.b, b + len - DMAR_RECIPE_TRAILER_SIZE, DMAR_HASH_SIZE) != 0)
		return dmar_error_set(err, -EBADMSG, "recipe delta: checksum mismatch (corrupt or truncated)");
	uint32_t bn = dmar_get_le32(b + 80), m = dmar_get_le32(b + 84);
	if (bn > DMAR_RECIPE_MAX_ENTRIES)
		return dmar_error_set(err, -EBADMSG, "recipe delta: base of %u entries, the limit is %u", bn,
				      DMAR_RECIPE_MAX_ENTRIES);
	/* First the layout, against the bytes present: nothing is allocated
	 * for edits or entries that are not there. */
	const uint8_t *p = b + DMAR_RECIPE_DELTA_HDR_SIZE, *end = b + len - DMAR_RECIPE_TRAILER_SIZE;
	uint64_t pos = 0, kept = bn, ne = 0;
	for (uint32_t j = 0; j < m; j++) {
		if ((size_t)(end - p) < DMAR_RECIPE_DELTA_EDIT_SIZE)
			return dmar_error_set(err, -EBADMSG, "recipe delta: truncated at edit %u of %u", j, m);
		uint64_t at = dmar_get_le32(p), del = dmar_get_le32(p + 4), ins = dmar_get_le32(p + 8);
		if (dmar_get_le32(p + 12) != 0)
			return dmar_error_set(err, -EBADMSG, "recipe delta: edit %u: nonzero reserved field", j);
		if (at < pos || (!del && !ins))
			return dmar_error_set(err, -EBADMSG, "recipe delta: edit %u: out of order or overlapping", j);
		if (at + del > bn)
			return dmar_error_set(err, -EBADMSG, "recipe delta: edit %u: past the base's %u entries", j, bn);
		p += DMAR_RECIPE_DELTA_EDIT_SIZE;
		if (ins > (uint64_t)(end - p) / DMAR_RECIPE_ENTRY_SIZE)
			return dmar_error_set(err, -EBADMSG, "recipe delta: edit %u: truncated in its entries", j);
		p += ins * DMAR_RECIPE_ENTRY_SIZE;
		pos = at + del;
		kept -= del;
		ne += ins;
	}
	if (p != end)
		return dmar_error_set(err, -EBADMSG, "recipe delta: trailing bytes after edit %u", m);
	if (kept + ne != n)
		return dmar_error_set(err, -EBADMSG, "recipe delta: the edits make %" PRIu64 " entries, the header says %u",
				      kept + ne, n);
	struct dmar_recipe_edit *ed = malloc((m ? m : 1) * sizeof(*ed));
	struct dmar_recipe_entry *e = malloc((ne ? ne : 1) * sizeof(*e));
	if (!ed || !e) {
		free(ed);
		free(e);
		return -ENOMEM;
	}
	p = b + DMAR_RECIPE_DELTA_HDR_SIZE;
	size_t k = 0;
	for (uint32_t j = 0; j < m; j++) {
		ed[j] = (struct dmar_recipe_edit){ .at = dmar_get_le32(p), .del = dmar_get_le32(p + 4),
						   .ins = dmar_get_le32(p + 8), .first = (uint32_t)k };
		p += DMAR_RECIPE_DELTA_EDIT_SIZE;
		for (uint32_t x = 0; x < ed[j].ins; x++, k++, p += DMAR_RECIPE_ENTRY_SIZE) {
			entry_read(p, &e[k]);
			const char *bad = entry_bad(&e[k], h.size, 0);
			if (!bad && e[k].kind == DMAR_RECIPE_HOLE && (e[k].skip || !all_zero(p, DMAR_HASH_SIZE)))
				bad = "hole with an id or skip";
			if (bad) {
				free(ed);
				free(e);
				return dmar_error_set(err, -EBADMSG, "recipe delta: edit %u, entry %u: %s", j, x, bad);
			}
		}
	}
	h.n = n;
	h.e = NULL;
	*d = (struct dmar_recipe_delta){ .head = h, .base_n = bn, .m = m, .edits = ed, .e = e, .ne = (size_t)ne };
	memcpy(d->base.b, b + 48, DMAR_HASH_SIZE);
	return 0;
}

int dmar_recipe_delta_apply(const struct dmar_recipe_delta *d, const struct dmar_recipe *base, struct dmar_recipe *r,
			    struct dmar_error *err)
{
	if (base->n != d->base_n)
		return dmar_error_set(err, -EBADMSG, "recipe delta: the base has %zu entries, the delta says %u",
				      base->n, d->base_n);
	size_t n = d->head.n, k = 0, pos = 0;
	struct dmar_recipe_entry *e = malloc((n ? n : 1) * sizeof(*e));
	if (!e)
		return -ENOMEM;
	/* parse checked the counts: the pieces make exactly n */
	for (uint32_t j = 0; j < d->m; j++) {
		const struct dmar_recipe_edit *x = &d->edits[j];
		memcpy(e + k, base->e + pos, (x->at - pos) * sizeof(*e));
		k += x->at - pos;
		memcpy(e + k, d->e + x->first, x->ins * sizeof(*e));
		k += x->ins;
		pos = (size_t)x->at + x->del;
	}
	memcpy(e + k, base->e + pos, (base->n - pos) * sizeof(*e));
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (e[i].len > d->head.size - total) {
			free(e);
			return dmar_error_set(err, -EBADMSG, "recipe delta: entries add up to more than the size %" PRIu64,
					      d->head.size);
		}
		total += e[i].len;
	}
	if (total != d->head.size) {
		free(e);
		return dmar_error_set(err, -EBADMSG, "recipe delta: entries cover %" PRIu64 " bytes, size says %" PRIu64,
				      total, d->head.size);
	}
	*r = d->head;
	r->e = e;
	return 0;
}

void dmar_recipe_delta_free(struct dmar_recipe_delta *d)
{
	if (!d)
		return;
	free(d->edits);
	free(d->e);
	d->edits = NULL;
	d->e = NULL;
}
