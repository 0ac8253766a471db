/*
 * test_preload.c - libmoeft.so under real programs: silence where CUDA is
 * never used, exact event counts (summary line and log) for every hooked
 * path of probe.c and for runtime-to-driver nesting (nest.c over
 * fakert.c), unchanged program output, fail-open configurations, fork,
 * and the test serving program.
 *
 * The probe runs twice: linked to the fixture's libcudart.so.13 and to its
 * libcudart.so.12 (probe12), with the same counts expected.
 *
 * Paths come from the environment (tests/shim/meson.build): SHIMTEST_LIB,
 * SHIMTEST_PROBE, SHIMTEST_PROBE12, SHIMTEST_CUDART12 (the fixture's
 * libcudart.so.12), SHIMTEST_NEST, SHIMTEST_NEST_STATIC, SHIMTEST_FIXTURE_DIR,
 * and SHIMTEST_SERVE
 * where tests/serve built its program.  Children get this
 * environment without any MOEFT_ variable or LD_PRELOAD, plus what each
 * test sets.
 */
#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "nest.h"
#include "probe.h"
#include "record.h"
#include "testutil.h"
#include "wal.h"

extern char **environ;

struct run {
	int status;         /* exit status, 128 + signal, or -1 */
	char *out, *err;
};

static const char *lib, *probe, *probe12, *cudart12, *nest, *nest_static, *fixture_dir, *serve;
static const char *privuser, *privcall;
static char *baseline;   /* probe run's stdout without the preload */

static char *slurp_fd(int fd)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;

	lseek(fd, 0, SEEK_SET);
	while (buf && (n = read(fd, buf + len, cap - len - 1)) > 0)
		if ((len += (size_t)n) + 1 == cap)
			buf = realloc(buf, cap *= 2);
	if (buf)
		buf[len] = '\0';
	close(fd);
	return buf;
}

/* Run argv with `env` (NULL-terminated "NAME=value") added; with the
 * preload when preload is set. */
static struct run run(const char *const *argv, const char *const *env, int preload)
{
	char out_path[] = "/tmp/moeft-shimtest-XXXXXX", err_path[] = "/tmp/moeft-shimtest-XXXXXX";
	char **envp, ldpath[4096], ldpre[4096];
	posix_spawn_file_actions_t fa;
	struct run r = { -1, NULL, NULL };
	size_t n = 0, i;
	int fo, fe, st;
	pid_t pid;

	for (i = 0; environ[i]; i++)
		;
	for (n = 0; env && env[n]; n++)
		;
	envp = calloc(i + n + 3, sizeof *envp);
	n = 0;
	for (i = 0; environ[i]; i++)
		if (strncmp(environ[i], "MOEFT_", 6) != 0 && strncmp(environ[i], "LD_PRELOAD=", 11) != 0 &&
		    strncmp(environ[i], "LD_LIBRARY_PATH=", 16) != 0)
			envp[n++] = environ[i];
	snprintf(ldpath, sizeof ldpath, "LD_LIBRARY_PATH=%s", fixture_dir);
	envp[n++] = ldpath;
	if (preload) {
		snprintf(ldpre, sizeof ldpre, "LD_PRELOAD=%s", lib);
		envp[n++] = ldpre;
	}
	for (i = 0; env && env[i]; i++)
		envp[n++] = (char *)env[i];
	envp[n] = NULL;

	fo = mkstemp(out_path);
	fe = mkstemp(err_path);
	unlink(out_path);
	unlink(err_path);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fo, 1);
	posix_spawn_file_actions_adddup2(&fa, fe, 2);
	if (fo >= 0 && fe >= 0 &&
	    posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, envp) == 0 &&
	    waitpid(pid, &st, 0) == pid)
		r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	posix_spawn_file_actions_destroy(&fa);
	r.out = slurp_fd(fo);
	r.err = slurp_fd(fe);
	free(envp);
	return r;
}

static void done(struct run *r)
{
	free(r->out);
	free(r->err);
}

