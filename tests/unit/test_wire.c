/* SPDX-License-Identifier: MIT */
/*
 * test_wire - the wire formats of net/wire.h: recipes, chunk batches (the
 * incremental parser, at every split of the body), chunk verification, API
 * paths and the errno names.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "prng.h"

#include "codec/format.h"
#include "net/wire.h"

#define assert_msg_contains(err, s)                                                  \
	do {                                                                         \
		if (!strstr((err)->msg, (s)))                                        \
			fail_msg("message \"%s\" lacks \"%s\"", (err)->msg, (s));    \
	} while (0)

/* ---- recipes ------------------------------------------------------------- */

static void id_of(const void *b, size_t n, struct dmar_id *id)
{
	dmar_hash(b, n, id);
}

/* Three chunks and two holes: 10000 + 5000 (a hole) + 300 (part of a
 * chunk) + 1 MiB (a hole) + 4 MiB (a whole largest chunk). */
static void sample_recipe(struct dmar_recipe *r, struct dmar_recipe_entry e[5])
{
	memset(e, 0, 5 * sizeof(*e));
	id_of("a", 1, &e[0].id);
	e[0].len = 10000;
	e[0].kind = DMAR_RECIPE_CHUNK;
	e[1].len = 5000;
	e[1].kind = DMAR_RECIPE_HOLE;
	id_of("b", 1, &e[2].id);
	e[2].len = 300;
	e[2].skip = 700;
	e[2].kind = DMAR_RECIPE_CHUNK;
	e[3].len = 1u << 20;
	e[3].kind = DMAR_RECIPE_HOLE;
	id_of("c", 1, &e[4].id);
	e[4].len = DMAR_WIRE_CHUNK_MAX;
	e[4].kind = DMAR_RECIPE_CHUNK;
	*r = (struct dmar_recipe){
		.size = 10000 + 5000 + 300 + (1u << 20) + DMAR_WIRE_CHUNK_MAX,
		.mode = 0640,
		.mtime_sec = -12345,
		.mtime_nsec = 999999999,
		.n = 5,
		.e = e,
	};
}

static uint8_t *write_recipe(const struct dmar_recipe *r, size_t *len, struct dmar_id *id)
{
	*len = dmar_recipe_wire_size(r->n);
	uint8_t *b = malloc(*len + 64);
	assert_non_null(b);
	dmar_recipe_write(r, b, id);
	return b;
}

/* Recompute the trailer after an edit, so that the check under test (not
 * the checksum) is what refuses the recipe. */
/* The recipe id of len bytes of recipe as the format defines it, by
 * hand: SHA-256(header || SHA-256(entries)); *cid the content id. */
static void spec_ids(const uint8_t *b, size_t len, struct dmar_id *rid, struct dmar_id *cid)
{
	uint8_t h[48 + 32];
	dmar_hash(b + 48, len - 48 - 32, cid);
	memcpy(h, b, 48);
	memcpy(h + 48, cid->b, 32);
	dmar_hash(h, sizeof(h), rid);
}

static void reseal(uint8_t *b, size_t len)
{
	struct dmar_id sum, cid;
	spec_ids(b, len, &sum, &cid);
	memcpy(b + len - DMAR_RECIPE_TRAILER_SIZE, sum.b, DMAR_HASH_SIZE);
}

static void test_recipe_roundtrip(void **state)
{
	struct dmar_recipe r, got;
	struct dmar_recipe_entry e[5];
	struct dmar_error err = { 0 };
	struct dmar_id id, body;
	size_t len;

	sample_recipe(&r, e);
	assert_int_equal(dmar_recipe_wire_size(5), 48 + 5 * 48 + 32);
	uint8_t *b = write_recipe(&r, &len, &id);
	assert_memory_equal(b, "DMRC", 4);
	struct dmar_id cid, rid2, cid2, rid3;
	spec_ids(b, len, &body, &cid);
	assert_memory_equal(id.b, body.b, 32);
	assert_memory_equal(b + len - 32, id.b, 32);
	/* The ids without writing the recipe, and the recipe id from the
	 * content id: the same. */
	assert_int_equal(dmar_recipe_ids(&r, &rid2, &cid2), 0);
	assert_memory_equal(rid2.b, id.b, 32);
	assert_memory_equal(cid2.b, cid.b, 32);
	dmar_recipe_id_of(&r, r.n, &cid, &rid3);
	assert_memory_equal(rid3.b, id.b, 32);
	/* The content id does not depend on name, mode or mtime; the
	 * recipe id does. */
	struct dmar_recipe r2 = r;
	r2.mode ^= 0111;
	r2.mtime_sec += 1;
	assert_int_equal(dmar_recipe_ids(&r2, &rid2, &cid2), 0);
	assert_memory_equal(cid2.b, cid.b, 32);
	assert_memory_not_equal(rid2.b, id.b, 32);
	/* The header alone: its fields, the id, no entries. */
	struct dmar_recipe head;
	struct dmar_id hid;
	assert_int_equal(dmar_recipe_head_parse(b, len, false, &head, &hid, &err), 0);
	assert_memory_equal(hid.b, id.b, 32);
	assert_int_equal(head.n, r.n);
	assert_int_equal(head.size, r.size);
	assert_int_equal(head.mode, r.mode);
	assert_null(head.e);
	assert_int_equal(dmar_recipe_head_parse(b, len - 1, false, &head, &hid, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "truncated"));
	memset(&err, 0, sizeof(err));

	assert_int_equal(dmar_recipe_parse(b, len, &got, &err), 0);
	assert_int_equal(err.code, 0);
	assert_int_equal(got.size, r.size);
	assert_int_equal(got.mode, r.mode);
	assert_int_equal(got.mtime_sec, r.mtime_sec);
	assert_int_equal(got.mtime_nsec, r.mtime_nsec);
	assert_int_equal(got.n, 5);
	for (size_t i = 0; i < 5; i++) {
		assert_memory_equal(got.e[i].id.b, e[i].id.b, 32);
		assert_int_equal(got.e[i].len, e[i].len);
		assert_int_equal(got.e[i].skip, e[i].skip);
		assert_int_equal(got.e[i].kind, e[i].kind);
	}
	/* Writing what was parsed gives the same bytes. */
	uint8_t *again = malloc(len);
	assert_non_null(again);
	dmar_recipe_write(&got, again, NULL);
	assert_memory_equal(again, b, len);
	free(again);
	dmar_recipe_free(&got);
	assert_null(got.e);
	dmar_recipe_free(NULL);
	free(b);
}

static void test_recipe_empty(void **state)
{
	struct dmar_recipe r = { .mode = 0644 }, got;
	struct dmar_error err = { 0 };
	size_t len;
	uint8_t *b = write_recipe(&r, &len, NULL);
	assert_int_equal(len, 80);
	assert_int_equal(dmar_recipe_parse(b, len, &got, &err), 0);
	assert_int_equal(got.n, 0);
	assert_int_equal(got.size, 0);
	dmar_recipe_free(&got);
	free(b);
}

/* The writer takes a hole's id and skip as zero whatever the struct says,
 * and keeps only the permission bits of mode. */
