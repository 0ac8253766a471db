/*
 * child.h - running other programs: the environment they get, starting
 * them with their output redirected, and saying how they ended.  For the
 * commands that measure or demonstrate a program (bench launch, demo).
 */
#ifndef MOEFT_CHILD_H
#define MOEFT_CHILD_H

#include <stddef.h>
#include <sys/types.h>

/*
 * The caller's environment less LD_PRELOAD and the MOEFT_* variables (a
 * child runs with exactly the preload settings it is given), with each
 * "NAME=VALUE" of add (NULL-terminated) set, replacing a variable of the
 * same name.  NULL when out of memory; free with child_env_free().
 */
char **child_env(const char *const add[]);
void child_env_free(char **env);

/* The program to run for name: name itself when it has a '/', else the
 * first executable name in PATH's directories.  0, or -1 with errno. */
int child_find(const char *name, char *out, size_t len);

/*
 * Start argv[0] (a path, not searched) with argv and env, its stdin from
 * /dev/null, its stdout to out_fd and its stderr to err_fd (-1: ours).
 * 0 with *pid set, or an errno value.
 */
int child_spawn(pid_t *pid, char *const argv[], char *const env[], int out_fd, int err_fd);

/* Wait for pid (EINTR retried): its wait status, or -1. */
int child_wait(pid_t pid);

/* A wait status as words: "exited with status 3", "was killed by signal 9". */
const char *child_how(char *buf, size_t len, int status);

#endif
