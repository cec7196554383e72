/* SPDX-License-Identifier: MIT */
/*
 * dmar cp - copy a file to, from or between nodes, moving only the chunks
 * the receiver lacks.
 *
 *   FILE -> NODE:PATH    cut and hash FILE here, through a bounded window
 *                        and with the chunker mounts use (so its chunks
 *                        match what the node already holds), then push the
 *                        recipe and the chunks the node asks for; those are
 *                        read again from FILE (pread), one at a time.
 *   NODE:PATH -> FILE    fetch the recipe, pull every distinct chunk once
 *                        and write it at each offset the recipe shows it,
 *                        into a sparse temp file beside FILE that is renamed
 *                        over it only when complete (mode and mtime set).
 *   NODE1:P -> NODE2:Q   ask NODE1 to ship its file to NODE2 (POST
 *                        /v1/transfers): the bytes go node to node.
 *
 * Memory is independent of the file's size but for the recipe itself
 * (48 bytes a chunk) and its index: the window, and the chunks in flight.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "codec/chunker.h"
#include "codec/cutter.h"
#include "codec/hash.h"
#include "codec/idset.h"
#include "net/client.h"
#include "net/peers.h"
#include "net/relay.h"
#include "net/swarm.h"
#include "net/wire.h"
#include "codec/clock.h"

static const char cp_help[] =
	"Usage: dmar cp [OPTIONS] SRC DST\n"
	"Copy a file to, from or between nodes.  SRC and DST are each a local\n"
	"path or NODE:PATH, NODE a name from the peers file (a local path with a\n"
	"':' is written ./a:b).  Only the chunks the receiver lacks cross the wire.\n"
	"A DST ending in '/' or naming a directory gets SRC's file name appended.\n"
	"A local SRC goes to several nodes at once with DST NODES:PATH, NODES a\n"
	"list (b,c,d or node[02-08]) or all (every peer in the file): a chain\n"
	"through them, each forwarding to the next as the chunks arrive, so all\n"
	"of them take about the time of one copy.  Fails when any node did not\n"
	"get the file, and says which.\n"
	"SRC NODES:PATH with a local DST pulls from several nodes at once: the\n"
	"recipe from the first that has the file, each chunk from one of the\n"
	"nodes (up to 8) that hold it, a node that fails left out.\n"
	"  -r, --recursive       copy a local directory and everything below it\n"
	"                        to a node, in batches of many files a request\n"
	"  -n, --no-clobber      fail if DST exists (default: replace it, as cp does)\n"
	"  -f, --force           replace an existing DST (the default; cancels -n)\n"
	"  -T, --streams N       parallel streams of the transfer (default: one\n"
	"                        per CPU, 2 to 4)\n"
	"      --peers FILE      the peers file (default: $DMAR_PEERS, else " CLI_PEERS_DEFAULT ")\n"
	"      --token FILE      the shared secret (default: $DMAR_TOKEN_FILE)\n"
	"      --tls-ca FILE     CA certificate of https peers\n"
	"  -q, --quiet           no progress, no summary\n"
	"  -v, --verbose         a progress line even when stderr is no terminal\n"
	"  -h, --help            this help\n";


struct endpoint {
	const char *arg;   /* as given, for messages */
	char *node;        /* NULL: local */
	char *path;        /* local path, or the node's path without leading '/' */
	const struct dmar_peer *peer;
	struct dmar_client *c;  /* the node's; a broadcast's first node's */
	struct cp_bcast *bcast; /* NODES:PATH with several nodes, else NULL */
};

/* A broadcast's nodes and their clients, opened as the chain needs them. */
struct cp_bcast {
	struct dmar_hops hops;
	struct cli_net *net;
	struct dmar_client *c[DMAR_HOPS_MAX];
};

static struct dmar_client *bcast_peer(void *ctx, const char *name)
{
	struct cp_bcast *b = ctx;
	long i = dmar_hops_find(&b->hops, name);
	if (i < 0)
		return NULL;
	if (!b->c[i]) {
		const struct dmar_peer *p = dmar_peers_find(b->net->peers, name);
		struct dmar_error err = { 0 };
		if (!p || cli_net_open(b->net, p, b->net->connect_timeout_ms, b->net->timeout_ms, &b->c[i], &err) < 0)
			return NULL;
	}
	return b->c[i];
}

/* NODES names several nodes: a list, or "all" (every peer of the file). */
static bool names_many(const char *node)
{
	return strpbrk(node, ",[") || !strcmp(node, "all");
}

/* The broadcast of endpoint e: its nodes, each in the peers file.  0 or -1
 * (reported). */
static int bcast_open(struct endpoint *e, struct cli_net *net)
{
	struct cp_bcast *b = calloc(1, sizeof(*b));
	if (!b) {
		cli_err("out of memory");
		return -1;
	}
	e->bcast = b;
	b->net = net;
	struct dmar_error err = { 0 };
	if (!strcmp(e->node, "all") && !dmar_peers_find(net->peers, "all")) {
		for (size_t i = 0; i < dmar_peers_count(net->peers) && b->hops.n < DMAR_HOPS_MAX; i++)
			snprintf(b->hops.name[b->hops.n++], sizeof(b->hops.name[0]), "%s",
				 dmar_peers_get(net->peers, i)->name);
		if (!b->hops.n) {
			cli_err("%s: the peers file names no node", e->arg);
			return -1;
		}
	} else if (dmar_hops_parse(e->node, &b->hops, &err) < 0) {
		cli_err("%s: %s", e->arg, err.msg);
		return -1;
	}
	for (size_t i = 0; i < b->hops.n; i++)
		if (!cli_net_peer(net, b->hops.name[i]))
			return -1;
	/* the first node answers for the directory (resolve_remote_dst) */
	e->peer = cli_net_peer(net, b->hops.name[0]);
	return cli_net_client(net, e->peer, &e->c);
}

