/*
 * capturing.c - capture (capturing.h): the ring, its consumer, the step
 * clock and window boundaries.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "allocs.h"
#include "capture.h"
#include "capturing.h"
#include "clock.h"
#include "config.h"
#include "kernels.h"
#include "kvstore.h"
#include "monotonic.h"
#include "msg.h"
#include "pools.h"
#include "resume.h"
#include "ring.h"
#include "shim.h"
#include "snapshot.h"
#include "wal.h"
#include "window.h"

/* The ring is MOEFT_RING bytes (config.c has the default and why).  Full
 * means drops (a gap in the window), never waiting. */
#define CAP_POLL_NS 1000000L

_Static_assert((int)RULE_I32 == (int)CAP_DT_I32 && (int)RULE_U32 == (int)CAP_DT_U32 &&
	       (int)RULE_I64 == (int)CAP_DT_I64 && (int)RULE_F32 == (int)CAP_DT_F32 &&
	       (int)RULE_BF16 == (int)CAP_DT_BF16 && (int)RULE_F16 == (int)CAP_DT_F16,
	       "rule and capture element types agree");

static struct {
	pthread_once_t once;
	atomic_int on;           /* open and not failed */
	uint64_t dev;            /* the device's address of the ring */
	uint64_t prod;           /* of its producers' words (capture.h), or 0 */
	/* The ring's reader: the consumer thread, a host wait committing a
	 * window before its results reach the application, or exit. */
	pthread_mutex_t drain_lock;
	struct ring ring;        /* under drain_lock */
	struct window_asm *wa;   /* under drain_lock */
	pthread_t thread;
	atomic_bool stop;
	/* The capture lock (capturing.h): the step clock, the boundaries, the
	 * pools. */
	pthread_mutex_t lock;
	struct clock *clock;
	uint64_t last_boundary;  /* first step of the open window */
	struct capture_setup set;
	atomic_int forked;       /* a child of fork(): the ring is the parent's */
	atomic_ullong gaps;
	atomic_ullong sync_ns;
	atomic_bool said_off, said_lanes, said_mark, said_full;
} cap = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER,
	    .drain_lock = PTHREAD_MUTEX_INITIALIZER };

void capture_init(const struct capture_setup *s)
{
	cap.set = *s;
}

void capture_new_alloc(const struct alloc_info *a)
{
	pthread_mutex_lock(&cap.lock);
	pools_of_alloc(a);
	pthread_mutex_unlock(&cap.lock);
}

static void capture_off(const char *why)
{
	/* Fail closed: without capture, a step never brings the copies. */
	if (resume_pending())
		resume_refuse("capture stopped (%s) before the restored KV was copied in", why);
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
	snap_release();
	if (msg_first(&cap.said_off))
		msg_log(WAL_LOG_ERROR, "capture: %s; capture stopped, forwarding goes on", why);
}

/*
 * Deliver what is published, drain_lock held: 0, or -1 when the ring is
 * damaged.  Drops carry no ring position: those counted before the poll go
 * to the open window, ahead of the marks the poll may deliver.  (A drop
 * racing with the poll is charged to the next window instead.)
 */
static int drain(void)
{
	struct ring_gap gap;
	long n;

	ring_poll(&cap.ring, NULL, NULL, &gap);
	atomic_fetch_add_explicit(&cap.gaps, gap.entries, memory_order_relaxed);
	wa_gap(cap.wa, gap.entries);
	if (gap.entries && msg_first(&cap.said_full))
		msg_log(WAL_LOG_WARN, "capture: the ring of %" PRIu64 " bytes was full: %" PRIu64
			" routing entries dropped, their window is flagged routing-gap (a "
			"restore refuses it); give MOEFT_RING more (a power of two up to 1G)",
			cap.set.ring_bytes, gap.entries);
	n = ring_poll(&cap.ring, wa_entry, cap.wa, NULL);
	if (n >= 0)
		return 0;
	capture_off("the ring holds damage");
	return -1;
}

/*
 * Once this process has committed a decode window of its own, a restore
 * takes its windows and no earlier process's, so the KV pools of earlier
 * processes it did not ask for can go (wal/FORMAT.md, "Reclaim"); never
 * before.  Done once, by the consumer, off the application's threads.
 */
static void reclaim_once(int *done)
{
	struct wa_stats st;

	if (*done || !cap.set.kvs)
		return;
	wa_stats(cap.wa, &st);
	if (!st.windows)
		return;
	*done = 1;
	kvs_reclaim(cap.set.kvs);
}