static unsigned lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* The value of key=N on the summary line in err, or -1. */
static long long summary_value(const char *err, const char *key)
{
	const char *line = strstr(err, "moeft: summary:"), *end, *p;
	char pat[64];

	if (!line)
		return -1;
	end = strchr(line, '\n');
	snprintf(pat, sizeof pat, " %s=", key);
	p = strstr(line, pat);
	if (!p || (end && p > end))
		return -1;
	return strtoll(p + strlen(pat), NULL, 10);
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* ---- the log ------------------------------------------------------------ */

#define MAX_RECS 64

struct logged {
	unsigned allocs, frees, bad;
	unsigned kv_pools;	/* ALLOC records again, with role KV pool */
	unsigned api[ALLOC_API_COUNT];
	struct rec_alloc a[MAX_RECS];
	int freed[MAX_RECS];
};

/* Read every ALLOC and FREE record; bad counts an ALLOC repeating an
 * alloc_id other than to make it a KV pool, a FREE of nothing allocated, a
 * second FREE, or a payload that does not decode. */
static int read_log(const char *path, struct logged *l)
{
	struct wal_reader *r;
	struct wal_error err;
	struct wal_record rec;
	struct wal_iter it;
	unsigned i;

	memset(l, 0, sizeof *l);
	if (wal_reader_open_path(path, &r, &err) != 0)
		return -1;
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		struct rec_alloc a;
		struct rec_free f;

		if (rec.type == WAL_REC_ALLOC) {
			if (rec_alloc_decode(rec.payload, rec.len, &a) < 0 || l->allocs == MAX_RECS ||
			    a.api >= ALLOC_API_COUNT) {
				l->bad++;
				continue;
			}
			/* The same id again: its role changed (a KV pool found). */
			for (i = 0; i < l->allocs && l->a[i].alloc_id != a.alloc_id; i++)
				;
			if (i < l->allocs) {
				l->bad += a.base != l->a[i].base || a.size != l->a[i].size ||
					  a.fingerprint != l->a[i].fingerprint ||
					  a.ordinal != l->a[i].ordinal || a.api != l->a[i].api ||
					  a.role != ALLOC_ROLE_KV_POOL || l->a[i].role == a.role;
				l->a[i].role = a.role;
				l->kv_pools++;
				continue;
			}
			l->api[a.api]++;
			l->a[l->allocs++] = a;
		} else if (rec.type == WAL_REC_FREE) {
			if (rec_free_decode(rec.payload, rec.len, &f) < 0) {
				l->bad++;
				continue;
			}
			for (i = 0; i < l->allocs; i++)
				if (l->a[i].alloc_id == f.alloc_id && l->a[i].base == f.base)
					break;
			if (i == l->allocs || l->freed[i]++)
				l->bad++;
			l->frees++;
		}
	}
	wal_reader_close(r);
	return 0;
}

/* The ALLOC record of the allocation of `size` bytes, or NULL. */
static const struct rec_alloc *logged(const struct logged *l, uint64_t size)
{
	unsigned i;

	for (i = 0; i < l->allocs; i++)
		if (l->a[i].size == size)
			return &l->a[i];
	return NULL;
}

/* ---- tests -------------------------------------------------------------- */

static void test_baseline(void)
{
	const char *argv[] = { probe, "run", NULL };
	struct run r = run(argv, NULL, 0);

	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.err, "");
	CU_ASSERT(strstr(r.out, "routing launches: 9\n") != NULL);
	baseline = r.out;
	free(r.err);
}

/* No CUDA call: nothing initialised, nothing printed, no log, whatever
 * the configuration says. */
/* A sanitizer build of libmoeft.so needs the sanitizer runtime in the
 * executable, which /bin/true and python3 lack: there the check runs in the
 * plain build only. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

static void test_silent(void)
{
	const char *truth[] = { "/bin/true", NULL }, *py[] = { "python3", "-c", "pass", NULL };
	char path[256], wal[300], window[] = "MOEFT_WINDOW=0";
	const char *env[] = { wal, "MOEFT_LOG=debug", NULL, NULL };
	struct run r;

#ifdef SANITIZED
	fprintf(stderr, "(sanitizer build: foreign executables checked in the plain build) ");
	return;
#endif
	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "silent"));
	r = run(truth, env, 1);
	CU_ASSERT(r.status == 0 && !*r.out && !*r.err);
	done(&r);
	env[2] = window;
	r = run(truth, env, 1);
	CU_ASSERT(r.status == 0 && !*r.out && !*r.err);
	done(&r);
	env[2] = NULL;
	r = run(py, env, 1);
	if (r.status == 127) {
		fprintf(stderr, "(python3 not found: skipped) ");
	} else {
		CU_ASSERT(r.status == 0 && !*r.out && !*r.err);
	}
	done(&r);
	CU_ASSERT(!exists(path));
}

/* Every path of probe `prog` once: the counts of probe.h, in the summary
 * and in the log. */
