/*
 * child.c - running other programs (child.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "child.h"

extern char **environ;

/* Whether var ("NAME=VALUE") is named in add. */
static int replaced(const char *var, const char *const add[])
{
	size_t n = strcspn(var, "=");

	for (; *add; add++)
		if (!strncmp(var, *add, n) && (*add)[n] == '=')
			return 1;
	return 0;
}

char **child_env(const char *const add[])
{
	size_t n = 0, a = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	while (add[a])
		a++;
	if (!(env = calloc(n + a + 1, sizeof *env)))
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (!strncmp(environ[i], "LD_PRELOAD=", 11) || !strncmp(environ[i], "MOEFT_", 6) ||
		    replaced(environ[i], add))
			continue;
		if (!(env[k++] = strdup(environ[i])))
			goto fail;
	}
	for (size_t i = 0; i < a; i++)
		if (!(env[k++] = strdup(add[i])))
			goto fail;
	return env;
fail:
	child_env_free(env);
	return NULL;
}

void child_env_free(char **env)
{
	for (char **e = env; e && *e; e++)
		free(*e);
	free(env);
}

/* A regular file we may execute: 0, or -1 with errno. */
static int executable(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return -1;
	if (!S_ISREG(st.st_mode)) {
		errno = EACCES;
		return -1;
	}
	return access(path, X_OK);
}

int child_find(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");

	if (strchr(name, '/')) {
		if (snprintf(out, len, "%s", name) >= (int)len) {
			errno = ENAMETOOLONG;
			return -1;
		}
		return executable(out);
	}
	while (path && *path) {
		size_t n = strcspn(path, ":");
		int w = snprintf(out, len, "%.*s/%s", (int)n, path, name);

		if (n && w > 0 && (size_t)w < len && executable(out) == 0)
			return 0;
		path += n + (path[n] == ':');
	}
	errno = ENOENT;
	return -1;
}

int child_spawn(pid_t *pid, char *const argv[], char *const env[], int out_fd, int err_fd)
{
	posix_spawn_file_actions_t fa;
	int err;

	if ((err = posix_spawn_file_actions_init(&fa)))
		return err;
	err = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	if (!err && out_fd >= 0)
		err = posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
	if (!err && err_fd >= 0)
		err = posix_spawn_file_actions_adddup2(&fa, err_fd, STDERR_FILENO);
	if (!err)
		err = posix_spawn(pid, argv[0], &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	return err;
}

int child_wait(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

const char *child_how(char *buf, size_t len, int status)
{
	if (status != -1 && WIFSIGNALED(status))
		snprintf(buf, len, "was killed by signal %d", WTERMSIG(status));
	else if (status != -1 && WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "could not be waited for");
	return buf;
}
