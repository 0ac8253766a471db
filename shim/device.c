/*
 * device.c - the device operations of shim.h: moeft's own module, pinned
 * mapped memory, launches, streams, events and copies.
 *
 * Everything goes through the real driver entry points, never through our
 * wrappers, so none of it is an application event.  What the kernels are
 * and which images hold them is the caller's: the shim loads the first
 * image the driver takes.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "hooks.h"

static CUcontext ctx;	/* the context of the loaded module */

/* Set the function pointer at fn to p: 1, or 0 when there is none (ISO C
 * has no cast from void * to a function pointer). */
static int real_fn(void *fn, size_t size, void *p)
{
	if (p)
		memcpy(fn, &p, size);
	return p != NULL;
}

#define REAL(fn, id) real_fn(&(fn), sizeof(fn), shim_real(SHIM_##id))
/* The same where a machine without the driver is expected: no word. */
#define PROBE(fn, id) real_fn(&(fn), sizeof(fn), shim_probe(SHIM_##id))

/*
 * The first image the driver takes, and the functions in it.  Each
 * function's one parameter must be the caller's struct: a stale or foreign
 * image fails here, not at a launch inside some stream capture (which a
 * failed launch would invalidate).
 */
static CUresult load(const void *const images[], unsigned nimages, const char *const names[],
		     const size_t sizes[], unsigned n, void *fns[], const char **what)
{
	__typeof__(&cuModuleLoadData) load_data;
	__typeof__(&cuModuleGetFunction) get;
	__typeof__(&cuFuncGetParamInfo) param = NULL;
	CUresult r = CUDA_ERROR_INVALID_IMAGE;
	size_t off, size;
	unsigned i;
	CUfunction f;
	CUmodule m;

	*what = "cuModuleLoadData";
	if (!REAL(load_data, cuModuleLoadData) || !REAL(get, cuModuleGetFunction))
		return CUDA_ERROR_NOT_FOUND;
	for (i = 0; i < nimages; i++)
		if ((r = load_data(&m, images[i])) == CUDA_SUCCESS)
			break;
	if (r != CUDA_SUCCESS)
		return r;
	/* A driver that cannot tell the sizes (before 12.4, or not for this
	 * image): trust the image then. */
	REAL(param, cuFuncGetParamInfo);
	for (i = 0; i < n; i++) {
		*what = "cuModuleGetFunction";
		if ((r = get(&f, m, names[i])) != CUDA_SUCCESS)
			return r;
		*what = "cuFuncGetParamInfo";
		r = param ? param(f, 0, &off, &size) : CUDA_ERROR_NOT_SUPPORTED;
		if (r == CUDA_SUCCESS && size != sizes[i])
			return CUDA_ERROR_INVALID_IMAGE;
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_SUPPORTED)
			return r;
		fns[i] = f;
	}
	return CUDA_SUCCESS;
}

/* The first routing hit may come while a graph is being captured, whose
 * mode forbids loading and allocating: relax this thread's mode meanwhile,
 * as CUDA's own libraries do.  Returns the exchange to undo it, or NULL. */
static __typeof__(&cuThreadExchangeStreamCaptureMode) relax(CUstreamCaptureMode *mode)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) exchange;

	*mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	if (REAL(exchange, cuThreadExchangeStreamCaptureMode) && exchange(mode) == CUDA_SUCCESS)
		return exchange;
	return NULL;
}

int shim_dev_load(const void *const images[], unsigned nimages, const char *const names[],
		  const size_t sizes[], unsigned n, void *fns[], char *why, size_t whylen)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) undo;
	__typeof__(&cuCtxGetCurrent) get_ctx;
	CUstreamCaptureMode mode;
	const char *what = "a driver entry point";
	CUresult r;

	undo = relax(&mode);
	if (REAL(get_ctx, cuCtxGetCurrent))
		get_ctx(&ctx);
	r = load(images, nimages, names, sizes, n, fns, &what);
	if (undo)
		undo(&mode);
	if (r != CUDA_SUCCESS)
		snprintf(why, whylen, "%s failed (CUresult %d)", what, (int)r);
	return r == CUDA_SUCCESS ? 0 : -1;
}

static CUresult host_alloc(size_t len, void **host, uint64_t *dev)
{
	__typeof__(&cuMemHostAlloc) alloc;
	__typeof__(&cuMemHostGetDevicePointer_v2) devptr;
	__typeof__(&cuMemFreeHost) release;
	CUdeviceptr d;
	CUresult r;

	if (!REAL(alloc, cuMemHostAlloc) || !REAL(devptr, cuMemHostGetDevicePointer_v2) ||
	    !REAL(release, cuMemFreeHost))
		return CUDA_ERROR_NOT_FOUND;
	/* PORTABLE: every context may launch into it. */
	r = alloc(host, len, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = devptr(&d, *host, 0)) != CUDA_SUCCESS) {
		release(*host);
		return r;
	}
	*dev = d;
	return CUDA_SUCCESS;
}

