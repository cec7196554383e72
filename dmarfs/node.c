/* SPDX-License-Identifier: MIT */
/*
 * The node: net/server.h's operations over the mount's namespace and
 * chunk store, the peers, and shipping a file to one of them.
 *
 * Locking is the filesystem's (fs_i.h): the namespace mutex for names,
 * each inode's rwlock for contents.  Nothing here calls the kernel
 * (notify_inval_entry) with a lock held: the kernel may be waiting for one
 * of our FUSE requests that waits for that lock.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "fs_i.h"
#include "idle.h"
#include "node.h"
#include "codec/idset.h"
#include "net/peers.h"
#include "net/probe.h"
#include "net/relay.h"
#include "net/swarm.h"
#include "net/server.h"
#include "codec/clock.h"

/* How long an uploaded chunk waits for the commit that uses it
 * (DMARFS_STAGE_SECONDS overrides it: the tests' expiry). */
#define STAGE_SECONDS 600

static uint64_t stage_seconds(void)
{
	static uint64_t v;
	return ns_env_knob("DMARFS_STAGE_SECONDS", STAGE_SECONDS, &v);
}
/* When the arena is full, staged chunks older than this are dropped to
 * make room: an upload that failed (its sender got ENOSPC and gave up)
 * must not hold the arena for STAGE_SECONDS.  A transfer still running
 * keeps its recent chunks; if it loses older ones its commit is answered
 * with the missing ids and it sends them again. */
#define STAGE_PRESSURE_MS 2000

struct stage {
	struct dmar_id id;
	uint64_t expires;    /* CLOCK_MONOTONIC seconds */
	uint64_t added_ms;   /* CLOCK_MONOTONIC milliseconds of the last upload */
	uint64_t upload;     /* the X-Dmar-Upload of the last upload (0: none) */
	struct stage *next;
};

/* Uploads that got ENOSPC, newest last: their senders give up, so their
 * stages go at once, and chunks still in flight from their other streams
 * are refused rather than staged again. */
#define FAILED_UPLOADS 16

/* A 1 GiB upload stages 32 768 chunks of the default 32 KiB average: at
 * 4096 buckets their chains grew to 8 links, each a cache miss, and
 * walking them in stage_add was 2.7 % of the receiver's CPU.  512 KiB of
 * heads keeps chains of a few GiB staged short. */
#define STAGE_BUCKETS 65536

struct dmarfs_node {
	struct dmarfs *fs;
	struct dmarfs_node_config cfg;
	char *name;
	char *token;
	struct dmar_peers *peers;
	/* Every peer of the peers file, then this node itself when the file
	 * does not list it (a node reaches itself as @SELF over loopback). */
	size_t npeers;
	const char **names;
	struct dmar_client **clients;
	/* MOUNT/@all/'s own client, to the first other peer (it answers for
	 * the group's names): NULL when there is no group */
	struct dmar_client *group;
	const char *group_first; /* the peer it talks to */
	struct dmar_server *server;
	/* broadcasts going through this node (net/relay.h) */
	struct dmar_relay *relay;
	struct dmar_chunk_source relay_src;
	/* staged chunks: one reference each, protected by stage_lock */
	pthread_mutex_t stage_lock;
	struct stage *stage[STAGE_BUCKETS];
	size_t nstaged;
	uint64_t failed[FAILED_UPLOADS];
	unsigned nfailed;
	uint64_t next_reap;
	uint64_t next_xfer; /* transfer ids for events, atomic */
	/* The transfers this node shipped, for GET /v1/node: counts and the
	 * last one's figures (what its client counted), under xfer_lock. */
	pthread_mutex_t xfer_lock;
	uint64_t xfers_done, xfers_failed;
	uint64_t xfer_logical, xfer_wire; /* bytes of the transfers that ended, done or failed */
	struct dmar_hist xfer_eff, xfer_wspeed; /* their speeds, bytes/s (GET /metrics) */
	/* files committed here: from a recipe, from content held (clone) */
	_Atomic uint64_t commits_recipe, commits_content, commits_delta;
	json_t *xfer_last;
	/* GET /v1/mesh: the last probe of the peers and when it ended
	 * (mono_ms), under mesh_lock, which is held for a probe. */
	pthread_mutex_t mesh_lock;
	json_t *mesh;
	uint64_t mesh_at;
	char url[DMAR_PEER_URL_MAX + 256]; /* this node's own, as its peers reach it */
};

static struct dmar_fsctx *CTX(struct dmarfs_node *n)
{
	return &n->fs->cfg.ctx;
}

/* ---- the memory budget -------------------------------------------------- */

/* The daemon's anonymous resident memory: everything but the arena (a
 * shared mapping), i.e. heap, stacks and libraries' data.  0 if unknown.
 * /proc/self/statm's resident less shared pages is RssAnon, at a small
 * part of the cost of rendering /proc/self/status (asked at every
 * commit: a tree copied file by file makes one each). */
static uint64_t anon_bytes(void)
{
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[128];
	ssize_t got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	unsigned long long size, resident, shared;
	if (got <= 0)
		return 0;
	buf[got] = 0;
	if (sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3 || shared > resident)
		return 0;
	return (uint64_t)(resident - shared) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Refuse a request that would take the daemon's memory outside the arena
 * past mem_max (a recipe of a million tiny entries is 4 GiB of file and
 * 80 MiB of extents here, for 4 KiB of data).  extra: what the request
 * is about to allocate. */
static int mem_check(struct dmarfs_node *n, uint64_t extra, const char *what, struct dmar_error *err)
{
	if (!n->cfg.mem_max)
		return 0;
	uint64_t used = anon_bytes();
	if (used + extra <= n->cfg.mem_max)
		return 0;
	return dmar_error_set(err, -EDQUOT,
			      "node memory budget: %s needs %" PRIu64 " MiB, %" PRIu64 " MiB of mem_max=%" PRIu64
			      " MiB are in use outside the arena",
			      what, extra >> 20, used >> 20, n->cfg.mem_max >> 20);
}

/* ---- staging ------------------------------------------------------------ */

static size_t bucket(const struct dmar_id *id)
{
	uint32_t h;
	memcpy(&h, id->b, sizeof(h)); /* ids are uniform: any bytes hash */
	return h % STAGE_BUCKETS;
}

/* Unlink the stage *p, dropping its reference; stage_lock held. */
static void stage_drop(struct dmarfs_node *n, struct stage **p)
{
	struct stage *s = *p;
	*p = s->next;
	dmar_store_unref(CTX(n)->arena, &s->id);
	free(s);
	n->nstaged--;
}

/* Drop every stage that expires by expired_by (seconds), was last
 * uploaded by added_by (milliseconds) or by upload; how many went.
 * stage_lock held.  Both clocks are CLOCK_MONOTONIC and never 0, and
 * upload ids are never 0, so 0 selects nothing. */
static size_t stage_sweep(struct dmarfs_node *n, uint64_t expired_by, uint64_t added_by, uint64_t upload)
{
	size_t gone = 0;
	for (size_t b = 0; b < STAGE_BUCKETS && n->nstaged; b++)
		for (struct stage **p = &n->stage[b]; *p;) {
			if ((*p)->expires <= expired_by || (*p)->added_ms <= added_by ||
			    (upload && (*p)->upload == upload)) {
				stage_drop(n, p);
				gone++;
			} else {
				p = &(*p)->next;
			}
		}
	return gone;
}

/* Drop expired stages; stage_lock held.  Runs now and then from the API's
 * own calls, so an idle node keeps its stages until the next request. */
static void reap(struct dmarfs_node *n, uint64_t t)
{
	if (t < n->next_reap)
		return;
	n->next_reap = t + (stage_seconds() < 10 ? 1 : 10);
	stage_sweep(n, t, 0, 0);
}

/* Hold one staging reference on id (the caller has just added one and
 * hands it over): a second upload of the same chunk only refreshes it. */
static void stage_add(struct dmarfs_node *n, const struct dmar_id *id, uint64_t upload)
{
	uint64_t t = dmar_mono_ms() / 1000;
	pthread_mutex_lock(&n->stage_lock);
	reap(n, t);
	size_t b = bucket(id);
	for (struct stage *s = n->stage[b]; s; s = s->next)
		if (!memcmp(s->id.b, id->b, DMAR_HASH_SIZE)) {
			s->expires = t + stage_seconds();
			s->added_ms = dmar_mono_ms();
			s->upload = upload;
			pthread_mutex_unlock(&n->stage_lock);
			dmar_store_unref(CTX(n)->arena, id);
			return;
		}
	struct stage *s = malloc(sizeof(*s));
	if (s) {
		s->id = *id;
		s->expires = t + stage_seconds();
		s->added_ms = dmar_mono_ms();
		s->upload = upload;
		s->next = n->stage[b];
		n->stage[b] = s;
		n->nstaged++;
	}
	pthread_mutex_unlock(&n->stage_lock);
	if (!s)
		dmar_store_unref(CTX(n)->arena, id); /* no memory to track it: not held */
}

/* A commit took its own references: the stages of its chunks go.  Those
 * its transfer uploaded (upload, its X-Dmar-Upload) are found in one walk
 * of the table, far cheaper than a lookup per entry of a big recipe (1 ms
 * for 29,000) when a few were uploaded; without one, each entry's. */
static void stage_release(struct dmarfs_node *n, const struct dmar_recipe *r, uint64_t upload)
{
	pthread_mutex_lock(&n->stage_lock);
	if (upload && r->n > STAGE_BUCKETS / 16) {
		stage_sweep(n, 0, 0, upload);
		pthread_mutex_unlock(&n->stage_lock);
		return;
	}
	for (size_t i = 0; i < r->n && n->nstaged; i++) {
		if (r->e[i].kind != DMAR_RECIPE_CHUNK)
			continue;
		for (struct stage **p = &n->stage[bucket(&r->e[i].id)]; *p; p = &(*p)->next)
			if (!memcmp((*p)->id.b, r->e[i].id.b, DMAR_HASH_SIZE)) {
				stage_drop(n, p);
				break;
			}
	}
	pthread_mutex_unlock(&n->stage_lock);
}

/* Drop the stages older than STAGE_PRESSURE_MS; how many went.  The
 * arena's reclaimer: any allocation that finds the arena full (an upload,
 * a local write, an encode) takes back the space of abandoned uploads
 * before it fails with ENOSPC. */
static size_t stage_shed(void *ctx)
{
	struct dmarfs_node *n = ctx;
	pthread_mutex_lock(&n->stage_lock);
	size_t gone = stage_sweep(n, 0, dmar_mono_ms() - STAGE_PRESSURE_MS, 0);
	pthread_mutex_unlock(&n->stage_lock);
	return gone;
}

/* Expiry without requests: the idle thread's tick (ns_add_owner). */
static void stage_tick(void *ctx)
{
	struct dmarfs_node *n = ctx;
	pthread_mutex_lock(&n->stage_lock);
	reap(n, dmar_mono_ms() / 1000);
	pthread_mutex_unlock(&n->stage_lock);
}

/* For the check (check.h): one reference per staged chunk. */
static void stage_refs(void *ctx, const struct dmar_file_refs *r)
{
	struct dmarfs_node *n = ctx;
	pthread_mutex_lock(&n->stage_lock);
	for (size_t b = 0; b < STAGE_BUCKETS && n->nstaged; b++)
		for (struct stage *s = n->stage[b]; s; s = s->next)
			r->chunk(r->ctx, &s->id);
	pthread_mutex_unlock(&n->stage_lock);
}

static void stage_clear(struct dmarfs_node *n)
{
	stage_sweep(n, UINT64_MAX, 0, 0);
}

/* Whether upload has failed here (stage_lock held). */
static bool upload_failed(const struct dmarfs_node *n, uint64_t upload)
{
	for (unsigned i = 0; upload && i < n->nfailed; i++)
		if (n->failed[i] == upload)
			return true;
	return false;
}

/* upload got ENOSPC: drop what it staged, and remember it. */
static void upload_fail(struct dmarfs_node *n, uint64_t upload)
{
	if (!upload)
		return;
	pthread_mutex_lock(&n->stage_lock);
	if (!upload_failed(n, upload)) {
		if (n->nfailed == FAILED_UPLOADS)
			memmove(n->failed, n->failed + 1, --n->nfailed * sizeof(n->failed[0]));
		n->failed[n->nfailed++] = upload;
	}
	stage_sweep(n, 0, 0, upload);
	pthread_mutex_unlock(&n->stage_lock);
}

/* ---- paths -------------------------------------------------------------- */

static int hold(struct dmarfs *fs, const char *path, struct inode **out)
{
	return ns_walk(fs, path, out);
}

static void unhold(struct dmarfs *fs, struct inode *i)
{
	ns_forget(fs, i, 1);
}

static fuse_ino_t nodeid(struct dmarfs *fs, struct inode *i)
{
	return i == fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)i;
}

