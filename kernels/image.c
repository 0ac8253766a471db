/*
 * image.c - the images of image.h.
 */
#include <stddef.h>

#include "image.h"

#ifdef MOEFT_CAPTURE_FATBIN
extern const unsigned char moeft_capture_fatbin[];

const void *const kernel_images[1] = { moeft_capture_fatbin };
const unsigned kernel_nimages = 1;
#else
const void *const kernel_images[1] = { NULL };
const unsigned kernel_nimages = 0;
#endif
