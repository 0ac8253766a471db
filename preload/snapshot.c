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
#include <time.h>

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
	/* Set under the caller's lock, read by snap_continue too: */
	_Atomic uint64_t dirty; /* the device's view of its dirty bitmap; 0
				   until the first mark */
	atomic_int hashed;      /* written where no mark sees it: every chunk
				   is hashed, for good */
};

static struct {
	void *side, *done, *events[CLK_MAX_LANES];
	void *start;                /* timed, with done: the boundary's device time */
	void *began;                /* at the head of every pass */
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
	int read_pending;           /* the last pass's read count is not in
				       read_bytes yet */
	uint64_t fresh_pending;     /* nor what its fresh pools read */
	/* Back-pressure (snapshot.h): */
	atomic_int hold;            /* 1: the serving streams wait for the flag;
				       0: for done (no stream memory
				       operations, or a pass stalled) */
	_Atomic uint64_t pass_ns;   /* when the last pass was enqueued */
	_Atomic uint64_t pass_step; /* and the step its window ends before */
	atomic_int pass_more;       /* and it is a further pass, not a first */
	_Atomic uint32_t *flag;     /* the release word (pinned, mapped) */
	uint64_t flag_dev;
	_Atomic uint32_t gen;       /* the boundary's: what the streams wait for */
	uint64_t need;              /* most data a window has asked to stage */
	int need_seen;              /* the open window's need is in it, or is
				       not to be (a forced or fresh pass, which
				       stages what no window changed) */
	uint64_t passes;            /* continuation passes, all windows */
	atomic_int closed;          /* no consumer any more: no boundary */
	atomic_uint npass;          /* passes enqueued, first ones included */
} sn = { .list = PTHREAD_MUTEX_INITIALIZER };

static uint64_t nchunks(const struct pool *p)
{
	return (p->size + p->chunk - 1) / p->chunk;
}

/*
 * A CUDA graph that recorded a mark keeps naming the bitmap it was given,
 * and may be replayed over a new allocation at the same address: a new
 * pool there takes over a freed pool's bitmap when it is the same pool
 * (base, size, chunk), and is hashed whole when it only overlaps one (the
 * graph's marks would miss its own bitmap).  Under the list lock.
 */
static uint64_t inherit_dirty(uint64_t base, uint64_t size, uint64_t chunk, int *hashed)
{
	for (unsigned i = 0; i < sn.npools; i++) {
		struct pool *o = &sn.pools[i];
		uint64_t d = atomic_load_explicit(&o->dirty, memory_order_relaxed);

		if (!d || atomic_load(&o->live) || o->base >= base + size || base >= o->base + o->size)
			continue;
		atomic_store_explicit(&o->dirty, 0, memory_order_relaxed);
		if (o->base == base && o->size == size && o->chunk == chunk)
			return d;
		*hashed = 1;
	}
	return 0;
}

int snap_add_pool(uint64_t alloc_id, uint64_t base, uint64_t size, uint64_t chunk,
		  uint32_t pool_no, int hashed)
{
	unsigned cap = sn.cap ? 2 * sn.cap : 16;
	struct pool *p;
	uint64_t dirty;
	int ret = 0;

	pthread_mutex_lock(&sn.list);
	dirty = inherit_dirty(base, size, chunk, &hashed);
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
						       .dirty = dirty, .hashed = hashed };
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

uint64_t snap_stalled(void)
{
	uint64_t since, step;

	if (!atomic_load(&sn.hold) || !atomic_load_explicit(&sn.busy, memory_order_acquire) ||
	    !atomic_load_explicit(&sn.armed, memory_order_acquire) || !atomic_load(&sn.pass_more))
		return 0;
	since = atomic_load(&sn.pass_ns);
	step = atomic_load(&sn.pass_step);
	/* now after since was read: a pass enqueued meanwhile is not old */
	if (mono_ns() - since <= SNAP_STALL_NS || shim_dev_query(sn.began) == 0)
		return 0;
	return step;
}

