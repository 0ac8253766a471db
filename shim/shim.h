/*
 * shim.h - the floor's one header for the layer above it.
 *
 * shim/ is the CUDA ABI of libmoeft.so and nothing else: the exported
 * runtime and driver symbols, the real ones behind them, the dlsym and
 * cuGetProcAddress paths, the kernel decision cache of the launch path, and
 * the few device operations moeft needs for itself.  It knows no log, no
 * profile and no policy.
 *
 * Upward it calls only through the table of struct shim_events that the
 * layer above defines (shim_events_above): at most one event per
 * application-level CUDA call (the reentrancy rule is in hooks.h), and
 * nothing at all for a launch of a kernel nobody claimed.  Downward, the
 * layer above calls the functions below.  No CUDA header: handles, streams
 * and events are opaque pointers, device addresses are uint64_t, driver
 * errors are CUresult values as int.
 */
#ifndef MOEFT_SHIM_H
#define MOEFT_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "kernel_id.h"

/* Message levels, those of the log library (the layer above checks). */
enum shim_log_level { SHIM_LOG_ERROR = 0, SHIM_LOG_WARN, SHIM_LOG_INFO, SHIM_LOG_DEBUG };

/* The API an allocation came through; the numbers are those of the log's
 * ALLOC records (the layer above checks). */
enum shim_alloc_api {
	SHIM_ALLOC_CUDA_MALLOC = 1,
	SHIM_ALLOC_CUDA_MALLOC_ASYNC = 2,
	SHIM_ALLOC_CUDA_MALLOC_FROM_POOL_ASYNC = 3,
	SHIM_ALLOC_CUDA_MALLOC_MANAGED = 4,
	SHIM_ALLOC_CU_MEM_ALLOC = 6,
	SHIM_ALLOC_CU_MEM_ALLOC_ASYNC = 7,
	SHIM_ALLOC_CU_MEM_ALLOC_FROM_POOL_ASYNC = 8,
};

/* How a launch names its kernel. */
enum shim_func_kind {
	SHIM_FUNC_HOST = 1,    /* the runtime's const void *func: host stub (or a
				  cudaKernel_t passed as one) */
	SHIM_FUNC_KERNEL = 2,  /* cudaKernel_t / CUkernel */
	SHIM_FUNC_DRIVER = 3   /* CUfunction */
};

/* A launch about to be forwarded. */
struct shim_launch {
	int kind;                 /* enum shim_func_kind */
	const void *func;
	unsigned grid[3], block[3];
	void **args;              /* NULL when the launch passed none we can read */
	void *stream;             /* the CUstream it runs on (per-thread default
				     stream: CU_STREAM_PER_THREAD) */
	struct kid_match *match;  /* the claimed kernel; NULL for an unclaimed
				     one shown because of shim_watch_launches */
};

/*
 * What the shim reports.  Every member must be set; each is called only
 * while events are on (start returned 1), from the application's thread
 * inside its CUDA call, and must never fail that call.
 */
struct shim_events {
	/* The first hooked call: 1 to receive events from now on, 0 never.
	 * Thread-safe; concurrent first calls must agree. */
	int (*start)(void);
	/* The application's call site of an allocation that succeeded, skip
	 * frames out from the caller (called straight from the wrapper). */
	uint64_t (*callsite)(unsigned skip);
	/* A device allocation succeeded (api: enum shim_alloc_api); the one at
	 * base is about to be freed (before the real free, so the address
	 * cannot be handed out again first); cuMemMap succeeded; cuMemUnmap is
	 * about to run. */
	void (*alloc)(unsigned api, uint64_t base, uint64_t size, uint64_t fingerprint);
	void (*free)(uint64_t base);
	void (*map)(uint64_t va, uint64_t size, uint64_t handle, uint64_t fingerprint);
	void (*unmap)(uint64_t va, uint64_t size);
	/* cuModuleLoadData(Ex) loaded module from image; image NULL: the
	 * module is about to be unloaded. */
	void (*module)(void *module, const void *image);
	/* A kernel handle's first launch, named: the rule that claims it, or
	 * -1.  params_known: the driver reported the parameter sizes,
	 * sizes[0..nparams); module: the CUmodule of a CUfunction, or NULL. */
	int (*claim)(const char *name, const uint32_t *sizes, unsigned nparams,
		     int params_known, void *module);
	/* A launch of a claimed kernel (or of any, while watched), before it
	 * is forwarded; 1 when `launched` must follow once it succeeded. */
	int (*launch)(const struct shim_launch *l);
	void (*launched)(void);
	/* A graph is about to be launched on stream; a stream capture began
	 * (1) or ended (0) on stream; the calling thread's wait for the GPU
	 * returned (a stream or event synchronize). */
	void (*graph_launch)(void *stream);
	void (*capture)(int begin, void *stream);
	void (*sync)(void);
	/* One line of the shim's own (a missing real symbol, a full cache). */
	void (*log)(int level, const char *line);
};

/*
 * The table, defined by the layer above (preload/dispatch.c) and bound when
 * libmoeft.so is linked: there from the very first hooked call, even one
 * made by another library's constructor before ours ran.  The shim names
 * it and nothing else of the layer above; without it (the shim linked on
 * its own) every call is forwarded untouched.
 */
