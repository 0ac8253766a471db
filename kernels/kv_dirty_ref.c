/*
 * kv_dirty_ref.c - host reference of moeft_kv_mark_dirty.
 *
 * The kernel's algorithm text (capture_algo.h) run by one thread over the
 * whole slot list; bits are set with atomic OR, so threads may share a
 * bitmap as concurrent streams do.
 */
#include "capture_algo.h"

void kv_mark_dirty_ref(const struct kv_dirty_args *a)
{
	kv_mark_range(a, 0, 1);
}
