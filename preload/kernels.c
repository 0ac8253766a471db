/*
 * kernels.c - moeft's own kernels on the device (kernels.h).
 */
#include "image.h"
#include "kernels.h"
#include "shim.h"

/* One block per chunk at a time: enough blocks to fill a large GPU. */
#define SNAPSHOT_BLOCKS 1024u

/* Written once, before capture is switched on. */
static void *fns[2];

int kernels_load(char *why, size_t whylen)
{
	static const char *const names[] = { KERNEL_CAPTURE_APPEND, KERNEL_KV_SNAPSHOT };
	static const size_t sizes[] = { sizeof(struct cap_append_args),
					sizeof(struct kv_snap_args) };

	return shim_dev_load(kernel_images, kernel_nimages, names, sizes, 2, fns, why, whylen);
}

int kernels_append(void *stream, const struct cap_append_args *a)
{
	return shim_dev_launch(fns[0], 1, CAP_APPEND_THREADS, stream, (void *)a);
}

int kernels_snapshot(void *stream, const struct kv_snap_args *a)
{
	uint64_t chunks = (a->bytes + a->chunk_bytes - 1) / a->chunk_bytes;

	return shim_dev_launch(fns[1], chunks < SNAPSHOT_BLOCKS ? (unsigned)chunks : SNAPSHOT_BLOCKS,
			       KVSNAP_THREADS, stream, (void *)a);
}
