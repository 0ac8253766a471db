/*
 * runtime.c - the policy behind the interposer's events: lazy start,
 * allocation log, kernel identification and rule hits, exit summary,
 * fork.  See runtime.h.
 *
 * Two kinds of windows reach the log.  Every allocation event (ALLOC/FREE
 * records, VMM mappings included) is committed at once as a window of its
 * own (no steps), so the allocation state survives a crash.  Decode
 * windows, MOEFT_WINDOW steps of routing with the KV chunks that changed,
 * are assembled from the capture ring and committed by the consumer
 * thread (see "capture" below, window.h, snapshot.h).
 * Restore needs the ALLOC records of every live allocation, but a full log
 * reclaims its oldest windows; re-logging the live table before space is
 * reclaimed is not done yet (moeft restore then says the history is
 * incomplete, and keeps every KV pool of the store).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc_table.h"
#include "clock.h"
#include "config.h"
#include "crash.h"
#include "kernel_id.h"
#include "kvstore.h"
#include "record.h"
#include "restore.h"
#include "ring.h"
#include "runtime.h"
#include "snapshot.h"
#include "wal.h"
#include "window.h"

extern char **environ;

#define AT_MAX (1u << 16)        /* live device allocations tracked */
#define KID_SLOTS_LOG2 16        /* 32768 distinct kernels */
#define KID_MAX_MATCH 4096       /* kernels owned by a rule */

/* Conditions reported once per process. */
enum once {
	ONCE_TABLE,
	ONCE_APPEND,
	ONCE_COMMIT,
	ONCE_KID_FULL,
	ONCE_MATCH_FULL,
	ONCE_CAPTURE,
	ONCE_POOL,
	ONCE_LANES,
	ONCE_MARK,
	ONCE_COUNT
};

struct counters {
	atomic_ullong allocs, frees, graph_launches, capture_begin, capture_end;
	atomic_ullong windows;
	atomic_ullong cap_gaps;
};

/*
 * Launches are counted without a locked instruction (one costs more than
 * the rest of an unmatched launch): each thread owns a slot that only it
 * writes (rt_my_launches points at it; rt_launch_seen counts), the summary
 * adds them up.  Threads beyond the slots share the last one through an
 * atomic add.
 */
#define LAUNCH_SLOTS 256

struct launch_slot {
	_Alignas(64) atomic_ullong n;
};

static struct launch_slot launch_slots[LAUNCH_SLOTS];
static atomic_uint launch_slots_used;
_Thread_local atomic_ullong *rt_my_launches __attribute__((tls_model("initial-exec")));

/* A thread's first launch takes a slot if one is left; a thread beyond the
 * slots comes here for each launch. */
