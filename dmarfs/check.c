/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "arena/journal.h"

struct chk {
	struct dmarfs *fs;
	struct dmar_arena_check *ac;
	/* Every chunk reference a holder holds, to compare with the store. */
	struct dmar_id *ids;
	size_t n, cap;
	/* Extent tables met so far: each holds its references once,
	 * however many files and states show it. */
	const struct dmar_xtab **tabs;
	size_t ntabs, tcap;
	uint64_t raw, journal;
	uint64_t inodes, files;
	int err;
};

static void add_id(void *ctx, const struct dmar_id *id)
{
	struct chk *k = ctx;
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 1024;
		struct dmar_id *n = realloc(k->ids, cap * sizeof(*n));
		if (!n) {
			k->err = -ENOMEM;
			return;
		}
		k->ids = n;
		k->cap = cap;
	}
	k->ids[k->n++] = *id;
}

static void add_raw(void *ctx, uint64_t off, uint64_t len)
{
	struct chk *k = ctx;
	k->raw += len;
	dmar_arena_check_claim(k->ac, off, len, "raw extent");
}

static void add_table(void *ctx, const struct dmar_xtab *t)
{
	struct chk *k = ctx;
	for (size_t i = 0; i < k->ntabs; i++)
		if (k->tabs[i] == t)
			return;
	if (k->ntabs == k->tcap) {
		size_t cap = k->tcap ? 2 * k->tcap : 64;
		const struct dmar_xtab **n = realloc(k->tabs, cap * sizeof(*n));
		if (!n) {
			k->err = -ENOMEM;
			return;
		}
		k->tabs = n;
		k->tcap = cap;
	}
	k->tabs[k->ntabs++] = t;
	dmar_file_table_ids(t, add_id, k);
}

static void add_segment(void *ctx, uint64_t off, uint64_t len)
{
	struct chk *k = ctx;
	k->journal += len;
	dmar_arena_check_claim(k->ac, off, len, "journal segment");
}

static void owners(void *ctx, struct dmar_arena_check *ac)
{
	struct chk *k = ctx;
	struct dmarfs *fs = k->fs;
	k->ac = ac;
	struct dmar_file_refs r = { .raw = add_raw, .chunk = add_id, .table = add_table, .ctx = k };
	if (fs->cfg.journal)
		dmar_journal_each_segment(fs->cfg.journal, add_segment, k);
	for (struct inode *i = fs->all; i; i = i->all_next) {
		k->inodes++;
		if (!S_ISREG(i->mode))
			continue;
		k->files++;
		pthread_rwlock_rdlock(&i->lock);
		dmar_file_refs(&i->f, &r);
		pthread_rwlock_unlock(&i->lock);
	}
	for (int o = 0; o < fs->nowners; o++)
		fs->owners[o].refs(fs->owners[o].ctx, &r);
}

static int cmp_id(const void *a, const void *b)
{
	return memcmp(a, b, DMAR_HASH_SIZE);
}

struct refcmp {
	struct chk *k;
	uint64_t held, expected, wrong;
	struct dmar_id first;
	uint32_t first_refs, first_want;
};

static void compare(void *ctx, const struct dmar_id *id, const struct dmar_chunk_info *ci)
{
	struct refcmp *c = ctx;
	struct chk *k = c->k;
	/* k->ids is NULL when no holder holds anything (bsearch wants a base) */
	const struct dmar_id *hit = k->n ? bsearch(id, k->ids, k->n, sizeof(*id), cmp_id) : NULL;
	size_t want = 0;
	if (hit) {
		const struct dmar_id *a = hit, *b = hit;
		while (a > k->ids && !memcmp(a - 1, id, sizeof(*id)))
			a--;
		while (b + 1 < k->ids + k->n && !memcmp(b + 1, id, sizeof(*id)))
			b++;
		want = (size_t)(b - a) + 1;
	}
	c->held += ci->refs;
	c->expected += want;
	if (ci->refs != want && !c->wrong++) {
		c->first = *id;
		c->first_refs = ci->refs;
		c->first_want = (uint32_t)want;
	}
}

int dmarfs_check(struct dmarfs *fs, char **report)
{
	struct chk k = { .fs = fs };
	struct dmar_arena_report rep;
	pthread_rwlock_wrlock(&fs->busy);
	pthread_rwlock_wrlock(&fs->ckpt);
	pthread_mutex_lock(&fs->ns);
	int e = dmar_arena_check(fs->cfg.ctx.arena, owners, &k, &rep);
	struct refcmp c = { .k = &k };
	if (!k.err) {
		if (k.n) /* an empty arena has no list */
			qsort(k.ids, k.n, sizeof(*k.ids), cmp_id);
		dmar_store_each(fs->cfg.ctx.arena, compare, &c);
	}
	pthread_mutex_unlock(&fs->ns);
	pthread_rwlock_unlock(&fs->ckpt);
	pthread_rwlock_unlock(&fs->busy);
	if (k.err) {
		free(k.ids);
		free(k.tabs);
		*report = NULL;
		return k.err;
	}
	char problem[400] = "";
	if (rep.problem[0]) {
		snprintf(problem, sizeof(problem), "\nproblem: %s", rep.problem);
	} else if (c.wrong || c.expected != k.n) {
		char hex[DMAR_HASH_HEX_SIZE];
		dmar_hex(c.first.b, DMAR_HASH_SIZE, hex);
		if (c.wrong)
			snprintf(problem, sizeof(problem), "\nproblem: chunk %.16s has %u references, its holders hold %u (%" PRIu64 " chunks wrong)",
				 hex, c.first_refs, c.first_want, c.wrong);
		else
			snprintf(problem, sizeof(problem), "\nproblem: %zu references held to chunks the store does not have",
				 k.n - (size_t)c.expected);
		e = -EUCLEAN;
	}
	int n = asprintf(report,
			 "state=%s used=%" PRIu64 " owned=%" PRIu64 " chunks=%" PRIu64 " chunk_bytes=%" PRIu64
			 " raw=%" PRIu64 " journal=%" PRIu64 " leaked=%" PRIu64 " unreserved=%" PRIu64
			 " doubled=%" PRIu64 " refs=%" PRIu64 " refs_held=%zu inodes=%" PRIu64 " files=%" PRIu64 "%s",
			 e ? "bad" : "ok", rep.used, rep.owned, rep.chunks, rep.chunk_bytes, k.raw, k.journal,
			 rep.leaked, rep.unreserved, rep.doubled, c.held, k.n, k.inodes, k.files, problem);
	if (n < 0)
		*report = NULL;
	free(k.ids);
	free(k.tabs);
	return e;
}
