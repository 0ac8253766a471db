/*
 * test_writer.c - writer.c through the public API, checked with the reader:
 * epochs and reopen, commit info, argument checks, record size limits, a
 * full log, ring wrap and reclaim, checkpoints, stats, dropped uncommitted
 * records, open errors (busy, missing directory, foreign data, NUMA) and
 * concurrent appenders with a concurrent committer.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <numa.h>

#include "format.h"
#include "record.h"
#include "testutil.h"
#include "wal.h"

#define MiB (UINT64_C(1) << 20)
#define SMALL_LOG (WAL_DATA_OFF + 65536u) /* the smallest log: a 64 KiB ring */
#define SMALL_CAP 65536u

/* ---- helpers ----------------------------------------------------------- */

static struct wal *open_log(const char *path, uint64_t size, unsigned flags)
{
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal *w = NULL;
	int rc;

	wal_options_init(&opt);
	opt.size = size;
	opt.flags = flags;
	rc = wal_open(path, &opt, &w, &err);
	if (rc != 0)
		fprintf(stderr, "\nwal_open %s: %d %s\n", path, rc, err.msg);
	return w;
}

static struct wal_reader *read_log(const char *path)
{
	struct wal_error err = { 0 };
	struct wal_reader *r = NULL;

	if (wal_reader_open_path(path, &r, &err) != 0)
		fprintf(stderr, "\nwal_reader_open_path: %s\n", err.msg);
	return r;
}

static int64_t append(struct wal *w, unsigned type, const void *p, uint32_t len)
{
	int64_t lsn = wal_append(w, type, p, len);

	CU_ASSERT(lsn > 0);
	return lsn;
}

static struct wal_commit_info commit(struct wal *w, const void *extra, uint32_t len)
{
	struct wal_commit_info info;

	memset(&info, 0xff, sizeof info);
	CU_ASSERT_EQUAL(wal_commit(w, extra, len, &info), 0);
	return info;
}

/* A USER payload that says who wrote it: epoch, window and index, then
 * filler up to `len` bytes (at least 12). */
static uint32_t mark(uint8_t *buf, uint32_t len, uint32_t epoch, uint32_t window, uint32_t idx)
{
	uint32_t i;

	put32(buf, epoch);
	put32(buf + 4, window);
	put32(buf + 8, idx);
	for (i = 12; i < len; i++)
		buf[i] = (uint8_t)(epoch * 7 + window * 13 + idx + i);
	return len;
}

