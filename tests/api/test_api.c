/*
 * test_api.c - include/moeft.h as an adapter sees it: libmoeft.so opened
 * with dlopen (MOEFT_TEST_LIB), its functions found by name, in child
 * processes with their own MOEFT_* environment: versions, instrumenting
 * with a good configuration (the log is created), off with MOEFT_DISABLE
 * and with a bad variable (no log), off in a child of fork().
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moeft.h"
#include "testutil.h"

static char dir[64];

struct api {
	int (*api_version)(void);
	const char *(*version)(void);
	int (*instrumenting)(void);
};

/* In a child: the library's functions, or exit 90. */
static struct api open_api(void)
{
	void *h = dlopen(getenv("MOEFT_TEST_LIB"), RTLD_NOW | RTLD_LOCAL);
	struct api a;
	void *p[3];

	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		_exit(90);
	}
	p[0] = dlsym(h, "moeft_api_version");
	p[1] = dlsym(h, "moeft_version");
	p[2] = dlsym(h, "moeft_instrumenting");
	if (!p[0] || !p[1] || !p[2])
		_exit(91);
	memcpy(&a.api_version, &p[0], sizeof p[0]);
	memcpy(&a.version, &p[1], sizeof p[1]);
	memcpy(&a.instrumenting, &p[2], sizeof p[2]);
	return a;
}

/* Run fn in a child with the MOEFT_* variables of env (NAME=VALUE, NULL
 * ended) and no others; its exit status. */
static int in_child(const char *const *env, int (*fn)(void))
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		unsetenv("MOEFT_WAL");
		unsetenv("MOEFT_LOG");
		for (; *env; env++)
			putenv((char *)*env);
		_exit(fn());
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static int versions(void)
{
	struct api a = open_api();

	return a.api_version() == MOEFT_API_VERSION && !strcmp(a.version(), MOEFT_TEST_RELEASE) ?
	       0 : 1;
}

/* instrumenting() as a number, asked twice (the answer stays). */
static int instrumenting(void)
{
	struct api a = open_api();
	int first = a.instrumenting();

	return a.instrumenting() == first ? first : 2;
}

/* 0 when the parent instruments and its fork child does not. */
static int forked(void)
{
	struct api a = open_api();
	int st;
	pid_t pid;

	if (a.instrumenting() != 1)
		return 1;
	if ((pid = fork()) == 0)
		_exit(a.instrumenting() == 0 ? 0 : 1);
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return 2;
	return a.instrumenting() == 1 ? 0 : 3;
}

static int exists(const char *name)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return stat(path, &st) == 0;
}

static void test_versions(void)
{
	static const char *const env[] = { "MOEFT_DISABLE=1", NULL };

	CU_ASSERT_EQUAL(in_child(env, versions), 0);
}

static void test_instrumenting(void)
{
	static char wal[128];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=16M", NULL };

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s/good.wal", dir);
	CU_ASSERT_EQUAL(in_child(env, instrumenting), 1);
	CU_ASSERT(exists("good.wal"));
}

static void test_off(void)
{
	static char wal[128];
	const char *disabled[] = { wal, "MOEFT_DISABLE=1", NULL };
	const char *bad[] = { wal, "MOEFT_WINDOW=0", NULL };

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s/off.wal", dir);
	CU_ASSERT_EQUAL(in_child(disabled, instrumenting), 0);
	CU_ASSERT_EQUAL(in_child(bad, instrumenting), 0);
	CU_ASSERT(!exists("off.wal"));
}

static void test_fork(void)
{
	static char wal[128];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=16M", NULL };

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s/fork.wal", dir);
	CU_ASSERT_EQUAL(in_child(env, forked), 0);
}

static int setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/moeft-api-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void)
{
	char cmd[96];

	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "versions", test_versions },
		{ "instrumenting", test_instrumenting },
		{ "off", test_off },
		{ "fork", test_fork },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "api", setup, teardown, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
