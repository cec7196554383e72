/* SPDX-License-Identifier: MIT */
/*
 * clock.h - the monotonic clock, which every timeout, age, rate and
 * duration in dmarfs reads: never the wall clock, which an admin or NTP
 * may step.
 */
#ifndef DMAR_CLOCK_H
#define DMAR_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Seconds since an arbitrary start, to the nanosecond. */
static inline double dmar_mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Milliseconds since the same start. */
static inline uint64_t dmar_mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

#endif