static void test_recipe_write_normalizes(void **state)
{
	struct dmar_recipe r, got;
	struct dmar_recipe_entry e[5];
	struct dmar_error err = { 0 };
	size_t len;
	sample_recipe(&r, e);
	id_of("junk", 4, &e[1].id);
	e[1].skip = 9;
	r.mode = 0100755;
	uint8_t *b = write_recipe(&r, &len, NULL);
	assert_int_equal(dmar_recipe_parse(b, len, &got, &err), 0);
	assert_int_equal(got.mode, 0755);
	assert_int_equal(got.e[1].skip, 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(got.e[1].id.b[i], 0);
	dmar_recipe_free(&got);
	free(b);
}

enum { RC_SEAL = 1 };

struct recipe_case {
	const char *name;
	size_t off;    /* byte to change */
	int width;     /* 1, 2, 4, 8: write value there (le); 0: xor 1 into byte */
	uint64_t value;
	int flags;     /* RC_SEAL: recompute the trailer after the edit */
	const char *msg;
};

#define E(i) (48 + 48 * (i))
static const struct recipe_case recipe_cases[] = {
	{ "magic", 0, 1, 'X', RC_SEAL, "bad magic" },
	{ "version 2", 4, 2, 2, RC_SEAL, "unsupported version 2" },
	{ "version 0", 4, 2, 0, RC_SEAL, "unsupported version 0" },
	{ "flags", 6, 2, 1, RC_SEAL, "flags" },
	{ "reserved 20", 20, 4, 1, RC_SEAL, "reserved" },
	{ "reserved 40", 47, 1, 0x80, RC_SEAL, "reserved" },
	{ "size limit", 8, 8, (1ull << 62) + 1, RC_SEAL, "beyond the limit" },
	{ "size too big", 8, 8, 10000 + 5000 + 300 + (1u << 20) + (4u << 20) + 1, RC_SEAL, "entries cover" },
	{ "size too small", 8, 8, 10000 + 5000 + 300 + (1u << 20) + (4u << 20) - 1, RC_SEAL,
	  "add up to more than the size" },
	{ "mode", 16, 4, 0100644, RC_SEAL, "mode" },
	{ "nsec", 32, 4, 1000000000, RC_SEAL, "nanoseconds" },
	{ "n limit", 36, 4, (1u << 24) + 1, RC_SEAL, "the limit is" },
	{ "n bigger", 36, 4, 6, RC_SEAL, "truncated" },
	{ "n smaller", 36, 4, 4, RC_SEAL, "trailing bytes" },
	{ "checksum", 100, 0, 0, 0, "checksum mismatch" },
	{ "trailer", 48 + 5 * 48 + 31, 0, 0, 0, "checksum mismatch" },
	{ "len 0", E(0) + 32, 8, 0, RC_SEAL, "entry 0: length 0" },
	{ "hole len 0", E(1) + 32, 8, 0, RC_SEAL, "entry 1: length 0" },
	{ "chunk too long", E(4) + 32, 8, (4u << 20) + 1, RC_SEAL, "entry 4: range beyond" },
	{ "skip past max", E(4) + 40, 4, 1, RC_SEAL, "entry 4: range beyond" },
	{ "skip huge", E(2) + 40, 4, 0xffffffff, RC_SEAL, "entry 2: range beyond" },
	{ "hole id", E(1) + 5, 1, 1, RC_SEAL, "entry 1: hole with an id" },
	{ "hole skip", E(3) + 40, 4, 1, RC_SEAL, "entry 3: hole with an id or skip" },
	{ "kind 2", E(2) + 44, 4, 2, RC_SEAL, "entry 2: unknown kind" },
	{ "kind high", E(0) + 44, 4, 0x80000000u, RC_SEAL, "entry 0: unknown kind" },
	{ "hole huge", E(3) + 32, 8, UINT64_MAX, RC_SEAL, "entry 3: lengths add up" },
};
#undef E

static void test_recipe_rejects(void **state)
{
	struct dmar_recipe r;
	struct dmar_recipe_entry e[5];
	size_t len;
	sample_recipe(&r, e);
	uint8_t *good = write_recipe(&r, &len, NULL);
	uint8_t *b = malloc(len);
	assert_non_null(b);

	for (size_t k = 0; k < sizeof(recipe_cases) / sizeof(*recipe_cases); k++) {
		const struct recipe_case *c = &recipe_cases[k];
		struct dmar_error err = { 0 };
		struct dmar_recipe got;
		memset(&got, 0xa5, sizeof(got));
		memcpy(b, good, len);
		switch (c->width) {
		case 0: b[c->off] ^= 1; break;
		case 1: b[c->off] = (uint8_t)c->value; break;
		case 2: dmar_put_le16(b + c->off, (uint16_t)c->value); break;
		case 4: dmar_put_le32(b + c->off, (uint32_t)c->value); break;
		case 8: dmar_put_le64(b + c->off, c->value); break;
		}
		if (c->flags & RC_SEAL)
			reseal(b, len);
		int rc = dmar_recipe_parse(b, len, &got, &err);
		if (rc != -EBADMSG)
			fail_msg("%s: %d, expected -EBADMSG", c->name, rc);
		assert_int_equal(err.code, -EBADMSG);
		if (!strstr(err.msg, c->msg))
			fail_msg("%s: message \"%s\" lacks \"%s\"", c->name, err.msg, c->msg);
		assert_true(strncmp(err.msg, "recipe: ", 8) == 0);
		/* r is written only on success. */
		struct dmar_recipe untouched;
		memset(&untouched, 0xa5, sizeof(untouched));
		assert_memory_equal(&got, &untouched, sizeof(got));
	}
	free(b);
	free(good);
}

static void test_recipe_lengths(void **state)
{
	struct dmar_recipe r, got;
	struct dmar_recipe_entry e[5];
	size_t len;
	sample_recipe(&r, e);
	uint8_t *good = write_recipe(&r, &len, NULL);
	uint8_t *b = malloc(len + 1);
	assert_non_null(b);

	/* Every truncation, then one byte more. */
	for (size_t l = 0; l < len; l++) {
		struct dmar_error err = { 0 };
		memcpy(b, good, l);
		assert_int_equal(dmar_recipe_parse(b, l, &got, &err), -EBADMSG);
		assert_true(strstr(err.msg, "truncated") != NULL);
	}
	struct dmar_error err = { 0 };
	memcpy(b, good, len);
	b[len] = 0;
	assert_int_equal(dmar_recipe_parse(b, len + 1, &got, &err), -EBADMSG);
	assert_msg_contains(&err, "trailing bytes");
	/* NULL err is fine. */
	assert_int_equal(dmar_recipe_parse(b, len - 1, &got, NULL), -EBADMSG);
	free(b);
	free(good);
}

/* ---- short recipes ------------------------------------------------------- */

static void test_short_roundtrip(void **state)
{
	struct dmar_recipe r, got;
	struct dmar_recipe_entry e[5];
	struct dmar_error err = { 0 };
	struct dmar_id id, rid;
	size_t flen;
	unsigned idlen = 0;

	sample_recipe(&r, e);
	uint8_t *full = write_recipe(&r, &flen, &id);
	uint8_t *b = malloc(dmar_recipe_short_max_size(r.n));
	assert_non_null(b);
	size_t len = dmar_recipe_short_write(&r, &id, DMAR_RECIPE_SHORT_IDLEN, b);
	/* header, then tag+8+2 (10000), tag+2 (5000), tag+8+2 (300)+2 (700),
	 * tag+3 (1 MiB), tag+8+4 (4 MiB) */
	assert_int_equal(len, 80 + 11 + 3 + 13 + 4 + 13);
	assert_true(len <= dmar_recipe_short_max_size(r.n));
	assert_memory_equal(b, "DMRS", 4);
	assert_int_equal(b[6], 8);
	assert_memory_equal(b + 48, id.b, 32);

	struct dmar_recipe head;
	assert_int_equal(dmar_recipe_head_parse(b, len, true, &head, &rid, &err), 0);
	assert_memory_equal(rid.b, id.b, 32);
	assert_int_equal(head.n, 5);
	assert_int_equal(head.mtime_sec, r.mtime_sec);
	assert_null(head.e);
	assert_int_equal(dmar_recipe_head_parse(b, 79, true, &head, &rid, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "short recipe: truncated"));
	memset(&err, 0, sizeof(err));

	assert_int_equal(dmar_recipe_short_parse(b, len, &got, &rid, &idlen, &err), 0);
	assert_int_equal(idlen, 8);
	assert_memory_equal(rid.b, id.b, 32);
	assert_int_equal(got.size, r.size);
	assert_int_equal(got.mode, r.mode);
	assert_int_equal(got.mtime_sec, r.mtime_sec);
	assert_int_equal(got.mtime_nsec, r.mtime_nsec);
	assert_int_equal(got.n, 5);
	static const uint8_t zero[32];
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(got.e[i].len, e[i].len);
		assert_int_equal(got.e[i].skip, e[i].skip);
		assert_int_equal(got.e[i].kind, e[i].kind);
		/* only the prefix travels; the rest is zero until completed */
		assert_memory_equal(got.e[i].id.b, e[i].id.b, 8);
		assert_memory_equal(got.e[i].id.b + 8, zero, 24);
	}
	/* Completed with the full ids, it is the recipe id names. */
	for (size_t i = 0; i < 5; i++)
		got.e[i].id = e[i].id;
	uint8_t *again = malloc(flen);
	struct dmar_id again_id;
	dmar_recipe_write(&got, again, &again_id);
	assert_memory_equal(again, full, flen);
	assert_memory_equal(again_id.b, id.b, 32);
	free(again);
	dmar_recipe_free(&got);

	/* Whole ids (idlen 32) are allowed too. */
	len = dmar_recipe_short_write(&r, &id, 32, b);
	assert_int_equal(dmar_recipe_short_parse(b, len, &got, &rid, &idlen, &err), 0);
	assert_int_equal(idlen, 32);
	for (size_t i = 0; i < 5; i++)
		if (e[i].kind == DMAR_RECIPE_CHUNK)
			assert_memory_equal(got.e[i].id.b, e[i].id.b, 32);
	dmar_recipe_free(&got);
	free(b);
	free(full);
}

/* Parse must refuse b (len bytes) with a message containing what. */
static void short_refused(const uint8_t *b, size_t len, const char *what)
{
	struct dmar_recipe got;
	struct dmar_id rid;
	unsigned idlen;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_recipe_short_parse(b, len, &got, &rid, &idlen, &err), -EBADMSG);
	assert_msg_contains(&err, what);
}

/* A recipe of n entries: chunks with ids from seed, every 50th a hole. */
static void delta_recipe(struct dmar_recipe *r, size_t n, uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	r->mode = 0640;
	r->mtime_sec = 1700000002;
	r->e = calloc(n + 3200, sizeof(*r->e)); /* room for a new version of 3000 */
	assert_non_null(r->e);
	for (size_t i = 0; i < n; i++) {
		struct dmar_recipe_entry *e = &r->e[r->n++];
		e->len = 30000 + i % 7;
		e->kind = i % 50 == 49 ? DMAR_RECIPE_HOLE : DMAR_RECIPE_CHUNK;
		if (e->kind == DMAR_RECIPE_CHUNK)
			fill_random(e->id.b, DMAR_HASH_SIZE, seed + i);
		r->size += e->len;
	}
}

/* A new version: base's entries with regions rewritten, deleted and
 * inserted, and one rewritten region longer than the delta's slack;
 * made, parsed and applied, it gives the new version back. */
