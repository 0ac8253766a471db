/*
 * capture.cu - device kernels the preload enqueues after matching launches.
 *
 * Both take their parameters as one struct by value, so a CUDA graph that
 * captured the launch replays it unchanged, and neither ever waits on the
 * host.  The algorithms are kernels/capture_algo.h, shared with the host
 * reference; this file only maps them onto threads.  The kernels are
 * extern "C" so the preload can find them by a stable name (and so its own
 * name rules can recognise and skip them).
 */
#include "capture_algo.h"

/*
 * Thread 0 reserves and writes the headers; the block copies the ids;
 * thread 0 publishes once every thread's stores are done (capture.h,
 * steps 1-3).  Launch with one block of at most CAP_APPEND_THREADS.
 */
extern "C" __global__ void __launch_bounds__(CAP_APPEND_THREADS)
moeft_capture_append(struct cap_append_args a)
{
	__shared__ struct cap_resv rv;
	__shared__ int ok;

	if (threadIdx.x == 0)
		ok = cap_begin(&a, &rv);
	__syncthreads();
	if (!ok)
		return;
	cap_copy_ids(a.ring, &rv, &a, threadIdx.x, blockDim.x);
	__syncthreads();
	if (threadIdx.x == 0)
		cap_publish(a.ring, &rv);
}

/* Any grid; each thread takes every (grid size)th slot. */
extern "C" __global__ void moeft_kv_mark_dirty(struct kv_dirty_args a)
{
	kv_mark_range(&a, (uint64_t)blockIdx.x * blockDim.x + threadIdx.x,
		      (uint64_t)gridDim.x * blockDim.x);
}