/* Tell the kernel that parent/name changed, so a cached entry does not
 * show the old file for up to its timeout. */
/* The kernel refused FUSE_EXPIRE_ONLY once (before Linux 6.2): plain
 * invalidations from then on. */
static atomic_bool no_expire;

/*
 * Tell the kernel that parent/name changed under it (an API commit,
 * remove or mkdir).  The dentry is expired, not dropped (FUSE_EXPIRE_ONLY,
 * which libfuse 3.14 cannot send, so the notification is written here):
 * the next lookup asks us and finds the new file.  Dropping it at once
 * also evicted the replaced inode, and with it that file's page cache,
 * inside this call: a commit over a 1 GiB file that b had read took 35 ms
 * longer, on the sender's clock.  Expired, the old inode goes when the
 * name is next looked up, or under memory pressure.
 */
static void inval(struct dmarfs *fs, fuse_ino_t parent, const char *name)
{
	if (!fs->se)
		return;
	/* the directory's mtime, ctime and nlink changed too */
	fuse_lowlevel_notify_inval_inode(fs->se, parent, -1, 0);
	size_t len = strlen(name);
	if (!atomic_load(&no_expire)) {
		struct fuse_out_header oh = { .error = FUSE_NOTIFY_INVAL_ENTRY };
		struct fuse_notify_inval_entry_out o = { .parent = parent, .namelen = (uint32_t)len,
							 .flags = FUSE_EXPIRE_ONLY };
		struct iovec iov[3] = { { &oh, sizeof(oh) }, { &o, sizeof(o) }, { (void *)name, len + 1 } };
		oh.len = (uint32_t)(sizeof(oh) + sizeof(o) + len + 1);
		ssize_t w = writev(fuse_session_fd(fs->se), iov, 3);
		/* Anything but EINVAL (ENOENT: nothing cached there) is the
		 * answer a plain invalidation would get too. */
		if (w >= 0 || errno != EINVAL)
			return;
		atomic_store(&no_expire, true);
	}
	fuse_lowlevel_notify_inval_entry(fs->se, parent, name, len);
}

/* ---- JSON ----------------------------------------------------------- */

static const char *type_name(mode_t m)
{
	return S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : S_ISREG(m) ? "file" : "other";
}

/* i->lock held. */
/* figures: add a regular file's encoding figures (logical, stored, chunks,
 * state), a walk over its extents; a directory's entries go without, so
 * that a listing costs its entries, not their chunks. */
static json_t *stat_json(struct dmarfs *fs, struct inode *i, const char *name, nlink_t nlink, bool figures)
{
	json_t *o = json_pack("{s:s, s:I, s:i, s:f, s:I, s:I, s:i, s:i}", "type", type_name(i->mode), "size",
			      (json_int_t)ns_inode_size(i), "mode", (int)(i->mode & 07777), "mtime",
			      (double)i->mtime.tv_sec + (double)i->mtime.tv_nsec / 1e9, "mtime_ns",
			      (json_int_t)i->mtime.tv_sec * 1000000000 + i->mtime.tv_nsec, "nlink", (json_int_t)nlink,
			      "uid", (int)i->uid, "gid", (int)i->gid);
	if (!o)
		return NULL;
	if (name)
		json_object_set_new(o, "name", json_string(name));
	if (S_ISREG(i->mode) && figures) {
		struct dmar_file_stats fst;
		dmar_file_stats(&i->f, &fs->cfg.ctx, &fst);
		json_object_set_new(o, "logical", json_integer((json_int_t)fst.logical));
		json_object_set_new(o, "stored", json_integer((json_int_t)fst.stored));
		json_object_set_new(o, "chunks", json_integer((json_int_t)fst.chunks));
		json_object_set_new(o, "state", json_string(fst.raw ? "raw" : "encoded"));
	} else if (S_ISLNK(i->mode)) {
		json_object_set_new(o, "target", json_string(i->target));
	}
	return o;
}

/* ---- the server's operations ------------------------------------------ */

static int op_info(void *ctx, json_t **out, struct dmar_error *err)
{
	(void)err;
	struct dmarfs_node *n = ctx;
	struct dmar_arena *a = CTX(n)->arena;
	struct dmar_store_stats ss;
	dmar_store_stats(a, &ss);
	json_t *peers = json_array();
	for (size_t i = 0; peers && i < dmarfs_node_peer_count(n); i++)
		json_array_append_new(peers, json_string(dmarfs_node_peer_name(n, i)));
	pthread_mutex_lock(&n->stage_lock);
	size_t staged = n->nstaged;
	pthread_mutex_unlock(&n->stage_lock);
	pthread_mutex_lock(&n->fs->ns);
	uint64_t inodes = n->fs->inodes;
	pthread_mutex_unlock(&n->fs->ns);
	pthread_mutex_lock(&n->xfer_lock);
	json_t *xfers = json_pack("{s:I, s:I, s:O?}", "done", (json_int_t)n->xfers_done, "failed",
				  (json_int_t)n->xfers_failed, "last", n->xfer_last);
	pthread_mutex_unlock(&n->xfer_lock);
	const char *enc = CTX(n)->encode == DMAR_ENCODE_NONE ? "none"
			  : CTX(n)->encode == DMAR_ENCODE_DEDUP ? "dedup" : "zstd";
	*out = json_pack("{s:s, s:{s:I, s:I, s:I, s:s, s:I}, s:{s:I, s:I, s:I, s:I, s:I}, s:I, s:s, s:o}", "name",
			 n->name, "arena", "size", (json_int_t)dmar_arena_size(a), "used",
			 (json_int_t)dmar_arena_used(a), "free", (json_int_t)(dmar_arena_size(a) - dmar_arena_used(a)),
			 "backing", dmar_arena_describe(a), "pagesize", (json_int_t)dmar_arena_pagesize(a), "store",
			 "chunks", (json_int_t)ss.chunks, "refs", (json_int_t)ss.refs, "stored_bytes",
			 (json_int_t)ss.stored_bytes, "chunk_bytes", (json_int_t)ss.chunk_bytes, "staged",
			 (json_int_t)staged, "inodes", (json_int_t)inodes, "encode", enc, "peers",
			 peers ? peers : json_array());
	if (*out && xfers)
		json_object_set_new(*out, "transfers", xfers);
	else
		json_decref(xfers);
	if (*out && n->relay)
		json_object_set_new(*out, "relay", dmar_relay_info(n->relay));
	if (*out)
		json_object_set_new(*out, "commits",
				    json_pack("{s:I, s:I, s:I}", "recipe", (json_int_t)atomic_load(&n->commits_recipe),
					      "content", (json_int_t)atomic_load(&n->commits_content), "delta",
					      (json_int_t)atomic_load(&n->commits_delta)));
	return *out ? 0 : -ENOMEM;
}