extern const struct shim_events shim_events_above __attribute__((weak));

/* 1 when this process's CUDA calls reach the shim's wrappers: libmoeft.so
 * is in the global scope, as LD_PRELOAD puts it, not dlopen'ed locally. */
int shim_interposing(void);

/* Whether events are on, starting them (the layer above's start event) if
 * no hooked call has yet: 1 when on, 0 when off for good. */
int shim_events_on(void);

/* No more events in this process, for good (a child of fork()). */
void shim_events_off(void);

/* While on, every launch is shown to events->launch, claimed or not. */
void shim_watch_launches(int on);

/* Kernel launches seen while events were on. */
unsigned long long shim_launches(void);

/* Kernel handles seen, named, and claimed. */
void shim_kernel_counts(unsigned *seen, unsigned *named, unsigned *claimed);

/*
 * Device operations, through the real driver entry points (never our
 * wrappers, so none is an application event), in the calling thread's
 * current context.  Each returns 0 or the driver's CUresult
 * (CUDA_ERROR_NOT_FOUND, 500, when the driver lacks the entry point).
 */

/* Load a module from the first of images[] the driver takes and find
 * names[i] in it into fns[i]; each must take one parameter of sizes[i]
 * bytes where the driver can tell (a stale or foreign image fails here, not
 * at a launch inside a stream capture).  The context current now becomes
 * the one shim_dev_bind_thread binds.  0, or -1 with one line in why. */
int shim_dev_load(const void *const images[], unsigned nimages, const char *const names[],
		  const size_t sizes[], unsigned n, void *fns[], char *why, size_t whylen);
/* Launch fn (from shim_dev_load) with its one parameter *arg. */
int shim_dev_launch(void *fn, unsigned blocks, unsigned threads, void *stream, void *arg);
/* len bytes of pinned host memory mapped for every context: *host, and
 * *dev the device's address of the same bytes.  The calling thread's
 * stream capture mode is relaxed around the allocation (as CUDA's own
 * libraries do), so it never invalidates a graph being captured. */
int shim_dev_host_alloc(size_t len, void **host, uint64_t *dev);
void shim_dev_host_free(void *host);
/* len bytes of device memory, never freed (moeft's own state beside the
 * pools); the capture mode relaxed around it as for shim_dev_host_alloc. */
int shim_dev_alloc(size_t len, uint64_t *dev);
int shim_dev_stream(void **stream);     /* non-blocking */
void shim_dev_stream_free(void *stream); /* its work still runs */
int shim_dev_event(void **event);       /* without timing */
int shim_dev_timed_event(void **event); /* with timing */
/* Milliseconds between two completed timed events (CUDA_ERROR_NOT_READY
 * while either is pending; CUDA_ERROR_NOT_FOUND, silently, from a driver
 * older than CUDA 12.8). */
int shim_dev_elapsed(void *start, void *end, float *ms);
void shim_dev_event_free(void *event);
int shim_dev_record(void *event, void *stream);
int shim_dev_wait(void *stream, void *event);
/* stream waits until the 32-bit word at the device address addr reaches
 * value, cyclically: (int32_t)(word - value) >= 0.  CUDA_ERROR_NOT_SUPPORTED
 * where the device has no stream memory operations. */
int shim_dev_wait_value(void *stream, uint64_t addr, uint32_t value);
int shim_dev_query(void *event);        /* 0: done; CUDA_ERROR_NOT_READY */
int shim_dev_sync(void *event);         /* the host waits for it */
int shim_dev_copy_to_device(uint64_t dev, const void *src, size_t len, void *stream);
/* The same, done when it returns: on a private stream the calling thread
 * waits for (never the device or another stream), the capture mode relaxed
 * around it.  For moeft's own state, once. */
int shim_dev_write(uint64_t dev, const void *src, size_t len);
int shim_dev_zero(uint64_t dev, size_t len, void *stream);
/* 1 when stream is being captured into a graph, 0 when not, -1 when the
 * driver cannot tell. */
int shim_dev_capturing(void *stream);
/* The device the calling thread works on (its current context's, else
 * the runtime's current device) as a name that stays the same across
 * restarts: its PCI bus id ("0000:3b:00.0", whatever ordinal
 * CUDA_VISIBLE_DEVICES gives it), else "dev" and its ordinal; a MIG
 * instance adds "-mig-" and 12 hex digits of its UUID
 * ("0000:3b:00.0-mig-4f1c0e2a9b3d").  0, or -1 when the driver cannot
 * tell. */
int shim_dev_name(char *out, size_t len);
/* The calling thread's current context, NULL when it has none. */
void *shim_dev_current(void);
/* Make the calling thread, one of moeft's own, a device thread: context
 * (NULL: the one of shim_dev_load) current in it, and its capture mode
 * relaxed for good, so that its event queries never invalidate a graph
 * the application is capturing in the global mode (CUDA counts a query as
 * potentially unsafe then, from any thread in that mode). */
void shim_dev_bind_thread(void *context);

#endif
