/* SPDX-License-Identifier: MIT */
/*
 * peers.h - the nodes a node talks to, and the shared secret it talks with.
 *
 * A peers file is written like an MPI hostfile: one peer a line,
 *
 *     # name   address            [https]
 *     a        10.0.0.1:7420
 *     b        node-b.lan:7420    https
 *     c        [fd00::3]:7420
 *
 * NAME is 1..63 of [A-Za-z0-9._-], unique in the file; it is how a
 * transfer names its destination ("to": "b").  The address is HOST:PORT
 * with HOST an IPv4 address (four decimal bytes), a hostname (dot-separated
 * labels of [A-Za-z0-9-], 1..63 each, not starting or ending with '-', 253
 * in all) or an IPv6 address in brackets (as inet_pton(3) reads it, no zone
 * id); PORT is 1..65535 in decimal.  A third field "https" makes the
 * client use TLS.  Fields are separated by spaces or tabs; '#' starts a
 * comment that runs to the end of the line; blank lines, leading and
 * trailing whitespace and CRLF line ends are fine.
 *
 * A line may also name many peers at once, each at the host of its own
 * name, in a Slurm node list (sinfo's and SLURM_JOB_NODELIST's form):
 *
 *     node[01-16]           *:7420
 *     gpu[1-4,8],login1     *:7420   https
 *     $SLURM_JOB_NODELIST   *:7420
 *
 * The NAME field is a list (dmar_hostlist_expand) or, as
 * $SLURM_JOB_NODELIST, the list in that environment variable (a job's
 * nodes); the address is then "*:PORT", "*" standing for each name.
 *
 * Limits: at most DMAR_PEERS_MAX peers, lines of at most
 * DMAR_PEERS_LINE_MAX bytes (without the line end), no NUL byte; a file
 * of at most DMAR_PEERS_FILE_MAX bytes.
 *
 * The parser takes untrusted bytes: anything else is refused with -EINVAL
 * and a message naming the file and line ("peers.txt:3: duplicate name b
 * (first on line 1)").  A parsed list is immutable, so any number of
 * threads may read it at once.
 */
#ifndef DMAR_PEERS_H
#define DMAR_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/error.h"

#define DMAR_PEERS_MAX 1024
#define DMAR_PEERS_LINE_MAX 1024
#define DMAR_PEERS_FILE_MAX (4u << 20)
#define DMAR_PEER_NAME_MAX 63
#define DMAR_PEER_HOST_MAX 253

struct dmar_peer {
	const char *name; /* NUL-terminated, owned by the list */
	const char *host; /* as written, but an IPv6 address without its brackets */
	uint16_t port;    /* 1..65535 */
	bool tls;         /* "https" */
};

struct dmar_peers;

/*
 * Expand a Slurm host list: items separated by ',', each text with
 * bracket groups "[1-4,7]" of numbers and ranges, expanded in order and,
 * for several groups in one item, in every combination ("r[1-2]n[1-2]":
 * r1n1 r1n2 r2n1 r2n2); a range keeps the width of its lower bound
 * ("[08-10]": 08 09 10).  fn gets each name in order (a non-zero return
 * stops the expansion and is returned).  Untrusted input: -EINVAL with
 * err ("node[3-1]: descending range") for an unbalanced or nested
 * bracket, an empty item or range, a descending range, a number of more
 * than 9 digits, a name of more than DMAR_PEER_NAME_MAX bytes, or more
 * than max names in all.
 */
int dmar_hostlist_expand(const char *list, size_t max, int (*fn)(void *ctx, const char *name), void *ctx,
			 struct dmar_error *err);

/*
 * A broadcast's hops: peer names in the order the data goes through them
 * (X-Dmar-Relay, dmar cp's "b,c,d:PATH").  Written as a host list
 * (dmar_hostlist_expand: "b,c,d", "node[02-08]"); each name as a peers
 * file's NAME, none twice, at most DMAR_HOPS_MAX.  Untrusted input:
 * -EINVAL with err naming what is wrong.
 */
