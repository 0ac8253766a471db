/*
 * guard.h - the one rule for what a moeft command may write over, replace
 * or remove: never a moeft log or KV store that it did not make in the
 * same run, and never the log it reads.
 *
 * Files are recognised by content, not by name: a log by wal/blank.h's
 * rule (either superblock copy holds the magic, damaged or not), a KV
 * store by its magic (wal/kvformat.h).  The log a command reads is
 * recognised by device and inode, so another name for it (a hard link, a
 * symbolic link, "./") is refused too.  A command that makes a log in a
 * run removes it by its own means; everything else it writes or removes
 * asks guard_check() first.
 */
#ifndef MOEFT_GUARD_H
#define MOEFT_GUARD_H

#include <stddef.h>
#include <sys/stat.h>

/*
 * May `path` be written over, replaced or removed?  `input` is the stat of
 * the log the command reads, or NULL.  0: it is missing, or none of the
 * files above; -1 with msg saying why not ("PATH holds a moeft log; ..."),
 * or that it could not be read to tell.
 */
int guard_check(const char *path, const struct stat *input, char *msg, size_t len);

#endif
