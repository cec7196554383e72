/* SPDX-License-Identifier: MIT */
/*
 * dir.h - the entries of one directory: found by name in O(1) (a hash
 * table), listed in creation order by cookie (the readdir offset).
 *
 * Cookies increase and are never reused, so a listing that runs while
 * entries come and go neither repeats an entry nor skips one that stayed.
 * Removed entries leave a hole in the ordered slots until holes outnumber
 * live entries, then the slots are compacted (amortized O(1) removal).
 * Not thread-safe: the filesystem's namespace lock protects it.
 */
#ifndef DMARFS_DIR_H
#define DMARFS_DIR_H

#include <stddef.h>
#include <stdint.h>

struct dmar_dirent {
	char *name;
	void *ino;                 /* the filesystem's inode */
	uint64_t cookie;
	uint32_t hash;
	struct dmar_dirent *hnext; /* bucket chain */
};

struct dmar_dir {
	struct dmar_dirent **slot; /* by increasing cookie; NULL = removed */
	uint64_t *slot_cookie;     /* cookie of each slot, also for holes */
	size_t nslots, capslots, live;
	struct dmar_dirent **bucket;
	size_t nbuckets;           /* power of two, or 0 */
	uint64_t next_cookie;      /* the first entry gets first_cookie */
};

void dmar_dir_init(struct dmar_dir *d, uint64_t first_cookie);
/* Free every entry (not the inodes). */
void dmar_dir_clear(struct dmar_dir *d);
struct dmar_dirent *dmar_dir_find(const struct dmar_dir *d, const char *name);
/* Add name -> ino; the caller has checked it is not there.
 * 0, -ENAMETOOLONG, -ENOMEM. */
int dmar_dir_add(struct dmar_dir *d, const char *name, void *ino);
void dmar_dir_remove(struct dmar_dir *d, struct dmar_dirent *e);
static inline size_t dmar_dir_count(const struct dmar_dir *d)
{
	return d->live;
}
/* The slot to start a listing that resumes after cookie off. */
size_t dmar_dir_seek(const struct dmar_dir *d, uint64_t off);
/* The next live entry at or after *pos (advancing it), or NULL. */
struct dmar_dirent *dmar_dir_next(const struct dmar_dir *d, size_t *pos);

#endif /* DMARFS_DIR_H */
