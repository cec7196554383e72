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
#include "net/probe.h"
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

static json_int_t jint(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_is_integer(v) ? json_integer_value(v) : -1;
}

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "-";
}

/* The probe's rows (net/probe.h) as a table. */
static void nodes_table(json_t *rows)
{
	int wn = 4, wa = 7;
	size_t i;
	json_t *w;
	json_array_foreach(rows, i, w) {
		int l = (int)strlen(jstr(w, "name"));
		wn = l > wn ? l : wn;
		l = (int)strlen(jstr(w, "address")) + (strncmp(jstr(w, "url"), "https:", 6) ? 0 : 6);
		wa = l > wa ? l : wa;
	}
	printf("%-*s  %-*s  %-11s  %-23s  %8s  %s\n", wn, "NAME", wa, "ADDRESS", "STATE", "ARENA USED / SIZE", "CHUNKS",
	       "ENCODE");
	json_array_foreach(rows, i, w) {
		char a[DMAR_PEER_URL_MAX + 8];
		snprintf(a, sizeof(a), "%s%s", jstr(w, "address"), strncmp(jstr(w, "url"), "https:", 6) ? "" : " https");
		if (!json_is_true(json_object_get(w, "reachable"))) {
			printf("%-*s  %-*s  %-11s  %s (%s)\n", wn, jstr(w, "name"), wa, a, "unreachable", jstr(w, "error"),
			       jstr(w, "errno"));
			continue;
		}
		json_t *info = json_object_get(w, "node");
		char u[32], s[32], arena[80], chunks[32];
		json_int_t used = jint(info, "arena", "used"), size = jint(info, "arena", "size");
		json_int_t nch = jint(info, "store", "chunks");
		if (used >= 0 && size >= 0)
			snprintf(arena, sizeof(arena), "%s / %s", dmar_size_format((uint64_t)used, u), dmar_size_format((uint64_t)size, s));
		else
			snprintf(arena, sizeof(arena), "-");
		if (nch >= 0)
			snprintf(chunks, sizeof(chunks), "%" JSON_INTEGER_FORMAT, nch);
		else
			snprintf(chunks, sizeof(chunks), "-");
		printf("%-*s  %-*s  %-11s  %-23s  %8s  %s\n", wn, jstr(w, "name"), wa, a, "reachable", arena, chunks,
		       jstr(info, "encode"));
	}
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
	struct dmar_probe_opts po = { .token = net.token, .tls_ca = net.tls_ca };
	json_t *rows = NULL;
	if (dmar_probe_peers(net.peers, &po, &rows) < 0) {
		cli_err("out of memory");
		cli_net_free(&net);
		return 1;
	}
	int status = 0;
	size_t i;
	json_t *w;
	json_array_foreach(rows, i, w)
		if (!json_is_true(json_object_get(w, "reachable")))
			status = 1;
	if (as_json) {
		char *s = json_dumps(rows, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (s)
			puts(s);
		else
			cli_err("out of memory"), status = 1;
		free(s);
	} else {
		nodes_table(rows);
	}
	if (n == 0 && !as_json)
		fprintf(stderr, "dmar: nodes: the peers file lists no peers\n");
	json_decref(rows);
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
	int r = cli_events_open(&ev, &net, p, WATCH_CONNECT_MS, &watch_stop, -1, watch_event, &w, &err);
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
		cli_err("%s (%s): %s", w.node, dmar_peers_address(p, addr, sizeof(addr)),
			cli_net_why(r, &e, why, sizeof(why)));
		status = 1;
	}
	cli_events_free(ev);
	cli_net_free(&net);
	return status;
}