static void events_of(const char *prog)
{
	const char *argv[] = { prog, "run", NULL };
	char path[256], wal[300];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=4M", "MOEFT_LOG=info", NULL };
	struct logged l, again;
	struct run r;
	unsigned i;

	CU_ASSERT_FATAL(baseline != NULL);
	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "events"));
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.out, baseline);
	CU_ASSERT_EQUAL(lines(r.err), 2);     /* "instrumenting", "summary" */
	CU_ASSERT(strncmp(r.err, "moeft: instrumenting", 20) == 0);
	CU_ASSERT_EQUAL(summary_value(r.err, "allocations"), PROBE_ALLOCS);
	CU_ASSERT_EQUAL(summary_value(r.err, "frees"), PROBE_ALLOCS);
	CU_ASSERT_EQUAL(summary_value(r.err, "live"), 0);
	/* A window per allocation event; too few steps for a decode window. */
	CU_ASSERT_EQUAL(summary_value(r.err, "windows"), 2 * PROBE_ALLOCS);
	CU_ASSERT_EQUAL(summary_value(r.err, "decode_windows"), 0);
	CU_ASSERT_EQUAL(summary_value(r.err, "launches"),
			PROBE_ROUTING_LAUNCHES + PROBE_OTHER_LAUNCHES);
	CU_ASSERT_EQUAL(summary_value(r.err, "graph_launches"), PROBE_GRAPH_LAUNCHES);
	CU_ASSERT(strstr(r.err, " captures=1/1 ") != NULL);
	CU_ASSERT_EQUAL(summary_value(r.err, "kernels"), PROBE_KERNELS);
	CU_ASSERT_EQUAL(summary_value(r.err, "named"), PROBE_KERNELS);
	CU_ASSERT_EQUAL(summary_value(r.err, "matched"), PROBE_MATCHED);
	CU_ASSERT_EQUAL(summary_value(r.err, "rule_hits"), PROBE_ROUTING_LAUNCHES);
	CU_ASSERT(strstr(r.err, "(vllm:") != NULL);
	/* The graph's routing launch is captured on each replay, not at
	 * its capture. */
	CU_ASSERT_EQUAL(summary_value(r.err, "captured"),
			PROBE_ROUTING_LAUNCHES - 1 + PROBE_GRAPH_LAUNCHES);
	CU_ASSERT_EQUAL(summary_value(r.err, "gaps"), 0);

	CU_ASSERT_FATAL(read_log(path, &l) == 0);
	CU_ASSERT_EQUAL(l.bad, 0);
	CU_ASSERT_EQUAL(l.allocs, PROBE_ALLOCS);
	CU_ASSERT_EQUAL(l.frees, PROBE_ALLOCS);
	CU_ASSERT_EQUAL(l.api[ALLOC_API_CUDA_MALLOC], 2);
	CU_ASSERT_EQUAL(l.api[ALLOC_API_CU_MEM_ALLOC], 1);
	CU_ASSERT_EQUAL(l.api[ALLOC_API_CUDA_MALLOC_ASYNC], 1);
	CU_ASSERT_EQUAL(l.api[ALLOC_API_CUDA_MALLOC_MANAGED], 1);
	CU_ASSERT_EQUAL(l.api[ALLOC_API_VMM], 1);
	CU_ASSERT(logged(&l, 1 << 20) && logged(&l, 4096) && logged(&l, 2048) &&
		  logged(&l, 8192) && logged(&l, 65536));
	done(&r);
	unlink(path);

	/* Call-site fingerprints: the application's call sites (the two
	 * cudaMalloc calls differ), the same in a second run under ASLR. */
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_FATAL(read_log(path, &again) == 0 && again.allocs == PROBE_ALLOCS);
	for (i = 0; i < l.allocs; i++) {
		const struct rec_alloc *b = logged(&again, l.a[i].size);

		CU_ASSERT(l.a[i].fingerprint != 0);
		CU_ASSERT(b && b->fingerprint == l.a[i].fingerprint);
	}
	CU_ASSERT(logged(&l, 1 << 20) && logged(&l, 4096) &&
		  logged(&l, 1 << 20)->fingerprint != logged(&l, 4096)->fingerprint);
	done(&r);
	unlink(path);
}

