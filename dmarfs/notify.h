/* SPDX-License-Identifier: MIT */
/*
 * notify.h - the daemon's word to systemd (sd_notify(3)'s protocol,
 * without libsystemd: one datagram to $NOTIFY_SOCKET): READY=1 once the
 * mount answers, STATUS= with the arena's use every few seconds (what
 * `systemctl status dmarfs@NAME` shows), STOPPING=1 at the end.  Nothing
 * at all when $NOTIFY_SOCKET is unset (not under systemd's Type=notify).
 */
#ifndef DMARFS_NOTIFY_H
#define DMARFS_NOTIFY_H

struct dmar_arena;

/* Send one message: 0, 1 when there is no $NOTIFY_SOCKET, or -errno. */
int notify_send(const char *msg);
/* READY=1 with a first STATUS=, then a thread that sends STATUS= every 5
 * s (name: the mount's NAME). */
void notify_ready(const char *name, struct dmar_arena *a);
/* STOPPING=1, and the thread ends. */
void notify_stopping(void);

#endif /* DMARFS_NOTIFY_H */
