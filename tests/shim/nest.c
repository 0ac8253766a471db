/*
 * nest.c - allocations through fakert.c, whose calls reach the driver
 * through cuGetProcAddress as the real runtime's do.  Under the preload:
 * NEST_ALLOCS ALLOC records made by the runtime's API, and as many FREE
 * records, none made by the driver's; and dlerror() as the program left it.
 */
#include <dlfcn.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "nest.h"

int main(void)
{
	void *p[NEST_ALLOCS - 1], *q;
	const char *e;
	int i;

	dlerror();
	for (i = 0; i < NEST_ALLOCS - 1; i++)
		if (cudaMalloc(&p[i], (size_t)4096 << i) != cudaSuccess)
			return 2;
	/* Nothing the program did failed: an interposer that tried and
	 * failed lookups of its own must not leave their errors here. */
	if ((e = dlerror())) {
		printf("nest: dlerror() after the first CUDA calls: %s\n", e);
		return 3;
	}
	if (cudaMallocAsync(&q, 1000, NULL) != cudaSuccess || cudaFreeAsync(q, NULL) != cudaSuccess)
		return 2;
	for (i = 0; i < NEST_ALLOCS - 1; i++)
		if (cudaFree(p[i]) != cudaSuccess)
			return 2;
	printf("nest: %d allocations\n", NEST_ALLOCS);
	return 0;
}
