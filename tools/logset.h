/*
 * logset.h - the logs a --wal argument names: the log itself, or, for a
 * directory (MOEFT_WAL naming one: every process of a server keeps its
 * log there, wal/logname.h), every log in it.
 */
#ifndef MOEFT_LOGSET_H
#define MOEFT_LOGSET_H

#include <stddef.h>

struct logset {
	int dir;          /* --wal named a directory */
	size_t n;
	char **paths;     /* the logs, a directory's by name */
};

/* The logs at path: a directory's regular files named *.wal (links and
 * the rest are not logs of it; there may be none).  0, or -1 with one
 * line in err (a directory that cannot be read). */
int logset_open(struct logset *s, const char *path, char *err, size_t errlen);

/* For the commands that need a log: 0, or -1 with err saying that the
 * directory at path holds none. */
int logset_need_one(const struct logset *s, const char *path, char *err, size_t errlen);
void logset_free(struct logset *s);

#endif
