/* SPDX-License-Identifier: MIT */
/*
 * fuzz_peers - dmar_peers_parse on arbitrary bytes, and a round trip.
 *
 * A list that parses is written back as a peers file (NAME HOST:PORT
 * [https], IPv6 hosts in brackets), which must parse to the same list;
 * every peer must be found by its name and give a URL that fits
 * DMAR_PEER_URL_MAX.  A refusal must be -EINVAL with a "peers:LINE:"
 * message.  Anything else aborts.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/peers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "fuzz_peers: %s %s\n", what, msg ? msg : "");
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dmar_peers *p = NULL, *q = NULL;
	struct dmar_error err = { 0 };
	int r = dmar_peers_parse(data, size, NULL, &p, &err);
	if (r == -ENOMEM)
		return 0;
	if (r < 0) {
		if (r != -EINVAL || err.code != r || strncmp(err.msg, "peers:", 6) != 0)
			die("refused without -EINVAL and a peers:LINE: message:", err.msg);
		return 0;
	}
	size_t n = dmar_peers_count(p);
	if (n > DMAR_PEERS_MAX)
		die("too many peers", NULL);
	char *text = malloc(n * (DMAR_PEER_URL_MAX + DMAR_PEER_NAME_MAX + 8) + 1);
	if (!text)
		die("out of memory", NULL);
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		const struct dmar_peer *e = dmar_peers_get(p, i);
		char url[DMAR_PEER_URL_MAX];
		if (!e || dmar_peers_find(p, e->name) != e)
			die("a peer is not found by its name", NULL);
		if (dmar_peers_url(e, url, sizeof(url)) < 0)
			die("the URL does not fit DMAR_PEER_URL_MAX", NULL);
		int v6 = strchr(e->host, ':') != NULL;
		len += (size_t)sprintf(text + len, "%s\t%s%s%s:%u%s\n", e->name, v6 ? "[" : "", e->host,
				       v6 ? "]" : "", e->port, e->tls ? " https" : "");
	}
	if (dmar_peers_get(p, n))
		die("a peer past the end", NULL);
	r = dmar_peers_parse(text, len, NULL, &q, &err);
	if (r == -ENOMEM)
		goto out;
	if (r < 0)
		die("the list written back does not parse:", err.msg);
	if (dmar_peers_count(q) != n)
		die("the list written back has another length", NULL);
	for (size_t i = 0; i < n; i++) {
		const struct dmar_peer *a = dmar_peers_get(p, i), *b = dmar_peers_get(q, i);
		if (strcmp(a->name, b->name) || strcmp(a->host, b->host) || a->port != b->port || a->tls != b->tls)
			die("the list written back parses to another list", NULL);
	}
out:
	free(text);
	dmar_peers_free(p);
	dmar_peers_free(q);
	return 0;
}