static void test_events(void)
{
	events_of(probe);
}

/* A program linked to libcudart.so.12 reaches our 12 twins: the same
 * events, the same output. */
static void test_events_cudart12(void)
{
	events_of(probe12);
}

/* probe check; with a second runtime (libcudart.so.12 opened beside the
 * program's 13), whose allocation is logged like any other. */
static void test_check(void)
{
	const char *argv[] = { probe, "check", cudart12, NULL },
		   *argv12[] = { probe12, "check", NULL };
	char path[256], wal[300];
	const char *env[] = { wal, NULL };
	const struct rec_alloc *a;
	struct logged l;
	struct run r;

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "check"));
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.err, "");
	CU_ASSERT_FATAL(read_log(path, &l) == 0);
	CU_ASSERT_EQUAL(l.bad, 0);
	a = logged(&l, PROBE_RT12_SIZE);
	CU_ASSERT(a && a->api == ALLOC_API_CUDA_MALLOC);
	CU_ASSERT_EQUAL(l.frees, l.allocs);
	done(&r);
	unlink(path);

	r = run(argv12, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.err, "");
	done(&r);
	unlink(path);
}

/* A module linked to a private, renamed copy of the CUDA 12 runtime (a
 * wheel's libcudart-HASH.so.12), loaded as Python loads one (RTLD_LOCAL)
 * with no libcudart.so.12 in the process: its calls bind to our twins,
 * which find that copy through the caller, and are logged. */
static void test_private_runtime(void)
{
	const char *argv[] = { privcall, privuser, NULL };
	char path[256], wal[300];
	const char *env[] = { wal, NULL };
	const struct rec_alloc *a;
	struct logged l;
	struct run r;

	r = run(argv, NULL, 0);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.out, "privcall: 0\n");
	done(&r);

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "private"));
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.out, "privcall: 0\n");
	CU_ASSERT_STRING_EQUAL(r.err, "");
	CU_ASSERT_FATAL(read_log(path, &l) == 0);
	CU_ASSERT_EQUAL(l.bad, 0);
	a = logged(&l, PROBE_PRIVATE_SIZE);
	CU_ASSERT(a && a->api == ALLOC_API_CUDA_MALLOC);
	CU_ASSERT_EQUAL(l.allocs, 1);
	CU_ASSERT_EQUAL(l.frees, 1);
	done(&r);
	unlink(path);
}

/* The nesting program's log at path: NEST_ALLOCS allocations and as many
 * frees, all of one of them through the API `sync`, the one left through
 * `async`, none through any other. */
static void expect_nest_log(const char *path, int sync, int async)
{
	struct logged l;
	unsigned others = 0;

	CU_ASSERT_FATAL(read_log(path, &l) == 0);
	CU_ASSERT_EQUAL(l.bad, 0);
	CU_ASSERT_EQUAL(l.allocs, NEST_ALLOCS);
	CU_ASSERT_EQUAL(l.frees, NEST_ALLOCS);
	CU_ASSERT_EQUAL(l.api[sync], NEST_ALLOCS - 1);
	CU_ASSERT_EQUAL(l.api[async], 1);
	for (int i = 0; i < ALLOC_API_COUNT; i++)
		if (i != sync && i != async)
			others += l.api[i];
	CU_ASSERT_EQUAL(others, 0);
}

/* cudart's driver calls nested in our runtime wrappers: one event per
 * application call, made by the runtime API. */
static void test_nesting(void)
{
	const char *argv[] = { nest, NULL };
	char path[256], wal[300];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=4M", "MOEFT_LOG=info", NULL };
	struct run r;

	r = run(argv, NULL, 0);
	CU_ASSERT(r.status == 0 && !*r.err);
	done(&r);
	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "nest"));
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_EQUAL(summary_value(r.err, "allocations"), NEST_ALLOCS);
	CU_ASSERT_EQUAL(summary_value(r.err, "frees"), NEST_ALLOCS);
	expect_nest_log(path, ALLOC_API_CUDA_MALLOC, ALLOC_API_CUDA_MALLOC_ASYNC);
	done(&r);
	unlink(path);
}

