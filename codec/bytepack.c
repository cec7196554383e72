/* SPDX-License-Identifier: MIT */
/*
 * Mining uses zstd's fastCover trainer with its parameter search (the same
 * one `zstd --train` runs), so a pack is as good as a zstd dictionary of the
 * same size; the default size is larger (see bytepack.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZDICT_STATIC_LINKING_ONLY
#define ZSTD_STATIC_LINKING_ONLY
#include <zdict.h>
#include <zstd.h>

#include "bytepack.h"
#include "format.h"
#include "hash.h"

#define CDICT_LEVELS 23

struct dmar_bytepack {
	uint8_t *mem;                         /* malloc'd block holding dict */
	const uint8_t *dict;
	size_t dict_len;
	uint32_t zstd_id;
	struct dmar_id sha;
	uint64_t id;
	pthread_mutex_t lock;                 /* protects the two caches below */
	ZSTD_CDict *cdict[CDICT_LEVELS];      /* by level, built on first use */
	ZSTD_DDict *ddict;
};

/* A pack over dict[0..len), which lies in mem (malloc'd): the pack owns
 * mem from here on, also on failure.  sha: the dictionary's SHA-256 when
 * the caller has it already, else NULL. */
static int pack_take(uint8_t *mem, const uint8_t *dict, size_t len, const struct dmar_id *sha,
		     struct dmar_bytepack **out)
{
	struct dmar_bytepack *p = calloc(1, sizeof(*p));
	if (!p) {
		free(mem);
		return -ENOMEM;
	}
	p->mem = mem;
	p->dict = dict;
	p->dict_len = len;
	p->zstd_id = (uint32_t)ZDICT_getDictID(dict, len);
	if (sha)
		p->sha = *sha;
	else
		dmar_hash(dict, len, &p->sha);
	p->id = dmar_get_le64(p->sha.b);
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

/*
 * The trainer builds its candidate dictionaries from the first 75 % of the
 * samples and scores them on the last 25 %.  Samples arrive in input order
 * (one directory after another), so unshuffled the score is taken on the
 * last directories only and what they hold never reaches the dictionary:
 * on the small files of /usr/include that made a pack 2.9 % worse than a
 * `zstd --train` dictionary of the same size, which shuffles its inputs
 * first.  So do we, with a fixed seed: mining the same samples gives the
 * same pack.  Returns a malloc'ed copy in *obuf / *osizes, or -ENOMEM.
 */
static int shuffle_samples(const uint8_t *samples, const size_t *sizes, unsigned n, size_t total,
			   uint8_t **obuf, size_t **osizes)
{
	size_t *off = malloc(n * sizeof(*off));
	unsigned *order = malloc(n * sizeof(*order));
	uint8_t *buf = malloc(total ? total : 1);
	size_t *sz = malloc(n * sizeof(*sz));
	if (!off || !order || !buf || !sz) {
		free(off);
		free(order);
		free(buf);
		free(sz);
		return -ENOMEM;
	}
	size_t o = 0;
	for (unsigned i = 0; i < n; i++) {
		off[i] = o;
		o += sizes[i];
		order[i] = i;
	}
	uint64_t x = UINT64_C(0x9E3779B97F4A7C15); /* xorshift64, fixed seed */
	for (unsigned i = n - 1; i > 0; i--) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		unsigned k = (unsigned)(x % ((uint64_t)i + 1));
		unsigned t = order[i];
		order[i] = order[k];
		order[k] = t;
	}
	o = 0;
	for (unsigned i = 0; i < n; i++) {
		memcpy(buf + o, samples + off[order[i]], sizes[order[i]]);
		sz[i] = sizes[order[i]];
		o += sz[i];
	}
	free(off);
	free(order);
	*obuf = buf;
	*osizes = sz;
	return 0;
}

