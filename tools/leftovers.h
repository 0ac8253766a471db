/*
 * leftovers.h - what a killed server leaves in /dev/shm.
 *
 * A Python server's processes share memory through named files in
 * /dev/shm: Python's multiprocessing (psm_*, and its semaphores,
 * sem.mp-*) and torch (torch_*).  A process killed with -9 never unlinks
 * them; a vLLM CPU server leaves about 400 MB per kill.  The supervisor
 * notes, while the server runs, which such files its processes map or
 * hold open, and after a crash removes those that no live process uses.
 * Files it never saw the server use are never touched: another server on
 * the machine may be handing one between its processes just then.
 */
#ifndef MOEFT_LEFTOVERS_H
#define MOEFT_LEFTOVERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct leftovers {
	char **names;		/* file names in /dev/shm, each once */
	size_t n, cap;
};

/* Note the files the processes of process group pgid map or hold open
 * now.  Out of memory, a name is not noted (and so never removed). */
void leftovers_note(struct leftovers *l, pid_t pgid);

/* Remove the noted files that are still there, ours, and used by no live
 * process; forget every noted name.  The number removed, with their
 * bytes added to *bytes. */
size_t leftovers_clean(struct leftovers *l, uint64_t *bytes);

void leftovers_free(struct leftovers *l);

#endif