/* Transfer speeds, bytes/s: 1 MB/s to 40 GB/s. */
static const double speed_bounds[] = { 1e6, 1e7, 5e7, 1e8, 2.5e8, 5e8, 1e9, 2e9, 4e9, 1e10, 4e10 };

/* GET /metrics: what the node holds and what it shipped. */
static void op_metrics(void *ctx, struct dmar_prom *p)
{
	struct dmarfs_node *n = ctx;
	struct dmar_arena *a = CTX(n)->arena;
	struct dmar_store_stats ss;
	dmar_store_stats(a, &ss);
	uint64_t used = dmar_arena_used(a);
	pthread_mutex_lock(&n->stage_lock);
	size_t staged = n->nstaged;
	pthread_mutex_unlock(&n->stage_lock);
	pthread_mutex_lock(&n->fs->ns);
	uint64_t inodes = n->fs->inodes;
	size_t backlog = n->fs->idle_queued;
	pthread_mutex_unlock(&n->fs->ns);
	dmar_prom_one(p, "dmar_arena_size_bytes", "gauge", "The arena's size (size=)",
		      (double)dmar_arena_size(a));
	dmar_prom_one(p, "dmar_arena_used_bytes", "gauge", "Bytes of the arena in use, all kinds", (double)used);
	dmar_prom_head(p, "dmar_arena_used_by_kind_bytes", "gauge",
		       "Bytes of the arena in use: chunks (encoded data, each distinct chunk once), other (raw "
		       "extents of files not yet encoded, the journal and metadata)");
	dmar_prom_sample(p, "dmar_arena_used_by_kind_bytes", "kind=\"chunks\"", (double)ss.stored_bytes);
	dmar_prom_sample(p, "dmar_arena_used_by_kind_bytes", "kind=\"other\"",
			 (double)(used > ss.stored_bytes ? used - ss.stored_bytes : 0));
	dmar_prom_one(p, "dmar_chunks", "gauge", "Distinct chunks stored", (double)ss.chunks);
	dmar_prom_one(p, "dmar_chunk_refs", "gauge", "References to them (files' extents and staging)",
		      (double)ss.refs);
	dmar_prom_one(p, "dmar_chunk_logical_bytes", "gauge", "The stored chunks' bytes before compression",
		      (double)ss.chunk_bytes);
	dmar_prom_one(p, "dmar_chunks_staged", "gauge", "Chunks received for a commit that has not come yet",
		      (double)staged);
	dmar_prom_one(p, "dmar_inodes", "gauge", "Files, directories and symlinks", (double)inodes);
	dmar_prom_one(p, "dmar_encode_backlog_files", "gauge",
		      "Files written and not yet encoded (the encoder thread's list)", (double)backlog);
	dmar_prom_one(p, "dmar_peers", "gauge", "Peers configured", (double)dmarfs_node_peer_count(n));
	pthread_mutex_lock(&n->xfer_lock);
	uint64_t done = n->xfers_done, failed = n->xfers_failed, logical = n->xfer_logical, wire = n->xfer_wire;
	pthread_mutex_unlock(&n->xfer_lock);
	dmar_prom_head(p, "dmar_transfers_total", "counter",
		       "Transfers this node shipped to peers (cp into @PEER/, POST /v1/transfers), by result");
	dmar_prom_sample(p, "dmar_transfers_total", "result=\"done\"", (double)done);
	dmar_prom_sample(p, "dmar_transfers_total", "result=\"failed\"", (double)failed);
	dmar_prom_one(p, "dmar_transfer_logical_bytes_total", "counter",
		      "File bytes of those transfers (what effective speed counts)", (double)logical);
	dmar_prom_one(p, "dmar_transfer_wire_bytes_total", "counter",
		      "Bytes those transfers put on the wire (chunks, recipes, HTTP)", (double)wire);
	dmar_prom_head(p, "dmar_transfer_effective_speed_bytes_per_second", "histogram",
		       "Effective speed of each transfer that succeeded: file bytes / wall time");
	dmar_prom_hist(p, "dmar_transfer_effective_speed_bytes_per_second", NULL, &n->xfer_eff);
	dmar_prom_head(p, "dmar_transfer_wire_speed_bytes_per_second", "histogram",
		       "Wire speed of each transfer that succeeded: wire bytes / wall time");
	dmar_prom_hist(p, "dmar_transfer_wire_speed_bytes_per_second", NULL, &n->xfer_wspeed);
	dmar_prom_head(p, "dmar_commits_total", "counter",
		       "Files committed here over REST, by kind: recipe (chunks sent or held), content (a copy of "
		       "a file held, by its content id)");
	dmar_prom_sample(p, "dmar_commits_total", "kind=\"recipe\"", (double)atomic_load(&n->commits_recipe));
	dmar_prom_sample(p, "dmar_commits_total", "kind=\"content\"", (double)atomic_load(&n->commits_content));
	dmar_prom_sample(p, "dmar_commits_total", "kind=\"delta\"", (double)atomic_load(&n->commits_delta));
}

static int op_stat(void *ctx, const char *path, json_t **out, struct dmar_error *err)
{
	(void)err;
	struct dmarfs_node *n = ctx;
	struct dmarfs *fs = n->fs;
	struct inode *i;
	int r = hold(fs, path, &i);
	if (r < 0)
		return r;
	nlink_t nl = ns_nlink(fs, i);
	const char *slash = strrchr(path, '/');
	const char *name = slash && slash[1] ? slash + 1 : path;
	char leaf[256] = "";
	if (slash && !slash[1]) { /* "dir/": the name before the trailing '/' */
		const char *b = slash;
		while (b > path && b[-1] != '/')
			b--;
		snprintf(leaf, sizeof(leaf), "%.*s", (int)(slash - b), b);
		name = leaf;
	}
	ns_settle(fs, i); /* its figures as the encode at close gives them */
	pthread_rwlock_rdlock(&i->lock);
	json_t *o = stat_json(fs, i, name, nl, true);
	pthread_rwlock_unlock(&i->lock);
	if (o && S_ISDIR(i->mode)) {
		pthread_mutex_lock(&fs->ns);
		size_t count = dmar_dir_count(&i->dir);
		pthread_mutex_unlock(&fs->ns);
		/* about what jansson takes for an entry's object; the budget
		 * is read without the namespace lock (a file read) */
		if ((r = mem_check(n, (uint64_t)count * 1024, "the listing", err)) < 0) {
			json_decref(o);
			unhold(fs, i);
			return r;
		}
		/* A snapshot of the entries under ns; each child's attributes
		 * under its own lock (ns first, then one inode: the order of
		 * fs.c). */
		json_t *ents = json_array();
		json_int_t unlisted = 0;
		pthread_mutex_lock(&fs->ns);
		size_t pos = dmar_dir_seek(&i->dir, 0);
		for (struct dmar_dirent *e; ents && (e = dmar_dir_next(&i->dir, &pos));) {
			/* A name made locally that JSON cannot carry (not
			 * UTF-8, a control character) is counted, not listed:
			 * the API could not name it either. */
			if (dmar_wire_name_check(e->name, strlen(e->name), false, NULL) < 0) {
				unlisted++;
				continue;
			}
			struct inode *c = ENTRY_INO(e);
			pthread_rwlock_rdlock(&c->lock);
			json_t *cj = stat_json(fs, c, e->name, c->nlink, false);
			pthread_rwlock_unlock(&c->lock);
			if (cj)
				json_array_append_new(ents, cj);
		}
		pthread_mutex_unlock(&fs->ns);
		json_object_set_new(o, "entries", ents ? ents : json_array());
		if (unlisted)
			json_object_set_new(o, "unlisted", json_integer(unlisted));
	}
	unhold(fs, i);
	if (!o)
		return -ENOMEM;
	*out = o;
	return 0;
}

static int op_remove(void *ctx, const char *path, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	struct dmarfs *fs = n->fs;
	char leaf[256];
	struct inode *d;
	int r = ns_walk_parent(fs, path, &d, leaf);
	if (r < 0)
		return r;
	if (!leaf[0])
		r = dmar_error_set(err, -EINVAL, "the root cannot be removed");
	else
		r = ns_remove(fs, d, leaf, NS_ANY);
	if (!r)
		inval(fs, nodeid(fs, d), leaf);
	unhold(fs, d);
	return r;
}

/* path's directory (held: unhold it) and last component, and who a name
 * made there belongs to: the directory's owner (the API's caller has no
 * uid here). */
static int parent_of(struct dmarfs *fs, const char *path, struct inode **d, char *leaf, uid_t *uid, gid_t *gid)
{
	int r = ns_walk_parent(fs, path, d, leaf);
	if (r < 0)
		return r;
	pthread_rwlock_rdlock(&(*d)->lock);
	*uid = (*d)->uid;
	*gid = (*d)->gid;
	pthread_rwlock_unlock(&(*d)->lock);
	return 0;
}

static int op_mkdir(void *ctx, const char *path, uint32_t mode, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	struct dmarfs *fs = n->fs;
	char leaf[256];
	struct inode *d, *i;
	uid_t uid;
	gid_t gid;
	int r = parent_of(fs, path, &d, leaf, &uid, &gid);
	if (r < 0)
		return r;
	if (!leaf[0])
		r = -EEXIST;
	else if ((r = ns_make(fs, d, leaf, S_IFDIR | (mode & 07777), 0, NULL, uid, gid, &i)) == 0)
		unhold(fs, i);
	else if (r == -ENOSPC)
		dmar_error_set(err, r, "no inode left (nr_inodes), or no room to record it");
	if (!r)
		inval(fs, nodeid(fs, d), leaf);
	unhold(fs, d);
	return r;
}

