/* SPDX-License-Identifier: MIT */
/*
 * fuzz_recipe - dmar_recipe_parse, dmar_recipe_short_parse and
 * dmar_recipe_delta_parse on arbitrary bytes, and round trips.
 *
 * The input is parsed as it is, then again with its trailer recomputed
 * (a fuzzer cannot forge SHA-256, so without the second parse it would
 * never get past the checksum to the header and entry checks).  Whatever
 * parses must write back to exactly the same bytes, with the same id.  A
 * short recipe has no checksum of its own, and its numbers have one
 * encoding each: whatever parses writes back to the same bytes too.  The
 * header-only parse (X-Dmar-Content commits) must refuse with a message
 * or agree with the full parse, and the recipe id must follow from the
 * header and the content id.  A delta that parses is applied to a base of
 * its base's length; what that gives, made into a delta against the same
 * base again, must parse and apply to the same recipe.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
	fprintf(stderr, "fuzz_recipe: %s\n", what);
	abort();
}

/* dmar_recipe_head_parse of b: refused with a message, or (when the
 * whole parse gave r and id, r not NULL) the same header and id. */
static void check_head(const uint8_t *b, size_t len, bool is_short, const struct dmar_recipe *r,
		       const struct dmar_id *id)
{
	struct dmar_recipe h;
	struct dmar_id hid;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_head_parse(b, len, is_short, &h, &hid, &err);
	if (rc < 0) {
		if (rc != -EBADMSG || err.code != rc || !err.msg[0])
			die("head: refused without -EBADMSG and a message");
		if (r)
			die("head: refused what the whole parse accepts");
		return;
	}
	if (h.e)
		die("head: entries");
	if (!r)
		return;
	if (h.size != r->size || h.mode != r->mode || h.mtime_sec != r->mtime_sec || h.mtime_nsec != r->mtime_nsec ||
	    h.n != r->n || memcmp(hid.b, id->b, DMAR_HASH_SIZE) != 0)
		die("head: differs from the whole parse");
	struct dmar_id cid, rid;
	if (dmar_recipe_ids(r, NULL, &cid) < 0)
		return;
	dmar_recipe_id_of(&h, h.n, &cid, &rid);
	if (!is_short && memcmp(rid.b, id->b, DMAR_HASH_SIZE) != 0)
		die("head: the recipe id does not follow from header and content id");
}

static void check(const uint8_t *b, size_t len)
{
	struct dmar_recipe r;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_parse(b, len, &r, &err);
	if (rc == -EBADMSG)
		check_head(b, len, false, NULL, NULL);
	if (rc == -ENOMEM)
		return;
	if (rc < 0) {
		if (rc != -EBADMSG || err.code != rc || !err.msg[0])
			die("refused without -EBADMSG and a message");
		return;
	}
	if (dmar_recipe_wire_size(r.n) != len)
		die("parsed recipe of another size");
	uint64_t total = 0;
	for (size_t i = 0; i < r.n; i++) {
		if (r.e[i].len == 0 || r.e[i].kind > DMAR_RECIPE_HOLE)
			die("parsed a bad entry");
		total += r.e[i].len;
	}
	if (total != r.size)
		die("entries do not add up to the size");
	uint8_t *out = malloc(len);
	if (!out)
		die("out of memory");
	struct dmar_id id;
	dmar_recipe_write(&r, out, &id);
	if (memcmp(out, b, len) != 0)
		die("write(parse(x)) != x");
	if (memcmp(id.b, b + len - DMAR_RECIPE_TRAILER_SIZE, DMAR_HASH_SIZE) != 0)
		die("the id is not the trailer");
	check_head(b, len, false, &r, &id);
	free(out);
	dmar_recipe_free(&r);
}

static void check_short(const uint8_t *b, size_t len)
{
	struct dmar_recipe r;
	struct dmar_id id;
	unsigned idlen = 0;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_short_parse(b, len, &r, &id, &idlen, &err);
	if (rc == -ENOMEM)
		return;
	if (rc == -EBADMSG)
		check_head(b, len, true, NULL, NULL);
	if (rc < 0) {
		if (rc != -EBADMSG || err.code != rc || !err.msg[0])
			die("short: refused without -EBADMSG and a message");
		return;
	}
	if (idlen < DMAR_RECIPE_SHORT_IDLEN_MIN || idlen > DMAR_HASH_SIZE)
		die("short: parsed a bad idlen");
	uint64_t total = 0;
	for (size_t i = 0; i < r.n; i++) {
		if (r.e[i].len == 0 || r.e[i].kind > DMAR_RECIPE_HOLE)
			die("short: parsed a bad entry");
		for (size_t k = idlen; k < DMAR_HASH_SIZE; k++)
			if (r.e[i].id.b[k])
				die("short: id bytes beyond the prefix");
		total += r.e[i].len;
	}
	if (total != r.size)
		die("short: entries do not add up to the size");
	if (dmar_recipe_short_max_size(r.n) < len)
		die("short: longer than its bound");
	uint8_t *out = malloc(dmar_recipe_short_max_size(r.n));
	if (!out)
		die("out of memory");
	if (dmar_recipe_short_write(&r, &id, idlen, out) != len || memcmp(out, b, len) != 0)
		die("short: write(parse(x)) != x");
	check_head(b, len, true, &r, &id);
	free(out);
	dmar_recipe_free(&r);
}

