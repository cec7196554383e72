/* SPDX-License-Identifier: MIT */
/*
 * cli.h - what the `dmar` commands share: size parsing, output files that
 * appear whole or not at all, progress and speed reporting.
 */
#ifndef DMAR_CLI_H
#define DMAR_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/bytepack.h"
#include "codec/encoder.h"
#include "codec/error.h"
#include "codec/size.h" /* dmar_size_format, for sizes in messages */

extern const char *cli_cmd;   /* "pack", "unpack", ... for messages */
extern int cli_verbosity;     /* 0 quiet, 1 normal, 2 verbose */

#define CLI_EXIT_USAGE 2

/* "dmar: CMD: " + message on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error: the message, then "Try 'dmar CMD --help'."; returns
 * CLI_EXIT_USAGE for `return cli_usage(...)`. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The usage error for what getopt_long returned as c (':' a missing
 * argument, else an unknown option): CLI_EXIT_USAGE, for
 * `default: return cli_bad_option(c, argv);`. */
int cli_bad_option(int c, char **argv);
/* Default thread count: online CPUs, at most 8. */
unsigned cli_default_threads(void);
/* Parse -T: 0 means all CPUs.  0 or -EINVAL. */
int cli_parse_threads(const char *s, unsigned *out);

/* An output that becomes visible only when complete: a temp file beside
 * the target renamed over it on commit, or stdout. */
struct cli_out {
	int fd;
	char *path;   /* final name, NULL for stdout */
	char *tmp;    /* temp name while open */
};
int cli_out_open(struct cli_out *o, const char *path, bool force);
int cli_out_write(void *ctx, const void *buf, size_t len); /* dmar_write_fn */
/* dmar_pwrite_fn: write at an offset of the temp file, from any thread.
 * Only for an output opened with a path (a fresh temp file), never stdout,
 * which may be a pipe or a file opened for append. */
int cli_out_pwrite(void *ctx, const void *buf, size_t len, uint64_t off);
/* fsync? no: rename is enough for all-or-nothing visibility to readers. */
int cli_out_commit(struct cli_out *o, const struct dmar_meta *meta);
void cli_out_abort(struct cli_out *o); /* removes the temp file */

/* Progress line on stderr (only when it is a terminal and not quiet). */
struct cli_progress {
	bool on;
	double start, last;
	uint64_t total;   /* 0 if unknown */
	const char *what;
};
void cli_progress_init(struct cli_progress *p, const char *what, uint64_t total);
void cli_progress_cb(void *ctx, uint64_t done);
void cli_progress_end(struct cli_progress *p);

/* Samples for mining a byte pack (cli/mine.c). */
struct cli_samples {
	uint8_t *buf;
	size_t len, cap;
	size_t *sizes;
	unsigned n, ncap;
};
int mine_from_paths(struct cli_samples *s, char **paths, int n, size_t budget);
int mine_from_pid(struct cli_samples *s, long pid, size_t budget);
void mine_samples_free(struct cli_samples *s);

/*
 * The commands that talk to nodes (docs/rest-api.md): dmar cp (cp.c), dmar
 * nodes and dmar watch (nodes.c).  struct cli_net is what they share: the
 * peers file, the token, TLS and a client per peer.  The helpers report
 * their own errors (cli_err) and return -1; the command then exits 1.
 */
struct dmar_client;
struct dmar_error;
struct dmar_peer;
struct dmar_peers;

#define CLI_PEERS_DEFAULT "/etc/dmarfs/peers"

struct cli_net {
	const char *peers_path; /* --peers, else $DMAR_PEERS, else CLI_PEERS_DEFAULT */
	const char *token_path; /* --token, else $DMAR_TOKEN_FILE, else no token */
	const char *tls_ca;     /* --tls-ca, or NULL: the system's CAs */
	unsigned streams;       /* -T: parallel streams of a transfer, 0: the client's default */
	long connect_timeout_ms, timeout_ms; /* 0: the client's defaults */
	struct dmar_peers *peers; /* after cli_net_load */
	char *token;              /* the secret, or NULL */
};
/* Read the peers file and the token file. 0 or -1 (reported). */
int cli_net_load(struct cli_net *n);
/* The peer called name; NULL (reported: "no peer named x in FILE"). */
const struct dmar_peer *cli_net_peer(struct cli_net *n, const char *name);
/* A new client for p (free with dmar_client_free) with n's token, CA and
 * streams and these timeouts (0: the client's defaults): the one place a
 * command opens a client for a peer.  0 or a negative errno (in err, not
 * reported). */
