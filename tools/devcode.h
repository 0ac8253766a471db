/*
 * devcode.h - the kernels' parameter tables in a file of device code, as
 * the CUDA driver would read them: a cubin (a CUDA ELF), a fatbin (its
 * containers of cubins and PTX, compressed or not) or a host ELF (a
 * shared library or program) that carries fatbins in its .nv_fatbin
 * section.  For moeft profile check, which needs no cuobjdump.
 *
 * Everything in the file is checked before it is used: the ELF and
 * fatbin headers against the file's size, each parameter table for
 * ordinals 0..n-1 with rising offsets inside CUDA's parameter space.
 * Compressed cubins are inflated with the system's libzstd.so.1 or
 * liblz4.so.1, loaded when first needed.  A fatbin carries no checksum:
 * damage that still inflates to the right size, or leaves a table
 * well-formed, reads as other kernels.
 */
#ifndef MOEFT_DEVCODE_H
#define MOEFT_DEVCODE_H

#include <stddef.h>
#include <stdint.h>

#define DEVCODE_MAX_PARAMS 1024		/* as corpus.h */
#define DEVCODE_PARAM_BYTES 32764	/* CUDA's parameter space (12.1+) */
#define DEVCODE_CUBIN_MAX (512u << 20)	/* bytes of one cubin, inflated */

enum devcode_kind { DEVCODE_CUBIN, DEVCODE_FATBIN, DEVCODE_HOST_ELF };

/* One kernel of one cubin.  The pointers live until the call returns. */
struct devcode_kernel {
	const char *name;		/* mangled, NUL-ended, printable ASCII */
	unsigned sm;			/* the cubin's architecture: 90 for sm_90 */
	unsigned nparams;
	const uint32_t *offsets;	/* bytes into the parameter space, by ordinal */
	const uint32_t *sizes;		/* bytes, by ordinal */
};

/* What a file held, beside its kernels. */
struct devcode_file {
	enum devcode_kind kind;
	unsigned cubins;		/* read */
	unsigned ptx;			/* PTX entries (no tables; not read) */
	unsigned nsms;
	unsigned sms[32];		/* the cubins' architectures, rising */
};

/* Return 0 to go on, non-zero to stop the walk (devcode_read returns it). */
typedef int (*devcode_each)(const struct devcode_kernel *k, void *arg);

/* Whether the file's first bytes say device code (an ELF or a fatbin),
 * rather than a text file. */
int devcode_is_binary(const void *head, size_t n);

/*
 * Read the open file fd: call each for every kernel of every cubin in it,
 * and fill *f.  Returns 0, the callback's non-zero value, or -1 with why
 * (the part of the file and what is wrong with it).  A host ELF without
 * a .nv_fatbin section reads as no cubins and no PTX.
 */
int devcode_read(int fd, devcode_each each, void *arg, struct devcode_file *f, char *why,
		 size_t len);

#endif