static int mark_ok(const struct wal_record *rec, uint32_t epoch, uint32_t window, uint32_t idx)
{
	uint8_t want[1024];

	if (rec->len < 12 || rec->len > sizeof want)
		return 0;
	mark(want, rec->len, epoch, window, idx);
	return memcmp(rec->payload, want, rec->len) == 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Windows are contiguous, intact and end at `last`. */
static void check_windows_end_at(const struct wal_reader *r, uint64_t last)
{
	size_t n, i;
	const struct wal_window *win = wal_reader_windows(r, &n);

	CU_ASSERT_FATAL(n > 0);
	CU_ASSERT_EQUAL(win[n - 1].id, last);
	for (i = 0; i < n; i++) {
		CU_ASSERT_EQUAL(win[i].state, WAL_WINDOW_INTACT);
		CU_ASSERT_EQUAL(win[i].id, win[0].id + i);
		if (i)
			CU_ASSERT_EQUAL(win[i].first_lsn, win[i - 1].last_lsn + 1);
	}
}

/* ---- epochs and reopen ----------------------------------------------- */

/* Window 0: one record of each payload type; window 1: two USER records. */
static void write_typed_windows(struct wal *w, struct wal_commit_info info[2])
{
	uint8_t routing[ROUTING_HDR_SIZE + 8], kv[KVREF_PAYLOAD_SIZE], al[ALLOC_PAYLOAD_SIZE];
	uint8_t fr[FREE_PAYLOAD_SIZE], crash[CRASH_HDR_SIZE + 16], steps[WINDOW_STEPS_SIZE];
	uint8_t user[40];
	struct rec_routing ro = { .step = 9, .layer = 3, .tokens = 2, .k = 4, .id_bytes = 1,
				  .experts = 64 };
	struct rec_crash cr = { .signo = 11, .addr = 0x1000, .pid = 77, .nframes = 2,
				.frames = { 1, 2 } };

	rec_routing_encode(routing, &ro);
	memcpy(routing + ROUTING_HDR_SIZE, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	rec_kvref_encode(kv, &(struct rec_kvref){ .pool = 1, .bytes = 4096, .block = 5, .step = 9 });
	rec_alloc_encode(al, &(struct rec_alloc){ .alloc_id = 42, .base = 0x7000, .size = 1 << 20 });
	rec_free_encode(fr, &(struct rec_free){ .alloc_id = 42, .base = 0x7000 });
	CU_ASSERT_EQUAL(rec_crash_encode(crash, sizeof crash, &cr), sizeof crash);
	rec_window_steps_encode(steps, &(struct rec_window_steps){ .first_step = 9, .steps = 1,
								    .tokens = 2 });
	append(w, WAL_REC_ROUTING, routing, sizeof routing);
	append(w, WAL_REC_KVREF, kv, sizeof kv);
	append(w, WAL_REC_ALLOC, al, sizeof al);
	append(w, WAL_REC_FREE, fr, sizeof fr);
	append(w, WAL_REC_CRASH, crash, sizeof crash);
	append(w, WAL_REC_USER, user, mark(user, sizeof user, 1, 0, 6));
	info[0] = commit(w, steps, sizeof steps);
	append(w, WAL_REC_USER + 1, user, mark(user, sizeof user, 1, 1, 1));
	append(w, WAL_REC_USER + 2, user, mark(user, 20, 1, 1, 2));
	info[1] = commit(w, NULL, 0);
}

/* The records of window 0 as write_typed_windows() laid them out. */
static void check_typed_window(const struct wal_reader *r)
{
	static const unsigned types[] = { WAL_REC_EPOCH, WAL_REC_ROUTING, WAL_REC_KVREF,
		WAL_REC_ALLOC, WAL_REC_FREE, WAL_REC_CRASH, WAL_REC_USER, WAL_REC_WINDOW };
	struct wal_iter it;
	struct wal_record rec;
	struct rec_routing ro;
	struct rec_alloc al;
	struct rec_crash cr;
	struct rec_epoch ep;
	unsigned i;

	wal_iter_init(&it, r);
	for (i = 0; i < 8; i++) {
		CU_ASSERT_FATAL(wal_iter_next(&it, &rec) == 1);
		CU_ASSERT_EQUAL(rec.type, types[i]);
		CU_ASSERT_EQUAL(rec.lsn, i + 1);
		CU_ASSERT_EQUAL(rec.index, i);
		CU_ASSERT_EQUAL(rec.window, 0);
		CU_ASSERT_EQUAL(rec.epoch, 1);
		if (rec.type == WAL_REC_EPOCH) {
			CU_ASSERT_EQUAL_FATAL(rec_epoch_decode(rec.payload, rec.len, &ep), 0);
			CU_ASSERT_EQUAL(ep.prev_epoch, 0);
			CU_ASSERT_EQUAL(ep.prev_commit_lsn, 0);
			CU_ASSERT_EQUAL(ep.pid, (uint32_t)getpid());
		} else if (rec.type == WAL_REC_ROUTING) {
			CU_ASSERT_EQUAL_FATAL(rec_routing_decode(rec.payload, rec.len, &ro), 0);
			CU_ASSERT_EQUAL(ro.tokens * ro.k, 8);
			CU_ASSERT_EQUAL(rec_routing_id(&ro, 7), 8);
		} else if (rec.type == WAL_REC_ALLOC) {
			CU_ASSERT_EQUAL_FATAL(rec_alloc_decode(rec.payload, rec.len, &al), 0);
			CU_ASSERT_EQUAL(al.alloc_id, 42);
			CU_ASSERT_EQUAL(al.size, 1 << 20);
		} else if (rec.type == WAL_REC_CRASH) {
			CU_ASSERT_EQUAL_FATAL(rec_crash_decode(rec.payload, rec.len, &cr), 0);
			CU_ASSERT_EQUAL(cr.nframes, 2);
			CU_ASSERT_EQUAL(cr.frames[1], 2);
		} else if (rec.type == WAL_REC_USER) {
			CU_ASSERT(mark_ok(&rec, 1, 0, 6));
		}
	}
}

static void test_reopen_new_epoch(void)
{
	struct wal_commit_info info[2], again;
	const struct wal_window *win;
	struct wal_stats st;
	struct wal_iter it;
	struct wal_record rec;
	struct rec_epoch ep;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	size_t n;

	w = open_log(test_path(path, sizeof path, "reopen"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.epoch, 1);
	write_typed_windows(w, info);
	wal_close(w);

	w = open_log(path, 0, 0);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.epoch, 2);
	CU_ASSERT_EQUAL(st.open_window, 2);
	CU_ASSERT_EQUAL(st.last_committed_lsn, info[1].lsn);
	CU_ASSERT_EQUAL(st.next_lsn, info[1].lsn + 2); /* the EPOCH record took one */
	again = commit(w, NULL, 0);
	CU_ASSERT_EQUAL(again.window, 2);
	CU_ASSERT_EQUAL(again.first_lsn, info[1].lsn + 1);
	CU_ASSERT_EQUAL(again.records, 2);
	wal_close(w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->epoch, 2);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->first_epoch, 1);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->damage_count, 0);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, 3);
	check_windows_end_at(r, 2);
	CU_ASSERT_EQUAL(win[0].epoch, 1);
	CU_ASSERT_EQUAL(win[1].epoch, 1);
	CU_ASSERT_EQUAL(win[2].epoch, 2);
	CU_ASSERT_EQUAL(win[0].extra_len, WINDOW_STEPS_SIZE);
	check_typed_window(r);

	/* Window 2 opens with an EPOCH record naming epoch 1 and its last commit. */
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1 && rec.window != 2)
		;
	CU_ASSERT_EQUAL(rec.window, 2);
	CU_ASSERT_EQUAL(rec.type, WAL_REC_EPOCH);
	CU_ASSERT_EQUAL(rec.epoch, 2);
	CU_ASSERT_EQUAL(rec.index, 0);
	CU_ASSERT_EQUAL_FATAL(rec_epoch_decode(rec.payload, rec.len, &ep), 0);
	CU_ASSERT_EQUAL(ep.prev_epoch, 1);
	CU_ASSERT_EQUAL(ep.prev_commit_lsn, info[1].lsn);
	CU_ASSERT_EQUAL(ep.pid, (uint32_t)getpid());
	wal_reader_close(r);
	unlink(path);
}

/* ---- commit ------------------------------------------------------------ */

