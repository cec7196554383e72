/* SPDX-License-Identifier: MIT */
/*
 * The content-addressed chunk store: an open-addressing hash table (linear
 * probing, at most 3/4 full, doubled when it would pass that) from chunk id
 * to where its payload sits in the arena and how many references it has.
 *
 * Why linear probing: a lookup is one cache line or two in the common
 * case, and deletion by backward shift keeps the table free of tombstones,
 * so a store that sees heavy churn (files rewritten all day) never slows.
 *
 * The slot is chosen from the id's first 8 bytes mixed with a per-store
 * random key.  The bytes are uniform for honest content, but whoever
 * writes a file chooses its chunks, and a few million tries find contents
 * whose ids agree in the low bits; without the key those could all be
 * steered into one cluster of the table.
 *
 * Locking: one mutex around the table.  Payload copies (up to a chunk's
 * size) happen outside it: a new chunk is copied into freshly reserved
 * arena space first and published after, so a racing ref of the same id
 * either finds it or publishes its own copy first, and the loser frees its
 * copy.  The allocator is never called with the lock held.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "arena_i.h"

#define STORE_MIN_SLOTS 1024
/* Payloads from this size on are copied in with streaming stores. */
#define STORE_STREAM_MIN 4096

struct slot {
	struct dmar_id id;
	uint64_t off;
	uint32_t stored_len;
	uint32_t len;
	uint32_t refs; /* 0: the slot is empty */
	uint8_t enc;
};

struct dmar_store {
	pthread_mutex_t lock;
	struct slot *slots; /* protected by lock, as is everything below */
	uint64_t mask;      /* slots - 1, slots a power of two */
	uint64_t count;     /* used slots */
	uint64_t key;
	struct dmar_store_stats st;
};

static uint64_t slot_of(uint64_t key, uint64_t mask, const struct dmar_id *id)
{
	uint64_t h;

	memcpy(&h, id->b, sizeof(h));
	/* murmur3's finalizer: every input bit moves every output bit. */
	h ^= key;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h & mask;
}

static struct slot *find(struct dmar_store *s, const struct dmar_id *id)
{
	uint64_t head;
	memcpy(&head, id->b, sizeof(head));
	for (uint64_t i = slot_of(s->key, s->mask, id);; i = (i + 1) & s->mask) {
		struct slot *e = &s->slots[i];
		if (!e->refs)
			return NULL;
		/* The first 8 bytes settle almost every comparison. */
		uint64_t h;
		memcpy(&h, e->id.b, sizeof(h));
		if (h == head && !memcmp(&e->id, id, sizeof(*id)))
			return e;
	}
}

/* Make room for one more entry: 0 or -ENOMEM (the table is unchanged). */
static int reserve_slot(struct dmar_store *s)
{
	uint64_t n = s->mask + 1;

	if ((s->count + 1) * 4 <= n * 3)
		return 0;
	struct slot *ns = calloc(2 * n, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	uint64_t nmask = 2 * n - 1;
	for (uint64_t i = 0; i < n; i++) {
		if (!s->slots[i].refs)
			continue;
		uint64_t j = slot_of(s->key, nmask, &s->slots[i].id);
		while (ns[j].refs)
			j = (j + 1) & nmask;
		ns[j] = s->slots[i];
	}
	free(s->slots);
	s->slots = ns;
	s->mask = nmask;
	return 0;
}

/* Empty slot i, moving later members of its cluster back so that every
 * entry stays reachable from its home slot without tombstones. */
static void remove_slot(struct dmar_store *s, uint64_t i)
{
	uint64_t j = i;

	for (;;) {
		j = (j + 1) & s->mask;
		if (!s->slots[j].refs)
			break;
		uint64_t h = slot_of(s->key, s->mask, &s->slots[j].id);
		/* Entry j may move to i unless its home lies cyclically in (i, j]. */
		bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
		if (!stays) {
			s->slots[i] = s->slots[j];
			i = j;
		}
	}
	memset(&s->slots[i], 0, sizeof(s->slots[i]));
	s->count--;
}

int dmar_store_create(struct dmar_store **out)
{
	struct dmar_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->slots = calloc(STORE_MIN_SLOTS, sizeof(*s->slots));
	if (!s->slots) {
		free(s);
		return -ENOMEM;
	}
	s->mask = STORE_MIN_SLOTS - 1;
	if (getrandom(&s->key, sizeof(s->key), GRND_NONBLOCK) != sizeof(s->key)) {
		/* Early boot: a weak key is still better than none. */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		s->key = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)s;
	}
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

void dmar_store_destroy(struct dmar_store *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s->slots);
	free(s);
}

