/*
 * runtime.h - the policy entry points the interposer (shim/) calls, one
 * per intercepted event, and the preload's log.
 *
 * The shim turns each application-level CUDA call into at most one call
 * here (the reentrancy rule is in shim/shim.h).  Everything behind these
 * functions is fail-open: no error is ever returned to the shim, a failure
 * is logged once and the event dropped.  No CUDA header: handles and
 * device pointers are opaque, the shim names kernels for us through the
 * identify callback of each launch.
 */
#ifndef MOEFT_RUNTIME_H
#define MOEFT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "capture.h"
#include "profile.h"

/*
 * Whether events should be sent.  The first call initialises the policy:
 * configuration (MOEFT_*), profile, log (MOEFT_WAL), tables.  Any failure
 * there logs one line and leaves the process un-instrumented (or, under
 * MOEFT_STRICT, ends it with status 1); MOEFT_DISABLE=1 makes this 0
 * silently.  Called only from inside a hooked CUDA call, so a process that
 * never uses CUDA never initialises anything.  Thread-safe; concurrent
 * first calls wait for one initialisation.  0 after fork() in the child.
 */
int rt_enabled(void);

/* One line "moeft: ..." on stderr when level (enum wal_log_level) is at or
 * below MOEFT_LOG (warn until the configuration is read). */
void rt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A device allocation succeeded: api is enum alloc_api; fingerprint is the
 * application's call site (fingerprint_callsite). */
void rt_alloc(unsigned api, uint64_t base, uint64_t size, uint64_t fingerprint);
/* The allocation at base is about to be freed (called before the real free,
 * so the address cannot be handed out again before we forget it). */
void rt_free(uint64_t base);
/* cuMemMap succeeded / cuMemUnmap is about to run. */
void rt_map(uint64_t va, uint64_t size, uint64_t handle, uint64_t fingerprint);
void rt_unmap(uint64_t va, uint64_t size);

/* How a launch names its kernel. */
enum rt_func_kind {
	RT_FUNC_HOST = 1,    /* the runtime's const void *func: host stub (or a
				cudaKernel_t passed as one) */
	RT_FUNC_KERNEL = 2,  /* cudaKernel_t / CUkernel */
	RT_FUNC_DRIVER = 3   /* CUfunction */
};

/* What identify reports about a kernel (the driver owns the name). */
struct rt_kernel_desc {
	const char *name;
	int params_known;      /* 0: the driver cannot tell the parameter sizes */
	unsigned nparams;      /* at most RULE_MAX_PARAMS (first ones if more) */
	uint32_t sizes[RULE_MAX_PARAMS];
};

/* Name a kernel: 0 with *d filled, or -1 when it cannot be named. */
typedef int (*rt_identify_fn)(int kind, const void *func, struct rt_kernel_desc *d);

struct rt_launch {
	int kind;                 /* enum rt_func_kind */
	const void *func;
	unsigned grid[3], block[3];
	void **args;              /* NULL when the launch passed none we can read */
	void *stream;             /* the CUstream it ran on (per-thread default
				     stream: CU_STREAM_PER_THREAD) */
	rt_identify_fn identify;  /* called on the first launch of func only */
};

/* A kernel launch succeeded.  Costs one cache lookup unless a rule owns the
 * kernel; never locks, allocates or synchronises except on a handle's
 * first launch. */
void rt_launch(const struct rt_launch *l);

/* A graph launch succeeded; a stream capture began or ended. */
void rt_graph_launch(void);
void rt_capture(int begin);

/*
 * The device side of capture, which the shim provides (shim/capture.c):
 * real driver calls in the calling thread's current context.
 *
 * rt_dev_open loads moeft's kernels and allocates len bytes of pinned host
 * memory mapped for the device: 0 with *host and *dev (the device's
 * address of the same bytes), or -1 with one line in why.
 * rt_dev_append enqueues moeft_capture_append(*a) on stream, one block,
 * once rt_dev_open succeeded: 0, or the driver's error.
 */
int rt_dev_open(size_t len, void **host, uint64_t *dev, char *why, size_t whylen);
int rt_dev_append(void *stream, const struct cap_append_args *a);

#endif
