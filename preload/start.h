/*
 * start.h - the preload's start, on the application's first hooked CUDA
 * call (the shim's start event): configuration (MOEFT_*), profile, tables,
 * the log (MOEFT_WAL) and its KV store, restore mode (MOEFT_RESTORE), the
 * crash handlers, the exit summary.
 *
 * Any failure logs one line and leaves the process un-instrumented (or,
 * under MOEFT_STRICT, ends it with status 1); MOEFT_DISABLE=1 makes it
 * silent.  A process that never uses CUDA never starts anything.
 */
#ifndef MOEFT_START_H
#define MOEFT_START_H

struct kvs;
struct wal;

/* 1 when the process is instrumented from now on, 0 when never. */
int preload_start(void);

/* Once started and instrumented: its log and MOEFT_WINDOW; NULL and 0
 * before, when not instrumented, and in a child of fork(). */
struct wal *preload_log(void);
unsigned preload_window(void);
/* The KV store beside the log; NULL also when KV is not captured. */
struct kvs *preload_kvs(void);

#endif
