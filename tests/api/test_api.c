/*
 * test_api.c - include/moeft.h as an adapter sees it, in child processes
 * (this program run again with --child) with their own MOEFT_* variables
 * and nothing else of the caller's: libmoeft.so either preloaded (the API
 * found with dlsym(RTLD_DEFAULT)) or opened with dlopen (MOEFT_TEST_LIB).
 * Versions; instrumenting when preloaded with a good configuration (the
 * log is created), not when merely dlopen'ed (no log either), off with
 * MOEFT_DISABLE and with a bad variable (no log), off in a child of fork().
 * An adapter's windows: requests committed as REQUEST records read back
 * from the log, every bad request refused with nothing written, and
 * -ENODEV where the process is not instrumented; `moeft restore` of that
 * log (MOEFT_TEST_CLI) writes the request index, which answers a resumed
 * request's tokens with its blocks.  A host KV pool committed by ranges
 * restores to its state as of the last committed window.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moeft.h"
#include "record.h"
#include "reqindex.h"
#include "testutil.h"
#include "wal.h"

extern char **environ;

static char dir[64];

struct api {
	int (*api_version)(void);
	const char *(*version)(void);
	int (*instrumenting)(void);
	unsigned (*window)(void);
	int (*commit_requests)(uint64_t, uint32_t, const struct moeft_request *, size_t);
	long (*restored_prefix)(const uint32_t *, size_t, unsigned, uint32_t *, size_t, size_t *);
	int (*kv_pool)(const char *, void *, size_t, size_t);
	int (*commit_kv)(uint64_t, uint32_t, const struct moeft_kv_range *, size_t);
	int (*restored_read)(int, size_t, void *, size_t);
	int (*restored_intact)(int, size_t, size_t);
	int (*restored_step)(uint64_t *);
};

/* In a child: the library's functions, from the global scope when it was
 * preloaded, else from dlopen; or exit 90. */
static struct api open_api(void)
{
	int preloaded = getenv("LD_PRELOAD") != NULL;
	void *h = preloaded ? RTLD_DEFAULT : dlopen(getenv("MOEFT_TEST_LIB"), RTLD_NOW | RTLD_LOCAL);
	struct api a;
	void *p[11];

