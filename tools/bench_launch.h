/*
 * bench_launch.h - what the targets of 'moeft bench' share: bench.c
 * parses the command line up to the target and hands 'launch' to
 * bench_launch.c.
 */
#ifndef MOEFT_BENCH_LAUNCH_H
#define MOEFT_BENCH_LAUNCH_H

#include <stddef.h>

#include "cli.h"

/* moeft bench launch: argv as the subcommand got it (argv[0] its name,
 * "launch" among the arguments), not yet seen by getopt. */
int bench_launch(const struct cli_command *cmd, int argc, char **argv);

struct json;

/* The CPU's model name from /proc/cpuinfo, or "unknown". */
void bench_cpu_model(char *buf, size_t len);
/* Key "machine": {"cpu": cpu, "nproc": online CPUs}. */
void bench_machine_json(struct json *j, const char *cpu);

#endif