static void test_delta_roundtrip(void **state)
{
	(void)state;
	struct dmar_recipe base, r, got;
	delta_recipe(&base, 3000, 1);
	delta_recipe(&r, 0, 0);
	uint64_t s = 99;
	size_t fresh = 0;
	for (size_t i = 0; i < base.n; i++) {
		if (i >= 700 && i < 705)
			continue; /* deleted */
		struct dmar_recipe_entry e = base.e[i];
		if (e.kind == DMAR_RECIPE_CHUNK && (i % 200 == 17 || (i >= 2000 && i < 2150))) { /* rewritten */
			fill_random(e.id.b, DMAR_HASH_SIZE, xorshift64(&s));
			fresh++;
		}
		if (i == 1500) { /* two inserted */
			for (int x = 0; x < 2; x++) {
				struct dmar_recipe_entry n = { .len = 1234, .skip = 10, .kind = DMAR_RECIPE_CHUNK };
				fill_random(n.id.b, DMAR_HASH_SIZE, xorshift64(&s));
				r.e[r.n++] = n;
				r.size += n.len;
				fresh++;
			}
		}
		r.e[r.n++] = e;
		r.size += e.len;
	}
	struct dmar_id cid;
	fill_random(cid.b, DMAR_HASH_SIZE, 5);
	uint8_t *b = NULL;
	size_t len = 0;
	assert_int_equal(dmar_recipe_delta_make(&base, &cid, &r, r.n / 4, &b, &len), 0);
	/* about the new entries' bytes, nothing like a recipe's */
	assert_true(len < (fresh + 40) * DMAR_RECIPE_ENTRY_SIZE);
	struct dmar_recipe_delta d;
	struct dmar_error err = { 0 };
	assert_int_equal(dmar_recipe_delta_parse(b, len, &d, &err), 0);
	assert_memory_equal(d.base.b, cid.b, DMAR_HASH_SIZE);
	assert_int_equal(d.base_n, base.n);
	assert_int_equal(dmar_recipe_delta_apply(&d, &base, &got, &err), 0);
	assert_int_equal(got.n, r.n);
	assert_int_equal(got.size, r.size);
	assert_int_equal(got.mode, r.mode);
	assert_true(got.mtime_sec == r.mtime_sec);
	assert_memory_equal(got.e, r.e, r.n * sizeof(*r.e));
	dmar_recipe_free(&got);

	/* Applied to another base, it is refused with a message. */
	base.n--;
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_recipe_delta_apply(&d, &base, &got, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "base"));
	base.n++;
	dmar_recipe_delta_free(&d);

	/* A corrupt byte: the checksum says so. */
	b[DMAR_RECIPE_DELTA_HDR_SIZE + 1] ^= 4;
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_recipe_delta_parse(b, len, &d, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "checksum"));
	free(b);

	/* Nothing in common: more new entries than allowed. */
	struct dmar_recipe other;
	delta_recipe(&other, 3000, 777777);
	assert_int_equal(dmar_recipe_delta_make(&base, &cid, &other, 3000 / 4, &b, &len), -E2BIG);
	dmar_recipe_free(&other);
	dmar_recipe_free(&r);
	dmar_recipe_free(&base);
}

static void test_short_rejects(void **state)
{
	struct dmar_recipe r;
	struct dmar_recipe_entry e[5];
	struct dmar_id id;
	size_t flen;

	sample_recipe(&r, e);
	uint8_t *full = write_recipe(&r, &flen, &id);
	uint8_t *b = malloc(dmar_recipe_short_max_size(r.n) + 1), *t = malloc(dmar_recipe_short_max_size(r.n) + 1);
	size_t len = dmar_recipe_short_write(&r, &id, DMAR_RECIPE_SHORT_IDLEN, b);

	/* Every strict prefix is refused, never read beyond. */
	for (size_t n = 0; n < len; n++) {
		uint8_t *cut = malloc(n ? n : 1);
		memcpy(cut, b, n);
		struct dmar_recipe got;
		struct dmar_id rid;
		unsigned idlen;
		struct dmar_error err = { 0 };
		assert_int_equal(dmar_recipe_short_parse(cut, n, &got, &rid, &idlen, &err), -EBADMSG);
		free(cut);
	}
#define MUTATE(off, val, what)                                      \
	do {                                                        \
		memcpy(t, b, len);                                  \
		t[off] = (uint8_t)(val);                            \
		short_refused(t, len, what);                        \
	} while (0)
	MUTATE(0, 'X', "bad magic");
	MUTATE(4, 2, "unsupported version");
	MUTATE(6, 7, "id prefix of 7 bytes");
	MUTATE(6, 33, "id prefix of 33 bytes");
	MUTATE(7, 1, "reserved");
	MUTATE(20, 1, "reserved");
	MUTATE(17, 0x10, "mode"); /* 010000 << 8: beyond 07777 */
	MUTATE(80, 3, "entry 0: unknown tag");
	/* entry 1 is the hole at 80 + 11: tag 1, then 5000 = 0x88 0x27 */
	memcpy(t, b, 80 + 11 + 1); /* the hole's 5000 as 0: a length 0 */
	t[80 + 11 + 1] = 0;
	memcpy(t + 80 + 11 + 2, b + 80 + 11 + 3, len - (80 + 11 + 3));
	short_refused(t, len - 1, "entry 1: length 0");
	/* a non-canonical number: 5000 written with a trailing zero group */
	memcpy(t, b, 80 + 11 + 1);
	t[80 + 11 + 1] = 0x88;
	t[80 + 11 + 2] = 0xa7;
	t[80 + 11 + 3] = 0x00;
	memcpy(t + 80 + 11 + 4, b + 80 + 11 + 3, len - (80 + 11 + 3));
	short_refused(t, len + 1, "entry 1: truncated or non-canonical number");
	/* tag 2 with skip 0 */
	memcpy(t, b, len);
	t[80 + 14 + 1 + 8 + 2] = 0; /* entry 2's skip (700 = 0xbc 0x05): first byte */
	t[80 + 14 + 1 + 8 + 3] = 0;
	short_refused(t, len, "entry 2");
	/* trailing bytes */
	memcpy(t, b, len);
	t[len] = 0;
	short_refused(t, len + 1, "1 bytes after the last entry");
	/* a count the bytes cannot hold */
	memcpy(t, b, len);
	dmar_put_le32(t + 36, 1000);
	short_refused(t, len, "cannot hold 1000 entries");
	/* the size does not add up */
	memcpy(t, b, len);
	dmar_put_le64(t + 8, r.size + 1);
	short_refused(t, len, "entries cover");
#undef MUTATE
	free(t);
	free(b);
	free(full);
}

/* ---- chunk batches ------------------------------------------------------- */

struct rec {
	struct dmar_id id;
	uint8_t enc;
	uint32_t len, stored;
	uint8_t *payload;
};

struct batch {
	uint8_t *b;
	size_t len, cap;
	struct rec r[64];
	unsigned n;
};

static void batch_put(struct batch *bt, const void *p, size_t n)
{
	if (bt->len + n > bt->cap) {
		bt->cap = (bt->len + n) * 2;
		bt->b = realloc(bt->b, bt->cap);
		assert_non_null(bt->b);
	}
	memcpy(bt->b + bt->len, p, n);
	bt->len += n;
}

/* A magicless zstd frame of data, the way the codec writes them. */
static uint8_t *zstd_magicless(const uint8_t *data, size_t len, size_t *out_len)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	assert_non_null(cc);
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_format, ZSTD_f_zstd1_magicless)));
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3)));
	size_t cap = ZSTD_compressBound(len);
	uint8_t *out = malloc(cap);
	assert_non_null(out);
	size_t r = ZSTD_compress2(cc, out, cap, data, len);
	assert_false(ZSTD_isError(r));
	ZSTD_freeCCtx(cc);
	*out_len = r;
	return out;
}

/* Append one record of data (enc raw or zstd) to bt, and remember it. */
static void batch_add(struct batch *bt, const uint8_t *data, uint32_t len, uint8_t enc)
{
	struct rec *r = &bt->r[bt->n++];
	dmar_hash(data, len, &r->id);
	r->enc = enc;
	r->len = len;
	if (enc == DMAR_WIRE_ZSTD) {
		size_t s;
		r->payload = zstd_magicless(data, len, &s);
		r->stored = (uint32_t)s;
	} else {
		r->payload = malloc(len);
		assert_non_null(r->payload);
		memcpy(r->payload, data, len);
		r->stored = len;
	}
	struct dmar_wire_chunk c = { .id = r->id, .enc = enc, .len = len, .stored = r->stored };
	uint8_t h[DMAR_BATCH_REC_SIZE];
	dmar_batch_write_record(h, &c);
	batch_put(bt, h, sizeof(h));
	batch_put(bt, r->payload, r->stored);
}

static void batch_header(struct batch *bt, uint32_t count)
{
	uint8_t h[DMAR_BATCH_HDR_SIZE];
	dmar_batch_write_header(h, count);
	batch_put(bt, h, sizeof(h));
}

static void batch_free(struct batch *bt)
{
	for (unsigned i = 0; i < bt->n; i++)
		free(bt->r[i].payload);
	free(bt->b);
	memset(bt, 0, sizeof(*bt));
}