	if (!preloaded && !h)
		_exit(90);
	p[0] = dlsym(h, "moeft_api_version");
	p[1] = dlsym(h, "moeft_version");
	p[2] = dlsym(h, "moeft_instrumenting");
	p[3] = dlsym(h, "moeft_window");
	p[4] = dlsym(h, "moeft_commit_requests");
	p[5] = dlsym(h, "moeft_restored_prefix");
	p[6] = dlsym(h, "moeft_kv_pool");
	p[7] = dlsym(h, "moeft_commit_kv");
	p[8] = dlsym(h, "moeft_restored_read");
	p[9] = dlsym(h, "moeft_restored_intact");
	p[10] = dlsym(h, "moeft_restored_step");
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		if (!p[i])
			_exit(91);
	memcpy(&a.api_version, &p[0], sizeof p[0]);
	memcpy(&a.version, &p[1], sizeof p[1]);
	memcpy(&a.instrumenting, &p[2], sizeof p[2]);
	memcpy(&a.window, &p[3], sizeof p[3]);
	memcpy(&a.commit_requests, &p[4], sizeof p[4]);
	memcpy(&a.restored_prefix, &p[5], sizeof p[5]);
	memcpy(&a.kv_pool, &p[6], sizeof p[6]);
	memcpy(&a.commit_kv, &p[7], sizeof p[7]);
	memcpy(&a.restored_read, &p[8], sizeof p[8]);
	memcpy(&a.restored_intact, &p[9], sizeof p[9]);
	memcpy(&a.restored_step, &p[10], sizeof p[10]);
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

/* Two requests: "cmpl-a" of 5 tokens (3 of prompt, 4 computed) in blocks
 * of 2 tokens, and "b" of one token, none computed, no block yet. */
static const uint32_t a_tokens[6] = { 101, 102, 103, 104, 105, 106 }, a_blocks[3] = { 9, 4, 7 };
static const uint32_t *const a_groups[1] = { a_blocks }, b_tokens[1] = { 55 };
static const size_t two_blocks[1] = { 2 }, three_blocks[1] = { 3 }, no_blocks[1] = { 0 };

#define A_PARAMS "{\"max_tokens\":9}"

static struct moeft_request req_a(void)
{
	return (struct moeft_request){ .id = "cmpl-a", .id_len = 6, .tokens = a_tokens,
		.ntokens = 5, .nprompt = 3, .ncomputed = 4, .block_tokens = 2, .ngroups = 1,
		.blocks = a_groups, .nblocks = two_blocks, .params = A_PARAMS,
		.params_len = sizeof A_PARAMS - 1 };
}

/* Preloaded with MOEFT_WINDOW=4: bad calls refused, then two windows,
 * steps 0-3 (both requests) and 4-7 ("cmpl-a" finished, 6 tokens); a
 * window too large for the log is refused. */
static int requests(void)
{
	struct api a = open_api();
	struct moeft_request r[2] = { req_a(), { .id = "b", .id_len = 1, .tokens = b_tokens,
		.ntokens = 1, .block_tokens = 2, .ngroups = 1, .blocks = a_groups,
		.nblocks = no_blocks } }, bad;
	int fails = 0;

	if (a.window() != 4)
		return 10;
	fails += a.commit_requests(0, 0, r, 2) != -EINVAL;              /* no steps */
	fails += a.commit_requests(UINT64_MAX, 2, r, 2) != -EINVAL;     /* overflow */
	bad = req_a(), bad.ncomputed = 6;                               /* past the tokens */
	fails += a.commit_requests(0, 4, (struct moeft_request[]){ r[0], bad }, 2) != -EINVAL;
	bad = req_a(), bad.ncomputed = 5;                               /* 2 blocks of 2 */
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.id = "cmpl\n";                               /* not printable */
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.id_len = 0;
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.ngroups = 9;
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.ntokens = (size_t)1 << 23;
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.params = "{\"stop\":\"\n\"}";             /* not printable */
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.params_len = 4097;
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	bad = req_a(), bad.params = NULL;
	fails += a.commit_requests(0, 4, &bad, 1) != -EINVAL;
	fails += a.commit_requests(0, 4, (struct moeft_request[]){ r[0], r[1], r[0] }, 3) !=
		 -EINVAL;                                               /* two of one id */
	if (fails)
		return 11;
	if (a.commit_requests(0, 4, r, 2) != 0)
		return 12;
	r[0].ntokens = 6, r[0].ncomputed = 6, r[0].nblocks = three_blocks, r[0].finished = 1;
	if (a.commit_requests(4, 4, r, 1) != 0)
		return 13;
	/* 16 MiB of tokens: more than a window of a 16 MiB log holds. */
	bad = r[1], bad.ntokens = REQUEST_MAX_TOKENS;
	if (!(bad.tokens = calloc(REQUEST_MAX_TOKENS, sizeof *bad.tokens)))
		return 14;
	fails = a.commit_requests(8, 4, &bad, 1) != -E2BIG;
	free((void *)bad.tokens);
	return fails ? 15 : 0;
}

/* Not instrumented (dlopen'ed): no window, nothing to commit to, nothing
 * restored. */
static int requests_off(void)
{
	struct api a = open_api();
	struct moeft_request r = req_a();
	size_t nb = 9;

	return a.window() == 0 && a.commit_requests(0, 4, &r, 1) == -ENODEV &&
	       a.restored_prefix(a_tokens, 5, 0, NULL, 0, &nb) == -ENODEV && nb == 0 ? 0 : 1;
}

/* Started by `moeft restore -- this --child prefix` on the log of
 * "requests": "cmpl-a" sent again with one token more is 6 tokens in its
 * 3 blocks; a short buffer, a missing group, other tokens. */
static int prefix(void)
{
	static const uint32_t resumed[7] = { 101, 102, 103, 104, 105, 106, 200 };
	static const uint32_t other[5] = { 101, 7, 103, 104, 105 };
	struct api a = open_api();
	uint32_t blocks[8] = { 0 };
	size_t nb = 0;

	if (a.restored_prefix(resumed, 7, 0, blocks, 8, &nb) != 6 || nb != 3 || blocks[0] != 9 ||
	    blocks[1] != 4 || blocks[2] != 7)
		return 20;
	if (a.restored_prefix(resumed, 7, 0, blocks, 2, &nb) != -ENOSPC || nb != 3)
		return 21;
	if (a.restored_prefix(resumed, 7, 1, blocks, 8, &nb) != -EINVAL)
		return 22;
	if (a.restored_prefix(other, 5, 0, blocks, 8, &nb) != 0 || nb != 0)
		return 23;
	if (a.restored_prefix(NULL, 0, 0, blocks, 8, &nb) != -EINVAL)
		return 24;
	return a.restored_prefix(resumed, 7, 8, blocks, 8, &nb) == -EINVAL ? 0 : 25;
}

/* A host KV pool of 256 KiB in chunks of 4 KiB, as committed by "hostkv":
 * its first pattern, then 100 bytes of 0xaa at 8 KiB and 20 of 0xbb
 * across the chunk boundary at 100 KiB. */
#define HOSTKV_BYTES (256u << 10)

static void hostkv_state(uint8_t *pool)
{
	for (size_t i = 0; i < HOSTKV_BYTES; i++)
		pool[i] = (uint8_t)(i * 7 + 1);
}

static void hostkv_second(uint8_t *pool)
{
	memset(pool + 8192, 0xaa, 100);
	memset(pool + 100 * 1024 - 10, 0xbb, 20);
}

/* Preloaded: bad pools and ranges refused; two windows committed; then a
 * write that no window commits (the crash's). */
static int hostkv(void)
{
	static uint8_t pool[HOSTKV_BYTES];
	struct api a = open_api();
	struct moeft_kv_range all, two[2], bad;
	int h, fails = 0;

	hostkv_state(pool);
	fails += a.kv_pool("", pool, sizeof pool, 4096) != -EINVAL;
	fails += a.kv_pool("kv\n", pool, sizeof pool, 4096) != -EINVAL;
	fails += a.kv_pool("kv", pool, sizeof pool, 3000) != -EINVAL;
	fails += a.kv_pool("kv", NULL, sizeof pool, 4096) != -EINVAL;
	if (fails || (h = a.kv_pool("vllm-cpu-kv", pool, sizeof pool, 4096)) != 0)
		return 30;
	if (a.kv_pool("again", pool + 4096, 4096, 0) != -EEXIST)	/* inside it */
		return 34;
	all = (struct moeft_kv_range){ h, 0, sizeof pool };
	if (a.commit_kv(0, 4, &all, 1) != 0)
		return 31;
	hostkv_second(pool);
	two[0] = (struct moeft_kv_range){ h, 8192, 100 };
	two[1] = (struct moeft_kv_range){ h, 100 * 1024 - 10, 20 };
	bad = (struct moeft_kv_range){ 1, 0, 10 };
	fails += a.commit_kv(4, 4, &bad, 1) != -EINVAL;			/* no pool 1 */
	bad = (struct moeft_kv_range){ h, sizeof pool - 4, 5 };
	fails += a.commit_kv(4, 4, (struct moeft_kv_range[]){ two[0], bad }, 2) != -EINVAL;
	bad = (struct moeft_kv_range){ h, 0, 0 };
	fails += a.commit_kv(4, 4, &bad, 1) != -EINVAL;			/* empty */
	fails += a.commit_kv(4, 0, two, 2) != -EINVAL;			/* no steps */
	if (fails)
		return 32;
	if (a.commit_kv(4, 4, two, 2) != 0)
		return 33;
	memset(pool, 0xcc, 4096);	/* never committed */
	return 0;
}

/* Started by `moeft restore -- this --child hostkv-resume` on the log of
 * "hostkv": the same pool, fresh (zeros), claims the crashed one's, whose
 * bytes as of its last window read back, and are not copied in; the
 * process then commits windows of its own. */
static int hostkv_resume(void)
{
	static uint8_t pool[HOSTKV_BYTES], want[HOSTKV_BYTES], got[HOSTKV_BYTES];
	struct api a = open_api();
	struct moeft_kv_range all;
	int h;

	hostkv_state(want);
	hostkv_second(want);
	if (a.commit_kv(8, 4, NULL, 0) != -EBUSY)	/* its pool not back yet */
		return 47;
	if ((h = a.kv_pool("vllm-cpu-kv", pool, sizeof pool, 4096)) != 0)
		return 40;
	if (a.restored_read(h, 0, got, sizeof got) != 0 || memcmp(got, want, sizeof got))
		return 41;
	if (a.restored_read(h, 8192, got, 100) != 0 || got[0] != 0xaa || got[99] != 0xaa)
		return 42;
	for (size_t i = 0; i < sizeof pool; i++)
		if (pool[i])
			return 43;	/* never copied in */
	if (a.restored_read(h, sizeof pool - 4, got, 5) != -EINVAL ||
	    a.restored_read(7, 0, got, 1) != -EINVAL)
		return 44;
	all = (struct moeft_kv_range){ h, 0, sizeof pool };
	if (a.commit_kv(4, 4, &all, 1) != -EINVAL)	/* steps of the restored window */
		return 48;
	return a.commit_kv(8, 4, &all, 1) == 0 ? 0 : 45;
}

/* A window the log cannot hold fails after its copies went into the
 * store: they are undone, so the next window, which gets its id, does not
 * name them.  A 1 MiB log; a 64 MiB pool of 4 KiB chunks: its first MiB
 * committed, then all of it (refused), then chunk 0 again. */
#define ABORT_POOL (64u << 20)

static int hostkv_abort(void)
{
	uint8_t *pool = malloc(ABORT_POOL);
	struct api a = open_api();
	struct moeft_kv_range first, all, zero;
	int h, r;

	if (!pool)
		return 50;
	for (size_t i = 0; i < ABORT_POOL; i++)
		pool[i] = (uint8_t)(i / 4096 + 1);
	if ((h = a.kv_pool("big", pool, ABORT_POOL, 4096)) != 0)
		return 51;
	first = (struct moeft_kv_range){ h, 0, 1u << 20 };
	all = (struct moeft_kv_range){ h, 0, ABORT_POOL };
	zero = (struct moeft_kv_range){ h, 0, 4096 };
	if (a.commit_kv(0, 4, &first, 1) != 0)
		return 52;
	memset(pool, 0xee, ABORT_POOL);		/* what the refused window copied */
	r = a.commit_kv(4, 4, &all, 1);
	if (r != -ENOSPC && r != -E2BIG)
		return 53;
	pool[0] = 0x11;
	return a.commit_kv(4, 4, &zero, 1) == 0 ? 0 : 54;
}

/* A server of two processes in one directory: a scheduler committing
 * request "r" every 4 steps, a worker committing its pool (16 KiB, every
 * byte k + 1 in window k) every 4 steps; TEST_WINDOWS windows each. */
static int set_sched(void)
{
	static uint32_t tokens[64], blocks[32];
	const uint32_t *groups[1] = { blocks };
	struct api a = open_api();
	int n = atoi(getenv("TEST_WINDOWS"));

	for (uint32_t i = 0; i < 64; i++)
		tokens[i] = i + 1, blocks[i / 2] = i / 2;
	for (int k = 0; k < n; k++) {
		size_t nb = (size_t)(4 * k + 4) / 2;
		struct moeft_request r = { .id = "r", .id_len = 1, .tokens = tokens,
			.ntokens = (size_t)(4 * k + 4), .nprompt = 2, .ncomputed = (size_t)(4 * k + 4),
			.block_tokens = 2, .ngroups = 1, .blocks = groups, .nblocks = &nb };

		if (a.commit_requests((uint64_t)(4 * k), 4, &r, 1) != 0)
			return 60;
	}
	return 0;
}

static int set_worker(void)
{
	static uint8_t pool[16384];
	struct api a = open_api();
	int n = atoi(getenv("TEST_WINDOWS")), h = a.kv_pool("kv", pool, sizeof pool, 4096);
	struct moeft_kv_range all = { h, 0, sizeof pool };

	for (int k = 0; k < n; k++) {
		memset(pool, k + 1, sizeof pool);
		if (a.commit_kv((uint64_t)(4 * k), 4, &all, 1) != 0)
			return 61;
	}
	return h == 0 ? 0 : 62;
}

/* The server restored online: each process names itself as before (its
 * log's name) and takes its own state, that of the cut (step 7). */
static int set_resume_sched(void)
{
	static const uint32_t tokens[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
	struct api a;
	uint32_t blocks[8];
	size_t nb = 0;

	uint64_t step = 0;

	prctl(PR_SET_NAME, "sched");
	a = open_api();
	if (a.restored_step(&step) != 0 || step != 7 || a.restored_step(NULL) != -EINVAL)
		return 69;
	return a.restored_prefix(tokens, 9, 0, blocks, 8, &nb) == 8 && nb == 4 && blocks[3] == 3 ?
	       0 : 70;
}

static int set_resume_worker(void)
{
	static uint8_t pool[16384], got[16384];
	struct api a;
	int h;

	prctl(PR_SET_NAME, "worker");
	a = open_api();
	if ((h = a.kv_pool("kv", pool, sizeof pool, 4096)) != 0 ||
	    a.restored_read(h, 0, got, sizeof got) != 0)
		return 71;
	for (size_t i = 0; i < sizeof got; i++)
		if (got[i] != 2)
			return 72;
	return 0;
}

/* The worker of a set whose store lost one chunk of its pool: that
 * chunk's 4 KiB are neither intact nor read, the other three are both;
 * the restored step is the cut's. */
static int set_lost_worker(void)
{
	static uint8_t pool[16384], got[4096];
	struct api a;
	uint64_t step = 0;
	int h, lost = 0;

	prctl(PR_SET_NAME, "worker");
	a = open_api();
	if ((h = a.kv_pool("kv", pool, sizeof pool, 4096)) != 0)
		return 80;
	if (a.restored_step(&step) != 0 || step != 7 || a.restored_intact(h, 0, sizeof pool) != 0 ||
	    a.restored_intact(h, 0, sizeof pool + 1) != -EINVAL ||
	    a.restored_intact(5, 0, 1) != -EINVAL)
		return 81;
	for (size_t c = 0; c < 4; c++) {
		/* A chunk's last byte says what the whole chunk does. */
		int intact = a.restored_intact(h, c * 4096 + 4095, 1),
		    read = a.restored_read(h, c * 4096, got, sizeof got);

		if (a.restored_intact(h, c * 4096, 4096) == 0) {
			lost++;
			if (read != -EBADMSG || intact != 0)
				return 82;
		} else if (read != 0 || got[0] != 2 || got[4095] != 2 || intact != 1) {
			return 83;
		}
	}
	return lost == 1 ? 0 : 84;
}

/* CMD of the online restore: the server's two processes, this program
 * again (a shell under a sanitizer build's preload could not run). */
static int set_resume(void)
{
	static const char *const mode[2] = { "set-resume-sched", "set-resume-worker" };
	pid_t pid[2];
	int st, bad = 0;

	for (int i = 0; i < 2; i++)
		if ((pid[i] = fork()) == 0) {
			execl("/proc/self/exe", "test_api", "--child", mode[i], (char *)NULL);
			_exit(92);
		}
	for (int i = 0; i < 2; i++)
		bad |= pid[i] < 0 || waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) ||
		       WEXITSTATUS(st);
	return bad ? 73 : 0;
}

/* The same log restored into a pool of another size: stopped (status 3). */
static int hostkv_other(void)
{
	static uint8_t pool[HOSTKV_BYTES / 2];
	struct api a = open_api();

	a.kv_pool("vllm-cpu-kv", pool, sizeof pool, 4096);
	return 46;
}

static const struct {
	const char *name;
	int (*fn)(void);
} modes[] = { { "versions", versions }, { "instrumenting", instrumenting },
	      { "forked", forked }, { "requests", requests }, { "requests-off", requests_off },
	      { "prefix", prefix }, { "hostkv", hostkv }, { "hostkv-resume", hostkv_resume },
	      { "hostkv-other", hostkv_other }, { "hostkv-abort", hostkv_abort },
	      { "set-sched", set_sched }, { "set-worker", set_worker },
	      { "set-resume-sched", set_resume_sched }, { "set-resume-worker", set_resume_worker },
	      { "set-resume", set_resume }, { "set-lost-worker", set_lost_worker } };

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

/* One REQUEST record as the child committed it. */
static void check_request(const struct wal_record *rec, const char *id, uint64_t step,
			  uint32_t ntokens, uint32_t ncomputed, uint32_t nblocks, int finished)
{
	struct rec_request q;
	uint32_t i;

	CU_ASSERT_EQUAL_FATAL(rec->type, WAL_REC_REQUEST);
	CU_ASSERT_EQUAL_FATAL(rec_request_decode(rec->payload, rec->len, &q), 0);
	CU_ASSERT(q.id_len == strlen(id) && !memcmp(q.id, id, q.id_len));
	CU_ASSERT_EQUAL(q.step, step);
	CU_ASSERT_EQUAL(q.ntokens, ntokens);
	CU_ASSERT_EQUAL(q.ncomputed, ncomputed);
	CU_ASSERT_EQUAL(q.ngroups, 1);
	CU_ASSERT_EQUAL_FATAL(q.nblocks[0], nblocks);
	CU_ASSERT_EQUAL(q.flags, finished ? REQUEST_FINISHED : 0);
	CU_ASSERT_EQUAL(q.block_tokens, 2);
	for (i = 0; i < ntokens; i++)
		CU_ASSERT_EQUAL(rec_request_token(&q, i), id[0] == 'b' ? b_tokens[i] : a_tokens[i]);
	for (i = 0; i < nblocks; i++)
		CU_ASSERT_EQUAL(rec_request_block(&q, 0, i), a_blocks[i]);
	CU_ASSERT(id[0] == 'b' ? q.params_len == 0 : q.params_len == strlen(A_PARAMS) &&
		  !memcmp(q.params, A_PARAMS, q.params_len));
}

static void test_requests(void)
{
	char wal[128], path[160];
	const char *vars[] = { wal_var(wal, sizeof wal, "req.wal"), "MOEFT_WAL_SIZE=16M",
			       "MOEFT_WINDOW=4", NULL };
	struct rec_window_steps ws;
	const struct wal_window *win;
	struct wal_reader *r;
	struct wal_error err;
	struct wal_record rec[8];
	struct wal_iter it;
	size_t nwin, i, n = 0, adapter = 0;

	CU_ASSERT_EQUAL_FATAL(in_child("requests", 1, vars), 0);
	snprintf(path, sizeof path, "%s/req.wal", dir);
	CU_ASSERT_EQUAL_FATAL(wal_reader_open_path(path, &r, &err), 0);
	win = wal_reader_windows(r, &nwin);
	for (i = 0; i < nwin; i++)
		if (rec_requests_window(&win[i], &ws)) {
			CU_ASSERT_EQUAL(ws.first_step, adapter * 4);
			CU_ASSERT_EQUAL(ws.steps, 4);
			CU_ASSERT(!rec_decode_window(&win[i], &ws));
			adapter++;
		}
	CU_ASSERT_EQUAL(adapter, 2);
	wal_iter_init(&it, r);
	while (n < 8 && wal_iter_next(&it, &rec[n]))
		if (rec[n].type == WAL_REC_REQUEST)
			n++;
	CU_ASSERT_EQUAL_FATAL(n, 3);	/* nothing of the refused calls */
	check_request(&rec[0], "cmpl-a", 3, 5, 4, 2, 0);
	check_request(&rec[1], "b", 3, 1, 0, 0, 0);
	check_request(&rec[2], "cmpl-a", 7, 6, 6, 3, 1);
	CU_ASSERT_EQUAL(rec[0].window, rec[1].window);
	CU_ASSERT(rec[2].window != rec[1].window);
	wal_reader_close(r);
}

/* The index `moeft restore --out` makes of the log of test_requests: the
 * newest window's one request, which a resubmission of its tokens and one
 * more matches to its 6 computed tokens, 3 blocks of 2. */
static void test_request_index(void)
{
	static const uint32_t resumed[7] = { 101, 102, 103, 104, 105, 106, 200 };
	const struct rec_request *hit;
	struct reqindex x;
	char cmd[512], path[160], err[200];
	uint8_t buf[4096];
	size_t len;
	FILE *f;

	snprintf(cmd, sizeof cmd, "'%s' restore --wal %s/req.wal --out %s/req.out 2>/dev/null",
		 getenv("MOEFT_TEST_CLI"), dir, dir);
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
	snprintf(path, sizeof path, "%s/req.out/%s", dir, REQINDEX_NAME);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f = fopen(path, "rb"));
	len = fread(buf, 1, sizeof buf, f);
	fclose(f);
	CU_ASSERT_EQUAL_FATAL(reqindex_parse(buf, len, &x, err, sizeof err), 0);
	CU_ASSERT(x.first_step == 4 && x.last_step == 7);
	CU_ASSERT_EQUAL_FATAL(x.n, 1);
	CU_ASSERT(x.reqs[0].id_len == 6 && !memcmp(x.reqs[0].id, "cmpl-a", 6));
	CU_ASSERT_EQUAL(reqindex_match(&x, resumed, 7, &hit), 6);
	CU_ASSERT_PTR_EQUAL(hit, &x.reqs[0]);
	CU_ASSERT_EQUAL(rec_request_block(hit, 0, 2), 7);
	reqindex_free(&x);
}

