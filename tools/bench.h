/*
 * bench.h - what the targets of 'moeft bench' share: bench.c parses the
 * command line up to the target, measures 'wal' itself and hands
 * 'launch' to bench_launch.c, 'restore' to bench_restore.c and 'window'
 * to bench_window.c.
 */
#ifndef MOEFT_BENCH_H
#define MOEFT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"

/* moeft bench launch, moeft bench restore: argv as the subcommand got it
 * (argv[0] its name, the target among the arguments), not yet seen by
 * getopt. */
int bench_launch(const struct cli_command *cmd, int argc, char **argv);
int bench_restore(const struct cli_command *cmd, int argc, char **argv);
int bench_window(const struct cli_command *cmd, int argc, char **argv);

/* moeft bench wal --peers (bench_peers.c): the appends and the walk that
 * bench wal times on moeft's log, on PMDK's libpmemlog. */
#define PEER_SIZES_MAX 8
#define PEER_POOL_SUFFIX ".pmemlog"	/* the pool: the log's path and this */
struct peer_run {
	const char *path;		/* the pool to make (exclusively), then remove */
	uint64_t size;			/* its bytes */
	int memory;			/* the medium is memory (tmpfs): no flushes */
	double run_s;			/* one run's seconds */
	int repeats;			/* runs; the best counts */
	const uint8_t *src;		/* the records' bytes */
	const uint32_t *sizes;		/* record sizes, at most PEER_SIZES_MAX */
	size_t nsizes;
	uint32_t (*per_commit)(uint32_t size);	/* records per durable batch */
};
struct peer_results {
	double append_rps[PEER_SIZES_MAX];	/* records per second, per size */
	uint64_t walk_bytes;		/* of the full pool's 4 KiB records */
	double walk_bps;
	char how[160];			/* the library, and what it was told */
};
/* Load libpmemlog now (memory: tell it the medium is memory, unless the
 * environment says): 0, or -1 with err.  Before anything is measured, so
 * that a missing library ends the run at once. */
int bench_pmemlog_load(int memory, char *err, size_t errlen);
/* 0, or -1 with err (the library missing, the pool not made, a failure). */
int bench_pmemlog(const struct peer_run *r, struct peer_results *res, char *err, size_t errlen);

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