static void bcast_free(struct cp_bcast *b)
{
	for (size_t i = 0; b && i < b->hops.n; i++)
		dmar_client_free(b->c[i]);
	free(b);
}

/* Each node's result, one line each: "  c: wire 268 MB from b, 2.10 s". */
static void bcast_report(json_t *results)
{
	size_t i;
	json_t *v;
	json_array_foreach(results, i, v) {
		const char *node = json_string_value(json_object_get(v, "node"));
		if (!json_is_true(json_object_get(v, "ok"))) {
			cli_err("  %s: FAILED: %s (%s)", node ? node : "?",
				json_string_value(json_object_get(v, "error")) ?: "?",
				json_string_value(json_object_get(v, "errno")) ?: "EIO");
			continue;
		}
		if (cli_verbosity < 1)
			continue;
		char w[32];
		uint64_t wire = (uint64_t)json_integer_value(json_object_get(v, "wire_bytes"));
		const char *from = json_string_value(json_object_get(v, "from"));
		fprintf(stderr, "  %s: ok, wire %" PRIu64 " bytes (%s) from %s, %" PRIu64 " chunks sent, %.3f s\n",
			node ? node : "?", wire, dmar_size_format(wire, w), from && *from ? from : "here",
			(uint64_t)json_integer_value(json_object_get(v, "chunks_sent")),
			json_real_value(json_object_get(v, "seconds")));
	}
}

/* NODE:PATH when a ':' comes before any '/' and after at least one byte. */
static int endpoint_parse(const char *arg, struct endpoint *e)
{
	memset(e, 0, sizeof(*e));
	e->arg = arg;
	const char *colon = strchr(arg, ':');
	const char *slash = strchr(arg, '/');
	bool remote = colon && colon > arg && (!slash || slash > colon);
	if (remote) {
		const char *p = colon + 1;
		while (*p == '/')
			p++;
		e->node = strndup(arg, (size_t)(colon - arg));
		e->path = strdup(p);
	} else {
		e->path = strdup(arg);
	}
	return e->path && (!remote || e->node) ? 0 : -ENOMEM;
}

static void bcast_free(struct cp_bcast *b);

static void endpoint_free(struct endpoint *e)
{
	bcast_free(e->bcast);
	dmar_client_free(e->c);
	free(e->node);
	free(e->path);
}

/* The last component of a path ("" for none), trailing '/' ignored. */
static char *base_name(const char *path)
{
	size_t n = strlen(path);
	while (n && path[n - 1] == '/')
		n--;
	size_t b = n;
	while (b && path[b - 1] != '/')
		b--;
	return strndup(path + b, n - b);
}

/* dir + "/" + name, with no double '/'; dir "" gives name. */
static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);
	while (n && dir[n - 1] == '/')
		n--;
	char *s;
	if (!n)
		return strdup(name);
	return asprintf(&s, "%.*s/%s", (int)n, dir, name) < 0 ? NULL : s;
}

/* ---- progress and summary ------------------------------------------------ */

struct bcast_follow;

struct cp_progress {
	pthread_mutex_t lock;
	bool on, tty;
	double t0, last;
	uint64_t total;
	const char *what;     /* "f -> a:f" */
	uint64_t done;        /* logical bytes accounted for; pull: set by the sink (atomic) */
	bool pushing;         /* done = chunk bytes uploaded */
	struct dmar_xfer_stats st;  /* the latest the engine reported */
	struct bcast_follow *bf;    /* a broadcast's nodes after the first, or NULL */
};

static void bcast_draw(struct cp_progress *p);

static void progress_init(struct cp_progress *p, const char *what, uint64_t total, bool pushing)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	p->tty = isatty(STDERR_FILENO);
	p->on = cli_verbosity >= 2 || (cli_verbosity >= 1 && p->tty);
	p->t0 = p->last = dmar_mono_s();
	p->total = total;
	p->what = what;
	p->pushing = pushing;
}

/* The progress line, and a broadcast's per-node lines under it; with
 * p->lock held, at most four times a second. */
static void progress_draw(struct cp_progress *p)
{
	double now = dmar_mono_s();
	if (now - p->last < 0.25)
		return;
	p->last = now;
	double s = now - p->t0;
	const struct dmar_xfer_stats *st = &p->st;
	uint64_t done = p->pushing ? st->chunk_bytes : __atomic_load_n(&p->done, __ATOMIC_RELAXED);
	if (done > p->total)
		done = p->total;
	char a[32], b[32], w[32], ws[32], es[32];
	fprintf(stderr, "%s%s: %s %s / %s (%3.0f%%), wire %s at %s, effective %s%s", p->tty ? "\r" : "", p->what,
		p->pushing ? "sent" : "done", dmar_size_format(done, a), dmar_size_format(p->total, b),
		p->total ? 100.0 * done / p->total : 100.0, dmar_size_format(st->wire_bytes, w), cli_rate(st->wire_bytes / s, ws),
		cli_rate(done / s, es), p->tty ? "\033[K" : "\n");
	if (p->bf)
		bcast_draw(p);
}

static void on_progress(void *ctx, const struct dmar_xfer_stats *st)
{
	struct cp_progress *p = ctx;
	if (!p->on)
		return;
	pthread_mutex_lock(&p->lock);
	p->st = *st;
	progress_draw(p);
	pthread_mutex_unlock(&p->lock);
}

