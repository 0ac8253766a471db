/*
 * capture.c - the device side of capture: moeft's kernels as a module, the
 * ring's pinned memory, the launches, and the streams, events and memory
 * of window boundaries (the rt_dev_* calls of runtime.h).
 *
 * Everything goes through the real driver entry points, never through our
 * wrappers, so none of it is an application event.  The module comes from
 * an image embedded at build time: the fatbin of kernels/capture.cu when
 * nvcc was there, then the CPU fixture's image, which the fixture runs as
 * the kernels' host references (tests/fixture/moeft_kernels.c) and a real
 * driver rejects as an invalid image.
 */
#include <stdio.h>

#include "fixture.h"
#include "runtime.h"
#include "shim.h"

#ifdef MOEFT_CAPTURE_FATBIN
extern const unsigned char moeft_capture_fatbin[];
#endif

static const char fixture_image[] =
	FIXTURE_MODULE_IMAGE("moeft_capture_append\0" "moeft_kv_snapshot\0");

static const void *const images[] = {
#ifdef MOEFT_CAPTURE_FATBIN
	moeft_capture_fatbin,
#endif
	fixture_image,
};

/* Written once, before the ring is published. */
static CUfunction append_fn, snapshot_fn;
static CUcontext ctx;	/* the context the ring and the kernels belong to */

/* Set the function pointer at fn to the real id: 1, or 0 when there is
 * none (ISO C has no cast from void * to a function pointer). */
static int real_fn(void *fn, size_t size, unsigned id)
{
	void *p = shim_real(id);

	if (p)
		memcpy(fn, &p, size);
	return p != NULL;
}

#define REAL(fn, id) real_fn(&(fn), sizeof(fn), SHIM_##id)

/*
 * The first image the driver takes, and its append kernel.  The kernel's
 * one parameter must be our struct: a stale or foreign image fails here,
 * not at a launch inside some stream capture (which a failed launch would
 * invalidate).  On the fixture this is also where a missing host
 * implementation shows.
 */
static CUresult load(const char **what)
{
	__typeof__(&cuModuleLoadData) load_data;
	__typeof__(&cuModuleGetFunction) get;
	__typeof__(&cuFuncGetParamInfo) param;
	CUresult r = CUDA_ERROR_INVALID_IMAGE;
	size_t i, off, size;
	CUmodule m;

	*what = "cuModuleLoadData";
	if (!REAL(load_data, cuModuleLoadData) || !REAL(get, cuModuleGetFunction))
		return CUDA_ERROR_NOT_FOUND;
	for (i = 0; i < sizeof images / sizeof images[0]; i++)
		if ((r = load_data(&m, images[i])) == CUDA_SUCCESS)
			break;
	if (r != CUDA_SUCCESS)
		return r;
	*what = "cuModuleGetFunction";
	if ((r = get(&append_fn, m, "moeft_capture_append")) != CUDA_SUCCESS ||
	    (r = get(&snapshot_fn, m, "moeft_kv_snapshot")) != CUDA_SUCCESS)
		return r;
	/* Drivers before 12.4 cannot tell: trust the image then. */
	*what = "cuFuncGetParamInfo";
	if (!REAL(param, cuFuncGetParamInfo))
		return CUDA_SUCCESS;
	if ((r = param(append_fn, 0, &off, &size)) != CUDA_SUCCESS)
		return r;
	if (size != sizeof(struct cap_append_args))
		return CUDA_ERROR_INVALID_IMAGE;
	if ((r = param(snapshot_fn, 0, &off, &size)) != CUDA_SUCCESS)
		return r;
	return size == sizeof(struct kv_snap_args) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

int rt_dev_host_alloc(size_t len, void **host, uint64_t *dev)
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

void rt_dev_host_free(void *host)
{
	__typeof__(&cuMemFreeHost) release;

	if (REAL(release, cuMemFreeHost))
		release(host);
}

int rt_dev_open(size_t len, void **host, uint64_t *dev, char *why, size_t whylen)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) exchange = NULL;
	__typeof__(&cuCtxGetCurrent) get_ctx;
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	const char *what = "a driver entry point";
	int relaxed = 0;
	CUresult r;

	/*
	 * The first routing hit may come while a graph is being captured,
	 * whose mode forbids loading and allocating: relax this thread's mode
	 * meanwhile, as CUDA's own libraries do.
	 */
	if (REAL(exchange, cuThreadExchangeStreamCaptureMode))
		relaxed = exchange(&mode) == CUDA_SUCCESS;
	if (REAL(get_ctx, cuCtxGetCurrent))
		get_ctx(&ctx);
	if ((r = load(&what)) == CUDA_SUCCESS) {
		what = "allocating the ring";
		r = rt_dev_host_alloc(len, host, dev);
	}
	if (relaxed)
		exchange(&mode);
	if (r != CUDA_SUCCESS)
		snprintf(why, whylen, "%s failed (CUresult %d)", what, (int)r);
	return r == CUDA_SUCCESS ? 0 : -1;
}

