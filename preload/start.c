/*
 * start.c - the preload's start (start.h), fork, the exit record and the
 * exit summary.
 */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "allocs.h"
#include "capturing.h"
#include "config.h"
#include "crash.h"
#include "dispatch.h"
#include "held.h"
#include "kernels.h"
#include "kvstore.h"
#include "logname.h"
#include "msg.h"
#include "pools.h"
#include "record.h"
#include "resume.h"
#include "shim.h"
#include "start.h"
#include "wal.h"

extern char **environ;

#define AT_MAX (1u << 16)        /* live device allocations tracked */

static struct {
	struct moeft_config cfg;
	struct profile prof;
	struct wal *wal;
	struct kvs *kvs;             /* NULL: KV capture off */
	atomic_int active;           /* started, and not a child of fork() */
} pl;

/* A failure at start: one line, then run un-instrumented, or end the
 * process if the user asked for strictness or for a restore (which must
 * fail closed, resume.h). */
__attribute__((format(printf, 1, 2)))
static void give_up(const char *fmt, ...)
{
	char what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (resume_requested())
		resume_refuse("%s", what);
	if (pl.cfg.strict) {
		msg_log(WAL_LOG_ERROR, "%s; MOEFT_STRICT is set: exiting", what);
		_exit(1);
	}
	msg_log(WAL_LOG_ERROR, "%s; running un-instrumented", what);
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
	shim_events_off();
	atomic_store_explicit(&pl.active, 0, memory_order_release);
	wal_close(pl.wal);
	pl.wal = NULL;
}

/* The KV store beside the log; without it routing is still captured. */
static void open_kv_store(void)
{
	char path[PATH_MAX + 4];
	struct wal_stats st;
	struct wal_error err;

	wal_stats(pl.wal, &st);
	if (kvs_path(pl.cfg.wal_path, path, sizeof path) < 0) {
		msg_log(WAL_LOG_WARN, "KV store: the path %s.kv is too long; KV is not captured",
			pl.cfg.wal_path);
		return;
	}
	if (kvs_open(path, st.log_id, pl.cfg.numa_node, st.open_window, &pl.kvs, &err) < 0) {
		msg_log(WAL_LOG_WARN, "KV store: %s; KV is not captured", err.msg);
		pl.kvs = NULL;
	}
}

/* MOEFT_WAL names a directory: this process's log in it (logname.h). */
static int log_in_dir(char *err, size_t errlen)
{
	char device[64];

	if (shim_dev_name(device, sizeof device) < 0)
		snprintf(device, sizeof device, "nodev");
	return logname_in_dir(pl.cfg.wal_path, sizeof pl.cfg.wal_path, device, err, errlen);
}

static void summary(void);

/* The log holds the state of a run that did not exit (held.h): a run that
 * is not its restore leaves it alone, unless MOEFT_FORCE_FRESH says the
 * state may go.  1 when this process runs un-instrumented for it. */
static int leave_held_state(void)
{
	struct held_state h;
	char where[PATH_MAX], pid[32] = "";
	char *slash;

	if (pl.cfg.force_fresh || !held_read_path(pl.cfg.wal_path, &h) || !h.held)
		return 0;
	snprintf(where, sizeof where, "%s", pl.cfg.wal_path);
	if (pl.cfg.wal_dir && (slash = strrchr(where, '/')) && slash != where)
		*slash = '\0';	/* restore the directory: the server's set */
	if (h.pid)
		snprintf(pid, sizeof pid, "pid %" PRIu32 ", ", h.pid);
	give_up("%s holds the state of a run that did not exit (%swindow %" PRIu64 ", resume at "
		"step %" PRIu64 "); not writing over it: `moeft restore --wal %s -- CMD` brings it "
		"back, MOEFT_FORCE_FRESH=1 lets a run replace it", pl.cfg.wal_path, pid, h.window,
		h.last_step + 1, where);
	return 1;
}