static void progress_end(struct cp_progress *p)
{
	if (p->on && p->tty && p->last > p->t0)
		fputs("\r\033[J", stderr); /* the line and any drawn below it */
	pthread_mutex_destroy(&p->lock);
}

/*
 * A broadcast's progress at the nodes after the first: each node that
 * forwards it (the chain's first to last but one) reports what it sent
 * on in its event stream (relay.progress with the broadcast's upload
 * id), followed here while the copy runs.  Only for a progress display:
 * a stream that cannot be opened leaves its node's line out.
 */
#define BCAST_FOLLOW_MAX 16
#define BCAST_CONNECT_MS 2000

struct bcast_follow {
	struct cp_progress *p;
	struct cli_net *net;
	const struct dmar_hops *hops;
	char upload[17];
	size_t n;                       /* streams followed: hops 0 .. n-1 */
	struct cli_events *ev[BCAST_FOLLOW_MAX];
	pthread_t th[BCAST_FOLLOW_MAX];
	bool running[BCAST_FOLLOW_MAX];
	volatile sig_atomic_t stop;
	int wake[2];                    /* a byte written ends every stream's wait at once */
	struct dmar_relay_sent got[BCAST_FOLLOW_MAX + 1]; /* by hop; under p->lock */
	bool changed[BCAST_FOLLOW_MAX + 1];
};

static int follow_event(void *ctx, const uint8_t *msg, size_t len)
{
	struct bcast_follow *f = ctx;
	json_t *ev = json_loadb((const char *)msg, len, 0, NULL);
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *up = json_string_value(json_object_get(ev, "upload"));
	long i = dmar_hops_find(f->hops, json_string_value(json_object_get(ev, "to")) ?: "");
	if (type && up && !strcmp(type, "relay.progress") && !strcmp(up, f->upload) && i > 0 &&
	    i <= BCAST_FOLLOW_MAX) {
		struct dmar_relay_sent g = {
			.chunks = (uint64_t)json_integer_value(json_object_get(ev, "chunks_sent")),
			.chunk_bytes = (uint64_t)json_integer_value(json_object_get(ev, "chunk_bytes")),
			.wire_bytes = (uint64_t)json_integer_value(json_object_get(ev, "wire_bytes")),
			.seconds = json_number_value(json_object_get(ev, "seconds")),
		};
		pthread_mutex_lock(&f->p->lock);
		if (g.wire_bytes >= f->got[i].wire_bytes) { /* the streams' events come in order; a late one is old */
			f->got[i] = g;
			f->changed[i] = true;
		}
		progress_draw(f->p); /* also once the push to the first node is done */
		pthread_mutex_unlock(&f->p->lock);
	}
	json_decref(ev);
	return 0;
}

/* One relaying node's stream, hops[k]: opened here, so that the copy
 * does not wait for the streams to open, and followed until stopped
 * (-EINTR), closed or broken. */
struct follow_arg {
	struct bcast_follow *f;
	size_t k;
};

static void *follow_run(void *arg)
{
	struct follow_arg *a = arg;
	struct bcast_follow *f = a->f;
	size_t k = a->k;
	free(a);
	const struct dmar_peer *peer = dmar_peers_find(f->net->peers, f->hops->name[k]);
	struct dmar_error err = { 0 };
	struct cli_events *ev = NULL;
	if (!peer || cli_events_open(&ev, f->net, peer, BCAST_CONNECT_MS, &f->stop, f->wake[0], follow_event, f,
				     &err) < 0)
		return NULL;
	f->ev[k] = ev;
	int r;
	do
		r = cli_events_pump(ev, 1000, NULL);
	while ((r == 0 || r == -ETIMEDOUT) && !cli_events_closed(ev, NULL));
	return NULL;
}

static void bcast_draw(struct cp_progress *p)
{
	struct bcast_follow *f = p->bf;
	size_t shown = f->hops->n < BCAST_FOLLOW_MAX + 1 ? f->hops->n : BCAST_FOLLOW_MAX + 1;
	unsigned lines = 0;
	for (size_t i = 1; i < shown; i++) {
		if (!p->tty && !f->changed[i])
			continue;
		f->changed[i] = false;
		const struct dmar_relay_sent *g = &f->got[i];
		char a[32], b[32], w[32], ws[32];
		fprintf(stderr, "%s  %s: got %s / %s (%3.0f%%) from %s, wire %s at %s%s", p->tty ? "\n" : "",
			f->hops->name[i], dmar_size_format(g->chunk_bytes, a), dmar_size_format(p->total, b),
			p->total ? 100.0 * (g->chunk_bytes < p->total ? g->chunk_bytes : p->total) / p->total : 100.0,
			f->hops->name[i - 1], dmar_size_format(g->wire_bytes, w),
			cli_rate(g->seconds > 0 ? g->wire_bytes / g->seconds : 0, ws), p->tty ? "\033[K" : "\n");
		lines++;
	}
	if (p->tty && shown < f->hops->n) {
		fprintf(stderr, "\n  (and %zu nodes more)\033[K", f->hops->n - shown);
		lines++;
	}
	if (p->tty && lines)
		fprintf(stderr, "\033[%uA", lines); /* back up to the first line */
}