/* A tree commit's symlink.  Replacing goes through a temporary name and
 * a rename over the old one, so the name is never missing on the way. */
static int op_symlink(void *ctx, const char *path, const char *target, bool noreplace, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	struct dmarfs *fs = n->fs;
	char leaf[256];
	struct inode *d, *i;
	uid_t uid;
	gid_t gid;
	int r = parent_of(fs, path, &d, leaf, &uid, &gid);
	if (r < 0)
		return r;
	if (!leaf[0]) {
		r = -EEXIST;
		goto out;
	}
	r = ns_make(fs, d, leaf, S_IFLNK | 0777, 0, target, uid, gid, &i);
	if (r == -EEXIST && !noreplace) {
		struct inode *old;
		if ((r = ns_lookup(fs, d, leaf, &old)) < 0)
			goto out;
		bool dir = S_ISDIR(old->mode);
		unhold(fs, old);
		if (dir) {
			r = dmar_error_set(err, -EISDIR, "%s is a directory", path);
			goto out;
		}
		uint64_t rnd;
		char tmp[40];
		if ((r = dmar_wire_upload_new(&rnd)) < 0)
			goto out;
		snprintf(tmp, sizeof(tmp), ".dmar-symlink.%016" PRIx64, rnd);
		if ((r = ns_make(fs, d, tmp, S_IFLNK | 0777, 0, target, uid, gid, &i)) == 0 &&
		    (r = ns_rename(fs, d, tmp, d, leaf, 0, uid, gid)) < 0) {
			unhold(fs, i);
			ns_remove(fs, d, tmp, NS_FILE);
		}
	}
	if (r == 0) {
		unhold(fs, i);
		inval(fs, nodeid(fs, d), leaf);
	} else if (r == -ENOSPC) {
		dmar_error_set(err, r, "no inode left (nr_inodes), or no room to record it");
	}
out:
	unhold(fs, d);
	return r;
}

static void op_unstage(void *ctx, uint64_t upload)
{
	struct dmarfs_node *n = ctx;
	pthread_mutex_lock(&n->stage_lock);
	stage_sweep(n, 0, 0, upload);
	pthread_mutex_unlock(&n->stage_lock);
}

static int op_have(void *ctx, const struct dmar_id *ids, size_t cnt, uint8_t *missing, struct dmar_error *err)
{
	(void)err;
	struct dmarfs_node *n = ctx;
	struct dmar_chunk_info info;
	for (size_t i = 0; i < cnt; i++)
		missing[i] = dmar_store_lookup(CTX(n)->arena, &ids[i], &info) < 0;
	return 0;
}

static int hold_file(struct dmarfs *fs, const char *path, struct inode **out, struct dmar_error *err);

/* The ids the file at path completes (a new version of it: most of
 * them, in order), then the store the rest, which costs a lookup each. */
static int op_resolve(void *ctx, const char *path, struct dmar_id *ids, size_t cnt, unsigned idlen,
		      uint8_t *state, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	if (idlen < DMAR_STORE_PREFIX_MIN || idlen > DMAR_HASH_SIZE)
		return dmar_error_set(err, -EINVAL, "id prefix of %u bytes", idlen);
	struct inode *i;
	struct dmar_error ignored = { 0 };
	size_t done = 0;
	memset(state, 1, cnt);
	if (hold_file(n->fs, path, &i, &ignored) == 0) {
		pthread_rwlock_rdlock(&i->lock);
		done = dmar_file_complete_ids(&i->f, ids, cnt, idlen, state);
		pthread_rwlock_unlock(&i->lock);
		unhold(n->fs, i);
	}
	if (done == cnt)
		return 0;
	if (done == 0)
		return dmar_store_resolve_many(CTX(n)->arena, ids, cnt, idlen, state);
	size_t left = cnt - done, k = 0;
	struct dmar_id *rest = malloc(left * sizeof(*rest));
	uint8_t *rstate = malloc(left);
	int r = -ENOMEM;
	if (rest && rstate) {
		for (size_t x = 0; x < cnt; x++)
			if (state[x])
				rest[k++] = ids[x];
		r = dmar_store_resolve_many(CTX(n)->arena, rest, left, idlen, rstate);
		for (size_t x = 0, y = 0; r == 0 && x < cnt; x++)
			if (state[x]) {
				ids[x] = rest[y];
				state[x] = rstate[y++];
			}
	}
	free(rest);
	free(rstate);
	return r;
}

static int op_put_chunk(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded,
			const struct dmar_req_tags *t, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	uint64_t upload = t->upload;
	pthread_mutex_lock(&n->stage_lock);
	bool failed = upload_failed(n, upload);
	pthread_mutex_unlock(&n->stage_lock);
	/* A full arena sheds old stages first (stage_shed). */
	int r = failed ? -ENOSPC : dmar_fsctx_chunk_put(CTX(n), c, decoded);
	if (r == -ENOSPC) {
		upload_fail(n, upload);
		return dmar_error_set(err, r, "arena full: %" PRIu64 " of %" PRIu64 " bytes used",
				      dmar_arena_used(CTX(n)->arena), dmar_arena_size(CTX(n)->arena));
	}
	if (r < 0)
		return r;
	stage_add(n, &c->id, upload);
	if (t->relay)
		dmar_relay_chunk(n->relay, upload, t->relay, &c->id, c->len);
	return 0;
}

/* The missing ids as the commit's 409 answer. */
static json_t *missing_json(const struct dmar_id *m, size_t nm)
{
	json_t *list = json_array();
	for (size_t i = 0; list && i < nm && i < DMAR_SERVER_MISSING_LIST; i++) {
		char hex[DMAR_HASH_HEX_SIZE];
		dmar_hex(m[i].b, DMAR_HASH_SIZE, hex);
		json_array_append_new(list, json_string(hex));
	}
	return json_pack("{s:I, s:o}", "missing_count", (json_int_t)nm, "missing", list ? list : json_array());
}

/* The recipe of the file at path when its content is cid (a delta's
 * base).  A file not named yet (written here, or committed from a delta)
 * is named now, once. */
static int op_base(void *ctx, const char *path, const struct dmar_id *cid, struct dmar_recipe *out,
		   struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	struct dmarfs *fs = n->fs;
	struct inode *i;
	int r = hold_file(fs, path, &i, err);
	if (r < 0)
		return r;
	struct dmar_id have;
	r = ns_content_id(i, &fs->cfg.ctx, out, &have);
	unhold(fs, i);
	if (r == -EAGAIN) /* written since, not encoded yet: not the base */
		return dmar_error_set(err, -ESTALE, "%s changed here", path);
	if (r < 0)
		return r;
	if (memcmp(have.b, cid->b, DMAR_HASH_SIZE) != 0) {
		dmar_recipe_free(out);
		return dmar_error_set(err, -ESTALE, "%s holds other content", path);
	}
	return 0;
}

/* Make the file at path from rc's entries and publish it under cid, or
 * (from_content: rc is a header without entries) from the content the
 * mount holds under cid. */
static int make_file(struct dmarfs_node *n, const char *path, const struct dmar_recipe *rc,
		     const struct dmar_id *cid, bool from_content, bool noreplace, json_t **out,
		     struct dmar_error *err)
{
	struct dmarfs *fs = n->fs;
	char leaf[256];
	struct inode *d, *i = NULL;
	int r = from_content ? 0 : mem_check(n, 2 * dmar_file_extent_bytes(rc->n), "the file's extents", err);
	if (r < 0)
		return r;
	r = ns_walk_parent(fs, path, &d, leaf);
	if (r < 0)
		return r;
	if (!leaf[0])
		r = dmar_error_set(err, -EISDIR, "the root is a directory");
	pthread_mutex_lock(&fs->ns);
	if (!r && !(i = ns_inode_new(fs, 0, S_IFREG | (rc->mode & 07777), d->uid, d->gid)))
		r = dmar_error_set(err, -ENOSPC, "no inode left (nr_inodes)");
	if (i)
		i->nlookup++; /* ours until linked */
	pthread_mutex_unlock(&fs->ns);
	if (r < 0) {
		unhold(fs, d);
		return r;
	}

	/* Build the contents outside the namespace lock: nobody else can
	 * see i yet. */
	struct dmar_id *miss = NULL;
	size_t nmiss = 0;
	pthread_rwlock_wrlock(&i->lock);
	if (from_content) {
		r = dmar_file_from_content(&i->f, &fs->cfg.ctx, cid, rc->size);
	} else {
		r = dmar_file_from_recipe(&i->f, &fs->cfg.ctx, rc, &miss, &nmiss);
		/* Publishing is an optimisation: a failure leaves it out. */
		if (!r && cid)
			(void)dmar_file_publish(&i->f, &fs->cfg.ctx, cid, true);
	}
	i->mtime = (struct timespec){ .tv_sec = rc->mtime_sec, .tv_nsec = rc->mtime_nsec };
	pthread_rwlock_unlock(&i->lock);
	if (r == -ENODATA) {
		*out = missing_json(miss, nmiss);
		dmar_error_set(err, r, "%zu chunks of the recipe are missing", nmiss);
		free(miss);
	} else if (r == -EFBIG) {
		dmar_error_set(err, r, "a file of %" PRIu64 " bytes: the node's max_file_size is %" PRIu64, rc->size,
			       fs->cfg.ctx.max_size);
	} else if (r == -EINVAL) {
		dmar_error_set(err, r, "recipe shows bytes beyond the end of a chunk");
	}
	/* Linked in one step (recorded with its contents): the name shows
	 * the old file or the new one, never half of it. */
	if (!r && (r = ns_commit_file(fs, d, leaf, i, noreplace)) == -ENOSPC)
		dmar_error_set(err, r, "no room in the arena to record the file");
	if (!r) {
		pthread_rwlock_rdlock(&i->lock);
		*out = stat_json(fs, i, leaf, 1, true);
		pthread_rwlock_unlock(&i->lock);
	}
	/* Made from a delta, it has no content id yet: the idle thread names
	 * it (ns_encode) as it does a file written here, a few seconds on,
	 * before the next delta likely needs it as its base.  Named at once,
	 * the hash ran beside this commit's reply and slowed it by 1 ms. */
	if (!r && !from_content && !cid)
		idle_note_write(fs, i, idle_now());
	unhold(fs, i); /* unlinked on failure: freed here */
	fuse_ino_t parent = nodeid(fs, d);
	unhold(fs, d);
	if (r < 0)
		return r;
	/* Only a recipe delta's result comes without a content id. */
	atomic_fetch_add(from_content ? &n->commits_content : cid ? &n->commits_recipe : &n->commits_delta, 1);
	inval(fs, parent, leaf);
	return 0;
}

