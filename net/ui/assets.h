/* SPDX-License-Identifier: MIT */
/*
 * assets.h - the web view's files (net/ui/), built into the binary:
 * net/ui/embed.sh writes them as arrays into the build's net/ui_assets.c.
 */
#ifndef DMAR_UI_ASSETS_H
#define DMAR_UI_ASSETS_H

#include <stddef.h>

struct dmar_ui_asset {
	const char *name; /* "index.html"; NULL ends the list */
	const char *type; /* its Content-Type */
	const unsigned char *data;
	size_t len;
};

extern const struct dmar_ui_asset dmar_ui_assets[];

#endif
