/*
 * crash_torture.c - SIGKILL a writer at random instants, again and again,
 * and prove after every kill that the log still holds, intact, every
 * window the writer saw committed, and nothing that nobody wrote.
 *
 * The parent creates one small log (2 MiB, so the ring wraps and reclaims
 * all the time), then K times forks a child that opens the same log
 * (recovery and a new epoch) and commits windows of 1-24 random
 * self-describing records as fast as it can, from one thread or from 2-4
 * threads appending to the same window.  Each time wal_commit() returns,
 * the child reports the window on a pipe.  The parent kills it: one time
 * in eight as it calls wal_open, one in four inside wal_open (timed as it
 * goes), else 0-3 ms into its writing.  Then it recovers a private copy
 * of the log and checks it against the reports: no damage; the log ends
 * at the last reported window W or at W+1 (committed, killed before its
 * report); window ids contiguous from the checkpointed tail; reported
 * windows exact; every record what its writer made (common.c).
 *
 * MOEFT_TORTURE_KILLS sets K (default 200), MOEFT_TORTURE_SEED the seed of
 * all random choices (kill instants stay up to the scheduler).  On failure
 * the log is kept and its path printed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#define LOG_SIZE (UINT64_C(2) << 20)
#define MAX_RECORD (16u << 10)
#define MAX_RECORDS 24u
#define MAX_THREADS 4u
#define MAX_DELAY_NS 3000000u
#define CHILD_FAILED 3

enum { MSG_START = 1, MSG_OPENED, MSG_COMMIT };

/* Child to parent; far below PIPE_BUF, so each write is atomic. */
struct msg {
	uint32_t kind;
	uint32_t records;  /* COMMIT: records of the window, WINDOW record included */
	uint64_t window;   /* OPENED: id the first commit will get */
	uint64_t lsn;      /* COMMIT: LSN of the WINDOW record */
	uint64_t ns;       /* CLOCK_MONOTONIC when sent */
};

/* ---- child ------------------------------------------------------------ */

struct appender {
	struct wal *w;
	uint64_t window, rng, digest;
	uint32_t count;
	int64_t status;    /* first failed append, 0 if none */
	pthread_t thread;
	uint8_t buf[MAX_RECORD];
};

static void *append_some(void *arg)
{
	struct appender *a = arg;

	for (uint32_t i = 0; i < a->count && !a->status; i++) {
		int64_t lsn = append_random(a->w, a->window, &a->rng, a->buf, MAX_RECORD, &a->digest);
		if (lsn < 0)
			a->status = lsn;
	}
	return NULL;
}

static void __attribute__((noreturn)) child_fail(const char *what, const char *detail)
{
	fprintf(stderr, "crash-torture: child %ld: %s: %s\n", (long)getpid(), what, detail);
	_exit(CHILD_FAILED);
}

static void send_msg(int fd, uint32_t kind, uint64_t window, uint32_t records, uint64_t lsn)
{
	struct msg m = { .kind = kind, .records = records, .window = window, .lsn = lsn,
			 .ns = mono_ns() };

	if (write(fd, &m, sizeof m) != (ssize_t)sizeof m)
		child_fail("writing to the pipe", strerror(errno));
}