static int take_recipe(struct dmarfs *fs, struct inode *i, struct dmar_recipe *rc, struct dmar_id *cid,
		       bool *known);
static int src_get(void *ctx, const struct dmar_id *id, uint32_t len, struct dmar_wire_chunk *c);
static void src_put(void *ctx, struct dmar_wire_chunk *c);

static struct dmar_client *peer_of(void *ctx, const char *name)
{
	return dmarfs_node_peer(ctx, name);
}

/* What the chunks forwarded ahead of the commit (fw, from
 * dmar_relay_finish) cost, added to each node's result. */
static void add_forwarded(json_t *results, json_t *fw)
{
	size_t i;
	json_t *v;
	json_array_foreach(results, i, v) {
		json_t *f = json_object_get(fw, json_string_value(json_object_get(v, "node")));
		if (!f)
			continue;
		const char *keys[] = { "wire_bytes", "chunks_sent" };
		for (size_t k = 0; k < 2; k++)
			json_object_set_new(v, keys[k],
					    json_integer(json_integer_value(json_object_get(v, keys[k])) +
							 json_integer_value(json_object_get(f, keys[k]))));
	}
}

/*
 * A file committed here with X-Dmar-Relay goes on down the chain
 * (net/relay.h): once the chunks forwarded ahead of it are out, it is
 * pushed to the next node, whose answer reports on the rest.  The nodes'
 * results go in the answer's "relay"; their failures are theirs, not this
 * commit's.  The push runs beside the local commit (its own thread): a
 * hop's cost on the chain's path is then only what it takes to pass the
 * commit on, not to make the file as well.
 */
struct relay_job {
	struct dmarfs_node *n;
	const char *path;
	const struct dmar_recipe *rc;
	const struct dmar_id *cid;
	bool noreplace;
	const struct dmar_req_tags *t;
	json_t *results;
	int r;
	struct dmar_error err;
	pthread_t th;
};

static void *relay_run(void *arg)
{
	struct relay_job *j = arg;
	struct dmarfs_node *n = j->n;
	json_t *fw = dmar_relay_finish(n->relay, j->t->upload);
	struct dmar_chunk_source cs = { .get = src_get, .put = src_put, .ctx = n };
	struct dmar_push_opts o = { .flags = j->noreplace ? DMAR_PUSH_NOREPLACE : 0, .upload = j->t->upload };
	j->r = dmar_chain_push(j->t->relay, peer_of, n, n->name, j->path, j->rc, j->cid, &cs, &o, NULL, NULL,
			       &j->results, NULL, &j->err);
	add_forwarded(j->results, fw);
	json_decref(fw);
	return NULL;
}

/* The job's end: its results into out (NULL: the commit failed here;
 * they are dropped), an event for the node's watchers. */
static void relay_end(struct relay_job *j, json_t *out)
{
	struct dmarfs_node *n = j->n;
	if (n->server && out) {
		json_t *ev = json_pack("{s:s, s:s, s:s, s:O}", "type", j->r < 0 ? "relay.failed" : "relay.done", "node",
				       n->name, "path", j->path, "nodes", j->results ? j->results : json_null());
		if (ev)
			dmar_server_event(n->server, ev);
	}
	if (out)
		json_object_set_new(out, "relay", j->results ? j->results : json_array());
	else
		json_decref(j->results);
}

static int op_commit(void *ctx, const char *path, const struct dmar_recipe *rc, const struct dmar_id *cid,
		     bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	/* Relayed only when every chunk is here (pinned for the push): a
	 * refusal for missing chunks goes back to the sender, who sends
	 * them, with the relay list, and commits again. */
	struct relay_job j = { .n = n, .path = path, .rc = rc, .cid = cid, .noreplace = noreplace, .t = t };
	bool relaying = t->relay && dmarfs_node_pin(CTX(n), rc) == 0;
	/* Not beside a no-replace commit: one refused here (a file there
	 * already) must not have gone on, or the sender's retry from the
	 * next node would find this commit's file there and be refused. */
	bool beside = relaying && !noreplace && pthread_create(&j.th, NULL, relay_run, &j) == 0;
	int r = make_file(n, path, rc, cid, false, noreplace, out, err);
	/* Committed, its chunks are the file's; refused for want of room,
	 * the sender gives up, and they would only hold the arena. */
	if (!r || r == -ENOSPC)
		stage_release(n, rc, t->upload);
	if (relaying) {
		if (beside)
			pthread_join(j.th, NULL);
		else if (r == 0)
			relay_run(&j);
		relay_end(&j, r == 0 ? *out : NULL);
		dmarfs_node_unpin(CTX(n), rc);
	}
	return r;
}

/* A file made from content held here: its recipe is read back from it. */
static void relay_clone(struct dmarfs_node *n, const char *path, bool noreplace, const struct dmar_req_tags *t,
			json_t *out)
{
	struct relay_job j = { .n = n, .path = path, .noreplace = noreplace, .t = t };
	struct dmar_recipe rc;
	struct dmar_id cid;
	bool known;
	struct inode *i;
	int r = hold_file(n->fs, path, &i, &j.err);
	if (r == 0) {
		r = take_recipe(n->fs, i, &rc, &cid, &known);
		unhold(n->fs, i);
	}
	if (r == 0) {
		j.rc = &rc;
		j.cid = &cid;
		relay_run(&j);
		dmarfs_node_unpin(CTX(n), &rc);
		dmar_recipe_free(&rc);
	} else {
		if (!j.err.msg[0])
			dmar_error_set(&j.err, r, "%s: the file changed here before it could go on: %s", path,
				       strerror(-r));
		j.r = r;
		j.results = dmar_chain_failed(t->relay, r, j.err.msg);
	}
	relay_end(&j, out);
}

static int op_clone(void *ctx, const char *path, const struct dmar_recipe *head, const struct dmar_id *cid,
		    bool noreplace, const struct dmar_req_tags *t, json_t **out, struct dmar_error *err)
{
	if (!head->n) /* an empty file: its recipe says it all */
		return -ENOENT;
	int r = make_file(ctx, path, head, cid, true, noreplace, out, err);
	if (r == 0 && t->relay)
		relay_clone(ctx, path, noreplace, t, *out);
	return r;
}

/* Encode i so that it is all chunks and holes, and take its recipe with
 * every chunk pinned.  Chunks are needed to ship even from an encode=none
 * mount: those files are chunked (dedup) for the occasion.  cid (may be
 * NULL) gets its content id, *known whether it was known before (the
 * file is a copy of one shipped). */
static int take_recipe(struct dmarfs *fs, struct inode *i, struct dmar_recipe *rc, struct dmar_id *cid,
		       bool *known)
{
	struct dmar_fsctx c = fs->cfg.ctx;
	if (c.encode == DMAR_ENCODE_NONE)
		c.encode = DMAR_ENCODE_DEDUP;
	for (int tries = 0; tries < 8; tries++) {
		int r = ns_encode(fs, i, &c, 1);
		if (r < 0 && r != -EAGAIN)
			return r;
		pthread_rwlock_wrlock(&i->lock);
		/* -EAGAIN if a write left RAW bytes since the encode. */
		if (!(r = dmar_file_recipe(&i->f, rc))) {
			rc->mode = i->mode & 07777;
			rc->mtime_sec = i->mtime.tv_sec;
			rc->mtime_nsec = (uint32_t)i->mtime.tv_nsec;
			if ((r = dmarfs_node_pin(&c, rc)) < 0)
				dmar_recipe_free(rc);
			/* The content id for a transfer: known once the file
			 * was shipped or copied from one that was. */
			if (!r && cid && (r = dmar_file_content_id(&i->f, &c, rc, cid, known)) < 0) {
				dmarfs_node_unpin(&c, rc);
				dmar_recipe_free(rc);
			}
		}
		pthread_rwlock_unlock(&i->lock);
		if (r != -EAGAIN)
			return r;
	}
	return -EBUSY; /* written to all the time */
}

static int hold_file(struct dmarfs *fs, const char *path, struct inode **out, struct dmar_error *err)
{
	int r = hold(fs, path, out);
	if (r < 0)
		return r;
	if (!S_ISREG((*out)->mode)) {
		bool dir = S_ISDIR((*out)->mode);
		unhold(fs, *out);
		return dmar_error_set(err, dir ? -EISDIR : -EINVAL, "%s is not a regular file", path[0] ? path : "/");
	}
	return 0;
}

static int op_recipe(void *ctx, const char *path, uint8_t **buf, size_t *len, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	struct inode *i;
	int r = hold_file(n->fs, path, &i, err);
	if (r < 0)
		return r;
	struct dmar_recipe rc;
	r = take_recipe(n->fs, i, &rc, NULL, NULL);
	unhold(n->fs, i);
	if (r < 0)
		return r;
	*len = dmar_recipe_wire_size(rc.n);
	if ((*buf = malloc(*len)))
		dmar_recipe_write(&rc, *buf, NULL);
	else
		r = -ENOMEM;
	dmarfs_node_unpin(CTX(n), &rc);
	dmar_recipe_free(&rc);
	return r;
}

