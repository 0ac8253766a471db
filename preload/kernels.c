/*
 * kernels.c - moeft's own kernels on the device (kernels.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "image.h"
#include "kernels.h"
#include "shim.h"

/* One block per chunk at a time: enough blocks to fill a large GPU. */
#define SNAPSHOT_BLOCKS 1024u
/* A mark has a slot per token of the launch: a few blocks do. */
#define MARK_BLOCKS 16u

enum { FN_APPEND, FN_SNAPSHOT, FN_MARK, FN_RELEASE, FN_HEADER, NFNS };

static const char *image_path;	/* MOEFT_KERNEL_IMAGE, or NULL */
/* Written once, before capture is switched on. */
static void *fns[NFNS];

void kernels_init(const char *path)
{
	image_path = path && *path ? path : NULL;
}

/* The file at path, whole, into a new buffer: it, or NULL with why. */
static void *read_image(const char *path, char *why, size_t whylen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *buf = NULL;
	struct stat st;
	ssize_t n = -1;

	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 && (buf = malloc((size_t)st.st_size)))
		n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n < 0 || (fd >= 0 && n != st.st_size)) {
		snprintf(why, whylen, "MOEFT_KERNEL_IMAGE=%s: %s", path,
			 n < 0 && errno ? strerror(errno) : "cannot read it whole");
		free(buf);
		buf = NULL;
	}
	if (fd >= 0)
		close(fd);
	return buf;
}

int kernels_load(char *why, size_t whylen)
{
	static const char *const names[NFNS] = {
		[FN_APPEND] = KERNEL_CAPTURE_APPEND, [FN_SNAPSHOT] = KERNEL_KV_SNAPSHOT,
		[FN_MARK] = KERNEL_KV_MARK, [FN_RELEASE] = KERNEL_KV_RELEASE,
		[FN_HEADER] = KERNEL_KV_HEADER,
	};
	static const size_t sizes[NFNS] = {
		[FN_APPEND] = sizeof(struct cap_append_args),
		[FN_SNAPSHOT] = sizeof(struct kv_snap_args),
		[FN_MARK] = sizeof(struct kv_mark_args),
		[FN_RELEASE] = sizeof(struct kv_release_args),
		[FN_HEADER] = sizeof(struct kv_header_args),
	};
	const void *images[2];
	unsigned n = 0;
	void *file = NULL;
	int r;

	if (image_path && !(images[n++] = file = read_image(image_path, why, whylen)))
		return -1;
	if (kernel_nimages)
		images[n++] = kernel_images[0];
	if (!n) {
		snprintf(why, whylen, "no image of moeft's kernels (built without nvcc, and no "
			 "MOEFT_KERNEL_IMAGE)");
		return -1;
	}
	/* The driver keeps its own copy of a module it loaded. */
	r = shim_dev_load(images, n, names, sizes, NFNS, fns, why, whylen);
	free(file);
	return r;
}

int kernels_append(void *stream, const struct cap_append_args *a)
{
	return shim_dev_launch(fns[FN_APPEND], 1, CAP_APPEND_THREADS, stream, (void *)a);
}

int kernels_snapshot(void *stream, const struct kv_snap_args *a)
{
	uint64_t chunks = (a->bytes + a->chunk_bytes - 1) / a->chunk_bytes;

	return shim_dev_launch(fns[FN_SNAPSHOT],
			       chunks < SNAPSHOT_BLOCKS ? (unsigned)chunks : SNAPSHOT_BLOCKS,
			       KVSNAP_THREADS, stream, (void *)a);
}

int kernels_mark(void *stream, const struct kv_mark_args *a)
{
	uint64_t blocks = (a->count + KVMARK_THREADS - 1) / KVMARK_THREADS;

	return shim_dev_launch(fns[FN_MARK], blocks == 0 ? 1 : blocks < MARK_BLOCKS ?
			       (unsigned)blocks : MARK_BLOCKS, KVMARK_THREADS, stream, (void *)a);
}

int kernels_release(void *stream, const struct kv_release_args *a)
{
	return shim_dev_launch(fns[FN_RELEASE], 1, 1, stream, (void *)a);
}

int kernels_header(void *stream, struct kv_stage *dst, const struct kv_stage *src)
{
	struct kv_header_args a = { dst, src };

	return shim_dev_launch(fns[FN_HEADER], 1, 1, stream, &a);
}
