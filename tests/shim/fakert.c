/*
 * fakert.c - a stand-in libcudart.so.13 for the nesting test.
 *
 * The fixture's runtime calls its driver internally; the real one does
 * not: while it initialises inside the application's first call it finds
 * cuGetProcAddress with dlsym on libcuda.so.1 and takes every driver entry
 * point from it, then calls the driver through that table.  This library
 * does the same for allocations, over the fixture's driver, so that under
 * the preload each of its driver calls is nested inside a runtime wrapper
 * and must produce no event of its own.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_free)(CUdeviceptr);
static CUresult (*mem_alloc_async)(CUdeviceptr *, size_t, CUstream);
static CUresult (*mem_free_async)(CUdeviceptr, CUstream);
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ready;

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
			       CUdriverProcAddressQueryResult *);

static int entry(getproc_fn getproc, const char *name, void *fn, size_t size)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	if (getproc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p)
		return -1;
	memcpy(fn, &p, size);
	return 0;
}

static void init(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *p;
	CUresult (*cu_init)(unsigned);
	getproc_fn getproc;

	if (!h || !(p = dlsym(h, "cuGetProcAddress_v2")))
		return;
	memcpy(&getproc, &p, sizeof p);
	if (entry(getproc, "cuInit", &cu_init, sizeof cu_init) < 0 || cu_init(0) != CUDA_SUCCESS)
		return;
	ready = entry(getproc, "cuMemAlloc", &mem_alloc, sizeof mem_alloc) == 0 &&
		entry(getproc, "cuMemFree", &mem_free, sizeof mem_free) == 0 &&
		entry(getproc, "cuMemAllocAsync", &mem_alloc_async, sizeof mem_alloc_async) == 0 &&
		entry(getproc, "cuMemFreeAsync", &mem_free_async, sizeof mem_free_async) == 0;
}

static cudaError_t status(CUresult r)
{
	pthread_once(&once, init);
	if (!ready)
		return cudaErrorInitializationError;
	return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr d = 0;
	cudaError_t e = status(CUDA_SUCCESS);

	if (e == cudaSuccess && (e = status(mem_alloc(&d, size))) == cudaSuccess)
		*devPtr = (void *)(uintptr_t)d;
	return e;
}

cudaError_t cudaFree(void *devPtr)
{
	cudaError_t e = status(CUDA_SUCCESS);

	return e == cudaSuccess ? status(mem_free((CUdeviceptr)(uintptr_t)devPtr)) : e;
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	CUdeviceptr d = 0;
	cudaError_t e = status(CUDA_SUCCESS);

	if (e == cudaSuccess && (e = status(mem_alloc_async(&d, size, hStream))) == cudaSuccess)
		*devPtr = (void *)(uintptr_t)d;
	return e;
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	cudaError_t e = status(CUDA_SUCCESS);

	return e == cudaSuccess ? status(mem_free_async((CUdeviceptr)(uintptr_t)devPtr, hStream))
				: e;
}
