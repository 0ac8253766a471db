/*
 * blank.h - the one rule for which media a writer may take over.
 *
 * wal_open formats a medium that holds no log yet, and never one that
 * holds anything else.  A medium is
 *  - a log when either superblock copy holds the magic (damaged or not:
 *    it is resumed, never formatted);
 *  - blank when it is empty, or when it is longer than the metadata area
 *    and its data area (from WAL_DATA_OFF on) holds zeros only.  That
 *    covers a format that was interrupted: format writes the metadata
 *    below the data area, the superblock magic last;
 *  - foreign otherwise: refused.
 * moeft restore asks the same question of a log it cannot read, to start
 * the command fresh exactly where the preload will take the log over.
 */
#ifndef MOEFT_BLANK_H
#define MOEFT_BLANK_H

#include "media.h"

enum wal_medium_state {
	WAL_MEDIUM_LOG = 0,
	WAL_MEDIUM_BLANK = 1,
	WAL_MEDIUM_FOREIGN = 2
};

/* The state of an open, mapped medium.  A file's holes are skipped, not
 * read: a sparse log of many GiB costs what its data costs. */
int wal_medium_state(const struct media *m);

/* The state of the medium at path, mapped read-only: an enum
 * wal_medium_state, or a negative wal_status with err saying why it could
 * not be read. */
int wal_medium_state_path(const char *path, struct wal_error *err);

#endif
