/*
 * resume.c - restore mode (resume.h).
 *
 * One lock, taken last wherever it nests (under the capture lock at a
 * step, under nothing at an allocation or a launch), guards the plan's
 * claims and the copies' event.
 */
#include <errno.h>
#include <fcntl.h>
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
#include <sys/stat.h>

#include "config.h"
#include "copyin.h"
#include "msg.h"
#include "plan.h"
#include "reqindex.h"
#include "restore.h"
#include "moeft.h"
#include "resume.h"
#include "shim.h"
#include "wal.h"

static struct {
	pthread_mutex_t lock;
	struct restore_plan plan;
	int requested;             /* MOEFT_RESTORE set: the plan loaded at load */
	pid_t pid;                 /* the process that opened the log for it (0:
				      not restoring); written before events flow */
	atomic_int watching;       /* MOEFT_RESTORE_AT=init, until the copies */
	int matched;               /* every pool of the plan is claimed */
	int init_seen;             /* the initialiser came */
	/* the copies' event once they are in: set under the lock, read without
	 * it at exit (a copy-in holds the lock for as long as it takes) */
	_Atomic(void *) restored;
	atomic_int nothing_to_copy; /* no device pool in the plan: the state is
				      in once every pool is claimed (at the
				      start when there is none) */
	/* the engine's requests beside the plan (reqindex.h): read at load,
	 * never changed after */
	struct reqindex index;
	uint8_t *index_bytes;      /* NULL: the plan has none */
	char plan_path[PATH_MAX];
	char set_root[PATH_MAX];   /* MOEFT_RESTORE named a server's set: the
				      plan is set_root/NAME/plan ("": not) */
	char *set;                 /* its set file's text */
} rm = { .lock = PTHREAD_MUTEX_INITIALIZER };

void resume_refuse(const char *fmt, ...)
{
	char what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	msg_log(WAL_LOG_ERROR, "restore: %s; stopping (run moeft restore with --force-fresh to "
		"start without restoring)", what);
	_exit(RESUME_EXIT_REFUSED);
}

/* The request index beside the plan, when there is one: a file of at most
 * REQINDEX_FILE_MAX bytes that parses, of the plan's log and window.
 * Anything else stops the process: a connector would serve KV from it.
 * Read by the process that opens the log only, not by every child that
 * inherits MOEFT_RESTORE. */
#define REQINDEX_FILE_MAX (UINT64_C(1) << 30)

static void load_index(const char *plan)
{
	char path[PATH_MAX + 16], err[PATH_MAX + 200];
	size_t len;

	snprintf(path, sizeof path, "%.*s/%s", (int)(strrchr(plan, '/') - plan), plan,
		 REQINDEX_NAME);
	if (!(rm.index_bytes = (uint8_t *)restore_read_file(path, REQINDEX_FILE_MAX, &len, err,
							      sizeof err))) {
		if (errno == ENOENT)
			return;
		resume_refuse("%s", err);
	}
	if (reqindex_parse(rm.index_bytes, len, &rm.index, err, sizeof err) < 0)
		resume_refuse("%s: %s", path, err);
	if (rm.index.log_id != rm.plan.log_id || rm.index.window != rm.plan.window ||
	    rm.index.last_step != rm.plan.last_step)
		resume_refuse("%s: not of the plan's log and window (log %016" PRIx64 ", window %"
			      PRIu64 ", step %" PRIu64 ")", path, rm.index.log_id, rm.index.window,
			      rm.index.last_step);
}

/* A directory in MOEFT_RESTORE is a server's set only with its set file
 * (plan.h), read whole at load: any other directory stops the process. */
static void read_set(void)
{
	char path[PATH_MAX + 8], err[PATH_MAX + 200];
	size_t len;

	snprintf(path, sizeof path, "%s/%s", rm.set_root, RESTORE_SET_NAME);
	if (!(rm.set = restore_read_file(path, RESTORE_SET_MAX, &len, err, sizeof err)))
		resume_refuse("MOEFT_RESTORE: %s (a directory is a server's restore only with the "
			      "set file moeft restore writes)", err);
	if (memchr(rm.set, '\0', len) || restore_set_lists(rm.set, "") < 0)
		resume_refuse("MOEFT_RESTORE: %s: not a set file", path);
}

