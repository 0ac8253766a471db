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
 * its own list, PID.START.PGID.NS.shm, in the directory of its logs (or
 * beside its one log, where that directory is its user's alone).  A
 * process that exits removes its list.  A restore removes what the lists
 * name once their writers are gone: those files still there, owned by this
 * user, that no live process maps or holds open (tools/leftovers.h).
 *
 * Gone means: the process (its pid and start time, so that a pid used
 * again is another process) and every process of the group it was in
 * when it made the list.  A worker that made a file for its server and
 * then ended (Python's forked workers end with _exit, skipping exit
 * handlers) leaves the file to its server while any of the server's group
 * runs.  Pids mean nothing across pid namespaces (containers sharing
 * /dev/shm): a list of another namespace (NS, the inode of its
 * /proc/self/ns/pid) is left alone.
 */
#ifndef MOEFT_SHMLIST_H
#define MOEFT_SHMLIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wal.h"

#define SHMLIST_SUFFIX ".shm"
#define SHMLIST_NAME_MAX 255	/* a name in /dev/shm (NAME_MAX) */

/* Whether name, a file name in /dev/shm (no leading '/'), is of the kinds
 * above: a known prefix, no '/', printable, at most SHMLIST_NAME_MAX. */
int shmlist_transient(const char *name);

/* Each name of a list (len bytes at buf, which it changes: lines, each
 * ended by '\n') to fn, once every line passed shmlist_transient: 0, or
 * the 1-based number of the first line that did not (fn got none).  A
 * last line with no '\n' was cut short (a crash, a full disk): it could
 * be the start of another file's name, and is skipped. */
size_t shmlist_each(char *buf, size_t len, void (*fn)(void *arg, const char *name), void *arg);

/* Who wrote a list. */
struct shmlist_owner {
	pid_t pid;
	uint64_t start;		/* clock ticks after boot (/proc/PID/stat) */
	pid_t pgid;		/* its process group when it made the list */
	uint64_t ns;		/* its pid namespace's inode */
};

/* This process: 0, or -1 when /proc cannot say. */
int shmlist_self(struct shmlist_owner *o);

/* DIR/PID.START.PGID.NS.shm into out: 0, or -1 when it does not fit. */
int shmlist_path(char *out, size_t len, const char *dir, const struct shmlist_owner *o);

/* A list's file name into *o: 0, or -1 when name is not one. */
int shmlist_parse_name(const char *name, struct shmlist_owner *o);

/* Whether o's process, or a process of o's group, runs (a zombie whose
 * other threads still run counts; one of no thread left does not): 1 or
 * 0; -1 when o is of another pid namespace, which cannot be told. */
int shmlist_alive(const struct shmlist_owner *o);

/* The directory of lists for the log at wal (with is_dir, the directory
 * of logs itself, made when create is set and it is missing; else the
 * log's directory, only when that is one media_open_dir trusts and the log
 * is no device) into out: 0, or -1 with err (no lists are kept). */
int shmlist_dir(const char *wal, int is_dir, int create, char *out, size_t len,
		struct wal_error *err);

#endif
