/*
 * test_held.c - held.c: whether a log holds the state of a run that did not
 * exit, over a log's life (no window, a decode window of another process,
 * a clean end, a later epoch's window, an end with no window of its own, an
 * engine adapter's window, which a decode window outranks), and
 * held_read_path on what a path may be: missing, a FIFO, a file others may
 * write, a log a writer holds, a damaged log.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "held.h"
#include "record.h"
#include "testutil.h"
#include "wal.h"

#define MiB (UINT64_C(1) << 20)

static struct wal *open_log(const char *path)
{
	struct wal_options opt;
	struct wal_error err;
	struct wal *w = NULL;

	wal_options_init(&opt);
	opt.size = MiB;
	CU_ASSERT_EQUAL(wal_open(path, &opt, &w, &err), 0);
	return w;
}

/* Commit a window of steps first..first+steps-1 (steps 0: allocation
 * events), with `flags` (WINDOW_REQUESTS: an adapter's). */
static void window(struct wal *w, uint64_t first, uint32_t steps, uint32_t flags)
{
	uint8_t extra[WINDOW_STEPS_SIZE], payload[8] = { 0 };
	struct rec_window_steps s = { .first_step = first, .steps = steps, .flags = flags };

	rec_window_steps_encode(extra, &s);
	CU_ASSERT(wal_append(w, WAL_REC_USER, payload, sizeof payload) > 0);
	CU_ASSERT_EQUAL(wal_commit(w, extra, sizeof extra, NULL), 0);
}

static void end(struct wal *w)
{
	uint8_t p[EXIT_PAYLOAD_SIZE];

	rec_exit_encode(p, &(struct rec_exit){ .pid = 7 });
	CU_ASSERT_EQUAL(wal_end(w, p, sizeof p), 0);
}

/* held_read_path's answer (1 or 0) and what it found. */
static int held_at(const char *path, struct held_state *h)
{
	return held_read_path(path, h);
}

static void expect_pid(const char *path, int held, int exited, uint32_t epoch,
		       uint64_t last_step, pid_t pid)
{
	struct held_state h;

	CU_ASSERT_EQUAL_FATAL(held_at(path, &h), 1);
	CU_ASSERT_EQUAL(h.held, held);
	CU_ASSERT_EQUAL(h.exited, exited);
	CU_ASSERT_EQUAL(h.epoch, epoch);
	if (epoch) {
		CU_ASSERT_EQUAL(h.pid, (uint32_t)pid);
		CU_ASSERT_EQUAL(h.last_step, last_step);
	}
}

static void expect(const char *path, int held, int exited, uint32_t epoch, uint64_t last_step)
{
	expect_pid(path, held, exited, epoch, last_step, getpid());
}

static void test_life(void)
{
	struct held_state h;
	struct wal *w;
	char path[256];
	int status;
	pid_t pid;

	w = open_log(test_path(path, sizeof path, "life"));
	CU_ASSERT_FATAL(w != NULL);
	window(w, 0, 0, 0);		/* allocation events only */
	wal_close(w);
	expect(path, 0, 0, 0, 0);

	pid = fork();			/* epoch 2, another process: a window, killed */
	if (pid == 0) {
		if (!(w = open_log(path)))
			_exit(1);
		window(w, 0, 16, 0);
		window(w, 0, 0, 0);
		_exit(0);
	}
	CU_ASSERT_FATAL(pid > 0 && waitpid(pid, &status, 0) == pid && status == 0);
	expect_pid(path, 1, 0, 2, 15, pid);

	w = open_log(path);		/* epoch 3: its restore, to a clean end */
	window(w, 16, 16, 0);
	end(w);
	wal_close(w);
	expect(path, 0, 1, 3, 31);

	w = open_log(path);		/* epoch 4: a window, then a crash */
	window(w, 0, 16, 0);
	wal_close(w);
	expect(path, 1, 0, 4, 15);
	CU_ASSERT_EQUAL(held_at(path, &h), 1);
	CU_ASSERT_EQUAL(h.window, 5);	/* 0-2 of epochs 1-2, 3 and its EXIT 4 of epoch 3 */

	w = open_log(path);		/* epoch 5: a restore that ends before a window */
	end(w);
	wal_close(w);
	expect(path, 0, 1, 4, 15);

	w = open_log(path);		/* epoch 6: an engine adapter's window, killed: */
	window(w, 40, 8, WINDOW_REQUESTS);	/* a restore takes epoch 4's decode */
	wal_close(w);			/* window still, which is not held */
	expect(path, 0, 0, 4, 15);

	w = open_log(path);		/* epoch 7: a decode window outranks a newer */
	window(w, 64, 16, 0);		/* adapter's, as in a restore */
	window(w, 80, 16, WINDOW_REQUESTS);
	wal_close(w);
	expect(path, 1, 0, 7, 79);
	unlink(path);

	w = open_log(path);		/* a scheduler's log: adapter's windows only */
	window(w, 40, 8, WINDOW_REQUESTS);
	wal_close(w);
	expect(path, 1, 0, 1, 47);
	unlink(path);
}

/* What wal_open must judge is left to it: held_read_path says 0, at once. */
static void test_paths(void)
{
	char path[256], fifo[256], open_file[256];
	struct held_state h;
	struct wal *w;

	memset(&h, 0xff, sizeof h);
	CU_ASSERT_EQUAL(held_at(test_path(path, sizeof path, "missing"), &h), 0);
	CU_ASSERT_EQUAL(h.held, 0);

	CU_ASSERT_FATAL(mkfifo(test_path(fifo, sizeof fifo, "fifo"), 0600) == 0);
	CU_ASSERT_EQUAL(held_at(fifo, &h), 0);	/* returns: no open blocks */
	unlink(fifo);

	w = open_log(test_path(open_file, sizeof open_file, "others"));
	CU_ASSERT_FATAL(w != NULL);
	window(w, 0, 16, 0);
	CU_ASSERT_EQUAL(held_at(open_file, &h), 0);	/* its writer holds it */
	wal_close(w);
	CU_ASSERT_EQUAL(held_at(open_file, &h), 1);
	CU_ASSERT_EQUAL(h.held, 1);
	CU_ASSERT_FATAL(chmod(open_file, 0666) == 0);
	CU_ASSERT_EQUAL(held_at(open_file, &h), 0);	/* unsafe: wal_open refuses it */
	unlink(open_file);
}

/* A log damaged inside its committed part is wal_open's to judge. */
static void test_damaged(void)
{
	struct held_state h;
	struct wal *w;
	char path[256];
	uint8_t *img;
	size_t len;

	w = open_log(test_path(path, sizeof path, "damaged"));
	CU_ASSERT_FATAL(w != NULL);
	window(w, 0, 16, 0);
	window(w, 16, 16, 0);
	wal_close(w);
	CU_ASSERT_EQUAL(held_at(path, &h), 1);
	CU_ASSERT_FATAL((img = test_slurp(path, &len)) != NULL && len > 4200);
	img[4096 + 40] ^= 0x55;		/* inside the first record */
	CU_ASSERT_FATAL(test_spew(path, img, len) == 0);
	free(img);
	memset(&h, 0xff, sizeof h);
	CU_ASSERT_EQUAL(held_at(path, &h), 0);
	CU_ASSERT_EQUAL(h.held, 0);
	unlink(path);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "a log's life", test_life },
		{ "paths left to wal_open", test_paths },
		{ "a damaged log left to wal_open", test_damaged },
		CU_TEST_INFO_NULL
	};
	CU_SuiteInfo suites[] = {
		{ "held", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL
	};
	return cu_run(suites);
}
