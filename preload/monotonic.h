/*
 * monotonic.h - nanoseconds of CLOCK_MONOTONIC, for the exit summary's
 * timings of work done once a window (never on the launch path).
 */
#ifndef MOEFT_MONOTONIC_H
#define MOEFT_MONOTONIC_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
