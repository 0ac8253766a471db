/*
 * wrappers.c - the exported CUDA entry points, generated from hooks.def,
 * and what each one reports through the layer above's events (shim.h).
 *
 * Every wrapper has the same shape: find the real function (or fail the
 * call with the API's "not initialized" error), count one level of depth,
 * let its handler see the call before (except for kind AFTER) and after
 * the real one when the call came straight from the application (hooks.h
 * has the rule), return what the real function returned.  The handlers
 * below are the only per-function code: they turn arguments into events
 * and never touch an argument the call did not make valid (an out-pointer
 * is read only after success; launch arguments are the owner's to read,
 * within the parameter sizes the cache holds).
 */
#include <stdint.h>
#include <string.h>

#include "hooks.h"

_Thread_local unsigned shim_depth __attribute__((tls_model("initial-exec")));

static inline int shim_enter(int kind)
{
	int outer = shim_depth++ == 0;

	if (kind == SHIM_ALWAYS)
		return 1;
	return kind != SHIM_PASS && outer && shim_on();
}

static uint64_t addr(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* ---- event handlers ------------------------------------------------------ */

/* Whether the launch in flight on this thread wants `launched` after it (a
 * depth-0 launch never nests in another). */
static _Thread_local int launch_armed __attribute__((tls_model("initial-exec")));

/* What the fast path left: a claimed kernel, or any while launches are
 * watched.  Only these pay for describing the launch. */
static void launch_rest(struct kid_match *m, int kind, const void *func, unsigned gx,
			unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			void **args, void *stream)
{
	struct shim_launch l = {
		.kind = kind, .func = func, .grid = { gx, gy, gz }, .block = { bx, by, bz },
		.args = args, .stream = stream, .match = m,
	};

	launch_armed = shim_events_above.launch(&l);
}

/* A launch, before and after the real one.  One of a kernel nobody claimed
 * costs a count and a lookup before, and one thread-local load after. */
static inline void launched(const struct shim_call *c, int kind, const void *func, unsigned gx,
			    unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			    void **args, void *stream)
{
	struct kid_match *m = NULL;
	int d;

	if (c->phase == SHIM_PRE) {
		shim_count_launch();
		d = kid_lookup(shim_kids, func, &m);
		if (d == KID_UNKNOWN && func)
			d = shim_first_launch(kind, c->rt12, func, &m);
		if (d == KID_MATCH || atomic_load_explicit(&shim_watch, memory_order_relaxed))
			launch_rest(d == KID_MATCH ? m : NULL, kind, func, gx, gy, gz, bx, by, bz,
				    args, stream);
	} else if (launch_armed) {
		launch_armed = 0;
		if (c->status == 0)
			shim_events_above.launched();
	}
}

#define OK_AFTER(c) ((c)->phase == SHIM_POST && (c)->status == 0)

/* Stream 0 of a _ptsz entry point is the calling thread's default stream,
 * which the driver names CU_STREAM_PER_THREAD (stream 0 is the legacy one). */
static void *ptsz(void *stream)
{
	return stream ? stream : (void *)CU_STREAM_PER_THREAD;
}

static void ev_cudaMalloc(const struct shim_call *c, void **devPtr, size_t size)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CUDA_MALLOC, addr(*devPtr), size, c->fingerprint);
}

static void ev_cudaMallocAsync(const struct shim_call *c, void **devPtr, size_t size,
			       cudaStream_t hStream)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CUDA_MALLOC_ASYNC, addr(*devPtr), size, c->fingerprint);
}
#define ev_cudaMallocAsync_ptsz ev_cudaMallocAsync

static void ev_cudaMallocFromPoolAsync(const struct shim_call *c, void **ptr, size_t size,
				       cudaMemPool_t memPool, cudaStream_t stream)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CUDA_MALLOC_FROM_POOL_ASYNC, addr(*ptr), size, c->fingerprint);
}
#define ev_cudaMallocFromPoolAsync_ptsz ev_cudaMallocFromPoolAsync

