/* SPDX-License-Identifier: MIT */
/*
 * The peers file and the token file of peers.h.
 *
 * The parser works on one line at a time, in place on a bounded copy of
 * the line, so no input can make it allocate more than the peers it
 * keeps (each at most 63 + 253 bytes of strings).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peers.h"

struct dmar_peers {
	size_t n;
	struct dmar_peer *p; /* n peers; each name and host in one malloc'd block */
	unsigned *line;      /* the line each peer came from, for messages */
};

void dmar_peers_free(struct dmar_peers *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		free((char *)p->p[i].name); /* host lives in the same block */
	free(p->p);
	free(p->line);
	free(p);
}

size_t dmar_peers_count(const struct dmar_peers *p)
{
	return p ? p->n : 0;
}

const struct dmar_peer *dmar_peers_get(const struct dmar_peers *p, size_t i)
{
	return p && i < p->n ? &p->p[i] : NULL;
}

const struct dmar_peer *dmar_peers_find(const struct dmar_peers *p, const char *name)
{
	if (!p || !name)
		return NULL;
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->p[i].name, name) == 0)
			return &p->p[i];
	return NULL;
}

int dmar_peers_url(const struct dmar_peer *peer, char *buf, size_t cap)
{
	bool v6 = strchr(peer->host, ':') != NULL;
	int n = snprintf(buf, cap, "%s://%s%s%s:%u", peer->tls ? "https" : "http", v6 ? "[" : "", peer->host,
			 v6 ? "]" : "", peer->port);
	if (n < 0 || (size_t)n >= cap) {
		if (cap)
			buf[0] = 0;
		return -ENOBUFS;
	}
	return n;
}

const char *dmar_peers_address(const struct dmar_peer *peer, char *buf, size_t cap)
{
	bool v6 = strchr(peer->host, ':') != NULL;
	snprintf(buf, cap, "%s%s%s:%u", v6 ? "[" : "", peer->host, v6 ? "]" : "", (unsigned)peer->port);
	return buf;
}

/* ---- parsing --------------------------------------------------------- */

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static const char *check_name(const char *s)
{
	size_t n = strlen(s);
	if (n > DMAR_PEER_NAME_MAX)
		return "longer than 63 characters";
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			return "has characters outside [A-Za-z0-9._-]";
	return NULL;
}

/* RFC 1123 host names: labels of letters, digits and '-', 1..63 bytes,
 * neither starting nor ending with '-'. */
static const char *check_hostname(const char *s)
{
	size_t n = strlen(s);
	if (n > DMAR_PEER_HOST_MAX)
		return "host name longer than 253 characters";
	const char *label = s;
	for (size_t i = 0; i <= n; i++) {
		if (s[i] != '.' && s[i] != 0) {
			if (!is_alnum(s[i]) && s[i] != '-')
				return "host name has characters outside [A-Za-z0-9.-]";
			continue;
		}
		size_t l = (size_t)(s + i - label);
		if (l == 0)
			return "host name has an empty label";
		if (l > 63)
			return "host name has a label longer than 63 characters";
		if (label[0] == '-' || s[i - 1] == '-')
			return "host name label starts or ends with '-'";
		label = s + i + 1;
	}
	return NULL;
}

/* A host outside brackets: all digits and dots is an IPv4 address (as
 * getaddrinfo would read it), anything else a host name. */
static const char *check_host(const char *a)
{
	bool numeric = true;
	for (const char *c = a; *c; c++)
		if (!(*c >= '0' && *c <= '9') && *c != '.')
			numeric = false;
	if (numeric) {
		struct in_addr a4;
		return inet_pton(AF_INET, a, &a4) == 1 ? NULL : "not an IPv4 address";
	}
	return check_hostname(a);
}

/*
 * Split "HOST:PORT" or "[V6]:PORT" (a field, NUL-terminated, writable) into
 * *host (pointing into it) and *port.  NULL or what is wrong.
 */
static const char *parse_address(char *a, char **host, uint16_t *port)
{
	char *colon;
	if (strstr(a, "://"))
		return "a URL: write HOST:PORT, and https as a third field";
	if (a[0] == '[') {
		char *close = strchr(a, ']');
		if (!close)
			return "'[' without ']'";
		if (close[1] != ':')
			return "no ':PORT' after ']'";
		*close = 0;
		colon = close + 1;
		*host = a + 1;
		struct in6_addr a6;
		if (inet_pton(AF_INET6, *host, &a6) != 1)
			return "not an IPv6 address in the brackets";
	} else {
		colon = strrchr(a, ':');
		if (!colon)
			return "no ':PORT' (HOST:PORT)";
		*colon = 0;
		*host = a;
		if (strchr(a, ':'))
			return "an IPv6 address needs brackets ([::1]:7420)";
		if (!**host)
			return "empty host";
		const char *bad = check_host(a);
		if (bad)
			return bad;
	}
	const char *p = colon + 1;
	size_t n = strlen(p);
	if (n == 0)
		return "empty port";
	if (n > 5)
		return "port out of range (1..65535)";
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return "port is not a decimal number";
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (v < 1 || v > 65535)
		return "port out of range (1..65535)";
	*port = (uint16_t)v;
	return NULL;
}

