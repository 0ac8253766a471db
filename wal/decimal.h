/*
 * decimal.h - the one strict number parser of moeft's inputs (environment,
 * sysfs, profile files, command lines).
 */
#ifndef MOEFT_DECIMAL_H
#define MOEFT_DECIMAL_H

#include <stdint.h>

/* Unsigned decimal at *s: digits only (no sign, space or base prefix), at
 * least one, value <= max.  On success *s moves past the digits; returns 0,
 * or -1 with *s unchanged. */
static inline int parse_decimal(const char **s, uint64_t max, uint64_t *v)
{
	const char *p = *s;
	uint64_t x = 0;

	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');

		if (x > (max - d) / 10 || d > max)
			return -1;
		x = x * 10 + d;
	}
	if (p == *s)
		return -1;
	*s = p;
	*v = x;
	return 0;
}

#endif
