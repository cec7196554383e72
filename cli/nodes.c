/* SPDX-License-Identifier: MIT */
/*
 * The nodes a `dmar` command talks to: the peers file and token shared by
 * dmar cp, nodes and watch (struct cli_net), `dmar nodes` (GET /v1/node of
 * every peer, at once, with short timeouts) and `dmar watch` (the GET
 * /v1/events websocket of one node, each event a JSON line on stdout).
 *
 * watch follows the stream through events.c and prints each message.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "net/client.h"
#include "net/peers.h"
#include "net/wire.h"
#include "net/ws.h"

/* ---- what the remote commands share --------------------------------------- */

int cli_net_load(struct cli_net *n)
{
	struct dmar_error err = { 0 };
	const char *env = getenv("DMAR_PEERS");
	const char *path = n->peers_path ? n->peers_path : env && *env ? env : CLI_PEERS_DEFAULT;
	int r = dmar_peers_load(path, &n->peers, &err);
	if (r < 0) {
		cli_err("%s%s", err.code ? err.msg : strerror(-r),
			r == -ENOENT && !n->peers_path ? " (name the peers file with --peers FILE or $DMAR_PEERS)" : "");
		return -1;
	}
	env = getenv("DMAR_TOKEN_FILE");
	const char *tok = n->token_path ? n->token_path : env && *env ? env : NULL;
	if (tok && (r = dmar_token_load(tok, &n->token, &err)) < 0) {
		cli_err("%s", err.code ? err.msg : strerror(-r));
		return -1;
	}
	return 0;
}

const struct dmar_peer *cli_net_peer(struct cli_net *n, const char *name)
{
	const struct dmar_peer *p = dmar_peers_find(n->peers, name);
	if (!p) {
		const char *env = getenv("DMAR_PEERS");
		cli_err("no peer named '%s' in %s (a local path with ':' is written ./%s:...)", name,
			n->peers_path ? n->peers_path : env && *env ? env : CLI_PEERS_DEFAULT, name);
	}
	return p;
}

int cli_net_open(const struct cli_net *n, const struct dmar_peer *p, long connect_timeout_ms, long timeout_ms,
		 struct dmar_client **out, struct dmar_error *err)
{
	char url[DMAR_PEER_URL_MAX];
	if (dmar_peers_url(p, url, sizeof(url)) < 0)
		return dmar_error_set(err, -ENAMETOOLONG, "address too long");
	struct dmar_client_opts o = {
		.name = p->name,
		.url = url,
		.token = n->token,
		.tls_ca = n->tls_ca,
		.streams = n->streams,
		.connect_timeout_ms = connect_timeout_ms,
		.timeout_ms = timeout_ms,
	};
	return dmar_client_new(out, &o, err);
}

int cli_net_client(struct cli_net *n, const struct dmar_peer *p, struct dmar_client **out)
{
	struct dmar_error err = { 0 };
	int r = cli_net_open(n, p, n->connect_timeout_ms, n->timeout_ms, out, &err);
	if (r < 0) {
		cli_err("%s: %s", p->name, err.code ? err.msg : strerror(-r));
		return -1;
	}
	return 0;
}

bool cli_net_option(int c, struct cli_net *n)
{
	switch (c) {
	case CLI_OPT_PEERS: n->peers_path = optarg; return true;
	case CLI_OPT_TOKEN: n->token_path = optarg; return true;
	case CLI_OPT_TLS_CA: n->tls_ca = optarg; return true;
	default: return false;
	}
}

void cli_net_free(struct cli_net *n)
{
	if (n->token) {
		explicit_bzero(n->token, strlen(n->token));
		free(n->token);
		n->token = NULL;
	}
	dmar_peers_free(n->peers);
	n->peers = NULL;
}

const char *cli_peer_address(const struct dmar_peer *p, char *buf, size_t cap)
{
	bool v6 = strchr(p->host, ':') != NULL;
	snprintf(buf, cap, "%s%s%s:%u", v6 ? "[" : "", p->host, v6 ? "]" : "", (unsigned)p->port);
	return buf;
}