/* ---- Slurm host lists --------------------------------------------------- */

struct hl {
	int (*fn)(void *ctx, const char *name);
	void *ctx;
	size_t max, n;
	const char *list;
	struct dmar_error *err;
};

/* Expand item (len bytes, brackets balanced and not nested) from its
 * group at pos on, the name built so far in out[0..olen). */
static int hl_item(struct hl *h, const char *item, size_t len, size_t pos, char *out, size_t olen)
{
	const char *open = memchr(item + pos, '[', len - pos);
	size_t text = open ? (size_t)(open - (item + pos)) : len - pos;
	if (olen + text > DMAR_PEER_NAME_MAX)
		return dmar_error_set(h->err, -EINVAL, "%.80s: a name longer than %d characters", h->list,
				      DMAR_PEER_NAME_MAX);
	memcpy(out + olen, item + pos, text);
	olen += text;
	if (!open) {
		out[olen] = 0;
		if (++h->n > h->max)
			return dmar_error_set(h->err, -EINVAL, "%.80s: more than %zu names", h->list, h->max);
		return h->fn(h->ctx, out);
	}
	const char *close = memchr(open, ']', (size_t)(item + len - open));
	const char *g = open + 1, *end = close;
	if (g == end)
		return dmar_error_set(h->err, -EINVAL, "%.80s: an empty []", h->list);
	/* each element: N or A-B */
	for (const char *e = g; e < end;) {
		const char *comma = memchr(e, ',', (size_t)(end - e));
		const char *ee = comma ? comma : end;
		const char *dash = memchr(e, '-', (size_t)(ee - e));
		const char *a = e, *ae = dash ? dash : ee, *b = dash ? dash + 1 : e, *be = ee;
		if (ae == a || be == b)
			return dmar_error_set(h->err, -EINVAL, "%.80s: an empty range", h->list);
		if (ae - a > 9 || be - b > 9)
			return dmar_error_set(h->err, -EINVAL, "%.80s: a number of more than 9 digits", h->list);
		unsigned long lo = 0, hi = 0;
		for (const char *c = a; c < ae; c++) {
			if (*c < '0' || *c > '9')
				return dmar_error_set(h->err, -EINVAL, "%.80s: '%c' in a range (digits and '-' only)",
						      h->list, *c);
			lo = lo * 10 + (unsigned long)(*c - '0');
		}
		for (const char *c = b; c < be; c++) {
			if (*c < '0' || *c > '9')
				return dmar_error_set(h->err, -EINVAL, "%.80s: '%c' in a range (digits and '-' only)",
						      h->list, *c);
			hi = hi * 10 + (unsigned long)(*c - '0');
		}
		if (hi < lo)
			return dmar_error_set(h->err, -EINVAL, "%.80s: descending range %lu-%lu", h->list, lo, hi);
		if (hi - lo >= h->max)
			return dmar_error_set(h->err, -EINVAL, "%.80s: more than %zu names", h->list, h->max);
		int width = (int)(ae - a);
		for (unsigned long v = lo; v <= hi; v++) {
			char num[16];
			int k = snprintf(num, sizeof(num), "%0*lu", width, v);
			if (olen + (size_t)k > DMAR_PEER_NAME_MAX)
				return dmar_error_set(h->err, -EINVAL, "%.80s: a name longer than %d characters",
						      h->list, DMAR_PEER_NAME_MAX);
			memcpy(out + olen, num, (size_t)k);
			int r = hl_item(h, item, len, (size_t)(close + 1 - item), out, olen + (size_t)k);
			if (r)
				return r;
		}
		e = comma ? comma + 1 : end;
		if (comma && e == end)
			return dmar_error_set(h->err, -EINVAL, "%.80s: an empty range", h->list);
	}
	return 0;
}

