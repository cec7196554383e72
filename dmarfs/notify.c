/* SPDX-License-Identifier: MIT */
/*
 * The systemd notification protocol (notify.h).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"
#include "arena/arena.h"
#include "codec/size.h"

int notify_send(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return 1;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(a.sun_path))
		return -EINVAL;
	memcpy(a.sun_path, path, n);
	if (path[0] == '@')
		a.sun_path[0] = 0; /* the abstract namespace */
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	ssize_t w = sendto(s, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&a,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
	int e = w < 0 ? -errno : 0;
	close(s);
	return e;
}

static struct {
	pthread_t thread;
	bool running, stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const char *name;
	struct dmar_arena *a;
} st = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void status(const char *prefix)
{
	char msg[512], u[DMAR_SIZE_TEXT], s[DMAR_SIZE_TEXT], kind[128];
	/* the backing's kind, without the why of a fallback */
	snprintf(kind, sizeof(kind), "%s", dmar_arena_describe(st.a));
	kind[strcspn(kind, ":")] = 0;
	uint64_t used = dmar_arena_used(st.a), size = dmar_arena_size(st.a);
	snprintf(msg, sizeof(msg), "%sSTATUS=arena %s: %s of %s used (%.0f%%), %s", prefix, st.name,
		 dmar_size_format(used, u), dmar_size_format(size, s), size ? 100.0 * (double)used / (double)size : 0.0,
		 kind);
	(void)notify_send(msg);
}

static void *status_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&st.lock);
	while (!st.stop) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 5;
		pthread_cond_timedwait(&st.cond, &st.lock, &t);
		if (!st.stop)
			status("");
	}
	pthread_mutex_unlock(&st.lock);
	return NULL;
}

void notify_ready(const char *name, struct dmar_arena *a)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return;
	st.name = name;
	st.a = a;
	status("READY=1\n");
	st.running = pthread_create(&st.thread, NULL, status_main, NULL) == 0;
}

void notify_stopping(void)
{
	if (!st.a)
		return;
	pthread_mutex_lock(&st.lock);
	st.stop = true;
	pthread_cond_signal(&st.cond);
	pthread_mutex_unlock(&st.lock);
	if (st.running)
		pthread_join(st.thread, NULL);
	st.running = false;
	(void)notify_send("STOPPING=1");
}
