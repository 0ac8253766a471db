/*
 * kvsnap_ref.c - host references of moeft_kv_snapshot, moeft_kv_mark and
 * moeft_kv_release.
 *
 * The same algorithm text as the kernels (kvsnap_algo.h) on C11 atomics;
 * one calling thread plays every block, chunk by chunk.  Threads calling
 * them at once behave as concurrent streams do: they share the stage's
 * counters and the dirty bitmaps, and nothing else.
 */
#include "kvsnap_algo.h"

static void snapshot_chunk(const struct kv_snap_args *a, uint64_t c)
{
	const unsigned char *src = kv_chunk_src(a, c);
	uint64_t len = kv_chunk_len(a, c), h;

	kv_take_chunk(a, c);
	h = kv_hash_part(src, len, 0, 1);
	struct kv_resv rv;

	if (kv_begin(a, c, h, &rv) != KV_STAGE)
		return;
	kv_copy(kv_data(a) + rv.data, src, len, 0, 1);
	kv_end(a, c, h, &rv);
}

void kv_snapshot_ref(const struct kv_snap_args *a)
{
	uint64_t n, c, w;
	uint32_t bits;

	if (!kv_args_ok(a))
		return;
	if (kv_sparse(a)) {
		for (w = 0, n = kv_dirty_words(a); w < n; w++)
			for (bits = kv_take_word(a, w); bits; bits &= bits - 1)
				snapshot_chunk(a, w * 32 + (uint64_t)__builtin_ctz(bits));
	} else {
		for (c = 0, n = kv_nchunks(a); c < n; c++)
			snapshot_chunk(a, c);
	}
	atom_fence_sys();
}

void kv_mark_ref(const struct kv_mark_args *a)
{
	uint64_t i;

	if (!kv_mark_ok(a))
		return;
	for (i = 0; i < a->count; i++)
		kv_mark_slot(a, kv_mark_slot_at(a, i));
}

void kv_release_ref(const struct kv_release_args *a)
{
	kv_release(a);
}

void kv_header_ref(const struct kv_header_args *a)
{
	kv_header_copy(a);
}