static void __attribute__((noreturn)) run_child(const char *path, uint64_t rng, unsigned nthreads,
						int fd)
{
	struct appender *a = calloc(nthreads, sizeof *a);
	struct wal_options opt;
	struct wal_error err;
	struct wal_stats st;
	struct wal *w;
	int ret;

	if (!a)
		child_fail("calloc", strerror(errno));
	send_msg(fd, MSG_START, 0, 0, 0);
	wal_options_init(&opt);
	opt.flags = 0;
	if (wal_open(path, &opt, &w, &err) < 0)
		child_fail("wal_open", err.msg);
	wal_stats(w, &st);
	send_msg(fd, MSG_OPENED, st.open_window, 0, 0);
	for (uint64_t window = st.open_window;; window++) {
		uint32_t n = 1 + (uint32_t)rng_below(&rng, MAX_RECORDS);
		uint64_t digest = 0;
		struct wal_commit_info info;

		for (unsigned t = 0; t < nthreads; t++) {
			a[t].w = w;
			a[t].window = window;
			a[t].rng = rng_next(&rng);
			a[t].digest = 0;
			a[t].count = n / nthreads + (t < n % nthreads);
			a[t].status = 0;
		}
		if (nthreads == 1) {
			append_some(&a[0]);
		} else {
			for (unsigned t = 0; t < nthreads; t++)
				if ((ret = pthread_create(&a[t].thread, NULL, append_some, &a[t])) != 0)
					child_fail("pthread_create", strerror(ret));
			for (unsigned t = 0; t < nthreads; t++)
				pthread_join(a[t].thread, NULL);
		}
		for (unsigned t = 0; t < nthreads; t++) {
			if (a[t].status)
				child_fail("wal_append", wal_strerror((int)a[t].status));
			digest += a[t].digest;
		}
		if ((ret = commit_window(w, window, n, digest, &info)) < 0)
			child_fail("wal_commit", wal_strerror(ret));
		if (info.window != window)
			child_fail("wal_commit", "committed another window id than wal_stats announced");
		send_msg(fd, MSG_COMMIT, window, info.records, info.lsn);
	}
}

/* ---- parent ----------------------------------------------------------- */

/* What a child reported for one window id; records 0: never reported. */
struct report {
	uint64_t lsn;
	uint32_t records;
};

struct torture {
	const char *path;
	uint64_t seed, rng;
	unsigned kill;           /* current kill, from 1 */
	int64_t last;            /* last window id in the log at the last check, -1: none */
	uint64_t first;          /* oldest window id in the log at the last check */
	uint64_t counted;        /* windows below this id are in the totals */
	struct report *rep;
	size_t nrep;
	uint64_t open_est;       /* how long the child's wal_open takes */
	/* totals */
	unsigned at_once, in_open, writing;
	uint64_t windows, records, bytes, epochs, pads, reports, max_windows, tail_moves, reclaimed;
	uint32_t max_epoch;
};

static void __attribute__((noreturn, format(printf, 2, 3))) die(const struct torture *t,
								  const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "crash-torture: kill %u: ", t->kill);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\ncrash-torture: seed %" PRIu64 ", log kept at %s\n", t->seed, t->path);
	_exit(1); /* no cleanup: the state is what to look at */
}

static void add_report(struct torture *t, const struct msg *m)
{
	if (m->window >= t->nrep) {
		size_t n = t->nrep ? t->nrep : 1024;
		struct report *rep;

		while (n <= m->window)
			n *= 2;
		if (!(rep = realloc(t->rep, n * sizeof *rep)))
			die(t, "out of memory");
		memset(rep + t->nrep, 0, (n - t->nrep) * sizeof *rep);
		t->rep = rep;
		t->nrep = n;
	}
	t->rep[m->window] = (struct report){ .lsn = m->lsn, .records = m->records };
	t->reports++;
}

/*
 * Read what the dead child reported after its START.  Returns the last
 * window it reported committed, or -1.  Its windows must continue the log
 * exactly where the last check found it ending.
 */
static int64_t drain(struct torture *t, int fd, uint64_t start_ns)
{
	int64_t next = t->last + 1, reported = -1;
	int opened = 0;
	struct msg m;
	ssize_t n;

	while ((n = read(fd, &m, sizeof m)) == (ssize_t)sizeof m) {
		if (m.kind == MSG_OPENED) {
			if (m.window != (uint64_t)next)
				die(t, "the child's first window is %" PRIu64 ", the log ended at window %" PRId64,
				    m.window, t->last);
			t->open_est = estimate(t->open_est, m.ns - start_ns);
			opened = 1;
		} else if (m.kind == MSG_COMMIT) {
			if (m.window != (uint64_t)next)
				die(t, "the child committed window %" PRIu64 ", expected %" PRId64, m.window, next);
			add_report(t, &m);
			reported = next++;
		} else {
			die(t, "garbage on the pipe");
		}
	}
	if (n != 0)
		die(t, "short read from the pipe");
	t->in_open += !opened;
	t->writing += opened;
	return reported;
}