int dmar_hostlist_expand(const char *list, size_t max, int (*fn)(void *ctx, const char *name), void *ctx,
			 struct dmar_error *err)
{
	struct hl h = { .fn = fn, .ctx = ctx, .max = max, .list = list, .err = err };
	size_t n = strlen(list);
	if (!n)
		return dmar_error_set(err, -EINVAL, "an empty host list");
	for (size_t pos = 0; pos <= n;) {
		/* the item runs to the next ',' outside brackets */
		size_t end = pos;
		int depth = 0;
		for (; end < n && (list[end] != ',' || depth); end++) {
			if (list[end] == '[' && depth++)
				return dmar_error_set(err, -EINVAL, "%.80s: nested '['", list);
			if (list[end] == ']' && depth-- == 0)
				return dmar_error_set(err, -EINVAL, "%.80s: ']' without '['", list);
		}
		if (depth)
			return dmar_error_set(err, -EINVAL, "%.80s: '[' without ']'", list);
		if (end == pos)
			return dmar_error_set(err, -EINVAL, "%.80s: an empty item", list);
		char name[DMAR_PEER_NAME_MAX + 1];
		int r = hl_item(&h, list + pos, end - pos, 0, name, 0);
		if (r)
			return r;
		pos = end + 1;
	}
	return 0;
}

static int hops_add(void *ctx, const char *name)
{
	struct dmar_hops *h = ctx; /* the expansion stops at DMAR_HOPS_MAX names */
	strcpy(h->name[h->n++], name);
	return 0;
}

int dmar_hops_parse(const char *list, struct dmar_hops *out, struct dmar_error *err)
{
	out->n = 0;
	if (strlen(list) > DMAR_HOPS_TEXT_MAX)
		return dmar_error_set(err, -EINVAL, "a list of nodes longer than %d bytes", DMAR_HOPS_TEXT_MAX);
	int r = dmar_hostlist_expand(list, DMAR_HOPS_MAX, hops_add, out, err);
	for (size_t i = 0; r == 0 && i < out->n; i++) {
		const char *why = check_name(out->name[i]);
		if (why)
			r = dmar_error_set(err, -EINVAL, "node name %.80s %s", out->name[i], why);
		for (size_t j = 0; r == 0 && j < i; j++)
			if (!strcmp(out->name[i], out->name[j]))
				r = dmar_error_set(err, -EINVAL, "node %s named twice", out->name[i]);
	}
	if (r < 0)
		out->n = 0;
	return r;
}

size_t dmar_hops_format(const struct dmar_hops *h, size_t from, char *buf, size_t cap)
{
	size_t len = 0;
	if (cap)
		buf[0] = 0;
	for (size_t i = from; i < h->n; i++) {
		int w = snprintf(buf + len, cap > len ? cap - len : 0, "%s%s", i > from ? "," : "", h->name[i]);
		len += (size_t)w;
	}
	return len;
}

long dmar_hops_find(const struct dmar_hops *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++)
		if (!strcmp(h->name[i], name))
			return (long)i;
	return -1;
}

struct parse_state {
	struct dmar_peers *ps;
	size_t cap;
	const char *file;
	struct dmar_error *err;
};

static int line_error(struct parse_state *st, unsigned line, const char *what, const char *arg)
{
	return dmar_error_set(st->err, -EINVAL, "%s:%u: %s%s%.80s", st->file, line, what, arg ? " " : "",
			      arg ? arg : "");
}

