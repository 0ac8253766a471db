/*
 * snapshot.c - the device side of a window boundary (snapshot.h).
 *
 * Device resources are made on the first boundary, not at start: only
 * then is a context sure to be current.  What every chunk of a snapshot
 * touches lives in device memory (kvsnap.h): each pool's sums[] (the hash
 * of every chunk as last staged, written first by a KVSNAP_FRESH
 * snapshot) and ctl, the staging header's copy that the snapshots reserve
 * from, copied in before them and back to the staging area after them.
 * Where the driver has no device memory for them they go to pinned host
 * memory mapped for the device, as the staging area is, with one warning:
 * the same kernel then crosses the bus for every chunk.
 *
 * The pool list grows as pools come (an array, reallocated under the list
 * lock).  snap_drop_pool (the allocation log calls it as it logs a free)
 * and snap_forget (the consumer) are made without the caller's lock, so
 * they take the list lock; every other call is under the caller's, as
 * snap_add_pool is, and reads the list without it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kernels.h"
#include "kvstore.h"
#include "monotonic.h"
#include "msg.h"
#include "profile.h"
#include "shim.h"
#include "snapshot.h"
#include "window.h"

struct pool {
	uint64_t alloc_id, base, size, chunk;
	uint32_t pool_no;
	atomic_int live;
	uint64_t sums;          /* the device's view of nchunks hashes; 0 until */
	int fresh;              /* the first boundary, which writes them all */
	uint64_t dirty;         /* the device's view of its dirty bitmap; 0 until
				   the first mark */
	int hashed;             /* written where no mark sees it: every chunk
				   is hashed, for good */
};

static struct {
	void *side, *done, *events[CLK_MAX_LANES];
	void *start;                /* timed, with done: the boundary's device time */
	void *copied;               /* after the staging header came back */
	int timed;                  /* start and done recorded, not yet read */
	struct kv_stage *stage;     /* host view; NULL until the first boundary */
	uint64_t stage_dev;
	uint64_t stage_len;
	uint64_t ctl_dev;           /* the header's device copy; 0: stage_dev */
	atomic_int force;           /* the next snapshot stages every chunk */
	uint64_t refused;           /* a staging size the driver could not pin */
	atomic_int busy;
	atomic_int armed;           /* done is recorded for the busy boundary */
	pthread_mutex_t list;       /* pools, npools and cap, as they grow */
	struct pool *pools;
	unsigned npools, cap;
	uint64_t enqueued, skipped, ns, gpu_ns, gpu_timed, read_bytes, first_read_bytes;
	int read_pending;           /* the last snapshot's read count is not in
				       read_bytes yet */
} sn = { .list = PTHREAD_MUTEX_INITIALIZER };

static uint64_t nchunks(const struct pool *p)
{
	return (p->size + p->chunk - 1) / p->chunk;
}

int snap_add_pool(uint64_t alloc_id, uint64_t base, uint64_t size, uint64_t chunk,
		  uint32_t pool_no, int hashed)
{
	unsigned cap = sn.cap ? 2 * sn.cap : 16;
	struct pool *p;
	int ret = 0;

	pthread_mutex_lock(&sn.list);
	if (sn.npools == sn.cap) {
		if ((p = realloc(sn.pools, cap * sizeof *p))) {
			sn.pools = p;
			sn.cap = cap;
		} else {
			ret = WAL_ENOMEM;
		}
	}
	if (!ret)
		sn.pools[sn.npools++] = (struct pool){ .alloc_id = alloc_id, .base = base,
						       .size = size, .chunk = chunk,
						       .pool_no = pool_no, .live = 1,
						       .hashed = hashed };
	pthread_mutex_unlock(&sn.list);
	return ret;
}

void snap_drop_pool(uint64_t alloc_id)
{
	pthread_mutex_lock(&sn.list);
	for (unsigned i = 0; i < sn.npools; i++)
		if (sn.pools[i].alloc_id == alloc_id)
			atomic_store_explicit(&sn.pools[i].live, 0, memory_order_relaxed);
	pthread_mutex_unlock(&sn.list);
}

int snap_has_pool(uint64_t alloc_id)
{
	unsigned i;

	for (i = 0; i < sn.npools; i++)
		if (sn.pools[i].alloc_id == alloc_id && atomic_load(&sn.pools[i].live))
			return 1;
	return 0;
}

atomic_int *snap_busy(void)
{
	return &sn.busy;
}

