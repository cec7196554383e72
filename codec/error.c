/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

int dmar_error_set(struct dmar_error *e, int code, const char *fmt, ...)
{
	if (!e || e->code)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	e->code = code;
	return code;
}

int dmar_error_errno(struct dmar_error *e, int code, const char *what)
{
	return dmar_error_set(e, code, "%s: %s", what, strerror(-code));
}