/* The status of `ENV... CMD` run by the shell, stderr into DIR/err. */
static int shell(const char *cmd)
{
	char line[4096];
	int st;

	snprintf(line, sizeof line, "env -u LD_PRELOAD %s 2>%s/err", cmd, dir);
	st = system(line);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* moeft restore -- this program: the restored process answers with the
 * crashed one's blocks (a plan of no pools is in at once); a damaged
 * index beside the plan stops the process before it resumes. */
static void test_restored_prefix(void)
{
	char self[512], cmd[1536], path[160];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	FILE *f;
	int c;

	CU_ASSERT_FATAL(n > 0);
	self[n] = '\0';
	snprintf(cmd, sizeof cmd, "MOEFT_TEST_LIB='%s' '%s' restore --wal %s/req.wal "
		 "--out %s/req.online --preload '%s' -- '%s' --child prefix",
		 getenv("MOEFT_TEST_LIB"), getenv("MOEFT_TEST_CLI"), dir, dir,
		 getenv("MOEFT_TEST_LIB"), self);
	CU_ASSERT_EQUAL(shell(cmd), 0);
	/* One byte of the index changed: status 3, the file named. */
	snprintf(path, sizeof path, "%s/req.online/%s", dir, REQINDEX_NAME);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f = fopen(path, "r+b"));
	fseek(f, 60, SEEK_SET);
	c = fgetc(f);
	fseek(f, 60, SEEK_SET);
	fputc(c ^ 1, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "MOEFT_TEST_LIB='%s' MOEFT_RESTORE=%s/req.online/plan "
		 "MOEFT_WAL=%s/req.wal LD_PRELOAD='%s' '%s' --child prefix",
		 getenv("MOEFT_TEST_LIB"), dir, dir, getenv("MOEFT_TEST_LIB"), self);
	CU_ASSERT_EQUAL(shell(cmd), 3);
	snprintf(cmd, sizeof cmd, "grep -q 'req.online/requests: its CRC does not match' %s/err",
		 dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/* moeft restore of the log of "hostkv": the pool's image is its state as
 * of the last committed window, chunk for chunk, not the write after it. */
static void test_hostkv(void)
{
	static uint8_t want[HOSTKV_BYTES], got[HOSTKV_BYTES + 1];
	char wal[128], cmd[512], path[160];
	const char *vars[] = { wal_var(wal, sizeof wal, "hostkv.wal"), "MOEFT_WAL_SIZE=16M", NULL };
	size_t n;
	FILE *f;

	CU_ASSERT_EQUAL_FATAL(in_child("hostkv", 1, vars), 0);
	snprintf(cmd, sizeof cmd, "'%s' restore --wal %s/hostkv.wal --out %s/hostkv.out 2>/dev/null",
		 getenv("MOEFT_TEST_CLI"), dir, dir);
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
	snprintf(path, sizeof path, "%s/hostkv.out/kv-pool-0.bin", dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f = fopen(path, "rb"));
	n = fread(got, 1, sizeof got, f);
	fclose(f);
	hostkv_state(want);
	hostkv_second(want);
	CU_ASSERT_EQUAL(n, HOSTKV_BYTES);
	CU_ASSERT(memcmp(got, want, HOSTKV_BYTES) == 0);
}

/* moeft restore -- this program: a fresh pool of the same name reads the
 * crashed one's bytes back; one of another size stops the process. */
static void test_hostkv_resume(void)
{
	char self[512], cmd[1536];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	const char *mode[2] = { "hostkv-other", "hostkv-resume" };
	int want[2] = { 3, 0 };

	CU_ASSERT_FATAL(n > 0);
	self[n] = '\0';
	CU_ASSERT_FATAL(exists("hostkv.wal"));	/* test_hostkv's */
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof cmd, "MOEFT_TEST_LIB='%s' MOEFT_WAL_SIZE=16M '%s' restore "
			 "--wal %s/hostkv.wal --out %s/hostkv.online --preload '%s' -- '%s' --child %s",
			 getenv("MOEFT_TEST_LIB"), getenv("MOEFT_TEST_CLI"), dir, dir,
			 getenv("MOEFT_TEST_LIB"), self, mode[i]);
		CU_ASSERT_EQUAL(shell(cmd), want[i]);
		snprintf(cmd, sizeof cmd, "grep -q 'has no pool of the crashed process of the "
			 "same identity' %s/err", dir);
		CU_ASSERT_EQUAL(system(cmd) == 0, want[i] == 3);
	}
}