/* Six records: raw and zstd, of 1 byte up to 70000 bytes, text and noise. */
static void sample_batch(struct batch *bt, bool small)
{
	static uint8_t text[70000], noise[5000];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (uint8_t)("the quick brown fox jumps over the lazy dog "[i % 44] + (i / 4400) % 3);
	fill_random(noise, sizeof(noise), 42);
	memset(bt, 0, sizeof(*bt));
	batch_header(bt, 6);
	batch_add(bt, text, small ? 300 : 70000, DMAR_WIRE_ZSTD);
	batch_add(bt, noise, 1, DMAR_WIRE_RAW);
	batch_add(bt, noise, small ? 100 : 5000, DMAR_WIRE_RAW);
	batch_add(bt, text + 7, 1, DMAR_WIRE_ZSTD);
	batch_add(bt, noise + 1, small ? 200 : 5000 - 1, DMAR_WIRE_ZSTD); /* incompressible */
	batch_add(bt, text + 100, small ? 64 : 20000, DMAR_WIRE_RAW);
}

/* What the callback saw: copies of the records, in order. */
struct seen {
	struct rec r[64];
	unsigned n;
	int fail_at; /* return -ENOSPC for record fail_at (-1: never) */
	unsigned calls;
};

static int collect(void *ctx, const struct dmar_wire_chunk *c)
{
	struct seen *s = ctx;
	s->calls++;
	if (s->fail_at >= 0 && s->n == (unsigned)s->fail_at)
		return -ENOSPC;
	assert_true(s->n < 64);
	struct rec *r = &s->r[s->n++];
	r->id = c->id;
	r->enc = c->enc;
	r->len = c->len;
	r->stored = c->stored;
	r->payload = malloc(c->stored);
	assert_non_null(r->payload);
	memcpy(r->payload, c->payload, c->stored);
	return 0;
}

static void seen_free(struct seen *s)
{
	for (unsigned i = 0; i < s->n; i++)
		free(s->r[i].payload);
	memset(s, 0, sizeof(*s));
}

static void assert_same_records(const struct batch *bt, const struct seen *s)
{
	assert_int_equal(s->n, bt->n);
	for (unsigned i = 0; i < bt->n; i++) {
		assert_memory_equal(s->r[i].id.b, bt->r[i].id.b, 32);
		assert_int_equal(s->r[i].enc, bt->r[i].enc);
		assert_int_equal(s->r[i].len, bt->r[i].len);
		assert_int_equal(s->r[i].stored, bt->r[i].stored);
		assert_memory_equal(s->r[i].payload, bt->r[i].payload, bt->r[i].stored);
	}
}

/*
 * Feed buf to a new parser in pieces: cuts[0..ncuts) are increasing split
 * offsets.  Returns the first error of feed or finish (0 if none); s gets
 * the records.
 */
static int parse_cuts(const uint8_t *buf, size_t len, const size_t *cuts, size_t ncuts, uint32_t max_count,
		      struct seen *s, struct dmar_error *err)
{
	struct dmar_batch_parser *p;
	assert_int_equal(dmar_batch_parser_new(&p, max_count, collect, s), 0);
	size_t pos = 0;
	int r = 0;
	for (size_t i = 0; i <= ncuts && r == 0; i++) {
		size_t end = i < ncuts ? cuts[i] : len;
		/* Pieces are exact-size copies, so ASan sees a read past them. */
		uint8_t *piece = malloc(end - pos + 1);
		assert_non_null(piece);
		memcpy(piece, buf + pos, end - pos);
		r = dmar_batch_parser_feed(p, piece, end - pos, err);
		free(piece);
		pos = end;
	}
	if (r == 0)
		r = dmar_batch_parser_finish(p, err);
	dmar_batch_parser_free(p);
	return r;
}

/* Feed buf in pieces of `piece` bytes (0: all at once). */
static int parse_pieces(const uint8_t *buf, size_t len, size_t piece, uint32_t max_count, struct seen *s,
			struct dmar_error *err)
{
	size_t ncuts = piece && len ? (len - 1) / piece : 0;
	size_t *cuts = malloc((ncuts + 1) * sizeof(*cuts));
	assert_non_null(cuts);
	for (size_t i = 0; i < ncuts; i++)
		cuts[i] = (i + 1) * piece;
	int r = parse_cuts(buf, len, cuts, ncuts, max_count, s, err);
	free(cuts);
	return r;
}

static void test_batch_whole(void **state)
{
	struct batch bt;
	struct seen s = { .fail_at = -1 };
	struct dmar_error err = { 0 };
	sample_batch(&bt, false);
	assert_int_equal(parse_pieces(bt.b, bt.len, 0, 6, &s, &err), 0);
	assert_int_equal(err.code, 0);
	assert_same_records(&bt, &s);
	/* A record that arrives whole is handed over in place. */
	seen_free(&s);
	batch_free(&bt);
}

static void test_batch_bytewise(void **state)
{
	struct batch bt;
	struct dmar_error err = { 0 };
	sample_batch(&bt, false);
	static const size_t pieces[] = { 1, 2, 3, 7, 16, 43, 44, 45, 4096, 65536 };
	for (size_t k = 0; k < sizeof(pieces) / sizeof(*pieces); k++) {
		struct seen s = { .fail_at = -1 };
		assert_int_equal(parse_pieces(bt.b, bt.len, pieces[k], 6, &s, &err), 0);
		assert_same_records(&bt, &s);
		seen_free(&s);
	}
	batch_free(&bt);
}

/* One cut at every offset, then two cuts at every pair of offsets. */
static void test_batch_every_split(void **state)
{
	struct batch bt;
	struct dmar_error err = { 0 };
	sample_batch(&bt, true);
	for (size_t a = 0; a <= bt.len; a++) {
		struct seen s = { .fail_at = -1 };
		assert_int_equal(parse_cuts(bt.b, bt.len, &a, 1, 6, &s, &err), 0);
		assert_same_records(&bt, &s);
		seen_free(&s);
	}
	/* Pairs over a batch of small records only (still ~100k parses). */
	struct batch tiny = { 0 };
	uint8_t d[40];
	fill_random(d, sizeof(d), 7);
	batch_header(&tiny, 4);
	batch_add(&tiny, d, 10, DMAR_WIRE_RAW);
	batch_add(&tiny, d + 10, 1, DMAR_WIRE_RAW);
	batch_add(&tiny, d, 40, DMAR_WIRE_ZSTD);
	batch_add(&tiny, d + 1, 29, DMAR_WIRE_RAW);
	for (size_t a = 0; a <= tiny.len; a++)
		for (size_t b = a; b <= tiny.len; b++) {
			struct seen s = { .fail_at = -1 };
			size_t cuts[2] = { a, b };
			assert_int_equal(parse_cuts(tiny.b, tiny.len, cuts, 2, 4, &s, &err), 0);
			assert_same_records(&tiny, &s);
			seen_free(&s);
		}
	batch_free(&tiny);
	batch_free(&bt);
}

static void test_batch_random_splits(void **state)
{
	struct batch bt;
	struct dmar_error err = { 0 };
	uint64_t rs = 0xba7c4;
	sample_batch(&bt, false);
	for (int iter = 0; iter < 300; iter++) {
		size_t cuts[64], n = 0, pos = 0;
		unsigned mode = iter % 3;
		while (n < 64) {
			uint64_t x = xorshift64(&rs);
			/* Short pieces near record boundaries, long ones across payloads. */
			size_t step = mode == 0 ? 1 + x % 64 : mode == 1 ? 1 + x % 4000 : 1 + x % 40000;
			pos += step;
			if (pos >= bt.len)
				break;
			cuts[n++] = pos;
		}
		struct seen s = { .fail_at = -1 };
		assert_int_equal(parse_cuts(bt.b, bt.len, cuts, n, 6, &s, &err), 0);
		assert_same_records(&bt, &s);
		seen_free(&s);
	}
	batch_free(&bt);
}

/* Empty pieces anywhere change nothing. */
static void test_batch_empty_feeds(void **state)
{
	struct batch bt;
	struct dmar_error err = { 0 };
	struct seen s = { .fail_at = -1 };
	struct dmar_batch_parser *p;
	sample_batch(&bt, true);
	assert_int_equal(dmar_batch_parser_new(&p, 6, collect, &s), 0);
	assert_int_equal(dmar_batch_parser_count(p), 0);
	assert_int_equal(dmar_batch_parser_feed(p, NULL, 0, &err), 0);
	for (size_t i = 0; i < bt.len; i += 5) {
		size_t n = bt.len - i < 5 ? bt.len - i : 5;
		assert_int_equal(dmar_batch_parser_feed(p, bt.b + i, n, &err), 0);
		assert_int_equal(dmar_batch_parser_feed(p, bt.b + i, 0, &err), 0);
		if (i >= DMAR_BATCH_HDR_SIZE)
			assert_int_equal(dmar_batch_parser_count(p), 6);
	}
	assert_int_equal(dmar_batch_parser_finish(p, &err), 0);
	assert_same_records(&bt, &s);
	dmar_batch_parser_free(p);
	dmar_batch_parser_free(NULL);
	seen_free(&s);
	batch_free(&bt);
}