/* While a boundary is in flight the consumer polls this much faster: the
 * window commits sooner (the steps lost to a crash are the window plus
 * those decoded before its commit), and the next boundary finds the
 * staging area free. */
#define CAP_POLL_BUSY_DIVISOR 10

/* Another pass asked for on a thread other than the consumer's (a host
 * wait delivering a mark): the step of its window, 0 when none.  The
 * consumer enqueues it, in the context it is bound to. */
static _Atomic uint64_t pass_wanted;
static _Thread_local int on_consumer __attribute__((tls_model("initial-exec")));
static int more_pass(uint64_t step);

/* A pass stalled behind the streams that wait for it (snapshot.h): its
 * window given up with what the ring holds of it, then the streams let
 * go, and held no more.  Under the drain lock. */
static void unstall(void)
{
	char state[320];
	uint64_t end = snap_stalled();

	if (!end)
		return;
	snap_state(state, sizeof state);
	/* The pass may have come through meanwhile (its mark then ended the
	 * window, and only a drain under this lock clears busy), or the drain
	 * found damage and stopped capture. */
	if (drain() < 0 || snap_stalled() != end)
		return;
	/* The streams first: the next step's routing stays in the ring until
	 * this lock is let go, and the commit takes only what the window has. */
	snap_unhold();
	wa_give_up(cap.wa, end);
	msg_log(WAL_LOG_WARN, "capture: a KV snapshot pass made no progress in %llu ms while "
		"the serving streams waited for it (the GPU queued it behind them: %s); the "
		"streams are let go, this window is KV-partial, and from now on they wait "
		"for each snapshot's end instead, with staging sized to the KV pools (where "
		"less is pinned, a window that changes more is KV-partial)",
		(unsigned long long)(SNAP_STALL_NS / 1000000), state);
}

static void *consumer(void *arg)
{
	const struct timespec idle = { 0, CAP_POLL_NS },
			      busy = { 0, CAP_POLL_NS / CAP_POLL_BUSY_DIVISOR };
	uint64_t step;
	unsigned npass;
	int reclaimed = 0;

	on_consumer = 1;
	shim_dev_bind_thread(NULL);	/* for its event queries */
	while (!atomic_load_explicit(&cap.stop, memory_order_acquire)) {
		/* Capture stopped: nothing commits any more, and no stream may
		 * wait for a window (a late release could have set the flag
		 * back to an older boundary's; it cannot, but say it again). */
		if (!atomic_load_explicit(&cap.on, memory_order_acquire)) {
			snap_release();
			nanosleep(&idle, NULL);
			continue;
		}
		pthread_mutex_lock(&cap.drain_lock);
		if ((step = atomic_exchange(&pass_wanted, 0)))
			more_pass(step);
		/* A mark lost: the pass is done, a drain after it delivered no
		 * mark that ended the window or asked for another pass. */
		if (drain() == 0) {
			npass = snap_passes();
			if (snap_done() && drain() == 0 &&
			    atomic_load_explicit(snap_busy(), memory_order_acquire) &&
			    snap_passes() == npass && !atomic_load(&pass_wanted)) {
				snap_forget();
				wa_drop_held(cap.wa);
				if (msg_first(&cap.said_mark))
					msg_log(WAL_LOG_WARN, "capture: a window's end was lost "
						"(capture ring full; give MOEFT_RING more); the next "
						"window copies every KV chunk again");
			}
		}
		unstall();
		pthread_mutex_unlock(&cap.drain_lock);
		reclaim_once(&reclaimed);
		nanosleep(atomic_load_explicit(snap_busy(), memory_order_relaxed) ? &busy : &idle,
			  NULL);
	}
	return NULL;
}

/* How long exit waits for the last boundary's snapshot to come through. */
#define CAP_EXIT_WAIT_POLLS 1000

/*
 * At exit: let the consumer finish the last boundary's window, waiting up
 * to a second for moeft's own side stream (never for the application's
 * work, and never with a device synchronize), then stop it and deliver
 * what the GPU has published, which commits the windows whose boundaries
 * ran.  The open window stays
 * uncommitted, as in a crash.  The ring stays mapped (the driver tears it
 * down), since a GPU may still write into it.
 */