/* The same program with the runtime linked in (nest_static): what a
 * statically linked libcudart looks like to us.  One line says so, and its
 * calls are seen where they reach the driver. */
static void test_static_runtime(void)
{
	const char *argv[] = { nest_static, NULL };
	char path[256], wal[300];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=4M", NULL };
	struct run r;

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "nest-static"));
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.out, "nest: 4 allocations\n");
	CU_ASSERT_EQUAL(lines(r.err), 1);
	CU_ASSERT(strstr(r.err, "no shared CUDA runtime (libcudart.so.13, libcudart.so.12) is "
			 "loaded") != NULL &&
		  strstr(r.err, "seen only through the driver") != NULL);
	expect_nest_log(path, ALLOC_API_CU_MEM_ALLOC, ALLOC_API_CU_MEM_ALLOC_ASYNC);
	done(&r);
	unlink(path);

	/* A shared runtime says nothing of the kind (test_nesting's program). */
	argv[0] = nest;
	r = run(argv, env, 1);
	CU_ASSERT(r.status == 0 && !*r.err);
	done(&r);
	unlink(path);
}

/* A run of probe that must look exactly like the baseline on stdout, exit
 * 0, and print `err_lines` lines on stderr, the first containing `needle`. */
static void fail_open(const char *const *env, const char *path, unsigned err_lines,
		      const char *needle)
{
	const char *argv[] = { probe, "run", NULL };
	struct run r = run(argv, env, 1);

	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.out, baseline);
	CU_ASSERT_EQUAL(lines(r.err), err_lines);
	if (needle)
		CU_ASSERT(strstr(r.err, needle) != NULL);
	CU_ASSERT(!exists(path));
	done(&r);
}

static void test_fail_open(void)
{
	char path[256], wal[300], bad[300], dir[256];
	const char *window[] = { wal, "MOEFT_WINDOW=0", "MOEFT_LOG=info", NULL };
	const char *unwritable[] = { bad, "MOEFT_LOG=info", NULL };
	const char *disabled[] = { wal, "MOEFT_DISABLE=1", "MOEFT_LOG=debug", NULL };
	const char *strict[] = { wal, "MOEFT_WINDOW=0", "MOEFT_STRICT=1", NULL };
	const char *argv[] = { probe, "run", NULL };
	struct run r;

	CU_ASSERT_FATAL(baseline != NULL);
	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "failopen"));
	fail_open(window, path, 1, "MOEFT_WINDOW='0'");
	test_path(dir, sizeof dir, "nodir");
	snprintf(bad, sizeof bad, "MOEFT_WAL=%s/log.wal", dir);
	fail_open(unwritable, dir, 1, "cannot open the log");
	fail_open(disabled, path, 0, NULL);

	r = run(argv, strict, 1);
	CU_ASSERT_EQUAL(r.status, 1);
	CU_ASSERT_EQUAL(lines(r.err), 1);
	CU_ASSERT(strstr(r.err, "MOEFT_WINDOW") && strstr(r.err, "MOEFT_STRICT"));
	done(&r);
}

/* The child of a fork must not write the parent's log. */
static void test_fork(void)
{
	const char *argv[] = { probe, "fork", NULL };
	char path[256], wal[300];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=4M", "MOEFT_LOG=info", NULL };
	struct logged l;
	struct run r;

	snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "fork"));
	r = run(argv, env, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_STRING_EQUAL(r.out, "child exit status: 0\n");
	CU_ASSERT_EQUAL(lines(r.err), 2);     /* the parent's two; none of the child */
	CU_ASSERT_EQUAL(summary_value(r.err, "allocations"), PROBE_FORK_ALLOCS);
	CU_ASSERT_FATAL(read_log(path, &l) == 0);
	CU_ASSERT_EQUAL(l.bad, 0);
	CU_ASSERT_EQUAL(l.allocs, PROBE_FORK_ALLOCS);
	CU_ASSERT_EQUAL(l.frees, PROBE_FORK_ALLOCS);
	CU_ASSERT(!logged(&l, PROBE_FORK_CHILD_SIZE));
	done(&r);
	unlink(path);
}

/* ---- crash records ------------------------------------------------------ */