static void test_batch_zero_records(void **state)
{
	struct batch bt = { 0 };
	struct dmar_error err = { 0 };
	batch_header(&bt, 0);
	struct seen s = { .fail_at = -1 };
	assert_int_equal(parse_pieces(bt.b, bt.len, 1, 0, &s, &err), 0);
	assert_int_equal(s.n, 0);
	/* A byte after a count-0 header. */
	batch_put(&bt, "x", 1);
	for (size_t piece = 0; piece < 3; piece++) {
		struct dmar_error e2 = { 0 };
		assert_int_equal(parse_pieces(bt.b, bt.len, piece, 0, &s, &e2), -EBADMSG);
		assert_msg_contains(&e2, "after the last record");
	}
	batch_free(&bt);
}

/* Check that buf is refused with -EBADMSG and msg, whole and in pieces,
 * with exactly `delivered` records handed over first. */
static void assert_batch_refused(const uint8_t *buf, size_t len, uint32_t max_count, unsigned delivered,
				 const char *msg, const char *what)
{
	static const size_t pieces[] = { 0, 1, 5, 44, 100 };
	for (size_t k = 0; k < sizeof(pieces) / sizeof(*pieces); k++) {
		struct seen s = { .fail_at = -1 };
		struct dmar_error err = { 0 };
		int r = parse_pieces(buf, len, pieces[k], max_count, &s, &err);
		if (r != -EBADMSG)
			fail_msg("%s (pieces of %zu): %d, expected -EBADMSG", what, pieces[k], r);
		if (!strstr(err.msg, msg))
			fail_msg("%s (pieces of %zu): message \"%s\" lacks \"%s\"", what, pieces[k], err.msg, msg);
		if (s.n != delivered)
			fail_msg("%s (pieces of %zu): %u records delivered, expected %u", what, pieces[k], s.n,
				 delivered);
		seen_free(&s);
	}
}

struct batch_case {
	const char *name;
	int rec;        /* record whose header to edit; -1: the batch header */
	size_t off;     /* byte within that header */
	int width;      /* 1, 2, 4: little-endian value */
	uint32_t value;
	const char *msg;
};

static const struct batch_case batch_cases[] = {
	{ "magic", -1, 3, 1, 'b', "bad magic" },
	{ "version", -1, 4, 2, 2, "unsupported version 2" },
	{ "flags", -1, 6, 2, 1, "unknown flags" },
	{ "reserved", -1, 12, 4, 1, "nonzero reserved" },
	{ "count over max", -1, 8, 4, 7, "7 records, the limit is 6" },
	{ "count huge", -1, 8, 4, 0xffffffff, "the limit is 6" },
	{ "rec reserved 33", 2, 33, 1, 1, "record 2 (chunk " },
	{ "rec reserved 35", 0, 35, 1, 0x80, "record 0 (chunk " },
	{ "enc 4", 3, 32, 1, 4, "record 3 (chunk " },
	{ "enc 255", 1, 32, 1, 255, "unknown encoding" },
	{ "len 0", 4, 36, 4, 0, "record 4 (chunk " },
	{ "len 0 raw", 1, 36, 4, 0, "length out of range" },
	{ "len over max", 0, 36, 4, (4u << 20) + 1, "length out of range" },
	{ "len huge", 5, 36, 4, 0xffffffff, "record 5 (chunk " },
	{ "raw stored < len", 2, 40, 4, 99, "raw payload size differs" },
	{ "raw stored > len", 5, 40, 4, 65, "raw payload size differs" },
	{ "zstd stored 0", 0, 40, 4, 0, "zstd payload size out of range" },
	{ "zstd stored over bound", 3, 40, 4, ZSTD_COMPRESSBOUND(1) + 1, "zstd payload size out of range" },
	{ "zstd stored huge", 4, 40, 4, 0xffffffff, "zstd payload size out of range" },
};

static void test_batch_rejects(void **state)
{
	struct batch bt;
	sample_batch(&bt, true);
	size_t off[6], pos = DMAR_BATCH_HDR_SIZE;
	for (unsigned i = 0; i < 6; i++) {
		off[i] = pos;
		pos += DMAR_BATCH_REC_SIZE + bt.r[i].stored;
	}
	uint8_t *b = malloc(bt.len + 1);
	assert_non_null(b);
	for (size_t k = 0; k < sizeof(batch_cases) / sizeof(*batch_cases); k++) {
		const struct batch_case *c = &batch_cases[k];
		size_t at = (c->rec < 0 ? 0 : off[c->rec]) + c->off;
		memcpy(b, bt.b, bt.len);
		if (c->width == 1)
			b[at] = (uint8_t)c->value;
		else if (c->width == 2)
			dmar_put_le16(b + at, (uint16_t)c->value);
		else
			dmar_put_le32(b + at, c->value);
		assert_batch_refused(b, bt.len, 6, c->rec < 0 ? 0 : (unsigned)c->rec, c->msg, c->name);
	}
	/* The record names its chunk by the first 8 bytes of its id. */
	char hex[17], want[64];
	dmar_hex(bt.r[2].id.b, 8, hex);
	snprintf(want, sizeof(want), "record 2 (chunk %s...)", hex);
	memcpy(b, bt.b, bt.len);
	b[off[2] + 34] = 1;
	assert_batch_refused(b, bt.len, 6, 2, want, "named chunk");

	/* Bytes after the last record. */
	memcpy(b, bt.b, bt.len);
	b[bt.len] = 0;
	assert_batch_refused(b, bt.len + 1, 6, 6, "after the last record", "trailing byte");
	/* A count smaller than the records present: the rest is trailing. */
	memcpy(b, bt.b, bt.len);
	dmar_put_le32(b + 8, 5);
	assert_batch_refused(b, bt.len, 6, 5, "after the last record", "count 5");
	free(b);
	batch_free(&bt);
}

static void test_batch_truncated(void **state)
{
	struct batch bt;
	sample_batch(&bt, true);
	size_t ends[7];
	ends[0] = DMAR_BATCH_HDR_SIZE;
	for (unsigned i = 0; i < 6; i++)
		ends[i + 1] = ends[i] + DMAR_BATCH_REC_SIZE + bt.r[i].stored;
	assert_int_equal(ends[6], bt.len);
	for (size_t l = 0; l < bt.len; l++) {
		unsigned full = 0;
		while (full < 6 && ends[full + 1] <= l)
			full++;
		char what[64], msg[80];
		snprintf(what, sizeof(what), "truncated at %zu", l);
		if (l < DMAR_BATCH_HDR_SIZE)
			snprintf(msg, sizeof(msg), "truncated: %zu of 16 header bytes", l);
		else if (l == ends[full])
			snprintf(msg, sizeof(msg), "truncated: %u of 6 records", full);
		else
			snprintf(msg, sizeof(msg), "truncated: %u of 6 records and part of the next", full);
		assert_batch_refused(bt.b, l, 6, full, msg, what);
	}
	/* A header that announces more records than follow. */
	uint8_t *b = malloc(bt.len);
	assert_non_null(b);
	memcpy(b, bt.b, bt.len);
	dmar_put_le32(b + 8, 7);
	assert_batch_refused(b, bt.len, 10, 6, "truncated: 6 of 7 records", "count 7");
	free(b);
	batch_free(&bt);
}

/* The callback's error stops the parser and sticks. */
static void test_batch_callback_error(void **state)
{
	struct batch bt;
	sample_batch(&bt, true);
	for (size_t piece = 0; piece < 4; piece++) {
		struct seen s = { .fail_at = 3 };
		struct dmar_error err = { 0 };
		struct dmar_batch_parser *p;
		assert_int_equal(dmar_batch_parser_new(&p, 6, collect, &s), 0);
		int r = 0;
		size_t pos = 0, step = piece ? piece * 37 : bt.len;
		while (pos < bt.len && r == 0) {
			size_t n = bt.len - pos < step ? bt.len - pos : step;
			r = dmar_batch_parser_feed(p, bt.b + pos, n, &err);
			pos += n;
		}
		assert_int_equal(r, -ENOSPC);
		assert_int_equal(s.n, 3);
		assert_int_equal(s.calls, 4);
		struct dmar_error e2 = { 0 };
		assert_int_equal(dmar_batch_parser_feed(p, bt.b, 1, &e2), -ENOSPC);
		assert_int_equal(e2.code, -ENOSPC);
		assert_int_equal(dmar_batch_parser_finish(p, NULL), -ENOSPC);
		assert_int_equal(s.calls, 4);
		dmar_batch_parser_free(p);
		seen_free(&s);
	}
	batch_free(&bt);
}

/* A malformed body sticks too: later feeds and finish refuse. */
static void test_batch_sticky(void **state)
{
	struct seen s = { .fail_at = -1 };
	struct dmar_error err = { 0 };
	struct dmar_batch_parser *p;
	assert_int_equal(dmar_batch_parser_new(&p, 1, collect, &s), 0);
	assert_int_equal(dmar_batch_parser_feed(p, "DMCX", 4, &err), 0);
	assert_int_equal(dmar_batch_parser_feed(p, "\1\0\0\0\0\0\0\0\0\0\0\0", 12, &err), -EBADMSG);
	assert_msg_contains(&err, "bad magic");
	uint8_t h[DMAR_BATCH_HDR_SIZE];
	dmar_batch_write_header(h, 0);
	assert_int_equal(dmar_batch_parser_feed(p, h, sizeof(h), &err), -EBADMSG);
	assert_int_equal(dmar_batch_parser_finish(p, &err), -EBADMSG);
	assert_int_equal(dmar_batch_parser_count(p), 0);
	dmar_batch_parser_free(p);
}

