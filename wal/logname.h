/*
 * logname.h - the names of the logs in a directory of logs: this
 * process's when MOEFT_WAL names a directory, and a command's.
 *
 * A server is several processes (an API server, a scheduler, a worker per
 * GPU) that all inherit MOEFT_WAL.  Each keeps its own log in the
 * directory, named by what the process is and the device it works on:
 * ROLE.DEVICE.wal.  A pid would change with every restart; these do not,
 * so the processes of a restarted server find their own logs again, and
 * two workers of one server on two GPUs never share one (two MIG
 * instances of one GPU share its PCI bus id, hence a name).  The file is made at the
 * preload's start (the first CUDA call it records), so a process that
 * records nothing creates nothing.
 */
#ifndef MOEFT_LOGNAME_H
#define MOEFT_LOGNAME_H

#include <stddef.h>

/* s with every byte but [A-Za-z0-9._-] made '_': fit for a file name. */
void logname_clean(char *s);

/* The preload's default directory of logs, /dev/shm/moeft-USER: USER the
 * login name in /etc/passwd (never NSS, which would load modules into a
 * server), else the uid; cleaned.  The CLI finds the logs there by it. */
void logname_default_dir(char *out, size_t len);

/* The role in a log's file name in a directory (ROLE.DEVICE.wal; a
 * device name holds no '.'): 0 with it in out, or -1 when name is not of
 * that form. */
int logname_role_of_file(const char *name, char *out, size_t len);

/* The process's name as the kernel knows it (/proc/self/comm, which a
 * process title sets), cleaned; "unknown" when there is none.  The kernel
 * keeps 15 bytes: where the file name of argv[0] (a process title's
 * whole text) begins with them and goes on, it is the name, up to 63
 * bytes, so that vLLM's VLLM::Worker_TP0 and _TP1 keep two logs. */
void logname_role(char *out, size_t len);

/* The name a process running the executable at exe starts with: its
 * file name (argv[0] is exe), up to 63 bytes, cleaned.  A process title
 * may change it later. */
void logname_role_of(const char *exe, char *out, size_t len);

/*
 * path holds a directory: make it (mode 0700, when missing; not its
 * parents) or check it (refused when a link, another user's, or writable
 * by group or others), then make path that of this process's log in it:
 * DIR/ROLE.DEVICE.wal with device as shim_dev_name gives it (a MIG
 * instance's with its "-mig-" suffix; "nodev" when the driver cannot
 * tell), cleaned.  0, or -1 with one line in err.
 */
int logname_in_dir(char *path, size_t len, const char *device, char *err, size_t errlen);

#endif
