/*
 * kernel_id.h - the kernel decision cache: per kernel handle launched,
 * whether the layer above claims the kernel, cached by the handle.
 *
 * A launch names its kernel by a handle: a host stub pointer or a
 * cudaKernel_t (runtime), a CUfunction (driver).  Naming a kernel costs
 * driver calls and the layer above a glob match against every profile
 * rule, so the shim does it once per handle and caches the decision here:
 * unclaimed, or claimed by a rule, with the kernel's parameter sizes (for
 * the owner's bounds checks).  Each launch then costs one lookup, which
 * takes no lock and allocates nothing; only the first launch of a handle
 * (a miss) takes the insert mutex.
 *
 * Handles of the three kinds are addresses of distinct objects, so one
 * table serves them all.  Entries are never removed: a module unloaded and
 * another loaded at the same address would inherit the old decision.  So
 * at cuModuleUnload the matches of the module's kernels are switched off
 * (kid_forget_module): a kernel loaded later at a reused address is not
 * evaluated (never read with another kernel's parameters).  Engines load
 * their kernels once; Triton unloads a kernel only when it drops it.
 * No CUDA header: the handle is an opaque pointer.
 */
#ifndef MOEFT_KERNEL_ID_H
#define MOEFT_KERNEL_ID_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define KID_NAME_MAX 128   /* bytes of a kernel name kept for messages */
#define KID_MAX_PARAMS 64  /* parameter sizes kept per kernel */

/* What the caller learned about a kernel it saw for the first time. */
struct kid_desc {
	int rule;                /* what the layer above claims it as (its
				    profile rule); -1: unclaimed */
	const char *name;        /* may be NULL (the kernel could not be named) */
	int params_known;        /* the parameter sizes below are the driver's */
	unsigned nparams;        /* at most KID_MAX_PARAMS */
	uint32_t sizes[KID_MAX_PARAMS];
	void *module;            /* the CUmodule it came from, NULL: not known */
};

/* The cached decision for a kernel that a rule owns.  Never moves or
 * disappears while the cache lives. */
struct kid_match {
	int rule;
	int params_known;
	unsigned nparams;
	atomic_int off;          /* set once the rule proved not to fit, or its
				    module was unloaded */
	void *module;            /* kid_desc's */
	uint32_t sizes[KID_MAX_PARAMS];
	char name[KID_NAME_MAX]; /* truncated copy, for messages */
};

enum kid_result {
	KID_UNKNOWN = 0,  /* never inserted */
	KID_NONE = 1,     /* seen; no rule owns it */
	KID_MATCH = 2,    /* seen; *m is its match */
	KID_FULL = -1     /* kid_insert: no room, nothing stored */
};

/*
 * The cache: open addressing with linear probing over (handle, value)
 * slots, value 0 = no rule, n > 0 = matches[n - 1].  Its fields are
 * kernel_id.c's; they are here only so that kid_lookup, the one call of
 * every launch, can be inline.
 *
 * Publication: an insert writes a slot's value, then stores its key with
 * release order; a lookup loads the key with acquire order and reads the
 * value only after seeing its own key, so it never reads a value that is
 * not yet there.  Keys are never cleared, so a probe that meets an empty
 * slot has proved the handle absent at that moment.  The table is kept at
 * most half full, which bounds probe lengths and guarantees an empty slot.
 */
struct kid_slot {
	_Atomic uintptr_t key;      /* 0: empty */
	atomic_uint value;
};

struct kid_cache {
	struct kid_slot *slots;
	uintptr_t mask;
	unsigned shift;             /* 64 - slots_log2, for the hash */
	struct kid_match *matches;
	unsigned max_count;         /* half the slots */
	atomic_uint count;
	atomic_uint named;
	unsigned max_match;
	atomic_uint nmatch;
	pthread_mutex_t lock;       /* serialises inserts only */
};

/* Room for 2^slots_log2 slots (6 .. 24), filled to at most half, and for
 * max_match kernels that a rule owns.  Everything is allocated here.
 * NULL without memory or with bad sizes. */
struct kid_cache *kid_create(unsigned slots_log2, unsigned max_match);
/* No other call may be running or follow. */
void kid_destroy(struct kid_cache *k);

/* Fibonacci hashing: handles are aligned addresses whose low bits are
 * mostly zero; the multiply spreads the high ones. */
static inline uintptr_t kid_home(const struct kid_cache *k, uintptr_t key)
{
	return (uintptr_t)(((uint64_t)key * UINT64_C(0x9E3779B97F4A7C15)) >> k->shift);
}

/* A slot's value as a decision: KID_NONE, or KID_MATCH with *m set. */
static inline int kid_decode(const struct kid_cache *k, unsigned value, struct kid_match **m)
{
	if (value == 0)
		return KID_NONE;
	*m = &k->matches[value - 1];
	return KID_MATCH;
}

/* Lock-free: KID_UNKNOWN, KID_NONE, or KID_MATCH with *m set.  A NULL
 * handle is never known: it stops at the first empty slot. */
static inline int kid_lookup(const struct kid_cache *k, const void *handle,
			     struct kid_match **m)
{
	uintptr_t key = (uintptr_t)handle, i, got;

	for (i = kid_home(k, key);; i = (i + 1) & k->mask) {
		got = atomic_load_explicit(&k->slots[i].key, memory_order_acquire);
		if (got == 0)
			return KID_UNKNOWN;
		if (got == key)
			return kid_decode(k, atomic_load_explicit(&k->slots[i].value,
								  memory_order_relaxed), m);
	}
}

/*
 * Record the decision for handle (d->rule < 0: no rule).  If another
 * thread inserted the handle meanwhile, its decision stands and is what
 * this returns: KID_NONE, KID_MATCH with *m set, or KID_FULL when the
 * table or the match pool is full (the handle stays unknown).
 */
int kid_insert(struct kid_cache *k, const void *handle, const struct kid_desc *d,
	       struct kid_match **m);

/* Switch off the matches of module's kernels (about to be unloaded). */
void kid_forget_module(struct kid_cache *k, const void *module);

/* Handles inserted, how many of them had a name, and how many a rule
 * owns (hints while inserts run). */
unsigned kid_count(const struct kid_cache *k);
unsigned kid_named(const struct kid_cache *k);
unsigned kid_matched(const struct kid_cache *k);

#endif
