/*
 * test_api.c - include/moeft.h as an adapter sees it, in child processes
 * (this program run again with --child) with their own MOEFT_* variables
 * and nothing else of the caller's: libmoeft.so either preloaded (the API
 * found with dlsym(RTLD_DEFAULT)) or opened with dlopen (MOEFT_TEST_LIB).
 * Versions; instrumenting when preloaded with a good configuration (the
 * log is created), not when merely dlopen'ed (no log either), off with
 * MOEFT_DISABLE and with a bad variable (no log), off in a child of fork().
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

extern char **environ;

static char dir[64];

struct api {
	int (*api_version)(void);
	const char *(*version)(void);
	int (*instrumenting)(void);
};

/* In a child: the library's functions, from the global scope when it was
 * preloaded, else from dlopen; or exit 90. */
static struct api open_api(void)
{
	int preloaded = getenv("LD_PRELOAD") != NULL;
	void *h = preloaded ? RTLD_DEFAULT : dlopen(getenv("MOEFT_TEST_LIB"), RTLD_NOW | RTLD_LOCAL);
	struct api a;
	void *p[3];

	if (!preloaded && !h)
		_exit(90);
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

static int versions(void)
{
	struct api a = open_api();

	return a.api_version() == MOEFT_API_VERSION && !strcmp(a.version(), MOEFT_TEST_RELEASE) ?
	       0 : 1;
}

/* instrumenting() as the exit status, asked twice (the answer stays). */
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

static const struct {
	const char *name;
	int (*fn)(void);
} modes[] = { { "versions", versions }, { "instrumenting", instrumenting },
	      { "forked", forked } };

/*
 * Run mode in a child: this program again, with the caller's environment
 * less its MOEFT_* and LD_PRELOAD, plus MOEFT_TEST_LIB, the variables of
 * vars (NAME=VALUE, NULL ended) and, if preload, LD_PRELOAD=the library.
 * Its exit status, or -1.
 */
static int in_child(const char *mode, int preload, const char *const *vars)
{
	char *env[256], pre[600], lib[600];
	char *argv[] = { "test_api", "--child", (char *)mode, NULL };
	size_t n = 0;
	int st;
	pid_t pid;

	snprintf(lib, sizeof lib, "MOEFT_TEST_LIB=%s", getenv("MOEFT_TEST_LIB"));
	snprintf(pre, sizeof pre, "LD_PRELOAD=%s", getenv("MOEFT_TEST_LIB"));
	for (char **e = environ; *e && n < 200; e++)
		if (strncmp(*e, "MOEFT_", 6) && strncmp(*e, "LD_PRELOAD=", 11))
			env[n++] = *e;
	env[n++] = lib;
	if (preload)
		env[n++] = pre;
	for (; *vars; vars++)
		env[n++] = (char *)*vars;
	env[n] = NULL;
	if ((pid = fork()) == 0) {
		execve("/proc/self/exe", argv, env);
		_exit(92);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static int exists(const char *name)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return stat(path, &st) == 0;
}

/* "MOEFT_WAL=DIR/name" in buf. */
static const char *wal_var(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "MOEFT_WAL=%s/%s", dir, name);
	return buf;
}

static void test_versions(void)
{
	static const char *const none[] = { NULL }, *const off[] = { "MOEFT_DISABLE=1", NULL };

	CU_ASSERT_EQUAL(in_child("versions", 1, off), 0);
	CU_ASSERT_EQUAL(in_child("versions", 0, none), 0);
}

static void test_instrumenting(void)
{
	char wal[128];
	const char *vars[] = { wal_var(wal, sizeof wal, "good.wal"), "MOEFT_WAL_SIZE=16M", NULL };

	CU_ASSERT_EQUAL(in_child("instrumenting", 1, vars), 1);
	CU_ASSERT(exists("good.wal"));
}

/* dlopen'ed, libmoeft.so sees no CUDA call: not instrumenting, and it
 * must not take a log some preloaded process of the server may want. */
static void test_dlopen(void)
{
	char wal[128];
	const char *vars[] = { wal_var(wal, sizeof wal, "local.wal"), "MOEFT_WAL_SIZE=16M", NULL };

	CU_ASSERT_EQUAL(in_child("instrumenting", 0, vars), 0);
	CU_ASSERT(!exists("local.wal"));
}

static void test_off(void)
{
	char wal[128];
	const char *disabled[] = { wal_var(wal, sizeof wal, "off.wal"), "MOEFT_DISABLE=1", NULL };
	const char *bad[] = { wal, "MOEFT_WINDOW=0", NULL };

	CU_ASSERT_EQUAL(in_child("instrumenting", 1, disabled), 0);
	CU_ASSERT_EQUAL(in_child("instrumenting", 1, bad), 0);
	CU_ASSERT(!exists("off.wal"));
}

static void test_fork(void)
{
	char wal[128];
	const char *vars[] = { wal_var(wal, sizeof wal, "fork.wal"), "MOEFT_WAL_SIZE=16M", NULL };

	CU_ASSERT_EQUAL(in_child("forked", 1, vars), 0);
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

int main(int argc, char **argv)
{
	CU_TestInfo tests[] = {
		{ "versions", test_versions },
		{ "instrumenting", test_instrumenting },
		{ "dlopen", test_dlopen },
		{ "off", test_off },
		{ "fork", test_fork },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "api", setup, teardown, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	if (argc == 3 && !strcmp(argv[1], "--child")) {
		for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
			if (!strcmp(argv[2], modes[i].name))
				return modes[i].fn();
		return 93;
	}
	return cu_run(suites);
}
