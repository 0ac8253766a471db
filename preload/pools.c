/*
 * pools.c - KV pools (pools.h).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "allocs.h"
#include "kvsnap.h"
#include "kvstore.h"
#include "msg.h"
#include "pools.h"
#include "resume.h"
#include "snapshot.h"

/* Allocations refused a pool that are remembered, so that each is counted
 * once however often its KV writes are launched. */
#define REFUSED_MAX 256u

static struct {
	struct kvs *kvs;
	const struct kv_selector *kv;
	unsigned nkv;
	int hash_all;                   /* MOEFT_KV_TRACK=hash */
	unsigned seen[CONFIG_KV_MAX];   /* allocations of each selector's size */
	/* Once the store refused a pool (its table full, the file cannot
	 * grow) it is asked no more: a KV rule hits every step, and each try
	 * would cost a failing fallocate and the store's line again. */
	int refusing;
	uint64_t refused[REFUSED_MAX];
	atomic_uint nrefused;
} po;

void pools_init(struct kvs *kvs, const struct kv_selector *kv, unsigned nkv, int hash_all)
{
	po.kvs = kvs;
	po.kv = kv;
	po.nkv = nkv;
	po.hash_all = hash_all;
}

static int was_refused(uint64_t alloc_id)
{
	unsigned n = atomic_load_explicit(&po.nrefused, memory_order_relaxed);

	for (unsigned i = 0; i < n && i < REFUSED_MAX; i++)
		if (po.refused[i] == alloc_id)
			return 1;
	return 0;
}

/* Remember and count a refused allocation; the count stops at
 * REFUSED_MAX.  Under the capture lock, as every call here; the consumer
 * reads the count as it commits (pools_untracked). */
static void refuse(uint64_t alloc_id)
{
	unsigned n = atomic_load_explicit(&po.nrefused, memory_order_relaxed);

	if (n == REFUSED_MAX)
		return;
	po.refused[n] = alloc_id;
	atomic_store_explicit(&po.nrefused, n + 1, memory_order_release);
}

/* Make allocation a a KV pool tracked in chunks of `chunk` bytes: in the
 * KV store, the snapshot list (hashed: read whole every window) and the
 * log (its ALLOC again, role KV pool). */
static void add_pool(const struct alloc_info *a, uint64_t chunk, int hashed)
{
	struct kvs_pool_desc d = { .fingerprint = a->fingerprint, .size = a->size,
				   .chunk_bytes = chunk, .ordinal = a->ordinal };
	char why[64];
	uint32_t no;
	int r;

	/* The role first: a KV launch names its pools every step, and the
	 * pool list is long for a model with many layers. */
	if (!po.kvs || a->role == ALLOC_ROLE_KV_POOL || snap_has_pool(a->alloc_id) ||
	    was_refused(a->alloc_id))
		return;
	if (resume_active())
		resume_check_kv_pool(a);
	if (po.refusing) {
		refuse(a->alloc_id);
		return;
	}
	allocs_begin();
	r = kvs_pool(po.kvs, &d, &no);
	if (r == 0 && (r = snap_add_pool(a->alloc_id, a->base, a->size, chunk, no,
					 hashed || po.hash_all)) == 0)
		allocs_set_role(a, ALLOC_ROLE_KV_POOL);
	allocs_end();
	if (r < 0) {
		po.refusing = 1;
		refuse(a->alloc_id);
		if (r == WAL_EFULL)
			snprintf(why, sizeof why, "the KV store's pool table is full (%u pools)",
				 KVS_MAX_POOLS);
		else
			snprintf(why, sizeof why, "%s", wal_strerror(r));
		msg_log(WAL_LOG_WARN, "KV pool of %" PRIu64 " bytes at 0x%" PRIx64 " not tracked: "
			"%s; no more pools are tried, and every window from now on is committed "
			"KV-partial (a restore refuses it; the exit summary counts the pools not "
			"tracked)", a->size, a->base, why);
	} else {
		msg_log(WAL_LOG_DEBUG, "KV pool %u: %" PRIu64 " bytes at 0x%" PRIx64 ", chunks of %"
			PRIu64, no, a->size, a->base, chunk);
	}
}

unsigned pools_untracked(void)
{
	return atomic_load_explicit(&po.nrefused, memory_order_acquire);
}

void pools_of_hit(const struct rule_hit *h)
{
	struct alloc_info a;
	unsigned i;

	for (i = 0; i < h->npool; i++)
		if (allocs_find(h->pool[i], &a) == 0)
			add_pool(&a, kv_default_chunk(a.size), 0);
}

void pools_of_alloc(const struct alloc_info *a)
{
	unsigned i;

	for (i = 0; i < po.nkv; i++) {
		const struct kv_selector *k = &po.kv[i];

		if (k->size != a->size)
			continue;
		if (k->ordinal < 0 || po.seen[i] == (unsigned)k->ordinal)
			add_pool(a, k->block ? k->block : kv_default_chunk(a->size), 1);
		po.seen[i]++;
	}
}