#define DMAR_HOPS_MAX 256
/* The longest list dmar_hops_format writes: every name at its longest. */
#define DMAR_HOPS_TEXT_MAX (DMAR_HOPS_MAX * (DMAR_PEER_NAME_MAX + 1))
struct dmar_hops {
	size_t n;
	char name[DMAR_HOPS_MAX][DMAR_PEER_NAME_MAX + 1];
};
int dmar_hops_parse(const char *list, struct dmar_hops *out, struct dmar_error *err);
/* hops from..n-1 as "c,d,e" in buf (cap >= DMAR_HOPS_TEXT_MAX always
 * suffices); "" when from >= n.  Returns the length. */
size_t dmar_hops_format(const struct dmar_hops *h, size_t from, char *buf, size_t cap);
/* The index of name in h, or -1. */
long dmar_hops_find(const struct dmar_hops *h, const char *name);

/*
 * Parse len bytes of a peers file into a new list (*out; free with
 * dmar_peers_free).  name is the file's name in messages (NULL: "peers").
 * Returns 0, -EINVAL (err: "NAME:LINE: what"), or -ENOMEM.  *out is
 * written only on success.  An input without peers gives an empty list.
 */
int dmar_peers_parse(const void *buf, size_t len, const char *name, struct dmar_peers **out,
		     struct dmar_error *err);
/* Read and parse the file at path.  Also -ENOENT, -EACCES... (err: "path:
 * No such file or directory"), -EINVAL for what is not a regular file, and
 * -EFBIG for a file over DMAR_PEERS_FILE_MAX bytes. */
int dmar_peers_load(const char *path, struct dmar_peers **out, struct dmar_error *err);
void dmar_peers_free(struct dmar_peers *p); /* NULL-safe */

size_t dmar_peers_count(const struct dmar_peers *p);
/* The i-th peer in file order, or NULL for i >= count.  Valid until the
 * list is freed. */
const struct dmar_peer *dmar_peers_get(const struct dmar_peers *p, size_t i);
/* The peer called name (exact, case-sensitive), or NULL. */
const struct dmar_peer *dmar_peers_find(const struct dmar_peers *p, const char *name);

/*
 * The peer's base URL for dmar_client_opts.url: "http://10.0.0.2:7420",
 * "https://[::1]:7420" (no trailing '/').  Writes at most cap bytes with
 * the NUL; returns the length without it, or -ENOBUFS (buf then holds ""
 * if cap > 0).  DMAR_PEER_URL_MAX bytes always suffice.
 */
#define DMAR_PEER_URL_MAX (sizeof("https://[]:65535") + DMAR_PEER_HOST_MAX)
int dmar_peers_url(const struct dmar_peer *peer, char *buf, size_t cap);
/* "10.0.0.2:7420", "[::1]:7420": the URL without its scheme, for people
 * (and libcurl's connect-to).  Returns buf; cut short if cap is. */
const char *dmar_peers_address(const struct dmar_peer *peer, char *buf, size_t cap);

/*
 * Read the shared secret (the bearer token) from the file at path, refusing
 * it, as ssh refuses a private key, when group or others have any access
 * to the file (-EPERM: "token: permissions 0644 are too open..."); it must
 * be a regular file of at most DMAR_TOKEN_FILE_MAX bytes.  The secret is the first line with
 * trailing whitespace (spaces, tabs, CR) removed: 16..4096 printable ASCII
 * characters without spaces (-EINVAL otherwise; the message never quotes
 * the file).  *secret is malloc'd; the caller should explicit_bzero it
 * before free.  Returns 0, -EPERM, -EINVAL, -EFBIG, -ENOMEM, or the errno
 * of open/read (-ENOENT...).  *secret is written only on success.
 */
#define DMAR_TOKEN_MIN 16
#define DMAR_TOKEN_MAX 4096
#define DMAR_TOKEN_FILE_MAX (64u << 10)
int dmar_token_load(const char *path, char **secret, struct dmar_error *err);

#endif /* DMAR_PEERS_H */