int shim_dev_host_alloc(size_t len, void **host, uint64_t *dev)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) undo;
	CUstreamCaptureMode mode;
	CUresult r;

	undo = relax(&mode);
	r = host_alloc(len, host, dev);
	if (undo)
		undo(&mode);
	return r;
}

int shim_dev_alloc(size_t len, uint64_t *dev)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) undo;
	__typeof__(&cuMemAlloc_v2) alloc;
	CUstreamCaptureMode mode;
	CUdeviceptr d;
	CUresult r;

	if (!REAL(alloc, cuMemAlloc_v2))
		return CUDA_ERROR_NOT_FOUND;
	undo = relax(&mode);
	r = alloc(&d, len);
	if (undo)
		undo(&mode);
	if (r == CUDA_SUCCESS)
		*dev = d;
	return r;
}

void shim_dev_host_free(void *host)
{
	__typeof__(&cuMemFreeHost) release;

	if (REAL(release, cuMemFreeHost))
		release(host);
}

int shim_dev_launch(void *fn, unsigned blocks, unsigned threads, void *stream, void *arg)
{
	__typeof__(&cuLaunchKernel) launch;
	void *params[] = { arg };

	if (!REAL(launch, cuLaunchKernel))
		return CUDA_ERROR_NOT_FOUND;
	return launch((CUfunction)fn, blocks, 1, 1, threads, 1, 1, 0, (CUstream)stream, params,
		      NULL);
}

int shim_dev_capturing(void *stream)
{
	__typeof__(&cuStreamIsCapturing) is_capturing;
	CUstreamCaptureStatus st;

	if (!REAL(is_capturing, cuStreamIsCapturing) ||
	    is_capturing((CUstream)stream, &st) != CUDA_SUCCESS)
		return -1;
	return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

int shim_dev_stream(void **stream)
{
	__typeof__(&cuStreamCreate) create;

	if (!REAL(create, cuStreamCreate))
		return CUDA_ERROR_NOT_FOUND;
	return create((CUstream *)stream, CU_STREAM_NON_BLOCKING);
}

void shim_dev_stream_free(void *stream)
{
	__typeof__(&cuStreamDestroy_v2) destroy;

	if (REAL(destroy, cuStreamDestroy_v2))
		destroy((CUstream)stream);
}

static int new_event(void **event, unsigned flags)
{
	__typeof__(&cuEventCreate) create;

	if (!REAL(create, cuEventCreate))
		return CUDA_ERROR_NOT_FOUND;
	return create((CUevent *)event, flags);
}

int shim_dev_event(void **event)
{
	return new_event(event, CU_EVENT_DISABLE_TIMING);
}

int shim_dev_timed_event(void **event)
{
	return new_event(event, CU_EVENT_DEFAULT);
}

int shim_dev_elapsed(void *start, void *end, float *ms)
{
	__typeof__(&cuEventElapsedTime_v2) elapsed;

	/* Drivers before CUDA 12.8 lack it: no timing then, and no word. */
	if (!PROBE(elapsed, cuEventElapsedTime_v2))
		return CUDA_ERROR_NOT_FOUND;
	return elapsed(ms, (CUevent)start, (CUevent)end);
}

void shim_dev_event_free(void *event)
{
	__typeof__(&cuEventDestroy_v2) destroy;

	if (REAL(destroy, cuEventDestroy_v2))
		destroy((CUevent)event);
}

int shim_dev_record(void *event, void *stream)
{
	__typeof__(&cuEventRecord) record;

	if (!REAL(record, cuEventRecord))
		return CUDA_ERROR_NOT_FOUND;
	return record((CUevent)event, (CUstream)stream);
}

int shim_dev_wait(void *stream, void *event)
{
	__typeof__(&cuStreamWaitEvent) wait;

	if (!REAL(wait, cuStreamWaitEvent))
		return CUDA_ERROR_NOT_FOUND;
	return wait((CUstream)stream, (CUevent)event, 0);
}

int shim_dev_wait_value(void *stream, uint64_t addr, uint32_t value)
{
	__typeof__(&cuStreamWaitValue32_v2) wait;

	if (!REAL(wait, cuStreamWaitValue32_v2))
		return CUDA_ERROR_NOT_FOUND;
	return wait((CUstream)stream, (CUdeviceptr)addr, value, CU_STREAM_WAIT_VALUE_GEQ);
}

int shim_dev_query(void *event)
{
	__typeof__(&cuEventQuery) query;

	if (!REAL(query, cuEventQuery))
		return CUDA_ERROR_NOT_FOUND;
	return query((CUevent)event);
}

int shim_dev_copy_to_device(uint64_t dev, const void *src, size_t len, void *stream)
{
	__typeof__(&cuMemcpyHtoDAsync_v2) copy;

	if (!REAL(copy, cuMemcpyHtoDAsync_v2))
		return CUDA_ERROR_NOT_FOUND;
	return copy(dev, src, len, (CUstream)stream);
}

int shim_dev_write(uint64_t dev, const void *src, size_t len)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) undo;
	__typeof__(&cuStreamSynchronize) sync;
	CUstreamCaptureMode mode;
	void *stream;
	CUresult r;

	if (!REAL(sync, cuStreamSynchronize))
		return CUDA_ERROR_NOT_FOUND;
	undo = relax(&mode);
	if ((r = shim_dev_stream(&stream)) == CUDA_SUCCESS) {
		if ((r = shim_dev_copy_to_device(dev, src, len, stream)) == CUDA_SUCCESS)
			r = sync((CUstream)stream);
		shim_dev_stream_free(stream);
	}
	if (undo)
		undo(&mode);
	return r;
}

