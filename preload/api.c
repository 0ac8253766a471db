/*
 * api.c - include/moeft.h, the public C API, over the preload.
 */
#include <errno.h>

#include "hostkv.h"
#include "moeft.h"
#include "requests.h"
#include "resume.h"
#include "shim.h"
#include "start.h"

int moeft_api_version(void)
{
	return MOEFT_API_VERSION;
}

const char *moeft_version(void)
{
	return MOEFT_RELEASE;
}

int moeft_instrumenting(void)
{
	return shim_interposing() && shim_events_on();
}

unsigned moeft_window(void)
{
	return moeft_instrumenting() ? preload_window() : 0;
}

int moeft_commit_requests(uint64_t first_step, uint32_t steps, const struct moeft_request *reqs,
			  size_t n)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return requests_commit(first_step, steps, reqs, n);
}

int moeft_kv_pool(const char *name, void *base, size_t bytes, size_t chunk_bytes)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return hostkv_pool(name, base, bytes, chunk_bytes);
}

int moeft_commit_kv(uint64_t first_step, uint32_t steps, const struct moeft_kv_range *ranges,
		    size_t n)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return hostkv_commit(first_step, steps, ranges, n);
}

int moeft_restored_read(int pool, size_t offset, void *dst, size_t length)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return hostkv_restored_read(pool, offset, dst, length);
}

int moeft_restored_intact(int pool, size_t offset, size_t length)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return hostkv_restored_intact(pool, offset, length);
}

int moeft_restored_device(const void *at, size_t length)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return resume_device_restored(at, length);
}

int moeft_restored_copy(const struct moeft_restored_range *ranges, size_t n, void *stream)
{
	if (!moeft_instrumenting())
		return -ENODEV;
	return resume_device_copy(ranges, n, stream);
}

int moeft_restored_step(uint64_t *step)
{
	if (!step)
		return -EINVAL;
	if (!moeft_instrumenting() || !resume_active())
		return -ENODEV;
	*step = resume_last_step();
	return 0;
}

long moeft_restored_prefix(const uint32_t *tokens, size_t n, unsigned group, uint32_t *blocks,
			   size_t max, size_t *nblocks)
{
	size_t ignored;

	if (!nblocks)
		nblocks = &ignored;
	if (!moeft_instrumenting()) {
		*nblocks = 0;
		return -ENODEV;
	}
	return resume_prefix(tokens, n, group, blocks, max, nblocks);
}