static void capture_close(void)
{
	const struct timespec poll = { 0, CAP_POLL_NS };
	int i;

	if (atomic_load_explicit(&cap.forked, memory_order_acquire))
		return;	/* the thread is the parent's */
	/* The consumer finishes the last boundary's window: it alone runs
	 * the further passes a window may need, in its own context. */
	for (i = 0; i < CAP_EXIT_WAIT_POLLS && atomic_load_explicit(&cap.on, memory_order_acquire) &&
	     atomic_load_explicit(snap_busy(), memory_order_acquire); i++)
		nanosleep(&poll, NULL);
	atomic_store_explicit(&cap.stop, 1, memory_order_release);
	pthread_join(cap.thread, NULL);
	pthread_mutex_lock(&cap.drain_lock);
	if (atomic_load_explicit(&cap.on, memory_order_relaxed))
		drain();
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
	pthread_mutex_unlock(&cap.drain_lock);
	snap_close();
}

static void forked(void)
{
	atomic_store_explicit(&cap.forked, 1, memory_order_release);
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
}

/* The ring's producer words in device memory, or 0 (one line): the ring's
 * header then serves, every append crossing the bus four times more. */
static uint64_t producers(uint64_t capacity)
{
	struct cap_prod p = { .capacity = capacity };
	uint64_t dev;
	int r;

	if ((r = shim_dev_alloc(sizeof p, &dev)) != 0 ||
	    (r = shim_dev_write(dev, &p, sizeof p)) != 0) {
		msg_log(WAL_LOG_INFO, "capture: the ring's producer words stay in pinned host "
			"memory (CUresult %d)", r);
		return 0;
	}
	return dev;
}

/* An append into the ring, the rest of its arguments the caller's. */
static struct cap_append_args ring_append(void)
{
	return (struct cap_append_args){ .ring = (struct cap_ring *)(uintptr_t)cap.dev,
					 .prod = (struct cap_prod *)(uintptr_t)cap.prod };
}

static int capture_live(void)
{
	return atomic_load_explicit(&cap.on, memory_order_acquire);
}

/* The snapshot mark of the window that ends before step (window.h). */
static struct cap_append_args window_mark(uint64_t step)
{
	struct cap_append_args mark = ring_append();

	mark.tag = WA_TAG(WA_RULE_SNAP, 0, 0);
	mark.step = step;
	mark.dtype = CAP_DT_I32;
	return mark;
}

/* Another pass for the window ending at step (window.h's sink.more), on
 * the consumer's thread, or left to it. */
static int more_pass(uint64_t step)
{
	struct cap_append_args mark = window_mark(step);
	char why[160];

	if (!atomic_load_explicit(&cap.on, memory_order_acquire))
		return -1;
	if (!on_consumer) {
		atomic_store(&pass_wanted, step);
		return 0;
	}
	if (snap_continue(&mark, why, sizeof why) == 0)
		return 0;
	capture_off(why);
	return -1;
}

static void capture_open(void)
{
	struct wa_sink sink = { .wal = cap.set.wal, .kvs = cap.set.kvs, .log_lock = allocs_lock(),
				.first_step = resume_active() ? resume_last_step() + 1 : 0,
				.untracked = pools_untracked, .staged = snap_staged,
				.restage = snap_restage, .more = more_pass,
				.release = snap_release, .live = capture_live,
				.holds = snap_holds };
	char why[256];
	uint64_t ring;
	void *host;
	int r;

	if (kernels_load(why, sizeof why) < 0) {
		capture_off(why);
		return;
	}
	/* Pinned memory short: a smaller ring drops sooner, but captures. */
	for (ring = cap.set.ring_bytes;
	     (r = shim_dev_host_alloc(ring_size(ring), &host, &cap.dev)) && ring > CONFIG_RING_MIN;
	     ring /= 2)
		;
	if (r) {
		snprintf(why, sizeof why, "allocating the ring failed (CUresult %d)", r);
		capture_off(why);
		return;
	}
	if (ring < cap.set.ring_bytes)
		msg_log(WAL_LOG_WARN, "capture: could not pin %" PRIu64 " bytes for the ring "
			"(MOEFT_RING); using %" PRIu64 ": routing is dropped sooner when moeft's "
			"thread falls behind", cap.set.ring_bytes, ring);
	cap.set.ring_bytes = ring;
	if (ring_init(&cap.ring, host, ring_size(ring)) < 0) {
		capture_off("the ring's size is not one it can take");
		return;
	}
	cap.prod = producers(cap.ring.mask + 1);
	if (!(cap.wa = wa_create(&sink)) || !(cap.clock = clk_create(cap.set.window))) {
		capture_off("out of memory");
		return;
	}
	if (resume_active()) {
		clk_resume(cap.clock, resume_last_step());
		cap.last_boundary = resume_last_step() + 1;
	}
	if ((errno = pthread_create(&cap.thread, NULL, consumer, NULL))) {
		capture_off(strerror(errno));
		return;
	}
	pthread_atfork(NULL, NULL, forked);
	atexit(capture_close);
	atomic_store_explicit(&cap.on, 1, memory_order_release);
	msg_log(WAL_LOG_DEBUG, "capture: a ring of %" PRIu64 " bytes, window %u steps",
		cap.set.ring_bytes, cap.set.window);
}