/* moeft restore after hostkv_abort: status 0 (no chunk lost), chunk 0 as
 * the last window left it, chunks 1-255 as the first did, the rest zeros:
 * nothing of the refused window. */
static void test_hostkv_abort(void)
{
	static uint8_t got[4096];
	char wal[128], cmd[512], path[160];
	const char *vars[] = { wal_var(wal, sizeof wal, "abort.wal"), "MOEFT_WAL_SIZE=1M", NULL };
	FILE *f;
	int bad = 0;

	CU_ASSERT_EQUAL_FATAL(in_child("hostkv-abort", 1, vars), 0);
	snprintf(cmd, sizeof cmd, "'%s' restore --wal %s/abort.wal --out %s/abort.out 2>%s/err",
		 getenv("MOEFT_TEST_CLI"), dir, dir, dir);
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
	snprintf(path, sizeof path, "%s/abort.out/kv-pool-0.bin", dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f = fopen(path, "rb"));
	for (unsigned c = 0; c < ABORT_POOL / 4096 && !bad; c++) {
		CU_ASSERT_FATAL(fread(got, 1, sizeof got, f) == sizeof got);
		for (unsigned i = 0; i < sizeof got && !bad; i++) {
			uint8_t want = c == 0 ? (i ? 0xee : 0x11) : c < 256 ? (uint8_t)(c + 1) : 0;

			if (got[i] != want) {
				fprintf(stderr, "\nchunk %u byte %u: 0x%02x, want 0x%02x\n", c, i,
					got[i], want);
				bad = 1;
			}
		}
	}
	fclose(f);
	CU_ASSERT(!bad);
}