int snap_done(void)
{
	/* busy first: armed is cleared before busy is set. */
	return atomic_load_explicit(&sn.busy, memory_order_acquire) &&
	       atomic_load_explicit(&sn.armed, memory_order_acquire) &&
	       shim_dev_query(sn.done) == 0;
}

int snap_staged(void)
{
	return shim_dev_query(sn.copied) == 0;
}

void snap_restage(void)
{
	atomic_store_explicit(&sn.force, 1, memory_order_relaxed);
}

void snap_forget(void)
{
	snap_restage();
	atomic_store_explicit(&sn.busy, 0, memory_order_release);
}

void snap_counts(struct snap_counts *c)
{
	uint64_t last = sn.read_pending && snap_staged() ? sn.stage->read : 0;

	*c = (struct snap_counts){ sn.enqueued, sn.skipped, sn.ns, sn.gpu_ns, sn.gpu_timed,
				   sn.read_bytes + last, sn.first_read_bytes,
				   sn.stage ? sn.stage_len : 0 };
}

/* The last boundary's device time, from its side stream's start to done,
 * when both have completed (a boundary is skipped while busy, so by the
 * next one its mark was drained; done, recorded after the mark, is
 * usually complete too). */
static void read_timing(void)
{
	float ms;

	if (sn.timed && shim_dev_elapsed(sn.start, sn.done, &ms) == 0 && ms >= 0) {
		sn.gpu_ns += (uint64_t)((double)ms * 1e6);
		sn.gpu_timed++;
	}
	sn.timed = 0;
}

/* The driver's verdict on step `what`: 0, or -1 with why filled. */
static int check(int r, const char *what, char *why, size_t whylen)
{
	if (r == 0)
		return 0;
	snprintf(why, whylen, "%s failed (CUresult %d)", what, r);
	return -1;
}

/* Device memory of len bytes for what every chunk touches, else mapped
 * pinned host memory (one warning): the device's address, or 0. */
static uint64_t chunk_state(uint64_t len)
{
	static int warned;
	uint64_t dev;
	void *host;

	if (shim_dev_alloc(len, &dev) == 0)
		return dev;
	if (shim_dev_host_alloc(len, &host, &dev) != 0)
		return 0;
	if (!warned++)
		msg_log(WAL_LOG_WARN, "capture: no device memory for the KV snapshot's chunk "
			"state (sums, dirty bits: %llu bytes); pinned host memory instead, read over "
			"the bus by every snapshot", (unsigned long long)len);
	return dev;
}

static int open_streams(char *why, size_t whylen)
{
	unsigned i;

	if (sn.side)
		return 0;
	if (check(shim_dev_stream(&sn.side), "creating the side stream", why, whylen) ||
	    check(shim_dev_timed_event(&sn.start), "creating an event", why, whylen) ||
	    check(shim_dev_timed_event(&sn.done), "creating an event", why, whylen) ||
	    check(shim_dev_event(&sn.copied), "creating an event", why, whylen))
		return -1;
	for (i = 0; i < CLK_MAX_LANES; i++)
		if (check(shim_dev_event(&sn.events[i]), "creating an event", why, whylen))
			return -1;
	/* No copy of the header: the snapshots use the staging area's own. */
	if (shim_dev_alloc(sizeof(struct kv_stage), &sn.ctl_dev) != 0)
		sn.ctl_dev = 0;
	return 0;
}

/* Pinned staging of len bytes, its table set up for min_chunk chunks:
 * 0, or -1 (nothing changed) when the driver has no pinned memory that
 * large. */
static int new_stage(uint64_t len, uint64_t min_chunk)
{
	void *host;
	uint64_t dev;

	if (shim_dev_host_alloc(len, &host, &dev) != 0)
		return -1;
	if (kv_stage_init(host, len, min_chunk) < 0) {	/* never past SNAP_STAGE_MIN */
		shim_dev_host_free(host);
		return -1;
	}
	if (sn.stage)
		shim_dev_host_free(sn.stage);
	sn.stage = host;
	sn.stage_dev = dev;
	sn.stage_len = len;
	return 0;
}

/*
 * Staging for all of the live pools' bytes, their table and alignment (at
 * least SNAP_STAGE_MIN), so that no window is ever short of room: made or
 * grown while not busy (the caller checked).  When the driver has no pinned
 * memory that large, halves of it down to SNAP_STAGE_MIN, and one warning:
 * a window that changes more than that is committed KV-partial, which a
 * restore refuses.  A size refused once is not asked for again.
 */