/* Peer name at host:port, from line. */
static int add_peer(struct parse_state *st, unsigned line, const char *name, const char *host, uint16_t port, bool tls)
{
	struct dmar_peers *ps = st->ps;
	for (size_t i = 0; i < ps->n; i++)
		if (strcmp(ps->p[i].name, name) == 0)
			return dmar_error_set(st->err, -EINVAL, "%s:%u: duplicate name %s (first on line %u)", st->file,
					      line, name, ps->line[i]);
	if (ps->n == DMAR_PEERS_MAX)
		return dmar_error_set(st->err, -EINVAL, "%s:%u: more than %d peers", st->file, line, DMAR_PEERS_MAX);
	if (ps->n == st->cap) {
		size_t cap = st->cap ? 2 * st->cap : 16;
		struct dmar_peer *np = realloc(ps->p, cap * sizeof(*np));
		if (!np)
			return -ENOMEM;
		ps->p = np;
		unsigned *nl = realloc(ps->line, cap * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		ps->line = nl;
		st->cap = cap;
	}
	size_t ln = strlen(name), lh = strlen(host);
	char *mem = malloc(ln + lh + 2);
	if (!mem)
		return -ENOMEM;
	memcpy(mem, name, ln + 1);
	memcpy(mem + ln + 1, host, lh + 1);
	ps->p[ps->n] = (struct dmar_peer){ .name = mem, .host = mem + ln + 1, .port = port, .tls = tls };
	ps->line[ps->n] = line;
	ps->n++;
	return 0;
}

struct hl_add {
	struct parse_state *st;
	unsigned line;
	uint16_t port;
	bool tls;
};

/* A name of a node list: a peer of that name at that host, if both are
 * names a peer and a host can be. */
static int hl_add_one(void *ctx, const char *name)
{
	struct hl_add *h = ctx;
	const char *bad = check_name(name);
	if (!bad)
		bad = check_host(name);
	if (bad) {
		char what[128];
		snprintf(what, sizeof(what), "bad name in the node list (%s):", bad);
		return line_error(h->st, h->line, what, name);
	}
	return add_peer(h->st, h->line, name, name, h->port, h->tls);
}

/* One line (NUL-terminated copy, writable, no line end). */
static int parse_line(struct parse_state *st, char *s, unsigned line)
{
	char *hash = strchr(s, '#');
	if (hash)
		*hash = 0;
	char *f[4];
	int nf = 0;
	while (*s) {
		while (is_space(*s))
			s++;
		if (!*s)
			break;
		if (nf == 3)
			return line_error(st, line, "too many fields (NAME HOST:PORT [https])", NULL);
		f[nf++] = s;
		while (*s && !is_space(*s))
			s++;
		if (*s)
			*s++ = 0;
	}
	if (nf == 0)
		return 0;
	if (nf == 1)
		return line_error(st, line, "no address after the name (NAME HOST:PORT [https])", NULL);
	/* Anything that is not a field separator or a printable byte. */
	for (int i = 0; i < nf; i++)
		for (const char *c = f[i]; *c; c++)
			if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e)
				return line_error(st, line, "control or non-ASCII byte", NULL);
	bool tls = false;
	if (nf == 3) {
		if (strcmp(f[2], "https") != 0)
			return line_error(st, line, "unknown option (the third field can only be https):", f[2]);
		tls = true;
	}
	/* A Slurm node list: each name a peer at the host of that name. */
	if (f[0][0] == '$' || strpbrk(f[0], "[],")) {
		const char *list = f[0];
		if (f[0][0] == '$') {
			if (strcmp(f[0], "$SLURM_JOB_NODELIST") != 0)
				return line_error(st, line, "the only variable a name can be is $SLURM_JOB_NODELIST, not",
						  f[0]);
			if (!(list = getenv("SLURM_JOB_NODELIST")) || !*list)
				return line_error(st, line, "$SLURM_JOB_NODELIST is not set (not in a Slurm job?)", NULL);
		}
		if (strncmp(f[1], "*:", 2) != 0)
			return line_error(st, line, "a node list's address is *:PORT (each name is its host), not", f[1]);
		char *host;
		uint16_t port;
		char addr[DMAR_PEERS_LINE_MAX + 3];
		snprintf(addr, sizeof(addr), "x%s", f[1] + 1); /* a placeholder host for the port's check */
		const char *bad = parse_address(addr, &host, &port);
		if (bad) {
			char what[96];
			snprintf(what, sizeof(what), "bad address (%s):", bad);
			return line_error(st, line, what, f[1]);
		}
		struct hl_add ha = { .st = st, .line = line, .port = port, .tls = tls };
		struct dmar_error herr = { 0 };
		int r = dmar_hostlist_expand(list, DMAR_PEERS_MAX, hl_add_one, &ha, &herr);
		if (r == -EINVAL && herr.code)
			return dmar_error_set(st->err, -EINVAL, "%s:%u: %s", st->file, line, herr.msg);
		return r;
	}
	const char *bad = check_name(f[0]);
	if (bad) {
		char what[96];
		snprintf(what, sizeof(what), "bad name (%s):", bad);
		return line_error(st, line, what, f[0]);
	}
	char *host;
	uint16_t port;
	char addr[DMAR_PEERS_LINE_MAX + 1];
	snprintf(addr, sizeof(addr), "%s", f[1]);
	bad = parse_address(f[1], &host, &port);
	if (bad) {
		char what[96];
		snprintf(what, sizeof(what), "bad address (%s):", bad);
		return line_error(st, line, what, addr);
	}
	return add_peer(st, line, f[0], host, port, tls);
}

