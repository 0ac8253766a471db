/*
 * image.h - where moeft's kernels come from: the images to offer the
 * driver, in order, and the kernels' names in them.
 */
#ifndef MOEFT_IMAGE_H
#define MOEFT_IMAGE_H

#define KERNEL_CAPTURE_APPEND "moeft_capture_append"
#define KERNEL_KV_SNAPSHOT "moeft_kv_snapshot"

/* The sm_90 fatbin with compute_90 PTX when nvcc built one, then the host
 * image (host_image.h). */
extern const void *const kernel_images[];
extern const unsigned kernel_nimages;

#endif