static int size_stage(char *why, size_t whylen)
{
	static int warned;
	uint64_t want = sizeof(struct kv_stage), min_chunk = 0, len;
	unsigned i, live = 0;

	for (i = 0; i < sn.npools; i++)
		if (atomic_load(&sn.pools[i].live)) {
			const struct pool *p = &sn.pools[i];

			want += p->size + nchunks(p) * (KVSNAP_ALIGN + sizeof(struct kv_stage_entry));
			if (!min_chunk || p->chunk < min_chunk)
				min_chunk = p->chunk;
			live++;
		}
	/* kv_stage_init's table has an entry per min_chunk bytes and 64 to
	 * spare, for the pools' short last chunks; past 64 pools, a min_chunk
	 * more for each gives it its entry. */
	want += 64 * sizeof(struct kv_stage_entry) + KVSNAP_ALIGN;
	if (live > 64)
		want += (uint64_t)(live - 64) * min_chunk;
	if (!min_chunk)
		min_chunk = KVSNAP_MIN_CHUNK;	/* no pool yet: any table will do */
	if (want < SNAP_STAGE_MIN)
		want = SNAP_STAGE_MIN;
	if ((sn.stage && sn.stage_len >= want) || want == sn.refused)
		return 0;
	for (len = want; new_stage(len, min_chunk) < 0; len /= 2)
		if (len / 2 < SNAP_STAGE_MIN || len / 2 <= sn.stage_len) {
			if (sn.stage) {
				len = sn.stage_len;	/* keep the smaller one */
				break;
			}
			snprintf(why, whylen, "no pinned host memory for a staging area of "
				 "%llu bytes", (unsigned long long)len);
			return -1;
		}
	if (len < want) {
		sn.refused = want;
		if (!warned++)
			msg_log(WAL_LOG_WARN, "capture: pinned staging of %llu MiB, less than the "
				"%llu MiB of the KV pools: a window changing more is committed "
				"KV-partial, and a restore refuses it", (unsigned long long)(len >> 20),
				(unsigned long long)(want >> 20));
	}
	return 0;
}

/* The live pool holding device address addr, or NULL. */
static struct pool *pool_at(uint64_t addr)
{
	for (unsigned i = 0; i < sn.npools; i++) {
		struct pool *p = &sn.pools[i];

		if (addr - p->base < p->size && atomic_load(&p->live))
			return p;
	}
	return NULL;
}

/* A pool's dirty bitmap at its first mark: 0, or -1 when there is no
 * memory for it (the pool is then hashed).  Its bits need no setup
 * (kvsnap.h): the first mark comes with the pool's first hit, before any
 * boundary read its chunks, so that boundary's snapshot is the pool's
 * fresh one, which writes every bit. */
static int prepare_dirty(struct pool *p)
{
	uint64_t words = (nchunks(p) + 31) / 32;

	if (!p->dirty && !(p->dirty = chunk_state(words * sizeof(uint32_t))))
		return -1;
	return 0;
}

unsigned snap_mark(const struct rule_hit *h, struct kv_mark_args *m)
{
	unsigned i;

	memset(m, 0, sizeof *m);
	for (i = 0; i < h->npool && i < KVMARK_MAX_POOLS; i++) {
		struct pool *p = pool_at(h->pool[i]);

		if (!p || p->hashed)
			continue;
		if (h->stride < 1 || prepare_dirty(p) < 0) {
			p->hashed = 1;
			continue;
		}
		m->pool[m->npool++] = (struct kv_mark_pool){
			.dirty = (uint32_t *)(uintptr_t)p->dirty, .bytes = p->size,
			.off = h->pool[i] - p->base, .stride = (uint64_t)h->stride,
			.chunk_shift = (uint32_t)__builtin_ctzll(p->chunk),
		};
	}
	m->slots = (const void *)(uintptr_t)h->ptr;
	m->count = (uint64_t)h->count;
	m->block = (uint64_t)h->block;
	m->dtype = (uint32_t)h->dtype;
	return m->npool;
}

/* sums[] of a pool at its first boundary, to be written by a fresh
 * snapshot. */
static int prepare_pool(struct pool *p, char *why, size_t whylen)
{
	if (p->sums)
		return 0;
	if (!(p->sums = chunk_state(nchunks(p) * sizeof(uint64_t)))) {
		snprintf(why, whylen, "no memory for the chunk sums of a KV pool of %llu bytes",
			 (unsigned long long)p->size);
		return -1;
	}
	p->fresh = 1;
	return 0;
}