/*
 * Copy a new chunk's payload into its arena space.  With streaming
 * (non-temporal) stores for all but small ones: the payload was just
 * received or hashed, so it is in cache, and the arena's lines are not; an
 * ordinary copy first reads every destination line from memory (read for
 * ownership) only to overwrite it whole, and evicts what the caller works
 * on.  Nothing reads a stored chunk soon (a reader of the file comes later,
 * from memory either way).  32 KiB chunks into a 1 GiB region here:
 * memcpy 4-6 GB/s, streaming 8-15 GB/s.  The sfence makes the bytes
 * globally visible before the caller publishes the slot.
 */
static void copy_in(uint8_t *dst, const uint8_t *src, size_t n)
{
#ifdef __SSE2__
	if (n >= STORE_STREAM_MIN) {
		size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
		memcpy(dst, src, head);
		dst += head;
		src += head;
		n -= head;
		for (; n >= 64; n -= 64, dst += 64, src += 64) {
			__m128i a = _mm_loadu_si128((const __m128i *)src);
			__m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
			__m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
			__m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
			_mm_stream_si128((__m128i *)dst, a);
			_mm_stream_si128((__m128i *)(dst + 16), b);
			_mm_stream_si128((__m128i *)(dst + 32), c);
			_mm_stream_si128((__m128i *)(dst + 48), d);
		}
		memcpy(dst, src, n);
		_mm_sfence();
		return;
	}
#endif
	memcpy(dst, src, n);
}

/* Add a reference to an entry already in the table; called with the lock. */
static int ref_held(struct dmar_store *s, struct slot *e)
{
	if (e->refs == UINT32_MAX)
		return -EOVERFLOW;
	e->refs++;
	s->st.refs++;
	return 0;
}

/* A new entry with one reference (s->lock held, a slot reserved). */
static void insert(struct dmar_store *s, const struct dmar_id *id, uint8_t enc, uint32_t len, uint64_t off,
		   uint32_t stored_len)
{
	uint64_t i = slot_of(s->key, s->mask, id);
	while (s->slots[i].refs)
		i = (i + 1) & s->mask;
	s->slots[i] = (struct slot){
		.id = *id, .off = off, .stored_len = stored_len, .len = len, .refs = 1, .enc = enc,
	};
	s->count++;
	s->st.chunks++;
	s->st.refs++;
	s->st.stored_bytes += stored_len;
	s->st.chunk_bytes += len;
}

int dmar_store_ref(struct dmar_arena *a, const struct dmar_id *id, uint8_t enc, uint32_t len,
		   const void *payload, uint32_t stored_len, bool *added)
{
	struct dmar_store *s = a->store;
	struct slot *e;
	uint64_t off;
	int r;

	pthread_mutex_lock(&s->lock);
	e = find(s, id);
	if (e) {
		r = ref_held(s, e);
		pthread_mutex_unlock(&s->lock);
		if (r == 0 && added)
			*added = false;
		return r;
	}
	pthread_mutex_unlock(&s->lock);

	/* New to this store: the payload is looked at only now. */
	if (enc > DMAR_CHUNK_ZSTD_PACK || !len || !stored_len || !payload ||
	    (enc == DMAR_CHUNK_RAW && stored_len != len))
		return -EINVAL;
	r = dmar_arena_alloc(a, stored_len, &off);
	if (r < 0)
		return r;
	copy_in(a->region.base + off, payload, stored_len);

	pthread_mutex_lock(&s->lock);
	e = find(s, id);
	if (e) {
		/* Another thread published it while we copied. */
		r = ref_held(s, e);
		pthread_mutex_unlock(&s->lock);
		dmar_arena_release(a, off, stored_len);
		if (r == 0 && added)
			*added = false;
		return r;
	}
	r = reserve_slot(s);
	if (r < 0) {
		pthread_mutex_unlock(&s->lock);
		dmar_arena_release(a, off, stored_len);
		return r;
	}
	insert(s, id, enc, len, off, stored_len);
	pthread_mutex_unlock(&s->lock);
	if (added)
		*added = true;
	return 0;
}

