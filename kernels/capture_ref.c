/*
 * capture_ref.c - host reference of moeft_capture_append.
 *
 * The same algorithm text as the kernel (capture_algo.h) on C11 atomics;
 * one calling thread plays the whole block.  Threads calling it at once
 * behave as concurrent streams do.
 */
#include "capture_algo.h"

int cap_append_begin_ref(const struct cap_append_args *a, struct cap_resv *rv)
{
	if (!cap_begin(a, rv))
		return 0;
	cap_copy(a->ring, rv, a, 0, 1);
	return 1;
}

void cap_append_end_ref(struct cap_ring *ring, const struct cap_resv *rv)
{
	cap_publish(ring, rv);
}

int cap_append_ref(const struct cap_append_args *a)
{
	struct cap_resv rv;

	if (!cap_append_begin_ref(a, &rv))
		return 0;
	cap_append_end_ref(a->ring, &rv);
	return 1;
}
