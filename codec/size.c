/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "size.h"

int dmar_size_parse(const char *s, unsigned flags, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end == '%' && !end[1]) {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		if (!(flags & DMAR_SIZE_PERCENT) || n == 0 || n > 100 || pages <= 0 || psz <= 0)
			return -EINVAL;
		*out = (uint64_t)pages * (uint64_t)psz / 100 * n;
		return 0;
	}
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default: return -EINVAL;
	}
	if (shift) {
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (*end)
		return -EINVAL;
	if (shift && n > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)n << shift;
	return 0;
}

const char *dmar_size_format(uint64_t bytes, char out[DMAR_SIZE_TEXT])
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int k = 0;
	while (v >= 1024 && k < 4) {
		v /= 1024;
		k++;
	}
	if (k == 0)
		snprintf(out, DMAR_SIZE_TEXT, "%llu B", (unsigned long long)bytes);
	else
		snprintf(out, DMAR_SIZE_TEXT, "%.1f %s", v, unit[k]);
	return out;
}
