/*
 * kernels.h - moeft's own kernels (kernels/) on the device, through the
 * shim: loaded from the first image the driver takes (MOEFT_KERNEL_IMAGE's
 * file, then the embedded fatbin), launched on the serving process's
 * streams or moeft's side stream.
 */
#ifndef MOEFT_PRELOAD_KERNELS_H
#define MOEFT_PRELOAD_KERNELS_H

#include <stddef.h>

#include "capture.h"
#include "kvsnap.h"

/* At start: the module image file MOEFT_KERNEL_IMAGE names ("" or NULL:
 * none), offered to the driver before the embedded fatbin. */
void kernels_init(const char *image_path);

/* Load the kernels, in the calling thread's current context: 0, or -1
 * with one line in why. */
int kernels_load(char *why, size_t whylen);

/* Enqueue moeft_capture_append(*a) (one block), moeft_kv_snapshot(*a),
 * moeft_kv_mark(*a), moeft_kv_release(*a) or moeft_kv_header (dst, src:
 * device views) on stream: 0 or the driver's CUresult.  Only after
 * kernels_load succeeded. */
int kernels_append(void *stream, const struct cap_append_args *a);
int kernels_snapshot(void *stream, const struct kv_snap_args *a);
int kernels_mark(void *stream, const struct kv_mark_args *a);
int kernels_release(void *stream, const struct kv_release_args *a);
int kernels_header(void *stream, struct kv_stage *dst, const struct kv_stage *src);

#endif
