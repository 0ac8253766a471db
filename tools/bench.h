/*
 * bench.h - what the targets of 'moeft bench' share: bench.c parses the
 * command line up to the target, measures 'wal' itself and hands
 * 'launch' to bench_launch.c, 'restore' to bench_restore.c and 'window'
 * to bench_window.c.
 */
#ifndef MOEFT_BENCH_H
#define MOEFT_BENCH_H

#include <stddef.h>

#include "cli.h"

/* moeft bench launch, moeft bench restore: argv as the subcommand got it
 * (argv[0] its name, the target among the arguments), not yet seen by
 * getopt. */
int bench_launch(const struct cli_command *cmd, int argc, char **argv);
int bench_restore(const struct cli_command *cmd, int argc, char **argv);
int bench_window(const struct cli_command *cmd, int argc, char **argv);

struct json;

/* *best = v when v is smaller or *best is 0 (nothing measured yet). */
void bench_keep_min(double *best, double v);
/* The copy into p may not be optimised away: its bytes count as read.
 * Inline, so that a memcpy baseline pays no call for it. */
static inline void bench_keep(const void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}
/* The CPU's model name from /proc/cpuinfo, or "unknown". */
void bench_cpu_model(char *buf, size_t len);
/* Key "machine": {"cpu": cpu, "nproc": online CPUs}. */
void bench_machine_json(struct json *j, const char *cpu);

#endif