int snap_holds(void)
{
	return atomic_load(&sn.hold);
}

void snap_unhold(void)
{
	atomic_store(&sn.hold, 0);
	snap_release();
}

void snap_state(char *buf, size_t len)
{
	const struct kv_stage *st = sn.stage;

	snprintf(buf, len, "busy=%d armed=%d gen=%u flag=%u began=%d copied=%d done=%d "
		 "passes=%u staging=%llu used=%llu entries=%llu overflow=%llu read=%llu",
		 atomic_load(&sn.busy), atomic_load(&sn.armed), atomic_load(&sn.gen),
		 sn.flag ? atomic_load(sn.flag) : 0, sn.began ? shim_dev_query(sn.began) : -1,
		 sn.copied ? shim_dev_query(sn.copied) : -1, sn.done ? shim_dev_query(sn.done) : -1,
		 atomic_load(&sn.npass), (unsigned long long)sn.stage_len,
		 (unsigned long long)(st ? st->used : 0), (unsigned long long)(st ? st->entries : 0),
		 (unsigned long long)(st ? st->overflow : 0), (unsigned long long)(st ? st->read : 0));
}

unsigned snap_passes(void)
{
	return atomic_load(&sn.npass);
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
	snap_release();
	snap_restage();
	atomic_store_explicit(&sn.busy, 0, memory_order_release);
}