struct crashes {
	unsigned count, bad;
	unsigned exits;        /* EXIT records (wal_end) */
	uint32_t epoch_pid;    /* the writer's pid, from its EPOCH record */
	struct rec_crash c;    /* the last one */
};

static int read_crashes(const char *path, struct crashes *cr)
{
	struct wal_reader *r;
	struct wal_error err;
	struct wal_record rec;
	struct wal_iter it;
	struct rec_epoch e;

	memset(cr, 0, sizeof *cr);
	if (wal_reader_open_path(path, &r, &err) != 0)
		return -1;
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec) == 1) {
		if (rec.type == WAL_REC_EPOCH && rec_epoch_decode(rec.payload, rec.len, &e) == 0)
			cr->epoch_pid = e.pid;
		cr->exits += rec.type == WAL_REC_EXIT;
		if (rec.type != WAL_REC_CRASH)
			continue;
		if (rec_crash_decode(rec.payload, rec.len, &cr->c) < 0)
			cr->bad++;
		cr->count++;
	}
	wal_reader_close(r);
	return 0;
}

/*
 * probe crash MODE under the preload: the process still dies by its
 * signal (or, with its own SIGTERM handler, handles it and exits 0), and
 * the log holds one CRASH record naming the signal and the pid, with a
 * backtrace through the probe's crashing function.  A handler the program
 * installs after the preload started replaces ours: no record then.  A
 * SIGTERM that ends the process by its default action is a stop asked
 * for: the writer's EXIT record instead of a CRASH; so is an exit of
 * status 0 after a handled one, and only that: exit(3) writes neither.
 */
static void test_crash(void)
{
	static const struct {
		const char *mode;
		int signo;         /* the record's signal */
		int status;        /* run()'s status: 128 + signal, or 0 */
		unsigned records, exits;
	} cases[] = {
		{ "segv", SIGSEGV, 128 + SIGSEGV, 1, 0 },
		{ "abort", SIGABRT, 128 + SIGABRT, 1, 0 },
		{ "term", SIGTERM, 128 + SIGTERM, 0, 1 },
		{ "term-before", SIGTERM, 0, 1, 1 },
		{ "term-after", SIGTERM, 0, 0, 1 },
		{ "exit3", 0, 3, 0, 0 },
	};
	char path[256], wal[300];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=4M", NULL };
	const char *argv[] = { probe, "crash", NULL, NULL };
	struct crashes cr;
	struct run r;
	unsigned i, f;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		unsigned long long fn = 0;
		const char *at;
		int near = 0;

		argv[2] = cases[i].mode;
		snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "crash"));
		r = run(argv, env, 1);
#ifdef SANITIZED
		/* The disposition before ours is ASan's SEGV handler: it runs,
		 * reports and exits its own way. */
		if (cases[i].signo == SIGSEGV) {
			CU_ASSERT(r.status != 0 && strstr(r.err, "AddressSanitizer: SEGV"));
		} else
#endif
		{
			CU_ASSERT_EQUAL(r.status, cases[i].status);
		}
		if (cases[i].status == 0)
			CU_ASSERT(strstr(r.out, "handled: 1\n") != NULL);
		at = strstr(r.out, "crash_here ");
		CU_ASSERT_FATAL(at && sscanf(at, "crash_here %llx", &fn) == 1);
		CU_ASSERT_FATAL(read_crashes(path, &cr) == 0);
		CU_ASSERT_EQUAL(cr.bad, 0);
		CU_ASSERT_EQUAL(cr.count, cases[i].records);
		CU_ASSERT_EQUAL(cr.exits, cases[i].exits);
		if (cr.count == 1) {
			CU_ASSERT_EQUAL(cr.c.signo, cases[i].signo);
			CU_ASSERT(cr.epoch_pid != 0);
			CU_ASSERT_EQUAL(cr.c.pid, cr.epoch_pid);
			CU_ASSERT(cr.c.nframes >= 2);
			/* The fault itself, or a return address in crash_here. */
			for (f = 0; f < cr.c.nframes; f++)
				near |= cr.c.frames[f] >= fn && cr.c.frames[f] < fn + 512;
			CU_ASSERT(near);
			if (cases[i].signo == SIGSEGV)
				CU_ASSERT(cr.c.addr == 0x10 && cr.c.frames[0] >= fn && cr.c.frames[0] < fn + 512);
		}
		done(&r);
		unlink(path);
	}
}

