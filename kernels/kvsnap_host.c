/*
 * kvsnap_host.c - the host's side of the KV snapshot: the chunk hash (the
 * kernel's own algorithm text, kvsnap_algo.h), the default chunk size,
 * the staging area's setup and the mark's validity.  Linked into the preload, which sets up staging and pools, and
 * into the host reference.
 */
#include <string.h>

#include "kvsnap_algo.h"

/*
 * Small chunks keep a window's bytes near the bytes its tokens wrote: a
 * StaticCache's [batch, head, position, dim] layout puts one token's K in
 * a chunk per (batch, head) row, so 64 KiB chunks moved 16 times the bytes
 * of a 16-step window.  Each chunk costs 8 bytes of sums, which every
 * snapshot reads and writes, and about 100 of staging: the bound keeps
 * that small beside the pool's own bytes.
 */
uint64_t kv_default_chunk(uint64_t bytes)
{
	uint64_t c = KVSNAP_MIN_CHUNK;

	while (c < (64u << 10) && bytes > c << 16)
		c *= 2;
	return c;
}

uint64_t kv_chunk_hash(const void *p, uint64_t len)
{
	return kv_hash_part(p, len, 0, 1);
}

/* The terms of zero words have no shortcut: kv_mix(0, i) for each i. */
uint64_t kv_zero_hash(uint64_t len)
{
	uint64_t n = kv_nwords(len), h = 0, i;

	for (i = 0; i < n; i++)
		h += kv_mix(0, i);
	return h;
}

/*
 * The table gets an entry per min_chunk bytes of the whole area, plus 64
 * for short last chunks: more than the data area can fill with chunks of
 * min_chunk bytes or more, at 32 bytes per entry (under 1% of len for
 * 4 KiB chunks).
 */
int kv_stage_init(struct kv_stage *s, size_t len, uint64_t min_chunk)
{
	uint64_t unit = (min_chunk + KVSNAP_ALIGN - 1) & ~(uint64_t)(KVSNAP_ALIGN - 1);
	uint64_t entries, data_off;

	if (((uintptr_t)s & (KVSNAP_ALIGN - 1)) || min_chunk == 0 ||
	    min_chunk > KVSNAP_MAX_CHUNK || len < sizeof *s)
		return -1;
	entries = (len - sizeof *s) / unit + 64;
	data_off = sizeof *s + ((entries * sizeof(struct kv_stage_entry) + KVSNAP_ALIGN - 1) &
				~(uint64_t)(KVSNAP_ALIGN - 1));
	if (data_off > len || len - data_off < min_chunk)
		return -1;
	memset(s, 0, sizeof *s);
	s->capacity = len - data_off;
	s->max_entries = entries;
	s->table_off = sizeof *s;
	s->data_off = data_off;
	return 0;
}

void kv_stage_reset(struct kv_stage *s)
{
	s->used = 0;
	s->entries = 0;
	s->overflow = 0;
	s->overflow_bytes = 0;
	s->read = 0;
}

int kv_mark_valid(const struct kv_mark_args *a)
{
	return kv_mark_ok(a);
}