void snap_counts(struct snap_counts *c)
{
	int last;

	pthread_mutex_lock(&sn.list);
	last = sn.read_pending && snap_staged();
	*c = (struct snap_counts){ sn.enqueued, sn.skipped, sn.ns, sn.gpu_ns, sn.gpu_timed,
				   sn.read_bytes + (last ? sn.stage->read : 0),
				   sn.first_read_bytes + (last ? sn.fresh_pending : 0), sn.passes,
				   sn.stage ? sn.stage_len : 0 };
	pthread_mutex_unlock(&sn.list);
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

#define POLLS_PER_SECOND 1000	/* of 1 ms */

/*
 * The release word, and whether streams can wait for it: a stream of its
 * own waits for 1, the host stores 1, and the event after the wait must
 * complete (a device that cannot see the host's store would hold the
 * serving streams for good; the probe's stream is then left waiting,
 * alone).  Without it the serving streams wait for the snapshot's end,
 * and staging is sized to the pools.
 */
static void open_hold(void)
{
	const struct timespec ms = { 0, 1000000 };
	void *host, *probe = NULL, *seen = NULL;
	int r, i;

	if ((r = shim_dev_host_alloc(sizeof(uint32_t), &host, &sn.flag_dev)) == 0) {
		sn.flag = host;
		atomic_store(sn.flag, 0);
		if ((r = shim_dev_stream(&probe)) == 0 && (r = shim_dev_event(&seen)) == 0 &&
		    (r = shim_dev_wait_value(probe, sn.flag_dev, 1)) == 0 &&
		    (r = shim_dev_record(seen, probe)) == 0) {
			atomic_store(sn.flag, 1);
			for (i = 0; (r = shim_dev_query(seen)) != 0 && i < POLLS_PER_SECOND; i++)
				nanosleep(&ms, NULL);
		}
	}
	atomic_store(&sn.hold, r == 0);
	atomic_store(&sn.gen, 1);	/* the flag's value: every boundary's is newer */
	if (r == 0) {
		shim_dev_event_free(seen);
		shim_dev_stream_free(probe);
		return;
	}
	msg_log(WAL_LOG_INFO, "capture: the serving streams cannot wait for a flag in "
		"pinned memory (CUresult %d): staging is sized to the KV pools, and a window "
		"that changes more than it holds is committed KV-partial", r);
}

static int open_streams(char *why, size_t whylen)
{
	unsigned i;

	if (sn.side)
		return 0;
	if (check(shim_dev_stream(&sn.side), "creating the side stream", why, whylen) ||
	    check(shim_dev_timed_event(&sn.start), "creating an event", why, whylen) ||
	    check(shim_dev_timed_event(&sn.done), "creating an event", why, whylen) ||
	    check(shim_dev_event(&sn.copied), "creating an event", why, whylen) ||
	    check(shim_dev_event(&sn.began), "creating an event", why, whylen))
		return -1;
	for (i = 0; i < CLK_MAX_LANES; i++)
		if (check(shim_dev_event(&sn.events[i]), "creating an event", why, whylen))
			return -1;
	/* No copy of the header: the snapshots use the staging area's own. */
	if (shim_dev_alloc(sizeof(struct kv_stage), &sn.ctl_dev) != 0)
		sn.ctl_dev = 0;
	open_hold();
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

/* A staging area of at least `data` data bytes with its table for
 * min_chunk chunks (kv_stage_init's layout). */
static uint64_t stage_len_for(uint64_t data, uint64_t min_chunk)
{
	uint64_t unit = (min_chunk + KVSNAP_ALIGN - 1) & ~(uint64_t)(KVSNAP_ALIGN - 1);
	uint64_t entries = data / unit + 2 * 64 + 1;

	return sizeof(struct kv_stage) + 2 * entries * sizeof(struct kv_stage_entry) + data +
	       2 * KVSNAP_ALIGN;
}

/*
 * The staging area, made or grown while not busy (the caller checked).
 * With back-pressure, the most any window has asked to stage, a quarter
 * of that again (a batch's windows grow as its sequences do: sized to the
 * last one alone, each would take a second pass), and two of the largest
 * chunks more (so every pass makes progress), at least SNAP_STAGE_MIN: a
 * window that changes more takes several passes while the serving streams
 * wait, and the next is given room.  Without it, room
 * for all of the live pools' bytes, so that no window is ever short.
 * Never more than the pools need, never shrunk.  When the driver has no
 * pinned memory that large, halves of it down to SNAP_STAGE_MIN, and one
 * warning.  A size refused once is not asked for again.
 */
static int size_stage(char *why, size_t whylen)
{
	static int warned;
	uint64_t all = sizeof(struct kv_stage), min_chunk = 0, max_chunk = 0, want, len;
	unsigned i, live = 0;

	for (i = 0; i < sn.npools; i++)
		if (atomic_load(&sn.pools[i].live)) {
			const struct pool *p = &sn.pools[i];

			all += p->size + nchunks(p) * (KVSNAP_ALIGN + sizeof(struct kv_stage_entry));
			if (!min_chunk || p->chunk < min_chunk)
				min_chunk = p->chunk;
			if (p->chunk > max_chunk)
				max_chunk = p->chunk;
			live++;
		}
	/* kv_stage_init's table has an entry per min_chunk bytes and 64 to
	 * spare, for the pools' short last chunks; past 64 pools, a min_chunk
	 * more for each gives it its entry. */
	all += 64 * sizeof(struct kv_stage_entry) + KVSNAP_ALIGN;
	if (live > 64)
		all += (uint64_t)(live - 64) * min_chunk;
	if (!min_chunk)
		min_chunk = KVSNAP_MIN_CHUNK;	/* no pool yet: any table will do */
	want = all;
	if (atomic_load(&sn.hold)) {
		uint64_t data = sn.need + sn.need / 4 + 2 * max_chunk;

		if (stage_len_for(data, min_chunk) < want)
			want = stage_len_for(data, min_chunk);
	}
	if (want < SNAP_STAGE_MIN)
		want = SNAP_STAGE_MIN;
	if ((sn.stage && sn.stage_len >= want) || want == sn.refused)
		return 0;
	for (len = want; new_stage(len, min_chunk) < 0; len /= 2)
		if (len / 2 < SNAP_STAGE_MIN || len / 2 <= sn.stage_len ||
		    (atomic_load(&sn.hold) && len / 2 < stage_len_for(2 * max_chunk, min_chunk))) {
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
			msg_log(WAL_LOG_WARN, atomic_load(&sn.hold) ?
				"capture: pinned staging of %llu MiB, less than the %llu MiB a "
				"window wants: such windows take several passes while the serving "
				"streams wait" :
				"capture: pinned staging of %llu MiB, less than the %llu MiB of the "
				"KV pools: a window changing more is committed KV-partial, and a "
				"restore refuses it", (unsigned long long)(len >> 20),
				(unsigned long long)(want >> 20));
	}
	return 0;
}

/* The live pool holding device address addr, or NULL.  A model's KV
 * launches name its pools in the order they were added, layer after
 * layer: the search starts where the last one ended, and mostly takes a
 * step or two however many layers there are.  Under the caller's lock. */
static struct pool *pool_at(uint64_t addr)
{
	static unsigned from;

	for (unsigned k = 0, i = from; k < sn.npools; k++, i = i + 1 < sn.npools ? i + 1 : 0) {
		struct pool *p = &sn.pools[i];

		if (addr - p->base < p->size && atomic_load(&p->live)) {
			from = i;
			return p;
		}
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
	uint64_t words = (nchunks(p) + 31) / 32, dev;

	if (atomic_load_explicit(&p->dirty, memory_order_relaxed))
		return 0;
	if (!(dev = chunk_state(words * sizeof(uint32_t))))
		return -1;
	atomic_store_explicit(&p->dirty, dev, memory_order_relaxed);
	return 0;
}

unsigned snap_mark(const struct rule_hit *h, struct kv_mark_args *m)
{
	struct pool *p;
	unsigned i;

	memset(m, 0, sizeof *m);
	for (i = 0; i < h->npool && i < KVMARK_MAX_POOLS; i++) {
		p = pool_at(h->pool[i]);

		if (!p || atomic_load_explicit(&p->hashed, memory_order_relaxed))
			continue;
		if (h->stride < 1 || prepare_dirty(p) < 0) {
			atomic_store_explicit(&p->hashed, 1, memory_order_relaxed);
			continue;
		}
		m->pool[m->npool++] = (struct kv_mark_pool){
			.dirty = (uint32_t *)(uintptr_t)atomic_load_explicit(&p->dirty,
									    memory_order_relaxed),
			.bytes = p->size,
			.off = h->pool[i] - p->base, .stride = (uint64_t)h->stride,
			.chunk_shift = (uint32_t)__builtin_ctzll(p->chunk),
		};
	}
	m->slots = (const void *)(uintptr_t)h->ptr;
	m->count = (uint64_t)h->count;
	m->block = (uint64_t)h->block;
	m->dtype = (uint32_t)h->dtype;
	if (m->npool && !kv_mark_valid(m)) {
		/* The kernel would mark nothing: read those pools whole. */
		for (i = 0; i < h->npool && i < KVMARK_MAX_POOLS; i++)
			if ((p = pool_at(h->pool[i])))
				atomic_store_explicit(&p->hashed, 1, memory_order_relaxed);
		m->npool = 0;
	}
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

/* The snapshot arguments of pool p for a pass with flags. */
static struct kv_snap_args pool_args(const struct pool *p, uint64_t ctl, uint32_t flags)
{
	int hashed = atomic_load_explicit(&p->hashed, memory_order_relaxed);
	struct kv_snap_args a = {
		.pool = (const void *)(uintptr_t)p->base, .bytes = p->size,
		.chunk_bytes = p->chunk, .sums = (uint64_t *)(uintptr_t)p->sums,
		.dirty = hashed ? NULL : (uint32_t *)(uintptr_t)atomic_load_explicit(
						 &p->dirty, memory_order_relaxed),
		.stage = (struct kv_stage *)(uintptr_t)sn.stage_dev,
		.ctl = (struct kv_stage *)(uintptr_t)ctl, .pool_no = p->pool_no, .flags = flags,
	};

	if (flags & KVSNAP_FRESH) {
		a.zero_whole = kv_zero_hash(p->chunk);
		a.zero_last = kv_zero_hash(p->size - (nchunks(p) - 1) * p->chunk);
	}
	return a;
}

/* What the last pass read, once its header is back (its mark was
 * drained), into read_bytes; and the first pass's reservations, which
 * count every chunk the window changed, into need. */
static void harvest(void)
{
	if (!sn.read_pending)
		return;
	sn.read_bytes += sn.stage->read;
	sn.first_read_bytes += sn.fresh_pending;
	if (!sn.need_seen && !sn.fresh_pending && sn.stage->used > sn.need)
		sn.need = sn.stage->used;
	sn.need_seen = 1;
	sn.fresh_pending = 0;
	sn.read_pending = 0;
}

/*
 * A pass over the pools on the side stream, after what is queued there:
 * the began event, the header to ctl, the snapshots (the boundary's
 * flags for each pool: continue passes give none, and read only pools a
 * boundary read), the header back, the mark, done, the release of the
 * serving streams.  The first pass of a window writes each new pool's sums
 * (fresh).
 */
static int pass(const struct cap_append_args *mark, uint32_t force, int first, char *why,
		size_t whylen)
{
	uint64_t ctl = sn.ctl_dev ? sn.ctl_dev : sn.stage_dev;
	struct kv_release_args rel = { (const struct kv_stage *)(uintptr_t)ctl,
				       (uint32_t *)(uintptr_t)sn.flag_dev,
				       atomic_load_explicit(&sn.gen, memory_order_relaxed), 0 };
	unsigned i;

	atomic_store_explicit(&sn.armed, 0, memory_order_release);
	kv_stage_reset(sn.stage);
	if (check(shim_dev_record(sn.began, sn.side), "recording an event", why, whylen))
		return -1;
	/* The header goes to and from ctl by kernels, never by copies
	 * (kvsnap.h, kv_header_args). */
	if (sn.ctl_dev && check(kernels_header(sn.side, (struct kv_stage *)(uintptr_t)sn.ctl_dev,
					       (const struct kv_stage *)(uintptr_t)sn.stage_dev),
				"launching the staging header's reset", why, whylen))
		return -1;
	for (i = 0; i < sn.npools; i++) {
		struct pool *p = &sn.pools[i];
		struct kv_snap_args a;

		if (!atomic_load(&p->live) || (!first && !p->sums))
			continue;
		if (first && prepare_pool(p, why, whylen))
			return -1;
		a = pool_args(p, ctl, first ? force | (p->fresh ? KVSNAP_FRESH : 0) : 0);
		if (check(kernels_snapshot(sn.side, &a), "launching the KV snapshot", why, whylen))
			return -1;
		if (first && p->fresh)
			sn.fresh_pending += p->size;
		p->fresh = 0;
	}
	if ((sn.ctl_dev && check(kernels_header(sn.side, (struct kv_stage *)(uintptr_t)sn.stage_dev,
						(const struct kv_stage *)(uintptr_t)sn.ctl_dev),
				 "launching the staging header's return", why, whylen)) ||
	    check(shim_dev_record(sn.copied, sn.side), "recording an event", why, whylen) ||
	    check(kernels_append(sn.side, mark), "launching the snapshot mark", why, whylen) ||
	    /* done before the release: a host wait that returns once the
	     * streams go on finds the mark's pass done, and delivers it */
	    check(shim_dev_record(sn.done, sn.side), "recording an event", why, whylen) ||
	    (atomic_load(&sn.hold) &&
	     check(kernels_release(sn.side, &rel), "launching the release", why,
		   whylen)))
		return -1;
	atomic_fetch_add(&sn.npass, 1);
	atomic_store(&sn.pass_ns, mono_ns());
	atomic_store(&sn.pass_step, mark->step);
	atomic_store(&sn.pass_more, !first);
	msg_log(WAL_LOG_DEBUG, "snapshot: pass %u enqueued for step %llu (gen %u, %s, staging %llu)",
		atomic_load(&sn.npass), (unsigned long long)mark->step, rel.gen, first ? "first" : "more",
		(unsigned long long)sn.stage_len);
	atomic_store_explicit(&sn.armed, 1, memory_order_release);
	sn.read_pending = 1;
	return 0;
}

static int enqueue(const struct cap_append_args *mark, void *const *lanes, unsigned n,
		   struct window_asm *wa, char *why, size_t whylen)
{
	uint32_t force, gen;
	unsigned i;
	int hold;

	/* The last window committed (not busy): its header is back, before
	 * size_stage may free it. */
	harvest();
	if (open_streams(why, whylen) || size_stage(why, whylen))
		return -1;
	hold = atomic_load(&sn.hold);	/* open_streams found out; the boundary's */
	read_timing();
	/* Before the mark exists: a consumer that drained it while the
	 * assembler held no staging area would commit the window without its
	 * KV chunks, and one that cleared busy before it was set would leave
	 * it set for good. */
	wa_set_stage(wa, sn.stage, &sn.busy);
	atomic_store_explicit(&sn.armed, 0, memory_order_release);
	atomic_store_explicit(&sn.busy, 1, memory_order_release);
	gen = atomic_fetch_add_explicit(&sn.gen, 1, memory_order_relaxed) + 1;
	for (i = 0; i < n && i < CLK_MAX_LANES; i++)
		if (check(shim_dev_record(sn.events[i], lanes[i]), "recording an event", why,
			  whylen) ||
		    check(shim_dev_wait(sn.side, sn.events[i]), "waiting for an event", why, whylen))
			return -1;
	if (check(shim_dev_record(sn.start, sn.side), "recording an event", why, whylen))
		return -1;
	force = atomic_exchange_explicit(&sn.force, 0, memory_order_relaxed) ? KVSNAP_FORCE : 0;
	sn.need_seen = force != 0;
	if (pass(mark, force, 1, why, whylen) < 0)
		return -1;
	sn.timed = 1;
	for (i = 0; i < n; i++)
		if (hold ? check(shim_dev_wait_value(lanes[i], sn.flag_dev, gen),
				    "waiting for the release", why, whylen) :
			      check(shim_dev_wait(lanes[i], sn.done), "waiting for the snapshot",
				    why, whylen))
			return -1;
	/* Closed meanwhile (snap_close): no consumer will release them. */
	if (atomic_load(&sn.closed))
		snap_release();
	sn.enqueued++;
	return 1;
}

int snap_continue(const struct cap_append_args *mark, char *why, size_t whylen)
{
	int r = -1;

	if (!atomic_load(&sn.hold)) {
		snprintf(why, whylen, "no back-pressure");
		return -1;
	}
	pthread_mutex_lock(&sn.list);
	harvest();
	if (pass(mark, 0, 0, why, whylen) == 0) {
		sn.passes++;
		r = 0;
	}
	pthread_mutex_unlock(&sn.list);
	if (r < 0)
		snap_release();
	return r;
}

void snap_release(void)
{
	if (sn.flag)
		atomic_store(sn.flag, atomic_load(&sn.gen));
}

void snap_close(void)
{
	const struct timespec ms = { 0, 1000000 };

	atomic_store(&sn.closed, 1);
	snap_release();
	/* A release kernel of an older boundary may still run: it never
	 * moves the flag back, but store again once the side stream is
	 * through, waiting for it a second at most. */
	for (int i = 0; sn.done && shim_dev_query(sn.done) != 0 && i < POLLS_PER_SECOND; i++)
		nanosleep(&ms, NULL);
	snap_release();
}

int snap_boundary(const struct cap_append_args *mark, void *const *lanes, unsigned n,
		  struct window_asm *wa, char *why, size_t whylen)
{
	uint64_t t0;
	int r;

	if (atomic_load(&sn.closed))
		return 0;
	if (atomic_load_explicit(&sn.busy, memory_order_acquire)) {
		sn.skipped++;
		return 0;
	}
	t0 = mono_ns();
	r = enqueue(mark, lanes, n, wa, why, whylen);
	sn.ns += mono_ns() - t0;
	return r;
}
