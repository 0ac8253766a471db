/*
 * hostkv.h - KV pools in host memory that an engine adapter registers and
 * commits, and reads back after a restore: moeft_kv_pool, moeft_commit_kv
 * and moeft_restored_read and moeft_restored_intact of include/moeft.h (their contracts there).
 */
#ifndef MOEFT_HOSTKV_H
#define MOEFT_HOSTKV_H

#include <stddef.h>
#include <stdint.h>

#include "moeft.h"

/* Once the preload's start has been asked for. */
int hostkv_pool(const char *name, void *base, size_t bytes, size_t chunk_bytes);
int hostkv_commit(uint64_t first_step, uint32_t steps, const struct moeft_kv_range *ranges,
		  size_t n);
int hostkv_restored_read(int pool, size_t offset, void *dst, size_t length);
int hostkv_restored_intact(int pool, size_t offset, size_t length);

#endif
