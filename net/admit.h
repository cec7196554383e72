/* SPDX-License-Identifier: MIT */
/*
 * admit.h - which connections a node keeps when more arrive than it
 * should serve: the defence against clients that open connections and
 * never finish a request (slowloris, half-open floods).
 *
 * Opening a connection needs no token, so a connection is *pending* from
 * its accept until its first request head is complete and authenticated;
 * then it is *trusted* for the rest of its life (a token holder's
 * connections, idle between requests, are not what a flood is made of).
 * A pending connection is closed when
 *  - it has not become trusted head_ms after its accept (a head dripped
 *    one header at a time gets no longer than a silent one);
 *  - a new connection arrives and pending_max are pending: the oldest of
 *    the address that holds the most pending goes (a flood holds many
 *    from each of its addresses, a peer one or two: the peer keeps its
 *    connection even when its head is read late on a busy machine);
 *  - a new connection arrives from an address that has pending_per_addr
 *    pending: that address's oldest goes, so one address cannot push the
 *    others' out.
 * Closing is shutdown(2) of the socket: the server's own thread for the
 * connection sees the end and cleans up as for any client that left.
 * What was closed, and why, is logged at most every LOG_EVERY seconds as
 * one line per reason with counts.
 *
 * Thread-safe.  The server calls open on accept, head when a request
 * head has been checked, close when the connection is gone (before its
 * socket is closed, so the descriptor is never shut down after reuse).
 */
#ifndef DMAR_ADMIT_H
#define DMAR_ADMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define DMAR_ADMIT_PENDING_MAX 128
#define DMAR_ADMIT_PENDING_PER_ADDR 16
#define DMAR_ADMIT_HEAD_MS 5000

struct dmar_admit_opts {
	unsigned pending_max;      /* 0: DMAR_ADMIT_PENDING_MAX */
	unsigned pending_per_addr; /* 0: DMAR_ADMIT_PENDING_PER_ADDR */
	unsigned head_ms;          /* 0: DMAR_ADMIT_HEAD_MS */
	/* Where the log lines go (one line, no newline); NULL: stderr with
	 * a "dmarfs: " prefix. */
	void (*log)(void *ctx, const char *line);
	void *log_ctx;
};

struct dmar_admit_stats {
	uint64_t pending;   /* now */
	uint64_t trusted;   /* now */
	uint64_t expired;   /* closed since the start: no complete head in time */
	uint64_t evicted;   /* closed since the start: room for a newer one */
};

struct dmar_admit;
struct dmar_admit_conn;

/* 0, -ENOMEM, -EAGAIN (no thread). */
int dmar_admit_new(struct dmar_admit **out, const struct dmar_admit_opts *o);
/* Stops the sweeping thread; every connection must have been closed. */
void dmar_admit_free(struct dmar_admit *a); /* NULL-safe */

/* A connection accepted on fd from addr (may be NULL): pending.  NULL
 * when out of memory (the caller may serve it unguarded).  May close
 * older pending connections to make room. */
struct dmar_admit_conn *dmar_admit_open(struct dmar_admit *a, int fd, const struct sockaddr *addr);
/* Its request head is complete: trusted (authenticated) makes it trusted
 * for good; an untrusted one stays pending, under its first deadline. */
void dmar_admit_head(struct dmar_admit *a, struct dmar_admit_conn *c, bool trusted);
/* The connection is gone; c is freed.  NULL-safe. */
void dmar_admit_close(struct dmar_admit *a, struct dmar_admit_conn *c);

void dmar_admit_stats(struct dmar_admit *a, struct dmar_admit_stats *st);
/* Run the deadline sweep now (the thread runs it every head_ms / 8). */
void dmar_admit_sweep(struct dmar_admit *a);

#endif /* DMAR_ADMIT_H */
