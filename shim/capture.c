/*
 * capture.c - the device side of capture: moeft's kernels as a module, the
 * ring's pinned memory, the append launch (declared in runtime.h).
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
	FIXTURE_MODULE_IMAGE("moeft_capture_append\0" "moeft_kv_mark_dirty\0");

static const void *const images[] = {
#ifdef MOEFT_CAPTURE_FATBIN
	moeft_capture_fatbin,
#endif
	fixture_image,
};

static CUfunction append_fn;	/* written once, before the ring is published */

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
	if ((r = get(&append_fn, m, "moeft_capture_append")) != CUDA_SUCCESS)
		return r;
	/* Drivers before 12.4 cannot tell: trust the image then. */
	*what = "cuFuncGetParamInfo";
	if (!REAL(param, cuFuncGetParamInfo))
		return CUDA_SUCCESS;
	if ((r = param(append_fn, 0, &off, &size)) != CUDA_SUCCESS)
		return r;
	return size == sizeof(struct cap_append_args) ? CUDA_SUCCESS
						       : CUDA_ERROR_INVALID_IMAGE;
}

static CUresult map_ring(size_t len, void **host, uint64_t *dev, const char **what)
{
	__typeof__(&cuMemHostAlloc) alloc;
	__typeof__(&cuMemHostGetDevicePointer_v2) devptr;
	__typeof__(&cuMemFreeHost) release;
	CUdeviceptr d;
	CUresult r;

	*what = "cuMemHostAlloc";
	if (!REAL(alloc, cuMemHostAlloc) || !REAL(devptr, cuMemHostGetDevicePointer_v2) ||
	    !REAL(release, cuMemFreeHost))
		return CUDA_ERROR_NOT_FOUND;
	/* PORTABLE: every context may launch an append into it. */
	r = alloc(host, len, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
	if (r != CUDA_SUCCESS)
		return r;
	*what = "cuMemHostGetDevicePointer";
	if ((r = devptr(&d, *host, 0)) != CUDA_SUCCESS) {
		release(*host);
		return r;
	}
	*dev = d;
	return CUDA_SUCCESS;
}

int rt_dev_open(size_t len, void **host, uint64_t *dev, char *why, size_t whylen)
{
	__typeof__(&cuThreadExchangeStreamCaptureMode) exchange = NULL;
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
	if ((r = load(&what)) == CUDA_SUCCESS)
		r = map_ring(len, host, dev, &what);
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
