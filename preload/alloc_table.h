/*
 * alloc_table.h - the live device allocations of the serving process.
 *
 * The interposer records every device allocation here (base, size, API,
 * call-site fingerprint, fingerprint.h) and looks pointers up at kernel launches to learn
 * which allocation, e.g. which KV pool, they point into.  After a crash,
 * restore matches the fresh process's allocations to the crashed one's by
 * (fingerprint, size, ordinal) instead of by address, which ASLR and the
 * driver change from run to run.
 *
 * Everything is preallocated by at_create(); no call allocates afterwards.
 * All calls are thread-safe.  Lookups (at_find, at_next, at_count) take no
 * lock: they read under a sequence counter and retry if a writer ran.
 * Writers (insert, remove, map, unmap, set_role) serialise on a mutex.
 *
 * Pure C: no CUDA header.  API values and roles are logged in
 * ALLOC records: their numbers are part of the log format, never renumber.
 */
#ifndef MOEFT_ALLOC_TABLE_H
#define MOEFT_ALLOC_TABLE_H

#include <stdint.h>

#include "record.h"

struct rec_alloc;

/* Status codes: 0 is success, errors are negative. */
enum at_status {
	AT_OK = 0,
	AT_EINVAL = -1,   /* bad argument: size 0, range wraps, unknown api/role */
	AT_EFULL = -2,    /* max_entries live allocations already */
	AT_EOVERLAP = -3, /* range overlaps a live allocation (missed free?) */
	AT_ENOENT = -4    /* no live allocation there / with that id */
};

const char *at_strerror(int status);

/* A copy of one entry; the table never hands out pointers into itself. */
struct alloc_info {
	uint64_t alloc_id;      /* 1, 2, 3, ... in insertion order, never reused */
	uint64_t base;
	uint64_t size;          /* > 0; base + size does not wrap */
	uint64_t fingerprint;   /* call site (fingerprint.h) */
	uint64_t handle;        /* ALLOC_API_VMM: the cuMemCreate handle; else 0 */
	uint32_t ordinal;       /* see at_insert() */
	uint16_t api;           /* enum alloc_api */
	uint16_t role;          /* enum alloc_role */
};

struct alloc_table;

/* Room for max_entries live allocations (1 .. 2^24); NULL without memory. */
struct alloc_table *at_create(unsigned max_entries);
/* No other call on the table may be running or follow. */
void at_destroy(struct alloc_table *at);

/*
 * Record a live allocation [base, base + size) made by `api` (any but
 * ALLOC_API_VMM) at call site `fingerprint`; its role starts as OTHER.
 * Fills *out (may be NULL) and returns 0, or AT_EINVAL, AT_EFULL,
 * AT_EOVERLAP without changing anything.
 *
 * Ordinal: the smallest n such that no live allocation with the same
 * fingerprint AND the same size has ordinal n.  So 0, 1, 2 for three
 * allocations; free #1 and the next one gets 1 again, while a counter would
 * give 3.  Why: restore pairs the crashed process's allocations, live at the
 * crash, with the fresh process's by (fingerprint, size, ordinal), and
 * the fresh process reaches the same state through a history that is only
 * mostly the same.  PyTorch's caching allocator allocates and frees
 * transient segments depending on fragmentation and OOM retries, profiling
 * runs allocate scratch that they free again, and so on.  With this rule an
 * allocation's ordinal depends only on which equal allocations are live
 * when it is made, so any number of transient ones made and freed before
 * it leave it unchanged; with a counter each of them would shift it for the
 * rest of the run.  The rule also keeps (fingerprint, size, ordinal)
 * unique among live entries, so the match is one to one, which "the number
 * of live equal allocations" (ordinals 0, 1, free #0, then 1 again) is not.
 * The price: if two runs free different members of a group (A then B
 * versus B then A) the next allocation takes a different hole; identical
 * histories give identical ordinals under either rule.
 */
int at_insert(struct alloc_table *at, uint64_t base, uint64_t size, unsigned api,
	      uint64_t fingerprint, struct alloc_info *out);

/* Forget the live allocation that starts at `base` (cudaFree, cuMemFree);
 * its entry goes to *out (may be NULL).  AT_ENOENT when no live allocation
 * starts there, including a pointer into the middle of one. */
int at_remove(struct alloc_table *at, uint64_t base, struct alloc_info *out);

/* The live allocation containing addr (base <= addr < base + size), in
 * O(log n) with no lock, about 50 ns at 1000 entries: 0 or AT_ENOENT. */
int at_find(const struct alloc_table *at, uint64_t addr, struct alloc_info *out);

/* The live allocation with the lowest base >= addr: 0 or AT_ENOENT.
 * Address-order iteration without holding anything between calls:
 *
 *	for (a.base = 0, a.size = 0; at_next(at, a.base + a.size, &a) == 0;)
 *
 * An entry live during the whole loop is visited exactly once; one inserted
 * or removed meanwhile may or may not be. */
int at_next(const struct alloc_table *at, uint64_t addr, struct alloc_info *out);

/* Live entries now (a hint while writers run). */
unsigned at_count(const struct alloc_table *at);

/* Set the role of live allocation alloc_id: 0, AT_ENOENT or AT_EINVAL.
 * A scan of the live entries: meant for once per allocation, not per launch. */
int at_set_role(struct alloc_table *at, uint64_t alloc_id, unsigned role);

/*
 * Virtual memory management (PyTorch expandable segments, vLLM's sleep-mode
 * allocator).  cuMemCreate makes a physical handle, cuMemAddressReserve a
 * VA range, cuMemMap puts a handle at part of that range, cuMemUnmap takes
 * it away, cuMemRelease drops the handle.  Pointers point into mappings, so
 * a mapping is what the table records: one entry per cuMemMap, api
 * ALLOC_API_VMM, with the handle for diagnostics.  Handles without a mapping
 * and reserved ranges hold nothing a pointer can reach and are not tracked.
 *
 * The fingerprint is the call site of cuMemMap, not of cuMemCreate: a
 * handle is interchangeable backing that an allocator may create ahead,
 * keep across unmap/map cycles (sleep and wake) or map at several places,
 * whereas the mapping is the event that gives the program a pointer.  In
 * PyTorch both calls sit in ExpandableSegment::map, so the two stacks
 * differ only in the innermost frame and either choice would be as stable.
 * The handle value itself never enters the fingerprint (it differs per run).
 * Ordinals follow at_insert's rule among mappings of equal (fingerprint,
 * size): the chunks of one expandable segment are ordinals 0, 1, 2, ...
 */
int at_map(struct alloc_table *at, uint64_t va, uint64_t size, uint64_t handle,
	   uint64_t fingerprint, struct alloc_info *out);

/* Remove the lowest VMM mapping lying wholly inside [va, va + size) and
 * return it in *out; AT_ENOENT when none is left.  cuMemUnmap may cover
 * several mappings, so the caller loops, logging each:
 *
 *	while (at_unmap(at, va, size, &a) == 0)
 *		log_free(&a);
 *
 * A mapping straddling either end of the range is left alone (the driver
 * would have refused such an unmap: the table missed a call). */
int at_unmap(struct alloc_table *at, uint64_t va, uint64_t size, struct alloc_info *out);

/* The WAL_REC_ALLOC payload for an entry (then rec_alloc_encode()). */
void at_to_record(const struct alloc_info *a, struct rec_alloc *r);

#endif