static void ev_cudaMallocManaged(const struct shim_call *c, void **devPtr, size_t size,
				 unsigned int flags)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CUDA_MALLOC_MANAGED, addr(*devPtr), size, c->fingerprint);
}

/* Frees are recorded before the real call: once it returns, another thread
 * may be handed the same address. */
static void ev_cudaFree(const struct shim_call *c, void *devPtr)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.free(addr(devPtr));
}

static void ev_cudaFreeAsync(const struct shim_call *c, void *devPtr, cudaStream_t hStream)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.free(addr(devPtr));
}
#define ev_cudaFreeAsync_ptsz ev_cudaFreeAsync

static void ev_cudaLaunchKernel(const struct shim_call *c, const void *func, dim3 gridDim,
				dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream)
{
	launched(c, SHIM_FUNC_HOST, func, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
		 blockDim.z, args, stream);
}

static void ev_cudaLaunchKernel_ptsz(const struct shim_call *c, const void *func, dim3 gridDim,
				     dim3 blockDim, void **args, size_t sharedMem,
				     cudaStream_t stream)
{
	ev_cudaLaunchKernel(c, func, gridDim, blockDim, args, sharedMem, ptsz(stream));
}

static void ev___cudaLaunchKernel(const struct shim_call *c, cudaKernel_t kernel, dim3 gridDim,
				  dim3 blockDim, void **args, size_t sharedMem,
				  cudaStream_t stream)
{
	launched(c, SHIM_FUNC_KERNEL, kernel, gridDim.x, gridDim.y, gridDim.z, blockDim.x,
		 blockDim.y, blockDim.z, args, stream);
}

static void ev___cudaLaunchKernel_ptsz(const struct shim_call *c, cudaKernel_t kernel,
				       dim3 gridDim, dim3 blockDim, void **args,
				       size_t sharedMem, cudaStream_t stream)
{
	ev___cudaLaunchKernel(c, kernel, gridDim, blockDim, args, sharedMem, ptsz(stream));
}

static void launched_exc(const struct shim_call *c, const cudaLaunchConfig_t *config,
			 const void *func, void **args, void *stream)
{
	if (config)
		launched(c, SHIM_FUNC_HOST, func, config->gridDim.x, config->gridDim.y,
			 config->gridDim.z, config->blockDim.x, config->blockDim.y,
			 config->blockDim.z, args, stream);
}

static void ev_cudaLaunchKernelExC(const struct shim_call *c, const cudaLaunchConfig_t *config,
				   const void *func, void **args)
{
	launched_exc(c, config, func, args, config ? config->stream : NULL);
}

static void ev_cudaLaunchKernelExC_ptsz(const struct shim_call *c,
					const cudaLaunchConfig_t *config, const void *func,
					void **args)
{
	launched_exc(c, config, func, args, ptsz(config ? config->stream : NULL));
}

/* A cooperative launch (all of the grid's blocks resident at once, as
 * vLLM's _deepselect_C launches): to moeft, a launch like any other. */
#define ev_cudaLaunchCooperativeKernel ev_cudaLaunchKernel
#define ev_cudaLaunchCooperativeKernel_ptsz ev_cudaLaunchKernel_ptsz

static void ev_cudaGraphLaunch(const struct shim_call *c, cudaGraphExec_t graphExec,
			       cudaStream_t stream)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.graph_launch(stream);
}

static void ev_cudaGraphLaunch_ptsz(const struct shim_call *c, cudaGraphExec_t graphExec,
				    cudaStream_t stream)
{
	ev_cudaGraphLaunch(c, graphExec, ptsz(stream));
}

static void ev_cudaStreamBeginCapture(const struct shim_call *c, cudaStream_t stream,
				      enum cudaStreamCaptureMode mode)
{
	if (OK_AFTER(c))
		shim_events_above.capture(1, stream);
}
#define ev_cudaStreamBeginCapture_ptsz ev_cudaStreamBeginCapture

