/*
 * diag.h - internal: error messages and log lines of the wal library.
 */
#ifndef MOEFT_DIAG_H
#define MOEFT_DIAG_H

#include "wal.h"

/* Fill err (may be NULL) with code and a formatted message; return code. */
int wal_fail(struct wal_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

void wal_logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
