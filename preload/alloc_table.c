/*
 * alloc_table.c - the live device allocations.
 *
 * Entries sit in a pool of slots.  base[] and slot[] list the live ones in
 * address order; lookups binary-search base[].  Readers take no lock: a
 * writer (serialised by at->lock) makes seq odd, changes what readers can
 * see, and makes it even again; a reader that saw seq odd, or different
 * before and after its reads, throws them away and retries (a seqlock, in
 * the C11 form of Boehm, "Can seqlocks get along with programming language
 * memory models?", 2012).  Every field a reader touches is _Atomic and
 * accessed relaxed, so the torn reads it throws away are not data races,
 * and a reader bounds every index it reads, so garbage cannot send it out
 * of the arrays.  Inserting and removing shift base[] and slot[] one
 * atomic store at a time: O(n) for the writer (0.1 us at the top end, 3 us
 * at the bottom of 1000 entries), small beside a cudaMalloc, and readers
 * wait out only that much.
 *
 * Writers also chain the live slots by (fingerprint, size) in a hash table,
 * so the lowest free ordinal of a group costs the group's size, not the
 * table's.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_table.h"
#include "fingerprint.h"
#include "record.h"

#define LD(p) atomic_load_explicit((p), memory_order_relaxed)
#define ST(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

#define NIL UINT32_MAX
#define MAX_ENTRIES (1u << 24)

struct entry {
	_Atomic uint64_t base, size, alloc_id, fingerprint, handle;
	_Atomic uint32_t ordinal;
	_Atomic uint16_t api, role;
	/* Writer only: the (fingerprint, size) chain; hnext links free slots. */
	uint32_t hnext, hprev;
};

struct alloc_table {
	_Atomic uint64_t seq;   /* odd while a writer changes what readers see */
	_Atomic uint32_t count; /* live entries: base[0 .. count) */
	unsigned cap;
	_Atomic uint64_t *base; /* ascending */
	_Atomic uint32_t *slot; /* slot[i]: the entry whose base is base[i] */
	struct entry *ent;

	pthread_mutex_t lock;   /* writers; protects everything below */
	uint64_t next_id;
	uint32_t free_slot;
	uint32_t *bucket;       /* heads of the (fingerprint, size) chains */
	uint32_t bucket_mask;
	uint64_t *seen;         /* scratch bitmap of ordinals, cap bits */
};

const char *at_strerror(int status)
{
	switch (status) {
	case AT_OK: return "success";
	case AT_EINVAL: return "invalid argument";
	case AT_EFULL: return "allocation table full";
	case AT_EOVERLAP: return "range overlaps a live allocation";
	case AT_ENOENT: return "no such live allocation";
	default: return "unknown status";
	}
}

struct alloc_table *at_create(unsigned max_entries)
{
	struct alloc_table *at;
	unsigned nb = 1, i;

	if (max_entries == 0 || max_entries > MAX_ENTRIES)
		return NULL;
	while (nb < max_entries)
		nb <<= 1;
	if (!(at = calloc(1, sizeof *at)))
		return NULL;
	if (pthread_mutex_init(&at->lock, NULL) != 0) {
		free(at);
		return NULL;
	}
	at->cap = max_entries;
	at->base = malloc(max_entries * sizeof *at->base);
	at->slot = malloc(max_entries * sizeof *at->slot);
	at->ent = malloc(max_entries * sizeof *at->ent);
	at->bucket = malloc(nb * sizeof *at->bucket);
	at->seen = calloc((max_entries + 63) / 64, sizeof *at->seen);
	if (!at->base || !at->slot || !at->ent || !at->bucket || !at->seen) {
		at_destroy(at);
		return NULL;
	}
	/* Write every page now, so the first allocations do not fault them in. */
	for (i = 0; i < max_entries; i++) {
		ST(&at->base[i], 0);
		ST(&at->slot[i], 0);
		memset(&at->ent[i], 0, sizeof at->ent[i]);
		at->ent[i].hnext = i + 1 < max_entries ? i + 1 : NIL;
	}
	for (i = 0; i < nb; i++)
		at->bucket[i] = NIL;
	at->bucket_mask = nb - 1;
	at->next_id = 1;
	at->free_slot = 0;
	return at;
}

