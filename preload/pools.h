/*
 * pools.h - which allocations are KV pools: those a KV rule's launch points
 * into, and those a MOEFT_KV selector names.  A pool is tracked in the KV
 * store, snapshotted at every boundary (snapshot.h) and logged with the
 * role KV pool.
 *
 * Every call is made with the capture lock held (capturing.h), which keeps
 * pools in step with the boundaries that read them.
 */
#ifndef MOEFT_POOLS_H
#define MOEFT_POOLS_H

#include "alloc_table.h"
#include "config.h"
#include "profile.h"

struct kvs;

/* The KV store (NULL: KV is not captured), the MOEFT_KV selectors, and
 * MOEFT_KV_TRACK=hash (every pool read whole every window).  A selector's
 * pool is always read whole: no rule says where its writes go. */
void pools_init(struct kvs *kvs, const struct kv_selector *kv, unsigned nkv, int hash_all);

/* A new allocation: a pool if a selector names it. */
void pools_of_alloc(const struct alloc_info *a);

/* A KV rule's hit: the allocations its pool pointers point into. */
void pools_of_hit(const struct rule_hit *h);

/* Allocations that would be KV pools but are not tracked (at most 256
 * counted): the store's first refusal is said once, with its reason; it
 * is asked no more, and later ones are only counted.  Not 0: every window
 * committed from then on lacks their KV, and is flagged KV-partial
 * (window.h's sink asks); the exit summary gives the count.  Any thread. */
unsigned pools_untracked(void);

#endif
