/* SPDX-License-Identifier: MIT */
/*
 * dl.h - a shared library loaded on first use, its functions gathered
 * into a table: how dmar keeps out of its start-up the libraries that
 * most of its commands never call (net/libcurl.h, codec/libcrypto.h).
 */
#ifndef DMAR_DL_H
#define DMAR_DL_H

#include <stddef.h>

/* One entry of a table: the library's name for a function, and where in
 * the table its address goes. */
struct dmar_dl_sym {
	const char *name;
	size_t off;
};

/*
 * Open the first of the n sonames that loads (RTLD_NOW | RTLD_LOCAL,
 * never closed: such libraries keep global state until the process ends,
 * as a linked one would) and store the address of each of its nsyms
 * functions at table + off.  Returns the handle, or NULL with msg (of
 * msglen bytes) saying what was wrong: that none loads, and that pkg is
 * the Debian package to install, or which symbol is missing.  The table
 * is left partly filled on failure: fill a copy and keep it only on
 * success.
 */
void *dmar_dl_open(const char *const *names, size_t n, const char *pkg, const struct dmar_dl_sym *syms,
		   size_t nsyms, void *table, char *msg, size_t msglen);

#endif /* DMAR_DL_H */
