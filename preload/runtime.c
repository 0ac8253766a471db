/*
 * runtime.c - the policy behind the interposer's events: lazy start,
 * allocation log, kernel identification and rule hits, exit summary,
 * fork.  See runtime.h.
 *
 * What this round logs, and what it does not yet: every allocation event
 * (ALLOC/FREE records, VMM mappings included) is committed at once as a
 * window of its own, so the log is valid and inspectable and the
 * allocation state survives a crash.  Routing and KV capture come with the
 * capture kernels; until then a rule hit is only counted, and windows do
 * not follow MOEFT_WINDOW decode steps (their step counters are zero).
 * Restore needs the ALLOC records of every live allocation, but a full log
 * reclaims its oldest windows: re-logging the live table before space is
 * reclaimed comes with restore.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_table.h"
#include "config.h"
#include "kernel_id.h"
#include "record.h"
#include "runtime.h"
#include "wal.h"

extern char **environ;

enum { RT_UNINIT = 0, RT_ACTIVE = 1, RT_OFF = 2 };

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
	ONCE_COUNT
};

struct counters {
	atomic_ullong allocs, frees, graph_launches, capture_begin, capture_end;
	atomic_ullong windows;
};

/*
 * Launches are counted without a locked instruction (one costs more than
 * the rest of an unmatched launch): each thread owns a slot that only it
 * writes, the summary adds them up.  Threads beyond the slots share the
 * last one through an atomic add.
 */
#define LAUNCH_SLOTS 256

struct launch_slot {
	_Alignas(64) atomic_ullong n;
};

static struct launch_slot launch_slots[LAUNCH_SLOTS];
static atomic_uint launch_slots_used;
static _Thread_local unsigned my_slot __attribute__((tls_model("initial-exec")));

static void count_launch(void)
{
	unsigned s = my_slot;
	atomic_ullong *n;

	if (!s)
		s = my_slot = atomic_fetch_add_explicit(&launch_slots_used, 1,
							memory_order_relaxed) + 1;
	if (s >= LAUNCH_SLOTS) {
		atomic_fetch_add_explicit(&launch_slots[LAUNCH_SLOTS - 1].n, 1,
					  memory_order_relaxed);
		return;
	}
	n = &launch_slots[s - 1].n;
	atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static unsigned long long launches(void)
{
	unsigned long long sum = 0;
	unsigned i;

	for (i = 0; i < LAUNCH_SLOTS; i++)
		sum += atomic_load_explicit(&launch_slots[i].n, memory_order_relaxed);
	return sum;
}

static struct {
	atomic_int state;
	atomic_int log_level;
	pthread_once_t once;
	struct moeft_config cfg;
	struct profile prof;
	atomic_ullong *hits;         /* per rule */
	struct alloc_table *at;
	struct kid_cache *kid;
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
	atomic_store_explicit(&rt.state, RT_OFF, memory_order_release);
	wal_close(rt.wal);
	rt.wal = NULL;
}

static void summary(void);

static void free_tables(void)
{
	free(rt.hits);
	rt.hits = NULL;
	kid_destroy(rt.kid);
	rt.kid = NULL;
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
	rt.kid = kid_create(KID_SLOTS_LOG2, KID_MAX_MATCH);
	rt.hits = calloc(rt.prof.count ? rt.prof.count : 1, sizeof *rt.hits);
	if (!rt.at || !rt.kid || !rt.hits) {
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
	atexit(summary);
	config_describe(&rt.cfg, desc, sizeof desc);
	rt_log(WAL_LOG_INFO, "instrumenting (%u rules): %s", rt.prof.count, desc);
	return 1;
}

static void start_once(void)
{
	atomic_store_explicit(&rt.state, start() ? RT_ACTIVE : RT_OFF, memory_order_release);
}

int rt_enabled(void)
{
	int s = atomic_load_explicit(&rt.state, memory_order_acquire);

	if (s == RT_UNINIT) {
		pthread_once(&rt.once, start_once);
		s = atomic_load_explicit(&rt.state, memory_order_acquire);
	}
	return s == RT_ACTIVE;
}

/* ---- allocations --------------------------------------------------------- */

static void append(unsigned type, const void *payload, uint32_t len)
{
	int64_t r = wal_append(rt.wal, type, payload, len);

	if (r < 0) {
		if (first_time(ONCE_APPEND))
			rt_log(WAL_LOG_ERROR, "cannot append to the log: %s; "
			       "allocation records are being dropped", wal_strerror((int)r));
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

/* Commit what this event appended as one window (see the file comment). */
static void log_end(void)
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
	r = kid_insert(rt.kid, l->func, &kd, m);
	if (r == KID_FULL && kd.rule >= 0) {
		if (first_time(ONCE_MATCH_FULL))
			rt_log(WAL_LOG_WARN, "more than %u kernels owned by rules; %s and later "
			       "ones are not evaluated", KID_MAX_MATCH, kd.name);
		kd.rule = -1;
		r = kid_insert(rt.kid, l->func, &kd, m);
	}
	if (r == KID_FULL) {
		atomic_store_explicit(&rt.kid_full, 1, memory_order_relaxed);
		if (first_time(ONCE_KID_FULL))
			rt_log(WAL_LOG_WARN, "more than %u distinct kernels; later ones are "
			       "not identified", kid_count(rt.kid));
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
	struct kid_match *m = NULL;
	struct rule_hit hit;
	char label[64];
	int r;

	count_launch();
	r = kid_lookup(rt.kid, l->func, &m);
	if (r == KID_UNKNOWN && l->func)
		r = first_launch(l, &m);
	if (r != KID_MATCH || !l->args || atomic_load_explicit(&m->off, memory_order_relaxed))
		return;
	r = rule_eval(&rt.prof.rules[m->rule], l->args, m->sizes, m->nparams, l->grid,
		      l->block, &hit);
	if (r > 0)
		atomic_fetch_add_explicit(&rt.hits[m->rule], 1, memory_order_relaxed);
	else if (r < 0 && !atomic_exchange(&m->off, 1))
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

	if (atomic_load_explicit(&rt.state, memory_order_acquire) != RT_ACTIVE ||
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
	       "matched=%u rule_hits=%llu%s",
	       LD(rt.n.allocs), LD(rt.n.frees), at_count(rt.at), LD(rt.n.windows),
	       launches(), LD(rt.n.graph_launches), LD(rt.n.capture_begin),
	       LD(rt.n.capture_end), kid_count(rt.kid), kid_named(rt.kid),
	       kid_matched(rt.kid), total, rules);
}