static void test_commit_info(void)
{
	static const uint8_t extra[16] = "step counters..";
	uint8_t buf[100] = { 0 };
	struct wal_commit_info a, b;
	const struct wal_window *win;
	struct wal_reader *r;
	struct wal *w;
	uint64_t t0, t1;
	char path[256];
	size_t n;

	w = open_log(test_path(path, sizeof path, "info"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	CU_ASSERT_EQUAL(append(w, WAL_REC_USER, NULL, 0), 2);
	CU_ASSERT_EQUAL(append(w, WAL_REC_USER, buf, 10), 3);
	CU_ASSERT_EQUAL(append(w, WAL_REC_USER, buf, 100), 4);
	t0 = now_ns();
	a = commit(w, extra, sizeof extra);
	t1 = now_ns();
	CU_ASSERT_EQUAL(a.window, 0);
	CU_ASSERT_EQUAL(a.first_lsn, 1);
	CU_ASSERT_EQUAL(a.lsn, 5);
	CU_ASSERT_EQUAL(a.records, 5); /* EPOCH, three records, WINDOW */
	CU_ASSERT_EQUAL(a.bytes, 80 + 48 + 64 + 160 + 96);
	b = commit(w, NULL, 0); /* an empty window is just its WINDOW record */
	CU_ASSERT_EQUAL(b.window, 1);
	CU_ASSERT_EQUAL(b.first_lsn, 6);
	CU_ASSERT_EQUAL(b.lsn, 6);
	CU_ASSERT_EQUAL(b.records, 1);
	CU_ASSERT_EQUAL(b.bytes, 80);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, 2);
	CU_ASSERT_EQUAL(win[0].first_lsn, a.first_lsn);
	CU_ASSERT_EQUAL(win[0].last_lsn, a.lsn);
	CU_ASSERT_EQUAL(win[0].records, a.records);
	CU_ASSERT_EQUAL(win[0].bytes, a.bytes);
	CU_ASSERT_EQUAL(win[0].pos, 0);
	CU_ASSERT_EQUAL(win[1].pos, a.bytes);
	CU_ASSERT_EQUAL(win[1].bytes, b.bytes);
	CU_ASSERT(win[0].commit_ns >= t0 && win[0].commit_ns <= t1);
	CU_ASSERT_EQUAL_FATAL(win[0].extra_len, sizeof extra);
	CU_ASSERT_EQUAL(memcmp(win[0].extra, extra, sizeof extra), 0);
	CU_ASSERT_EQUAL(win[1].extra_len, 0);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->last_committed_lsn, 6);
	wal_reader_close(r);

	CU_ASSERT_EQUAL(wal_commit(w, NULL, 5, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_commit(NULL, NULL, 0, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_commit(w, NULL, 0, NULL), 0); /* info is optional */
	wal_close(w);
	unlink(path);
}

/* ---- the crash entry point ------------------------------------------- */

static struct wal *crash_wal;
static volatile sig_atomic_t crash_rc = 1;

static void on_usr1(int sig)
{
	uint8_t buf[CRASH_HDR_SIZE + 8 * 2];
	struct rec_crash c = { .signo = sig, .code = -6, .pid = 77, .nframes = 2,
			       .frames = { 0x1000, 0x2000 } };
	size_t len = rec_crash_encode(buf, sizeof buf, &c);

	crash_rc = wal_append_crash(crash_wal, buf, (uint32_t)len);
}

/* From a signal handler: the CRASH record and what the window held before
 * it are committed together; nothing else needs a commit. */
static void test_append_crash(void)
{
	char path[256];
	struct wal *w = open_log(test_path(path, sizeof path, "crash"), SMALL_LOG, WAL_OPEN_CREATE);
	struct wal_reader *r;
	struct wal_record rec;
	struct wal_iter it;
	struct rec_crash c;
	struct sigaction sa, old;
	uint8_t buf[64];
	size_t n;
	const struct wal_window *win;

	CU_ASSERT_FATAL(w != NULL);
	CU_ASSERT_EQUAL(wal_append_crash(NULL, buf, 8), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_append_crash(w, NULL, 8), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_append_crash(w, buf, 0), WAL_EINVAL);
	append(w, WAL_REC_USER, buf, mark(buf, 32, 1, 0, 1));
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	CU_ASSERT_FATAL(sigaction(SIGUSR1, &sa, &old) == 0);
	crash_wal = w;
	raise(SIGUSR1);
	sigaction(SIGUSR1, &old, NULL);
	CU_ASSERT_EQUAL(crash_rc, 0);
	/* Read while the writer is still open, as after a crash. */
	CU_ASSERT_FATAL((r = read_log(path)) != NULL);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, 1);
	CU_ASSERT_EQUAL(win[0].records, 4);  /* EPOCH, USER, CRASH, WINDOW */
	CU_ASSERT_EQUAL(win[0].extra_len, 0);
	wal_iter_init(&it, r);
	CU_ASSERT(wal_iter_next(&it, &rec) == 1 && rec.type == WAL_REC_EPOCH);
	CU_ASSERT(wal_iter_next(&it, &rec) == 1 && rec.type == WAL_REC_USER);
	CU_ASSERT_FATAL(wal_iter_next(&it, &rec) == 1 && rec.type == WAL_REC_CRASH);
	CU_ASSERT_FATAL(rec_crash_decode(rec.payload, rec.len, &c) == 0);
	CU_ASSERT(c.signo == SIGUSR1 && c.pid == 77 && c.nframes == 2 && c.frames[1] == 0x2000);
	wal_reader_close(r);
	/* The writer goes on after it: the next window follows. */
	append(w, WAL_REC_USER, buf, mark(buf, 32, 1, 1, 0));
	CU_ASSERT_EQUAL(commit(w, NULL, 0).window, 1);
	wal_close(w);
	unlink(path);
}

/* wal_end: the open window's records dropped, the EXIT record committed in
 * a window of its own, and nothing written after it. */
static void test_end(void)
{
	uint8_t buf[32], exit_rec[EXIT_PAYLOAD_SIZE];
	static const unsigned types[] = { WAL_REC_EPOCH, WAL_REC_USER, WAL_REC_WINDOW,
					  WAL_REC_EXIT, WAL_REC_WINDOW };
	const struct wal_window *win;
	struct wal_stats before, after;
	struct wal_reader *r;
	struct wal_record rec;
	struct rec_exit e;
	struct wal_iter it;
	struct wal *w;
	char path[256];
	size_t n, i;

	w = open_log(test_path(path, sizeof path, "end"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	append(w, WAL_REC_USER, buf, mark(buf, 32, 1, 0, 1));
	commit(w, NULL, 0);
	append(w, WAL_REC_USER, buf, mark(buf, 32, 1, 1, 0));	/* never committed */
	rec_exit_encode(exit_rec, &(struct rec_exit){ .pid = 4242 });
	CU_ASSERT_EQUAL(wal_end(w, NULL, 1), WAL_EINVAL);
	CU_ASSERT_EQUAL_FATAL(wal_end(w, exit_rec, sizeof exit_rec), 0);
	wal_stats(w, &before);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, buf, 12), WAL_EENDED);
	CU_ASSERT_EQUAL(wal_commit(w, NULL, 0, NULL), WAL_EENDED);
	CU_ASSERT_EQUAL(wal_append_crash(w, buf, 8), WAL_EENDED);
	CU_ASSERT_EQUAL(wal_end(w, exit_rec, sizeof exit_rec), WAL_EENDED);
	wal_stats(w, &after);
	CU_ASSERT_EQUAL(after.next_lsn, before.next_lsn);
	CU_ASSERT_EQUAL(after.commits, before.commits);
	CU_ASSERT_STRING_EQUAL(wal_strerror(WAL_EENDED),
			       "the writer has ended (the process is exiting)");
	wal_close(w);

	CU_ASSERT_FATAL((r = read_log(path)) != NULL);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, 2);
	CU_ASSERT_EQUAL(win[1].records, 2);
	CU_ASSERT_EQUAL(win[1].extra_len, 0);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->tail_records, 0);
	wal_iter_init(&it, r);
	for (i = 0; i < sizeof types / sizeof types[0]; i++) {
		CU_ASSERT_FATAL(wal_iter_next(&it, &rec) == 1);
		CU_ASSERT_EQUAL(rec.type, types[i]);
		if (rec.type == WAL_REC_EXIT) {
			CU_ASSERT_EQUAL_FATAL(rec_exit_decode(rec.payload, rec.len, &e), 0);
			CU_ASSERT_EQUAL(e.pid, 4242);
		}
	}
	CU_ASSERT_EQUAL(wal_iter_next(&it, &rec), 0);
	CU_ASSERT_STRING_EQUAL(wal_rec_type_name(WAL_REC_EXIT), "exit");
	wal_reader_close(r);

	/* From a signal handler's side: the same end, the lock only tried. */
	CU_ASSERT_FATAL((w = open_log(path, MiB, WAL_OPEN_CREATE)) != NULL);
	append(w, WAL_REC_USER, buf, mark(buf, 32, 2, 2, 0));	/* dropped */
	CU_ASSERT_EQUAL(wal_end_signal(w, exit_rec, sizeof exit_rec), 0);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, buf, 12), WAL_EENDED);
	wal_close(w);
	CU_ASSERT_FATAL((r = read_log(path)) != NULL);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, 3);
	CU_ASSERT_EQUAL(win[2].records, 3);	/* the new EPOCH, EXIT, WINDOW */
	CU_ASSERT_EQUAL(win[2].epoch, 2);
	wal_reader_close(r);
	unlink(path);
}

