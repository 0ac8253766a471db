/*
 * kernel_id.h - what moeft decided about each kernel handle it has seen
 * launched, cached by the handle.
 *
 * A launch names its kernel by a handle: a host stub pointer or a
 * cudaKernel_t (runtime), a CUfunction (driver).  Naming a kernel costs
 * driver calls and a glob match against every rule, so it is done once per
 * handle and the decision cached here: no rule, or a rule plus the
 * kernel's parameter sizes (for rule_eval's bounds checks).  Each launch
 * then costs one lookup, which takes no lock and allocates nothing; only
 * the first launch of a handle (a miss) takes the insert mutex.
 *
 * Handles of the three kinds are addresses of distinct objects, so one
 * table serves them all.  Entries are never removed: a module unloaded and
 * another loaded at the same address would inherit the old decision
 * (engines load their kernels once; hooking cuModuleUnload and
 * cuLibraryUnload to forget them is left for later).
 * No CUDA header: the handle is an opaque pointer.
 */
#ifndef MOEFT_KERNEL_ID_H
#define MOEFT_KERNEL_ID_H

#include <stdatomic.h>
#include <stdint.h>

#include "profile.h"

#define KID_NAME_MAX 128   /* bytes of a kernel name kept for messages */

/* What the caller learned about a kernel it saw for the first time. */
struct kid_desc {
	int rule;                /* profile rule that owns it; -1: none */
	const char *name;        /* may be NULL (the kernel could not be named) */
	int params_known;        /* the parameter sizes below are the driver's */
	unsigned nparams;        /* at most RULE_MAX_PARAMS */
	uint32_t sizes[RULE_MAX_PARAMS];
};

/* The cached decision for a kernel that a rule owns.  Never moves or
 * disappears while the cache lives. */
struct kid_match {
	int rule;
	int params_known;
	unsigned nparams;
	atomic_int off;          /* set once the rule proved not to fit */
	uint32_t sizes[RULE_MAX_PARAMS];
	char name[KID_NAME_MAX]; /* truncated copy, for messages */
};

enum kid_result {
	KID_UNKNOWN = 0,  /* never inserted */
	KID_NONE = 1,     /* seen; no rule owns it */
	KID_MATCH = 2,    /* seen; *m is its match */
	KID_FULL = -1     /* kid_insert: no room, nothing stored */
};

struct kid_cache;

/* Room for 2^slots_log2 slots (6 .. 24), filled to at most half, and for
 * max_match kernels that a rule owns.  Everything is allocated here.
 * NULL without memory or with bad sizes. */
struct kid_cache *kid_create(unsigned slots_log2, unsigned max_match);
/* No other call may be running or follow. */
void kid_destroy(struct kid_cache *k);

/* Lock-free: KID_UNKNOWN, KID_NONE, or KID_MATCH with *m set.  A NULL
 * handle is never known. */
int kid_lookup(const struct kid_cache *k, const void *handle, struct kid_match **m);

/*
 * Record the decision for handle (d->rule < 0: no rule).  If another
 * thread inserted the handle meanwhile, its decision stands and is what
 * this returns: KID_NONE, KID_MATCH with *m set, or KID_FULL when the
 * table or the match pool is full (the handle stays unknown).
 */
int kid_insert(struct kid_cache *k, const void *handle, const struct kid_desc *d,
	       struct kid_match **m);

/* Handles inserted, how many of them had a name, and how many a rule
 * owns (hints while inserts run). */
unsigned kid_count(const struct kid_cache *k);
unsigned kid_named(const struct kid_cache *k);
unsigned kid_matched(const struct kid_cache *k);

#endif
