/*
 * test_fork_lock.c - the flock facts preload/start.c's fork rule rests on.
 *
 * A log's writer lock is an flock on the open file description, which a
 * fork()ed child shares through its copy of the descriptor.  The preload's
 * child closes its copy (wal_close): (1) that must leave the parent's lock
 * in place, and (2) a child that kept its copy would keep the log locked
 * after the parent closed it (or died), so restore could not open it.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

#include "testutil.h"
#include "wal.h"

static void options(struct wal_options *opt)
{
	wal_options_init(opt);
	opt->size = 1u << 20;
	opt->flags = WAL_OPEN_CREATE;
}

/* What a fresh writer, in a process of its own, gets: 0 or a status. */
static int open_elsewhere(const char *path)
{
	struct wal_options opt;
	struct wal_error err;
	struct wal *w;
	pid_t pid;
	int st, r;

	options(&opt);
	pid = fork();
	if (pid == 0) {
		r = wal_open(path, &opt, &w, &err);
		_exit(-r);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 99;
	return -WEXITSTATUS(st);
}

static void test_child_close_keeps_lock(void)
{
	struct wal_options opt;
	struct wal_error err;
	struct wal *w;
	char path[256];
	pid_t pid;
	int st;

	test_path(path, sizeof path, "forklock");
	options(&opt);
	CU_ASSERT_FATAL(wal_open(path, &opt, &w, &err) == 0);
	pid = fork();
	if (pid == 0) {
		wal_close(w);          /* what after_fork_child() does */
		_exit(open_elsewhere(path) == WAL_EBUSY ? 0 : 1);
	}
	CU_ASSERT_FATAL(pid > 0);
	CU_ASSERT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT(open_elsewhere(path) == WAL_EBUSY);
	CU_ASSERT(wal_append(w, WAL_REC_USER, "x", 1) > 0);
	wal_close(w);
	CU_ASSERT(open_elsewhere(path) == 0);
	unlink(path);
}

static void test_child_copy_holds_lock(void)
{
	struct wal_options opt;
	struct wal_error err;
	struct wal *w;
	char path[256], c;
	int fds[2], st;
	pid_t pid;

	test_path(path, sizeof path, "forkheld");
	options(&opt);
	CU_ASSERT_FATAL(pipe(fds) == 0);
	CU_ASSERT_FATAL(wal_open(path, &opt, &w, &err) == 0);
	pid = fork();
	if (pid == 0) {
		close(fds[1]);
		(void)!read(fds[0], &c, 1);   /* keeps its copy until told */
		_exit(0);
	}
	CU_ASSERT_FATAL(pid > 0);
	close(fds[0]);
	wal_close(w);
	CU_ASSERT(open_elsewhere(path) == WAL_EBUSY);
	close(fds[1]);
	CU_ASSERT(waitpid(pid, &st, 0) == pid);
	CU_ASSERT(open_elsewhere(path) == 0);
	unlink(path);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "child close keeps the parent's lock", test_child_close_keeps_lock },
		{ "a child's copy holds the lock", test_child_copy_holds_lock },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "fork_lock", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