static int op_get_chunk(void *ctx, const struct dmar_id *id, struct dmar_wire_chunk *c, uint8_t **buf,
			struct dmar_error *err)
{
	(void)err;
	struct dmarfs_node *n = ctx;
	struct dmar_arena *a = CTX(n)->arena;
	int r = dmar_store_ref_existing(a, id);
	if (r < 0)
		return r;
	uint8_t *tmp = NULL;
	r = dmar_fsctx_chunk_wire(CTX(n), id, c, &tmp);
	if (!r && !tmp) {
		/* Copy out of the arena before the reference goes. */
		if ((tmp = malloc(c->stored)))
			memcpy(tmp, c->payload, c->stored);
		else
			r = -ENOMEM;
	}
	dmar_store_unref(a, id);
	if (r < 0) {
		free(tmp);
		return r;
	}
	c->payload = tmp;
	*buf = tmp;
	return 0;
}

static int op_transfer(void *ctx, const char *path, const char *to, const char *dest, json_t **out,
		       struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	struct dmar_hops *h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	int r = dmarfs_node_hops(n, to, h, err);
	free(h);
	if (r < 0)
		return r;
	struct inode *i;
	if ((r = hold_file(n->fs, path, &i, err)) < 0)
		return r;
	struct dmar_recipe rc;
	struct dmar_id cid;
	bool known = false;
	r = take_recipe(n->fs, i, &rc, &cid, &known);
	unhold(n->fs, i);
	if (r < 0)
		return r;
	struct dmar_xfer_stats st;
	json_t *nodes = NULL;
	r = dmarfs_node_ship(n, to, path, dest, &rc, &cid, known ? DMAR_PUSH_CONTENT_FIRST : 0, &st, &nodes, NULL, NULL,
			     err);
	dmarfs_node_unpin(CTX(n), &rc);
	dmar_recipe_free(&rc);
	if (r < 0 && nodes) {
		/* a broadcast some nodes missed: the error, and every node's result */
		*out = json_pack("{s:o}", "nodes", nodes);
		return r;
	}
	if (r < 0)
		return r;
	double s = st.seconds > 0 ? st.seconds : 1e-9;
	*out = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "path", path,
			 "to", to, "dest", dest, "logical_bytes", (json_int_t)st.logical, "wire_bytes",
			 (json_int_t)st.wire_bytes, "chunks", (json_int_t)st.chunks, "chunks_sent",
			 (json_int_t)st.sent_chunks, "chunk_bytes", (json_int_t)st.chunk_bytes, "zchunk_bytes",
			 (json_int_t)st.zchunk_bytes, "round_trips",
			 (json_int_t)st.round_trips, "requests", (json_int_t)st.requests, "connects",
			 (json_int_t)st.connects, "seconds", st.seconds, "effective_MBps", st.logical / s / 1e6,
			 "wire_MBps", st.wire_bytes / s / 1e6);
	if (*out)
		json_object_set_new(*out, "predicted_chunks", json_integer((json_int_t)st.predicted_chunks));
	if (*out && nodes)
		json_object_set_new(*out, "nodes", nodes);
	else
		json_decref(nodes);
	return *out ? 0 : -ENOMEM;
}

/* A probe of the peers serves the mesh's askers for this long: a page open
 * in many browsers costs each peer one GET /v1/node a second at most. */
#define MESH_FRESH_MS 1000
#define MESH_CONNECT_MS 1000
#define MESH_TIMEOUT_MS 2000

/* GET /v1/mesh: every peer's GET /v1/node at once (net/probe.h), this
 * node's own row first when the peers file does not list it. */
static int op_mesh(void *ctx, json_t **out, struct dmar_error *err)
{
	struct dmarfs_node *n = ctx;
	pthread_mutex_lock(&n->mesh_lock);
	if (!n->mesh || dmar_mono_ms() - n->mesh_at >= MESH_FRESH_MS) {
		struct dmar_probe_opts po = { .token = n->token, .tls_ca = n->cfg.tls_ca,
					      .connect_timeout_ms = MESH_CONNECT_MS, .timeout_ms = MESH_TIMEOUT_MS,
					      .self = n->name, .self_url = n->url, .self_info = op_info, .self_ctx = n };
		json_t *rows = NULL;
		if (dmar_probe_peers(n->peers, &po, &rows) < 0) {
			pthread_mutex_unlock(&n->mesh_lock);
			return dmar_error_set(err, -ENOMEM, "out of memory");
		}
		json_decref(n->mesh);
		n->mesh = json_pack("{s:s, s:o}", "node", n->name, "nodes", rows);
		n->mesh_at = dmar_mono_ms();
	}
	*out = json_incref(n->mesh);
	pthread_mutex_unlock(&n->mesh_lock);
	return *out ? 0 : dmar_error_set(err, -ENOMEM, "out of memory");
}

static const struct dmar_node_ops node_ops = {
	.info = op_info,
	.stat = op_stat,
	.remove = op_remove,
	.mkdir = op_mkdir,
	.have = op_have,
	.resolve = op_resolve,
	.put_chunk = op_put_chunk,
	.commit = op_commit,
	.base = op_base,
	.clone = op_clone,
	.recipe = op_recipe,
	.get_chunk = op_get_chunk,
	.transfer = op_transfer,
	.symlink = op_symlink,
	.unstage = op_unstage,
	.metrics = op_metrics,
	.mesh = op_mesh,
};

/* ---- shipping ------------------------------------------------------------ */

int dmarfs_node_pin(struct dmar_fsctx *c, const struct dmar_recipe *r)
{
	size_t n;
	struct dmar_id *ids = dmar_recipe_chunk_ids(r, &n);
	struct dmar_chunk_info *info = malloc((n ? n : 1) * sizeof(*info));
	int ret = 0;
	if (!ids || !info) {
		ret = -ENOMEM;
		goto out;
	}
	ret = dmar_store_ref_all(c->arena, ids, n, info);
out:
	free(ids);
	free(info);
	return ret;
}

void dmarfs_node_unpin(struct dmar_fsctx *c, const struct dmar_recipe *r)
{
	size_t n;
	struct dmar_id *ids = dmar_recipe_chunk_ids(r, &n);
	if (ids) {
		dmar_store_unref_many(c->arena, ids, n);
	} else {
		for (size_t i = 0; i < r->n; i++) /* no memory for a batch: one by one */
			if (r->e[i].kind == DMAR_RECIPE_CHUNK)
				dmar_store_unref(c->arena, &r->e[i].id);
	}
	free(ids);
}

static int src_get(void *ctx, const struct dmar_id *id, uint32_t len, struct dmar_wire_chunk *c)
{
	(void)len;
	struct dmarfs_node *n = ctx;
	uint8_t *buf;
	int r = dmar_fsctx_chunk_wire(CTX(n), id, c, &buf);
	/* buf (a byte-pack chunk decoded) is c->payload: put frees it. */
	return r;
}

static void src_put(void *ctx, struct dmar_wire_chunk *c)
{
	struct dmarfs_node *n = ctx;
	const uint8_t *base = dmar_arena_base(CTX(n)->arena);
	if (c->payload < base || c->payload >= base + dmar_arena_size(CTX(n)->arena))
		free((void *)c->payload);
}

/* A broadcast's chunks going on from here, as events. */
static void relay_progress(void *ctx, uint64_t upload, const char *to, const struct dmar_relay_sent *sent)
{
	struct dmarfs_node *n = ctx;
	if (!n->server)
		return;
	char up[17];
	snprintf(up, sizeof(up), "%016" PRIx64, upload);
	double s = sent->seconds;
	json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:f}", "type", "relay.progress", "node",
			       n->name, "upload", up, "to", to, "chunks_sent", (json_int_t)sent->chunks, "chunk_bytes",
			       (json_int_t)sent->chunk_bytes, "wire_bytes", (json_int_t)sent->wire_bytes, "seconds", s,
			       "wire_MBps", s > 0 ? sent->wire_bytes / s / 1e6 : 0.0);
	if (ev)
		dmar_server_event(n->server, ev);
}

/* The relay's source: a chunk staged for a broadcast may be dropped (stage
 * expiry, arena pressure) while it waits, so each is referenced while it
 * is read. */
static int relay_get(void *ctx, const struct dmar_id *id, uint32_t len, struct dmar_wire_chunk *c)
{
	struct dmarfs_node *n = ctx;
	int r = dmar_store_ref_existing(CTX(n)->arena, id);
	if (r < 0)
		return r;
	if ((r = src_get(ctx, id, len, c)) < 0)
		dmar_store_unref(CTX(n)->arena, id);
	return r;
}

static void relay_put(void *ctx, struct dmar_wire_chunk *c)
{
	struct dmarfs_node *n = ctx;
	struct dmar_id id = c->id;
	src_put(ctx, c);
	dmar_store_unref(CTX(n)->arena, &id);
}

struct progress {
	struct dmarfs_node *n;
	json_t *base; /* the event's fixed fields */
	double next;
};

/* A running push's bytes done: the file's bytes the peer holds so far,
 * those it had (all but todo_bytes) and those sent since. */
static uint64_t xfer_done(const struct dmar_xfer_stats *st)
{
	uint64_t pending = st->todo_bytes > st->chunk_bytes ? st->todo_bytes - st->chunk_bytes : 0;
	return st->logical > pending ? st->logical - pending : 0;
}

/* An event of a transfer: base's fields, type and st's figures.  A
 * progress event's logical_bytes (and effective speed) are what is done
 * so far; the others' the file's. */