/* At an exit of status 0: an EXIT record after the last committed window,
 * so that the next run may replace this one's state (held.h); a failure
 * (an uncaught exception, a CUDA error reported so) leaves it held.  Under
 * the log's order lock, so that no window is half appended when the
 * writer ends; bounded, since exit() may come from a thread that holds it.
 * Then nothing more is recorded: what runs after (destructors, frees, the
 * consumer's last window) would only meet an ended writer. */
static void log_exit(int status, void *arg)
{
	uint8_t payload[EXIT_PAYLOAD_SIZE];
	struct rec_exit e = { .pid = (uint32_t)getpid() };
	struct timespec until;
	const char *why;
	int r;

	(void)arg;
	if (status != 0 || !atomic_load_explicit(&pl.active, memory_order_acquire))
		return;
	rec_exit_encode(payload, &e);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if ((r = pthread_mutex_timedlock(allocs_lock(), &until)) != 0) {
		why = strerror(r);
	} else {
		if ((r = wal_end(pl.wal, payload, sizeof payload)) == 0)
			shim_events_off();
		pthread_mutex_unlock(allocs_lock());
		why = wal_strerror(r);
	}
	if (r != 0)
		msg_log(WAL_LOG_WARN, "cannot record this process's exit in the log (%s); the "
			"next run on it leaves its state to a restore", why);
}

static void drop_tables(void)
{
	dispatch_fini();
	allocs_fini();
	profile_free(&pl.prof);
}

int preload_start(void)
{
	struct capture_setup cs;
	struct wal_options opt;
	struct wal_error werr;
	char err[640], desc[2048];
	int bad;

	bad = config_load(&pl.cfg, NULL, err, sizeof err);
	msg_set_level(pl.cfg.log_level);
	if (pl.cfg.disable && resume_requested())
		resume_refuse("MOEFT_DISABLE=1 came after the plan was taken");
	if (pl.cfg.disable)
		return 0;
	if (bad) {
		give_up("%s", err);
		return 0;
	}
	wal_set_log(msg_line, pl.cfg.log_level);
	if (config_unknown_vars(environ, err, sizeof err) > 0)
		msg_log(WAL_LOG_WARN, "ignoring unknown variables: %s", err);
	if (profile_load(pl.cfg.profile, &pl.prof, err, sizeof err) < 0) {
		give_up("MOEFT_PROFILE: %s", err);
		return 0;
	}
	/* The tables before the log: a failure before it leaves no file. */
	if (dispatch_init(&pl.prof, pl.cfg.kv_count > 0) < 0 || allocs_init(AT_MAX) < 0) {
		drop_tables();
		give_up("out of memory for the allocation and kernel tables");
		return 0;
	}
	if (pl.cfg.wal_dir && log_in_dir(err, sizeof err) < 0) {
		drop_tables();
		give_up("MOEFT_WAL: %s", err);
		return 0;
	}
	if (!resume_requested() && leave_held_state()) {
		drop_tables();
		return 0;
	}
	wal_options_init(&opt);
	opt.size = pl.cfg.wal_size;
	opt.numa_node = pl.cfg.numa_node;
	opt.flags = WAL_OPEN_CREATE;
	if (wal_open(pl.cfg.wal_path, &opt, &pl.wal, &werr) < 0) {
		drop_tables();
		give_up("cannot open the log: %s", werr.msg);
		return 0;
	}
	allocs_log_to(pl.wal);
	kernels_init(pl.cfg.kernel_image);
	open_kv_store();
	pools_init(pl.kvs, pl.cfg.kv, pl.cfg.kv_count, pl.cfg.kv_hash);
	cs = (struct capture_setup){ .wal = pl.wal, .kvs = pl.kvs, .window = pl.cfg.window,
				     .ring_bytes = pl.cfg.ring_bytes,
				     .commit_async = pl.cfg.commit_async };
	capture_init(&cs);
	if (resume_requested())
		resume_start(pl.wal, pl.cfg.wal_path, pl.cfg.restore_at_step);
	pthread_atfork(NULL, NULL, after_fork_child);
	crash_install(pl.wal);
	atomic_store_explicit(&pl.active, 1, memory_order_release);
	atexit(summary);
	on_exit(log_exit, NULL);	/* runs first */
	config_describe(&pl.cfg, desc, sizeof desc);
	msg_log(WAL_LOG_INFO, "instrumenting (%u rules): %s", pl.prof.count, desc);
	return 1;
}