void at_destroy(struct alloc_table *at)
{
	if (!at)
		return;
	pthread_mutex_destroy(&at->lock);
	free(at->base);
	free(at->slot);
	free(at->ent);
	free(at->bucket);
	free(at->seen);
	free(at);
}

/* ---- readers ----------------------------------------------------------- */

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* A writer section lasts microseconds; yield now and then in case its
 * thread was preempted inside it. */
static void backoff(unsigned *spins)
{
	if (++*spins % 64 == 0)
		sched_yield();
	else
		cpu_relax();
}

/* How many of base[0 .. n) are <= addr.  Branch-free halving (the answer
 * lies in [lo, lo + len)), so random lookups cost no mispredictions. */
static unsigned upper_bound(const struct alloc_table *at, unsigned n, uint64_t addr)
{
	unsigned lo = 0, len = n, half;

	if (n == 0)
		return 0;
	while (len > 1) {
		half = len / 2;
		lo = LD(&at->base[lo + half]) <= addr ? lo + half : lo;
		len -= half;
	}
	return lo + (LD(&at->base[lo]) <= addr);
}

static void load_entry(const struct entry *e, struct alloc_info *a)
{
	a->alloc_id = LD(&e->alloc_id);
	a->base = LD(&e->base);
	a->size = LD(&e->size);
	a->fingerprint = LD(&e->fingerprint);
	a->handle = LD(&e->handle);
	a->ordinal = LD(&e->ordinal);
	a->api = LD(&e->api);
	a->role = LD(&e->role);
}

/* Sorted index i, or when !next the entry containing addr.  Both racy: the
 * caller validates with seq. */
static bool read_entry(const struct alloc_table *at, uint64_t addr, bool next,
		       struct alloc_info *a)
{
	unsigned n = LD(&at->count), i;
	uint32_t s;

	if (n > at->cap)
		n = at->cap;
	if (next)
		i = addr ? upper_bound(at, n, addr - 1) : 0;
	else
		i = upper_bound(at, n, addr) - 1;       /* wraps to UINT_MAX: none */
	if (i >= n || (s = LD(&at->slot[i])) >= at->cap)
		return false;
	load_entry(&at->ent[s], a);
	return next || addr - a->base < a->size;
}

static int lookup(const struct alloc_table *at, uint64_t addr, bool next,
		  struct alloc_info *out)
{
	struct alloc_info a;
	unsigned spins = 0;
	uint64_t s;
	bool found;

	if (!at)
		return AT_EINVAL;
	for (;;) {
		s = atomic_load_explicit(&at->seq, memory_order_acquire);
		if (!(s & 1)) {
			found = read_entry(at, addr, next, &a);
			atomic_thread_fence(memory_order_acquire);
			if (LD(&at->seq) == s)
				break;
		}
		backoff(&spins);
	}
	if (!found)
		return AT_ENOENT;
	if (out)
		*out = a;
	return AT_OK;
}

int at_find(const struct alloc_table *at, uint64_t addr, struct alloc_info *out)
{
	return lookup(at, addr, false, out);
}

int at_next(const struct alloc_table *at, uint64_t addr, struct alloc_info *out)
{
	return lookup(at, addr, true, out);
}

unsigned at_count(const struct alloc_table *at)
{
	return at ? LD(&at->count) : 0;
}

/* ---- writers (at->lock held) ------------------------------------------ */

static void write_begin(struct alloc_table *at)
{
	ST(&at->seq, LD(&at->seq) + 1);
	atomic_thread_fence(memory_order_release);
}