static int capture_ready(void)
{
	pthread_once(&cap.once, capture_open);
	return atomic_load_explicit(&cap.on, memory_order_acquire);
}

/* Enqueue moeft_capture_append(*a) on stream: 0, or -1 (capture stopped). */
static int append_on(void *stream, const struct cap_append_args *a)
{
	char why[64];
	int r = kernels_append(stream, a);

	if (r == 0)
		return 0;
	snprintf(why, sizeof why, "cannot launch the append (CUresult %d)", r);
	capture_off(why);
	return -1;
}

/* The process enters `step`, the first of a window: enqueue the boundary of
 * the window that ended; the capture lock held. */
static void boundary(uint64_t step)
{
	uint64_t ids[CLK_MAX_LANES];
	void *lanes[CLK_MAX_LANES];
	unsigned n = clk_lanes(cap.clock, cap.last_boundary, ids, CLK_MAX_LANES), i;
	struct cap_append_args mark = window_mark(step);
	char why[160];
	int r;

	for (i = 0; i < n; i++)
		lanes[i] = (void *)(uintptr_t)ids[i];
	r = snap_boundary(&mark, lanes, n, cap.wa, why, sizeof why);
	if (r < 0)
		capture_off(why);
	else if (r > 0)
		cap.last_boundary = step;
}

/* A step starts on stream, before the launch that starts it (a graph's
 * when graph is set); the capture lock held. */
static void step_started(void *stream, const struct clk_tick *t, int graph)
{
	struct cap_append_args m = ring_append();

	m.tag = WA_TAG(WA_RULE_MARKER, 0, wa_lane((uintptr_t)stream));
	m.step = t->step;
	m.dtype = CAP_DT_I32;
	if (t->boundary)
		boundary(t->step);
	if (atomic_load_explicit(&cap.on, memory_order_relaxed) && append_on(stream, &m) == 0 &&
	    graph) {
		m.tag = WA_TAG(WA_RULE_MARKER, 0, WA_LANE_GRAPH);
		append_on(stream, &m);
	}
}

/* This thread's waits for the GPU, for the clock (its address is the
 * thread's id there). */
static _Thread_local uint64_t my_syncs __attribute__((tls_model("initial-exec")));

void capture_sync(void)
{
	uint64_t t0;

	my_syncs++;
	if (cap.set.commit_async || !atomic_load_explicit(snap_busy(), memory_order_acquire))
		return;
	/* Deliver the snapshot's mark, which commits the window. */
	t0 = mono_ns();
	pthread_mutex_lock(&cap.drain_lock);
	if (atomic_load_explicit(&cap.on, memory_order_acquire) && snap_done())
		drain();
	pthread_mutex_unlock(&cap.drain_lock);
	atomic_fetch_add_explicit(&cap.sync_ns, mono_ns() - t0, memory_order_relaxed);
}

/* Move the clock for a launch of kind on stream: *t says where it falls.
 * For a KV hit, *mark gets the mark its launch needs (snapshot.h).
 * Returns 1 when the launch is being recorded into a graph, else 0. */
static int tick(void *stream, int kind, uint64_t key, const struct rule_hit *h,
		struct clk_tick *t, struct kv_mark_args *mark)
{
	int capturing = shim_dev_capturing(stream) == 1;
	struct clk_thread th = { (uintptr_t)&my_syncs, my_syncs };

