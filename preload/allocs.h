/*
 * allocs.h - the allocation log: the live device allocations (alloc_table.h)
 * and their ALLOC and FREE records in the log.
 *
 * Every allocation event is committed at once as a window of its own (no
 * steps), so the allocation state survives a crash.  The table update and
 * the window that logs it happen under one lock, the log's order lock,
 * which decode windows take too (window.h's sink), so the log's order is
 * the table's and a decode window's records are never split.
 *
 * Restore needs the ALLOC records of every live allocation, but a full log
 * reclaims its oldest windows; re-logging the live table before space is
 * reclaimed is not done yet (moeft restore then says the history is
 * incomplete, and keeps every KV pool of the store).
 */
#ifndef MOEFT_ALLOCS_H
#define MOEFT_ALLOCS_H

#include <pthread.h>
#include <stdint.h>

#include "alloc_table.h"

struct wal;

/* Room for max live allocations: 0, or -1 without memory.  Nothing is
 * logged before allocs_log_to names the log. */
int allocs_init(unsigned max);
void allocs_log_to(struct wal *w);
/* Drop the table (a start that failed). */
void allocs_fini(void);

/* Events (shim.h): each returns 0 with *a the allocation concerned, or -1
 * when nothing was recorded (a failure is reported once). */
int allocs_new(unsigned api, uint64_t base, uint64_t size, uint64_t fingerprint,
	       struct alloc_info *a);
void allocs_free(uint64_t base);
int allocs_map(uint64_t va, uint64_t size, uint64_t handle, uint64_t fingerprint,
	       struct alloc_info *a);
void allocs_unmap(uint64_t va, uint64_t size);

/* The live allocation containing addr: 0, or -1. */
int allocs_find(uint64_t addr, struct alloc_info *a);

/* The log's order lock; allocs_end commits what was appended under it as
 * one window. */
pthread_mutex_t *allocs_lock(void);
void allocs_begin(void);
void allocs_end(void);

/* Between allocs_begin and allocs_end: give allocation a its role and log
 * its ALLOC record again with it.  0, or -1 when a is no longer live. */
int allocs_set_role(const struct alloc_info *a, unsigned role);

struct allocs_stats {
	unsigned long long allocs, frees, windows;
	unsigned live;
};

void allocs_stats(struct allocs_stats *st);

#endif
