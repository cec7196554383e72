/* SPDX-License-Identifier: MIT */
/*
 * journal.h - an append-only log of records inside a named arena, so that
 * whoever keeps its state in the arena can find it again after a crash.
 *
 * The journal knows nothing of what its records mean: each is a sequence
 * of bytes that replay hands back, in order, all of it or none.  Records
 * live in segments allocated from the arena itself (they count in its
 * used space) and chained from a root in the superblock.  Each record
 * carries a CRC-32C and a sequence number, so replay stops at the first
 * record that is not whole (a process killed while writing it) or that
 * is older than expected (space a previous log left behind), and the next
 * append writes over it.  Durability is the page cache's: a record is
 * there once its append returns, whatever becomes of the process; not
 * after the machine loses power (the arena is RAM).
 *
 * The log only grows.  A rewrite starts a new log, which the caller fills
 * with the state it has now (a checkpoint), and commits by switching the
 * superblock's root to it in one step (two root slots, each with its own
 * check: a process killed in the middle leaves the old root good), then
 * frees the old log.  Until the commit, replay sees the old log.
 *
 * Thread-safe: one mutex serializes appends, so replay sees records in
 * the order their appends took the lock.
 */
#ifndef DMAR_JOURNAL_H
#define DMAR_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "arena.h"
#include "codec/error.h"

struct dmar_journal;

/* The largest record (payload bytes). */
#define DMAR_JOURNAL_RECORD_MAX (64u << 20)

/* The journal of named arena a (-EINVAL for an anonymous one).  Of a new
 * arena: empty, ready for appends.  Of an attached one: call
 * dmar_journal_replay before anything else allocates in the arena. */
int dmar_journal_open(struct dmar_journal **out, struct dmar_arena *a, struct dmar_error *err);
void dmar_journal_free(struct dmar_journal *j); /* NULL-safe; the log stays in the arena */

/*
 * Walk the log of an attached arena: fn(ctx, seq, record, len) for each
 * whole record, in order (record points into the arena, valid until the
 * next append or rewrite); a non-zero return stops the walk and is
 * returned.  Claims the log's segments in the arena's allocator.  The
 * walk ends at the first record that is not whole; appends continue
 * there.  0 (or fn's return), or -EUCLEAN when a segment of the chain is
 * damaged (err says where).  Call once, before any append.
 */
int dmar_journal_replay(struct dmar_journal *j, int (*fn)(void *ctx, uint64_t seq, const void *rec, size_t len),
			void *ctx, struct dmar_error *err);

/* Append one record made of the n pieces of iov (1 to
 * DMAR_JOURNAL_RECORD_MAX bytes in all).  0, -EINVAL (size), -ENOSPC (no
 * arena space for a new segment; with must, a segment kept back for this
 * is used first, so that records of operations that free space -- a
 * removal -- find room in a full arena). */
int dmar_journal_append(struct dmar_journal *j, const struct iovec *iov, int n, bool must);

/* Start a new log: appends go to it until commit or abort.  0 or -ENOSPC. */
int dmar_journal_rewrite_begin(struct dmar_journal *j);
/* Make the new log the journal and free the old one. */
void dmar_journal_rewrite_commit(struct dmar_journal *j);
/* Drop the new log; the old one stays, appends go to it again. */
void dmar_journal_rewrite_abort(struct dmar_journal *j);

struct dmar_journal_stats {
	uint64_t bytes;          /* arena bytes the segments hold, the spare included */
	uint64_t segments;
	uint64_t records;        /* appended (or replayed) since the last rewrite */
	uint64_t record_bytes;   /* their bytes, headers included */
	uint64_t rewrites;       /* commits by this process */
	uint64_t seq;            /* the next record's sequence number */
};
void dmar_journal_stats(struct dmar_journal *j, struct dmar_journal_stats *st);

/* For consistency checks: fn(ctx, off, len) for each segment the journal
 * holds, the spare included. */
void dmar_journal_each_segment(struct dmar_journal *j, void (*fn)(void *ctx, uint64_t off, uint64_t len),
			       void *ctx);

#endif /* DMAR_JOURNAL_H */
