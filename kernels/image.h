/*
 * image.h - where moeft's kernels come from: the images the preload offers
 * the driver, and the kernels' names in them.
 */
#ifndef MOEFT_IMAGE_H
#define MOEFT_IMAGE_H

#define KERNEL_CAPTURE_APPEND "moeft_capture_append"
#define KERNEL_KV_SNAPSHOT "moeft_kv_snapshot"
#define KERNEL_KV_MARK "moeft_kv_mark"
#define KERNEL_KV_RELEASE "moeft_kv_release"
#define KERNEL_KV_HEADER "moeft_kv_header"

/* The sm_90 fatbin with compute_90 PTX, when nvcc built one: kernel_nimages
 * is 1, else 0.  A module image named by MOEFT_KERNEL_IMAGE goes first (a
 * driver that runs kernels on the host hands its own in that way). */
extern const void *const kernel_images[1];
extern const unsigned kernel_nimages;

#endif