static void ev_cudaStreamEndCapture(const struct shim_call *c, cudaStream_t stream,
				    cudaGraph_t *pGraph)
{
	if (OK_AFTER(c))
		shim_events_above.capture(0, stream);
}
#define ev_cudaStreamEndCapture_ptsz ev_cudaStreamEndCapture

/* A host wait that returned: the thread has what it waited for. */
static void ev_cudaStreamSynchronize(const struct shim_call *c, cudaStream_t stream)
{
	if (OK_AFTER(c))
		shim_events_above.sync();
}
#define ev_cudaStreamSynchronize_ptsz ev_cudaStreamSynchronize

static void ev_cudaEventSynchronize(const struct shim_call *c, cudaEvent_t event)
{
	if (OK_AFTER(c))
		shim_events_above.sync();
}

static void ev_cuStreamSynchronize(const struct shim_call *c, CUstream hStream)
{
	if (OK_AFTER(c))
		shim_events_above.sync();
}
#define ev_cuStreamSynchronize_ptsz ev_cuStreamSynchronize

static void ev_cuEventSynchronize(const struct shim_call *c, CUevent hEvent)
{
	if (OK_AFTER(c))
		shim_events_above.sync();
}

static void ev_cuMemAlloc_v2(const struct shim_call *c, CUdeviceptr *dptr, size_t bytesize)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CU_MEM_ALLOC, *dptr, bytesize, c->fingerprint);
}

static void ev_cuModuleLoadData(const struct shim_call *c, CUmodule *module, const void *image)
{
	if (OK_AFTER(c))
		shim_events_above.module(*module, image);
}

static void ev_cuModuleLoadDataEx(const struct shim_call *c, CUmodule *module, const void *image,
				  unsigned int numOptions, CUjit_option *options,
				  void **optionValues)
{
	(void)numOptions, (void)options, (void)optionValues;
	ev_cuModuleLoadData(c, module, image);
}

/* Before the real unload, so the handle is not reused first. */
static void ev_cuModuleUnload(const struct shim_call *c, CUmodule hmod)
{
	if (c->phase != SHIM_PRE)
		return;
	if (shim_kids)
		kid_forget_module(shim_kids, hmod);
	shim_events_above.module(hmod, NULL);
}

static void ev_cuMemFree_v2(const struct shim_call *c, CUdeviceptr dptr)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.free(dptr);
}

static void ev_cuMemAllocAsync(const struct shim_call *c, CUdeviceptr *dptr, size_t bytesize,
			       CUstream hStream)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CU_MEM_ALLOC_ASYNC, *dptr, bytesize, c->fingerprint);
}
#define ev_cuMemAllocAsync_ptsz ev_cuMemAllocAsync

static void ev_cuMemAllocFromPoolAsync(const struct shim_call *c, CUdeviceptr *dptr,
				       size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	if (OK_AFTER(c))
		shim_events_above.alloc(SHIM_ALLOC_CU_MEM_ALLOC_FROM_POOL_ASYNC, *dptr, bytesize, c->fingerprint);
}
#define ev_cuMemAllocFromPoolAsync_ptsz ev_cuMemAllocFromPoolAsync

static void ev_cuMemFreeAsync(const struct shim_call *c, CUdeviceptr dptr, CUstream hStream)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.free(dptr);
}
#define ev_cuMemFreeAsync_ptsz ev_cuMemFreeAsync

static void ev_cuMemMap(const struct shim_call *c, CUdeviceptr ptr, size_t size, size_t offset,
			CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	if (OK_AFTER(c))
		shim_events_above.map(ptr, size, handle, c->fingerprint);
}

static void ev_cuMemUnmap(const struct shim_call *c, CUdeviceptr ptr, size_t size)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.unmap(ptr, size);
}

static void ev_cuLaunchKernel(const struct shim_call *c, CUfunction f, unsigned int gridDimX,
			      unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
			      unsigned int blockDimY, unsigned int blockDimZ,
			      unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
			      void **extra)
{
	launched(c, SHIM_FUNC_DRIVER, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
		 blockDimZ, kernelParams, hStream);
}