struct wal *preload_log(void)
{
	return atomic_load_explicit(&pl.active, memory_order_acquire) ? pl.wal : NULL;
}

unsigned preload_window(void)
{
	return atomic_load_explicit(&pl.active, memory_order_acquire) ? pl.cfg.window : 0;
}

struct kvs *preload_kvs(void)
{
	return atomic_load_explicit(&pl.active, memory_order_acquire) ? pl.kvs : NULL;
}

/* One line at MOEFT_LOG=info: what this process did. */
static void summary(void)
{
	char rules[512], label[64];
	unsigned long long total = 0, h;
	struct dispatch_stats ds;
	struct allocs_stats as;
	struct capture_stats cs;
	struct wa_stats win;
	unsigned seen, named, claimed, i;
	size_t used = 0;

	if (!atomic_load_explicit(&pl.active, memory_order_acquire) ||
	    msg_level() < WAL_LOG_INFO)
		return;
	rules[0] = '\0';
	for (i = 0; i < pl.prof.count; i++) {
		if (!(h = dispatch_rule_hits(i)))
			continue;
		total += h;
		if (used < sizeof rules) {
			int w = snprintf(rules + used, sizeof rules - used, "%s%s=%llu",
					 used ? " " : " (",
					 profile_rule_label(&pl.prof, (int)i, label, sizeof label), h);
			used += w > 0 ? (size_t)w : 0;
		}
	}
	if (used >= sizeof rules)
		memcpy(rules + sizeof rules - 5, "...)", 5);
	else if (used)
		snprintf(rules + used, sizeof rules - used, ")");
	dispatch_stats(&ds);
	allocs_stats(&as);
	capture_stats(&cs, &win);
	shim_kernel_counts(&seen, &named, &claimed);
	msg_log(WAL_LOG_INFO, "summary: allocations=%llu frees=%llu live=%u windows=%llu "
		"launches=%llu graph_launches=%llu captures=%llu/%llu kernels=%u named=%u "
		"matched=%u rule_hits=%llu%s captured=%llu gaps=%llu steps=%lld "
		"decode_windows=%llu routing=%llu unplaced=%llu kv_chunks=%llu kv_bytes=%llu "
		"kv_read_bytes=%llu kv_first_read_bytes=%llu kv_pinned_bytes=%llu kv_passes=%llu "
		"boundaries=%llu "
		"skipped=%llu window_failures=%llu commit_ms=%.1f "
		"commit_max_ms=%.2f sync_wait_ms=%.1f boundary_ms=%.1f snapshot_gpu_ms=%.1f "
		"snapshots_timed=%llu kv_pools_untracked=%u",
		as.allocs, as.frees, as.live, as.windows, shim_launches(), ds.graph_launches,
		ds.capture_begin, ds.capture_end, seen, named, claimed, total, rules,
		(unsigned long long)win.entries, cs.gaps, cs.steps,
		(unsigned long long)win.windows, (unsigned long long)win.routing,
		(unsigned long long)win.unplaced, (unsigned long long)win.kv_chunks,
		(unsigned long long)win.kv_bytes, (unsigned long long)cs.snap.read_bytes,
		(unsigned long long)cs.snap.first_read_bytes, (unsigned long long)cs.snap.pinned_bytes,
		(unsigned long long)cs.snap.passes, (unsigned long long)cs.snap.enqueued,
		(unsigned long long)cs.snap.skipped, (unsigned long long)win.failures,
		(double)win.commit_ns / 1e6, (double)win.commit_max_ns / 1e6,
		(double)cs.sync_ns / 1e6, (double)cs.snap.ns / 1e6, (double)cs.snap.gpu_ns / 1e6,
		(unsigned long long)cs.snap.gpu_timed, pools_untracked());
}