/* ---- append arguments and limits ------------------------------------- */

static void test_append_rejects(void)
{
	static const unsigned bad[] = { 0, WAL_REC_PAD, WAL_REC_EPOCH, WAL_REC_WINDOW,
					WAL_REC_EXIT, 0x10000, UINT32_MAX };
	uint8_t buf[8] = { 0 };
	struct wal_stats before, after;
	struct wal *w;
	char path[256];
	size_t i;

	w = open_log(test_path(path, sizeof path, "rejects"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &before);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CU_ASSERT_EQUAL(wal_append(w, bad[i], buf, sizeof buf), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, NULL, 1), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_append(NULL, WAL_REC_USER, buf, 1), WAL_EINVAL);
	wal_stats(w, &after);
	CU_ASSERT_EQUAL(after.appends, before.appends);
	CU_ASSERT_EQUAL(after.next_lsn, before.next_lsn);
	CU_ASSERT_EQUAL(after.used, before.used);

	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, NULL, 0), 2);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_ROUTING, buf, 0), 3);
	CU_ASSERT_EQUAL(wal_append(w, 0xffff, buf, 8), 4);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_CRASH, buf, 8), 5);
	wal_close(w);
	unlink(path);
}

/* A record may use half the ring, not a byte more. */
static void test_append_too_big(void)
{
	uint8_t *buf = calloc(1, SMALL_CAP);
	struct wal_stats st;
	struct wal *w;
	char path[256];

	CU_ASSERT_FATAL(buf != NULL);
	w = open_log(test_path(path, sizeof path, "e2big"), SMALL_LOG, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, buf, SMALL_CAP / 2 - REC_HDR_SIZE + 1), WAL_E2BIG);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, buf, SMALL_CAP), WAL_E2BIG);
	CU_ASSERT_EQUAL(wal_commit(w, buf, SMALL_CAP / 2 - REC_HDR_SIZE - WINDOW_FIXED_SIZE + 1, NULL),
			WAL_E2BIG);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.commits, 0);
	CU_ASSERT_EQUAL(st.full_errors, 0);
	CU_ASSERT_EQUAL(rec_size(SMALL_CAP / 2 - REC_HDR_SIZE), SMALL_CAP / 2);
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, buf, SMALL_CAP / 2 - REC_HDR_SIZE), 2);
	CU_ASSERT_EQUAL(wal_commit(w, NULL, 0, NULL), 0);
	wal_close(w);
	unlink(path);
	free(buf);
}

/* ---- a full log -------------------------------------------------------- */

#define BIG_LEN 952u /* a 1008-byte record */

/* Window 0 = EPOCH + one 8-byte USER record + WINDOW = 224 bytes; then
 * BIG_LEN records in the open window until the ring is full. */
static unsigned fill_after_one_commit(struct wal *w)
{
	uint8_t buf[BIG_LEN];
	unsigned n = 0;
	int64_t rc;

	append(w, WAL_REC_USER, buf, mark(buf, 12, 1, 0, 1));
	commit(w, NULL, 0);
	while ((rc = wal_append(w, WAL_REC_USER, buf, mark(buf, BIG_LEN, 1, 1, n))) > 0)
		n++;
	CU_ASSERT_EQUAL(rc, WAL_EFULL);
	return n;
}

static void test_full_log(void)
{
	struct wal_iter it;
	struct wal_record rec;
	struct wal_stats st;
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	unsigned n;

	w = open_log(test_path(path, sizeof path, "full"), SMALL_LOG, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	n = fill_after_one_commit(w);
	CU_ASSERT_EQUAL(n, (SMALL_CAP - 224) / 1008); /* 64 */
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.full_errors, 1);
	CU_ASSERT_EQUAL(st.used, 224 + n * 1008);
	CU_ASSERT(st.used <= st.capacity);
	CU_ASSERT_EQUAL(st.next_lsn, 4 + n);
	CU_ASSERT_EQUAL(st.reclaims, 0);
	wal_close(w); /* the open window is never committed */

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->committed_windows, 1);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, 3);
	CU_ASSERT_EQUAL(rv->tail_records, n);
	check_windows_end_at(r, 0);
	wal_iter_init(&it, r);
	CU_ASSERT_EQUAL(wal_iter_next(&it, &rec), 1);
	CU_ASSERT_EQUAL(rec.type, WAL_REC_EPOCH);
	CU_ASSERT_EQUAL(wal_iter_next(&it, &rec), 1);
	CU_ASSERT(mark_ok(&rec, 1, 0, 1));
	CU_ASSERT_EQUAL(wal_iter_next(&it, &rec), 1);
	CU_ASSERT_EQUAL(rec.type, WAL_REC_WINDOW);
	CU_ASSERT_EQUAL(wal_iter_next(&it, &rec), 0);
	wal_reader_close(r);

	/* And a writer takes it up again. */
	w = open_log(path, 0, 0);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.epoch, 2);
	CU_ASSERT_EQUAL(st.next_lsn, 5);
	wal_close(w);
	unlink(path);
}

/* After WAL_EFULL a commit still fits; once a newer window commits, the
 * older ones are reclaimed. */
static void test_full_then_commit_reclaims(void)
{
	uint8_t buf[BIG_LEN];
	struct wal_commit_info big, small;
	struct wal_stats st;
	const struct wal_recovery *rv;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	unsigned n;

	w = open_log(test_path(path, sizeof path, "fullcommit"), SMALL_LOG, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	n = fill_after_one_commit(w);
	big = commit(w, NULL, 0);
	CU_ASSERT_EQUAL(big.window, 1);
	CU_ASSERT_EQUAL(big.records, n + 1);
	/* The big window is now the one kept: a big record still does not fit. */
	CU_ASSERT_EQUAL(wal_append(w, WAL_REC_USER, buf, BIG_LEN), WAL_EFULL);
	append(w, WAL_REC_USER, buf, mark(buf, 12, 1, 2, 0));
	small = commit(w, NULL, 0);
	CU_ASSERT_EQUAL(small.window, 2);
	append(w, WAL_REC_USER, buf, mark(buf, BIG_LEN, 1, 3, 0));
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.reclaims, 1);
	CU_ASSERT_EQUAL(st.full_errors, 2);
	CU_ASSERT_EQUAL(st.used, small.bytes + 576 + 1008); /* PAD to the end, then the record */
	commit(w, NULL, 0);
	wal_close(w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->tail_window, 2);
	CU_ASSERT_EQUAL(rv->tail_lsn, small.first_lsn);
	CU_ASSERT_EQUAL(rv->committed_windows, 2);
	CU_ASSERT_EQUAL(rv->rec_count[WAL_REC_PAD], 1);
	check_windows_end_at(r, 3);
	wal_reader_close(r);
	unlink(path);
}

