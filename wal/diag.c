/*
 * diag.c - status strings, error messages and the log hook.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "diag.h"

static wal_log_fn log_fn;
static int log_level = WAL_LOG_WARN;

const char *wal_strerror(int status)
{
	switch (status) {
	case WAL_OK: return "success";
	case WAL_EINVAL: return "invalid argument";
	case WAL_EIO: return "I/O error";
	case WAL_ENOTLOG: return "not a moeft log";
	case WAL_EVERSION: return "unsupported log version";
	case WAL_EBUSY: return "log is in use by another writer";
	case WAL_EFULL: return "log is full";
	case WAL_E2BIG: return "record too large for this log";
	case WAL_ENOMEM: return "out of memory";
	case WAL_ENUMA: return "NUMA node unavailable";
	case WAL_ECORRUPT: return "log is corrupt";
	case WAL_EUNSAFE: return "not safe to use: a link, another user's, or writable by others";
	case WAL_EENDED: return "the writer has ended (the process is exiting)";
	}
	return "unknown status";
}

int fail_msg(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (buf && len) {
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int wal_fail(struct wal_error *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		err->code = code;
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return code;
}

void wal_set_log(wal_log_fn fn, int level)
{
	log_fn = fn;
	log_level = level;
}

void wal_logf(int level, const char *fmt, ...)
{
	char line[320];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (log_fn)
		log_fn(level, line);
	else
		fprintf(stderr, "moeft: %s\n", line);
}

int wal_errno(int status)
{
	switch (status) {
	case WAL_EINVAL:
		return -EINVAL;
	case WAL_E2BIG:
		return -E2BIG;
	case WAL_EFULL:
		return -ENOSPC;
	case WAL_ENOMEM:
		return -ENOMEM;
	case WAL_EBUSY:
		return -EBUSY;
	default:
		return -EIO;
	}
}

const char *wal_rec_type_name(unsigned type)
{
	static const char *const names[] = {
		[WAL_REC_PAD] = "pad",         [WAL_REC_EPOCH] = "epoch",
		[WAL_REC_WINDOW] = "window",   [WAL_REC_ROUTING] = "routing",
		[WAL_REC_KVREF] = "kvref",     [WAL_REC_ALLOC] = "alloc",
		[WAL_REC_FREE] = "free",       [WAL_REC_CRASH] = "crash",
		[WAL_REC_REQUEST] = "request", [WAL_REC_EXIT] = "exit",
	};

	if (type < sizeof names / sizeof names[0] && names[type])
		return names[type];
	return type >= WAL_REC_USER ? "user" : "unknown";
}