static void ev_cuLaunchKernel_ptsz(const struct shim_call *c, CUfunction f,
				   unsigned int gridDimX, unsigned int gridDimY,
				   unsigned int gridDimZ, unsigned int blockDimX,
				   unsigned int blockDimY, unsigned int blockDimZ,
				   unsigned int sharedMemBytes, CUstream hStream,
				   void **kernelParams, void **extra)
{
	ev_cuLaunchKernel(c, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			  sharedMemBytes, ptsz(hStream), kernelParams, extra);
}

static void ev_cuLaunchCooperativeKernel(const struct shim_call *c, CUfunction f,
					 unsigned int gridDimX, unsigned int gridDimY,
					 unsigned int gridDimZ, unsigned int blockDimX,
					 unsigned int blockDimY, unsigned int blockDimZ,
					 unsigned int sharedMemBytes, CUstream hStream,
					 void **kernelParams)
{
	ev_cuLaunchKernel(c, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			  sharedMemBytes, hStream, kernelParams, NULL);
}

static void ev_cuLaunchCooperativeKernel_ptsz(const struct shim_call *c, CUfunction f,
					      unsigned int gridDimX, unsigned int gridDimY,
					      unsigned int gridDimZ, unsigned int blockDimX,
					      unsigned int blockDimY, unsigned int blockDimZ,
					      unsigned int sharedMemBytes, CUstream hStream,
					      void **kernelParams)
{
	ev_cuLaunchKernel(c, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			  sharedMemBytes, ptsz(hStream), kernelParams, NULL);
}

static void launched_ex(const struct shim_call *c, const CUlaunchConfig *config, CUfunction f,
			void **kernelParams, void *stream)
{
	if (config)
		launched(c, SHIM_FUNC_DRIVER, f, config->gridDimX, config->gridDimY,
			 config->gridDimZ, config->blockDimX, config->blockDimY,
			 config->blockDimZ, kernelParams, stream);
}

static void ev_cuLaunchKernelEx(const struct shim_call *c, const CUlaunchConfig *config,
				CUfunction f, void **kernelParams, void **extra)
{
	launched_ex(c, config, f, kernelParams, config ? config->hStream : NULL);
}

static void ev_cuLaunchKernelEx_ptsz(const struct shim_call *c, const CUlaunchConfig *config,
				     CUfunction f, void **kernelParams, void **extra)
{
	launched_ex(c, config, f, kernelParams, ptsz(config ? config->hStream : NULL));
}

static void ev_cuGraphLaunch(const struct shim_call *c, CUgraphExec hGraphExec, CUstream hStream)
{
	if (c->phase == SHIM_PRE)
		shim_events_above.graph_launch(hStream);
}

static void ev_cuGraphLaunch_ptsz(const struct shim_call *c, CUgraphExec hGraphExec,
				  CUstream hStream)
{
	ev_cuGraphLaunch(c, hGraphExec, ptsz(hStream));
}

/* Hand out our wrapper of the variant the driver returned (real.c). */
static void ev_cuGetProcAddress(const struct shim_call *c, const char *symbol, void **pfn,
				int cudaVersion, cuuint64_t flags)
{
	if (OK_AFTER(c) && symbol && pfn && *pfn)
		*pfn = shim_proc_adopt(symbol, cudaVersion, flags, *pfn);
}

static void ev_cuGetProcAddress_v2(const struct shim_call *c, const char *symbol, void **pfn,
				   int cudaVersion, cuuint64_t flags,
				   CUdriverProcAddressQueryResult *symbolStatus)
{
	ev_cuGetProcAddress(c, symbol, pfn, cudaVersion, flags);
}

