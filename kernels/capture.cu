/*
 * capture.cu - device kernels the preload enqueues itself: the routing
 * append and the KV mark after matching launches, the KV snapshot and its
 * release of the serving streams at window boundaries.
 *
 * All take their parameters as one struct by value, so a CUDA graph that
 * captured the launch replays it unchanged, and none ever waits on the
 * host.  The algorithms are kernels/capture_algo.h and kvsnap_algo.h,
 * shared with the host references; this file only maps them onto threads.
 * The kernels are extern "C" so the preload can find them by a stable name
 * (and so its own name rules can recognise and skip them).
 */
#include "capture_algo.h"
#include "kvsnap_algo.h"

/*
 * Thread 0 reserves and writes the headers; the block copies the ids and weights;
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
	cap_copy(a.ring, &rv, &a, threadIdx.x, blockDim.x);
	__syncthreads();
	if (threadIdx.x == 0)
		cap_publish(a.ring, &rv);
}

/*
 * Chunk c, by the whole block: the block sums the chunk's hash terms,
 * thread 0 judges and reserves, the block copies, thread 0 writes the
 * entry and the new sum (kvsnap_algo.h).  Every thread of the block calls
 * it for the same c.
 */
static __device__ void snapshot_chunk(const struct kv_snap_args *a, uint64_t c)
{
	__shared__ uint64_t part[KVSNAP_THREADS];
	__shared__ struct kv_resv rv;
	__shared__ int staged;
	const unsigned char *src = kv_chunk_src(a, c);
	uint64_t len = kv_chunk_len(a, c);
	unsigned t = threadIdx.x, s;

	if (t == 0) {
		kv_take_chunk(a, c);
		__threadfence();
	}
	__syncthreads();
	part[t] = kv_hash_part(src, len, t, blockDim.x);
	__syncthreads();
	/* A tree over KVSNAP_THREADS slots, those past blockDim.x zero. */
	for (s = KVSNAP_THREADS / 2; s > 0; s /= 2) {
		if (t < s && t + s < blockDim.x)
			part[t] += part[t + s];
		__syncthreads();
	}
	if (t == 0)
		staged = kv_begin(a, c, part[0], &rv) == KV_STAGE;
	__syncthreads();
	if (!staged)
		return;
	kv_copy(kv_data(a) + rv.data, src, len, t, blockDim.x);
	__syncthreads();
	if (t == 0)
		kv_end(a, c, part[0], &rv);
}

/*
 * One block per chunk at a time, grid-stride over the chunks, or, for a
 * sparse snapshot, over the dirty words, a word's set bits in turn.
 * Launch with 1-D blocks of at most KVSNAP_THREADS threads and a 1-D grid
 * (kvsnap.h); any other shape would have two blocks stage one chunk, so
 * it does nothing.
 */
extern "C" __global__ void __launch_bounds__(KVSNAP_THREADS)
moeft_kv_snapshot(struct kv_snap_args a)
{
	__shared__ uint32_t word;
	uint64_t n, c, w;
	uint32_t bits;

	if (blockDim.y != 1 || blockDim.z != 1 || gridDim.y != 1 || gridDim.z != 1 ||
	    !kv_args_ok(&a))
		return;
	if (kv_sparse(&a)) {
		for (w = blockIdx.x, n = kv_dirty_words(&a); w < n; w += gridDim.x) {
			if (threadIdx.x == 0)
				word = kv_take_word(&a, w);
			__syncthreads();
			bits = word;
			/* Every thread has its copy before thread 0 loads the
			 * next word. */
			__syncthreads();
			for (; bits; bits &= bits - 1)
				snapshot_chunk(&a, w * 32 + (uint64_t)(__ffs(bits) - 1));
		}
	} else {
		for (c = blockIdx.x, n = kv_nchunks(&a); c < n; c += gridDim.x)
			snapshot_chunk(&a, c);
	}
	/* Every other thread's copies came before a __syncthreads thread 0
	 * passed: its fence covers them (atomics_algo.h). */
	if (threadIdx.x == 0)
		atom_fence_sys();
}

/* One thread (kvsnap_algo.h, kvsnap.h). */
extern "C" __global__ void moeft_kv_release(struct kv_release_args a)
{
	if (threadIdx.x == 0 && blockIdx.x == 0)
		kv_release(&a);
}

/* One thread (kvsnap_algo.h, kvsnap.h): host memory it writes is the
 * host's once the kernel is through (an event after it says so). */
extern "C" __global__ void moeft_kv_header(struct kv_header_args a)
{
	if (threadIdx.x == 0 && blockIdx.x == 0) {
		kv_header_copy(&a);
		atom_fence_sys();
	}
}

/* Grid-stride over the slots, a thread each (kvsnap_algo.h). */
extern "C" __global__ void __launch_bounds__(KVMARK_THREADS)
moeft_kv_mark(struct kv_mark_args a)
{
	uint64_t i;

	if (!kv_mark_ok(&a))
		return;
	for (i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count;
	     i += (uint64_t)gridDim.x * blockDim.x)
		kv_mark_slot(&a, kv_mark_slot_at(&a, i));
}