int rt_dev_append(void *stream, const struct cap_append_args *a)
{
	__typeof__(&cuLaunchKernel) launch;
	void *params[] = { (void *)a };

	if (!REAL(launch, cuLaunchKernel))
		return CUDA_ERROR_NOT_FOUND;
	return launch(append_fn, 1, 1, 1, CAP_APPEND_THREADS, 1, 1, 0, (CUstream)stream, params,
		      NULL);
}

/* One block per chunk at a time: enough blocks to fill a large GPU. */
#define SNAPSHOT_BLOCKS 1024u

int rt_dev_snapshot(void *stream, const struct kv_snap_args *a)
{
	__typeof__(&cuLaunchKernel) launch;
	uint64_t chunks = (a->bytes + a->chunk_bytes - 1) / a->chunk_bytes;
	void *params[] = { (void *)a };

	if (!REAL(launch, cuLaunchKernel))
		return CUDA_ERROR_NOT_FOUND;
	return launch(snapshot_fn, chunks < SNAPSHOT_BLOCKS ? (unsigned)chunks : SNAPSHOT_BLOCKS,
		      1, 1, KVSNAP_THREADS, 1, 1, 0, (CUstream)stream, params, NULL);
}

int rt_dev_capturing(void *stream)
{
	__typeof__(&cuStreamIsCapturing) is_capturing;
	CUstreamCaptureStatus st;

	if (!REAL(is_capturing, cuStreamIsCapturing) ||
	    is_capturing((CUstream)stream, &st) != CUDA_SUCCESS)
		return -1;
	return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

int rt_dev_stream(void **stream)
{
	__typeof__(&cuStreamCreate) create;

	if (!REAL(create, cuStreamCreate))
		return CUDA_ERROR_NOT_FOUND;
	return create((CUstream *)stream, CU_STREAM_NON_BLOCKING);
}

int rt_dev_event(void **event)
{
	__typeof__(&cuEventCreate) create;

	if (!REAL(create, cuEventCreate))
		return CUDA_ERROR_NOT_FOUND;
	return create((CUevent *)event, CU_EVENT_DISABLE_TIMING);
}

int rt_dev_record(void *event, void *stream)
{
	__typeof__(&cuEventRecord) record;

	if (!REAL(record, cuEventRecord))
		return CUDA_ERROR_NOT_FOUND;
	return record((CUevent)event, (CUstream)stream);
}

int rt_dev_wait(void *stream, void *event)
{
	__typeof__(&cuStreamWaitEvent) wait;

	if (!REAL(wait, cuStreamWaitEvent))
		return CUDA_ERROR_NOT_FOUND;
	return wait((CUstream)stream, (CUevent)event, 0);
}

int rt_dev_query(void *event)
{
	__typeof__(&cuEventQuery) query;

	if (!REAL(query, cuEventQuery))
		return CUDA_ERROR_NOT_FOUND;
	return query((CUevent)event);
}

int rt_dev_copy_to_device(uint64_t dev, const void *src, size_t len, void *stream)
{
	__typeof__(&cuMemcpyHtoDAsync_v2) copy;

	if (!REAL(copy, cuMemcpyHtoDAsync_v2))
		return CUDA_ERROR_NOT_FOUND;
	return copy(dev, src, len, (CUstream)stream);
}

void rt_dev_bind_thread(void)
{
	__typeof__(&cuCtxSetCurrent) set;

	if (ctx && REAL(set, cuCtxSetCurrent))
		set(ctx);
}