static json_t *xfer_event(const char *type, json_t *base, const struct dmar_xfer_stats *st)
{
	json_t *ev = json_deep_copy(base);
	if (!ev)
		return NULL;
	double s = st->seconds > 0 ? st->seconds : 1e-9;
	uint64_t logical = strcmp(type, "transfer.progress") ? st->logical : xfer_done(st);
	json_object_set_new(ev, "type", json_string(type));
	json_object_set_new(ev, "logical_bytes", json_integer((json_int_t)logical));
	json_object_set_new(ev, "wire_bytes", json_integer((json_int_t)st->wire_bytes));
	json_object_set_new(ev, "chunks_sent", json_integer((json_int_t)st->sent_chunks));
	json_object_set_new(ev, "chunk_bytes", json_integer((json_int_t)st->chunk_bytes));
	json_object_set_new(ev, "zchunk_bytes", json_integer((json_int_t)st->zchunk_bytes));
	json_object_set_new(ev, "predicted_chunks", json_integer((json_int_t)st->predicted_chunks));
	json_object_set_new(ev, "round_trips", json_integer((json_int_t)st->round_trips));
	json_object_set_new(ev, "requests", json_integer((json_int_t)st->requests));
	json_object_set_new(ev, "connects", json_integer((json_int_t)st->connects));
	json_object_set_new(ev, "seconds", json_real(st->seconds));
	json_object_set_new(ev, "effective_MBps", json_real(logical / s / 1e6));
	json_object_set_new(ev, "wire_MBps", json_real(st->wire_bytes / s / 1e6));
	return ev;
}

static void on_progress(void *ctx, const struct dmar_xfer_stats *st)
{
	struct progress *p = ctx;
	double t = dmar_mono_s();
	/* nothing to tell before the peer said what it lacks */
	if (t < p->next || !p->n->server || (!st->todo_bytes && !st->chunk_bytes))
		return;
	p->next = t + 0.25; /* four a second is plenty for a progress bar */
	json_t *ev = xfer_event("transfer.progress", p->base, st);
	if (ev)
		dmar_server_event(p->n->server, ev);
}

/* Files up to this size are shipped as one tree commit carrying every
 * chunk: for them the round trips of have/want and commit cost more than
 * the bytes the peer might already hold (cp -r of a tree of small files
 * into @b/ made 3.6 requests a file). */
#define SHIP_INLINE_MAX (256u << 10)

/* r's distinct chunks, raw, into b (the peer gets them whether it holds
 * them or not). */
static int add_chunks(struct dmarfs_node *n, struct dmar_tree_body *b, const struct dmar_recipe *r,
		      struct dmar_error *err)
{
	struct dmar_idset set;
	int ret = dmar_idset_init(&set, r->n ? r->n : 1);
	uint8_t *plain = NULL;
	ZSTD_DCtx *dz = NULL;
	for (size_t i = 0; ret == 0 && i < r->n; i++) {
		bool added;
		if (r->e[i].kind != DMAR_RECIPE_CHUNK || dmar_idset_add(&set, &r->e[i].id, &added) < 0 || !added)
			continue;
		struct dmar_wire_chunk w;
		if ((ret = src_get(n, &r->e[i].id, 0, &w)) < 0) {
			dmar_error_set(err, ret, "ship: a chunk of the file: %s", strerror(-ret));
			break;
		}
		const uint8_t *p = w.payload;
		if (w.enc != DMAR_WIRE_RAW) {
			if ((!plain && !(plain = malloc(DMAR_WIRE_SCRATCH))) || (!dz && !(dz = ZSTD_createDCtx())))
				ret = -ENOMEM;
			else if (dmar_wire_chunk_verify(&w, dz, plain, &p, err) < 0)
				ret = -EIO;
		}
		if (ret == 0)
			ret = dmar_tree_body_chunk(b, &w.id, p, w.len);
		src_put(n, &w);
	}
	free(plain);
	ZSTD_freeDCtx(dz);
	dmar_idset_free(&set);
	return ret;
}

/* Each thread's tree body, kept for its next small file: a body's
 * buffers and compressors cost more to make than to fill with one small
 * file (cp -r of headers into @PEER/ ships thousands).  A small file's
 * body stays under a few hundred KiB. */
static pthread_key_t body_key;
static pthread_once_t body_once = PTHREAD_ONCE_INIT;

static void body_key_free(void *b)
{
	dmar_tree_body_free(b);
}

static void body_key_init(void)
{
	pthread_key_create(&body_key, body_key_free);
}

static struct dmar_tree_body *thread_body(void)
{
	pthread_once(&body_once, body_key_init);
	struct dmar_tree_body *b = pthread_getspecific(body_key);
	if (b) {
		dmar_tree_body_reset(b);
		return b;
	}
	if (dmar_tree_body_new(&b) < 0)
		return NULL;
	if (pthread_setspecific(body_key, b) != 0) {
		dmar_tree_body_free(b);
		return NULL;
	}
	return b;
}

/* A small file as one tree commit: its operation and every chunk. */
static int ship_inline(struct dmarfs_node *n, struct dmar_client *cl, const char *dest, const struct dmar_recipe *r,
		       unsigned flags, struct dmar_xfer_stats *st, struct dmar_error *err)
{
	struct dmar_tree_body *b = thread_body();
	struct dmar_tree_op *op = malloc(sizeof(*op));
	size_t rlen = dmar_recipe_wire_size(r->n);
	uint8_t *rb = malloc(rlen);
	int ret = -ENOMEM;
	if (!op || !rb || !b)
		goto out;
	dmar_recipe_write(r, rb, NULL);
	*op = (struct dmar_tree_op){ .kind = DMAR_TREE_FILE, .flags = flags & DMAR_PUSH_NOREPLACE ? DMAR_TREE_NOREPLACE : 0,
				     .data = rb, .data_len = rlen };
	if (snprintf(op->path, sizeof(op->path), "%s", dest) >= (int)sizeof(op->path)) {
		ret = dmar_error_set(err, -ENAMETOOLONG, "%s: path too long", dest);
		goto out;
	}
	if ((ret = dmar_tree_body_op(b, op)) < 0 || (ret = add_chunks(n, b, r, err)) < 0)
		goto out;
	int status = 0;
	ret = dmar_client_tree(cl, b, &status, st, err);
	if (ret > 0)
		ret = status;
	st->logical = r->size;
out:
	free(rb);
	free(op);
	return ret;
}

int dmarfs_node_hops(struct dmarfs_node *n, const char *to, struct dmar_hops *h, struct dmar_error *err)
{
	h->n = 0;
	if (!strcmp(to, DMARFS_GROUP_ALL) && !dmarfs_node_peer(n, to)) {
		for (size_t i = 0; i < n->npeers && h->n < DMAR_HOPS_MAX; i++)
			if (strcmp(n->names[i], n->name) != 0)
				snprintf(h->name[h->n++], sizeof(h->name[0]), "%s", n->names[i]);
		if (!h->n)
			return dmar_error_set(err, -ENOENT, "@%s: the peers file names no other node", to);
		return 0;
	}
	int r = dmar_hops_parse(to, h, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < h->n; i++)
		if (!dmarfs_node_peer(n, h->name[i]))
			return dmar_error_set(err, -ENOENT, "no peer named %s in the peers file", h->name[i]);
	return 0;
}

int dmarfs_node_ship(struct dmarfs_node *n, const char *to, const char *src, const char *dest,
		     const struct dmar_recipe *r, const struct dmar_id *cid, unsigned flags, struct dmar_xfer_stats *st,
		     json_t **nodes, const struct dmar_recipe *base,
		     const struct dmar_id *base_cid, struct dmar_error *err)
{
	memset(st, 0, sizeof(*st));
	struct dmar_hops *h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	int rc = dmarfs_node_hops(n, to, h, err);
	if (rc < 0) {
		free(h);
		return rc;
	}
	struct dmar_client *cl = dmarfs_node_peer(n, h->name[0]);
	uint64_t id = __atomic_add_fetch(&n->next_xfer, 1, __ATOMIC_RELAXED);
	struct progress p = { .n = n };
	p.base = json_pack("{s:I, s:s, s:s, s:s, s:s, s:I}", "id", (json_int_t)id, "from", n->name, "path", src,
			   "to", to, "dest", dest, "size", (json_int_t)r->size);
	if (n->server && p.base) {
		struct dmar_xfer_stats zero = { 0 };
		json_t *ev = xfer_event("transfer.started", p.base, &zero);
		if (ev)
			dmar_server_event(n->server, ev);
	}
	struct dmar_chunk_source cs = { .get = src_get, .put = src_put, .ctx = n };
	struct dmar_error terr = { 0 };
	json_t *results = NULL;
	rc = -ENOENT;
	if (h->n > 1) {
		/* a broadcast: a chain through every node (net/relay.h) */
		struct dmar_push_opts o = { .flags = flags };
		rc = dmar_chain_push(h, peer_of, n, n->name, dest, r, cid, &cs, &o, p.base ? on_progress : NULL, &p,
				     &results, st, err);
	} else {
		/* A peer without tree commits (404, or 415/501) gets the push. */
		if (r->size <= SHIP_INLINE_MAX && !(flags & DMAR_PUSH_CONTENT_FIRST) &&
		    (rc = ship_inline(n, cl, dest, r, flags, st, &terr)) != -ENOENT && rc != -ENOTSUP && err)
			*err = terr;
		struct dmar_push_opts o = { .flags = flags, .base = base, .base_cid = base_cid };
		if (rc == -ENOENT || rc == -ENOTSUP)
			rc = dmar_client_push(cl, dest, r, cid, &cs, &o, p.base ? on_progress : NULL, &p, st, err);
	}
	free(h);
	json_t *ev = p.base ? xfer_event(rc < 0 ? "transfer.failed" : "transfer.done", p.base, st) : NULL;
	if (ev && rc < 0) {
		json_object_set_new(ev, "error", json_string(err && err->msg[0] ? err->msg : strerror(-rc)));
		json_object_set_new(ev, "errno", json_string(dmar_wire_errno_name(rc)));
	}
	if (ev && results)
		json_object_set(ev, "nodes", results);
	pthread_mutex_lock(&n->xfer_lock);
	if (rc < 0)
		n->xfers_failed++;
	else
		n->xfers_done++;
	n->xfer_logical += st->logical;
	n->xfer_wire += st->wire_bytes;
	if (rc >= 0 && st->seconds > 0) {
		dmar_hist_observe(&n->xfer_eff, (double)st->logical / st->seconds);
		dmar_hist_observe(&n->xfer_wspeed, (double)st->wire_bytes / st->seconds);
	}
	if (ev) {
		json_decref(n->xfer_last);
		n->xfer_last = json_deep_copy(ev);
	}
	pthread_mutex_unlock(&n->xfer_lock);
	if (ev && n->server)
		dmar_server_event(n->server, ev);
	else
		json_decref(ev);
	json_decref(p.base);
	if (nodes)
		*nodes = results;
	else
		json_decref(results);
	return rc;
}