int dmar_store_adopt(struct dmar_arena *a, const struct dmar_id *id, uint8_t enc, uint32_t len, uint64_t off,
		     uint32_t stored_len)
{
	struct dmar_store *s = a->store;
	int r;

	if (enc > DMAR_CHUNK_ZSTD_PACK || !len || !stored_len || (enc == DMAR_CHUNK_RAW && stored_len != len) ||
	    off % DMAR_ARENA_UNIT || off >= a->region.size || stored_len > a->region.size - off)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	struct slot *e = find(s, id);
	if (e) {
		r = e->off == off && e->stored_len == stored_len && e->len == len && e->enc == enc ? ref_held(s, e)
											     : -EUCLEAN;
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	if ((r = reserve_slot(s)) < 0) {
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	/* Attach runs before anything allocates: nothing races the claim. */
	r = dmar_arena_claim(a, off, stored_len);
	if (r < 0) {
		pthread_mutex_unlock(&s->lock);
		return r == -EEXIST ? -EUCLEAN : r;
	}
	insert(s, id, enc, len, off, stored_len);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int dmar_store_ref_existing(struct dmar_arena *a, const struct dmar_id *id)
{
	struct dmar_store *s = a->store;
	int r = -ENOENT;

	pthread_mutex_lock(&s->lock);
	struct slot *e = find(s, id);
	if (e)
		r = ref_held(s, e);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Drop one reference to the entry e; when it was the last, the entry
 * leaves the table and *off, *stored_len say what space to release once
 * the lock is dropped (*stored_len stays 0 otherwise).  The lock held. */
static void unref_held(struct dmar_store *s, struct slot *e, uint64_t *off, uint32_t *stored_len)
{
	s->st.refs--;
	if (--e->refs)
		return;
	*off = e->off;
	*stored_len = e->stored_len;
	s->st.chunks--;
	s->st.stored_bytes -= e->stored_len;
	s->st.chunk_bytes -= e->len;
	remove_slot(s, (uint64_t)(e - s->slots));
}

int dmar_store_unref(struct dmar_arena *a, const struct dmar_id *id)
{
	struct dmar_store *s = a->store;
	uint64_t off = 0;
	uint32_t stored_len = 0;

	pthread_mutex_lock(&s->lock);
	struct slot *e = find(s, id);
	if (!e) {
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	unref_held(s, e, &off, &stored_len);
	pthread_mutex_unlock(&s->lock);
	/* Nobody can find the chunk any more, so its space can go. */
	if (stored_len)
		dmar_arena_release(a, off, stored_len);
	return 0;
}

static struct dmar_chunk_info info_of(const struct slot *e)
{
	return (struct dmar_chunk_info){
		.off = e->off, .stored_len = e->stored_len, .len = e->len, .enc = e->enc, .refs = e->refs,
	};
}

int dmar_store_lookup(struct dmar_arena *a, const struct dmar_id *id, struct dmar_chunk_info *info)
{
	struct dmar_store *s = a->store;
	int r = -ENOENT;

	pthread_mutex_lock(&s->lock);
	struct slot *e = find(s, id);
	if (e) {
		*info = info_of(e);
		r = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---- batches ---- */

/*
 * A recipe names 10^4..10^6 chunks.  One at a time, each costs a lock and
 * unlock and a cache miss on a random slot; a batch takes the lock once
 * per STORE_BATCH ids (so a long recipe does not stall the uploads and
 * commits beside it for long) and prefetches the slot STORE_AHEAD ids
 * ahead, so the misses overlap.
 */
#define STORE_BATCH 256
#define STORE_AHEAD 16

static void prefetch_slot(const struct dmar_store *s, const struct dmar_id *id)
{
	__builtin_prefetch(&s->slots[slot_of(s->key, s->mask, id)]);
}

/* visit(s, i, ctx) for each i < n, in order, the lock held, STORE_BATCH
 * at a time; after each batch, with the lock dropped, done(ctx) if given. */
static void batch_walk(struct dmar_store *s, const struct dmar_id *ids, size_t n,
		       void (*visit)(struct dmar_store *s, size_t i, void *ctx), void (*done)(void *ctx), void *ctx)
{
	for (size_t b = 0; b < n; b += STORE_BATCH) {
		size_t end = n - b < STORE_BATCH ? n : b + STORE_BATCH;
		pthread_mutex_lock(&s->lock);
		for (size_t i = b; i < end && i < b + STORE_AHEAD; i++)
			prefetch_slot(s, &ids[i]);
		for (size_t i = b; i < end; i++) {
			if (i + STORE_AHEAD < end)
				prefetch_slot(s, &ids[i + STORE_AHEAD]);
			visit(s, i, ctx);
		}
		pthread_mutex_unlock(&s->lock);
		if (done)
			done(ctx);
	}
}

/* The lock held. */
static int resolve_one(struct dmar_store *s, struct dmar_id *id, unsigned idlen)
{
	struct slot *hit = NULL;
	uint64_t head;
	memcpy(&head, id->b, sizeof(head));
	/* Every id whose first 8 bytes are these has the same home slot, and
	 * linear probing keeps an entry between its home and the next empty
	 * slot, so that one cluster holds all the candidates. */
	for (uint64_t i = slot_of(s->key, s->mask, id);; i = (i + 1) & s->mask) {
		struct slot *e = &s->slots[i];
		if (!e->refs)
			break;
		uint64_t h;
		memcpy(&h, e->id.b, sizeof(h));
		if (h != head || memcmp(e->id.b + 8, id->b + 8, idlen - 8) != 0)
			continue;
		if (hit)
			return -ENOTUNIQ;
		hit = e;
	}
	if (!hit)
		return -ENOENT;
	*id = hit->id;
	return 0;
}

int dmar_store_resolve(struct dmar_arena *a, struct dmar_id *id, unsigned idlen)
{
	uint8_t state;
	int r = dmar_store_resolve_many(a, id, 1, idlen, &state);
	return r < 0 ? r : state == 0 ? 0 : state == 1 ? -ENOENT : -ENOTUNIQ;
}

struct resolve_walk {
	struct dmar_id *ids;
	unsigned idlen;
	uint8_t *state;
};

static void resolve_visit(struct dmar_store *s, size_t i, void *ctx)
{
	struct resolve_walk *w = ctx;
	int r = resolve_one(s, &w->ids[i], w->idlen);
	w->state[i] = r == 0 ? 0 : r == -ENOENT ? 1 : 2;
}

int dmar_store_resolve_many(struct dmar_arena *a, struct dmar_id *ids, size_t n, unsigned idlen, uint8_t *state)
{
	if (idlen < DMAR_STORE_PREFIX_MIN || idlen > DMAR_HASH_SIZE)
		return -EINVAL;
	struct resolve_walk w = { .ids = ids, .idlen = idlen, .state = state };
	batch_walk(a->store, ids, n, resolve_visit, NULL, &w);
	return 0;
}

struct ref_walk {
	const struct dmar_id *ids;
	struct dmar_chunk_info *info;
};

static void ref_visit(struct dmar_store *s, size_t i, void *ctx)
{
	struct ref_walk *w = ctx;
	struct slot *e = find(s, &w->ids[i]);
	w->info[i] = e && ref_held(s, e) == 0 ? info_of(e) : (struct dmar_chunk_info){ 0 };
}

void dmar_store_ref_many(struct dmar_arena *a, const struct dmar_id *ids, size_t n, struct dmar_chunk_info *info)
{
	struct ref_walk w = { .ids = ids, .info = info };
	batch_walk(a->store, ids, n, ref_visit, NULL, &w);
}

int dmar_store_ref_all(struct dmar_arena *a, const struct dmar_id *ids, size_t n, struct dmar_chunk_info *info)
{
	dmar_store_ref_many(a, ids, n, info);
	size_t k = 0;
	while (k < n && info[k].refs)
		k++;
	if (k == n)
		return 0;
	/* Rare (a chunk dropped under us): give back what was taken. */
	for (size_t i = 0; i < n; i++)
		if (info[i].refs)
			dmar_store_unref(a, &ids[i]);
	return -ENOENT;
}

struct unref_walk {
	struct dmar_arena *a;
	const struct dmar_id *ids;
	size_t ngone; /* entries of gone, this batch */
	struct {
		uint64_t off;
		uint32_t len;
	} gone[STORE_BATCH];
};

static void unref_visit(struct dmar_store *s, size_t i, void *ctx)
{
	struct unref_walk *w = ctx;
	struct slot *e = find(s, &w->ids[i]);
	if (!e)
		return;
	w->gone[w->ngone].len = 0;
	unref_held(s, e, &w->gone[w->ngone].off, &w->gone[w->ngone].len);
	if (w->gone[w->ngone].len)
		w->ngone++;
}

/* Nobody can find the batch's freed chunks any more, so their space can go. */
static void unref_done(void *ctx)
{
	struct unref_walk *w = ctx;
	for (size_t k = 0; k < w->ngone; k++)
		dmar_arena_release(w->a, w->gone[k].off, w->gone[k].len);
	w->ngone = 0;
}

void dmar_store_unref_many(struct dmar_arena *a, const struct dmar_id *ids, size_t n)
{
	struct unref_walk w = { .a = a, .ids = ids };
	batch_walk(a->store, ids, n, unref_visit, unref_done, &w);
}

void dmar_store_each(struct dmar_arena *a, void (*fn)(void *ctx, const struct dmar_id *id,
						       const struct dmar_chunk_info *info),
		     void *ctx)
{
	struct dmar_store *s = a->store;

	pthread_mutex_lock(&s->lock);
	for (uint64_t i = 0; i <= s->mask; i++) {
		if (!s->slots[i].refs)
			continue;
		struct dmar_chunk_info ci = info_of(&s->slots[i]);
		fn(ctx, &s->slots[i].id, &ci);
	}
	pthread_mutex_unlock(&s->lock);
}

void dmar_store_stats(struct dmar_arena *a, struct dmar_store_stats *st)
{
	struct dmar_store *s = a->store;

	pthread_mutex_lock(&s->lock);
	*st = s->st;
	pthread_mutex_unlock(&s->lock);
}