int dmar_peers_parse(const void *buf, size_t len, const char *name, struct dmar_peers **out,
		     struct dmar_error *err)
{
	const char *b = buf;
	struct parse_state st = { .file = name ? name : "peers", .err = err };
	if (!(st.ps = calloc(1, sizeof(*st.ps))))
		return -ENOMEM;
	char copy[DMAR_PEERS_LINE_MAX + 1];
	size_t pos = 0;
	unsigned line = 0;
	int r = 0;
	while (pos < len && r == 0) {
		line++;
		const char *nl = memchr(b + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - b) : len;
		size_t n = end - pos;
		if (n && b[pos + n - 1] == '\r')
			n--;
		if (n > DMAR_PEERS_LINE_MAX) {
			r = dmar_error_set(err, -EINVAL, "%s:%u: line longer than %d bytes", st.file, line,
					   DMAR_PEERS_LINE_MAX);
			break;
		}
		if (memchr(b + pos, 0, n)) {
			r = dmar_error_set(err, -EINVAL, "%s:%u: NUL byte", st.file, line);
			break;
		}
		memcpy(copy, b + pos, n);
		copy[n] = 0;
		r = parse_line(&st, copy, line);
		pos = end + 1;
	}
	if (r < 0) {
		dmar_peers_free(st.ps);
		return r;
	}
	*out = st.ps;
	return 0;
}

/* ---- files ----------------------------------------------------------- */

/*
 * Read the regular file at path (at most max bytes) into a malloc'd buffer
 * with a NUL after it.  With private, refuse (-EPERM) a file that group or
 * others may access, checked on the open descriptor, so that the file
 * checked is the file read.  Freed buffers are wiped: one may hold a secret.
 */
static int read_small_file(const char *path, size_t max, const char *what, bool private, char **buf,
			   size_t *len, struct dmar_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return dmar_error_errno(err, -errno, path);
	struct stat st;
	int r = 0;
	char *b = NULL;
	size_t n = 0;
	if (fstat(fd, &st) < 0) {
		r = dmar_error_errno(err, -errno, path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = dmar_error_set(err, -EINVAL, "%s: the %s is not a regular file", path, what);
		goto out;
	}
	if (private && (st.st_mode & 077)) {
		r = dmar_error_set(err, -EPERM,
				   "%s: permissions %04o are too open: a %s must not be accessible by group or "
				   "others (chmod 600 %s)",
				   path, (unsigned)(st.st_mode & 07777), what, path);
		goto out;
	}
	if ((uint64_t)st.st_size > max) {
		r = dmar_error_set(err, -EFBIG, "%s: the %s is larger than %zu bytes", path, what, max);
		goto out;
	}
	/* What fstat says is what is read: a file growing meanwhile is cut
	 * there, never read past max. */
	size_t cap = (size_t)st.st_size;
	if (!(b = malloc(cap + 1))) {
		r = -ENOMEM;
		goto out;
	}
	while (n < cap) {
		ssize_t got = read(fd, b + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			r = dmar_error_errno(err, -errno, path);
			goto out;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	b = NULL;
out:
	if (b) {
		explicit_bzero(b, n);
		free(b);
	}
	close(fd);
	return r;
}

int dmar_peers_load(const char *path, struct dmar_peers **out, struct dmar_error *err)
{
	char *b;
	size_t len;
	int r = read_small_file(path, DMAR_PEERS_FILE_MAX, "peers file", false, &b, &len, err);
	if (r < 0)
		return r;
	r = dmar_peers_parse(b, len, path, out, err);
	free(b);
	return r;
}

int dmar_token_load(const char *path, char **secret, struct dmar_error *err)
{
	char *b;
	size_t len;
	int r = read_small_file(path, DMAR_TOKEN_FILE_MAX, "token file", true, &b, &len, err);
	if (r < 0)
		return r;
	size_t n = 0;
	while (n < len && b[n] != '\n')
		n++;
	while (n && (b[n - 1] == ' ' || b[n - 1] == '\t' || b[n - 1] == '\r'))
		n--;
	const char *bad = NULL;
	if (n < DMAR_TOKEN_MIN)
		bad = n ? "shorter than 16 characters" : "empty";
	else if (n > DMAR_TOKEN_MAX)
		bad = "longer than 4096 characters";
	for (size_t i = 0; !bad && i < n; i++)
		if ((unsigned char)b[i] < 0x21 || (unsigned char)b[i] > 0x7e)
			bad = "has a space, a control or a non-ASCII character";
	if (bad) {
		explicit_bzero(b, len);
		free(b);
		return dmar_error_set(err, -EINVAL, "%s: the token (the first line) is %s", path, bad);
	}
	char *s = malloc(n + 1);
	if (!s) {
		explicit_bzero(b, len);
		free(b);
		return -ENOMEM;
	}
	memcpy(s, b, n);
	s[n] = 0;
	explicit_bzero(b, len);
	free(b);
	*secret = s;
	return 0;
}