static int enqueue(const struct cap_append_args *mark, void *const *lanes, unsigned n,
		   struct window_asm *wa, char *why, size_t whylen)
{
	uint64_t ctl;
	uint32_t force;
	unsigned i;

	/* The last snapshot's header came back before its window committed,
	 * which it has (not busy), and before size_stage may free it. */
	if (sn.read_pending)
		sn.read_bytes += sn.stage->read;
	sn.read_pending = 0;
	if (open_streams(why, whylen) || size_stage(why, whylen))
		return -1;
	read_timing();
	/* Before the mark exists: a consumer that drained it while the
	 * assembler held no staging area would commit the window without its
	 * KV chunks, and one that cleared busy before it was set would leave
	 * it set for good. */
	wa_set_stage(wa, sn.stage, &sn.busy);
	atomic_store_explicit(&sn.armed, 0, memory_order_release);
	atomic_store_explicit(&sn.busy, 1, memory_order_release);
	for (i = 0; i < n && i < CLK_MAX_LANES; i++)
		if (check(shim_dev_record(sn.events[i], lanes[i]), "recording an event", why,
			  whylen) ||
		    check(shim_dev_wait(sn.side, sn.events[i]), "waiting for an event", why, whylen))
			return -1;
	if (check(shim_dev_record(sn.start, sn.side), "recording an event", why, whylen))
		return -1;
	kv_stage_reset(sn.stage);
	ctl = sn.ctl_dev ? sn.ctl_dev : sn.stage_dev;
	if (sn.ctl_dev && check(shim_dev_copy_to_device(sn.ctl_dev, sn.stage, sizeof *sn.stage,
							sn.side), "copying the staging header", why, whylen))
		return -1;
	force = atomic_exchange_explicit(&sn.force, 0, memory_order_relaxed) ? KVSNAP_FORCE : 0;
	for (i = 0; i < sn.npools; i++) {
		struct pool *p = &sn.pools[i];
		struct kv_snap_args a = {
			.pool = (const void *)(uintptr_t)p->base, .bytes = p->size,
			.chunk_bytes = p->chunk, .stage = (struct kv_stage *)(uintptr_t)sn.stage_dev,
			.ctl = (struct kv_stage *)(uintptr_t)ctl, .pool_no = p->pool_no,
		};

		if (!atomic_load(&p->live))
			continue;
		if (prepare_pool(p, why, whylen))
			return -1;
		a.sums = (uint64_t *)(uintptr_t)p->sums;
		a.dirty = p->hashed ? NULL : (uint32_t *)(uintptr_t)p->dirty;
		a.flags = force | (p->fresh ? KVSNAP_FRESH : 0);
		if (p->fresh) {
			sn.first_read_bytes += p->size;
			a.zero_whole = kv_zero_hash(p->chunk);
			a.zero_last = kv_zero_hash(p->size - (nchunks(p) - 1) * p->chunk);
		}
		if (check(kernels_snapshot(sn.side, &a), "launching the KV snapshot", why, whylen))
			return -1;
		p->fresh = 0;
	}
	if ((sn.ctl_dev && check(shim_dev_copy_to_host(sn.stage, sn.ctl_dev, sizeof *sn.stage,
						       sn.side), "copying the staging header back",
				 why, whylen)) ||
	    check(shim_dev_record(sn.copied, sn.side), "recording an event", why, whylen))
		return -1;
	if (check(kernels_append(sn.side, mark), "launching the snapshot mark", why, whylen) ||
	    check(shim_dev_record(sn.done, sn.side), "recording an event", why, whylen))
		return -1;
	atomic_store_explicit(&sn.armed, 1, memory_order_release);
	sn.timed = 1;
	sn.read_pending = 1;
	for (i = 0; i < n; i++)
		if (check(shim_dev_wait(lanes[i], sn.done), "waiting for the snapshot", why, whylen))
			return -1;
	sn.enqueued++;
	return 1;
}

int snap_boundary(const struct cap_append_args *mark, void *const *lanes, unsigned n,
		  struct window_asm *wa, char *why, size_t whylen)
{
	uint64_t t0;
	int r;

	if (atomic_load_explicit(&sn.busy, memory_order_acquire)) {
		sn.skipped++;
		return 0;
	}
	t0 = mono_ns();
	r = enqueue(mark, lanes, n, wa, why, whylen);
	sn.ns += mono_ns() - t0;
	return r;
}
