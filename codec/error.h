/* SPDX-License-Identifier: MIT */
/*
 * error.h - a negative errno plus a sentence saying what was wrong.
 *
 * Decoders of outside input return -errno like every other function and,
 * when the caller passes a struct dmar_error, also say where and why
 * ("block 3 (chunks 96..127): hash mismatch").  Libraries never print; the
 * top layer prints the message once, with its own context in front.
 */
#ifndef DMAR_ERROR_H
#define DMAR_ERROR_H

#include <stddef.h>

struct dmar_error {
	int code;      /* negative errno, 0 when nothing was recorded */
	char msg[320]; /* NUL-terminated, no trailing newline */
};

/* Record (code, message) in e (which may be NULL) and return code, so that
 * `return dmar_error_set(e, -EBADMSG, "...");` reads naturally.  Only the
 * first error is kept: later calls return code without overwriting it. */
int dmar_error_set(struct dmar_error *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like dmar_error_set with strerror(-code) as the message. */
int dmar_error_errno(struct dmar_error *e, int code, const char *what);

#endif /* DMAR_ERROR_H */