/* Recover a private copy of the log and hold it to what was reported. */
static void check_log(struct torture *t, int64_t reported)
{
	int64_t known = reported > t->last ? reported : t->last, last;
	const struct wal_recovery *rc;
	const struct wal_window *win;
	struct verify_stats st = { 0 };
	struct wal_reader *r;
	struct wal_error err;
	char why[512];
	size_t len, nwin;
	uint8_t *img = read_file(t->path, &len);

	if (!img)
		die(t, "cannot read %s: %s", t->path, strerror(errno));
	if (wal_reader_open_buf(img, len, &r, &err) < 0)
		die(t, "recovery failed: %s", err.msg);
	rc = wal_reader_recovery(r);
	win = wal_reader_windows(r, &nwin);
	if (rc->damage_count)
		die(t, "%" PRIu64 " findings of damage, first: %s at offset %" PRIu64 " (LSN %" PRIu64 ")",
		    rc->damage_count, rc->damage[0].reason, rc->damage[0].offset, rc->damage[0].lsn);
	last = nwin ? (int64_t)win[nwin - 1].id : -1;
	if (last != known && last != known + 1)
		die(t, "the log ends at window %" PRId64 ", but window %" PRId64 " was committed "
		    "(reclaimed or lost)", last, known);
	if (nwin) {
		if (win[0].id != rc->tail_window || win[0].id < t->first)
			die(t, "oldest window %" PRIu64 ", checkpointed tail window %" PRIu64
			    ", oldest at the last check %" PRIu64, win[0].id, rc->tail_window, t->first);
		if (rc->last_committed_lsn != win[nwin - 1].last_lsn)
			die(t, "last committed LSN %" PRIu64 " is not the last window's %" PRIu64,
			    rc->last_committed_lsn, win[nwin - 1].last_lsn);
		if (win[0].id > t->first) {
			t->tail_moves++;
			t->reclaimed += win[0].id - t->first;
		}
		t->first = win[0].id;
	}
	for (size_t i = 0; i < nwin; i++) {
		const struct report *rep = win[i].id < t->nrep ? &t->rep[win[i].id] : NULL;

		if (win[i].id != win[0].id + i || win[i].state != WAL_WINDOW_INTACT)
			die(t, "window #%zu is %" PRIu64 " (%s), expected %" PRIu64 " intact", i, win[i].id,
			    win[i].state == WAL_WINDOW_INTACT ? "intact" : "damaged", win[0].id + i);
		if (rep && rep->records && (rep->records != win[i].records || rep->lsn != win[i].last_lsn))
			die(t, "window %" PRIu64 ": %u records ending at LSN %" PRIu64 ", committed "
			    "with %u ending at LSN %" PRIu64, win[i].id, win[i].records, win[i].last_lsn,
			    rep->records, rep->lsn);
		if (win[i].id >= t->counted)
			t->bytes += win[i].bytes;
	}
	/* More than a ring's worth committed: old windows must have gone. */
	if (t->bytes > rc->capacity && !t->tail_moves)
		die(t, "%" PRIu64 " bytes of windows committed into a ring of %" PRIu64 ", but the "
		    "oldest window never changed", t->bytes, rc->capacity);
	if (verify_intact(r, img, len, t->counted, &st, why, sizeof why) < 0)
		die(t, "%s", why);
	t->windows += st.windows;
	t->records += st.records;
	t->epochs += st.epochs;
	t->pads += st.pads;
	t->counted = (uint64_t)(last + 1);
	t->last = last;
	t->max_windows = nwin > t->max_windows ? nwin : t->max_windows;
	t->max_epoch = rc->epoch;
	wal_reader_close(r);
	free(img);
}