int dmar_bytepack_train(const void *samples, const size_t *sizes, unsigned n, size_t dict_cap,
			unsigned threads, struct dmar_bytepack **out, struct dmar_error *err)
{
	if (n < 8)
		return dmar_error_set(err, -EINVAL, "too few samples to mine a byte pack (%u, need 8 or more)", n);
	size_t total = 0;
	for (unsigned i = 0; i < n; i++)
		total += sizes[i];
	/* Below a few KiB there are no patterns worth a dictionary, and the
	 * trainer would return one anyway. */
	if (total < 4096)
		return dmar_error_set(err, -EINVAL, "too little sample data to mine a byte pack (%zu bytes, need 4 KiB)",
				      total);
	if (dict_cap < 256 || dict_cap > DMAR_BYTEPACK_MAX)
		return dmar_error_set(err, -EINVAL, "byte pack size %zu out of range (256..%u)", dict_cap,
				      DMAR_BYTEPACK_MAX);
	uint8_t *dict = malloc(dict_cap);
	if (!dict)
		return dmar_error_set(err, -ENOMEM, "out of memory for a %zu-byte byte pack", dict_cap);

	ZDICT_fastCover_params_t prm;
	memset(&prm, 0, sizeof(prm));
	prm.d = 8;
	prm.steps = 4;
	prm.nbThreads = threads > 1 ? threads : 1;
	prm.zParams.compressionLevel = 3;
	uint8_t *mixed;
	size_t *mixed_sizes;
	if (shuffle_samples(samples, sizes, n, total, &mixed, &mixed_sizes) < 0) {
		free(dict);
		return dmar_error_set(err, -ENOMEM, "out of memory for the byte pack samples");
	}
	size_t r = ZDICT_optimizeTrainFromBuffer_fastCover(dict, dict_cap, mixed, mixed_sizes, n, &prm);
	free(mixed);
	free(mixed_sizes);
	if (ZDICT_isError(r)) {
		free(dict);
		return dmar_error_set(err, -EINVAL, "mining failed: %s (give more or larger samples)",
				      ZDICT_getErrorName(r));
	}
	int rc = pack_take(dict, dict, r, NULL, out);
	if (rc < 0)
		return dmar_error_errno(err, rc, "byte pack");
	if ((*out)->id == 0) {
		/* id 0 means "no pack" in artifacts; a 2^-64 event. */
		dmar_bytepack_free(*out);
		*out = NULL;
		return dmar_error_set(err, -EAGAIN, "mined pack has id 0; mine again");
	}
	return 0;
}

/* Check a serialized pack; on success *dlen and *sha describe its
 * dictionary, which starts at DMAR_BYTEPACK_HDR_SIZE. */
static int check_serialized(const void *buf, size_t len, uint32_t *dlen_out, struct dmar_id *sha_out,
			    struct dmar_error *err)
{
	const uint8_t *b = buf;
	if (len < DMAR_BYTEPACK_HDR_SIZE)
		return dmar_error_set(err, -EBADMSG, "byte pack truncated: %zu bytes, header needs %d", len,
				      DMAR_BYTEPACK_HDR_SIZE);
	if (memcmp(b, DMAR_BYTEPACK_MAGIC, 4) != 0)
		return dmar_error_set(err, -EBADMSG, "not a byte pack (bad magic)");
	if (b[4] != DMAR_BYTEPACK_VERSION)
		return dmar_error_set(err, -EPROTO, "byte pack version %u not supported (this dmar reads version %d)",
				      b[4], DMAR_BYTEPACK_VERSION);
	if (b[5] || b[6] || b[7])
		return dmar_error_set(err, -EBADMSG, "byte pack header: reserved bytes not zero");
	uint32_t dlen = dmar_get_le32(b + 8);
	if (dlen == 0 || dlen > DMAR_BYTEPACK_MAX)
		return dmar_error_set(err, -EBADMSG, "byte pack dictionary length %u out of range (1..%u)", dlen,
				      DMAR_BYTEPACK_MAX);
	if (len - DMAR_BYTEPACK_HDR_SIZE < dlen)
		return dmar_error_set(err, -EBADMSG, "byte pack truncated: dictionary has %zu of %u bytes",
				      len - DMAR_BYTEPACK_HDR_SIZE, dlen);
	if (len - DMAR_BYTEPACK_HDR_SIZE > dlen)
		return dmar_error_set(err, -EBADMSG, "byte pack has %zu trailing bytes",
				      len - DMAR_BYTEPACK_HDR_SIZE - dlen);
	const uint8_t *dict = b + DMAR_BYTEPACK_HDR_SIZE;
	struct dmar_id sha;
	dmar_hash(dict, dlen, &sha);
	if (memcmp(sha.b, b + 16, DMAR_HASH_SIZE) != 0)
		return dmar_error_set(err, -EBADMSG, "byte pack checksum mismatch (file is corrupt)");
	uint32_t zid = dmar_get_le32(b + 12);
	if (zid != (uint32_t)ZDICT_getDictID(dict, dlen))
		return dmar_error_set(err, -EBADMSG, "byte pack: zstd dictionary id %08x does not match header %08x",
				      (unsigned)ZDICT_getDictID(dict, dlen), zid);
	if (dmar_get_le64(sha.b) == 0)
		return dmar_error_set(err, -EBADMSG, "byte pack id is 0 (reserved)");
	*dlen_out = dlen;
	*sha_out = sha;
	return 0;
}

