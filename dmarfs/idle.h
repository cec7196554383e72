/* SPDX-License-Identifier: MIT */
/*
 * idle.h - the mount's housekeeping thread: it encodes files left written
 * but not closed, runs the space owners' ticks (ns_tick), and checkpoints
 * the journal when it asks for one.
 *
 * A file is encoded at its last close (ns_encode).  One held open -- a
 * database, a log, a download in progress -- is encoded once it has had no
 * write for IDLE_SECONDS: each write notes the time and puts the file on
 * the idle list (once, with a lookup reference), and once a second the
 * thread takes the files that are due off the list and encodes and syncs
 * them.  A write during that encode makes its plan stale and queues the
 * file again.
 */
#ifndef DMARFS_IDLE_H
#define DMARFS_IDLE_H

#include <stddef.h>
#include <stdint.h>

struct dmarfs;
struct inode;

/* Seconds without writes after which a file still open is encoded. */
#define IDLE_SECONDS 5

/* The clock of the idle list: monotonic seconds. */
uint64_t idle_now(void);
/* i was written at now_s (idle_now()): queue it, unless it is queued or
 * the thread was stopped.  Takes fs->ns only to queue. */
void idle_note_write(struct dmarfs *fs, struct inode *i, uint64_t now_s);
/* One pass at now_s: encode and sync every queued file that has had no
 * write for IDLE_SECONDS and is still linked; the others stay queued.
 * Returns how many were taken off the list.  Takes fs->ns itself. */
size_t idle_encode_due(struct dmarfs *fs, uint64_t now_s);

/* Start the thread (after the daemon forked), queueing the files an
 * attached arena holds unencoded; stop it and empty the list (before the
 * mount's structures go). */
void idle_start(struct dmarfs *fs);
void idle_stop(struct dmarfs *fs);

#endif /* DMARFS_IDLE_H */