/* The largest records the format allows, split in the middle: a zstd
 * payload of ZSTD_compressBound(4 MiB) bytes is buffered whole. */
static void test_batch_largest(void **state)
{
	struct batch bt = { 0 };
	struct dmar_error err = { 0 };
	uint8_t *d = malloc(DMAR_WIRE_CHUNK_MAX);
	assert_non_null(d);
	fill_random(d, DMAR_WIRE_CHUNK_MAX, 99);
	batch_header(&bt, 2);
	batch_add(&bt, d, DMAR_WIRE_CHUNK_MAX, DMAR_WIRE_RAW);
	/* Stored as the largest zstd payload: the frame, then padding the
	 * parser does not look at (verify would refuse it). */
	struct dmar_wire_chunk c = { .enc = DMAR_WIRE_ZSTD, .len = DMAR_WIRE_CHUNK_MAX,
				     .stored = (uint32_t)ZSTD_COMPRESSBOUND(DMAR_WIRE_CHUNK_MAX) };
	uint8_t h[DMAR_BATCH_REC_SIZE];
	dmar_batch_write_record(h, &c);
	batch_put(&bt, h, sizeof(h));
	size_t payload_at = bt.len;
	batch_put(&bt, d, DMAR_WIRE_CHUNK_MAX);
	memset(d, 0, c.stored - DMAR_WIRE_CHUNK_MAX);
	batch_put(&bt, d, c.stored - DMAR_WIRE_CHUNK_MAX);
	struct rec *r = &bt.r[bt.n++];
	r->enc = DMAR_WIRE_ZSTD;
	r->len = c.len;
	r->stored = c.stored;
	r->payload = malloc(c.stored);
	assert_non_null(r->payload);
	memcpy(r->payload, bt.b + payload_at, c.stored);
	free(d);

	size_t cuts[][3] = {
		{ 10, 100, 3u << 20 },
		{ DMAR_BATCH_HDR_SIZE + 44 + (4u << 20) - 1, DMAR_BATCH_HDR_SIZE + 44 + (4u << 20) + 50,
		  bt.len - 1 },
	};
	for (size_t k = 0; k < 2; k++) {
		struct seen s = { .fail_at = -1 };
		assert_int_equal(parse_cuts(bt.b, bt.len, cuts[k], 3, 2, &s, &err), 0);
		assert_same_records(&bt, &s);
		seen_free(&s);
	}
	/* One more byte of payload is refused. */
	dmar_put_le32(bt.b + payload_at - 4, c.stored + 1);
	assert_batch_refused(bt.b, bt.len, 2, 1, "zstd payload size out of range", "over the bound");
	batch_free(&bt);
}

/* ---- chunk verification -------------------------------------------------- */

struct verify_fixture {
	ZSTD_DCtx *dctx;
	uint8_t *scratch;
	uint8_t data[8192];
};

static int verify_setup(void **state)
{
	struct verify_fixture *f = calloc(1, sizeof(*f));
	if (!f || !(f->dctx = ZSTD_createDCtx()) || !(f->scratch = malloc(DMAR_WIRE_SCRATCH)))
		return -1;
	for (size_t i = 0; i < sizeof(f->data); i++)
		f->data[i] = (uint8_t)("verify me, verify me not "[i % 25] ^ (i / 1000));
	*state = f;
	return 0;
}

static int verify_teardown(void **state)
{
	struct verify_fixture *f = *state;
	ZSTD_freeDCtx(f->dctx);
	free(f->scratch);
	free(f);
	return 0;
}

static void assert_names_chunk(const struct dmar_error *err, const struct dmar_id *id, const char *what)
{
	char hex[17], want[40];
	dmar_hex(id->b, 8, hex);
	snprintf(want, sizeof(want), "chunk %s...: ", hex);
	assert_int_equal(err->code, -EILSEQ);
	if (strncmp(err->msg, want, strlen(want)) != 0)
		fail_msg("message \"%s\" does not start with \"%s\"", err->msg, want);
	assert_msg_contains(err, what);
}

static void test_verify_raw(void **state)
{
	struct verify_fixture *f = *state;
	struct dmar_wire_chunk c = { .enc = DMAR_WIRE_RAW, .len = 4000, .stored = 4000, .payload = f->data };
	struct dmar_error err = { 0 };
	const uint8_t *dec = NULL;
	dmar_hash(f->data, 4000, &c.id);
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &err), 0);
	assert_ptr_equal(dec, f->data);
	/* Raw needs neither a context nor scratch. */
	dec = NULL;
	assert_int_equal(dmar_wire_chunk_verify(&c, NULL, NULL, &dec, &err), 0);
	assert_ptr_equal(dec, f->data);

	/* One bit off in the payload, or in the id. */
	f->data[1234] ^= 0x10;
	dec = NULL;
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &err), -EILSEQ);
	assert_null(dec);
	assert_names_chunk(&err, &c.id, "hash mismatch");
	f->data[1234] ^= 0x10;
	c.id.b[31] ^= 1;
	struct dmar_error e2 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e2), -EILSEQ);
	assert_names_chunk(&e2, &c.id, "hash mismatch");
	c.id.b[31] ^= 1;
	/* A raw record whose sizes disagree (never from the parser). */
	c.stored = 3999;
	struct dmar_error e3 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e3), -EILSEQ);
	assert_names_chunk(&e3, &c.id, "bad encoding");
	c.stored = 4000;
	c.enc = 7;
	struct dmar_error e4 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e4), -EILSEQ);
	assert_names_chunk(&e4, &c.id, "bad encoding");
}

static void test_verify_zstd(void **state)
{
	struct verify_fixture *f = *state;
	size_t zlen;
	uint8_t *z = zstd_magicless(f->data, sizeof(f->data), &zlen);
	assert_true(zlen < sizeof(f->data));
	struct dmar_wire_chunk c = { .enc = DMAR_WIRE_ZSTD, .len = sizeof(f->data), .stored = (uint32_t)zlen,
				     .payload = z };
	struct dmar_error err = { 0 };
	const uint8_t *dec = NULL;
	dmar_hash(f->data, sizeof(f->data), &c.id);
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &err), 0);
	assert_ptr_equal(dec, f->scratch);
	assert_memory_equal(dec, f->data, sizeof(f->data));
	/* Twice with the same context: the reset before each frame works. */
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &err), 0);

	/* A corrupt frame: noise in the middle, or cut short. */
	uint8_t *bad = malloc(zlen);
	assert_non_null(bad);
	memcpy(bad, z, zlen);
	memset(bad + 2, 0xff, zlen - 4);
	c.payload = bad;
	struct dmar_error e1 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e1), -EILSEQ);
	assert_int_equal(e1.code, -EILSEQ);
	assert_names_chunk(&e1, &c.id, "");
	c.payload = z;
	c.stored = (uint32_t)zlen - 3;
	struct dmar_error e2 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e2), -EILSEQ);
	assert_names_chunk(&e2, &c.id, "zstd frame corrupt");
	c.stored = (uint32_t)zlen;

	/* A frame that decodes fine but to other bytes than the id says. */
	c.id.b[0] ^= 0x80;
	struct dmar_error e3 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e3), -EILSEQ);
	assert_names_chunk(&e3, &c.id, "hash mismatch");
	c.id.b[0] ^= 0x80;

	/* A frame of 100 bytes declared as 4096, and as 50. */
	size_t slen;
	uint8_t *small = zstd_magicless(f->data, 100, &slen);
	struct dmar_wire_chunk d = { .enc = DMAR_WIRE_ZSTD, .len = 4096, .stored = (uint32_t)slen,
				     .payload = small };
	dmar_hash(f->data, 100, &d.id);
	struct dmar_error e4 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&d, f->dctx, f->scratch, &dec, &e4), -EILSEQ);
	assert_names_chunk(&e4, &d.id, "decodes to 100 bytes, declared 4096");
	d.len = 50;
	struct dmar_error e5 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&d, f->dctx, f->scratch, &dec, &e5), -EILSEQ);
	assert_names_chunk(&e5, &d.id, "");

	/* A frame with the magic number (not magicless) is refused. */
	uint8_t framed[256];
	size_t flen = ZSTD_compress(framed, sizeof(framed), f->data, 100, 3);
	assert_false(ZSTD_isError(flen));
	d.len = 100;
	d.stored = (uint32_t)flen;
	d.payload = framed;
	struct dmar_error e6 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&d, f->dctx, f->scratch, &dec, &e6), -EILSEQ);
	assert_names_chunk(&e6, &d.id, "");

	free(small);
	free(bad);
	free(z);
}

/* A byte-grouped frame verifies to the chunk at its own width only: at
 * the other width, or as a plain frame, it decodes to other bytes. */