static void write_end(struct alloc_table *at)
{
	atomic_store_explicit(&at->seq, LD(&at->seq) + 1, memory_order_release);
}

static uint32_t *chain_of(struct alloc_table *at, uint64_t fp, uint64_t size)
{
	return &at->bucket[mix64(fp ^ mix64(size)) & at->bucket_mask];
}

static bool same_group(const struct entry *e, uint64_t fp, uint64_t size)
{
	return LD(&e->fingerprint) == fp && LD(&e->size) == size;
}

/* The smallest ordinal no live member of the group holds (see at_insert).
 * A group has fewer than cap members, so the answer is below cap. */
static uint32_t free_ordinal(struct alloc_table *at, uint64_t fp, uint64_t size)
{
	uint32_t head = *chain_of(at, fp, size), s, o, w;

	for (s = head; s != NIL; s = at->ent[s].hnext)
		if (same_group(&at->ent[s], fp, size)) {
			o = LD(&at->ent[s].ordinal);
			at->seen[o / 64] |= UINT64_C(1) << (o % 64);
		}
	for (w = 0; at->seen[w] == UINT64_MAX; w++)
		;
	o = w * 64 + (uint32_t)__builtin_ctzll(~at->seen[w]);
	for (s = head; s != NIL; s = at->ent[s].hnext)
		if (same_group(&at->ent[s], fp, size))
			at->seen[LD(&at->ent[s].ordinal) / 64] = 0;
	return o;
}

static void chain_link(struct alloc_table *at, uint32_t s)
{
	struct entry *e = &at->ent[s];
	uint32_t *head = chain_of(at, LD(&e->fingerprint), LD(&e->size));

	e->hprev = NIL;
	e->hnext = *head;
	if (*head != NIL)
		at->ent[*head].hprev = s;
	*head = s;
}

static void chain_unlink(struct alloc_table *at, uint32_t s)
{
	struct entry *e = &at->ent[s];

	if (e->hprev != NIL)
		at->ent[e->hprev].hnext = e->hnext;
	else
		*chain_of(at, LD(&e->fingerprint), LD(&e->size)) = e->hnext;
	if (e->hnext != NIL)
		at->ent[e->hnext].hprev = e->hprev;
}

static int add(struct alloc_table *at, uint64_t base, uint64_t size, unsigned api,
	       uint64_t handle, uint64_t fp, struct alloc_info *out)
{
	unsigned n, i, j;
	uint32_t s, ord;
	struct entry *e;
	int rc = AT_OK;

	if (!at || size == 0 || size > UINT64_MAX - base)
		return AT_EINVAL;
	pthread_mutex_lock(&at->lock);
	n = LD(&at->count);
	i = upper_bound(at, n, base);
	if ((i > 0 && LD(&at->base[i - 1]) + LD(&at->ent[LD(&at->slot[i - 1])].size) > base) ||
	    (i < n && LD(&at->base[i]) < base + size)) {
		rc = AT_EOVERLAP;
		goto out;
	}
	if (n == at->cap) {
		rc = AT_EFULL;
		goto out;
	}
	ord = free_ordinal(at, fp, size);
	s = at->free_slot;
	e = &at->ent[s];
	at->free_slot = e->hnext;

	write_begin(at);
	ST(&e->alloc_id, at->next_id++);
	ST(&e->base, base);
	ST(&e->size, size);
	ST(&e->fingerprint, fp);
	ST(&e->handle, handle);
	ST(&e->ordinal, ord);
	ST(&e->api, (uint16_t)api);
	ST(&e->role, (uint16_t)ALLOC_ROLE_OTHER);
	for (j = n; j > i; j--) {
		ST(&at->base[j], LD(&at->base[j - 1]));
		ST(&at->slot[j], LD(&at->slot[j - 1]));
	}
	ST(&at->base[i], base);
	ST(&at->slot[i], s);
	ST(&at->count, n + 1);
	write_end(at);

	chain_link(at, s);
	if (out)
		load_entry(e, out);
out:
	pthread_mutex_unlock(&at->lock);
	return rc;
}