	pthread_mutex_lock(&cap.lock);
	if (h && h->kind == RULE_KV) {
		pools_of_hit(h);
		snap_mark(h, mark);
	}
	if (clk_hit(cap.clock, (uintptr_t)stream, kind, key, h ? h->rows : 0, capturing, &th,
		    t) < 0) {
		if (msg_first(&cap.said_lanes))
			msg_log(WAL_LOG_WARN, "more than %u streams launch captured kernels; later "
				"ones are not captured", CLK_MAX_LANES);
		t->layer = UINT32_MAX;
	} else if (t->new_step && !capturing) {
		if (resume_active())
			resume_step(stream, t);
		step_started(stream, t, kind == CLK_GRAPH);
	}
	pthread_mutex_unlock(&cap.lock);
	return capturing;
}

int capture_hit(int rule, const struct rule_hit *h, void *stream, struct capture_after *after)
{
	static const int kinds[] = { [RULE_ROUTING] = CLK_ROUTING, [RULE_KV] = CLK_KV,
				     [RULE_STEP] = CLK_MARKER };
	uint64_t key = h->kind == RULE_KV && h->npool ? h->pool[0] : 0;
	struct clk_tick t;
	int captured;

	if (!capture_ready())
		return 0;
	/* What cannot be described to the kernel is a gap, like a full ring. */
	if (h->kind == RULE_ROUTING &&
	    (h->rows > UINT32_MAX || h->k > UINT32_MAX || h->stride > UINT32_MAX ||
	     rule >= WA_MAX_RULES)) {
		atomic_fetch_add_explicit(&cap.gaps, 1, memory_order_relaxed);
		return 0;
	}
	captured = tick(stream, kinds[h->kind], key, h, &t, &after->mark);
	after->stream = stream;
	after->hit = *h;
	if (h->kind == RULE_KV)
		return after->mark.npool > 0;
	if (h->kind != RULE_ROUTING || t.layer == UINT32_MAX)
		return 0;
	after->rule = rule;
	after->layer = t.layer;
	after->lane = captured ? WA_LANE_GRAPH : wa_lane((uintptr_t)stream);
	return 1;
}

/* The mark of a KV hit's blocks, after its launch (snapshot.h). */
static void mark_after(const struct capture_after *x)
{
	char why[64];
	int r;

	if (!atomic_load_explicit(&cap.on, memory_order_acquire) ||
	    (r = kernels_mark(x->stream, &x->mark)) == 0)
		return;
	/* A write no mark records would be missing from the KV store. */
	snprintf(why, sizeof why, "cannot launch the KV mark (CUresult %d)", r);
	capture_off(why);
}

void capture_after(const struct capture_after *x)
{
	const struct rule_hit *h = &x->hit;
	struct cap_append_args a = ring_append();

	if (h->kind == RULE_KV) {
		mark_after(x);
		return;
	}
	a.src = (const void *)(uintptr_t)h->ptr;
	a.tag = WA_TAG((unsigned)x->rule,
		       h->experts > 0 && h->experts <= 0xffff ? (unsigned)h->experts : 0, x->lane);
	a.step = x->layer;
	a.rows = (uint32_t)h->rows;
	a.k = (uint32_t)h->k;
	a.stride = (uint32_t)h->stride;
	a.dtype = (uint32_t)h->dtype;
	a.wsrc = (const void *)(uintptr_t)h->weights;
	a.wdtype = (uint32_t)h->wdtype;
	if (atomic_load_explicit(&cap.on, memory_order_acquire))
		append_on(x->stream, &a);
}

void capture_graph_launch(void *stream)
{
	struct clk_tick t;

	/* Before any rule hit there is nothing a step could hold. */
	if (atomic_load_explicit(&cap.on, memory_order_acquire))
		tick(stream, CLK_GRAPH, 0, NULL, &t, NULL);
}

void capture_began(void *stream)
{
	if (!atomic_load_explicit(&cap.on, memory_order_acquire))
		return;
	pthread_mutex_lock(&cap.lock);
	clk_capture_begin(cap.clock, (uintptr_t)stream);
	pthread_mutex_unlock(&cap.lock);
}

void capture_stats(struct capture_stats *st, struct wa_stats *win)
{
	st->gaps = atomic_load_explicit(&cap.gaps, memory_order_relaxed);
	st->steps = cap.clock ? (long long)clk_step(cap.clock) + 1 : 0;
	pthread_mutex_lock(&cap.lock);
	snap_counts(&st->snap);
	pthread_mutex_unlock(&cap.lock);
	st->sync_ns = atomic_load_explicit(&cap.sync_ns, memory_order_relaxed);
	memset(win, 0, sizeof *win);
	if (cap.wa)
		wa_stats(cap.wa, win);
}