const char *cli_net_why(int r, const struct dmar_error *err, char *buf, size_t cap)
{
	const char *msg = err && err->code && err->msg[0] ? err->msg : strerror(-r);
	snprintf(buf, cap, "%s (%s)", msg, dmar_wire_errno_name(r));
	return buf;
}

enum { OPT_JSON = CLI_OPT_NEXT, OPT_COUNT };

/* ---- dmar nodes ----------------------------------------------------------- */

static const char nodes_help[] =
	"Usage: dmar nodes [--peers FILE] [--token FILE] [--tls-ca FILE] [--json]\n"
	"Ask every peer in the peers file for its state (GET /v1/node) and print\n"
	"a table: name, address, reachable or not (and why), arena used / size,\n"
	"chunks, encoding.  Exit status 0 when every peer answered, 1 otherwise.\n"
	"      --peers FILE     the peers file (default: $DMAR_PEERS, else " CLI_PEERS_DEFAULT ")\n"
	"      --token FILE     the shared secret (default: $DMAR_TOKEN_FILE)\n"
	"      --tls-ca FILE    CA certificate of https peers\n"
	"      --json           one JSON array, an object per peer\n"
	"  -h, --help           this help\n";

#define NODES_CONNECT_MS 1500
#define NODES_TIMEOUT_MS 4000
#define NODES_THREADS 16

struct node_row {
	const struct dmar_peer *p;
	json_t *info;            /* the answer, or NULL */
	int r;                   /* 0 or the failure */
	struct dmar_error err;
};

struct nodes_job {
	struct cli_net *net;
	struct node_row *rows;
	size_t n;
	size_t next; /* atomic */
};

static void *nodes_worker(void *arg)
{
	struct nodes_job *j = arg;
	for (;;) {
		size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (i >= j->n)
			return NULL;
		struct node_row *w = &j->rows[i];
		struct dmar_client *c = NULL;
		if ((w->r = cli_net_open(j->net, w->p, NODES_CONNECT_MS, NODES_TIMEOUT_MS, &c, &w->err)) == 0)
			w->r = dmar_client_info(c, &w->info, &w->err);
		dmar_client_free(c);
	}
}

static json_int_t jint(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_is_integer(v) ? json_integer_value(v) : -1;
}

static void nodes_table(const struct node_row *rows, size_t n)
{
	int wn = 4, wa = 7;
	char addr[DMAR_PEER_URL_MAX + 8];
	for (size_t i = 0; i < n; i++) {
		int l = (int)strlen(rows[i].p->name);
		wn = l > wn ? l : wn;
		l = (int)strlen(cli_peer_address(rows[i].p, addr, sizeof(addr))) + (rows[i].p->tls ? 6 : 0);
		wa = l > wa ? l : wa;
	}
	printf("%-*s  %-*s  %-11s  %-23s  %8s  %s\n", wn, "NAME", wa, "ADDRESS", "STATE", "ARENA USED / SIZE", "CHUNKS",
	       "ENCODE");
	for (size_t i = 0; i < n; i++) {
		const struct node_row *w = &rows[i];
		char a[DMAR_PEER_URL_MAX + 8];
		cli_peer_address(w->p, addr, sizeof(addr));
		snprintf(a, sizeof(a), "%s%s", addr, w->p->tls ? " https" : "");
		if (w->r < 0) {
			char why[400];
			printf("%-*s  %-*s  %-11s  %s\n", wn, w->p->name, wa, a, "unreachable",
			       cli_net_why(w->r, &w->err, why, sizeof(why)));
			continue;
		}
		char u[32], s[32], arena[80], chunks[32];
		json_int_t used = jint(w->info, "arena", "used"), size = jint(w->info, "arena", "size");
		json_int_t nch = jint(w->info, "store", "chunks");
		if (used >= 0 && size >= 0)
			snprintf(arena, sizeof(arena), "%s / %s", dmar_size_format((uint64_t)used, u), dmar_size_format((uint64_t)size, s));
		else
			snprintf(arena, sizeof(arena), "-");
		if (nch >= 0)
			snprintf(chunks, sizeof(chunks), "%" JSON_INTEGER_FORMAT, nch);
		else
			snprintf(chunks, sizeof(chunks), "-");
		const char *enc = json_string_value(json_object_get(w->info, "encode"));
		printf("%-*s  %-*s  %-11s  %-23s  %8s  %s\n", wn, w->p->name, wa, a, "reachable", arena, chunks,
		       enc ? enc : "-");
	}
}

