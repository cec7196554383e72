/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "dl.h"

void *dmar_dl_open(const char *const *names, size_t n, const char *pkg, const struct dmar_dl_sym *syms,
		   size_t nsyms, void *table, char *msg, size_t msglen)
{
	const char *name = NULL;
	void *h = NULL;
	for (size_t i = 0; i < n && !h; i++)
		if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
			name = names[i];
	if (!h) {
		const char *why = dlerror();
		int k = snprintf(msg, msglen, "none of");
		for (size_t i = 0; i < n && k >= 0 && (size_t)k < msglen; i++)
			k += snprintf(msg + k, msglen - (size_t)k, "%s %s", i ? "," : "", names[i]);
		if (k >= 0 && (size_t)k < msglen)
			snprintf(msg + k, msglen - (size_t)k, " loads (%s); install %s", why ? why : "?", pkg);
		return NULL;
	}
	for (size_t i = 0; i < nsyms; i++) {
		void *f = dlsym(h, syms[i].name);
		if (!f) {
			snprintf(msg, msglen, "%s: no symbol %s", name, syms[i].name);
			return NULL;
		}
		/* POSIX: a function's address from dlsym converts to a
		 * function pointer of its type. */
		memcpy((char *)table + syms[i].off, &f, sizeof(f));
	}
	return h;
}