/*
 * Restore mode begins at load, before the command's main: the command may
 * read its resume position first thing, and must find it only if this
 * preload is there, enabled, well configured and holding the plan.  What
 * needs the log (its identity, the writer lock) waits for the start, which
 * stops the process if it fails; a wrapper process (a shell that starts
 * the command) never opens the log, as it makes no CUDA call.
 */
__attribute__((constructor)) static void resume_at_load(void)
{
	const char *plan = getenv("MOEFT_RESTORE");
	struct moeft_config cfg;
	char err[640], manifest[PATH_MAX + 32], *slash;
	struct stat st;
	int fd;

	if (!plan || !*plan)
		return;
	rm.requested = 1;
	if (config_load(&cfg, NULL, err, sizeof err) < 0)
		resume_refuse("%s", err);
	msg_set_level(cfg.log_level);
	if (cfg.disable)
		resume_refuse("MOEFT_DISABLE=1 keeps the preload off, which could not take the "
			      "restored state");
	/* A server's set: this process's own state is known at the start,
	 * once its log is named; no resume position is handed over. */
	if (stat(cfg.restore_plan, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(rm.set_root, sizeof rm.set_root, "%s", cfg.restore_plan);
		read_set();
		return;
	}
	if (restore_plan_load(cfg.restore_plan, &rm.plan, err, sizeof err) < 0)
		resume_refuse("MOEFT_RESTORE: %s", err);
	/*
	 * The manifest beside the plan (plan.h; the plan's path is absolute),
	 * handed over as this process's own descriptor of it, close-on-exec:
	 * a wrapper that loaded us and then runs the command without us
	 * (env -u LD_PRELOAD) passes on a path that names nothing there.
	 */
	snprintf(manifest, sizeof manifest, "%s", cfg.restore_plan);
	slash = strrchr(manifest, '/');
	snprintf(slash + 1, sizeof manifest - (size_t)(slash + 1 - manifest), "%s",
		 RESTORE_MANIFEST_NAME);
	if ((fd = open(manifest, O_RDONLY | O_CLOEXEC)) < 0)
		resume_refuse("%s: %s", manifest, strerror(errno));
	snprintf(manifest, sizeof manifest, "/proc/self/fd/%d", fd);
	if (access(manifest, R_OK) < 0 || setenv("MOEFT_RESTORE_MANIFEST", manifest, 1) < 0)
		resume_refuse("cannot hand the command its resume position (%s): %s", manifest,
			      strerror(errno));
	snprintf(rm.plan_path, sizeof rm.plan_path, "%s", cfg.restore_plan);
}

int resume_requested(void)
{
	return rm.requested;
}

/* The copies' event, NULL before they are enqueued. */
static void *copies(void)
{
	return atomic_load_explicit(&rm.restored, memory_order_acquire);
}

int resume_pending(void)
{
	return rm.requested && getpid() == rm.pid && !copies() &&
	       !atomic_load_explicit(&rm.nothing_to_copy, memory_order_relaxed);
}

/* At exit: a process told to resume whose restored KV was never copied
 * in (capture stopped first, its pools never all allocated, ...) must not
 * end as if it had resumed. */
static void ended_unrestored(void)
{
	if (!resume_pending())
		return;
	msg_log(WAL_LOG_ERROR, "restore: the process ends, and the restored KV was never copied "
		"in; its results are not those of a resumed run: status %d", RESUME_EXIT_REFUSED);
	_exit(RESUME_EXIT_REFUSED);
}

/* In a server's set: this process's plan, NAME its log's file name less
 * ".wal".  1 when the set lists NAME (the plan loaded), 0 when it does
 * not (the process is not restoring). */
static int own_plan(const char *wal_path)
{
	const char *base = strrchr(wal_path, '/');
	char err[640], name[NAME_MAX + 1];
	size_t n;

	base = base ? base + 1 : wal_path;
	n = strlen(base);
	if (n > 4 && !strcmp(base + n - 4, ".wal"))
		n -= 4;
	snprintf(name, sizeof name, "%.*s", (int)n, base);
	if (restore_set_lists(rm.set, name) != 1) {
		msg_log(WAL_LOG_WARN, "restore: the set %s holds no state of this process's log %s: "
			"it starts fresh", rm.set_root, wal_path);
		rm.requested = 0;
		return 0;
	}
	if (snprintf(rm.plan_path, sizeof rm.plan_path, "%s/%s/%s", rm.set_root, name,
		     RESTORE_PLAN_NAME) >= (int)sizeof rm.plan_path)
		resume_refuse("MOEFT_RESTORE: %s/%s: path too long", rm.set_root, name);
	if (restore_plan_load(rm.plan_path, &rm.plan, err, sizeof err) < 0)
		resume_refuse("MOEFT_RESTORE: %s", err);
	return 1;
}

void resume_start(struct wal *w, const char *wal_path, int at_step)
{
	char store[PATH_MAX], err[640];
	struct wal_stats st;

	if (rm.set_root[0] && !own_plan(wal_path))
		return;
	wal_stats(w, &st);
	if (rm.plan.log_id != st.log_id)
		resume_refuse("MOEFT_RESTORE: the plan is for log %016" PRIx64 ", %s is log %016"
			      PRIx64, rm.plan.log_id, wal_path, st.log_id);
	if (kvs_path(wal_path, store, sizeof store) < 0 ||
	    restore_plan_maps(rm.plan_path, store, &rm.plan, err, sizeof err) < 0)
		resume_refuse("MOEFT_RESTORE: %s", store[0] ? err : "the KV store's path is too long");
	rm.pid = getpid();
	load_index(rm.plan_path);
	atexit(ended_unrestored);
	rm.matched = !restore_unmatched(&rm.plan);
	if (!rm.plan.npools) {
		atomic_store_explicit(&rm.nothing_to_copy, 1, memory_order_release);
		msg_log(WAL_LOG_INFO, "restore: window %" PRIu64 " (steps %" PRIu64 "-%" PRIu64
			") has no KV pools to copy, %zu engine requests; resuming at step %" PRIu64,
			rm.plan.window, rm.plan.first_step, rm.plan.last_step, rm.index.n,
			rm.plan.last_step + 1);
		return;
	}
	if (!at_step) {
		atomic_store_explicit(&rm.watching, 1, memory_order_relaxed);
		shim_watch_launches(1);
	}
	msg_log(WAL_LOG_INFO, "restore: %u KV pools of window %" PRIu64 " to restore",
		rm.plan.npools, rm.plan.window);
}

int resume_active(void)
{
	return rm.pid != 0;
}

uint64_t resume_last_step(void)
{
	return rm.plan.last_step;
}

void resume_alloc(const struct alloc_info *a)
{
	const struct restore_pool *q;

	pthread_mutex_lock(&rm.lock);
	if (!copies() && (q = restore_match(&rm.plan, a->fingerprint, a->size, a->ordinal,
					       a->base))) {
		msg_log(WAL_LOG_DEBUG, "restore: pool %u is the allocation at 0x%" PRIx64, q->no,
			a->base);
		rm.matched = !restore_unmatched(&rm.plan);
	}
	pthread_mutex_unlock(&rm.lock);
}

/* Copy the images in on stream, ahead of what is enqueued next; lock held.
 * The data's copies end before this returns: its time is theirs. */
static void copy_in(void *stream)
{
	const struct restore_pool *q = restore_unmatched(&rm.plan);
	struct copyin_stats st;
	struct timespec t0, t1;
	char err[400];
	void *event;
	double s;

	if (q)
		resume_refuse("pool %u of the crashed process (%" PRIu64 " bytes, call site %016"
			      PRIx64 ", ordinal %u) has no allocation of the same identity here: "
			      "another model or configuration", q->no, q->size, q->fingerprint,
			      q->ordinal);
	for (unsigned i = 0; i < rm.plan.npools; i++)
		if (rm.plan.pools[i].nlost && !rm.plan.pools[i].host)
			resume_refuse("pool %u of the crashed process lost %" PRIu32 " chunks, and a "
				      "device pool is copied in whole: nothing would keep the engine "
				      "from reading them", rm.plan.pools[i].no, rm.plan.pools[i].nlost);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (copyin_pools(&rm.plan, stream, &event, &st, err, sizeof err) < 0)
		resume_refuse("copying the KV in failed: %s", err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* The images and the store stay open: resume_device_copy reads them
	 * again. */
	atomic_store_explicit(&rm.restored, event, memory_order_release);
	atomic_store_explicit(&rm.watching, 0, memory_order_relaxed);
	shim_watch_launches(0);
	s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (s <= 0)
		s = 1e-9;
	msg_log(WAL_LOG_WARN, "restore: %u KV pools of window %" PRIu64 " (steps %" PRIu64 "-%"
		PRIu64 "): %" PRIu64 " bytes of KV restored in %.6f s (%.2f GB/s): %" PRIu64
		" bytes of data copied in %.6f s (%.2f GB/s), %" PRIu64 " bytes of zeros set; %"
		PRIu64 " bytes read from the KV store; reading threads: %u, buffers: %s; resuming "
		"at step %" PRIu64, rm.plan.npools, rm.plan.window, rm.plan.first_step,
		rm.plan.last_step, st.data + st.zero, s, (double)(st.data + st.zero) / s / 1e9,
		st.data, st.data_s, st.data_s > 0 ? (double)st.data / st.data_s / 1e9 : 0.0, st.zero,
		st.live, st.threads, st.pageable ? "pageable (no pinned memory)" : "pinned",
		rm.plan.last_step + 1);
}

int resume_initialiser(void *stream)
{
	int r;

	if (!atomic_load_explicit(&rm.watching, memory_order_relaxed) ||
	    shim_dev_capturing(stream) != 0)
		return 0;
	pthread_mutex_lock(&rm.lock);
	r = !copies() && rm.matched && !rm.init_seen;
	if (r)
		rm.init_seen = 1;
	pthread_mutex_unlock(&rm.lock);
	return r;
}

void resume_after(void *stream)
{
	pthread_mutex_lock(&rm.lock);
	if (!copies())
		copy_in(stream);
	pthread_mutex_unlock(&rm.lock);
}

void resume_step(void *stream, const struct clk_tick *t)
{
	int r;

	if (atomic_load_explicit(&rm.nothing_to_copy, memory_order_relaxed))
		return;
	pthread_mutex_lock(&rm.lock);
	if (!copies())
		copy_in(stream);
	else if (t->lane_first && (r = shim_dev_wait(stream, copies())))
		resume_refuse("cannot order a stream after the copies (CUresult %d)", r);
	pthread_mutex_unlock(&rm.lock);
}

void resume_check_kv_pool(const struct alloc_info *a)
{
	pthread_mutex_lock(&rm.lock);
	if ((copies() || atomic_load_explicit(&rm.nothing_to_copy, memory_order_relaxed)) &&
	    !restore_claimed(&rm.plan, a->base))
		resume_refuse("the allocation at 0x%" PRIx64 " (%" PRIu64 " bytes) holds KV here, "
			      "but the crashed process had no such KV pool: another model or "
			      "configuration", a->base, a->size);
	pthread_mutex_unlock(&rm.lock);
}

long resume_prefix(const uint32_t *tokens, size_t n, unsigned group, uint32_t *blocks,
		   size_t max, size_t *nblocks)
{
	const struct rec_request *r;
	size_t got, i, k;

	*nblocks = 0;
	if (!rm.index_bytes || getpid() != rm.pid)
		return -ENODEV;
	if (!tokens || group >= REQUEST_MAX_GROUPS)
		return -EINVAL;
	if (!(got = reqindex_match(&rm.index, tokens, n, &r)))
		return 0;
	if (group >= r->ngroups)
		return -EINVAL;
	*nblocks = k = got / r->block_tokens;
	if (k > max || (k && !blocks))
		return -ENOSPC;
	for (i = 0; i < k; i++)
		blocks[i] = rec_request_block(r, group, i);
	return (long)got;
}

int resume_host_pool(const struct alloc_info *a)
{
	const struct restore_pool *q;
	int no = -1;

	pthread_mutex_lock(&rm.lock);
	if (copies() || !(q = restore_match(&rm.plan, a->fingerprint, a->size, a->ordinal,
					    a->base))) {
		pthread_mutex_unlock(&rm.lock);
		resume_refuse("the adapter's KV pool at 0x%" PRIx64 " (%" PRIu64 " bytes) has no "
			      "pool of the crashed process of the same identity: another model or "
			      "configuration", a->base, a->size);
	}
	if (restore_file_is_map(q->file)) {
		pthread_mutex_unlock(&rm.lock);
		resume_refuse("the adapter's KV pool at 0x%" PRIx64 " is pool %u of the crashed "
			      "process, which the restore took for device memory (%s): a plan "
			      "another restore wrote", a->base, q->no, q->file);
	}
	rm.plan.pools[q - rm.plan.pools].host = 1;
	no = (int)(q - rm.plan.pools);
	rm.matched = !restore_unmatched(&rm.plan);
	/* Host pools alone: in as soon as all are claimed. */
	if (rm.matched) {
		unsigned i;

		for (i = 0; i < rm.plan.npools && rm.plan.pools[i].host; i++)
			;
		if (i == rm.plan.npools) {
			atomic_store_explicit(&rm.nothing_to_copy, 1, memory_order_release);
			atomic_store_explicit(&rm.watching, 0, memory_order_relaxed);
			shim_watch_launches(0);
			msg_log(WAL_LOG_INFO, "restore: %u host KV pools of window %" PRIu64 " claimed; "
				"resuming at step %" PRIu64, rm.plan.npools, rm.plan.window,
				rm.plan.last_step + 1);
		}
	}
	pthread_mutex_unlock(&rm.lock);
	return no;
}

int resume_host_intact(int pool, uint64_t offset, uint64_t length)
{
	const struct restore_pool *q;

	if (pool < 0 || (unsigned)pool >= rm.plan.npools || !rm.plan.pools[pool].host ||
	    getpid() != rm.pid)
		return -ENODEV;
	q = &rm.plan.pools[pool];
	if (offset > q->size || length > q->size - offset)
		return -EINVAL;
	return !restore_pool_lost(q, offset, length);
}

int resume_host_read(int pool, uint64_t offset, void *dst, uint64_t length)
{
	const struct restore_pool *q;
	uint64_t done = 0;
	ssize_t n;

	if (pool < 0 || (unsigned)pool >= rm.plan.npools || !rm.plan.pools[pool].host ||
	    getpid() != rm.pid)
		return -ENODEV;
	q = &rm.plan.pools[pool];
	if (!dst || offset > q->size || length > q->size - offset)
		return -EINVAL;
	if (restore_pool_lost(q, offset, length))
		return -EBADMSG;	/* damaged: never served */
	while (done < length) {
		n = pread(q->fd, (char *)dst + done, length - done, (off_t)(offset + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;	/* the image changed since it was opened */
		done += (uint64_t)n;
	}
	return 0;
}

/* The claimed device pool holding [at, at + length) once the copies are
 * in: its index, *off the offset in it; -ENODEV (none, or not yet),
 * -EINVAL (an empty or wrapping range).  No lock: the plan's pools change
 * no more once the copies are in (copies() orders their claims before). */
static int device_pool(uint64_t at, uint64_t length, uint64_t *off)
{
	if (!length || at + length < at)
		return -EINVAL;
	if (getpid() != rm.pid || !copies())
		return -ENODEV;
	for (unsigned i = 0; i < rm.plan.npools; i++) {
		const struct restore_pool *q = &rm.plan.pools[i];

		if (!q->host && q->base && length <= q->size && at >= q->base &&
		    at - q->base <= q->size - length) {
			*off = at - q->base;
			return (int)i;
		}
	}
	return -ENODEV;
}

int resume_device_restored(const void *at, size_t length)
{
	uint64_t off;
	int r = device_pool((uint64_t)(uintptr_t)at, length, &off);

	return r < 0 ? r : 1;
}

int resume_device_copy(const struct moeft_restored_range *r, size_t n, void *stream)
{
	struct copyin_range *c;
	char err[400];
	uint64_t off, dst;
	int ret = 0, i;

	if (!r || !n || n > SIZE_MAX / sizeof *c)
		return -EINVAL;
	if (shim_dev_capturing(stream) != 0)
		return -EBUSY;	/* its copies would join the graph, not run */
	if (!(c = malloc(n * sizeof *c)))
		return -ENOMEM;
	for (size_t k = 0; k < n && !ret; k++) {
		dst = (uint64_t)(uintptr_t)r[k].dst;
		if (!dst || dst + r[k].length < dst)
			ret = -EINVAL;
		else if ((i = device_pool((uint64_t)(uintptr_t)r[k].at, r[k].length, &off)) < 0)
			ret = i;
		else
			c[k] = (struct copyin_range){ (unsigned)i, off, r[k].length, dst };
	}
	/* No lock either: each call reads with pread into a job of its own. */
	if (!ret && copyin_ranges(&rm.plan, c, n, stream, err, sizeof err) < 0) {
		msg_log(WAL_LOG_ERROR, "restore: copying restored KV failed: %s", err);
		ret = -EIO;
	}
	free(c);
	return ret;
}