/* ---- ring wrap and reuse ---------------------------------------------- */

#define WRAP_WINDOWS 3000u

/* Window w holds w % 3 + 1 USER records of 12 + (w * 7 + i * 29) % 200 bytes. */
static uint32_t wrap_len(uint32_t window, uint32_t i)
{
	return 12 + (window * 7 + i * 29) % 200;
}

static void check_wrap_window(const struct wal_reader *r, uint64_t id)
{
	size_t n, i;
	const struct wal_window *win = wal_reader_windows(r, &n);
	struct wal_iter it;
	struct wal_record rec;
	uint32_t k = 0;

	for (i = 0; i < n; i++)
		if (win[i].id == id)
			break;
	CU_ASSERT_FATAL(i < n);
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		if (rec.window != id || rec.type != WAL_REC_USER)
			continue;
		CU_ASSERT_EQUAL(rec.len, wrap_len((uint32_t)id, k));
		CU_ASSERT(mark_ok(&rec, 1, (uint32_t)id, k));
		k++;
	}
	CU_ASSERT_EQUAL(k, id % 3 + 1);
}

static void test_ring_wrap(void)
{
	uint8_t buf[256], extra[4];
	struct wal_commit_info info = { 0 };
	const struct wal_recovery *rv;
	struct wal_stats st;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	uint32_t win, i;

	w = open_log(test_path(path, sizeof path, "wrap"), SMALL_LOG, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	for (win = 0; win < WRAP_WINDOWS; win++) {
		for (i = 0; i < win % 3 + 1; i++)
			append(w, WAL_REC_USER, buf, mark(buf, wrap_len(win, i), 1, win, i));
		put32(extra, win);
		info = commit(w, extra, sizeof extra);
		CU_ASSERT_EQUAL(info.window, win);
		if (win % 500 != 499)
			continue;
		/* A reader beside the writer sees everything up to this commit. */
		r = read_log(path);
		CU_ASSERT_FATAL(r != NULL);
		CU_ASSERT_EQUAL(wal_reader_recovery(r)->damage_count, 0);
		CU_ASSERT_EQUAL(wal_reader_recovery(r)->last_committed_lsn, info.lsn);
		check_windows_end_at(r, win);
		check_wrap_window(r, win);
		wal_reader_close(r);
	}
	wal_stats(w, &st);
	CU_ASSERT(st.reclaims > 0);
	CU_ASSERT(st.used <= st.capacity);
	CU_ASSERT_EQUAL(st.commits, WRAP_WINDOWS);
	wal_close(w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT(rv->rec_count[WAL_REC_PAD] > 0);
	CU_ASSERT(rv->tail_pos > SMALL_CAP); /* the tail went round the ring */
	CU_ASSERT_EQUAL(rv->tail_window, wal_reader_windows(r, &(size_t){ 0 })[0].id);
	check_windows_end_at(r, WRAP_WINDOWS - 1);
	check_wrap_window(r, WRAP_WINDOWS - 1);
	wal_reader_close(r);
	unlink(path);
}

/* ---- checkpoint -------------------------------------------------------- */

static void test_checkpoint(void)
{
	struct wal_commit_info info = { 0 };
	const struct wal_recovery *rv;
	struct wal_stats st;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	uint64_t gen;
	int i;

	w = open_log(test_path(path, sizeof path, "ckpt"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	CU_ASSERT_EQUAL(wal_checkpoint(w), 0); /* nothing committed: no-op */
	CU_ASSERT_EQUAL(wal_checkpoint(NULL), WAL_EINVAL);
	for (i = 0; i < 5; i++) {
		append(w, WAL_REC_USER, "abcdefghijkl", 12);
		info = commit(w, NULL, 0);
	}
	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->tail_window, 0);
	gen = wal_reader_recovery(r)->ckpt_gen;
	wal_reader_close(r);

	CU_ASSERT_EQUAL(wal_checkpoint(w), 0);
	CU_ASSERT_EQUAL(wal_checkpoint(w), 0); /* already there: no new generation */
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.used, info.bytes);
	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->ckpt_gen, gen + 1);
	CU_ASSERT_EQUAL(rv->tail_window, 4);
	CU_ASSERT_EQUAL(rv->tail_lsn, info.first_lsn);
	CU_ASSERT_EQUAL(rv->committed_windows, 1);
	CU_ASSERT_EQUAL(rv->first_lsn, info.first_lsn);
	check_windows_end_at(r, 4);
	wal_reader_close(r);
	wal_close(w);

	/* Durable: a new writer starts from it. */
	w = open_log(path, 0, 0);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.open_window, 5);
	wal_close(w);
	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->tail_window, 4);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->ckpt_gen, gen + 2);
	check_windows_end_at(r, 4);
	wal_reader_close(r);
	unlink(path);
}

/* ---- stats -------------------------------------------------------------- */

