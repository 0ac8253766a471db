/*
 * launch.c - starting the command moeft restore brings back (launch.h).
 *
 * The command replaces moeft (exec), so it keeps the process id a
 * supervisor started, its signals and its exit status.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"

int launch_find_preload(char *out, size_t len)
{
	static const char *const beside[] = {
		"../preload/libmoeft.so",              /* the build tree */
		"../lib/libmoeft.so",                  /* installed */
		"../lib/x86_64-linux-gnu/libmoeft.so",
		"../lib64/libmoeft.so",
	};
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	size_t i;

	if (n <= 0)
		return -1;
	exe[n] = '\0';
	if (!(slash = strrchr(exe, '/')))
		return -1;
	slash[1] = '\0';
	for (i = 0; i < sizeof beside / sizeof beside[0]; i++)
		if (snprintf(out, len, "%s%s", exe, beside[i]) < (int)len &&
		    access(out, R_OK) == 0)
			return 0;
	return -1;
}

int launch_exec(char **cmd, const char *preload, const char *wal, const char *plan,
		const char *manifest)
{
	const char *old = getenv("LD_PRELOAD");
	char *both = NULL;
	int ret;

	if (old && *old && asprintf(&both, "%s:%s", preload, old) < 0)
		return -1;
	ret = setenv("LD_PRELOAD", both ? both : preload, 1);
	free(both);
	if (ret < 0 || setenv("MOEFT_WAL", wal, 1) < 0)
		return -1;
	if (plan) {
		if (setenv("MOEFT_RESTORE", plan, 1) < 0 ||
		    setenv("MOEFT_RESTORE_MANIFEST", manifest, 1) < 0)
			return -1;
	} else if (unsetenv("MOEFT_RESTORE") < 0 || unsetenv("MOEFT_RESTORE_MANIFEST") < 0) {
		return -1;
	}
	fflush(NULL);
	execvp(cmd[0], cmd);
	return -1;
}
