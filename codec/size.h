/* SPDX-License-Identifier: MIT */
/*
 * size.h - byte counts as people write them on a command line or in mount
 * options: "123", "4k", "8M", "2GiB", "1T" (binary multiples, an optional
 * "i" and "B" after the letter), and where the caller allows it a share
 * of physical RAM ("50%"), as tmpfs's size= takes.
 */
#ifndef DMAR_SIZE_H
#define DMAR_SIZE_H

#include <stdint.h>

/* Allow "N%" (1..100) of physical RAM. */
#define DMAR_SIZE_PERCENT 1u

/* 0 and *out, or -EINVAL (empty, negative, unknown suffix, overflow; a
 * share without DMAR_SIZE_PERCENT). */
int dmar_size_parse(const char *s, unsigned flags, uint64_t *out);

/* bytes as people read them: "512 B", "1.5 KiB" ... "2.0 TiB" (binary
 * multiples, one decimal), into out; returns out. */
#define DMAR_SIZE_TEXT 32
const char *dmar_size_format(uint64_t bytes, char out[DMAR_SIZE_TEXT]);

#endif /* DMAR_SIZE_H */
