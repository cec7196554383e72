/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dir.h"

/* FNV-1a: names are short and chosen by local users; a directory is not
 * a hash-flooding target worth a keyed hash. */
static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

void dmar_dir_init(struct dmar_dir *d, uint64_t first_cookie)
{
	memset(d, 0, sizeof(*d));
	d->next_cookie = first_cookie;
}

void dmar_dir_clear(struct dmar_dir *d)
{
	for (size_t k = 0; k < d->nslots; k++) {
		if (d->slot[k]) {
			free(d->slot[k]->name);
			free(d->slot[k]);
		}
	}
	free(d->slot);
	free(d->slot_cookie);
	free(d->bucket);
	uint64_t c = d->next_cookie;
	dmar_dir_init(d, c);
}

struct dmar_dirent *dmar_dir_find(const struct dmar_dir *d, const char *name)
{
	if (!d->nbuckets)
		return NULL;
	uint32_t h = name_hash(name);
	for (struct dmar_dirent *e = d->bucket[h & (d->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == h && !strcmp(e->name, name))
			return e;
	return NULL;
}

static int rehash(struct dmar_dir *d, size_t nb)
{
	struct dmar_dirent **b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t k = 0; k < d->nslots; k++) {
		struct dmar_dirent *e = d->slot[k];
		if (!e)
			continue;
		e->hnext = b[e->hash & (nb - 1)];
		b[e->hash & (nb - 1)] = e;
	}
	free(d->bucket);
	d->bucket = b;
	d->nbuckets = nb;
	return 0;
}

static void compact(struct dmar_dir *d)
{
	size_t w = 0;
	for (size_t k = 0; k < d->nslots; k++) {
		if (d->slot[k]) {
			d->slot[w] = d->slot[k];
			d->slot_cookie[w] = d->slot_cookie[k];
			w++;
		}
	}
	d->nslots = w;
}

int dmar_dir_add(struct dmar_dir *d, const char *name, void *ino)
{
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	if (d->live + 1 > d->nbuckets && rehash(d, d->nbuckets ? d->nbuckets * 2 : 16) < 0)
		return -ENOMEM;
	if (d->nslots == d->capslots) {
		if (d->nslots > 2 * d->live + 16) {
			compact(d);
		} else {
			size_t c = d->capslots ? d->capslots * 2 : 16;
			struct dmar_dirent **s = realloc(d->slot, c * sizeof(*s));
			if (!s)
				return -ENOMEM;
			d->slot = s;
			uint64_t *sc = realloc(d->slot_cookie, c * sizeof(*sc));
			if (!sc)
				return -ENOMEM;
			d->slot_cookie = sc;
			d->capslots = c;
		}
	}
	struct dmar_dirent *e = calloc(1, sizeof(*e));
	if (!e || !(e->name = strdup(name))) {
		free(e);
		return -ENOMEM;
	}
	e->ino = ino;
	e->cookie = d->next_cookie++;
	e->hash = name_hash(name);
	e->hnext = d->bucket[e->hash & (d->nbuckets - 1)];
	d->bucket[e->hash & (d->nbuckets - 1)] = e;
	d->slot[d->nslots] = e;
	d->slot_cookie[d->nslots] = e->cookie;
	d->nslots++;
	d->live++;
	return 0;
}

size_t dmar_dir_seek(const struct dmar_dir *d, uint64_t off)
{
	size_t lo = 0, hi = d->nslots;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->slot_cookie[mid] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void dmar_dir_remove(struct dmar_dir *d, struct dmar_dirent *e)
{
	struct dmar_dirent **p = &d->bucket[e->hash & (d->nbuckets - 1)];
	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	size_t k = dmar_dir_seek(d, e->cookie - 1);
	d->slot[k] = NULL;
	d->live--;
	free(e->name);
	free(e);
	/* Many holes (rm -rf of a big directory): squeeze them out.  A
	 * listing in progress resumes by cookie, so moving slots is safe. */
	if (d->nslots > 64 && d->nslots > 2 * d->live)
		compact(d);
}

struct dmar_dirent *dmar_dir_next(const struct dmar_dir *d, size_t *pos)
{
	while (*pos < d->nslots) {
		struct dmar_dirent *e = d->slot[(*pos)++];
		if (e)
			return e;
	}
	return NULL;
}
