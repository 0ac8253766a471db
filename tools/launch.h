/*
 * launch.h - starting the command `moeft restore -- CMD` brings back:
 * under the preload, on the same log, in restore mode or fresh.
 */
#ifndef MOEFT_LAUNCH_H
#define MOEFT_LAUNCH_H

#include <stddef.h>

/* libmoeft.so beside this moeft (the build tree's shim/, or the installed
 * lib directory): 0 with the path in out, or -1. */
int launch_find_preload(char *out, size_t len);

/*
 * Replace this process by cmd[0] with cmd as its arguments (searched in
 * PATH), with LD_PRELOAD=preload (ahead of any the environment has),
 * MOEFT_WAL=wal, and, when plan is not NULL, MOEFT_RESTORE=plan and
 * MOEFT_RESTORE_MANIFEST=manifest; without a plan both are removed from
 * the environment.  Returns only on failure, with errno set.
 */
int launch_exec(char **cmd, const char *preload, const char *wal, const char *plan,
		const char *manifest);

#endif