/* A base of n entries for a delta: chunks of 1000 bytes, every fourth
 * a hole. */
static struct dmar_recipe_entry *base_entries(size_t n, uint64_t *size)
{
	struct dmar_recipe_entry *e = calloc(n ? n : 1, sizeof(*e));
	if (!e)
		die("out of memory");
	*size = 0;
	for (size_t i = 0; i < n; i++) {
		e[i].len = 1000;
		e[i].kind = i % 4 == 3 ? DMAR_RECIPE_HOLE : DMAR_RECIPE_CHUNK;
		if (e[i].kind == DMAR_RECIPE_CHUNK)
			memcpy(e[i].id.b, &i, sizeof(i));
		*size += 1000;
	}
	return e;
}

static void check_delta(const uint8_t *b, size_t len)
{
	struct dmar_recipe_delta d;
	struct dmar_error err = { 0 };
	int rc = dmar_recipe_delta_parse(b, len, &d, &err);
	if (rc == -ENOMEM)
		return;
	if (rc < 0) {
		if (rc != -EBADMSG || err.code != rc || !err.msg[0])
			die("delta: refused without -EBADMSG and a message");
		return;
	}
	if (d.base_n > 100000) { /* a base that size is only memory here */
		dmar_recipe_delta_free(&d);
		return;
	}
	struct dmar_recipe base = { 0 }, r, r2;
	base.n = d.base_n;
	base.e = base_entries(base.n, &base.size);
	memset(&err, 0, sizeof(err));
	rc = dmar_recipe_delta_apply(&d, &base, &r, &err);
	if (rc < 0 && rc != -ENOMEM && (rc != -EBADMSG || err.code != rc || !err.msg[0]))
		die("delta: apply refused without -EBADMSG and a message");
	if (rc == 0) {
		uint64_t total = 0;
		for (size_t i = 0; i < r.n; i++)
			total += r.e[i].len;
		if (r.n != d.head.n || total != r.size)
			die("delta: applied recipe does not add up");
		uint8_t *out = NULL;
		size_t olen = 0;
		struct dmar_recipe_delta d2;
		if (dmar_recipe_delta_make(&base, &d.base, &r, r.n, &out, &olen) == 0) {
			if (dmar_recipe_delta_parse(out, olen, &d2, &err) != 0)
				die("delta: make(apply(x)) does not parse");
			if (dmar_recipe_delta_apply(&d2, &base, &r2, &err) != 0)
				die("delta: make(apply(x)) does not apply");
			if (r2.n != r.n || r2.size != r.size || memcmp(r2.e, r.e, r.n * sizeof(*r.e)) != 0)
				die("delta: apply(make(r)) != r");
			dmar_recipe_free(&r2);
			dmar_recipe_delta_free(&d2);
			free(out);
		}
		dmar_recipe_free(&r);
	}
	free(base.e);
	dmar_recipe_delta_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(data, size);
	check_short(data, size);
	check_delta(data, size);
	if (size < DMAR_RECIPE_TRAILER_SIZE)
		return 0;
	uint8_t *b = malloc(size);
	if (!b)
		return 0;
	memcpy(b, data, size);
	/* The trailer as the format defines it: SHA-256(header || SHA-256(entries)). */
	if (size >= DMAR_RECIPE_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE) {
		uint8_t hb[DMAR_RECIPE_HDR_SIZE + DMAR_HASH_SIZE];
		struct dmar_id cid, sum;
		dmar_hash(b + DMAR_RECIPE_HDR_SIZE, size - DMAR_RECIPE_HDR_SIZE - DMAR_RECIPE_TRAILER_SIZE, &cid);
		memcpy(hb, b, DMAR_RECIPE_HDR_SIZE);
		memcpy(hb + DMAR_RECIPE_HDR_SIZE, cid.b, DMAR_HASH_SIZE);
		dmar_hash(hb, sizeof(hb), &sum);
		memcpy(b + size - DMAR_RECIPE_TRAILER_SIZE, sum.b, DMAR_HASH_SIZE);
		check(b, size);
	}
	/* A delta's trailer: SHA-256 of every byte before it. */
	struct dmar_id dsum;
	dmar_hash(b, size - DMAR_RECIPE_TRAILER_SIZE, &dsum);
	memcpy(b + size - DMAR_RECIPE_TRAILER_SIZE, dsum.b, DMAR_HASH_SIZE);
	check_delta(b, size);
	free(b);
	return 0;
}