static void test_verify_grouped(void **state)
{
	struct verify_fixture *f = *state;
	enum { LEN = 60000 };
	uint8_t *data = malloc(LEN), *z = malloc(ZSTD_compressBound(LEN));
	fill_floats(data, LEN, 2, 5);
	struct dmar_zchunk *zc;
	assert_int_equal(dmar_zchunk_new(&zc, 1, NULL), 0);
	size_t zlen = dmar_zchunk_compress_as(zc, z, ZSTD_compressBound(LEN), data, LEN, DMAR_ZX_G2);
	assert_true(zlen > 0);
	struct dmar_wire_chunk c = { .enc = DMAR_WIRE_ZSTD_G2, .len = LEN, .stored = (uint32_t)zlen, .payload = z };
	dmar_hash(data, LEN, &c.id);
	struct dmar_error err = { 0 };
	const uint8_t *dec = NULL;
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &err), 0);
	assert_ptr_equal(dec, f->scratch);
	assert_memory_equal(dec, data, LEN);
	static const uint8_t other[] = { DMAR_WIRE_ZSTD_G4, DMAR_WIRE_ZSTD };
	for (size_t k = 0; k < sizeof(other); k++) {
		c.enc = other[k];
		struct dmar_error e = { 0 };
		assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e), -EILSEQ);
		assert_names_chunk(&e, &c.id, "hash mismatch");
	}
	c.enc = DMAR_WIRE_ZSTD_G2;
	c.stored = (uint32_t)zlen / 2;
	struct dmar_error e2 = { 0 };
	assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &e2), -EILSEQ);
	assert_names_chunk(&e2, &c.id, "zstd frame corrupt");
	/* The record round-trips through a batch with its encoding. */
	uint8_t h[DMAR_BATCH_REC_SIZE];
	c.stored = (uint32_t)zlen;
	dmar_batch_write_record(h, &c);
	assert_int_equal(h[32], DMAR_WIRE_ZSTD_G2);
	assert_int_equal(dmar_wire_enc_zx(h[32]), DMAR_ZX_G2);
	assert_int_equal(dmar_wire_zx_enc(DMAR_ZX_G4), DMAR_WIRE_ZSTD_G4);
	assert_int_equal(dmar_wire_enc_zx(4), DMAR_ZX_RAW);
	dmar_zchunk_free(zc);
	free(data);
	free(z);
}

/* A verified parse: every record of the sample batch passes. */
static void test_verify_batch(void **state)
{
	struct verify_fixture *f = *state;
	struct batch bt;
	struct seen s = { .fail_at = -1 };
	struct dmar_error err = { 0 };
	sample_batch(&bt, false);
	assert_int_equal(parse_pieces(bt.b, bt.len, 1000, 6, &s, &err), 0);
	for (unsigned i = 0; i < s.n; i++) {
		struct dmar_wire_chunk c = { .id = s.r[i].id, .enc = s.r[i].enc, .len = s.r[i].len,
					     .stored = s.r[i].stored, .payload = s.r[i].payload };
		const uint8_t *dec;
		assert_int_equal(dmar_wire_chunk_verify(&c, f->dctx, f->scratch, &dec, &err), 0);
	}
	seen_free(&s);
	batch_free(&bt);
}

/* ---- paths and errno names ----------------------------------------------- */

static void assert_path(const char *path, int want, const char *msg)
{
	struct dmar_error err = { 0 };
	int r = dmar_wire_path_check(path, &err);
	if (r != want)
		fail_msg("path \"%.40s\" (%zu bytes): %d, expected %d", path, strlen(path), r, want);
	if (want < 0) {
		assert_int_equal(err.code, want);
		assert_msg_contains(&err, msg);
	} else {
		assert_int_equal(err.code, 0);
	}
}

static void test_path_check(void **state)
{
	assert_path("", 0, NULL);
	assert_path("a", 0, NULL);
	assert_path("a/b", 0, NULL);
	assert_path("a/b/", 0, NULL);
	assert_path("...", 0, NULL);
	assert_path(".a/..b/c.", 0, NULL);
	assert_path("/a", -EINVAL, "absolute");
	assert_path("/", -EINVAL, "absolute");
	assert_path("a//b", -EINVAL, "empty component");
	assert_path("a/b//", -EINVAL, "empty component");
	assert_path("..", -EINVAL, "'..'");
	assert_path("a/../b", -EINVAL, "'..'");
	assert_path("a/..", -EINVAL, "'..'");
	assert_path(".", -EINVAL, "'.'");
	assert_path("./a", -EINVAL, "'.'");
	assert_path("a/./", -EINVAL, "'.'");
	/* the name policy: UTF-8, no control characters, '@' only below the root */
	assert_path("caf\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80", 0, NULL);
	assert_path("a/@b", 0, NULL);
	assert_path("@b", -EINVAL, "'@'");
	assert_path("@b/c", -EINVAL, "'@'");
	assert_path("a\xff", -EINVAL, "not valid UTF-8");
	assert_path("a/\xc3", -EINVAL, "not valid UTF-8");          /* truncated */
	assert_path("\xc0\xaf", -EINVAL, "not valid UTF-8");        /* overlong '/' */
	assert_path("\xed\xa0\x80", -EINVAL, "not valid UTF-8");   /* a surrogate */
	assert_path("\xf4\x90\x80\x80", -EINVAL, "not valid UTF-8"); /* past U+10FFFF */
	assert_path("a\rb", -EINVAL, "control character");
	assert_path("a/b\nc", -EINVAL, "control character (byte 0x0a)");
	assert_path("x\x7f", -EINVAL, "control character");
	assert_int_equal(dmar_wire_name_check("@x", 2, false, NULL), 0);
	assert_int_equal(dmar_wire_name_check("@x", 2, true, NULL), -EINVAL);

	char *p = malloc(5000);
	assert_non_null(p);
	/* 255 bytes in a component is fine, 256 is not. */
	memset(p, 'x', 255);
	p[255] = 0;
	assert_path(p, 0, NULL);
	memset(p, 'x', 256);
	p[256] = 0;
	assert_path(p, -EINVAL, "longer than 255");
	strcpy(p, "a/");
	memset(p + 2, 'y', 256);
	strcpy(p + 258, "/b");
	assert_path(p, -EINVAL, "longer than 255");
	/* 4095 bytes in all is fine, 4096 is not. */
	size_t n = 0;
	while (n < 4095) {
		size_t c = 4095 - n > 200 ? 200 : 4095 - n;
		memset(p + n, 'z', c);
		n += c;
		if (n < 4095)
			p[n++] = '/';
	}
	p[4095] = 0;
	assert_int_equal(strlen(p), 4095);
	assert_path(p, 0, NULL);
	p[4095] = 'z';
	p[4096] = 0;
	assert_path(p, -EINVAL, "longer than 4095");
	free(p);

	struct dmar_error err = { 0 };
	assert_int_equal(dmar_wire_path_check(NULL, &err), -EINVAL);
	assert_int_equal(dmar_wire_path_check("a//b", NULL), -EINVAL);
}

static const struct {
	int e;
	const char *name;
	int status;
} named[] = {
	{ ENOENT, "ENOENT", 404 },   { EEXIST, "EEXIST", 409 },       { ENOTEMPTY, "ENOTEMPTY", 409 },
	{ ENODATA, "ENODATA", 409 }, { ENOSPC, "ENOSPC", 507 },       { EDQUOT, "EDQUOT", 507 },
	{ EACCES, "EACCES", 403 },   { EPERM, "EPERM", 403 },         { EROFS, "EROFS", 403 },
	{ EINVAL, "EINVAL", 400 },   { EBADMSG, "EBADMSG", 400 },     { ENOTDIR, "ENOTDIR", 400 },
	{ EISDIR, "EISDIR", 400 },   { ENAMETOOLONG, "ENAMETOOLONG", 400 },
	{ EFBIG, "EFBIG", 413 },     { E2BIG, "E2BIG", 413 },         { EKEYREJECTED, "EKEYREJECTED", 401 },
	{ EILSEQ, "EILSEQ", 422 },   { EAGAIN, "EAGAIN", 503 },       { ENOMEM, "ENOMEM", 503 },
	{ EMLINK, "EMLINK", 409 },   { EXDEV, "EXDEV", 400 },         { ENOTSUP, "ENOTSUP", 501 },
	{ ECONNREFUSED, "ECONNREFUSED", 502 },                        { EHOSTUNREACH, "EHOSTUNREACH", 502 },
	{ ETIMEDOUT, "ETIMEDOUT", 504 },                              { EIO, "EIO", 500 },
};

static void test_errno_names(void **state)
{
	for (size_t i = 0; i < sizeof(named) / sizeof(*named); i++) {
		assert_string_equal(dmar_wire_errno_name(-named[i].e), named[i].name);
		assert_string_equal(dmar_wire_errno_name(named[i].e), named[i].name);
		assert_int_equal(dmar_wire_errno_from_name(named[i].name), -named[i].e);
		/* name -> errno -> name */
		assert_string_equal(dmar_wire_errno_name(dmar_wire_errno_from_name(named[i].name)), named[i].name);
		assert_int_equal(dmar_wire_http_status(-named[i].e), named[i].status);
		assert_int_equal(dmar_wire_http_status(named[i].e), named[i].status);
	}
	/* Every errno round-trips, named or not (an unnamed one as EIO). */
	for (int e = 1; e < 200; e++) {
		const char *n = dmar_wire_errno_name(-e);
		int back = dmar_wire_errno_from_name(n);
		assert_true(back == -e || (back == -EIO && strcmp(n, "EIO") == 0));
		if (back == -EIO && e != EIO)
			assert_int_equal(dmar_wire_http_status(-e), 500);
	}
	assert_string_equal(dmar_wire_errno_name(-ESRCH), "EIO");
	assert_string_equal(dmar_wire_errno_name(0), "EIO");
	assert_string_equal(dmar_wire_errno_name(INT_MIN), "EIO");
	assert_string_equal(dmar_wire_errno_name(INT_MAX), "EIO");
	assert_int_equal(dmar_wire_errno_from_name("EBOGUS"), -EIO);
	assert_int_equal(dmar_wire_errno_from_name(""), -EIO);
	assert_int_equal(dmar_wire_errno_from_name("enospc"), -EIO);
	assert_int_equal(dmar_wire_errno_from_name(NULL), -EIO);
	assert_int_equal(dmar_wire_http_status(-ESRCH), 500);
	assert_int_equal(dmar_wire_http_status(INT_MIN), 500);
	assert_int_equal(dmar_wire_http_status(0), 500);
}

