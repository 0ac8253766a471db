/*
 * image.c - the images of image.h.
 */
#include "host_image.h"
#include "image.h"

#ifdef MOEFT_CAPTURE_FATBIN
extern const unsigned char moeft_capture_fatbin[];
#endif

static const char host_image[] = HOST_IMAGE(KERNEL_CAPTURE_APPEND "\0" KERNEL_KV_SNAPSHOT "\0");

const void *const kernel_images[] = {
#ifdef MOEFT_CAPTURE_FATBIN
	moeft_capture_fatbin,
#endif
	host_image,
};

const unsigned kernel_nimages = sizeof kernel_images / sizeof kernel_images[0];