/* ---- the wrappers -------------------------------------------------------- */

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_UNPAREN(...) __VA_ARGS__
#define SHIM_EV_ALLOC(ev, c, args) ev(c, SHIM_UNPAREN args)
#define SHIM_EV_EVENT(ev, c, args) ev(c, SHIM_UNPAREN args)
#define SHIM_EV_AFTER(ev, c, args) ev(c, SHIM_UNPAREN args)
#define SHIM_EV_ALWAYS(ev, c, args) ev(c, SHIM_UNPAREN args)
#define SHIM_EV_PASS(ev, c, args) ((void)(c))

/*
 * The exported symbol gets its name from an asm label, so that macros of
 * the headers (cuGetProcAddress is cuGetProcAddress_v2 there) can never
 * rename it, and its C name (moeft_NAME) never collides with a header's
 * declaration.  For the same reason RT and DRV paste every name before
 * handing it on: a macro argument used plainly is macro-expanded.
 * The callsite event, called from the wrapper itself with skip 1, starts
 * at the application's call to us.
 */
#define SHIM_WRAPPER(ret, fail, fn, id, rt12, ev, sym, kind, evcall, params, args)	\
	ret fn params __asm__(sym) SHIM_EXPORT;						\
	ret fn params									\
	{										\
		struct shim_call c = { SHIM_PRE, 0, rt12, 0 };				\
		void *p = shim_real_for(id, __builtin_return_address(0));		\
		ret (*real) params;							\
		ret r;									\
		int on;									\
											\
		if (!p)									\
			return fail;							\
		memcpy(&real, &p, sizeof real);						\
		on = shim_enter(kind);							\
		if (on && kind != SHIM_AFTER)						\
			evcall(ev, &c, args);						\
		r = real args;								\
		if (on) {								\
			c.phase = SHIM_POST;						\
			c.status = (int)r;						\
			if (kind == SHIM_ALLOC && r == 0)				\
				c.fingerprint = shim_events_above.callsite(1);		\
			evcall(ev, &c, args);						\
		}									\
		shim_depth--;								\
		return r;								\
	}

/*
 * A runtime entry point twice, one wrapper per runtime (hooks.h): each
 * defined under a name of ours that the version script keeps local, and
 * exported by .symver as name@@libcudart.so.13 (the default) and
 * name@libcudart.so.12.
 */
#define RT(name, decl, kind, params, args)						\
	SHIM_WRAPPER(cudaError_t, cudaErrorInitializationError, moeft_##name, SHIM_##name, \
		     0, ev_##name, "moeft_rt13_" #name, SHIM_##kind, SHIM_EV_##kind, params, \
		     args)								\
	__asm__(".symver moeft_rt13_" #name ", " #name "@@" SHIM_CUDART_SONAME);	\
	SHIM_WRAPPER(cudaError_t, cudaErrorInitializationError, moeft12_##name,		\
		     SHIM_##name##_rt12, 1, ev_##name, "moeft_rt12_" #name, SHIM_##kind,	\
		     SHIM_EV_##kind, params, args)					\
	__asm__(".symver moeft_rt12_" #name ", " #name "@" SHIM_CUDART12_SONAME);
#define DRV(name, query, version, flavor, kind, params, args)				\
	SHIM_WRAPPER(CUresult, CUDA_ERROR_NOT_INITIALIZED, moeft_##name, SHIM_##name, 0,	\
		     ev_##name, #name, SHIM_##kind, SHIM_EV_##kind, params, args)
#define RT_USE(name, params)
#define DRV_USE(name, params)
#include "hooks.def"
#undef RT
#undef DRV

static const shim_fn wrappers[SHIM_COUNT] = {
#define RT(name, decl, kind, params, args)						\
	[SHIM_##name] = (shim_fn)moeft_##name, [SHIM_##name##_rt12] = (shim_fn)moeft12_##name,
#define DRV(name, query, version, flavor, kind, params, args) [SHIM_##name] = (shim_fn)moeft_##name,
#include "hooks.def"
#undef RT
#undef DRV
#undef RT_USE
#undef DRV_USE
};

void *shim_wrapper(unsigned id)
{
	return wrappers[id] ? shim_fn_ptr(wrappers[id]) : NULL;
}
