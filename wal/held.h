/*
 * held.h - whether a log holds the state of a run that did not exit.
 *
 * A restore takes a log's newest restorable window: its newest intact
 * decode window, else its newest engine adapter's (record.h).  When no EXIT record
 * (wal_end) follows that window, the process that committed it crashed, was
 * killed, or left without running its exit handlers (Python's os._exit):
 * the state is held for a restore, and a new writer that is not restoring
 * it must leave the log alone unless the user says the state may go
 * (MOEFT_FORCE_FRESH).  A run that exited cleanly holds nothing: the next
 * run replaces it, as it always did.
 */
#ifndef MOEFT_HELD_H
#define MOEFT_HELD_H

#include <stdint.h>

#include "wal.h"

struct held_state {
	int held;           /* a restorable window, and no EXIT record after it */
	int exited;         /* the log's newest epoch ended with an EXIT record */
	uint32_t epoch;     /* the restorable window's writer; 0: the log has none */
	uint32_t pid;       /* that writer's pid; 0 when its EPOCH record is gone */
	uint64_t window;    /* the restorable window's id */
	uint64_t last_step; /* its last step (resume at last_step + 1) */
};

void held_read(const struct wal_reader *r, struct held_state *h);

/* The same for the log at path, read while no writer may start (media_hold):
 * 1 with *h filled, or 0 (*h zero) when path is no log this process could
 * open for writing as it is (absent, a writer holds it, not a log, unsafe,
 * damaged): wal_open then says what it is. */
int held_read_path(const char *path, struct held_state *h);

#endif
