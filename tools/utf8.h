/*
 * utf8.h - validation of UTF-8 in strings from logs and paths.
 *
 * Such strings may hold any bytes, while JSON and XML must be valid text;
 * the writers of both replace what this says is not UTF-8.
 */
#ifndef MOEFT_UTF8_H
#define MOEFT_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (1 for ASCII, NUL included),
 * or 0 if there is none. */
size_t utf8_len(const unsigned char *s);

#endif