/* Follow the relaying nodes of hops for upload (progress p on). */
static void bcast_follow_start(struct bcast_follow *f, struct cp_progress *p, struct cli_net *net,
			       const struct dmar_hops *hops, uint64_t upload)
{
	memset(f, 0, sizeof(*f));
	f->p = p;
	f->net = net;
	f->hops = hops;
	snprintf(f->upload, sizeof(f->upload), "%016" PRIx64, upload);
	f->n = hops->n - 1 < BCAST_FOLLOW_MAX ? hops->n - 1 : BCAST_FOLLOW_MAX;
	if (pipe2(f->wake, O_CLOEXEC) < 0) {
		f->n = 0; /* no lines for the nodes after the first */
		f->wake[0] = f->wake[1] = -1;
	}
	for (size_t i = 0; i < f->n; i++) {
		struct follow_arg *a = malloc(sizeof(*a));
		if (!a)
			continue;
		*a = (struct follow_arg){ f, i };
		f->running[i] = pthread_create(&f->th[i], NULL, follow_run, a) == 0;
		if (!f->running[i])
			free(a);
	}
	p->bf = f;
}

static void bcast_follow_stop(struct bcast_follow *f)
{
	f->stop = 1;
	/* One byte wakes every stream's wait (it stays readable). */
	ssize_t w = f->wake[1] >= 0 ? write(f->wake[1], "", 1) : 0;
	(void)w; /* if not, the flag ends them within 250 ms */
	for (size_t i = 0; i < f->n; i++)
		if (f->running[i])
			pthread_join(f->th[i], NULL);
	for (size_t i = 0; i < f->n; i++) {
		cli_events_end(f->ev[i]); /* our close, not awaited (the wake is readable) */
		cli_events_free(f->ev[i]);
	}
	if (f->wake[0] >= 0) {
		close(f->wake[0]);
		close(f->wake[1]);
	}
	pthread_mutex_lock(&f->p->lock);
	f->p->bf = NULL;
	pthread_mutex_unlock(&f->p->lock);
}

static void summary(const char *failed, const char *what, const struct dmar_xfer_stats *st)
{
	if (cli_verbosity < 1)
		return;
	char a[32], w[32], es[32], ws[32];
	double s = st->seconds > 0 ? st->seconds : 1e-9;
	fprintf(stderr,
		"%s%s: %" PRIu64 " bytes (%s), %" PRIu64 " chunks, %" PRIu64 " sent, wire %" PRIu64
		" bytes (%s), %" PRIu64 " round trips, %.3f s, effective %s, wire %s\n",
		failed, what, st->logical, dmar_size_format(st->logical, a), st->chunks, st->sent_chunks, st->wire_bytes,
		dmar_size_format(st->wire_bytes, w), st->round_trips, st->seconds, cli_rate(st->logical / s, es),
		cli_rate(st->wire_bytes / s, ws));
}

/* "b:dir/f: arena full (ENOSPC)" */
static void report(const char *where, int r, const struct dmar_error *err)
{
	char why[400];
	cli_err("%s: %s", where, cli_net_why(r, err, why, sizeof(why)));
}

/* ---- local -> node -------------------------------------------------------- */

/* Where a distinct chunk of the local file first starts. */
struct chunk_at {
	uint64_t off;
	uint32_t len;
};

struct local_src {
	int fd;
	const char *name;
	struct dmar_idset set; /* the file's distinct chunks */
	struct chunk_at *at;   /* by set index */
	int changed; /* set when the file no longer has a chunk where it had */
};