static void test_stats(void)
{
	uint8_t buf[30] = { 0 };
	struct wal_stats st;
	struct wal *w;
	char path[256];

	w = open_log(test_path(path, sizeof path, "stats"), 2 * MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.media, WAL_MEDIA_SHM);
	CU_ASSERT_EQUAL(st.numa_node, -1);
	CU_ASSERT_EQUAL(st.size, 2 * MiB);
	CU_ASSERT_EQUAL(st.capacity, 2 * MiB - WAL_DATA_OFF);
	CU_ASSERT_EQUAL(st.epoch, 1);
	CU_ASSERT_EQUAL(st.appends, 1); /* the EPOCH record */
	CU_ASSERT_EQUAL(st.append_bytes, EPOCH_PAYLOAD_SIZE);
	CU_ASSERT_EQUAL(st.used, 80);
	CU_ASSERT_EQUAL(st.commits, 0);
	CU_ASSERT_EQUAL(st.reclaims, 0);
	CU_ASSERT_EQUAL(st.full_errors, 0);
	CU_ASSERT_EQUAL(st.next_lsn, 2);
	CU_ASSERT_EQUAL(st.last_committed_lsn, 0);
	CU_ASSERT_EQUAL(st.open_window, 0);

	append(w, WAL_REC_USER, buf, 10);
	append(w, WAL_REC_USER, buf, 20);
	append(w, WAL_REC_USER, buf, 30);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.appends, 4);
	CU_ASSERT_EQUAL(st.append_bytes, EPOCH_PAYLOAD_SIZE + 60);
	CU_ASSERT_EQUAL(st.used, 80 + 64 + 80 + 80);
	CU_ASSERT_EQUAL(st.next_lsn, 5);

	commit(w, NULL, 0);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.commits, 1);
	CU_ASSERT_EQUAL(st.appends, 4); /* WINDOW records are not appends */
	CU_ASSERT_EQUAL(st.used, 80 + 64 + 80 + 80 + 80);
	CU_ASSERT_EQUAL(st.next_lsn, 6);
	CU_ASSERT_EQUAL(st.last_committed_lsn, 5);
	CU_ASSERT_EQUAL(st.open_window, 1);
	wal_close(w);
	unlink(path);
}

/* ---- uncommitted records at close -------------------------------------- */

static void test_uncommitted_dropped(void)
{
	uint8_t buf[64];
	struct wal_iter it;
	struct wal_record rec;
	struct wal_stats st;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	uint64_t lsn = 0;
	uint32_t i;

	w = open_log(test_path(path, sizeof path, "drop"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	for (i = 0; i < 3; i++)
		append(w, WAL_REC_USER, buf, mark(buf, 40, 1, 0, i));
	CU_ASSERT_EQUAL(commit(w, NULL, 0).lsn, 5);
	for (i = 0; i < 4; i++) /* window 1 of epoch 1: never committed */
		append(w, WAL_REC_USER, buf, mark(buf, 24, 1, 1, i));
	wal_close(w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->tail_records, 4);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->last_committed_lsn, 5);
	wal_reader_close(r);

	w = open_log(path, 0, 0);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.next_lsn, 7); /* LSN 6 reused by the EPOCH record */
	CU_ASSERT_EQUAL(st.open_window, 1); /* and window 1 too */
	for (i = 0; i < 2; i++)
		append(w, WAL_REC_USER, buf, mark(buf, 40, 2, 1, i));
	commit(w, NULL, 0);
	wal_close(w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->tail_records, 0);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->records, 5 + 4);
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		CU_ASSERT_EQUAL(rec.lsn, ++lsn);
		CU_ASSERT_FALSE(rec.epoch == 1 && rec.window == 1); /* the dropped window */
		if (rec.type != WAL_REC_USER)
			continue;
		CU_ASSERT_EQUAL(get32(rec.payload), rec.epoch); /* never an epoch-1 leftover */
		CU_ASSERT(mark_ok(&rec, rec.epoch, (uint32_t)rec.window, rec.index - 1));
	}
	CU_ASSERT_EQUAL(lsn, 9);
	wal_reader_close(r);
	unlink(path);
}

/* The dropped tail reuses LSNs and window ids of the next epoch: the new
 * writer zeroes it, so no resync after damage can mistake it for its own. */
static void test_dropped_tail_erased(void)
{
	const struct wal_recovery *rv;
	uint64_t head, end, i;
	uint8_t buf[64], *img;
	struct wal_reader *r;
	struct wal *w;
	char path[256];
	size_t len;

	w = open_log(test_path(path, sizeof path, "erase"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	append(w, WAL_REC_USER, buf, mark(buf, 40, 1, 0, 0));
	commit(w, NULL, 0);
	for (i = 0; i < 4; i++)
		append(w, WAL_REC_USER, buf, mark(buf, 24, 1, 1, (uint32_t)i));
	wal_close(w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	head = rv->head_pos;
	end = rv->tail_end_pos;
	CU_ASSERT_EQUAL(rv->tail_records, 4);
	CU_ASSERT_EQUAL(end - head, 4 * rec_size(24));
	wal_reader_close(r);

	w = open_log(path, 0, 0); /* writes only its EPOCH record at head */
	CU_ASSERT_FATAL(w != NULL);
	wal_close(w);
	img = test_slurp(path, &len);
	CU_ASSERT_FATAL(img != NULL);
	for (i = head + rec_size(EPOCH_PAYLOAD_SIZE); i < end; i++)
		if (img[WAL_DATA_OFF + i] != 0)
			break;
	CU_ASSERT_EQUAL(i, end);
	free(img);
	unlink(path);
}

/* ---- open errors -------------------------------------------------------- */

static void test_second_writer_busy(void)
{
	static char sentinel;
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal *w, *w2 = (struct wal *)(void *)&sentinel;
	char path[256];

	w = open_log(test_path(path, sizeof path, "busy"), MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(w != NULL);
	wal_options_init(&opt);
	opt.size = MiB;
	CU_ASSERT_EQUAL(wal_open(path, &opt, &w2, &err), WAL_EBUSY);
	CU_ASSERT_PTR_NULL(w2);
	CU_ASSERT_EQUAL(err.code, WAL_EBUSY);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
	/* The first writer is undisturbed. */
	append(w, WAL_REC_USER, "x", 1);
	CU_ASSERT_EQUAL(commit(w, NULL, 0).window, 0);
	wal_close(w);
	w = open_log(path, 0, 0);
	CU_ASSERT_PTR_NOT_NULL(w);
	wal_close(w);
	unlink(path);
}

static void test_bad_path(void)
{
	struct wal_error err = { 0 };
	struct wal *w = NULL;
	char path[256], nodir[300];

	test_path(path, sizeof path, "nodir");
	snprintf(nodir, sizeof nodir, "%s.no-such-dir/log.wal", path);
	CU_ASSERT_EQUAL(wal_open(nodir, NULL, &w, &err), WAL_EIO);
	CU_ASSERT_PTR_NULL(w);
	CU_ASSERT_EQUAL(err.code, WAL_EIO);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, nodir));
	CU_ASSERT_EQUAL(wal_open("", NULL, &w, &err), WAL_EINVAL);
	CU_ASSERT_EQUAL(wal_open(NULL, NULL, &w, &err), WAL_EINVAL);
	CU_ASSERT_PTR_NULL(w);
}

#define FOREIGN_SIZE (128u * 1024)

static uint8_t *foreign_bytes(size_t zero_prefix)
{
	uint8_t *b = malloc(FOREIGN_SIZE);
	size_t i;

	if (b)
		for (i = 0; i < FOREIGN_SIZE; i++)
			b[i] = i < zero_prefix ? 0 : (uint8_t)(i * 131 + 7 + (i >> 9));
	return b;
}

/* Refused, byte for byte untouched. */
static void check_refused(const char *path, const uint8_t *want)
{
	struct wal_error err = { 0 };
	struct wal *w = NULL;
	uint8_t *got;
	size_t len = 0;

	CU_ASSERT_EQUAL(wal_open(path, NULL, &w, &err), WAL_ENOTLOG);
	CU_ASSERT_PTR_NULL(w);
	wal_close(w);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not a moeft log"));
	got = test_slurp(path, &len);
	CU_ASSERT_FATAL(got != NULL);
	CU_ASSERT_EQUAL(len, FOREIGN_SIZE);
	CU_ASSERT(memcmp(got, want, FOREIGN_SIZE) == 0);
	free(got);
}

static void test_foreign_file_refused(void)
{
	uint8_t *data = foreign_bytes(0);
	struct wal_reader *r;
	struct wal_stats st;
	struct wal *w;
	char path[256];

	CU_ASSERT_FATAL(data != NULL);
	CU_ASSERT_EQUAL_FATAL(test_spew(test_path(path, sizeof path, "foreign"), data, FOREIGN_SIZE), 0);
	check_refused(path, data);

	/* WAL_OPEN_FORMAT means it: the file becomes an empty log, same size. */
	w = open_log(path, 0, WAL_OPEN_FORMAT);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.size, FOREIGN_SIZE);
	CU_ASSERT_EQUAL(st.epoch, 1);
	CU_ASSERT_EQUAL(st.next_lsn, 2);
	wal_close(w);
	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->committed_windows, 0);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->damage_count, 0);
	wal_reader_close(r);
	free(data);
	unlink(path);
}

