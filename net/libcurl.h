/* SPDX-License-Identifier: MIT */
/*
 * libcurl.h - libcurl, loaded the first time a client needs it.
 *
 * libcurl brings some thirty libraries with it (GnuTLS, Kerberos, LDAP,
 * SSH, ...) whose loading and start-up cost every process that links it
 * about 7 ms on the test VM: dmar started in 13 ms where zstd starts in
 * 3, for every pack, unpack and info that never touches the network.  So
 * nothing links libcurl; dmar_libcurl_load() dlopen()s it on first use
 * and the curl_* calls of the files that include this header go through
 * the table it fills.  The calls are written as in libcurl's manual: the
 * names are macros for the table's entries.
 *
 * Include this instead of <curl/curl.h>, and call dmar_libcurl_load()
 * (once or many times, from any thread) before any other curl call.
 */
#ifndef DMAR_LIBCURL_H
#define DMAR_LIBCURL_H

#include <curl/curl.h>

#include "codec/error.h"

/* The sonames of libcurl's ABI since 7.16 (2006), tried in turn: the
 * OpenSSL build (Debian's libcurl4), then the GnuTLS one (libcurl3-gnutls). */
#define DMAR_LIBCURL_SONAMES { "libcurl.so.4", "libcurl-gnutls.so.4" }

struct dmar_libcurl {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
	CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
	CURLcode (*easy_perform)(CURL *h);
	void (*easy_reset)(CURL *h);
	void (*easy_cleanup)(CURL *h);
	const char *(*easy_strerror)(CURLcode code);
	char *(*easy_escape)(CURL *h, const char *s, int len);
	CURLcode (*easy_send)(CURL *h, const void *buf, size_t len, size_t *n);
	CURLcode (*easy_recv)(CURL *h, void *buf, size_t len, size_t *n);
	void (*free)(void *p);
	CURLSH *(*share_init)(void);
	CURLSHcode (*share_setopt)(CURLSH *sh, CURLSHoption opt, ...);
	CURLSHcode (*share_cleanup)(CURLSH *sh);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
};

/* Filled by a successful dmar_libcurl_load(); read-only after. */
extern struct dmar_libcurl dmar_libcurl;

/* Load libcurl and run curl_global_init (the first call; later ones
 * return the first one's result).  0, or -ELIBACC with a message naming
 * the library and what was wrong ("libcurl.so.4: cannot open shared
 * object file", a missing symbol, curl_global_init's error). */
int dmar_libcurl_load(struct dmar_error *err);

/* libcurl's names for the table's entries.  <curl/curl.h> may define
 * the setopt/getinfo names as type-checking macros (gcc): those go. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_share_setopt
#define curl_global_init dmar_libcurl.global_init
#define curl_easy_init dmar_libcurl.easy_init
#define curl_easy_setopt dmar_libcurl.easy_setopt
#define curl_easy_getinfo dmar_libcurl.easy_getinfo
#define curl_easy_perform dmar_libcurl.easy_perform
#define curl_easy_reset dmar_libcurl.easy_reset
#define curl_easy_cleanup dmar_libcurl.easy_cleanup
#define curl_easy_strerror dmar_libcurl.easy_strerror
#define curl_easy_escape dmar_libcurl.easy_escape
#define curl_easy_send dmar_libcurl.easy_send
#define curl_easy_recv dmar_libcurl.easy_recv
#define curl_free dmar_libcurl.free
#define curl_share_init dmar_libcurl.share_init
#define curl_share_setopt dmar_libcurl.share_setopt
#define curl_share_cleanup dmar_libcurl.share_cleanup
#define curl_slist_append dmar_libcurl.slist_append
#define curl_slist_free_all dmar_libcurl.slist_free_all

#endif /* DMAR_LIBCURL_H */