int dmar_bytepack_load(const void *buf, size_t len, struct dmar_bytepack **out,
		       struct dmar_error *err)
{
	uint32_t dlen;
	struct dmar_id sha;
	int r = check_serialized(buf, len, &dlen, &sha, err);
	if (r < 0)
		return r;
	uint8_t *dict = malloc(dlen);
	if (!dict)
		return dmar_error_errno(err, -ENOMEM, "byte pack");
	memcpy(dict, (const uint8_t *)buf + DMAR_BYTEPACK_HDR_SIZE, dlen);
	if ((r = pack_take(dict, dict, dlen, &sha, out)) < 0)
		return dmar_error_errno(err, r, "byte pack");
	return 0;
}

int dmar_bytepack_load_file(const char *path, struct dmar_bytepack **out, struct dmar_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dmar_error_errno(err, -errno, path);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int r = -errno;
		close(fd);
		return dmar_error_errno(err, r, path);
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)(DMAR_BYTEPACK_MAX + DMAR_BYTEPACK_HDR_SIZE)) {
		close(fd);
		return dmar_error_set(err, -EBADMSG, "%s: not a byte pack (not a regular file or too large)", path);
	}
	size_t len = (size_t)st.st_size;
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf) {
		close(fd);
		return dmar_error_errno(err, -ENOMEM, path);
	}
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	/* The pack keeps the buffer it was read into: no second copy of
	 * the dictionary to fault in. */
	struct dmar_error e2 = { 0 };
	uint32_t dlen;
	struct dmar_id sha;
	int r = check_serialized(buf, got, &dlen, &sha, &e2);
	if (r < 0) {
		free(buf);
		return dmar_error_set(err, r, "%s: %s", path, e2.msg);
	}
	if ((r = pack_take(buf, buf + DMAR_BYTEPACK_HDR_SIZE, dlen, &sha, out)) < 0)
		return dmar_error_errno(err, r, path);
	return 0;
}

int dmar_bytepack_serialize(const struct dmar_bytepack *p, uint8_t **buf, size_t *len)
{
	size_t n = DMAR_BYTEPACK_HDR_SIZE + p->dict_len;
	uint8_t *b = calloc(1, n);
	if (!b)
		return -ENOMEM;
	memcpy(b, DMAR_BYTEPACK_MAGIC, 4);
	b[4] = DMAR_BYTEPACK_VERSION;
	dmar_put_le32(b + 8, (uint32_t)p->dict_len);
	dmar_put_le32(b + 12, p->zstd_id);
	memcpy(b + 16, p->sha.b, DMAR_HASH_SIZE);
	memcpy(b + DMAR_BYTEPACK_HDR_SIZE, p->dict, p->dict_len);
	*buf = b;
	*len = n;
	return 0;
}

uint64_t dmar_bytepack_id(const struct dmar_bytepack *p)
{
	return p->id;
}

uint32_t dmar_bytepack_zstd_id(const struct dmar_bytepack *p)
{
	return p->zstd_id;
}

const void *dmar_bytepack_dict(const struct dmar_bytepack *p, size_t *len)
{
	*len = p->dict_len;
	return p->dict;
}

const struct ZSTD_CDict_s *dmar_bytepack_cdict(struct dmar_bytepack *p, int level)
{
	if (level < 1)
		level = 1;
	if (level >= CDICT_LEVELS)
		level = CDICT_LEVELS - 1;
	pthread_mutex_lock(&p->lock);
	/* By reference: the pack keeps its dictionary for as long as the
	 * CDict lives, and a copy is 256 KiB more to fault in.  (Not
	 * ZSTD_createCDict_advanced, which could put the tables on huge
	 * pages: a CDict made there leaves the contexts that use it at the
	 * default level.) */
	if (!p->cdict[level])
		p->cdict[level] = ZSTD_createCDict_byReference(p->dict, p->dict_len, level);
	ZSTD_CDict *c = p->cdict[level];
	pthread_mutex_unlock(&p->lock);
	return c;
}

const struct ZSTD_DDict_s *dmar_bytepack_ddict(struct dmar_bytepack *p)
{
	pthread_mutex_lock(&p->lock);
	if (!p->ddict)
		p->ddict = ZSTD_createDDict_byReference(p->dict, p->dict_len);
	ZSTD_DDict *d = p->ddict;
	pthread_mutex_unlock(&p->lock);
	return d;
}

void dmar_bytepack_free(struct dmar_bytepack *p)
{
	if (!p)
		return;
	for (int i = 0; i < CDICT_LEVELS; i++)
		ZSTD_freeCDict(p->cdict[i]);
	ZSTD_freeDDict(p->ddict);
	pthread_mutex_destroy(&p->lock);
	free(p->mem);
	free(p);
}