/* The scheduler's and the worker's windows of one server, sched and
 * worker windows each, restored offline as a set: the cut's step (the
 * request index's last step, the worker image's byte), or -1 when the
 * restore refuses; *status its exit status. */
static int set_restore(const char *tag, int sched, int worker, int *status)
{
	char set[128], var[160], win[32], cmd[512], path[200];
	const char *vars[] = { var, win, "MOEFT_WAL_SIZE=16M", NULL };
	uint8_t buf[4096], byte[1];
	struct reqindex x;
	char err[200];
	size_t len;
	FILE *f;
	int last;

	snprintf(set, sizeof set, "%s/%s", dir, tag);
	if (mkdir(set, 0700) < 0)
		return -2;
	snprintf(var, sizeof var, "MOEFT_WAL=%s/sched.nodev.wal", set);
	snprintf(win, sizeof win, "TEST_WINDOWS=%d", sched);
	if (in_child("set-sched", 1, vars) != 0)
		return -3;
	snprintf(var, sizeof var, "MOEFT_WAL=%s/worker.nodev.wal", set);
	snprintf(win, sizeof win, "TEST_WINDOWS=%d", worker);
	if (in_child("set-worker", 1, vars) != 0)
		return -4;
	snprintf(cmd, sizeof cmd, "'%s' restore --wal %s --out %s.out 2>%s/err",
		 getenv("MOEFT_TEST_CLI"), set, set, dir);
	*status = WEXITSTATUS(system(cmd));
	if (*status)
		return -1;
	snprintf(path, sizeof path, "%s.out/sched.nodev/%s", set, REQINDEX_NAME);
	if (!(f = fopen(path, "rb")))
		return -5;
	len = fread(buf, 1, sizeof buf, f);
	fclose(f);
	if (reqindex_parse(buf, len, &x, err, sizeof err) < 0)
		return -6;
	last = (int)x.last_step;
	reqindex_free(&x);
	snprintf(path, sizeof path, "%s.out/worker.nodev/kv-pool-0.bin", set);
	if (!(f = fopen(path, "rb")) || fread(byte, 1, 1, f) != 1)
		return -7;
	fclose(f);
	/* The worker's state must be of the same step: window k is k + 1. */
	return byte[0] == (last + 1) / 4 ? last : -8;
}