/* Data that starts after a zero first page (an ISO 9660 image, a disk image
 * with an empty boot area) is still data: wal_open must not format it. */
static void test_foreign_data_past_first_page(void)
{
	uint8_t *data = foreign_bytes(WAL_DATA_OFF);
	struct wal *w;
	char path[256];

	CU_ASSERT_FATAL(data != NULL);
	CU_ASSERT_EQUAL_FATAL(test_spew(test_path(path, sizeof path, "iso"), data, FOREIGN_SIZE), 0);
	check_refused(path, data);
	w = open_log(path, 0, WAL_OPEN_FORMAT);
	CU_ASSERT_PTR_NOT_NULL(w);
	wal_close(w);
	free(data);
	unlink(path);
}

/* A format killed before its superblock magic: metadata below the data
 * area, zeros from there on.  The log is taken over, as a blank one is,
 * so a crash mid-format never leaves the preload locked out. */
static void test_interrupted_format_taken_over(void)
{
	uint8_t *data = foreign_bytes(0);
	struct wal_stats st;
	struct wal *w;
	char path[256];

	CU_ASSERT_FATAL(data != NULL);
	memset(data + WAL_DATA_OFF, 0, FOREIGN_SIZE - WAL_DATA_OFF);
	CU_ASSERT_EQUAL_FATAL(test_spew(test_path(path, sizeof path, "halfformat"), data,
					FOREIGN_SIZE), 0);
	w = open_log(path, 0, 0);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.size, FOREIGN_SIZE);
	CU_ASSERT_EQUAL(st.epoch, 1);
	wal_close(w);
	free(data);
	unlink(path);
}

static void test_zero_file_formatted(void)
{
	uint8_t *zero = calloc(1, FOREIGN_SIZE);
	struct wal_stats st;
	struct wal *w;
	char path[256];

	CU_ASSERT_FATAL(zero != NULL);
	CU_ASSERT_EQUAL_FATAL(test_spew(test_path(path, sizeof path, "zeros"), zero, FOREIGN_SIZE), 0);
	w = open_log(path, 0, 0);
	CU_ASSERT_FATAL(w != NULL);
	wal_stats(w, &st);
	CU_ASSERT_EQUAL(st.size, FOREIGN_SIZE);
	CU_ASSERT_EQUAL(st.capacity, FOREIGN_SIZE - WAL_DATA_OFF);
	CU_ASSERT_EQUAL(st.epoch, 1);
	CU_ASSERT_EQUAL(commit(w, NULL, 0).records, 2);
	wal_close(w);
	free(zero);
	unlink(path);
}

static long elapsed_us(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000000L + (t.tv_nsec - t0->tv_nsec) / 1000;
}

/*
 * kill -9 at random instants across the creation of a large log (its
 * pages reserved, then formatted): each kill leaves no file, or a log a
 * reader recovers, never a half-made one.  Both outcomes must occur, or
 * the kills missed the creation.
 */
static void test_killed_creating(void)
{
	const uint64_t size = 256 * MiB;
	struct wal_reader *r;
	struct timespec t0;
	int none = 0, logs = 0, status;
	char path[256];
	long span;
	pid_t pid;

	test_path(path, sizeof path, "killed-creating");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	wal_close(open_log(path, size, WAL_OPEN_CREATE));
	span = elapsed_us(&t0) + 1;
	unlink(path);
	srand((unsigned)getpid());
	for (int i = 0; i < 40; i++) {
		pid = fork();
		CU_ASSERT_FATAL(pid >= 0);
		if (pid == 0)
			_exit(open_log(path, size, WAL_OPEN_CREATE) ? 0 : 1);
		usleep((useconds_t)(rand() % (2 * span)));
		kill(pid, SIGKILL);
		CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
		if (access(path, F_OK) != 0) {
			none++;
			continue;
		}
		r = read_log(path);
		CU_ASSERT_PTR_NOT_NULL(r);
		wal_reader_close(r);
		logs++;
		unlink(path);
	}
	CU_ASSERT(none > 0);
	CU_ASSERT(logs > 0);
}

static void test_wrong_numa_node(void)
{
	struct wal_options opt;
	struct wal_error err = { 0 };
	struct wal *w = NULL;
	char path[256];

	if (numa_available() < 0) {
		printf("[skipped: no NUMA] ");
		return;
	}
	wal_options_init(&opt);
	opt.size = MiB;
	opt.numa_node = numa_max_node() + 1;
	CU_ASSERT_EQUAL(wal_open(test_path(path, sizeof path, "numa"), &opt, &w, &err), WAL_ENUMA);
	CU_ASSERT_PTR_NULL(w);
	CU_ASSERT_EQUAL(err.code, WAL_ENUMA);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
	CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
}

/* ---- concurrent appenders and committer -------------------------------- */

#define PER_THREAD 20000u
#define MAX_THREADS 8u

