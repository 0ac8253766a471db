/*
 * fuzz_devcode.c - libFuzzer target: read any bytes as a file of device
 * code (tools/devcode.h: a cubin, a fatbin or a host ELF carrying
 * fatbins), as moeft profile check does.
 *
 * ASan and UBSan watch the reader; the target checks that a refusal says
 * why, and that every kernel handed out holds what devcode.h promises: a
 * printable name, a table of ordinals 0..n-1 with rising offsets and
 * sizes inside CUDA's parameter space.  Seeds: the cubin, fatbin and
 * libraries tests/meson.build makes from tests/engines/kernels.cu.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "devcode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_kernel(const struct devcode_kernel *k, void *arg)
{
	uint32_t end = 0;

	(void)arg;
	if (!k->name[0] || k->nparams > DEVCODE_MAX_PARAMS)
		abort();
	for (const char *c = k->name; *c; c++)
		if (*c < 0x21 || *c > 0x7e)
			abort();
	for (unsigned i = 0; i < k->nparams; i++) {
		if (!k->sizes[i] || k->offsets[i] < end ||
		    k->offsets[i] + k->sizes[i] > DEVCODE_PARAM_BYTES)
			abort();
		end = k->offsets[i] + k->sizes[i];
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct devcode_file f;
	char why[400] = "";

	if (fd < 0 && (fd = memfd_create("fuzz_devcode", MFD_CLOEXEC)) < 0)
		abort();
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	if (devcode_read(fd, check_kernel, NULL, &f, why, sizeof why) < 0 && !why[0])
		abort();
	if (f.nsms > sizeof f.sms / sizeof f.sms[0])
		abort();
	return 0;
}