/* The cut of a server's logs: the newest step both committed; the
 * worker's window before its newest when the scheduler lags one; none
 * when it lags more (the store keeps two copies of a chunk). */
static void test_set_cut(void)
{
	char cmd[256];
	int status = -1;

	CU_ASSERT_EQUAL(set_restore("cut-worker-behind", 3, 2, &status), 7);
	CU_ASSERT_EQUAL(set_restore("cut-sched-behind", 3, 4, &status), 11);
	CU_ASSERT_EQUAL(set_restore("cut-none", 1, 4, &status), -1);
	CU_ASSERT_EQUAL(status, 1);
	snprintf(cmd, sizeof cmd, "grep -q \"every other log's state were committed: the server's "
		 "processes cannot be restored together\" %s/err", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/* moeft restore --wal DIR -- CMD of the first set of test_set_cut: both
 * processes of CMD take their own state as of the cut. */
static void test_set_online(void)
{
	char self[512], cmd[2048];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

	CU_ASSERT_FATAL(n > 0);
	self[n] = '\0';
	CU_ASSERT_FATAL(exists("cut-worker-behind/sched.nodev.wal"));
	snprintf(cmd, sizeof cmd, "MOEFT_TEST_LIB='%s' '%s' restore --wal %s/cut-worker-behind "
		 "--preload '%s' -- '%s' --child set-resume", getenv("MOEFT_TEST_LIB"),
		 getenv("MOEFT_TEST_CLI"), dir, getenv("MOEFT_TEST_LIB"), self);
	CU_ASSERT_EQUAL(shell(cmd), 0);
	/* A directory without the set file is no server's restore: stopped. */
	snprintf(cmd, sizeof cmd, "MOEFT_TEST_LIB='%s' MOEFT_RESTORE=%s/cut-worker-behind "
		 "MOEFT_WAL=%s/cut-worker-behind/ LD_PRELOAD='%s' '%s' --child set-resume-worker",
		 getenv("MOEFT_TEST_LIB"), dir, dir, getenv("MOEFT_TEST_LIB"), self);
	CU_ASSERT_EQUAL(shell(cmd), 3);
	snprintf(cmd, sizeof cmd, "grep -q 'cut-worker-behind/set: No such file or directory (a "
		 "directory is a server.s restore only with the set file' %s/err", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/* Bits of the worker's store flipped in the newest copy of one chunk
 * (window 1's: bytes 2): restored online all the same, since an adapter
 * serves none of a lost chunk; the restore says so, and the worker finds
 * exactly that chunk lost. */
static void test_set_lost(void)
{
	static uint8_t kv[8 << 20];
	char self[512], cmd[2048], path[160];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	size_t len, at, run = 0;
	int status = -1, fd;

	CU_ASSERT_FATAL(n > 0);
	self[n] = '\0';
	CU_ASSERT_EQUAL_FATAL(set_restore("lost", 2, 2, &status), 7);
	snprintf(path, sizeof path, "%s/lost/worker.nodev.wal.kv", dir);
	CU_ASSERT_FATAL((fd = open(path, O_RDWR)) >= 0);
	len = (size_t)pread(fd, kv, sizeof kv, 0);
	for (at = 0; at < len && run < 4096; at++)
		run = kv[at] == 2 ? run + 1 : 0;
	CU_ASSERT_EQUAL_FATAL(run, 4096);
	kv[at - 100] ^= 0x10;
	CU_ASSERT_EQUAL(pwrite(fd, kv + at - 100, 1, (off_t)(at - 100)), 1);
	close(fd);
	snprintf(cmd, sizeof cmd, "MOEFT_TEST_LIB='%s' '%s' restore --wal %s/lost --preload '%s' "
		 "-- '%s' --child set-lost-worker", getenv("MOEFT_TEST_LIB"),
		 getenv("MOEFT_TEST_CLI"), dir, getenv("MOEFT_TEST_LIB"), self);
	CU_ASSERT_EQUAL(shell(cmd), 0);
	snprintf(cmd, sizeof cmd, "grep -q '1 KV chunk lost (zero-filled, listed per pool); the "
		 "engine.s adapter serves none of them' %s/err", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

static void test_requests_off(void)
{
	char wal[128];
	const char *vars[] = { wal_var(wal, sizeof wal, "reqoff.wal"), NULL };

	CU_ASSERT_EQUAL(in_child("requests-off", 0, vars), 0);
	CU_ASSERT(!exists("reqoff.wal"));
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
		{ "an adapter's requests", test_requests },
		{ "moeft restore's request index", test_request_index },
		{ "the restored process's prefixes", test_restored_prefix },
		{ "an adapter's host KV pool", test_hostkv },
		{ "a host KV pool read back after a restore", test_hostkv_resume },
		{ "a refused KV window leaves nothing", test_hostkv_abort },
		{ "the cut of a server's logs", test_set_cut },
		{ "a server's logs restored online", test_set_online },
		{ "a lost chunk of an adapter's pool", test_set_lost },
		{ "requests, not instrumented", test_requests_off },
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