static int nodes_json(const struct node_row *rows, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		const struct node_row *w = &rows[i];
		char addr[DMAR_PEER_URL_MAX], url[DMAR_PEER_URL_MAX];
		dmar_peers_url(w->p, url, sizeof(url));
		json_t *o = json_pack("{s:s, s:s, s:s, s:b}", "name", w->p->name, "address",
				      cli_peer_address(w->p, addr, sizeof(addr)), "url", url, "reachable", w->r == 0);
		if (!o)
			break;
		if (w->r == 0) {
			json_object_set(o, "node", w->info);
		} else {
			json_object_set_new(o, "error", json_string(w->err.code ? w->err.msg : strerror(-w->r)));
			json_object_set_new(o, "errno", json_string(dmar_wire_errno_name(w->r)));
		}
		json_array_append_new(arr, o);
	}
	if (!arr || json_array_size(arr) != n) {
		json_decref(arr);
		cli_err("out of memory");
		return -1;
	}
	char *s = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(arr);
	if (!s) {
		cli_err("out of memory");
		return -1;
	}
	puts(s);
	free(s);
	return 0;
}

int cmd_nodes(int argc, char **argv)
{
	static const struct option lo[] = {
		CLI_NET_LONG_OPTIONS,
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cli_net net = { 0 };
	bool as_json = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		if (cli_net_option(c, &net))
			continue;
		switch (c) {
		case OPT_JSON: as_json = true; break;
		case 'h': fputs(nodes_help, stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind < argc)
		return cli_usage("nodes takes no arguments (got '%s')", argv[optind]);
	if (cli_net_load(&net) < 0)
		return 1;
	size_t n = dmar_peers_count(net.peers);
	struct node_row *rows = calloc(n ? n : 1, sizeof(*rows));
	if (!rows) {
		cli_err("out of memory");
		cli_net_free(&net);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		rows[i].p = dmar_peers_get(net.peers, i);
	struct nodes_job job = { .net = &net, .rows = rows, .n = n };
	unsigned nt = n < NODES_THREADS ? (unsigned)n : NODES_THREADS;
	pthread_t tid[NODES_THREADS];
	unsigned started = 0;
	for (; started + 1 < nt; started++)
		if (pthread_create(&tid[started], NULL, nodes_worker, &job) != 0)
			break;
	nodes_worker(&job);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);

	int status = 0;
	for (size_t i = 0; i < n; i++)
		if (rows[i].r < 0)
			status = 1;
	if (as_json ? nodes_json(rows, n) < 0 : (nodes_table(rows, n), false))
		status = 1;
	if (n == 0 && !as_json)
		fprintf(stderr, "dmar: nodes: the peers file lists no peers\n");
	for (size_t i = 0; i < n; i++)
		json_decref(rows[i].info);
	free(rows);
	cli_net_free(&net);
	return status;
}

/* ---- dmar watch ----------------------------------------------------------- */

static const char watch_help[] =
	"Usage: dmar watch [--peers FILE] [--token FILE] [--tls-ca FILE] [--count N] NODE\n"
	"Follow NODE's event stream (the GET /v1/events websocket): print each\n"
	"event as one JSON line on stdout until interrupted or the node closes\n"
	"the stream.  The first line is the node's hello; transfer events\n"
	"(transfer.started, .progress, .done, .failed) follow as they happen.\n"
	"      --count N        exit after N events (the hello not counted)\n"
	"      --peers FILE / --token FILE / --tls-ca FILE   as for dmar nodes\n"
	"  -h, --help           this help\n";

#define WATCH_CONNECT_MS 5000

static volatile sig_atomic_t watch_stop;

static void on_watch_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

struct watch {
	const char *node;
	bool hello_seen;
	uint64_t events, count; /* count 0: no limit */
};

static bool watch_done(const struct watch *w)
{
	return w->count && w->events >= w->count;
}

/* A whole message: one JSON line on stdout. */
static int watch_event(void *ctx, const uint8_t *data, size_t len)
{
	struct watch *w = ctx;
	if (watch_done(w))
		return 0;
	json_t *ev = json_loadb((const char *)data, len, 0, NULL);
	char *line = ev ? json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	const char *type = json_string_value(json_object_get(ev, "type"));
	bool hello = type && !strcmp(type, "hello") && !w->hello_seen;
	if (line) {
		puts(line);
	} else { /* not JSON: pass it on as it came, up to a line end */
		size_t l = 0;
		while (l < len && data[l] != '\n')
			l++;
		printf("%.*s\n", (int)l, (const char *)data);
	}
	free(line);
	json_decref(ev);
	if (fflush(stdout) == EOF)
		return -errno;
	if (hello)
		w->hello_seen = true;
	else
		w->events++;
	return 0;
}

int cmd_watch(int argc, char **argv)
{
	static const struct option lo[] = {
		CLI_NET_LONG_OPTIONS,
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cli_net net = { 0 };
	struct watch w = { 0 };
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		if (cli_net_option(c, &net))
			continue;
		switch (c) {
		case OPT_COUNT: {
			char *e;
			errno = 0;
			unsigned long long v = strtoull(optarg, &e, 10);
			if (errno || e == optarg || *e || *optarg == '-' || v == 0)
				return cli_usage("invalid --count '%s' (a number of events, 1 or more)", optarg);
			w.count = v;
			break;
		}
		case 'h': fputs(watch_help, stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage("watch needs a NODE (a name from the peers file)%s", "");
	if (argc - optind > 1)
		return cli_usage("watch takes one NODE (got '%s' more)", argv[optind + 1]);
	w.node = argv[optind];
	if (cli_net_load(&net) < 0)
		return 1;
	const struct dmar_peer *p = cli_net_peer(&net, w.node);
	if (!p) {
		cli_net_free(&net);
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_watch_signal; /* no SA_RESTART: poll wakes up */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	struct cli_events *ev = NULL;
	struct dmar_error err = { 0 };
	int r = cli_events_open(&ev, &net, p, WATCH_CONNECT_MS, &watch_stop, watch_event, &w, &err);
	while (r == 0 && !cli_events_closed(ev, NULL) && !watch_done(&w))
		r = cli_events_pump(ev, -1, &err);
	int status = 0, code = 0;
	if (r == -EINTR || (r == 0 && !cli_events_closed(ev, NULL))) {
		watch_stop = 0; /* the close may wait now */
		cli_events_end(ev);
	} else if (r == 0) {
		cli_events_closed(ev, &code);
		cli_events_end(ev);
		if (!watch_done(&w) && w.count) {
			cli_err("%s: the node closed the stream (code %d) after %" PRIu64 " of %" PRIu64 " events", w.node,
				code, w.events, w.count);
			status = 1;
		}
	} else {
		char why[400], addr[DMAR_PEER_URL_MAX];
		struct dmar_error e = { .code = r };
		snprintf(e.msg, sizeof(e.msg), "%s", err.msg[0] ? err.msg : strerror(-r));
		cli_err("%s (%s): %s", w.node, cli_peer_address(p, addr, sizeof(addr)),
			cli_net_why(r, &e, why, sizeof(why)));
		status = 1;
	}
	cli_events_free(ev);
	cli_net_free(&net);
	return status;
}
