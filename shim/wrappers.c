/*
 * wrappers.c - the exported CUDA entry points, generated from hooks.def,
 * and what each one reports to preload/.
 *
 * Every wrapper has the same shape: find the real function (or fail the
 * call with the API's "not initialized" error), count one level of depth,
 * let its handler see the call before (except for kind AFTER) and after
 * the real one when the call came straight from the application (shim.h
 * has the rule), return what the real function returned.  The handlers below are the only
 * per-function code: they turn arguments into preload/ events and never
 * touch an argument the call did not make valid (an out-pointer is read
 * only after success, launch arguments only through rule_eval's checks).
 */
#include <stdint.h>
#include <string.h>

#include "alloc_table.h"
#include "record.h"
#include "runtime.h"
#include "shim.h"

_Thread_local unsigned shim_depth __attribute__((tls_model("initial-exec")));

static inline int shim_enter(int kind)
{
	int outer = shim_depth++ == 0;

	if (kind == SHIM_ALWAYS)
		return 1;
	return kind != SHIM_PASS && outer && rt_enabled();
}

static uint64_t addr(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* ---- naming kernels: the identify callback of every launch --------------- */

/* The runtime keeps a per-thread "last error" that the application reads
 * (PyTorch checks cudaGetLastError after every launch): a failure of ours
 * must not show up there. */
static int func_by_symbol(const void *symbol, CUfunction *f)
{
	cudaError_t (*by_symbol)(cudaFunction_t *, const void *);
	cudaError_t (*last)(void);
	void *p = shim_real(SHIM_cudaGetFuncBySymbol);
	int clean = 0;

	if (!p)
		return -1;
	memcpy(&by_symbol, &p, sizeof by_symbol);
	if ((p = shim_real(SHIM_cudaPeekAtLastError))) {
		memcpy(&last, &p, sizeof last);
		clean = last() == cudaSuccess;
	}
	if (by_symbol(f, symbol) == cudaSuccess)
		return 0;
	if (clean && (p = shim_real(SHIM_cudaGetLastError))) {
		memcpy(&last, &p, sizeof last);
		last();
	}
	return -1;
}

/* cuFuncGet* and cuKernelGet* differ only in the handle's type. */
static int name_and_params(const void *h, int is_kernel, struct rt_kernel_desc *d)
{
	CUresult (*fname)(const char **, CUfunction), (*kname)(const char **, CUkernel);
	CUresult (*fparam)(CUfunction, size_t, size_t *, size_t *);
	CUresult (*kparam)(CUkernel, size_t, size_t *, size_t *);
	CUresult r = CUDA_ERROR_NOT_FOUND;
	size_t i = 0, off, size;
	void *p;

	d->name = NULL;
	d->nparams = 0;
	d->params_known = 0;
	if (!(p = shim_real(is_kernel ? SHIM_cuKernelGetName : SHIM_cuFuncGetName)))
		return -1;
	memcpy(&fname, &p, sizeof p);
	memcpy(&kname, &p, sizeof p);
	if ((is_kernel ? kname(&d->name, (CUkernel)h) : fname(&d->name, (CUfunction)h)) !=
	    CUDA_SUCCESS || !d->name)
		return -1;
	if ((p = shim_real(is_kernel ? SHIM_cuKernelGetParamInfo : SHIM_cuFuncGetParamInfo))) {
		memcpy(&fparam, &p, sizeof p);
		memcpy(&kparam, &p, sizeof p);
		for (; i < RULE_MAX_PARAMS; i++) {
			r = is_kernel ? kparam((CUkernel)h, i, &off, &size)
				      : fparam((CUfunction)h, i, &off, &size);
			if (r != CUDA_SUCCESS)
				break;
			d->sizes[i] = (uint32_t)size;
		}
	}
	d->nparams = (unsigned)i;
	/* The first index past the last parameter is an invalid value. */
	d->params_known = r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE;
	return 0;
}

static int identify(int kind, const void *func, struct rt_kernel_desc *d)
{
	CUfunction f;

	if (kind == RT_FUNC_KERNEL)
		return name_and_params(func, 1, d);
	if (kind == RT_FUNC_DRIVER)
		return name_and_params(func, 0, d);
	if (func_by_symbol(func, &f) < 0)
		return -1;
	return name_and_params(f, 0, d);
}

/* ---- event handlers ------------------------------------------------------ */

/*
 * What a launch leaves for after it succeeded (rt_launch's *after), held
 * by the launching thread: a depth-0 launch never nests in another.
 */
static _Thread_local struct rt_after launch_after __attribute__((tls_model("initial-exec")));
static _Thread_local int launch_armed __attribute__((tls_model("initial-exec")));

/* What rt_launch_seen left to do: a handle's first launch, or a launch of
 * a kernel that a rule owns.  Only these pay for describing the launch. */
static void launch_rest(int cached, struct kid_match *m, int kind, const void *func,
			unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			unsigned bz, void **args, void *stream)
{
	struct rt_launch l = {
		.kind = kind, .func = func, .grid = { gx, gy, gz }, .block = { bx, by, bz },
		.args = args, .stream = stream, .identify = identify,
		.cached = cached, .match = m,
	};

	launch_armed = rt_launch(&l, &launch_after);
}

/* A launch, before and after the real one.  One of a kernel that no rule
 * owns ends at rt_launch_seen before, and at one thread-local load after. */
static inline void launched(const struct shim_call *c, int kind, const void *func, unsigned gx,
			    unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			    void **args, void *stream)
{
	struct kid_match *m = NULL;
	int cached;

	if (c->phase == SHIM_PRE) {
		if ((cached = rt_launch_seen(func, &m)) != KID_NONE ||
		    atomic_load_explicit(&rt_restore_pending, memory_order_relaxed))
			launch_rest(cached, m, kind, func, gx, gy, gz, bx, by, bz, args, stream);
	} else if (launch_armed) {
		launch_armed = 0;
		if (c->status == 0)
			rt_launch_after(&launch_after);
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
		rt_alloc(ALLOC_API_CUDA_MALLOC, addr(*devPtr), size, c->fingerprint);
}

static void ev_cudaMallocAsync(const struct shim_call *c, void **devPtr, size_t size,
			       cudaStream_t hStream)
{
	if (OK_AFTER(c))
		rt_alloc(ALLOC_API_CUDA_MALLOC_ASYNC, addr(*devPtr), size, c->fingerprint);
}
#define ev_cudaMallocAsync_ptsz ev_cudaMallocAsync

static void ev_cudaMallocFromPoolAsync(const struct shim_call *c, void **ptr, size_t size,
				       cudaMemPool_t memPool, cudaStream_t stream)
{
	if (OK_AFTER(c))
		rt_alloc(ALLOC_API_CUDA_MALLOC_FROM_POOL_ASYNC, addr(*ptr), size, c->fingerprint);
}
#define ev_cudaMallocFromPoolAsync_ptsz ev_cudaMallocFromPoolAsync

static void ev_cudaMallocManaged(const struct shim_call *c, void **devPtr, size_t size,
				 unsigned int flags)
{
	if (OK_AFTER(c))
		rt_alloc(ALLOC_API_CUDA_MALLOC_MANAGED, addr(*devPtr), size, c->fingerprint);
}

/* Frees are recorded before the real call: once it returns, another thread
 * may be handed the same address. */
static void ev_cudaFree(const struct shim_call *c, void *devPtr)
{
	if (c->phase == SHIM_PRE)
		rt_free(addr(devPtr));
}

static void ev_cudaFreeAsync(const struct shim_call *c, void *devPtr, cudaStream_t hStream)
{
	if (c->phase == SHIM_PRE)
		rt_free(addr(devPtr));
}
#define ev_cudaFreeAsync_ptsz ev_cudaFreeAsync

static void ev_cudaLaunchKernel(const struct shim_call *c, const void *func, dim3 gridDim,
				dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream)
{
	launched(c, RT_FUNC_HOST, func, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
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
	launched(c, RT_FUNC_KERNEL, kernel, gridDim.x, gridDim.y, gridDim.z, blockDim.x,
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
		launched(c, RT_FUNC_HOST, func, config->gridDim.x, config->gridDim.y,
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

static void ev_cudaGraphLaunch(const struct shim_call *c, cudaGraphExec_t graphExec,
			       cudaStream_t stream)
{
	if (c->phase == SHIM_PRE)
		rt_graph_launch(stream);
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
		rt_capture(1);
}
#define ev_cudaStreamBeginCapture_ptsz ev_cudaStreamBeginCapture

static void ev_cudaStreamEndCapture(const struct shim_call *c, cudaStream_t stream,
				    cudaGraph_t *pGraph)
{
	if (OK_AFTER(c))
		rt_capture(0);
}
#define ev_cudaStreamEndCapture_ptsz ev_cudaStreamEndCapture

/* A host wait that returned: the thread has what it waited for. */
static void ev_cudaStreamSynchronize(const struct shim_call *c, cudaStream_t stream)
{
	if (OK_AFTER(c))
		rt_sync();
}
#define ev_cudaStreamSynchronize_ptsz ev_cudaStreamSynchronize

static void ev_cudaEventSynchronize(const struct shim_call *c, cudaEvent_t event)
{
	if (OK_AFTER(c))
		rt_sync();
}

static void ev_cuStreamSynchronize(const struct shim_call *c, CUstream hStream)
{
	if (OK_AFTER(c))
		rt_sync();
}
#define ev_cuStreamSynchronize_ptsz ev_cuStreamSynchronize

static void ev_cuEventSynchronize(const struct shim_call *c, CUevent hEvent)
{
	if (OK_AFTER(c))
		rt_sync();
}

static void ev_cuMemAlloc_v2(const struct shim_call *c, CUdeviceptr *dptr, size_t bytesize)
{
	if (OK_AFTER(c))
		rt_alloc(ALLOC_API_CU_MEM_ALLOC, *dptr, bytesize, c->fingerprint);
}

static void ev_cuMemFree_v2(const struct shim_call *c, CUdeviceptr dptr)
{
	if (c->phase == SHIM_PRE)
		rt_free(dptr);
}

static void ev_cuMemAllocAsync(const struct shim_call *c, CUdeviceptr *dptr, size_t bytesize,
			       CUstream hStream)
{
	if (OK_AFTER(c))
		rt_alloc(ALLOC_API_CU_MEM_ALLOC_ASYNC, *dptr, bytesize, c->fingerprint);
}
#define ev_cuMemAllocAsync_ptsz ev_cuMemAllocAsync

static void ev_cuMemAllocFromPoolAsync(const struct shim_call *c, CUdeviceptr *dptr,
				       size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	if (OK_AFTER(c))
		rt_alloc(ALLOC_API_CU_MEM_ALLOC_FROM_POOL_ASYNC, *dptr, bytesize, c->fingerprint);
}
#define ev_cuMemAllocFromPoolAsync_ptsz ev_cuMemAllocFromPoolAsync

static void ev_cuMemFreeAsync(const struct shim_call *c, CUdeviceptr dptr, CUstream hStream)
{
	if (c->phase == SHIM_PRE)
		rt_free(dptr);
}
#define ev_cuMemFreeAsync_ptsz ev_cuMemFreeAsync

static void ev_cuMemMap(const struct shim_call *c, CUdeviceptr ptr, size_t size, size_t offset,
			CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	if (OK_AFTER(c))
		rt_map(ptr, size, handle, c->fingerprint);
}

static void ev_cuMemUnmap(const struct shim_call *c, CUdeviceptr ptr, size_t size)
{
	if (c->phase == SHIM_PRE)
		rt_unmap(ptr, size);
}

static void ev_cuLaunchKernel(const struct shim_call *c, CUfunction f, unsigned int gridDimX,
			      unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
			      unsigned int blockDimY, unsigned int blockDimZ,
			      unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
			      void **extra)
{
	launched(c, RT_FUNC_DRIVER, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
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

static void launched_ex(const struct shim_call *c, const CUlaunchConfig *config, CUfunction f,
			void **kernelParams, void *stream)
{
	if (config)
		launched(c, RT_FUNC_DRIVER, f, config->gridDimX, config->gridDimY,
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
		rt_graph_launch(hStream);
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
 * fingerprint_callsite(1) skips this frame: it starts at the application's
 * call to us.
 */
#define SHIM_WRAPPER(ret, fail, fn, id, ev, sym, kind, evcall, params, args)		\
	ret fn params __asm__(sym) SHIM_EXPORT;						\
	ret fn params									\
	{										\
		struct shim_call c = { SHIM_PRE, 0, 0 };				\
		void *p = shim_real(id);						\
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
				c.fingerprint = fingerprint_callsite(1);		\
			evcall(ev, &c, args);						\
		}									\
		shim_depth--;								\
		return r;								\
	}

#define RT(name, decl, kind, params, args)						\
	SHIM_WRAPPER(cudaError_t, cudaErrorInitializationError, moeft_##name, SHIM_##name, \
		     ev_##name, #name, SHIM_##kind, SHIM_EV_##kind, params, args)
#define DRV(name, query, version, flavor, kind, params, args)				\
	SHIM_WRAPPER(CUresult, CUDA_ERROR_NOT_INITIALIZED, moeft_##name, SHIM_##name,	\
		     ev_##name, #name, SHIM_##kind, SHIM_EV_##kind, params, args)
#define RT_USE(name, params)
#define DRV_USE(name, params)
#include "hooks.def"
#undef RT
#undef DRV

static const shim_fn wrappers[SHIM_COUNT] = {
#define RT(name, decl, kind, params, args) [SHIM_##name] = (shim_fn)moeft_##name,
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
