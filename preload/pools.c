/*
 * pools.c - KV pools (pools.h).
 */
#include <inttypes.h>
#include <stdatomic.h>

#include "allocs.h"
#include "kvsnap.h"
#include "kvstore.h"
#include "msg.h"
#include "pools.h"
#include "resume.h"
#include "snapshot.h"

static struct {
	struct kvs *kvs;
	const struct kv_selector *kv;
	unsigned nkv;
	unsigned seen[CONFIG_KV_MAX];   /* allocations of each selector's size */
	atomic_bool said_full;
} po;

void pools_init(struct kvs *kvs, const struct kv_selector *kv, unsigned nkv)
{
	po.kvs = kvs;
	po.kv = kv;
	po.nkv = nkv;
}

/* Chunks of `block` bytes, or fewer for a small pool. */
static uint64_t chunk_for(uint64_t size, uint64_t block)
{
	uint64_t c = KVSNAP_MIN_CHUNK;

	while (c < block && c < size)
		c *= 2;
	return c;
}

/* Make allocation a a KV pool tracked in chunks of `chunk` bytes: in the
 * KV store, the snapshot list and the log (its ALLOC again, role KV pool). */
static void add_pool(const struct alloc_info *a, uint64_t chunk)
{
	struct kvs_pool_desc d = { .fingerprint = a->fingerprint, .size = a->size,
				   .chunk_bytes = chunk, .ordinal = a->ordinal };
	uint32_t no;
	int r;

	if (!po.kvs || snap_has_pool(a->alloc_id))
		return;
	if (resume_active())
		resume_check_kv_pool(a);
	allocs_begin();
	r = kvs_pool(po.kvs, &d, &no);
	if (r == 0 && (r = snap_add_pool(a->alloc_id, a->base, a->size, chunk, no)) == 0)
		allocs_set_role(a, ALLOC_ROLE_KV_POOL);
	allocs_end();
	if (r < 0 && msg_first(&po.said_full))
		msg_log(WAL_LOG_WARN, "KV pool of %" PRIu64 " bytes at 0x%" PRIx64 " not tracked: %s",
			a->size, a->base, r == WAL_EFULL ? "too many pools" : wal_strerror(r));
	else if (r == 0)
		msg_log(WAL_LOG_DEBUG, "KV pool %u: %" PRIu64 " bytes at 0x%" PRIx64 ", chunks of %"
			PRIu64, no, a->size, a->base, chunk);
}

void pools_of_hit(const struct rule_hit *h)
{
	struct alloc_info a;
	unsigned i;

	for (i = 0; i < h->npool; i++)
		if (allocs_find(h->pool[i], &a) == 0)
			add_pool(&a, chunk_for(a.size, CONFIG_KV_BLOCK_DEFAULT));
}

void pools_of_alloc(const struct alloc_info *a)
{
	unsigned i;

	for (i = 0; i < po.nkv; i++) {
		const struct kv_selector *k = &po.kv[i];

		if (k->size != a->size)
			continue;
		if (k->ordinal < 0 || po.seen[i] == (unsigned)k->ordinal)
			add_pool(a, k->block);
		po.seen[i]++;
	}
}