/* ---- tree commits ---- */

static size_t tree_put(uint8_t *b, uint8_t kind, uint8_t flags, uint32_t mode, const char *path, const char *data,
		       size_t len)
{
	struct dmar_tree_op *op = calloc(1, sizeof(*op));
	assert_non_null(op);
	*op = (struct dmar_tree_op){ .kind = kind, .flags = flags, .mode = mode, .data = (const uint8_t *)data,
				     .data_len = len };
	snprintf(op->path, sizeof(op->path), "%s", path);
	size_t n = dmar_tree_write_op(b, op);
	assert_int_equal(n, dmar_tree_op_size(strlen(path), len));
	assert_int_equal(n % 8, 0);
	free(op);
	return n;
}

/* One record at b (n bytes): the parse's result, message in err. */
static int tree_one(const uint8_t *b, size_t n, struct dmar_tree_op *op, struct dmar_error *err)
{
	size_t pos = 0;
	memset(err, 0, sizeof(*err));
	return dmar_tree_op_parse(b, n, &pos, 0, op, err);
}

static void test_tree_ops(void **state)
{
	(void)state;
	uint8_t b[8192], hdr[DMAR_TREE_HDR_SIZE];
	struct dmar_tree_op *op = malloc(sizeof(*op));
	assert_non_null(op);
	struct dmar_error err = { 0 };
	char recipe[DMAR_RECIPE_HDR_SIZE + DMAR_RECIPE_TRAILER_SIZE] = { 0 };

	/* Round trips of each kind, and the walk over several. */
	size_t n = tree_put(b, DMAR_TREE_DIR, 0, 0750, "a", NULL, 0);
	n += tree_put(b + n, DMAR_TREE_FILE, DMAR_TREE_NOREPLACE, 0, "a/f", recipe, sizeof(recipe));
	n += tree_put(b + n, DMAR_TREE_SYMLINK, 0, 0, "a/l", "f", 1);
	size_t pos = 0;
	assert_int_equal(dmar_tree_op_parse(b, n, &pos, 0, op, &err), 0);
	assert_int_equal(op->kind, DMAR_TREE_DIR);
	assert_int_equal(op->mode, 0750);
	assert_string_equal(op->path, "a");
	assert_int_equal(dmar_tree_op_parse(b, n, &pos, 1, op, &err), 0);
	assert_int_equal(op->kind, DMAR_TREE_FILE);
	assert_int_equal(op->flags, DMAR_TREE_NOREPLACE);
	assert_int_equal(op->data_len, sizeof(recipe));
	assert_int_equal(dmar_tree_op_parse(b, n, &pos, 2, op, &err), 0);
	assert_string_equal(op->path, "a/l");
	assert_memory_equal(op->data, "f", 1);
	assert_int_equal(pos, n);
	assert_int_equal(err.code, 0);
	assert_int_equal(dmar_tree_op_parse(b, n, &pos, 3, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "operation 3: truncated"));

	/* Headers. */
	dmar_tree_write_header(hdr, 3, (uint32_t)n);
	uint32_t count, len;
	memset(&err, 0, sizeof(err));
	assert_int_equal(dmar_tree_header_parse(hdr, &count, &len, &err), 0);
	assert_int_equal(count, 3);
	assert_int_equal(len, n);
	static const struct {
		uint32_t count, len;
		const char *msg;
	} badh[] = { { 0, 24, "0 operations" },
		     { DMAR_TREE_OPS_MAX + 1, 24u * (DMAR_TREE_OPS_MAX + 1), "operations (1.." },
		     { 2, 24, "cannot hold 2" },
		     { 1, 28, "a multiple of 8" },
		     { 1, DMAR_TREE_OPS_BYTES_MAX + 8, "at most" } };
	for (size_t k = 0; k < sizeof(badh) / sizeof(badh[0]); k++) {
		dmar_tree_write_header(hdr, badh[k].count, badh[k].len);
		memset(&err, 0, sizeof(err));
		assert_int_equal(dmar_tree_header_parse(hdr, &count, &len, &err), -EBADMSG);
		if (!strstr(err.msg, badh[k].msg))
			fail_msg("header %zu: \"%s\", expected \"%s\"", k, err.msg, badh[k].msg);
	}
	dmar_tree_write_header(hdr, 1, 24);
	hdr[0] = 'X';
	assert_int_equal(dmar_tree_header_parse(hdr, &count, &len, &err), -EBADMSG);
	dmar_tree_write_header(hdr, 1, 24);
	hdr[4] = 2;
	assert_int_equal(dmar_tree_header_parse(hdr, &count, &len, &err), -EBADMSG);

	/* Hostile records: each refused with a message that says why. */
	n = tree_put(b, DMAR_TREE_DIR, 0, 0755, "d", NULL, 0);
	b[0] = 9;
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "unknown kind 9"));
	n = tree_put(b, DMAR_TREE_DIR, DMAR_TREE_NOREPLACE, 0755, "d", NULL, 0);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "flags"));
	n = tree_put(b, DMAR_TREE_DIR, 0, 010000, "d", NULL, 0);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "mode"));
	n = tree_put(b, DMAR_TREE_SYMLINK, 0, 0644, "d", "x", 1);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "only a directory has one"));
	n = tree_put(b, DMAR_TREE_DIR, 0, 0755, "d", NULL, 0);
	b[12] = 1;
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "reserved"));
	n = tree_put(b, DMAR_TREE_DIR, 0, 0755, "d", NULL, 0);
	b[n - 1] = 1;
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "padding"));
	n = tree_put(b, DMAR_TREE_SYMLINK, 0, 0, "s", "a\0b", 3);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "NUL byte in its target"));
	n = tree_put(b, DMAR_TREE_DIR, 0, 0755, "d/", NULL, 0);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "ends in '/'"));
	static const char *const badpaths[] = { "@p", "/abs", "a//b", "a/../b", "x\ny" };
	for (size_t k = 0; k < sizeof(badpaths) / sizeof(badpaths[0]); k++) {
		n = tree_put(b, DMAR_TREE_DIR, 0, 0755, badpaths[k], NULL, 0);
		if (tree_one(b, n, op, &err) != -EBADMSG)
			fail_msg("path \"%s\" accepted", badpaths[k]);
	}
	n = tree_put(b, DMAR_TREE_FILE, 0, 0, "f", recipe, 10);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "too short"));
	n = tree_put(b, DMAR_TREE_DIR, 0, 0755, "d", "x", 1);
	assert_int_equal(tree_one(b, n, op, &err), -EBADMSG);
	/* A record that claims more than is there. */
	n = tree_put(b, DMAR_TREE_SYMLINK, 0, 0, "s", "target", 6);
	assert_int_equal(tree_one(b, n - 8, op, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "runs past"));
	assert_int_equal(tree_one(b, 10, op, &err), -EBADMSG);
	free(op);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recipe_roundtrip),
		cmocka_unit_test(test_recipe_empty),
		cmocka_unit_test(test_recipe_write_normalizes),
		cmocka_unit_test(test_recipe_rejects),
		cmocka_unit_test(test_recipe_lengths),
		cmocka_unit_test(test_short_roundtrip),
		cmocka_unit_test(test_short_rejects),
		cmocka_unit_test(test_delta_roundtrip),
		cmocka_unit_test(test_batch_whole),
		cmocka_unit_test(test_batch_bytewise),
		cmocka_unit_test(test_batch_every_split),
		cmocka_unit_test(test_batch_random_splits),
		cmocka_unit_test(test_batch_empty_feeds),
		cmocka_unit_test(test_batch_zero_records),
		cmocka_unit_test(test_batch_rejects),
		cmocka_unit_test(test_batch_truncated),
		cmocka_unit_test(test_batch_callback_error),
		cmocka_unit_test(test_batch_sticky),
		cmocka_unit_test(test_batch_largest),
		cmocka_unit_test_setup_teardown(test_verify_raw, verify_setup, verify_teardown),
		cmocka_unit_test_setup_teardown(test_verify_zstd, verify_setup, verify_teardown),
		cmocka_unit_test_setup_teardown(test_verify_grouped, verify_setup, verify_teardown),
		cmocka_unit_test_setup_teardown(test_verify_batch, verify_setup, verify_teardown),
		cmocka_unit_test(test_path_check),
		cmocka_unit_test(test_errno_names),
		cmocka_unit_test(test_tree_ops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
