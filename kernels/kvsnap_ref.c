/*
 * kvsnap_ref.c - host reference of moeft_kv_snapshot.
 *
 * The same algorithm text as the kernel (kvsnap_algo.h) on C11 atomics;
 * one calling thread plays every block, chunk by chunk.  Threads calling
 * it at once behave as concurrent streams do: they share the stage's
 * counters and nothing else.
 */
#include "kvsnap_algo.h"

void kv_snapshot_ref(const struct kv_snap_args *a)
{
	uint64_t n, c;

	if (!kv_args_ok(a))
		return;
	n = kv_nchunks(a);
	for (c = 0; c < n; c++) {
		const unsigned char *src = kv_chunk_src(a, c);
		uint64_t len = kv_chunk_len(a, c);
		uint64_t h = kv_hash_part(src, len, 0, 1);
		struct kv_resv rv;

		if (!kv_begin(a, c, h, &rv))
			continue;
		kv_copy(kv_data(a) + rv.data, src, len, 0, 1);
		kv_end(a, c, h, &rv);
	}
	atom_fence_sys();
}
