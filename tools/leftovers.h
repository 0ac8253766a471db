/*
 * leftovers.h - what a killed server leaves in /dev/shm.
 *
 * A Python server's processes share memory through named files in
 * /dev/shm: Python's multiprocessing (psm_*, and its semaphores,
 * sem.mp-*) and torch (torch_*).  A process killed with -9 never unlinks
 * them; a vLLM CPU server leaves about 400 MB per kill.  The supervisor
 * notes, while the server runs, which such files its processes map or
 * hold open, and after a crash removes those that no live process uses.
 * A restore, which never saw the server run, takes the names from the
 * lists that its processes under the preload kept beside their logs
 * (wal/shmlist.h).  Files neither way names are never touched: another
 * server on the machine may be handing one between its processes just
 * then.
 */
#ifndef MOEFT_LEFTOVERS_H
#define MOEFT_LEFTOVERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct names {
	char **v;		/* each once */
	size_t n, cap;
};

struct leftovers {
	struct names files;	/* file names in /dev/shm */
	struct names lists;	/* paths of the lists they came from */
};

/* Note the files the processes of process group pgid map or hold open
 * now.  Out of memory, a name is not noted (and so never removed). */
void leftovers_note(struct leftovers *l, pid_t pgid);

/* Note the names in the lists in directory dir whose processes are gone.
 * A list that is not one the preload would write (a link, another user's,
 * a line that is no such name) is named in one line on stderr, after who
 * ("moeft restore"), and left alone. */
void leftovers_note_lists(struct leftovers *l, const char *dir, const char *who);

/* Remove the noted files that are still there, ours, and used by no live
 * process, then the noted lists none of whose files is left; forget every
 * noted name.  The number of files removed, with their bytes added to
 * *bytes. */
size_t leftovers_clean(struct leftovers *l, uint64_t *bytes);

void leftovers_free(struct leftovers *l);

#endif
