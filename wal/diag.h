/*
 * diag.h - error messages and log lines: the wal library's own, and the
 * one-line refusal of a parser or loader above it (fail_msg).
 */
#ifndef MOEFT_DIAG_H
#define MOEFT_DIAG_H

#include <stddef.h>

#include "wal.h"

/* Fill err (may be NULL) with code and a formatted message; return code. */
int wal_fail(struct wal_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

void wal_logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Format the reason into buf (len bytes; NULL or 0: none) and return -1,
 * so that a refusal is one statement. */
int fail_msg(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
