/*
 * shmlist.h - the shared-memory files a server's processes create, listed
 * beside their logs, so that a restore can remove what a killed server left.
 *
 * A Python server's processes share memory through named files in
 * /dev/shm: Python's multiprocessing (psm_*, and its semaphores,
 * sem.mp-*) and torch (torch_*).  Their makers expect them gone with the
 * program (Python's resource tracker unlinks what is left at its end), but
 * a process killed with -9 unlinks nothing: a vLLM CPU server leaves about
 * 400 MB per kill.  Under the preload, each process that creates such a
 * file (shm_open or sem_open with O_CREAT | O_EXCL) appends its name to
 * its own list in the directory of logs, PID.START.shm: its pid and its
 * start time (clock ticks after boot, /proc/PID/stat), so that a pid used
 * again by another process is never taken for the dead one.  A process
 * that exits removes its list.  A list whose process is gone names files
 * a restore may remove: those still there, owned by this user, that no
 * live process maps or holds open (tools/leftovers.h).
 */
#ifndef MOEFT_SHMLIST_H
#define MOEFT_SHMLIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SHMLIST_SUFFIX ".shm"
#define SHMLIST_NAME_MAX 255	/* a name in /dev/shm (NAME_MAX) */

/* Whether name, a file name in /dev/shm (no leading '/'), is of the kinds
 * above: a known prefix, no '/', printable, at most SHMLIST_NAME_MAX. */
int shmlist_transient(const char *name);

/* Each name of a list (len bytes at buf, which it changes: lines, each
 * ended by '\n') to fn, once every line passed shmlist_transient: 0, or
 * the 1-based number of the first line that did not (fn got none). */
size_t shmlist_each(char *buf, size_t len, void (*fn)(void *arg, const char *name), void *arg);

/* The start time of process pid: 0 with *start, or -1 when it is gone or
 * a zombie (dead, its files closed, not yet reaped: an orphan's parent
 * in a container may never reap it). */
int shmlist_proc_start(pid_t pid, uint64_t *start);

/* DIR/PID.START.shm into out: 0, or -1 when it does not fit. */
int shmlist_path(char *out, size_t len, const char *dir, pid_t pid, uint64_t start);

/* A list's file name into pid and start: 0, or -1 when name is not one. */
int shmlist_parse_name(const char *name, pid_t *pid, uint64_t *start);

#endif