/* Remove sorted index i. */
static void drop(struct alloc_table *at, unsigned i, struct alloc_info *out)
{
	unsigned n = LD(&at->count), j;
	uint32_t s = LD(&at->slot[i]);

	if (out)
		load_entry(&at->ent[s], out);
	write_begin(at);
	for (j = i; j + 1 < n; j++) {
		ST(&at->base[j], LD(&at->base[j + 1]));
		ST(&at->slot[j], LD(&at->slot[j + 1]));
	}
	ST(&at->count, n - 1);
	write_end(at);
	chain_unlink(at, s);
	at->ent[s].hnext = at->free_slot;
	at->free_slot = s;
}

int at_insert(struct alloc_table *at, uint64_t base, uint64_t size, unsigned api,
	      uint64_t fingerprint, struct alloc_info *out)
{
	if (api == 0 || api >= ALLOC_API_COUNT || api == ALLOC_API_VMM)
		return AT_EINVAL;
	return add(at, base, size, api, 0, fingerprint, out);
}

int at_map(struct alloc_table *at, uint64_t va, uint64_t size, uint64_t handle,
	   uint64_t fingerprint, struct alloc_info *out)
{
	return add(at, va, size, ALLOC_API_VMM, handle, fingerprint, out);
}

int at_remove(struct alloc_table *at, uint64_t base, struct alloc_info *out)
{
	unsigned i;
	int rc = AT_ENOENT;

	if (!at)
		return AT_EINVAL;
	pthread_mutex_lock(&at->lock);
	i = upper_bound(at, LD(&at->count), base);
	if (i > 0 && LD(&at->base[i - 1]) == base) {
		drop(at, i - 1, out);
		rc = AT_OK;
	}
	pthread_mutex_unlock(&at->lock);
	return rc;
}

int at_unmap(struct alloc_table *at, uint64_t va, uint64_t size, struct alloc_info *out)
{
	const struct entry *e;
	unsigned n, i;
	int rc = AT_ENOENT;

	if (!at || size == 0 || size > UINT64_MAX - va)
		return AT_EINVAL;
	pthread_mutex_lock(&at->lock);
	n = LD(&at->count);
	for (i = va ? upper_bound(at, n, va - 1) : 0; i < n && LD(&at->base[i]) < va + size; i++) {
		e = &at->ent[LD(&at->slot[i])];
		if (LD(&e->api) == ALLOC_API_VMM && LD(&e->size) <= va + size - LD(&e->base)) {
			drop(at, i, out);
			rc = AT_OK;
			break;
		}
	}
	pthread_mutex_unlock(&at->lock);
	return rc;
}

int at_set_role(struct alloc_table *at, uint64_t alloc_id, unsigned role)
{
	struct entry *e;
	unsigned n, i;
	int rc = AT_ENOENT;

	if (!at || role >= ALLOC_ROLE_COUNT)
		return AT_EINVAL;
	pthread_mutex_lock(&at->lock);
	n = LD(&at->count);
	for (i = 0; i < n; i++) {
		e = &at->ent[LD(&at->slot[i])];
		if (LD(&e->alloc_id) == alloc_id) {
			write_begin(at);
			ST(&e->role, (uint16_t)role);
			write_end(at);
			rc = AT_OK;
			break;
		}
	}
	pthread_mutex_unlock(&at->lock);
	return rc;
}

void at_to_record(const struct alloc_info *a, struct rec_alloc *r)
{
	r->alloc_id = a->alloc_id;
	r->base = a->base;
	r->size = a->size;
	r->fingerprint = a->fingerprint;
	r->ordinal = a->ordinal;
	r->api = a->api;
	r->role = a->role;
}