struct mt {
	struct wal *w;
	pthread_barrier_t start;
	unsigned nthreads;
	unsigned done;          /* producers finished (atomic) */
	unsigned append_errors; /* atomic */
	unsigned commit_errors; /* committer thread only */
	uint64_t commits;
};

struct producer {
	struct mt *mt;
	uint32_t tid;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	uint8_t buf[8];
	uint32_t seq;

	put32(buf, p->tid);
	pthread_barrier_wait(&p->mt->start);
	for (seq = 0; seq < PER_THREAD; seq++) {
		put32(buf + 4, seq);
		if (wal_append(p->mt->w, WAL_REC_USER, buf, sizeof buf) <= 0)
			__atomic_add_fetch(&p->mt->append_errors, 1, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&p->mt->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *commit_loop(void *arg)
{
	struct mt *mt = arg;
	struct wal_commit_info info;
	const struct timespec ms = { 0, 1000000 };

	pthread_barrier_wait(&mt->start);
	do {
		if (wal_commit(mt->w, NULL, 0, &info) != 0 || info.window != mt->commits)
			mt->commit_errors++;
		mt->commits++;
		nanosleep(&ms, NULL);
	} while (__atomic_load_n(&mt->done, __ATOMIC_ACQUIRE) < mt->nthreads);
	return NULL;
}

/* Every (thread, seq) once, each thread's seqs in LSN order, LSNs
 * contiguous, and each window holding exactly the records it claims. */
static void check_threads(const struct wal_reader *r, unsigned nthreads)
{
	uint32_t next[MAX_THREADS] = { 0 };
	size_t nwin, wi = 0;
	const struct wal_window *win = wal_reader_windows(r, &nwin);
	struct wal_iter it;
	struct wal_record rec;
	uint64_t lsn = 0, users = 0, bad = 0;
	uint32_t in_window = 0;
	unsigned t;

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		if (rec.lsn != ++lsn || wi >= nwin || rec.window != win[wi].id || rec.index != in_window)
			bad++;
		in_window++;
		if (rec.type == WAL_REC_WINDOW) {
			if (wi < nwin && in_window != win[wi].records)
				bad++;
			wi++;
			in_window = 0;
		}
		if (rec.type != WAL_REC_USER)
			continue;
		users++;
		t = get32(rec.payload);
		if (rec.len != 8 || t >= nthreads || get32(rec.payload + 4) != next[t]++)
			bad++;
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(wi, nwin);
	CU_ASSERT_EQUAL(in_window, 0);
	CU_ASSERT_EQUAL(users, (uint64_t)nthreads * PER_THREAD);
	for (t = 0; t < nthreads; t++)
		CU_ASSERT_EQUAL(next[t], PER_THREAD);
	CU_ASSERT_EQUAL(lsn, wal_reader_recovery(r)->last_committed_lsn);
}

static void run_threads(unsigned nthreads)
{
	pthread_t th[MAX_THREADS], committer;
	struct producer prod[MAX_THREADS];
	struct mt mt = { .nthreads = nthreads };
	struct wal_commit_info last;
	const struct wal_recovery *rv;
	struct wal_reader *r;
	char path[256];
	unsigned t;

	mt.w = open_log(test_path(path, sizeof path, "threads"), 32 * MiB, WAL_OPEN_CREATE);
	CU_ASSERT_FATAL(mt.w != NULL);
	CU_ASSERT_EQUAL_FATAL(pthread_barrier_init(&mt.start, NULL, nthreads + 1), 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&committer, NULL, commit_loop, &mt), 0);
	for (t = 0; t < nthreads; t++) {
		prod[t] = (struct producer){ .mt = &mt, .tid = t };
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[t], NULL, produce, &prod[t]), 0);
	}
	for (t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	pthread_join(committer, NULL);
	pthread_barrier_destroy(&mt.start);
	last = commit(mt.w, NULL, 0);
	CU_ASSERT_EQUAL(last.window, mt.commits);
	CU_ASSERT_EQUAL(mt.append_errors, 0);
	CU_ASSERT_EQUAL(mt.commit_errors, 0);
	CU_ASSERT(mt.commits > 0);
	wal_close(mt.w);

	r = read_log(path);
	CU_ASSERT_FATAL(r != NULL);
	rv = wal_reader_recovery(r);
	CU_ASSERT_EQUAL(rv->damage_count, 0);
	CU_ASSERT_EQUAL(rv->rec_count[WAL_REC_PAD], 0);
	CU_ASSERT_EQUAL(rv->committed_windows, mt.commits + 1);
	CU_ASSERT_EQUAL(rv->last_committed_lsn, last.lsn);
	check_threads(r, nthreads);
	wal_reader_close(r);
	unlink(path);
}

static void test_threads_4(void)
{
	run_threads(4);
}

static void test_threads_8(void)
{
	run_threads(8);
}

static CU_TestInfo writer_tests[] = {
	{ "reopen starts a new epoch", test_reopen_new_epoch },
	{ "commit info", test_commit_info },
	{ "crash record from a signal handler", test_append_crash },
	{ "a clean end: EXIT, then nothing", test_end },
	{ "append argument checks", test_append_rejects },
	{ "record larger than half the ring", test_append_too_big },
	{ "full log keeps its last commit", test_full_log },
	{ "commit after full, then reclaim", test_full_then_commit_reclaims },
	{ "ring wrap and reuse", test_ring_wrap },
	{ "checkpoint moves the tail, durably", test_checkpoint },
	{ "stats", test_stats },
	{ "uncommitted records dropped, LSNs reused", test_uncommitted_dropped },
	{ "dropped tail erased by the next writer", test_dropped_tail_erased },
	CU_TEST_INFO_NULL
};

static CU_TestInfo open_tests[] = {
	{ "second writer is busy", test_second_writer_busy },
	{ "missing directory, empty path", test_bad_path },
	{ "foreign file refused, formatted on request", test_foreign_file_refused },
	{ "foreign data past a zero first page refused", test_foreign_data_past_first_page },
	{ "an interrupted format is taken over", test_interrupted_format_taken_over },
	{ "file of zeros formatted", test_zero_file_formatted },
	{ "NUMA node that does not exist", test_wrong_numa_node },
	{ "killed while creating: no log or a whole one", test_killed_creating },
	CU_TEST_INFO_NULL
};

static CU_TestInfo thread_tests[] = {
	{ "4 appenders and a committer", test_threads_4 },
	{ "8 appenders and a committer", test_threads_8 },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "writer", .pTests = writer_tests },
	{ .pName = "open", .pTests = open_tests },
	{ .pName = "threads", .pTests = thread_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}
