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

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "capture.h"
#include "kernel_id.h"
#include "kvsnap.h"
#include "profile.h"

/* What the inline functions below read, owned by runtime.c: hidden, so
 * that the shim reaches them without an indirection. */
#define RT_HIDDEN __attribute__((visibility("hidden")))

enum { RT_UNINIT = 0, RT_ACTIVE = 1, RT_OFF = 2 };

/* The exit status of a process the preload stops because it cannot take
 * the restore it was started for (restore.h). */
#define RT_EXIT_RESTORE 3

extern atomic_int rt_state RT_HIDDEN;
/* The kernel decision cache; set before rt_state first becomes RT_ACTIVE. */
extern struct kid_cache *rt_kids RT_HIDDEN;
/* Restore mode until the KV images are enqueued: every launch is described
 * to rt_launch, so that the pools' initialiser is seen (runtime.c). */
extern atomic_int rt_restore_pending RT_HIDDEN;
/* This thread's launch counter, which only it writes; NULL until its first
 * launch, and for good in threads beyond the counters (they share one). */
extern _Thread_local atomic_ullong *rt_my_launches RT_HIDDEN
	__attribute__((tls_model("initial-exec")));

/* The slow paths of the inline functions below: rt_enabled's first call
 * (it initialises), a launch by a thread without a counter of its own. */
int rt_start(void);
void rt_count_launch_slow(void);

/*
 * Whether events should be sent.  The first call initialises the policy:
 * configuration (MOEFT_*), profile, log (MOEFT_WAL), tables.  Any failure
 * there logs one line and leaves the process un-instrumented (or, under
 * MOEFT_STRICT, ends it with status 1); MOEFT_DISABLE=1 makes this 0
 * silently.  Called only from inside a hooked CUDA call, so a process that
 * never uses CUDA never initialises anything.  Thread-safe; concurrent
 * first calls wait for one initialisation.  0 after fork() in the child.
 */
static inline int rt_enabled(void)
{
	int s = atomic_load_explicit(&rt_state, memory_order_acquire);

	return s == RT_UNINIT ? rt_start() : s == RT_ACTIVE;
}

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
	int cached;               /* what rt_launch_seen returned, */
	struct kid_match *match;  /* and the match it set */
};

/* What a launch leaves for after it succeeded: the capture of a routing
 * hit, which must follow the launch in its stream. */
struct rt_after {
	void *stream;
	int restore;            /* enqueue the restore's copies after the launch */
	int capture;            /* append the routing of the hit below */
	int rule;
	uint32_t layer;
	uint32_t lane;          /* of the capture's entry (window.h) */
	struct rule_hit hit;
};

/*
 * A kernel is about to be launched, while rt_enabled(): count it and
 * return the decision cached for func.  KID_NONE: no rule owns the kernel,
 * and that is all a launch of it costs.  Otherwise (KID_UNKNOWN, a first
 * launch, or KID_MATCH with *m set) describe the launch, with the
 * decision, to rt_launch.  Never locks, allocates or synchronises.
 */
static inline int rt_launch_seen(const void *func, struct kid_match **m)
{
	atomic_ullong *n = rt_my_launches;

	if (n)
		atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	else
		rt_count_launch_slow();
	return kid_lookup(rt_kids, func, m);
}

/*
 * The rest of a launch rt_launch_seen did not finish, before the launch:
 * name a kernel on its handle's first launch (which locks and allocates),
 * evaluate its rule, move the step clock (which may enqueue a window
 * boundary and a step marker on the stream ahead of the launch).  Returns
 * 1 when *after must go to rt_launch_after once the launch succeeded.
 * Called for every launch while rt_restore_pending is set.
 */
int rt_launch(const struct rt_launch *l, struct rt_after *after);
void rt_launch_after(const struct rt_after *after);

/* A graph is about to be launched on stream (a step starts there); a
 * stream capture began or ended; the calling thread waited for the GPU
 * (a stream, event or device synchronize returned). */
void rt_graph_launch(void *stream);
void rt_capture(int begin);
void rt_sync(void);

/*
 * The device side of capture, which the shim provides (shim/capture.c):
 * real driver calls in the calling thread's current context.
 *
 * rt_dev_open loads moeft's kernels and allocates len bytes of pinned host
 * memory mapped for the device: 0 with *host and *dev (the device's
 * address of the same bytes), or -1 with one line in why.
 * The others return 0 or the driver's error (a CUresult), and need
 * rt_dev_open to have succeeded.  rt_dev_append and rt_dev_snapshot
 * enqueue moeft_capture_append(*a) (one block) and moeft_kv_snapshot(*a).
 * rt_dev_capturing is 1 when stream is being captured into a graph, 0 when
 * not, -1 when the driver cannot tell.
 */
int rt_dev_open(size_t len, void **host, uint64_t *dev, char *why, size_t whylen);
int rt_dev_append(void *stream, const struct cap_append_args *a);
int rt_dev_snapshot(void *stream, const struct kv_snap_args *a);
int rt_dev_capturing(void *stream);
int rt_dev_host_alloc(size_t len, void **host, uint64_t *dev);
void rt_dev_host_free(void *host);
int rt_dev_stream(void **stream);     /* non-blocking */
int rt_dev_event(void **event);       /* without timing */
int rt_dev_record(void *event, void *stream);
int rt_dev_wait(void *stream, void *event);
int rt_dev_query(void *event);        /* 0: done; CUDA_ERROR_NOT_READY */
void rt_dev_bind_thread(void);        /* make the ring's context current */
int rt_dev_copy_to_device(uint64_t dev, const void *src, size_t len, void *stream);

#endif
