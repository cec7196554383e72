/* SPDX-License-Identifier: MIT */
/*
 * idle.h - the mount's housekeeping thread: it encodes files left written
 * but not closed, runs the space owners' ticks (ns_tick), and checkpoints
 * the journal when it asks for one.
 *
 * Encoding is never on a writer's path, nor on its CPU: the thread runs
 * at the lowest priority (nice IDLE_NICE), so on a busy machine it takes
 * the cycles the applications leave.  A file is due at its last close
 * (the close only queues it and wakes the thread); one held open -- a
 * database, a log, a download in progress -- once it has had no write for
 * IDLE_SECONDS.  Each write notes the time and puts the file on the idle
 * list (once, with a lookup reference); the thread takes the files that
 * are due off the list and encodes and syncs them.  A write during that
 * encode makes its plan stale and queues the file again.  An fsync
 * records a file without encoding it (the journal makes RAW extents as
 * durable as chunks).
 *
 * Where someone asks what encoding gives -- a full arena (ENOSPC), statfs,
 * the consistency check, a file's user.dmar.* -- the asker settles the
 * closed files' pending encodes itself, at its own priority, first
 * (idle_settle, ns_settle): the answer is the one the encode at close
 * used to give at once.
 */
#ifndef DMARFS_IDLE_H
#define DMARFS_IDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dmarfs;
struct inode;

/* Seconds without writes after which a file still open is encoded. */
#define IDLE_SECONDS 5
/* The thread's nice value: the weakest claim on a CPU short of
 * SCHED_IDLE (which a lock it holds could leave unscheduled for long on
 * a saturated machine). */
#define IDLE_NICE 19

/* The clock of the idle list: monotonic seconds. */
uint64_t idle_now(void);
/* i was written at now_s (idle_now()): queue it, unless it is queued or
 * the thread was stopped.  Takes fs->ns only to queue. */
void idle_note_write(struct dmarfs *fs, struct inode *i, uint64_t now_s);
/* i's last close: queue it as due now and wake the thread.  False when
 * no thread runs (before the daemon forked, after the stop): the caller
 * encodes then.  Takes fs->ns. */
bool idle_note_close(struct dmarfs *fs, struct inode *i);
/* Encode and sync, in the caller, the queued files closed since their
 * last write; with all, every queued file (a full arena: whatever frees
 * room).  Returns how many.  Takes fs->ns itself. */
size_t idle_settle(struct dmarfs *fs, bool all);
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
