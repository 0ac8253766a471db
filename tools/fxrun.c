/*
 * fxrun.c - running a program on the CPU fixture with the preload and
 * without it (fxrun.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "child.h"
#include "fxrun.h"
#include "kvstore.h"
#include "launch.h"

#define WAL_SIZE "16M"
#define ADD_MAX 8	/* variables a benchmark adds */

int fxrun_option(struct fxrun *c, int ch, const char *arg, const char **serve)
{
	switch (ch) {
	case 'p': c->preload = arg; return 1;
	case 'f': c->fixture = arg; return 1;
	case FXRUN_OPT_SERVE: *serve = arg; return 1;
	}
	return 0;
}

void fxrun_pieces(struct cli_opts *o, struct fxrun *c, const char *serve)
{
	char lib[PATH_MAX + 32], msg[PATH_MAX + 64];

	if (!c->preload) {
		if (launch_find_preload(c->lib, sizeof c->lib) < 0)
			cli_usage_error(o, "--preload LIB is required: no %s",
					c->lib[0] ? c->lib : "libmoeft.so beside moeft");
		c->preload = c->lib;
	}
	if (launch_check_lib(c->preload, msg, sizeof msg) < 0)
		cli_usage_error(o, "--preload %s", msg);
	if (!c->fixture)
		cli_usage_error(o, "--fixture DIR is required (the CPU fixture's libraries)");
	else if (snprintf(lib, sizeof lib, "%s/libcudart.so.13", c->fixture) >= (int)sizeof lib ||
		 access(lib, R_OK) != 0)
		cli_usage_error(o, "--fixture %s: no libcudart.so.13 there", c->fixture);
	if (!serve)
		cli_usage_error(o, "--serve PROG is required (the serving program)");
	else if (child_find(serve, c->serve, sizeof c->serve) < 0)
		cli_usage_error(o, "--serve %s: %s", serve, strerror(errno));
}

int fxrun_setup(struct fxrun *c, const char *name, const char *const add[])
{
	char path[PATH_MAX + 32], preload[PATH_MAX + 32], wal[PATH_MAX + 32];
	const char *plain[] = { path, NULL };
	const char *with[5 + ADD_MAX + 1] = { path, preload, wal, "MOEFT_WAL_SIZE=" WAL_SIZE,
					      "MOEFT_STRICT=1" };
	size_t n = 5;

	for (; add && *add && n < 5 + ADD_MAX; add++)
		with[n++] = *add;
	snprintf(c->dir, sizeof c->dir, "/dev/shm/moeft-bench-%s.XXXXXX", name);
	if (!mkdtemp(c->dir)) {
		snprintf(c->msg, sizeof c->msg, "cannot make a directory in /dev/shm: %s",
			 strerror(errno));
		c->dir[0] = '\0';
		return -1;
	}
	snprintf(c->wal, sizeof c->wal, "%s/serve.wal", c->dir);
	snprintf(c->err, sizeof c->err, "%s/stderr", c->dir);
	snprintf(path, sizeof path, "LD_LIBRARY_PATH=%s", c->fixture);
	snprintf(preload, sizeof preload, "LD_PRELOAD=%s", c->preload);
	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", c->wal);
	c->env[0] = child_env(plain);
	c->env[1] = child_env(with);
	if (!c->env[0] || !c->env[1]) {
		snprintf(c->msg, sizeof c->msg, "out of memory");
		return -1;
	}
	return 0;
}

/* The log of a run under the preload, and its KV store beside it. */
static void remove_log(const struct fxrun *c)
{
	char kv[PATH_MAX + 3];

	unlink(c->wal);
	if (kvs_path(c->wal, kv, sizeof kv) == 0)
		unlink(kv);
}

int fxrun_run(struct fxrun *c, char *const argv[], unsigned how_run, char *out, size_t outlen,
	      double *wall)
{
	int fd[2] = { -1, -1 }, efd = -1, status = -1, err, preload = !!(how_run & FXRUN_PRELOAD);
	int keep_log = preload && (how_run & FXRUN_KEEP_LOG);
	size_t got = 0;
	char how[64];
	double t;
	pid_t pid;

	if (preload)
		remove_log(c);
	if (out ? pipe2(fd, O_CLOEXEC) < 0 : (fd[0] = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0) {
		snprintf(c->msg, sizeof c->msg, "%s: cannot make its stdout: %s", argv[0],
			 strerror(errno));
		return -1;
	}
	if ((how_run & FXRUN_KEEP_ERR) &&
	    (efd = open(c->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
		snprintf(c->msg, sizeof c->msg, "%s: %s", c->err, strerror(errno));
		close(fd[0]);
		if (out)
			close(fd[1]);
		return -1;
	}
	t = cli_now();
	err = child_spawn(&pid, argv, c->env[preload], out ? fd[1] : fd[0], efd);
	if (out)
		close(fd[1]);
	if (efd >= 0)
		close(efd);
	while (!err && out && got + 1 < outlen) {
		ssize_t n = read(fd[0], out + got, outlen - 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (out)
		out[got] = '\0';
	close(fd[0]);	/* more than outlen: the child gets SIGPIPE */
	if (err) {
		snprintf(c->msg, sizeof c->msg, "cannot run %s: %s", argv[0], strerror(err));
		return -1;
	}
	status = child_wait(pid);
	*wall = cli_now() - t;
	if (preload && !keep_log)
		remove_log(c);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(c->msg, sizeof c->msg, "%s %s %s the preload", argv[0],
			 child_how(how, sizeof how, status), preload ? "with" : "without");
		return -1;
	}
	return 0;
}

void fxrun_done(struct fxrun *c)
{
	if (c->dir[0])
		cli_rm_tree(c->dir);
	child_env_free(c->env[0]);
	child_env_free(c->env[1]);
	c->env[0] = c->env[1] = NULL;
	c->dir[0] = '\0';
}
