/*
 * fxrun.h - running a program on the CPU fixture, with the preload and
 * without it, for the benchmarks that compare the two (bench launch,
 * bench window).
 *
 * Every piece is named on the command line, nothing is looked up in a
 * build tree: the fixture's directory (its libcudart.so.13 and
 * libcuda.so.1), the serving program, the preload (default: the
 * libmoeft.so beside moeft, launch.h).  A run with the preload gets
 * MOEFT_WAL (a log in a directory made for the benchmark, removed before
 * and after each run), MOEFT_WAL_SIZE=16M (creating the default 1 GiB log
 * would dominate a short run's wall time), MOEFT_STRICT=1 (a preload that
 * fails to start ends the run instead of measuring nothing) and what the
 * benchmark adds; every child loses the caller's LD_PRELOAD and MOEFT_*
 * variables and gets LD_LIBRARY_PATH=the fixture.
 */
#ifndef MOEFT_FXRUN_H
#define MOEFT_FXRUN_H

#include <limits.h>
#include <stddef.h>

#include "cli.h"

struct fxrun {
	const char *preload, *fixture;	/* as given; preload NULL: the default */
	char lib[PATH_MAX];		/* the default preload */
	char serve[PATH_MAX];
	char dir[64];			/* made for the benchmark ("" until then) */
	char wal[PATH_MAX];		/* dir/serve.wal */
	char err[PATH_MAX];		/* dir/stderr: a preloaded run's, kept */
	char **env[2];			/* without, with the preload */
	char msg[PATH_MAX + 512];	/* why a run failed */
};

/* The options every such benchmark takes, for its getopt table, and
 * their handling: 1 when ch was one of them (arg its argument; --serve's
 * kept in *serve for fxrun_pieces), else 0. */
#define FXRUN_OPT_SERVE 1	/* --serve has no short option */
#define FXRUN_OPTIONS							\
	{ "preload", required_argument, NULL, 'p' },			\
	{ "fixture", required_argument, NULL, 'f' },			\
	{ "serve", required_argument, NULL, FXRUN_OPT_SERVE }
int fxrun_option(struct fxrun *c, int ch, const char *arg, const char **serve);

/* Check the preload, the fixture and the serving program (serve: as
 * given, NULL when missing), as usage errors on o. */
void fxrun_pieces(struct cli_opts *o, struct fxrun *c, const char *serve);

/* Make the benchmark's directory (/dev/shm/moeft-bench-NAME.XXXXXX) and
 * the two environments, the preloaded one with each "NAME=VALUE" of add
 * (NULL-terminated; NULL: none).  0, or -1 with c->msg set. */
int fxrun_setup(struct fxrun *c, const char *name, const char *const add[]);

/*
 * Run argv to its end, with the preload (FXRUN_PRELOAD in how) or not: its
 * stdout into out (NUL-terminated) or to /dev/null; its stderr to ours,
 * or with FXRUN_KEEP_ERR to c->err (read it after); its wall time into
 * *wall.  0, or -1 with c->msg set.  A preloaded run's log is removed
 * before it, and after it unless FXRUN_KEEP_LOG (a later run restores
 * from it).
 */
#define FXRUN_PRELOAD 1u
#define FXRUN_KEEP_ERR 2u
#define FXRUN_KEEP_LOG 4u
int fxrun_run(struct fxrun *c, char *const argv[], unsigned how, char *out, size_t outlen,
	      double *wall);

/* Remove the directory, free the environments. */
void fxrun_done(struct fxrun *c);

#endif