/* The test serving program (tests/serve), eagerly and replaying graphs
 * from two threads: same output, every allocation logged and freed once,
 * routing and KV rules hit. */
static void test_serve(void)
{
	const char *modes[][4] = {
		{ NULL, "--mode=eager", NULL, NULL },
		{ NULL, "--mode=graph", "--threads=2", NULL },
	};
	char path[256], wal[300];
	const char *env[] = { wal, "MOEFT_WAL_SIZE=16M", "MOEFT_LOG=info", NULL };
	struct logged l;
	struct run plain, r;
	unsigned m;

	if (!serve) {
		fprintf(stderr, "(no serve program: skipped) ");
		return;
	}
	for (m = 0; m < 2; m++) {
		modes[m][0] = serve;
		plain = run(modes[m], NULL, 0);
		CU_ASSERT_EQUAL_FATAL(plain.status, 0);
		snprintf(wal, sizeof wal, "MOEFT_WAL=%s", test_path(path, sizeof path, "serve"));
		r = run(modes[m], env, 1);
		CU_ASSERT_EQUAL(r.status, 0);
		CU_ASSERT_STRING_EQUAL(r.out, plain.out);
		CU_ASSERT_EQUAL(lines(r.err), 2);
		CU_ASSERT(summary_value(r.err, "allocations") > 0);
		CU_ASSERT(summary_value(r.err, "rule_hits") > 0);
		CU_ASSERT(strstr(r.err, "(vllm:") != NULL);
		CU_ASSERT_FATAL(read_log(path, &l) == 0);
		CU_ASSERT_EQUAL(l.bad, 0);
		CU_ASSERT_EQUAL(l.allocs, summary_value(r.err, "allocations"));
		CU_ASSERT_EQUAL(l.frees, summary_value(r.err, "frees"));
		CU_ASSERT_EQUAL(summary_value(r.err, "live") + l.frees, l.allocs);
		/* One KV pool per layer (4 by default), found by the KV rule. */
		CU_ASSERT_EQUAL(l.kv_pools, 4);
		/* 64 steps: 3 boundaries, each a window or skipped (its steps
		 * going to the next window). */
		CU_ASSERT_EQUAL(summary_value(r.err, "decode_windows") +
				summary_value(r.err, "skipped"), 3);
		done(&plain);
		done(&r);
		unlink(path);
	}
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "baseline (no preload)", test_baseline },
		{ "silent without CUDA", test_silent },
		{ "one event per call, every path", test_events },
		{ "the same under libcudart.so.12", test_events_cudart12 },
		{ "dlsym and cuGetProcAddress answers", test_check },
		{ "runtime-to-driver nesting", test_nesting },
		{ "a statically linked runtime", test_static_runtime },
		{ "a private copy of the runtime", test_private_runtime },
		{ "fail open", test_fail_open },
		{ "fork", test_fork },
		{ "crash record, then the program's own disposition", test_crash },
		{ "test serving program", test_serve },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "preload", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};
	int rc;

	lib = getenv("SHIMTEST_LIB");
	probe = getenv("SHIMTEST_PROBE");
	probe12 = getenv("SHIMTEST_PROBE12");
	cudart12 = getenv("SHIMTEST_CUDART12");
	nest = getenv("SHIMTEST_NEST");
	nest_static = getenv("SHIMTEST_NEST_STATIC");
	fixture_dir = getenv("SHIMTEST_FIXTURE_DIR");
	serve = getenv("SHIMTEST_SERVE");
	privuser = getenv("SHIMTEST_PRIVUSER");
	privcall = getenv("SHIMTEST_PRIVCALL");
	if (!lib || !probe || !probe12 || !cudart12 || !nest || !nest_static || !fixture_dir ||
	    !privuser || !privcall) {
		fprintf(stderr, "test_preload: set SHIMTEST_LIB, SHIMTEST_PROBE, SHIMTEST_PROBE12, "
			"SHIMTEST_CUDART12, SHIMTEST_NEST, SHIMTEST_NEST_STATIC, "
			"SHIMTEST_PRIVUSER, SHIMTEST_PRIVCALL and SHIMTEST_FIXTURE_DIR (meson test "
			"does)\n");
		return 1;
	}
	rc = cu_run(suites);
	free(baseline);
	return rc;
}