/* MIG instances of one GPU share its PCI bus id: a compute instance's
 * UUID (cuDeviceGetUuid_v2) differs from its GPU's (the legacy call), and
 * its first 6 bytes tell the instance in the name. */
static void mig_suffix(char *out, size_t len, CUdevice dev)
{
	__typeof__(&cuDeviceGetUuid_v2) gpu_uuid, instance_uuid;
	CUuuid gpu, instance;
	size_t at = strlen(out);
	const unsigned char *b = (const unsigned char *)instance.bytes;

	if (PROBE(gpu_uuid, cuDeviceGetUuid) && PROBE(instance_uuid, cuDeviceGetUuid_v2) &&
	    gpu_uuid(&gpu, dev) == CUDA_SUCCESS && instance_uuid(&instance, dev) == CUDA_SUCCESS &&
	    memcmp(gpu.bytes, instance.bytes, sizeof gpu.bytes) != 0 && at < len)
		snprintf(out + at, len - at, "-mig-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
			 b[4], b[5]);
}

int shim_dev_name(char *out, size_t len)
{
	__typeof__(&cuCtxGetDevice) ctx_device;
	__typeof__(&cudaGetDevice) rt_device;
	__typeof__(&cuDeviceGet) get;
	__typeof__(&cuDeviceGetPCIBusId) bus;
	CUdevice dev;
	int ordinal;

	/* Before a context is current, the runtime's device: 13's or 12's. */
	if (!(PROBE(ctx_device, cuCtxGetDevice) && ctx_device(&dev) == CUDA_SUCCESS) &&
	    !((PROBE(rt_device, cudaGetDevice) || PROBE(rt_device, cudaGetDevice_rt12)) &&
	      rt_device(&ordinal) == cudaSuccess && PROBE(get, cuDeviceGet) &&
	      get(&dev, ordinal) == CUDA_SUCCESS))
		return -1;
	if (!(len > 1 && len <= INT_MAX && PROBE(bus, cuDeviceGetPCIBusId) &&
	      bus(out, (int)len, dev) == CUDA_SUCCESS))
		snprintf(out, len, "dev%d", (int)dev);
	mig_suffix(out, len, dev);
	return 0;
}

int shim_dev_sync(void *event)
{
	__typeof__(&cuEventSynchronize) sync;

	if (!REAL(sync, cuEventSynchronize))
		return CUDA_ERROR_NOT_FOUND;
	return sync((CUevent)event);
}

int shim_dev_zero(uint64_t dev, size_t len, void *stream)
{
	__typeof__(&cuMemsetD8Async) set;

	if (!REAL(set, cuMemsetD8Async))
		return CUDA_ERROR_NOT_FOUND;
	return set(dev, 0, len, (CUstream)stream);
}

void *shim_dev_current(void)
{
	__typeof__(&cuCtxGetCurrent) get;
	CUcontext c = NULL;

	if (!REAL(get, cuCtxGetCurrent) || get(&c) != CUDA_SUCCESS)
		return NULL;
	return c;
}

void shim_dev_bind_thread(void *context)
{
	__typeof__(&cuCtxSetCurrent) set;
	CUstreamCaptureMode mode;

	if (!context)
		context = ctx;
	if (context && REAL(set, cuCtxSetCurrent))
		set((CUcontext)context);
	relax(&mode);
}