static int pread_all(int fd, uint8_t *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pread(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ESTALE; /* the file shrank under us */
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* The engine asks for a chunk it is about to upload: read it again.  The
 * node verifies it against its id; a file changed meanwhile fails there. */
static int src_get(void *ctx, const struct dmar_id *id, uint32_t len, struct dmar_wire_chunk *c)
{
	struct local_src *s = ctx;
	int64_t k = dmar_idset_find(&s->set, id);
	const struct chunk_at *at = k >= 0 ? &s->at[k] : NULL;
	if (!at || at->len != len)
		return -ENOENT;
	uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	int r = pread_all(s->fd, buf, len, at->off);
	if (r < 0) {
		free(buf);
		if (r == -ESTALE)
			__atomic_store_n(&s->changed, 1, __ATOMIC_RELAXED);
		return r;
	}
	*c = (struct dmar_wire_chunk){ .id = *id, .enc = DMAR_WIRE_RAW, .len = len, .stored = len, .payload = buf };
	return 0;
}

static void src_put(void *ctx, struct dmar_wire_chunk *c)
{
	(void)ctx;
	free((void *)c->payload);
	c->payload = NULL;
}

static int read_full(int fd, uint8_t *buf, size_t len, size_t *got)
{
	*got = 0;
	while (*got < len) {
		ssize_t n = read(fd, buf + *got, len - *got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		*got += (size_t)n;
	}
	return 0;
}

struct recipe_cut {
	struct dmar_recipe *r;
	size_t cap;
	struct cp_progress *pr;
	struct dmar_xfer_stats none;
};

/* One chunk of the file: its entry in the recipe. */
static int recipe_add(void *ctx, const uint8_t *p, uint32_t len, const struct dmar_id *id)
{
	struct recipe_cut *rc = ctx;
	struct dmar_recipe *r = rc->r;
	if (r->n == rc->cap) {
		if (rc->cap >= DMAR_RECIPE_MAX_ENTRIES)
			return -EFBIG;
		size_t nc = rc->cap ? rc->cap * 2 : 1024;
		struct dmar_recipe_entry *e = realloc(r->e, nc * sizeof(*e));
		if (!e)
			return -ENOMEM;
		r->e = e;
		rc->cap = nc;
	}
	r->e[r->n++] = (struct dmar_recipe_entry){ .id = *id, .len = len, .kind = DMAR_RECIPE_CHUNK };
	r->size += len;
	rc->pr->done = r->size;
	if (rc->pr->on) {
		rc->none.seconds = dmar_mono_s() - rc->pr->t0;
		on_progress(rc->pr, &rc->none);
	}
	return 0;
}

/*
 * Cut fd into chunks as a mount would and make its recipe (whole chunks,
 * skip 0, no holes) and the index of where each distinct chunk is.
 */
static int recipe_of_fd(int fd, const struct stat *st, struct dmar_recipe *r, struct local_src *s,
			struct cp_progress *pr)
{
	struct dmar_chunker ck;
	int ret = dmar_chunker_init(&ck, DMAR_CHUNK_MIN_DEFAULT, DMAR_CHUNK_AVG_DEFAULT, DMAR_CHUNK_MAX_DEFAULT);
	if (ret < 0)
		return ret;
	memset(r, 0, sizeof(*r));
	r->mode = st->st_mode & 07777;
	r->mtime_sec = st->st_mtim.tv_sec;
	r->mtime_nsec = (uint32_t)st->st_mtim.tv_nsec;
	struct recipe_cut rc = { .r = r, .pr = pr };
	struct dmar_cutter *cut;
	if ((ret = dmar_cutter_new(&cut, &ck, recipe_add, &rc)) < 0)
		return ret;
	for (bool eof = false; !eof && ret == 0;) {
		uint8_t *dst;
		size_t cap, got;
		dmar_cutter_space(cut, &dst, &cap);
		if ((ret = read_full(fd, dst, cap, &got)) < 0)
			break;
		eof = got < cap;
		ret = dmar_cutter_commit(cut, got);
	}
	if (ret == 0)
		ret = dmar_cutter_finish(cut);
	dmar_cutter_free(cut);
	if (ret < 0)
		goto fail;

	s->at = malloc((r->n ? r->n : 1) * sizeof(*s->at));
	if (!s->at || dmar_idset_init(&s->set, r->n) < 0)
		return -ENOMEM;
	uint64_t o = 0;
	for (size_t i = 0; i < r->n; i++) {
		bool added;
		int64_t k = dmar_idset_add(&s->set, &r->e[i].id, &added);
		if (added)
			s->at[k] = (struct chunk_at){ .off = o, .len = (uint32_t)r->e[i].len };
		o += r->e[i].len;
	}
	return 0;
fail:
	dmar_recipe_free(r);
	memset(r, 0, sizeof(*r));
	return ret;
}

/* Is DST a directory on the node (then SRC's name goes below it)?  1, 0
 * (absent or not a directory), or -errno. */
static int remote_is_dir(struct endpoint *d, struct dmar_error *err)
{
	if (!d->path[0])
		return 1;
	if (d->path[strlen(d->path) - 1] == '/')
		return 1;
	json_t *o = NULL;
	int r = dmar_client_stat(d->c, d->path, &o, err);
	if (r == -ENOENT) {
		memset(err, 0, sizeof(*err));
		return 0;
	}
	if (r < 0)
		return r;
	const char *type = json_string_value(json_object_get(o, "type"));
	r = type && !strcmp(type, "dir");
	json_decref(o);
	return r;
}

/* d->path becomes the file's path on the node: a directory gets name below
 * it.  0 or an exit status (reported). */
static int resolve_remote_dst(struct endpoint *d, const char *name)
{
	struct dmar_error err = { 0 };
	char where[600];
	snprintf(where, sizeof(where), "%s:%s", d->node, d->path);
	int r = remote_is_dir(d, &err);
	if (r < 0) {
		report(where, r, &err);
		return 1;
	}
	if (r) {
		char *p = join(d->path, name);
		if (!p) {
			cli_err("out of memory");
			return 1;
		}
		free(d->path);
		d->path = p;
	}
	return 0;
}

static int cp_push(struct endpoint *s, struct endpoint *d, bool noreplace, bool recursive)
{
	int fd = open(s->path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		cli_err("%s: %s", s->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	if (S_ISDIR(st.st_mode) && recursive && d->bcast) {
		cli_err("%s: -r goes to one node at a time (%s names several)", s->path, d->arg);
		close(fd);
		return 1;
	}
	if (S_ISDIR(st.st_mode) && recursive) {
		close(fd);
		char *name = base_name(s->path);
		int status = !name || !name[0] ? (cli_err("%s: no directory name to copy to", s->path), 1)
					       : resolve_remote_dst(d, name);
		free(name);
		return status ? status : cp_push_tree(d->c, d->node, s->path, d->path, noreplace);
	}
	if (!S_ISREG(st.st_mode)) {
		cli_err("%s: %s", s->path,
			S_ISDIR(st.st_mode) ? "is a directory (-r copies a directory)" : "not a regular file");
		close(fd);
		return 1;
	}
	char *name = base_name(s->path);
	int status = 1;
	if (!name || !name[0]) {
		cli_err("%s: no file name to copy to", s->path);
		goto out_fd;
	}
	if ((status = resolve_remote_dst(d, name)) != 0)
		goto out_fd;
	status = 1;
	char where[600];
	snprintf(where, sizeof(where), "%s:%s", d->node, d->path);
	struct dmar_error err = { 0 };
	if (dmar_wire_path_check(d->path, &err) < 0) {
		cli_err("%s: %s", where, err.msg);
		goto out_fd;
	}

	struct dmar_xfer_stats xs;
	status = cp_push_fd(d->c, d->bcast, s->path, fd, &st, d->path, where, noreplace, true, &xs);
out_fd:
	free(name);
	close(fd);
	return status;
}

int cp_push_fd(struct dmar_client *c, struct cp_bcast *b, const char *local, int fd, const struct stat *st,
	       const char *path, const char *where, bool noreplace, bool show, struct dmar_xfer_stats *xs)
{
	char what[1300];
	snprintf(what, sizeof(what), "%s -> %s", local, where);
	struct dmar_error err = { 0 };
	struct cp_progress pr;
	progress_init(&pr, what, (uint64_t)st->st_size, false);
	pr.on = pr.on && show;
	struct dmar_recipe r;
	struct local_src src = { .fd = fd, .name = local };
	double t0 = dmar_mono_s();
	int status = 1;
	memset(xs, 0, sizeof(*xs));
	int ret = recipe_of_fd(fd, st, &r, &src, &pr);
	if (ret < 0) {
		progress_end(&pr);
		cli_err("%s: %s", local, ret == -EFBIG ? "too many chunks for one recipe" : strerror(-ret));
		goto out_src;
	}
	pr.total = r.size;
	pr.pushing = true;
	pr.t0 = dmar_mono_s();
	struct dmar_chunk_source cs = { .get = src_get, .put = src_put, .ctx = &src };
	struct dmar_push_opts o = { .flags = noreplace ? DMAR_PUSH_NOREPLACE : 0 };
	json_t *results = NULL;
	struct bcast_follow bf;
	bool follow = b && pr.on && b->hops.n > 1 && dmar_wire_upload_new(&o.upload) == 0;
	if (follow)
		bcast_follow_start(&bf, &pr, b->net, &b->hops, o.upload);
	if (b)
		ret = dmar_chain_push(&b->hops, bcast_peer, b, NULL, path, &r, NULL, &cs, &o, on_progress, &pr, &results,
				      xs, &err);
	else
		ret = dmar_client_push(c, path, &r, NULL, &cs, &o, on_progress, &pr, xs, &err);
	if (follow)
		bcast_follow_stop(&bf);
	progress_end(&pr);
	xs->seconds = dmar_mono_s() - t0; /* the hashing here is part of the copy */
	if (ret < 0) {
		if (__atomic_load_n(&src.changed, __ATOMIC_RELAXED))
			cli_err("%s: the file changed while it was being copied; nothing was written to %s", local,
				where);
		else if (ret == -EEXIST && noreplace)
			cli_err("%s: already exists (-n)", where);
		else
			report(where, ret, &err);
		if (cli_verbosity >= 2 && show)
			summary("(failed) ", what, xs);
	} else {
		if (show)
			summary("", what, xs);
		status = 0;
	}
	if (show || ret < 0)
		bcast_report(results);
	json_decref(results);
	dmar_recipe_free(&r);
out_src:
	free(src.at);
	dmar_idset_free(&src.set);
	return status;
}

/* ---- node -> local -------------------------------------------------------- */

/* Where a chunk shows in the file: bytes [skip, skip + len) at off. */
struct use {
	struct dmar_id id;
	uint64_t off;
	uint32_t skip;
	uint32_t len;
};

struct local_dst {
	int fd;
	struct use *u; /* sorted by id */
	size_t nu;
	uint64_t chunks_got; /* atomic */
	struct cp_progress *pr;
	struct dmar_error err; /* the sink's own failure, first one */
	pthread_mutex_t lock;
};

static int cmp_use(const void *a, const void *b)
{
	const struct use *x = a, *y = b;
	int c = memcmp(&x->id, &y->id, sizeof(x->id));
	return c ? c : x->off < y->off ? -1 : x->off > y->off;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	return !n || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

static int pwrite_all(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* A verified chunk: write it wherever the recipe uses it.  Zero ranges are
 * left unwritten: the temp file was truncated to size, they read as zeros
 * and stay holes. */
static int sink_put(void *ctx, const struct dmar_wire_chunk *c, const uint8_t *decoded)
{
	struct local_dst *d = ctx;
	size_t lo = 0, hi = d->nu;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (memcmp(&d->u[mid].id, &c->id, sizeof(c->id)) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == d->nu || memcmp(&d->u[lo].id, &c->id, sizeof(c->id)))
		return 0; /* not asked for: nothing to write */
	uint64_t bytes = 0;
	for (size_t i = lo; i < d->nu && !memcmp(&d->u[i].id, &c->id, sizeof(c->id)); i++) {
		const struct use *u = &d->u[i];
		if ((uint64_t)u->skip + u->len > c->len) {
			pthread_mutex_lock(&d->lock);
			dmar_error_set(&d->err, -EBADMSG, "the recipe shows bytes %u..%u of a chunk of %u bytes",
				       u->skip, u->skip + u->len, c->len);
			pthread_mutex_unlock(&d->lock);
			return -EBADMSG;
		}
		if (!all_zero(decoded + u->skip, u->len)) {
			int r = pwrite_all(d->fd, decoded + u->skip, u->len, u->off);
			if (r < 0) {
				pthread_mutex_lock(&d->lock);
				dmar_error_errno(&d->err, r, "write");
				pthread_mutex_unlock(&d->lock);
				return r;
			}
		}
		bytes += u->len;
	}
	__atomic_add_fetch(&d->chunks_got, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->pr->done, bytes, __ATOMIC_RELAXED);
	return 0;
}

/* A pull from several nodes (NODES:FILE): a swarm of them, the node
 * that gave the recipe (hop oi, its client origin) first. */
static size_t swarm_peers(struct cp_bcast *b, size_t oi, struct dmar_client *origin, struct dmar_swarm_peer *sp)
{
	size_t np = 0;
	sp[np++] = (struct dmar_swarm_peer){ .c = origin, .name = b->hops.name[oi] };
	for (size_t i = 0; i < b->hops.n && np < DMAR_SWARM_PEERS; i++) {
		struct dmar_client *c = i == oi ? NULL : bcast_peer(b, b->hops.name[i]);
		if (c)
			sp[np++] = (struct dmar_swarm_peer){ .c = c, .name = b->hops.name[i] };
	}
	return np;
}

/* What each node of a swarm pull gave: "  c: 673 of 1345 chunks (24.0 MiB)". */
static void swarm_report(const struct dmar_swarm_peer *sp, size_t np, size_t nids)
{
	for (size_t k = 0; k < np; k++) {
		char h[32];
		if (sp[k].err)
			cli_err("  %s: left out: %s (%s)", sp[k].name ? sp[k].name : "?", strerror(-sp[k].err),
				dmar_wire_errno_name(sp[k].err));
		else if (cli_verbosity >= 2)
			fprintf(stderr, "  %s: %" PRIu64 " of %zu chunks (%s)\n", sp[k].name ? sp[k].name : "?",
				sp[k].chunks, nids, dmar_size_format(sp[k].bytes, h));
	}
}

static int cp_pull(struct endpoint *s, struct endpoint *d, bool noreplace)
{
	char where[600];
	snprintf(where, sizeof(where), "%s:%s", s->node, s->path);
	char *name = base_name(s->path);
	char *dst = NULL;
	int status = 1;
	if (!name) {
		cli_err("out of memory");
		return 1;
	}
	struct stat lst;
	size_t dl = strlen(d->path);
	if ((dl && d->path[dl - 1] == '/') || (stat(d->path, &lst) == 0 && S_ISDIR(lst.st_mode))) {
		if (!name[0]) {
			cli_err("%s: is a directory (cp copies one file)", where);
			goto out;
		}
		dst = join(d->path, name);
	} else {
		dst = strdup(d->path);
	}
	if (!dst) {
		cli_err("out of memory");
		goto out;
	}

	struct dmar_error err = { 0 };
	struct dmar_recipe r;
	double t0 = dmar_mono_s();
	struct dmar_client *origin = s->c;
	size_t oi = 0;
	int ret = dmar_client_recipe(s->c, s->path, &r, &err);
	/* several nodes: the recipe from the first that has the file */
	for (size_t i = 1; ret < 0 && s->bcast && i < s->bcast->hops.n; i++) {
		struct dmar_client *c = bcast_peer(s->bcast, s->bcast->hops.name[i]);
		struct dmar_error e = { 0 };
		if (c && dmar_client_recipe(c, s->path, &r, &e) == 0)
			ret = 0, origin = c, oi = i;
	}
	if (ret < 0) {
		report(where, ret, &err);
		goto out;
	}
	char what[1200];
	snprintf(what, sizeof(what), "%s -> %s", where, dst);

	/* The index: every use of every chunk, sorted by id; the distinct ids
	 * are what to pull. */
	struct local_dst ld = { .fd = -1 };
	pthread_mutex_init(&ld.lock, NULL);
	struct dmar_id *ids = NULL;
	size_t nids = 0;
	uint64_t hole_bytes = 0;
	ld.u = malloc((r.n ? r.n : 1) * sizeof(*ld.u));
	ids = malloc((r.n ? r.n : 1) * sizeof(*ids));
	if (!ld.u || !ids) {
		cli_err("out of memory");
		goto out_recipe;
	}
	uint64_t off = 0;
	for (size_t i = 0; i < r.n; i++) {
		if (r.e[i].kind == DMAR_RECIPE_CHUNK)
			ld.u[ld.nu++] = (struct use){ .id = r.e[i].id, .off = off, .skip = r.e[i].skip,
						      .len = (uint32_t)r.e[i].len };
		else
			hole_bytes += r.e[i].len;
		off += r.e[i].len;
	}
	qsort(ld.u, ld.nu, sizeof(*ld.u), cmp_use);
	for (size_t i = 0; i < ld.nu; i++)
		if (!nids || memcmp(&ids[nids - 1], &ld.u[i].id, sizeof(*ids)))
			ids[nids++] = ld.u[i].id;

	struct cli_out out;
	ret = cli_out_open(&out, dst, !noreplace);
	if (ret == -EEXIST) {
		cli_err("%s: already exists (-n)", dst);
		goto out_recipe;
	} else if (ret < 0) {
		cli_err("%s: %s", dst, strerror(-ret));
		goto out_recipe;
	}
	ld.fd = out.fd;
	if (ftruncate(out.fd, (off_t)r.size) < 0) {
		ret = -errno;
		cli_err("%s: %s", dst, strerror(-ret));
		cli_out_abort(&out);
		goto out_recipe;
	}

	struct cp_progress pr;
	progress_init(&pr, what, r.size, false);
	pr.done = hole_bytes;
	ld.pr = &pr;
	struct dmar_chunk_sink sink = { .put = sink_put, .ctx = &ld };
	struct dmar_xfer_stats xs = { 0 };
	ret = 0;
	struct dmar_swarm_peer sp[DMAR_SWARM_PEERS];
	size_t np = s->bcast ? swarm_peers(s->bcast, oi, origin, sp) : 0;
	if (nids && np)
		ret = dmar_swarm_pull(sp, np, ids, nids, &sink, on_progress, &pr, &xs, &err);
	else if (nids)
		ret = dmar_client_pull(s->c, ids, nids, &sink, on_progress, &pr, &xs, &err);
	progress_end(&pr);
	if (np)
		swarm_report(sp, np, nids);
	if (ret == 0 && ld.chunks_got != nids) {
		ret = dmar_error_set(&err, -EIO, "the node sent %" PRIu64 " of %zu chunks", ld.chunks_got, nids);
	}
	if (ret < 0) {
		cli_out_abort(&out);
		if (ld.err.code)
			cli_err("%s: %s", dst, ld.err.msg);
		else
			report(where, ret, &err);
		goto out_recipe;
	}
	struct dmar_meta meta = { .valid = true, .mode = r.mode, .mtime_sec = r.mtime_sec, .mtime_nsec = r.mtime_nsec };
	if ((ret = cli_out_commit(&out, &meta)) < 0) {
		cli_err("%s: %s", dst, strerror(-ret));
		goto out_recipe;
	}
	xs.logical = r.size;
	xs.chunks = nids;
	xs.seconds = dmar_mono_s() - t0;
	xs.round_trips += 1; /* the recipe */
	summary("", what, &xs);
	status = 0;
out_recipe:
	pthread_mutex_destroy(&ld.lock);
	free(ld.u);
	free(ids);
	dmar_recipe_free(&r);
out:
	free(dst);
	free(name);
	return status;
}

/* ---- node -> node --------------------------------------------------------- */

static uint64_t jnum(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static int cp_transfer(struct endpoint *s, struct endpoint *d, bool noreplace)
{
	char from[600], to[600], what[1300];
	snprintf(from, sizeof(from), "%s:%s", s->node, s->path);
	char *name = base_name(s->path);
	if (!name) {
		cli_err("out of memory");
		return 1;
	}
	int status = 1;
	if (!name[0]) {
		cli_err("%s: is a directory (cp copies one file)", from);
		goto out;
	}
	if (resolve_remote_dst(d, name) != 0)
		goto out;
	snprintf(to, sizeof(to), "%s:%s", d->node, d->path);
	snprintf(what, sizeof(what), "%s -> %s", from, to);
	struct dmar_error err = { 0 };
	if (noreplace) {
		/* The transfer API always replaces: check first (a race with
		 * another writer is possible). */
		json_t *o = NULL;
		int r = dmar_client_stat(d->c, d->path, &o, &err);
		json_decref(o);
		if (r == 0) {
			cli_err("%s: already exists (-n)", to);
			goto out;
		}
		if (r != -ENOENT) {
			report(to, r, &err);
			goto out;
		}
		memset(&err, 0, sizeof(err));
	}
	json_t *res = NULL;
	double t0 = dmar_mono_s();
	/* The node names its peers as our peers file does: NODE2 is "to". */
	int r = dmar_client_transfer(s->c, s->path, d->node, d->path, &res, &err);
	if (r < 0) {
		report(what, r, &err);
		goto out;
	}
	struct dmar_xfer_stats xs = {
		.logical = jnum(res, "logical_bytes"),
		.chunks = jnum(res, "chunks"),
		.sent_chunks = jnum(res, "chunks_sent"),
		.wire_bytes = jnum(res, "wire_bytes"),
		.round_trips = jnum(res, "round_trips"),
		.seconds = dmar_mono_s() - t0,
	};
	json_decref(res);
	summary("", what, &xs);
	status = 0;
out:
	free(name);
	return status;
}

int cmd_cp(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "no-clobber", no_argument, NULL, 'n' },
		{ "recursive", no_argument, NULL, 'r' },
		{ "force", no_argument, NULL, 'f' },
		{ "streams", required_argument, NULL, 'T' },
		CLI_NET_LONG_OPTIONS,
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cli_net net = { 0 };
	bool noreplace = false, recursive = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":nrfT:qvh", lo, NULL)) != -1) {
		if (cli_net_option(c, &net))
			continue;
		switch (c) {
		case 'n': noreplace = true; break;
		case 'r': recursive = true; break;
		case 'f': noreplace = false; break;
		case 'T':
			if (cli_parse_threads(optarg, &net.streams) < 0 || net.streams > 64)
				return cli_usage("invalid stream count '%s' (1..64)", optarg);
			break;
		case 'q': cli_verbosity = 0; break;
		case 'v': cli_verbosity = 2; break;
		case 'h': fputs(cp_help, stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (argc - optind != 2)
		return cli_usage("cp takes SRC and DST (got %d argument%s)", argc - optind, argc - optind == 1 ? "" : "s");
	struct endpoint s, d;
	if (endpoint_parse(argv[optind], &s) < 0 || endpoint_parse(argv[optind + 1], &d) < 0) {
		cli_err("out of memory");
		return 1;
	}
	int status = 1;
	if (!s.node && !d.node) {
		status = cli_usage("%s and %s are both local: use cp(1) (NODE:PATH names a file on a node)", s.arg, d.arg);
		goto out;
	}
	if (cli_net_load(&net) < 0)
		goto out;
	struct endpoint *ends[2] = { &s, &d };
	for (int i = 0; i < 2; i++) {
		struct endpoint *e = ends[i];
		if (!e->node)
			continue;
		if (names_many(e->node) && !dmar_peers_find(net.peers, e->node)) {
			/* to several: a broadcast of a local file; from several:
			 * a swarm pull to a local file */
			if (s.node && d.node) {
				status = cli_usage("%s: several nodes are a source or a destination of a local file",
						   e->arg);
				goto out;
			}
			if (bcast_open(e, &net) < 0)
				goto out;
			continue;
		}
		if (!(e->peer = cli_net_peer(&net, e->node)) || cli_net_client(&net, e->peer, &e->c) < 0)
			goto out;
	}
	if (recursive && s.node) {
		status = cli_usage("-r copies a local directory to a node (%s is on a node)", s.arg);
		goto out;
	}
	if (!s.node)
		status = cp_push(&s, &d, noreplace, recursive);
	else if (!d.node)
		status = cp_pull(&s, &d, noreplace);
	else
		status = cp_transfer(&s, &d, noreplace);
out:
	endpoint_free(&s);
	endpoint_free(&d);
	cli_net_free(&net);
	return status;
}
