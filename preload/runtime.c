/*
 * runtime.c - the policy behind the interposer's events: lazy start,
 * allocation log, kernel identification and rule hits, exit summary,
 * fork.  See runtime.h.
 *
 * What this round logs, and what it does not yet: every allocation event
 * (ALLOC/FREE records, VMM mappings included) is committed at once as a
 * window of its own, so the log is valid and inspectable and the
 * allocation state survives a crash.  Routing is captured (see "capture"
 * below); KV capture comes next, and windows do not follow MOEFT_WINDOW
 * decode steps yet (their step counters are zero).
 * Restore needs the ALLOC records of every live allocation, but a full log
 * reclaims its oldest windows: re-logging the live table before space is
 * reclaimed comes with restore.
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
#include "config.h"
#include "crash.h"
#include "kernel_id.h"
#include "record.h"
#include "ring.h"
#include "runtime.h"
#include "wal.h"

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
	ONCE_COUNT
};

struct counters {
	atomic_ullong allocs, frees, graph_launches, capture_begin, capture_end;
	atomic_ullong windows;
	atomic_ullong cap_entries, cap_ids, cap_gaps;
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
	atomic_fetch_add_explicit(&rt.n.allocs, 1, memory_order_relaxed);
}

static void log_free(const struct alloc_info *a)
{
	uint8_t buf[FREE_PAYLOAD_SIZE];
	struct rec_free f = { .alloc_id = a->alloc_id, .base = a->base };

	rec_free_encode(buf, &f);
	append(WAL_REC_FREE, buf, sizeof buf);
	atomic_fetch_add_explicit(&rt.n.frees, 1, memory_order_relaxed);
}

static void log_begin(void)
{
	pthread_mutex_lock(&rt.log_lock);
}

/* Commit what was appended as one window; log_lock held. */
static void commit(void)
{
	uint8_t extra[WINDOW_STEPS_SIZE];
	struct rec_window_steps steps = { 0, 0, 0 };
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
		log_alloc(&a);
	else
		table_failed(r);
	log_end();
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
		log_alloc(&a);
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

/* ---- capture ------------------------------------------------------------- */

/*
 * Routing capture (DESIGN.md, "Capture without synchronizing").  After a
 * launch that a routing rule hit, moeft_capture_append is enqueued on the
 * launch's stream: the GPU appends the ids to a ring in pinned, mapped host
 * memory, and a consumer thread drains it into the log.  Nothing waits for
 * the GPU, and inside a stream capture the append is recorded into the
 * graph like any launch, so it replays with it.
 *
 * The device side opens at the first hit, not at start: only then is a
 * context sure to be current (start runs before the application's first
 * CUDA call reaches the driver).  The consumer thread starts with it.
 *
 * This round each entry becomes one ROUTING record: step is the append's
 * sequence number, layer CAP_LAYER_UNKNOWN; a window is committed every
 * CAP_WINDOW_ENTRIES entries and at exit.  Decode steps, layers and
 * MOEFT_WINDOW come next round.  A graph's appends carry the sequence
 * numbers of its capture on every replay: the log's order (per stream, the
 * order of execution) is what places them.
 */

/* 4 MiB of ring: ~500 appends of 256 tokens x top-8, several decode steps
 * of a large model between two polls.  Full means drops (counted as gaps),
 * never waiting. */
#define CAP_RING_BYTES (UINT64_C(4) << 20)
#define CAP_POLL_NS 1000000L
#define CAP_WINDOW_ENTRIES 64
#define CAP_LAYER_UNKNOWN UINT32_MAX

/* An entry's tag: rule index, experts when the rule gives them (else 0),
 * and a 32-bit id of the stream. */
#define CAP_TAG(rule, experts, stream) \
	((uint64_t)(rule) << 48 | (uint64_t)(experts) << 32 | (stream))
#define CAP_TAG_EXPERTS(tag) ((uint32_t)((tag) >> 32) & 0xffff)

_Static_assert((int)RULE_I32 == (int)CAP_DT_I32 && (int)RULE_U32 == (int)CAP_DT_U32 &&
	       (int)RULE_I64 == (int)CAP_DT_I64, "rule and capture element types agree");

static struct {
	pthread_once_t once;
	atomic_int on;           /* open and not failed */
	uint64_t dev;            /* the device's address of the ring */
	struct ring ring;        /* the consumer thread's, then the exit's */
	uint8_t *rec;            /* a ROUTING record being built */
	pthread_t thread;
	atomic_bool stop;
	atomic_ullong seq;       /* appends enqueued */
} cap = { .once = PTHREAD_ONCE_INIT };

static void capture_off(const char *why)
{
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
	if (first_time(ONCE_CAPTURE))
		rt_log(WAL_LOG_ERROR, "routing capture: %s; capture stopped, forwarding goes on",
		       why);
}

/* One entry, one ROUTING record (ring_fn; the consumer's thread). */
static void log_entry(void *arg, const struct cap_entry *e, const void *payload, size_t len)
{
	struct rec_routing r = {
		.step = e->step, .layer = CAP_LAYER_UNKNOWN, .tokens = e->rows,
		.k = (uint16_t)e->k, .id_bytes = 4, .experts = CAP_TAG_EXPERTS(e->tag),
	};
	const int32_t *ids = payload;
	size_t i;

	if (e->k > UINT16_MAX) {
		atomic_fetch_add_explicit(&rt.n.cap_gaps, 1, memory_order_relaxed);
		return;
	}
	/* Without the rule's count, the ids say at least this many (ids that
	 * did not fit int32 read as CAP_ID_INVALID, i.e. 0xffffffff). */
	for (i = 0; !r.experts && i < len / 4; i++)
		if (ids[i] >= 0 && (uint32_t)ids[i] + 1 > r.experts)
			r.experts = (uint32_t)ids[i] + 1;
	rec_routing_encode(cap.rec, &r);
	/* The ring holds native int32, the log little-endian: both are the
	 * hosts CUDA runs on. */
	memcpy(cap.rec + ROUTING_HDR_SIZE, payload, len);
	log_begin();
	append(WAL_REC_ROUTING, cap.rec, (uint32_t)(ROUTING_HDR_SIZE + len));
	if (rt.pending >= CAP_WINDOW_ENTRIES)
		commit();
	pthread_mutex_unlock(&rt.log_lock);
	atomic_fetch_add_explicit(&rt.n.cap_entries, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&rt.n.cap_ids, len / 4, memory_order_relaxed);
}

/* Deliver what is published: 0, or -1 when the ring is damaged. */
static int drain(void)
{
	struct ring_gap gap;
	long n = ring_poll(&cap.ring, log_entry, NULL, &gap);

	atomic_fetch_add_explicit(&rt.n.cap_gaps, gap.entries, memory_order_relaxed);
	if (n >= 0)
		return 0;
	capture_off("the ring holds damage");
	return -1;
}

static void *consumer(void *arg)
{
	const struct timespec poll = { 0, CAP_POLL_NS };

	while (!atomic_load_explicit(&cap.stop, memory_order_acquire) && drain() == 0)
		nanosleep(&poll, NULL);
	return NULL;
}

/*
 * At exit: stop the consumer, deliver what the GPU has published and commit
 * it.  No device synchronisation: appends still queued behind unfinished
 * work are lost, as they would be in a crash.  The ring stays mapped (the
 * driver tears it down), since a GPU may still write into it.
 */
static void capture_close(void)
{
	if (atomic_load_explicit(&rt_state, memory_order_acquire) != RT_ACTIVE)
		return;	/* a child of fork(): the thread is the parent's */
	atomic_store_explicit(&cap.stop, 1, memory_order_release);
	pthread_join(cap.thread, NULL);
	if (atomic_load_explicit(&cap.on, memory_order_relaxed))
		drain();
	atomic_store_explicit(&cap.on, 0, memory_order_relaxed);
	log_begin();
	log_end();
}

static void capture_open(void)
{
	char why[256];
	void *host;

	if (rt_dev_open(ring_size(CAP_RING_BYTES), &host, &cap.dev, why, sizeof why) < 0) {
		capture_off(why);
		return;
	}
	ring_init(&cap.ring, host, ring_size(CAP_RING_BYTES));
	if (!(cap.rec = malloc(ROUTING_HDR_SIZE + CAP_RING_BYTES / 2))) {
		capture_off("out of memory");
		return;
	}
	if ((errno = pthread_create(&cap.thread, NULL, consumer, NULL))) {
		capture_off(strerror(errno));
		return;
	}
	atexit(capture_close);
	atomic_store_explicit(&cap.on, 1, memory_order_release);
	rt_log(WAL_LOG_DEBUG, "routing capture: a ring of %" PRIu64 " bytes", CAP_RING_BYTES);
}

/* Enqueue the append of a routing hit on the launch's stream. */
static void capture_routing(int rule, const struct rule_hit *h, void *stream)
{
	struct cap_append_args a;
	uintptr_t s = (uintptr_t)stream;
	char why[64];
	int r;

	pthread_once(&cap.once, capture_open);
	if (!atomic_load_explicit(&cap.on, memory_order_acquire))
		return;
	/* What cannot be described to the kernel is a gap, like a full ring. */
	if (h->rows > UINT32_MAX || h->k > UINT32_MAX || h->stride > UINT32_MAX) {
		atomic_fetch_add_explicit(&rt.n.cap_gaps, 1, memory_order_relaxed);
		return;
	}
	a.ring = (struct cap_ring *)(uintptr_t)cap.dev;
	a.src = (const void *)(uintptr_t)h->ptr;
	a.tag = CAP_TAG((unsigned)rule & 0xffff,
			h->experts > 0 && h->experts <= 0xffff ? (unsigned)h->experts : 0,
			(uint32_t)(s ^ s >> 32));
	a.step = atomic_fetch_add_explicit(&cap.seq, 1, memory_order_relaxed);
	a.rows = (uint32_t)h->rows;
	a.k = (uint32_t)h->k;
	a.stride = (uint32_t)h->stride;
	a.dtype = (uint32_t)h->dtype;
	if ((r = rt_dev_append(stream, &a)) != 0) {
		snprintf(why, sizeof why, "cannot launch the append (CUresult %d)", r);
		capture_off(why);
	}
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

void rt_launch(const struct rt_launch *l)
{
	struct kid_match *m = l->match;
	struct rule_hit hit;
	char label[64];
	int r = l->cached;

	if (r == KID_UNKNOWN && l->func)
		r = first_launch(l, &m);
	if (r != KID_MATCH || !l->args || atomic_load_explicit(&m->off, memory_order_relaxed))
		return;
	r = rule_eval(&rt.prof.rules[m->rule], l->args, m->sizes, m->nparams, l->grid,
		      l->block, &hit);
	if (r > 0) {
		atomic_fetch_add_explicit(&rt.hits[m->rule], 1, memory_order_relaxed);
		if (hit.kind == RULE_ROUTING)
			capture_routing(m->rule, &hit, l->stream);
	} else if (r < 0 && !atomic_exchange(&m->off, 1))
		rt_log(WAL_LOG_WARN, "rule %s does not fit kernel %s (it reads a parameter "
		       "the kernel lacks or holds a bad value); no longer evaluated for it",
		       rule_label(m->rule, label, sizeof label), m->name);
}

void rt_graph_launch(void)
{
	atomic_fetch_add_explicit(&rt.n.graph_launches, 1, memory_order_relaxed);
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
	if (used >= sizeof rules)
		memcpy(rules + sizeof rules - 5, "...)", 5);
	else if (used)
		snprintf(rules + used, sizeof rules - used, ")");
	rt_log(WAL_LOG_INFO, "summary: allocations=%llu frees=%llu live=%u windows=%llu "
	       "launches=%llu graph_launches=%llu captures=%llu/%llu kernels=%u named=%u "
	       "matched=%u rule_hits=%llu%s captured=%llu ids=%llu gaps=%llu",
	       LD(rt.n.allocs), LD(rt.n.frees), at_count(rt.at), LD(rt.n.windows),
	       launches(), LD(rt.n.graph_launches), LD(rt.n.capture_begin),
	       LD(rt.n.capture_end), kid_count(rt_kids), kid_named(rt_kids),
	       kid_matched(rt_kids), total, rules, LD(rt.n.cap_entries), LD(rt.n.cap_ids),
	       LD(rt.n.cap_gaps));
}