static void one_kill(struct torture *t)
{
	unsigned nthreads = rng_below(&t->rng, 2) ? 1 : 2 + (unsigned)rng_below(&t->rng, MAX_THREADS - 1);
	uint64_t child_rng = rng_next(&t->rng);
	uint64_t delay = pick_kill_delay(&t->rng, t->open_est, MAX_DELAY_NS);
	struct msg start;
	int fds[2], status;
	pid_t pid;

	if (pipe(fds) < 0)
		die(t, "pipe: %s", strerror(errno));
	/* Room for every report of 3 ms, so the child never blocks on it. */
	fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
	if ((pid = fork()) < 0)
		die(t, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(fds[0]);
		run_child(t->path, child_rng, nthreads, fds[1]);
	}
	close(fds[1]);
	/* Time from START: starting a child (an ASan one above all) takes
	 * longer than the delays that matter. */
	if (read(fds[0], &start, sizeof start) != (ssize_t)sizeof start || start.kind != MSG_START)
		die(t, "the child did not start");
	t->at_once += !delay;
	if (kill_at(pid, start.ns, delay, &status) < 0)
		die(t, "the child died on its own (status %#x)", (unsigned)status);
	check_log(t, drain(t, fds[0], start.ns));
	close(fds[0]);
}

int main(void)
{
	struct torture t = { .last = -1 };
	unsigned kills = (unsigned)env_u64("MOEFT_TORTURE_KILLS", 200);
	struct wal_options opt;
	struct wal_error err;
	struct wal *w;
	char path[4096];
	uint64_t t0 = mono_ns();

	t.seed = env_u64("MOEFT_TORTURE_SEED", mono_ns() ^ (uint64_t)getpid() << 32);
	t.rng = t.seed;
	t.path = scratch_path(path, sizeof path, "torture");
	unlink(path);
	wal_options_init(&opt);
	opt.size = LOG_SIZE;
	opt.flags = WAL_OPEN_CREATE | WAL_OPEN_FORMAT;
	if (wal_open(path, &opt, &w, &err) < 0) {
		fprintf(stderr, "crash-torture: cannot create %s: %s\n", path, err.msg);
		return 1;
	}
	wal_close(w);
	for (t.kill = 1; t.kill <= kills; t.kill++)
		one_kill(&t);
	printf("crash-torture: %u kills, %" PRIu64 " windows verified, %" PRIu64 " records, %" PRIu64
	       " epochs, %" PRIu64 " max windows in log, %" PRIu64 " reclaims seen\n",
	       kills, t.windows, t.records, t.epochs, t.max_windows, t.tail_moves);
	printf("crash-torture: kills during wal_open %u (%u at once), while writing %u; "
	       "%" PRIu64 " commits reported, %.1f MiB of windows, %" PRIu64 " windows reclaimed, "
	       "%" PRIu64 " PAD records, last epoch %u, child wal_open ~%" PRIu64 " us, seed %" PRIu64
	       ", %.1f s\n", t.in_open, t.at_once, t.writing, t.reports, (double)t.bytes / (1 << 20),
	       t.reclaimed, t.pads, t.max_epoch, t.open_est / 1000, t.seed,
	       (double)(mono_ns() - t0) / 1e9);
	free(t.rep);
	/* A run long enough to count must have hit the cases that matter. */
	if ((kills >= 50 && !t.in_open) || (kills >= 200 && !t.tail_moves)) {
		fprintf(stderr, "crash-torture: %s; the test did not exercise what it must\n",
			t.in_open ? "the ring never wrapped" : "no kill landed inside wal_open");
		return 1;
	}
	unlink(path);
	return 0;
}