void rt_count_launch_slow(void)
{
	unsigned s = atomic_load_explicit(&launch_slots_used, memory_order_relaxed);

	if (s < LAUNCH_SLOTS - 1)
		s = atomic_fetch_add_explicit(&launch_slots_used, 1, memory_order_relaxed);
	if (s < LAUNCH_SLOTS - 1) {
		rt_my_launches = &launch_slots[s].n;
		atomic_store_explicit(rt_my_launches, 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&launch_slots[LAUNCH_SLOTS - 1].n, 1, memory_order_relaxed);
}

static unsigned long long launches(void)
{
	unsigned long long sum = 0;
	unsigned i;

	for (i = 0; i < LAUNCH_SLOTS; i++)
		sum += atomic_load_explicit(&launch_slots[i].n, memory_order_relaxed);
	return sum;
}

atomic_int rt_state;
atomic_int rt_restore_pending;
/* Restore mode: every pool of the plan has its allocation (win_lock). */
static int plan_matched;
/* The kernel decision cache, published by the rt_state store (runtime.h). */
struct kid_cache *rt_kids;

static struct {
	atomic_int log_level;
	pthread_once_t once;
	struct moeft_config cfg;
	struct profile prof;
	atomic_ullong *hits;         /* per rule */
	struct alloc_table *at;
	atomic_int kid_full;         /* stop naming new kernels */
	/* Allocation events: the table update and the window that logs it
	 * happen under one lock, so the log's order is the table's. */
	pthread_mutex_t log_lock;
	struct wal *wal;
	struct kvs *kvs;             /* NULL: KV capture off */
	struct restore_plan *plan;   /* restore mode (restore.h); else NULL */
	unsigned pending;            /* records appended, not yet committed */
	struct counters n;
	atomic_bool said[ONCE_COUNT];
} rt = {
	.log_level = WAL_LOG_WARN,
	.once = PTHREAD_ONCE_INIT,
	.log_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- log --------------------------------------------------------------- */

void rt_log(int level, const char *fmt, ...)
{
	static const char prefix[] = "moeft: ";
	char line[1024];
	size_t n, off;
	va_list ap;
	int saved = errno;

	if (level > atomic_load_explicit(&rt.log_level, memory_order_relaxed))
		return;
	memcpy(line, prefix, sizeof prefix - 1);
	va_start(ap, fmt);
	vsnprintf(line + sizeof prefix - 1, sizeof line - sizeof prefix, fmt, ap);
	va_end(ap);
	n = strlen(line);
	line[n++] = '\n';
	/* One write per line, so lines of several threads never interleave. */
	for (off = 0; off < n;) {
		ssize_t w = write(STDERR_FILENO, line + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	errno = saved;
}

static void wal_log(int level, const char *msg)
{
	rt_log(level, "%s", msg);
}

/* True the first time condition c is reported. */
static int first_time(enum once c)
{
	return !atomic_exchange_explicit(&rt.said[c], 1, memory_order_relaxed);
}

/* ---- start ------------------------------------------------------------- */

/* A failure at start: one line, then run un-instrumented, or end the
 * process if the user asked for strictness. */
__attribute__((format(printf, 1, 2)))
static void give_up(const char *fmt, ...)
{
	char what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (rt.cfg.strict) {
		rt_log(WAL_LOG_ERROR, "%s; MOEFT_STRICT is set: exiting", what);
		_exit(1);
	}
	rt_log(WAL_LOG_ERROR, "%s; running un-instrumented", what);
}

/* The fresh process cannot take the plan: say why and stop, since running
 * on would serve from state the user believes restored. */
__attribute__((noreturn, format(printf, 1, 2)))
static void refuse(const char *fmt, ...)
{
	char what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	rt_log(WAL_LOG_ERROR, "restore: %s; stopping (run moeft restore with --force-fresh to "
	       "start without restoring)", what);
	_exit(RT_EXIT_RESTORE);
}

/*
 * In a child of fork() the log belongs to the parent: the child must never
 * append to it.  The child drops its handle (unmapping the log and closing
 * its descriptor) and runs un-instrumented.  The writer lock is an flock,
 * which belongs to the open file description the two processes now share:
 * closing the child's descriptor leaves it held while the parent's stays
 * open (tests/shim/test_fork_lock.c checks this), whereas keeping the
 * descriptor would keep the log locked after the parent died, and restore
 * could not open it.  Only this thread survives the fork; locks other
 * threads held are never taken again in the child (wal_close destroys the
 * log's mutex, which glibc declines harmlessly if a vanished thread held
 * it).
 */
static void after_fork_child(void)
{
	atomic_store_explicit(&rt_state, RT_OFF, memory_order_release);
	wal_close(rt.wal);
	rt.wal = NULL;
}

static void summary(void);

static void free_tables(void)
{
	free(rt.hits);
	rt.hits = NULL;
	kid_destroy(rt_kids);
	rt_kids = NULL;
	at_destroy(rt.at);
	rt.at = NULL;
	profile_free(&rt.prof);
}

/* The KV store beside the log; without it routing is still captured. */
static void open_kv_store(void)
{
	char path[PATH_MAX + 4];
	struct wal_stats st;
	struct wal_error err;

	wal_stats(rt.wal, &st);
	if (snprintf(path, sizeof path, "%s.kv", rt.cfg.wal_path) >= (int)sizeof path) {
		rt_log(WAL_LOG_WARN, "KV store: the path %s.kv is too long; KV is not captured",
		       rt.cfg.wal_path);
		return;
	}
	if (kvs_open(path, st.log_id, rt.cfg.numa_node, st.open_window, &rt.kvs, &err) < 0) {
		rt_log(WAL_LOG_WARN, "KV store: %s; KV is not captured", err.msg);
		rt.kvs = NULL;
	}
}

/* Restore mode: the plan must load and belong to this log, else the
 * process stops (the user asked for a restore). */
static void load_plan(void)
{
	static struct restore_plan plan;
	struct wal_stats st;
	char err[600];

	if (restore_plan_load(rt.cfg.restore_plan, &plan, err, sizeof err) < 0)
		refuse("MOEFT_RESTORE: %s", err);
	wal_stats(rt.wal, &st);
	if (plan.log_id != st.log_id)
		refuse("MOEFT_RESTORE: the plan is for log %016" PRIx64 ", %s is log %016" PRIx64,
		       plan.log_id, rt.cfg.wal_path, st.log_id);
	rt.plan = &plan;
	plan_matched = !restore_unmatched(&plan);
	if (!rt.cfg.restore_at_step)
		atomic_store_explicit(&rt_restore_pending, 1, memory_order_release);
	rt_log(WAL_LOG_INFO, "restore: %u KV pools of window %" PRIu64 " to restore",
	       plan.npools, plan.window);
}

static int start(void)
{
	struct wal_options opt;
	struct wal_error werr;
	char err[640], desc[2048];
	int bad;

	bad = config_load(&rt.cfg, NULL, err, sizeof err);
	atomic_store_explicit(&rt.log_level, rt.cfg.log_level, memory_order_relaxed);
	if (rt.cfg.disable)
		return 0;
	if (bad) {
		give_up("%s", err);
		return 0;
	}
	wal_set_log(wal_log, rt.cfg.log_level);
	if (config_unknown_vars(environ, err, sizeof err) > 0)
		rt_log(WAL_LOG_WARN, "ignoring unknown variables: %s", err);
	if (profile_load(rt.cfg.profile, &rt.prof, err, sizeof err) < 0) {
		give_up("MOEFT_PROFILE: %s", err);
		return 0;
	}
	rt.at = at_create(AT_MAX);
	rt_kids = kid_create(KID_SLOTS_LOG2, KID_MAX_MATCH);
	rt.hits = calloc(rt.prof.count ? rt.prof.count : 1, sizeof *rt.hits);
	if (!rt.at || !rt_kids || !rt.hits) {
		free_tables();
		give_up("out of memory for the allocation and kernel tables");
		return 0;
	}
	/* The log last: a failure above leaves no file behind. */
	wal_options_init(&opt);
	opt.size = rt.cfg.wal_size;
	opt.numa_node = rt.cfg.numa_node;
	opt.flags = WAL_OPEN_CREATE;
	if (wal_open(rt.cfg.wal_path, &opt, &rt.wal, &werr) < 0) {
		free_tables();
		give_up("cannot open the log: %s", werr.msg);
		return 0;
	}
	open_kv_store();
	if (rt.cfg.restore_plan[0])
		load_plan();
	pthread_atfork(NULL, NULL, after_fork_child);
	crash_install(rt.wal);
	atexit(summary);
	config_describe(&rt.cfg, desc, sizeof desc);
	rt_log(WAL_LOG_INFO, "instrumenting (%u rules): %s", rt.prof.count, desc);
	return 1;
}

static void start_once(void)
{
	int on = start();

	atomic_store_explicit(&rt_state, on ? RT_ACTIVE : RT_OFF, memory_order_release);
}

int rt_start(void)
{
	pthread_once(&rt.once, start_once);
	return atomic_load_explicit(&rt_state, memory_order_acquire) == RT_ACTIVE;
}

/* ---- allocations --------------------------------------------------------- */

static void append(unsigned type, const void *payload, uint32_t len)
{
	int64_t r = wal_append(rt.wal, type, payload, len);

	if (r < 0) {
		if (first_time(ONCE_APPEND))
			rt_log(WAL_LOG_ERROR, "cannot append to the log: %s; "
			       "records are being dropped", wal_strerror((int)r));
		return;
	}
	rt.pending++;
}

static void log_alloc(const struct alloc_info *a)
{
	uint8_t buf[ALLOC_PAYLOAD_SIZE];
	struct rec_alloc r;

	at_to_record(a, &r);
	rec_alloc_encode(buf, &r);
	append(WAL_REC_ALLOC, buf, sizeof buf);
}

/* A new allocation: logged and counted. */
static void log_new_alloc(const struct alloc_info *a)
{
	log_alloc(a);
	atomic_fetch_add_explicit(&rt.n.allocs, 1, memory_order_relaxed);
}

static void log_free(const struct alloc_info *a)
{
	uint8_t buf[FREE_PAYLOAD_SIZE];
	struct rec_free f = { .alloc_id = a->alloc_id, .base = a->base };

	if (a->role == ALLOC_ROLE_KV_POOL)
		snap_drop_pool(a->alloc_id);
	rec_free_encode(buf, &f);
	append(WAL_REC_FREE, buf, sizeof buf);
	atomic_fetch_add_explicit(&rt.n.frees, 1, memory_order_relaxed);
}

static void pools_of_alloc(const struct alloc_info *a);
static void restore_alloc(const struct alloc_info *a);
static void restore_report(void);

static void log_begin(void)
{
	pthread_mutex_lock(&rt.log_lock);
}

/* Commit what was appended as one window; log_lock held. */
static void commit(void)
{
	uint8_t extra[WINDOW_STEPS_SIZE];
	struct rec_window_steps steps = { 0 };
	int r;

	if (rt.pending) {
		rec_window_steps_encode(extra, &steps);
		r = wal_commit(rt.wal, extra, sizeof extra, NULL);
		if (r == 0)
			atomic_fetch_add_explicit(&rt.n.windows, 1, memory_order_relaxed);
		else if (first_time(ONCE_COMMIT))
			rt_log(WAL_LOG_ERROR, "cannot commit to the log: %s", wal_strerror(r));
		rt.pending = 0;
	}
}

/* An allocation event is a window of its own (see the file comment). */
static void log_end(void)
{
	commit();
	pthread_mutex_unlock(&rt.log_lock);
}

static void table_failed(int r)
{
	if (first_time(ONCE_TABLE))
		rt_log(WAL_LOG_WARN, "allocation table: %s; some allocations are missing "
		       "from the log", at_strerror(r));
}

/*
 * The driver handed out [base, base + size) while the table still holds
 * something there: we missed its free (a path we do not hook).  Whatever
 * overlaps is dead; log it freed.
 */
static void evict(uint64_t base, uint64_t size)
{
	struct alloc_info a;

	if (at_find(rt.at, base, &a) == 0 && a.base < base && at_remove(rt.at, a.base, &a) == 0)
		log_free(&a);
	while (at_next(rt.at, base, &a) == 0 && a.base - base < size &&
	       at_remove(rt.at, a.base, &a) == 0)
		log_free(&a);
}

void rt_alloc(unsigned api, uint64_t base, uint64_t size, uint64_t fingerprint)
{
	struct alloc_info a;
	int r;

	if (base == 0 || size == 0)
		return;
	log_begin();
	r = at_insert(rt.at, base, size, api, fingerprint, &a);
	if (r == AT_EOVERLAP) {
		evict(base, size);
		r = at_insert(rt.at, base, size, api, fingerprint, &a);
	}
	if (r == 0)
		log_new_alloc(&a);
	else
		table_failed(r);
	log_end();
	if (r == 0 && rt.cfg.kv_count)
		pools_of_alloc(&a);
	if (r == 0 && rt.plan)
		restore_alloc(&a);
}

void rt_free(uint64_t base)
{
	struct alloc_info a;

	if (base == 0)
		return;
	log_begin();
	if (at_remove(rt.at, base, &a) == 0)
		log_free(&a);
	log_end();
}

void rt_map(uint64_t va, uint64_t size, uint64_t handle, uint64_t fingerprint)
{
	struct alloc_info a;
	int r;

	if (va == 0 || size == 0)
		return;
	log_begin();
	r = at_map(rt.at, va, size, handle, fingerprint, &a);
	if (r == AT_EOVERLAP) {
		evict(va, size);
		r = at_map(rt.at, va, size, handle, fingerprint, &a);
	}
	if (r == 0)
		log_new_alloc(&a);
	else
		table_failed(r);
	log_end();
}

void rt_unmap(uint64_t va, uint64_t size)
{
	struct alloc_info a;

	if (size == 0)
		return;
	log_begin();
	while (at_unmap(rt.at, va, size, &a) == 0)
		log_free(&a);
	log_end();
}

/* ---- capture ----------------------------------------------------------- */

/*
 * Capture (DESIGN.md, "Capture without synchronizing").  After a launch
 * that a routing rule hit, moeft_capture_append is enqueued on the
 * launch's stream: the GPU appends the ids to a ring in pinned, mapped host
 * memory, and a consumer thread drains it into windows (window.h).  Before
 * a launch that starts a step (clock.h), a step marker goes the same way,
 * and before the first step of a window the boundary (snapshot.h).
 * Nothing waits for the GPU, and inside a stream capture the appends are
 * recorded into the graph like any launch, so they replay with it.
 *
 * The device side opens at the first rule hit, not at start: only then is
 * a context sure to be current (start runs before the application's first
 * CUDA call reaches the driver).  The consumer thread starts with it.
 */

/* 4 MiB of ring: ~500 appends of 256 tokens x top-8, several decode steps
 * of a large model between two polls.  Full means drops (a gap in the
 * window), never waiting. */
#define CAP_RING_BYTES (UINT64_C(4) << 20)
#define CAP_POLL_NS 1000000L

_Static_assert((int)RULE_I32 == (int)CAP_DT_I32 && (int)RULE_U32 == (int)CAP_DT_U32 &&
	       (int)RULE_I64 == (int)CAP_DT_I64, "rule and capture element types agree");

static struct {
	pthread_once_t once;
	atomic_int on;           /* open and not failed */
	uint64_t dev;            /* the device's address of the ring */
	/* The ring's reader: the consumer thread, a host wait committing a
	 * window before its results reach the application, or exit. */
	pthread_mutex_t drain_lock;
	struct ring ring;        /* under drain_lock */
	struct window_asm *wa;   /* under drain_lock */
	pthread_t thread;
	atomic_bool stop;
	/* The step clock and the boundaries: under win_lock, which is taken
	 * before log_lock when both are. */
	pthread_mutex_t win_lock;
	struct clock *clock;
	uint64_t last_boundary;  /* first step of the open window */
	/* Restore mode: the copies' event once they are enqueued, which every
	 * stream waits for before its first step. */
	void *restored;
	int init_seen;           /* the launch after that: the initialiser */
	struct timespec restore_t0;
	unsigned kv_seen[CONFIG_KV_MAX]; /* allocations of each MOEFT_KV size */
} cap = { .once = PTHREAD_ONCE_INIT, .win_lock = PTHREAD_MUTEX_INITIALIZER,
	    .drain_lock = PTHREAD_MUTEX_INITIALIZER };

static void capture_off(const char *why)
{
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
	if (first_time(ONCE_CAPTURE))
		rt_log(WAL_LOG_ERROR, "capture: %s; capture stopped, forwarding goes on", why);
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
	atomic_fetch_add_explicit(&rt.n.cap_gaps, gap.entries, memory_order_relaxed);
	wa_gap(cap.wa, gap.entries);
	n = ring_poll(&cap.ring, wa_entry, cap.wa, NULL);
	if (n >= 0)
		return 0;
	capture_off("the ring holds damage");
	return -1;
}

/* While a boundary is in flight the consumer polls this much faster: the
 * window commits sooner (the steps lost to a crash are the window plus
 * those decoded before its commit), and the next boundary finds the
 * staging area free. */
#define CAP_POLL_BUSY_DIVISOR 10

static void *consumer(void *arg)
{
	const struct timespec idle = { 0, CAP_POLL_NS },
			      busy = { 0, CAP_POLL_NS / CAP_POLL_BUSY_DIVISOR };
	int r;

	rt_dev_bind_thread();	/* for its event queries */
	while (!atomic_load_explicit(&cap.stop, memory_order_acquire)) {
		pthread_mutex_lock(&cap.drain_lock);
		if ((r = drain()) == 0 && snap_done() && (r = drain()) == 0 &&
		    atomic_load_explicit(snap_busy(), memory_order_acquire)) {
			snap_forget();
			if (first_time(ONCE_MARK))
				rt_log(WAL_LOG_WARN, "capture: a window's end was lost (capture ring "
				       "full); the next window copies every KV chunk again");
		}
		pthread_mutex_unlock(&cap.drain_lock);
		if (r < 0)
			break;
		if (rt.plan)
			restore_report();
		nanosleep(atomic_load_explicit(snap_busy(), memory_order_relaxed) ? &busy : &idle,
			  NULL);
	}
	return NULL;
}

/* How long exit waits for the last boundary's snapshot to come through. */
#define CAP_EXIT_WAIT_POLLS 1000

/*
 * At exit: stop the consumer and deliver what the GPU has published, which
 * commits the windows whose boundaries ran; for the last boundary, wait up
 * to a second for moeft's own side stream (never for the application's
 * work, and never with a device synchronize).  The open window stays
 * uncommitted, as in a crash.  The ring stays mapped (the driver tears it
 * down), since a GPU may still write into it.
 */
static void capture_close(void)
{
	const struct timespec poll = { 0, CAP_POLL_NS };
	int i;

	if (atomic_load_explicit(&rt_state, memory_order_acquire) != RT_ACTIVE)
		return;	/* a child of fork(): the thread is the parent's */
	atomic_store_explicit(&cap.stop, 1, memory_order_release);
	pthread_join(cap.thread, NULL);
	pthread_mutex_lock(&cap.drain_lock);
	for (i = 0; i < CAP_EXIT_WAIT_POLLS && atomic_load_explicit(&cap.on, memory_order_relaxed);
	     i++) {
		if (drain() < 0 || !atomic_load_explicit(snap_busy(), memory_order_acquire))
			break;
		nanosleep(&poll, NULL);
	}
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
	pthread_mutex_unlock(&cap.drain_lock);
}

static void capture_open(void)
{
	struct wa_sink sink = { .wal = rt.wal, .kvs = rt.kvs, .log_lock = &rt.log_lock,
				.first_step = rt.plan ? rt.plan->last_step + 1 : 0 };
	char why[256];
	void *host;

	if (rt_dev_open(ring_size(CAP_RING_BYTES), &host, &cap.dev, why, sizeof why) < 0) {
		capture_off(why);
		return;
	}
	ring_init(&cap.ring, host, ring_size(CAP_RING_BYTES));
	if (!(cap.wa = wa_create(&sink)) || !(cap.clock = clk_create(rt.cfg.window))) {
		capture_off("out of memory");
		return;
	}
	if (rt.plan) {
		clk_resume(cap.clock, rt.plan->last_step);
		cap.last_boundary = rt.plan->last_step + 1;
	}
	if ((errno = pthread_create(&cap.thread, NULL, consumer, NULL))) {
		capture_off(strerror(errno));
		return;
	}
	atexit(capture_close);
	atomic_store_explicit(&cap.on, 1, memory_order_release);
	rt_log(WAL_LOG_DEBUG, "capture: a ring of %" PRIu64 " bytes, window %u steps",
	       CAP_RING_BYTES, rt.cfg.window);
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
	int r = rt_dev_append(stream, a);

	if (r == 0)
		return 0;
	snprintf(why, sizeof why, "cannot launch the append (CUresult %d)", r);
	capture_off(why);
	return -1;
}

/* ---- KV pools ------------------------------------------------------------- */

/* Chunks of `block` bytes, or fewer for a small pool. */
static uint64_t chunk_for(uint64_t size, uint64_t block)
{
	uint64_t c = KVSNAP_MIN_CHUNK;

	while (c < block && c < size)
		c *= 2;
	return c;
}

/* Make allocation a a KV pool tracked in chunks of `chunk` bytes: in the
 * KV store, the snapshot list and the log (its ALLOC again, role KV pool);
 * win_lock held. */
static void add_pool(const struct alloc_info *a, uint64_t chunk)
{
	struct kvs_pool_desc d = { .fingerprint = a->fingerprint, .size = a->size,
				   .chunk_bytes = chunk, .ordinal = a->ordinal };
	struct alloc_info b;
	uint32_t no;
	int r;

	if (!rt.kvs || snap_has_pool(a->alloc_id))
		return;
	if (rt.plan && cap.restored && !restore_claimed(rt.plan, a->base))
		refuse("the allocation at 0x%" PRIx64 " (%" PRIu64 " bytes) holds KV here, but "
		       "the crashed process had no such KV pool: another model or configuration",
		       a->base, a->size);
	log_begin();
	r = kvs_pool(rt.kvs, &d, &no);
	if (r == 0 && (r = snap_add_pool(a->alloc_id, a->base, a->size, chunk, no)) == 0 &&
	    at_set_role(rt.at, a->alloc_id, ALLOC_ROLE_KV_POOL) == 0 &&
	    at_find(rt.at, a->base, &b) == 0)
		log_alloc(&b);
	log_end();
	if (r < 0 && first_time(ONCE_POOL))
		rt_log(WAL_LOG_WARN, "KV pool of %" PRIu64 " bytes at 0x%" PRIx64 " not tracked: %s",
		       a->size, a->base, r == WAL_EFULL ? "too many pools" : wal_strerror(r));
	else if (r == 0)
		rt_log(WAL_LOG_DEBUG, "KV pool %u: %" PRIu64 " bytes at 0x%" PRIx64 ", chunks of %"
		       PRIu64, no, a->size, a->base, chunk);
}

/* The allocations a KV rule's pool pointers point into; win_lock held. */
static void pools_of_hit(const struct rule_hit *h)
{
	struct alloc_info a;
	unsigned i;

	for (i = 0; i < h->npool; i++)
		if (at_find(rt.at, h->pool[i], &a) == 0)
			add_pool(&a, chunk_for(a.size, CONFIG_KV_BLOCK_DEFAULT));
}

/* A new allocation that a MOEFT_KV selector names is a pool. */
static void pools_of_alloc(const struct alloc_info *a)
{
	unsigned i;

	pthread_mutex_lock(&cap.win_lock);
	for (i = 0; i < rt.cfg.kv_count; i++) {
		const struct kv_selector *k = &rt.cfg.kv[i];

		if (k->size != a->size)
			continue;
		if (k->ordinal < 0 || cap.kv_seen[i] == (unsigned)k->ordinal)
			add_pool(a, k->block);
		cap.kv_seen[i]++;
	}
	pthread_mutex_unlock(&cap.win_lock);
}

/* ---- restore mode ---------------------------------------------------------- */

/* A new allocation may be one of the plan's pools. */
static void restore_alloc(const struct alloc_info *a)
{
	const struct restore_pool *q;

	pthread_mutex_lock(&cap.win_lock);
	if (!cap.restored && (q = restore_match(rt.plan, a->fingerprint, a->size, a->ordinal,
						a->base))) {
		rt_log(WAL_LOG_DEBUG, "restore: pool %u is the allocation at 0x%" PRIx64, q->no,
		       a->base);
		plan_matched = !restore_unmatched(rt.plan);
	}
	pthread_mutex_unlock(&cap.win_lock);
}

static double since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The first step of the process: copy the images in on its stream, ahead
 * of its first launch; win_lock held. */
static void restore_now(void *stream)
{
	const struct restore_pool *q = restore_unmatched(rt.plan);
	uint64_t bytes = 0;
	unsigned i;
	int r;

	if (q)
		refuse("pool %u of the crashed process (%" PRIu64 " bytes, call site %016" PRIx64
		       ", ordinal %u) has no allocation of the same identity here: another "
		       "model or configuration", q->no, q->size, q->fingerprint, q->ordinal);
	clock_gettime(CLOCK_MONOTONIC, &cap.restore_t0);
	for (i = 0; i < rt.plan->npools; i++) {
		q = &rt.plan->pools[i];
		if ((r = rt_dev_copy_to_device(q->base, q->image, q->size, stream)))
			refuse("copying pool %u in failed (CUresult %d)", q->no, r);
		bytes += q->size;
	}
	if ((r = rt_dev_event(&cap.restored)) || (r = rt_dev_record(cap.restored, stream)))
		refuse("cannot record the copies' event (CUresult %d)", r);
	atomic_store_explicit(&rt_restore_pending, 0, memory_order_relaxed);
	rt_log(WAL_LOG_INFO, "restore: %u KV pools, %" PRIu64 " bytes of window %" PRIu64
	       " (steps %" PRIu64 "-%" PRIu64 ") enqueued; resuming at step %" PRIu64,
	       rt.plan->npools, bytes, rt.plan->window, rt.plan->first_step,
	       rt.plan->last_step, rt.plan->last_step + 1);
}

/*
 * MOEFT_RESTORE_AT=init: the first launch once every pool of the plan is
 * allocated is taken for their initialiser (torch.zeros' fill kernel runs
 * right after the allocation), and the copies go right after it in its
 * stream, before anything can read the pools.  1 for that launch.
 */
static int restore_initialiser(void)
{
	int r;

	pthread_mutex_lock(&cap.win_lock);
	r = !cap.restored && plan_matched && !cap.init_seen;
	if (r)
		cap.init_seen = 1;
	pthread_mutex_unlock(&cap.win_lock);
	return r;
}

static void restore_after(void *stream)
{
	pthread_mutex_lock(&cap.win_lock);
	if (!cap.restored)
		restore_now(stream);
	pthread_mutex_unlock(&cap.win_lock);
}

/* Restore at the process's first step; every stream's first step waits
 * for it. */
static void restore_or_wait(void *stream, const struct clk_tick *t)
{
	int r;

	if (!cap.restored)
		restore_now(stream);
	else if (t->lane_first && (r = rt_dev_wait(stream, cap.restored)))
		refuse("cannot order a stream after the copies (CUresult %d)", r);
}

/* The consumer's poll: once the copies are done, one line with the time. */
static void restore_report(void)
{
	static int said;
	uint64_t bytes = 0;
	double s;
	unsigned i;

	if (said || !cap.restored || rt_dev_query(cap.restored) != 0)
		return;
	said = 1;
	s = since(&cap.restore_t0);
	for (i = 0; i < rt.plan->npools; i++)
		bytes += rt.plan->pools[i].size;
	rt_log(WAL_LOG_WARN, "restore: %" PRIu64 " bytes of KV restored in %.3f s (%.2f GB/s)",
	       bytes, s, s > 0 ? (double)bytes / s / 1e9 : 0.0);
}

/* ---- steps and windows ---------------------------------------------------- */

/* The process enters `step`, the first of a window: enqueue the boundary of
 * the window that ended; win_lock held. */
static void boundary(uint64_t step)
{
	uint64_t ids[CLK_MAX_LANES];
	void *lanes[CLK_MAX_LANES];
	unsigned n = clk_lanes(cap.clock, cap.last_boundary, ids, CLK_MAX_LANES), i;
	char why[160];
	int r;

	for (i = 0; i < n; i++)
		lanes[i] = (void *)(uintptr_t)ids[i];
	r = snap_boundary(step, lanes, n, cap.dev, cap.wa, why, sizeof why);
	if (r < 0)
		capture_off(why);
	else if (r > 0)
		cap.last_boundary = step;
}

/* A step starts on stream, before the launch that starts it (a graph's
 * when graph is set); win_lock held. */
static void step_started(void *stream, const struct clk_tick *t, int graph)
{
	struct cap_append_args m = {
		.ring = (struct cap_ring *)(uintptr_t)cap.dev,
		.tag = WA_TAG(WA_RULE_MARKER, 0, wa_lane((uintptr_t)stream)),
		.step = t->step, .dtype = CAP_DT_I32,
	};

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

/*
 * A host wait returned.  When a boundary is in flight and its snapshot is
 * done on the device, what the application waited for may be a step past
 * the boundary: its results (tokens a server streams out) must not reach
 * the application before the window that precedes them is committed, or
 * a crash could lose more than a window of results.  So deliver the
 * snapshot's mark, which commits the window, before returning; once a
 * window, and only when MOEFT_COMMIT is not async.
 */
void rt_sync(void)
{
	my_syncs++;
	if (rt.cfg.commit_async || !atomic_load_explicit(snap_busy(), memory_order_acquire))
		return;
	/* Never in a child of fork(): the ring and the log are the parent's. */
	if (atomic_load_explicit(&rt_state, memory_order_acquire) != RT_ACTIVE)
		return;
	pthread_mutex_lock(&cap.drain_lock);
	if (atomic_load_explicit(&cap.on, memory_order_acquire) && snap_done())
		drain();
	pthread_mutex_unlock(&cap.drain_lock);
}

/* Move the clock for a launch of kind on stream: *t says where it falls.
 * Returns 1 when the launch is being recorded into a graph, else 0. */
static int tick(void *stream, int kind, uint64_t key, const struct rule_hit *h,
		struct clk_tick *t)
{
	int capturing = rt_dev_capturing(stream) == 1;
	struct clk_thread th = { (uintptr_t)&my_syncs, my_syncs };

	pthread_mutex_lock(&cap.win_lock);
	if (h && h->kind == RULE_KV)
		pools_of_hit(h);
	if (clk_hit(cap.clock, (uintptr_t)stream, kind, key, h ? h->rows : 0, capturing, &th,
		    t) < 0) {
		if (first_time(ONCE_LANES))
			rt_log(WAL_LOG_WARN, "more than %u streams launch captured kernels; later "
			       "ones are not captured", CLK_MAX_LANES);
		t->layer = UINT32_MAX;
	} else if (t->new_step && !capturing) {
		if (rt.plan)
			restore_or_wait(stream, t);
		step_started(stream, t, kind == CLK_GRAPH);
	}
	pthread_mutex_unlock(&cap.win_lock);
	return capturing;
}

/* A rule hit, before its launch: 1 when a routing capture must follow. */
static int rule_hit(int rule, const struct rule_hit *h, void *stream, struct rt_after *after)
{
	static const int kinds[] = { [RULE_ROUTING] = CLK_ROUTING, [RULE_KV] = CLK_KV,
				     [RULE_STEP] = CLK_MARKER };
	uint64_t key = h->kind == RULE_KV && h->npool ? h->pool[0] : h->ptr;
	struct clk_tick t;
	int captured;

	if (!capture_ready())
		return 0;
	/* What cannot be described to the kernel is a gap, like a full ring. */
	if (h->kind == RULE_ROUTING &&
	    (h->rows > UINT32_MAX || h->k > UINT32_MAX || h->stride > UINT32_MAX ||
	     rule >= WA_MAX_RULES)) {
		atomic_fetch_add_explicit(&rt.n.cap_gaps, 1, memory_order_relaxed);
		return 0;
	}
	captured = tick(stream, kinds[h->kind], key, h, &t);
	if (h->kind != RULE_ROUTING || t.layer == UINT32_MAX)
		return 0;
	after->capture = 1;
	after->rule = rule;
	after->layer = t.layer;
	after->lane = captured ? WA_LANE_GRAPH : wa_lane((uintptr_t)stream);
	after->stream = stream;
	after->hit = *h;
	return 1;
}

/* The routing capture of a rule hit, right after its launch. */
static void capture_after(const struct rt_after *x)
{
	const struct rule_hit *h = &x->hit;
	struct cap_append_args a = {
		.ring = (struct cap_ring *)(uintptr_t)cap.dev,
		.src = (const void *)(uintptr_t)h->ptr,
		.tag = WA_TAG((unsigned)x->rule,
			      h->experts > 0 && h->experts <= 0xffff ? (unsigned)h->experts : 0,
			      x->lane),
		.step = x->layer,
		.rows = (uint32_t)h->rows, .k = (uint32_t)h->k, .stride = (uint32_t)h->stride,
		.dtype = (uint32_t)h->dtype,
	};

	if (atomic_load_explicit(&cap.on, memory_order_acquire))
		append_on(x->stream, &a);
}

void rt_launch_after(const struct rt_after *x)
{
	if (x->restore)
		restore_after(x->stream);
	if (x->capture)
		capture_after(x);
}

void rt_graph_launch(void *stream)
{
	struct clk_tick t;

	atomic_fetch_add_explicit(&rt.n.graph_launches, 1, memory_order_relaxed);
	/* Before any rule hit there is nothing a step could hold. */
	if (atomic_load_explicit(&cap.on, memory_order_acquire))
		tick(stream, CLK_GRAPH, 0, NULL, &t);
}

/* ---- launches ------------------------------------------------------------ */

static const char *rule_label(int rule, char *buf, size_t len)
{
	const struct rule *r = &rt.prof.rules[rule];

	snprintf(buf, len, "%s:%u", r->label, r->line);
	return buf;
}

/* A handle's first launch: name it, find its rule, cache the decision. */
static int first_launch(const struct rt_launch *l, struct kid_match **m)
{
	struct rt_kernel_desc d;
	struct kid_desc kd;
	char label[64];
	int r;

	if (atomic_load_explicit(&rt.kid_full, memory_order_relaxed))
		return KID_NONE;
	memset(&kd, 0, sizeof kd);
	kd.rule = -1;
	if (l->identify(l->kind, l->func, &d) == 0 && d.name) {
		kd.name = d.name;
		kd.params_known = d.params_known;
		kd.nparams = d.nparams;
		memcpy(kd.sizes, d.sizes, sizeof kd.sizes);
		kd.rule = profile_match(&rt.prof, d.name);
	}
	r = kid_insert(rt_kids, l->func, &kd, m);
	if (r == KID_FULL && kd.rule >= 0) {
		if (first_time(ONCE_MATCH_FULL))
			rt_log(WAL_LOG_WARN, "more than %u kernels owned by rules; %s and later "
			       "ones are not evaluated", KID_MAX_MATCH, kd.name);
		kd.rule = -1;
		r = kid_insert(rt_kids, l->func, &kd, m);
	}
	if (r == KID_FULL) {
		atomic_store_explicit(&rt.kid_full, 1, memory_order_relaxed);
		if (first_time(ONCE_KID_FULL))
			rt_log(WAL_LOG_WARN, "more than %u distinct kernels; later ones are "
			       "not identified", kid_count(rt_kids));
		return KID_NONE;
	}
	if (r == KID_MATCH && kd.rule == (*m)->rule) {
		rt_log(WAL_LOG_DEBUG, "kernel %s: rule %s", d.name,
		       rule_label(kd.rule, label, sizeof label));
		/* Without sizes a rule could read past a parameter: never. */
		if (!(*m)->params_known && !atomic_exchange(&(*m)->off, 1))
			rt_log(WAL_LOG_WARN, "rule %s owns kernel %s, but the driver does not "
			       "report its parameter sizes; it is not evaluated",
			       label, (*m)->name);
	}
	return r;
}

int rt_launch(const struct rt_launch *l, struct rt_after *after)
{
	struct kid_match *m = l->match;
	struct rule_hit hit;
	char label[64];
	int r = l->cached;

	after->stream = l->stream;
	after->capture = 0;
	after->restore = atomic_load_explicit(&rt_restore_pending, memory_order_relaxed) &&
			 restore_initialiser();
	if (r == KID_UNKNOWN && l->func)
		r = first_launch(l, &m);
	if (r != KID_MATCH || !l->args || atomic_load_explicit(&m->off, memory_order_relaxed))
		return after->restore;
	r = rule_eval(&rt.prof.rules[m->rule], l->args, m->sizes, m->nparams, l->grid,
		      l->block, &hit);
	if (r > 0) {
		atomic_fetch_add_explicit(&rt.hits[m->rule], 1, memory_order_relaxed);
		return rule_hit(m->rule, &hit, l->stream, after) | after->restore;
	}
	if (r < 0 && !atomic_exchange(&m->off, 1))
		rt_log(WAL_LOG_WARN, "rule %s does not fit kernel %s (it reads a parameter "
		       "the kernel lacks or holds a bad value); no longer evaluated for it",
		       rule_label(m->rule, label, sizeof label), m->name);
	return after->restore;
}

void rt_capture(int begin)
{
	atomic_fetch_add_explicit(begin ? &rt.n.capture_begin : &rt.n.capture_end, 1,
				  memory_order_relaxed);
}

/* ---- exit ---------------------------------------------------------------- */

#define LD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

/* One line at MOEFT_LOG=info: what this process did. */
static void summary(void)
{
	char rules[512], label[64];
	unsigned long long total = 0, h;
	struct wa_stats win = { 0 };
	uint64_t boundaries = 0, skipped = 0;
	size_t used = 0;
	unsigned i;

	if (atomic_load_explicit(&rt_state, memory_order_acquire) != RT_ACTIVE ||
	    atomic_load_explicit(&rt.log_level, memory_order_relaxed) < WAL_LOG_INFO)
		return;
	rules[0] = '\0';
	for (i = 0; i < rt.prof.count; i++) {
		if (!(h = LD(rt.hits[i])))
			continue;
		total += h;
		if (used < sizeof rules) {
			int w = snprintf(rules + used, sizeof rules - used, "%s%s=%llu",
					 used ? " " : " (", rule_label((int)i, label, sizeof label), h);
			used += w > 0 ? (size_t)w : 0;
		}
	}
	if (cap.wa)
		wa_stats(cap.wa, &win);
	snap_counts(&boundaries, &skipped);
	if (used >= sizeof rules)
		memcpy(rules + sizeof rules - 5, "...)", 5);
	else if (used)
		snprintf(rules + used, sizeof rules - used, ")");
	rt_log(WAL_LOG_INFO, "summary: allocations=%llu frees=%llu live=%u windows=%llu "
	       "launches=%llu graph_launches=%llu captures=%llu/%llu kernels=%u named=%u "
	       "matched=%u rule_hits=%llu%s captured=%llu gaps=%llu steps=%lld decode_windows=%llu "
	       "routing=%llu unplaced=%llu kv_chunks=%llu kv_bytes=%llu boundaries=%llu "
	       "skipped=%llu window_failures=%llu",
	       LD(rt.n.allocs), LD(rt.n.frees), at_count(rt.at), LD(rt.n.windows),
	       launches(), LD(rt.n.graph_launches), LD(rt.n.capture_begin),
	       LD(rt.n.capture_end), kid_count(rt_kids), kid_named(rt_kids),
	       kid_matched(rt_kids), total, rules, (unsigned long long)win.entries,
	       LD(rt.n.cap_gaps),
	       cap.clock ? (long long)clk_step(cap.clock) + 1 : 0LL,
	       (unsigned long long)win.windows, (unsigned long long)win.routing,
	       (unsigned long long)win.unplaced, (unsigned long long)win.kv_chunks,
	       (unsigned long long)win.kv_bytes, (unsigned long long)boundaries,
	       (unsigned long long)skipped, (unsigned long long)win.failures);
}