/* ---- life ------------------------------------------------------------- */

const char *dmarfs_node_name(const struct dmarfs_node *n)
{
	return n->name;
}

size_t dmarfs_node_peer_count(const struct dmarfs_node *n)
{
	return n->npeers;
}

const char *dmarfs_node_peer_name(const struct dmarfs_node *n, size_t i)
{
	return n->names[i];
}

size_t dmarfs_node_swarm(struct dmarfs_node *n, const char *origin, struct dmar_client *cl,
			 struct dmar_swarm_peer *out)
{
	size_t k = 0, self = 0;
	if (cl == n->group)
		origin = n->group_first; /* the node it stands for */
	out[k++] = (struct dmar_swarm_peer){ .c = cl, .name = origin };
	for (size_t i = 0; i < n->npeers; i++)
		if (!strcmp(n->names[i], n->name))
			self = i;
	/* Its neighbours in the peers file, after this node: different
	 * readers ask different peers first. */
	for (size_t j = 1; j <= n->npeers && k < DMAR_SWARM_PEERS; j++) {
		size_t i = (self + j) % n->npeers;
		if (strcmp(n->names[i], n->name) != 0 && strcmp(n->names[i], origin) != 0)
			out[k++] = (struct dmar_swarm_peer){ .c = n->clients[i], .name = n->names[i] };
	}
	return k;
}

struct dmar_client *dmarfs_node_group(struct dmarfs_node *n)
{
	return n->group;
}

struct dmar_client *dmarfs_node_peer(struct dmarfs_node *n, const char *name)
{
	for (size_t i = 0; i < n->npeers; i++)
		if (!strcmp(n->names[i], name))
			return n->clients[i];
	return NULL;
}

/* The URL this node reaches itself at: its listen address, with a
 * wildcard address replaced by loopback. */
static void self_url(const struct dmarfs_node_config *cfg, bool tls, char *buf, size_t cap)
{
	const char *l = cfg->listen ? cfg->listen : "127.0.0.1:7420";
	const char *colon = strrchr(l, ':');
	const char *port = colon ? colon + 1 : l;
	char host[256] = "127.0.0.1";
	if (colon && (size_t)(colon - l) < sizeof(host)) {
		memcpy(host, l, (size_t)(colon - l));
		host[colon - l] = 0;
	}
	if (!strcmp(host, "0.0.0.0") || !host[0])
		strcpy(host, "127.0.0.1");
	else if (!strcmp(host, "[::]"))
		strcpy(host, "[::1]");
	snprintf(buf, cap, "%s://%s:%s", tls ? "https" : "http", host, port);
}

/* "127.0.0.1:7420", "[::1]:7420", "localhost:7420" or a bare "PORT". */
static bool listen_is_loopback(const char *l)
{
	if (!strchr(l, ':'))
		return true;
	return !strncmp(l, "127.", 4) || !strncmp(l, "[::1]:", 6) || !strncmp(l, "localhost:", 10);
}

int dmarfs_node_new(struct dmarfs_node **out, struct dmarfs *fs, const struct dmarfs_node_config *cfg,
		    struct dmar_error *err)
{
	struct dmarfs_node *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->fs = fs;
	n->cfg = *cfg;
	pthread_mutex_init(&n->stage_lock, NULL);
	ns_add_owner(fs, stage_refs, stage_tick, stage_shed, n);
	pthread_mutex_init(&n->xfer_lock, NULL);
	pthread_mutex_init(&n->mesh_lock, NULL);
	self_url(cfg, cfg->tls_cert != NULL, n->url, sizeof(n->url));
	dmar_hist_init(&n->xfer_eff, speed_bounds, sizeof(speed_bounds) / sizeof(speed_bounds[0]), 1);
	dmar_hist_init(&n->xfer_wspeed, speed_bounds, sizeof(speed_bounds) / sizeof(speed_bounds[0]), 1);
	int r = 0;
	if (!(n->name = strdup(cfg->name ? cfg->name : "node"))) {
		r = -ENOMEM;
		goto fail;
	}
	if (cfg->token && (r = dmar_token_load(cfg->token, &n->token, err)) < 0)
		goto fail;
	if (cfg->serve && !cfg->token && cfg->listen && !listen_is_loopback(cfg->listen)) {
		/* The server refuses it too; saying so before mounting keeps a
		 * mount from flickering into existence. */
		r = dmar_error_set(err, -EPERM, "listen=%s is beyond loopback: that needs token=FILE (a shared secret)",
				   cfg->listen);
		goto fail;
	}
	if (cfg->peers && (r = dmar_peers_load(cfg->peers, &n->peers, err)) < 0)
		goto fail;
	size_t np = n->peers ? dmar_peers_count(n->peers) : 0;
	if (!(n->clients = calloc(np + 1, sizeof(*n->clients))) || !(n->names = calloc(np + 1, sizeof(*n->names)))) {
		r = -ENOMEM;
		goto fail;
	}
	bool self_listed = false;
	for (size_t i = 0; i < np; i++) {
		const struct dmar_peer *p = dmar_peers_get(n->peers, i);
		char url[512];
		dmar_peers_url(p, url, sizeof(url));
		struct dmar_client_opts co = { .name = p->name, .url = url, .token = n->token, .tls_ca = cfg->tls_ca };
		if ((r = dmar_client_new(&n->clients[i], &co, err)) < 0)
			goto fail;
		n->names[i] = p->name;
		n->npeers++;
		self_listed |= !strcmp(p->name, n->name);
	}
	if (!self_listed && cfg->serve) {
		char url[512];
		self_url(cfg, cfg->tls_cert != NULL, url, sizeof(url));
		struct dmar_client_opts co = { .name = n->name, .url = url, .token = n->token, .tls_ca = cfg->tls_ca };
		if ((r = dmar_client_new(&n->clients[np], &co, err)) < 0)
			goto fail;
		n->names[np] = n->name;
		n->npeers++;
	}
	for (size_t i = 0; i < np && !dmarfs_node_peer(n, DMARFS_GROUP_ALL); i++) {
		const struct dmar_peer *p = dmar_peers_get(n->peers, i);
		if (!strcmp(p->name, n->name))
			continue;
		char url[512], label[80];
		dmar_peers_url(p, url, sizeof(url));
		snprintf(label, sizeof(label), "@%s (%s)", DMARFS_GROUP_ALL, p->name);
		struct dmar_client_opts co = { .name = label, .url = url, .token = n->token, .tls_ca = cfg->tls_ca };
		if ((r = dmar_client_new(&n->group, &co, err)) < 0)
			goto fail;
		n->group_first = p->name;
		break;
	}
	n->relay_src = (struct dmar_chunk_source){ .get = relay_get, .put = relay_put, .ctx = n };
	struct dmar_relay_cfg rc = { .peer = peer_of, .peer_ctx = n, .src = &n->relay_src,
				     .idle_seconds = (unsigned)stage_seconds(), .progress = relay_progress,
				     .progress_ctx = n };
	if ((r = dmar_relay_new(&n->relay, &rc)) < 0)
		goto fail;
	*out = n;
	return 0;
fail:
	dmarfs_node_free(n);
	return r;
}

int dmarfs_node_start(struct dmarfs_node *n, struct dmar_error *err)
{
	if (!n->cfg.serve)
		return 0;
	struct dmar_server_opts so = { .listen = n->cfg.listen, .token = n->token, .tls_cert = n->cfg.tls_cert,
				       .tls_key = n->cfg.tls_key };
	return dmar_server_start(&n->server, &so, &node_ops, n, err);
}

void dmarfs_node_stop(struct dmarfs_node *n)
{
	if (!n)
		return;
	dmar_server_stop(n->server);
	n->server = NULL;
	/* after the server: no chunk arrives to be relayed any more */
	dmar_relay_free(n->relay);
	n->relay = NULL;
}

void dmarfs_node_free(struct dmarfs_node *n)
{
	if (!n)
		return;
	dmarfs_node_stop(n);
	for (size_t i = 0; n->clients && i < n->npeers; i++)
		dmar_client_free(n->clients[i]);
	dmar_client_free(n->group);
	free(n->clients);
	free(n->names);
	dmar_peers_free(n->peers);
	stage_clear(n);
	pthread_mutex_destroy(&n->stage_lock);
	pthread_mutex_destroy(&n->xfer_lock);
	pthread_mutex_destroy(&n->mesh_lock);
	json_decref(n->xfer_last);
	json_decref(n->mesh);
	if (n->token)
		memset(n->token, 0, strlen(n->token));
	free(n->token);
	free(n->name);
	free(n);
}
