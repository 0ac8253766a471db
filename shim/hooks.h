/*
 * hooks.h - internals shared by the shim's files: hook ids, the real-symbol
 * table, the reentrancy guard, the events' switch (shim.h is what the
 * layer above sees).
 *
 * The reentrancy rule.  Each thread counts how deep it is inside our
 * wrappers.  Only a call that enters at depth 0 (straight from the
 * application) produces an event for preload/; everything nested inside
 * it, cudart's cudaMalloc calling cuMemAlloc_v2 through the table it got
 * from cuGetProcAddress, or moeft's own calls to name a kernel, is
 * forwarded untouched.  So one application call is one event, whichever
 * layers it passes through.  The lookups of cuGetProcAddress are the one
 * exception (kind ALWAYS): they hand out wrappers at any depth, because
 * cudart fills its table while initialising inside the application's
 * first runtime call.
 */
#ifndef MOEFT_HOOKS_H
#define MOEFT_HOOKS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "shim.h"

/* Declared for C++ only in crt/device_functions.h; the type every
 * `<<<>>>` launch of CUDA 13 goes through. */
extern cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
				      void **args, size_t sharedMem, cudaStream_t stream);

/*
 * The runtimes we stand in front of.  Each runtime wrapper is exported
 * twice, under each runtime's version node (its soname), and forwards to
 * that runtime: a caller bound to libcudart.so.12 reaches our 12 twin and
 * through it libcudart.so.12, in the same process as callers of 13.  The
 * hooked entry points have the same ABI in both.  An unversioned caller
 * gets 13's (the default version).
 */
#define SHIM_CUDART_SONAME "libcudart.so.13"
#define SHIM_CUDART12_SONAME "libcudart.so.12"
#define SHIM_CUDA_SONAME "libcuda.so.1"

/* Ids: every entry of hooks.def, then the 12 twin of every runtime one
 * (SHIM_cudaMalloc_rt12). */
enum shim_id {
#define RT(name, decl, kind, params, args) SHIM_##name,
#define DRV(name, query, version, flavor, kind, params, args) SHIM_##name,
#define RT_USE(name, params) SHIM_##name,
#define DRV_USE(name, params) SHIM_##name,
#include "hooks.def"
#undef RT
#undef DRV
#undef RT_USE
#undef DRV_USE
#define RT(name, decl, kind, params, args) SHIM_##name##_rt12,
#define DRV(name, query, version, flavor, kind, params, args)
#define RT_USE(name, params) SHIM_##name##_rt12,
#define DRV_USE(name, params)
#include "hooks.def"
#undef RT
#undef DRV
#undef RT_USE
#undef DRV_USE
	SHIM_COUNT
};

enum shim_kind { SHIM_ALLOC = 1, SHIM_EVENT, SHIM_AFTER, SHIM_PASS, SHIM_ALWAYS };
enum shim_phase { SHIM_PRE = 1, SHIM_POST = 2 };

/* What a wrapper tells its event handler. */
struct shim_call {
	int phase;             /* before or after the real call */
	int status;            /* SHIM_POST: what the real call returned */
	int rt12;              /* a caller of libcudart.so.12's entry point */
	uint64_t fingerprint;  /* SHIM_POST of an ALLOC hook that succeeded */
};

/* The real function behind id, resolved on first use: NULL when it cannot
 * be found (logged once per symbol; the wrapper then fails the call).
 * With caller, a code address of the application's call: a runtime entry
 * found nowhere else is looked up in the scope of the object holding it
 * (its private copy of the runtime, real.c). */
extern _Atomic(void *) shim_reals[SHIM_COUNT];
void *shim_resolve(unsigned id);
void *shim_resolve_for(unsigned id, const void *caller);
/* The same without a word when there is none: for probes that expect a
 * machine without the driver (the device's name at the log's start). */
void *shim_probe(unsigned id);

static inline void *shim_real(unsigned id)
{
	void *p = atomic_load_explicit(&shim_reals[id], memory_order_acquire);

	return p ? p : shim_resolve(id);
}

static inline void *shim_real_for(unsigned id, const void *caller)
{
	void *p = atomic_load_explicit(&shim_reals[id], memory_order_acquire);

	return p ? p : shim_resolve_for(id, caller);
}

/* dlsym(handle, name of hook id) on an explicit handle: our wrapper when
 * the real lookup finds the function our wrapper calls, else what it finds. */
void *shim_dlsym(unsigned id, void *handle);

/* The hook that dlsym(handle, name) should be answered with, or -1. */
int shim_export_id(const char *name);

/* cuGetProcAddress(symbol, version, flags) returned p: what the caller
 * gets (our wrapper of that variant, or p). */
void *shim_proc_adopt(const char *symbol, int version, uint64_t flags, void *p);

/* The C library's dlsym, which ours stands in front of (dlsym.c).  Our
 * own lookups use it, as the caller of RTLD_NEXT it is libmoeft.so. */
void *shim_real_dlsym(void *handle, const char *name);

/* Our exported wrapper of id (NULL for the *_USE entries). */
void *shim_wrapper(unsigned id);

/* Function and object pointers: dlsym's void * and the code it points at.
 * ISO C has no cast between them; POSIX guarantees they are the same size. */
typedef void (*shim_fn)(void);
_Static_assert(sizeof(shim_fn) == sizeof(void *), "function pointers fit in void *");

static inline void *shim_fn_ptr(shim_fn f)
{
	void *p;

	memcpy(&p, &f, sizeof p);
	return p;
}

extern _Thread_local unsigned shim_depth;

/* ---- events (events.c) ---------------------------------------------------- */

enum { SHIM_UNSET = 0, SHIM_ON = 1, SHIM_OFF = 2 };

/* What the hidden names below are: read by the wrappers without an
 * indirection. */
#define SHIM_HIDDEN __attribute__((visibility("hidden")))

extern atomic_int shim_state SHIM_HIDDEN;
extern atomic_int shim_watch SHIM_HIDDEN;
/* The kernel decision cache; set before shim_state first becomes ON. */
extern struct kid_cache *shim_kids SHIM_HIDDEN;
/* This thread's launch counter, which only it writes; NULL until its first
 * launch, and for good in threads beyond the counters (they share one). */
extern _Thread_local atomic_ullong *shim_my_launches SHIM_HIDDEN
	__attribute__((tls_model("initial-exec")));

int shim_start(void);
void shim_count_launch_slow(void);

/*
 * Whether events are on.  The first call asks the layer above (its start
 * event); without a layer above, never.  0 after shim_events_off.
 */
static inline int shim_on(void)
{
	int s = atomic_load_explicit(&shim_state, memory_order_acquire);

	return s == SHIM_UNSET ? shim_start() : s == SHIM_ON;
}

static inline void shim_count_launch(void)
{
	atomic_ullong *n = shim_my_launches;

	if (n)
		atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	else
		shim_count_launch_slow();
}

/* One line "moeft: ..." through the layer above, or on stderr without
 * one. */
void shim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A kernel handle's first launch (first_launch.c): name it (a host stub
 * through the runtime it was launched with: rt12 for libcudart.so.12), ask
 * the layer above whether it claims it, cache the decision.  KID_NONE, or
 * KID_MATCH with *m set. */
int shim_first_launch(int kind, int rt12, const void *func, struct kid_match **m);

#endif