int cli_net_open(const struct cli_net *n, const struct dmar_peer *p, long connect_timeout_ms, long timeout_ms,
		 struct dmar_client **out, struct dmar_error *err);
/* cli_net_open with n's timeouts. 0 or -1 (reported). */
int cli_net_client(struct cli_net *n, const struct dmar_peer *p, struct dmar_client **out);

/* --peers FILE, --token FILE, --tls-ca FILE: the options every remote
 * command takes, as getopt_long entries, and their parsing: true if c was
 * one of them (n updated from optarg). */
enum { CLI_OPT_PEERS = 300, CLI_OPT_TOKEN, CLI_OPT_TLS_CA, CLI_OPT_NEXT };
#define CLI_NET_LONG_OPTIONS                                           \
	{ "peers", required_argument, NULL, CLI_OPT_PEERS },           \
	{ "token", required_argument, NULL, CLI_OPT_TOKEN },           \
	{ "tls-ca", required_argument, NULL, CLI_OPT_TLS_CA }
bool cli_net_option(int c, struct cli_net *n);
void cli_net_free(struct cli_net *n); /* wipes the token */
/* Why a client call failed, for a message: "arena full (ENOSPC)" from
 * err's message (or strerror) and the errno's name.  Returns buf. */
const char *cli_net_why(int r, const struct dmar_error *err, char *buf, size_t cap);
/* "950 MB/s", "2.1 GB/s": a decimal rate into buf[32]. */
const char *cli_rate(double bytes_per_s, char *buf);

/* A node's event stream (events.c): GET /v1/events as whole messages.
 * fn gets each one (JSON text, normally) from cli_events_open and
 * cli_events_pump; a negative return ends the pump with it.  stop (a
 * signal's flag, or NULL) ends waits with -EINTR, and so does wake_fd
 * (-1: none) becoming readable, at once: another thread's stop. */
typedef int (*cli_event_fn)(void *ctx, const uint8_t *msg, size_t len);
struct cli_events;
/* Connect and upgrade within connect_ms.  0, or -errno with err (as
 * dmar_ws_client_connect's, with a hint when a token is missing). */
int cli_events_open(struct cli_events **out, const struct cli_net *net, const struct dmar_peer *p, long connect_ms,
		    volatile sig_atomic_t *stop, int wake_fd, cli_event_fn fn, void *ctx, struct dmar_error *err);
/* What arrives within ms (-1: until something does): as
 * dmar_ws_client_pump, a protocol error answered with its close. */
int cli_events_pump(struct cli_events *e, int ms, struct dmar_error *err);
/* Whether the node closed the stream, and its code. */
bool cli_events_closed(const struct cli_events *e, int *code);
/* A clean end: the node's close answered, or ours sent and its answer
 * awaited for up to a second.  NULL-safe. */
void cli_events_end(struct cli_events *e);
void cli_events_free(struct cli_events *e); /* NULL-safe */

struct stat;
struct dmar_xfer_stats;
/* dmar cp's push of one local file (cp.c): fd (local, described by st)
 * as path on c's node (where: "NODE:PATH" for messages), cut as a mount
 * cuts it; only the chunks the node lacks travel.  b (NULL: none): to
 * every node of a broadcast instead.  show: the progress line and
 * summary.  0, or 1 after reporting why. */
struct cp_bcast;
int cp_push_fd(struct dmar_client *c, struct cp_bcast *b, const char *local, int fd, const struct stat *st,
	       const char *path, const char *where, bool noreplace, bool show, struct dmar_xfer_stats *xs);
/* dmar cp -r of a local directory (cptree.c): src's tree made as dst on
 * c's node (node: its name, for messages).  An exit status. */
int cp_push_tree(struct dmar_client *c, const char *node, const char *src, const char *dst, bool noreplace);

int cmd_cp(int argc, char **argv);
int cmd_nodes(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_arenas(int argc, char **argv);
int cmd_fsck(int argc, char **argv);
int cmd_export_dmabuf(int argc, char **argv);
int cmd_check(int argc, char **argv);

#endif /* DMAR_CLI_H */
