/*
 * hostkv.h - KV pools in host memory that an engine adapter registers and
 * commits: moeft_kv_pool and moeft_commit_kv of include/moeft.h (their
 * contracts there), over this process's log and KV store.
 */
#ifndef MOEFT_HOSTKV_H
#define MOEFT_HOSTKV_H

#include <stddef.h>
#include <stdint.h>

#include "moeft.h"

/* moeft_kv_pool and moeft_commit_kv, once the preload's start has been
 * asked for. */
int hostkv_pool(const char *name, void *base, size_t bytes, size_t chunk_bytes);
int hostkv_commit(uint64_t first_step, uint32_t steps, const struct moeft_kv_range *ranges,
		  size_t n);

#endif
