/*
 * privuser.c - a Python extension module's shape, for privcall.c: a shared
 * object linked to a private, renamed copy of the CUDA 12 runtime
 * (libcudart-moeftpriv.so.12, found by its run path), whose calls bind to
 * cudaMalloc@libcudart.so.12 and so, under the preload, to moeft's twin.
 */
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "probe.h"

int privuser_alloc(void);

__attribute__((visibility("default")))
int privuser_alloc(void)
{
	void *p = NULL;
	int rc = (int)cudaMalloc(&p, PROBE_PRIVATE_SIZE);

	if (rc)
		return rc;
	return (int)cudaFree(p);
}
