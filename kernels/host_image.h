/*
 * host_image.h - the module image format of a driver that runs kernels on
 * the host.
 *
 * A real driver takes moeft's kernels from the fatbin nvcc builds.  A
 * driver that runs kernels as host functions (the tests' CPU fixture)
 * cannot run device code; it takes this format instead: HOST_IMAGE_MAGIC
 * and its NUL, then each kernel name NUL-terminated, then an empty name,
 * and runs the host implementation it has for each name (for moeft's
 * kernels, the host references of this folder).  A real driver rejects it
 * as an invalid image, so it is always safe to offer after the fatbin.
 */
#ifndef MOEFT_HOST_IMAGE_H
#define MOEFT_HOST_IMAGE_H

#define HOST_IMAGE_MAGIC "MOEFT-HOST-IMAGE"

/* static const char img[] = HOST_IMAGE("k1\0" "k2\0"); */
#define HOST_IMAGE(names) HOST_IMAGE_MAGIC "\0" names

#endif
