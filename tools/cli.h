/*
 * cli.h - what the moeft subcommands share: the command table entry,
 * option parsing, strict argument parsing, the tools' environment and
 * their messages.
 *
 * Exit statuses of every subcommand: 0 success, 1 the log (or a check of
 * it) is bad, 2 usage, environment or I/O error.
 */
#ifndef MOEFT_CLI_H
#define MOEFT_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wal.h"

enum { EXIT_OK = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };

struct cli_command {
	const char *name;
	const char *summary;	/* one line for 'moeft --help' */
	const char *usage;	/* text of 'moeft NAME --help' */
	int (*run)(const struct cli_command *cmd, int argc, char **argv);
};

extern const struct cli_command cmd_verify, cmd_inspect, cmd_restore, cmd_ls, cmd_demo,
	cmd_bench, cmd_resubmit, cmd_run, cmd_gateway, cmd_profile;

/* The tools' environment, read once by cli_env_load(). */
struct cli_env {
	int numa_node;		/* MOEFT_NUMA_NODE, -1 when unset */
};
extern struct cli_env cli_env;

/* Read MOEFT_LOG and MOEFT_NUMA_NODE; on a bad value print an error
 * naming the variable and return EXIT_USAGE. */
int cli_env_load(void);

/*
 * Option parsing state of one subcommand.  Usage errors are collected (the
 * first one kept) while parsing and reported by cli_parse_done(), once
 * --json is known to be there or not.
 */
struct cli_opts {
	const struct cli_command *cmd;
	int json;		/* --json given: errors are JSON on stdout too */
	char err[200];		/* first usage error, "" when none */
};

/*
 * getopt_long over a subcommand's argv (argv[0] is its name): the long
 * options plus the short ones whose val is a letter.  An unknown option or
 * a missing value is recorded in o->err and returned as '?'.
 */
int cli_getopt(struct cli_opts *o, int argc, char **argv, const struct option *opts);

/* Strict decimal numbers for option `opt`: the whole text must be the
 * number and lie in [min, max].  0, or -1 with the reason recorded. */
int cli_parse_u64(struct cli_opts *o, const char *opt, const char *text,
		  uint64_t min, uint64_t max, uint64_t *out);
int cli_parse_double(struct cli_opts *o, const char *opt, const char *text,
		     double min, double max, double *out);

/* The path given to option `opt` (e.g. "--wal"): a usage error is recorded
 * when it is empty or `max` bytes or longer (0: PATH_MAX).  0 or -1. */
int cli_path_opt(struct cli_opts *o, const char *opt, const char *path, size_t max);

/* Record a usage error (printf-style) unless one is recorded already. */
void cli_usage_error(struct cli_opts *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* After parsing: 0, or EXIT_USAGE once the recorded error is reported
 * (as cli_fail does, plus a --help hint). */
int cli_parse_done(struct cli_opts *o);

void cli_print_usage(const struct cli_command *cmd, FILE *f);

/*
 * Report a failure of `cmd` and return `code`: the message goes to stderr,
 * and when `json` is set a
 * {"status":"error","error":...} object goes to stdout as well.
 */
int cli_fail(const struct cli_command *cmd, int json, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* /dev/shm/moeft-<user>-<name>.wal */
void cli_default_path(char *buf, size_t len, const char *name);

/*
 * May a fresh log (or KV store) be made at `path`?  Never over data: it
 * must be missing, an empty regular file, or a device-DAX node that holds
 * no log (wal_open formats a blank one and refuses anything else); a log
 * or KV store is refused by guard.h's rule.  0, or -1 with msg set.
 */
int cli_fresh_path(const char *path, char *msg, size_t len);

/* The directory `path` is in ("." for a bare name, trailing slashes
 * ignored), copied into buf: dirname(3) without touching `path`. */
const char *cli_parent(char *buf, size_t len, const char *path);

/* Remove a directory and everything under it (rm -rf), errors ignored. */
void cli_rm_tree(const char *dir);

/* CLOCK_MONOTONIC in seconds: for timeouts and what took how long. */
double cli_now(void);

/* "512 B", "34 KiB", "12.3 MiB", "1 GiB" */
const char *cli_fmt_bytes(char *buf, size_t len, uint64_t bytes);
/* CLOCK_REALTIME nanoseconds as local "2024-05-01 12:00:00" */
const char *cli_fmt_time(char *buf, size_t len, uint64_t ns);

/* One line of a human report: a label column, then the text. */
void cli_row(FILE *f, const char *label, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
