/* SPDX-License-Identifier: MIT */
/*
 * libcurl.c - load libcurl on first use (see libcurl.h for why).
 */
#include "config.h"

#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "libcurl.h"
#include "codec/dl.h"

struct dmar_libcurl dmar_libcurl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_msg[256];

/* One entry of the table, by libcurl's own name for it. */
static const struct dmar_dl_sym syms[] = {
#define SYM(field, name) { name, offsetof(struct dmar_libcurl, field) }
	SYM(global_init, "curl_global_init"),
	SYM(easy_init, "curl_easy_init"),
	SYM(easy_setopt, "curl_easy_setopt"),
	SYM(easy_getinfo, "curl_easy_getinfo"),
	SYM(easy_perform, "curl_easy_perform"),
	SYM(easy_reset, "curl_easy_reset"),
	SYM(easy_cleanup, "curl_easy_cleanup"),
	SYM(easy_strerror, "curl_easy_strerror"),
	SYM(easy_escape, "curl_easy_escape"),
	SYM(easy_send, "curl_easy_send"),
	SYM(easy_recv, "curl_easy_recv"),
	SYM(free, "curl_free"),
	SYM(share_init, "curl_share_init"),
	SYM(share_setopt, "curl_share_setopt"),
	SYM(share_cleanup, "curl_share_cleanup"),
	SYM(slist_append, "curl_slist_append"),
	SYM(slist_free_all, "curl_slist_free_all"),
#undef SYM
};

static void load(void)
{
	struct dmar_libcurl t;
	static const char *const names[] = DMAR_LIBCURL_SONAMES;
	if (!dmar_dl_open(names, sizeof(names) / sizeof(names[0]), "libcurl4", syms, sizeof(syms) / sizeof(syms[0]), &t,
			  load_msg, sizeof(load_msg))) {
		load_rc = -ELIBACC;
		return;
	}
	CURLcode cc = t.global_init(CURL_GLOBAL_DEFAULT);
	if (cc != CURLE_OK) {
		load_rc = -ELIBACC;
		snprintf(load_msg, sizeof(load_msg), "curl_global_init: %s", t.easy_strerror(cc));
		return;
	}
	dmar_libcurl = t;
}

int dmar_libcurl_load(struct dmar_error *err)
{
	pthread_once(&once, load);
	if (load_rc < 0)
		return dmar_error_set(err, load_rc, "libcurl: %s", load_msg);
	return 0;
}
