/*
 * test_plan.c - the restore plan (plan.h): parsing (every error with its
 * line), writing (the exact text, refusals), and the round trip.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "testutil.h"

static const char good[] =
	"moeft-restore-plan 1\n"
	"log 00112233445566ff\n"
	"window 9 144 159\n"
	"pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 kv-pool-0.bin\n"
	"pool 1 a1a2a3a4a5a6a7a8 8192 1 4096 kv-pool-1.bin\n"
	"lost 0\n"
	"lost 1\n"
	"pool 5 0000000000000001 100 0 4096 kv-pool-5.bin\n";

static void test_parse(void)
{
	static struct restore_plan p;
	char err[200];

	CU_ASSERT_EQUAL_FATAL(restore_plan_parse(good, &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(p.log_id, UINT64_C(0x00112233445566ff));
	CU_ASSERT_EQUAL(p.window, 9);
	CU_ASSERT_EQUAL(p.first_step, 144);
	CU_ASSERT_EQUAL(p.last_step, 159);
	CU_ASSERT_EQUAL_FATAL(p.npools, 3);
	CU_ASSERT_EQUAL(p.pools[1].no, 1);
	CU_ASSERT_EQUAL(p.pools[1].fingerprint, UINT64_C(0xa1a2a3a4a5a6a7a8));
	CU_ASSERT_EQUAL(p.pools[1].size, 8192);
	CU_ASSERT_EQUAL(p.pools[1].ordinal, 1);
	CU_ASSERT_EQUAL(p.pools[1].chunk_bytes, 4096);
	CU_ASSERT_STRING_EQUAL(p.pools[1].file, "kv-pool-1.bin");
	CU_ASSERT_EQUAL_FATAL(p.pools[1].nlost, 2);
	CU_ASSERT(p.pools[1].lost[0] == 0 && p.pools[1].lost[1] == 1);
	CU_ASSERT(p.pools[0].nlost == 0 && p.pools[2].nlost == 0);
	CU_ASSERT_EQUAL(p.pools[2].no, 5);
	CU_ASSERT_EQUAL(p.pools[2].size, 100);
	/* The ranges that touch a lost chunk, and those that do not. */
	CU_ASSERT_EQUAL(restore_pool_lost(&p.pools[1], 4095, 1), 1);
	CU_ASSERT_EQUAL(restore_pool_lost(&p.pools[1], 8191, 1), 1);
	CU_ASSERT_EQUAL(restore_pool_lost(&p.pools[1], 0, 0), 0);
	CU_ASSERT_EQUAL(restore_pool_lost(&p.pools[0], 0, 8192), 0);
	restore_plan_free(&p);
	CU_ASSERT(!p.pools && !p.npools);
	/* A plan without pools is a plan. */
	CU_ASSERT_EQUAL(restore_plan_parse("moeft-restore-plan 1\nlog 0000000000000001\n"
					   "window 0 0 15\n", &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(p.npools, 0);
	restore_plan_free(&p);
}

/* Each bad plan, and the line its message must name. */
static void test_errors(void)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "moeft-restore-plan 2\n", "line 1: not a moeft restore plan" },
		{ "moeft-restore-plan 1\nlog 0011\n", "line 2: expected 16 hex digits" },
		{ "moeft-restore-plan 1\nlog 00112233445566FF\n", "line 2: expected 16 hex" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff \n", "line 2: expected the end" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 5 4\n", "line 3: the window ends" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 -5 4\n", "line 3: expected a number" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 0 0 4096 f\n", "line 4: a pool has a size" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 32704 a1a2a3a4a5a6a7a8 1 0 4096 f\n",
		  "line 4: expected a number up to 32703" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 ../etc/passwd\n", "line 4: the file name may" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 ..\n", "line 4: expected a file name" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 f\npool 0 a1a2a3a4a5a6a7a8 1 1 4096 g\n",
		  "line 5: pool 0 or file g given twice" },
		/* Of two lines that repeat, the first (the file f here) is named. */
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 f\npool 1 a1a2a3a4a5a6a7a8 1 1 4096 g\n"
		  "pool 2 a1a2a3a4a5a6a7a8 1 2 4096 f\npool 1 a1a2a3a4a5a6a7a8 1 3 4096 h\n",
		  "line 6: pool 2 or file f given twice" },
		/* A broken line is named before a repeated one. */
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 f\npool 0 a1a2a3a4a5a6a7a8 1 1 4096 g\nkv\n",
		  "line 6: expected 'pool '" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 f", "line 4: expected a file name" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\nkv 0\n",
		  "line 4: expected 'pool '" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\nlost 0\n",
		  "line 4: a lost chunk before any pool" },
		/* 8192 bytes of 4096: chunks 0 and 1. */
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 f\nlost 2\n",
		  "line 5: expected a number up to 1" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 f\nlost 1\nlost 1\n",
		  "line 6: lost chunks out of order" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 f\nlost 1\nlost 0\n",
		  "line 6: lost chunks out of order" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 f\nlost 1 \n",
		  "line 5: expected the end" },
		/* A repeated pool is named at its own line, lost chunks counted. */
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 f\nlost 0\nlost 1\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 1 4096 g\nlost 0\n",
		  "line 7: pool 0 or file g given twice" },
	};
	static struct restore_plan p;
	char err[200];
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = '\0';
		CU_ASSERT_EQUAL(restore_plan_parse(cases[i].text, &p, err, sizeof err), -1);
		CU_ASSERT(!p.pools && !p.npools);
		if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
			fprintf(stderr, "\ncase %zu: got '%s', want '%s...'\n", i, err, cases[i].want);
		CU_ASSERT(strncmp(err, cases[i].want, strlen(cases[i].want)) == 0);
	}
}

/* p and q are the same plan, their pools' images and bases aside. */
static int same(const struct restore_plan *p, const struct restore_plan *q)
{
	if (p->log_id != q->log_id || p->window != q->window || p->first_step != q->first_step ||
	    p->last_step != q->last_step || p->npools != q->npools)
		return 0;
	for (unsigned i = 0; i < p->npools; i++) {
		const struct restore_pool *a = &p->pools[i], *b = &q->pools[i];

		if (a->no != b->no || a->ordinal != b->ordinal || a->fingerprint != b->fingerprint ||
		    a->size != b->size || a->chunk_bytes != b->chunk_bytes ||
		    strcmp(a->file, b->file) != 0 || a->nlost != b->nlost ||
		    (a->nlost && memcmp(a->lost, b->lost, a->nlost * sizeof *a->lost)))
			return 0;
	}
	return 1;
}

/* What the parser takes, the writer gives back byte for byte; and what it
 * writes parses to the same fields. */
static void test_round_trip(void)
{
	static struct restore_plan p, q;
	char text[4096], err[200];

	CU_ASSERT_EQUAL_FATAL(restore_plan_parse(good, &p, err, sizeof err), 0);
	p.pools[0].fd = 7;                      /* restore mode's, never written */
	p.pools[0].base = 0x1000;
	CU_ASSERT_EQUAL(restore_plan_format(&p, text, sizeof text, err, sizeof err),
			(int)strlen(good));
	CU_ASSERT_STRING_EQUAL(text, good);
	CU_ASSERT_EQUAL_FATAL(restore_plan_parse(text, &q, err, sizeof err), 0);
	CU_ASSERT_EQUAL(q.pools[0].fd, -1);
	CU_ASSERT_EQUAL(q.pools[0].base, 0);
	CU_ASSERT(same(&p, &q));
	restore_plan_free(&p);
	restore_plan_free(&q);
}

/* Every field at its widest: 2^64 - 1, 2^32 - 1, KVS_MAX_POOLS pools, 63-byte
 * names, RESTORE_LOST_MAX lost chunks of 20 digits (pool 0's chunks are
 * bytes): RESTORE_PLAN_MAX holds it; one lost chunk more is refused. */
static void test_widest(void)
{
	static struct restore_plan p, q;
	static char text[RESTORE_PLAN_MAX + 1];
	char err[200], num[6];
	size_t want = 21 + 21 + 70;
	unsigned i;
	int n;

	p.log_id = p.window = p.first_step = p.last_step = UINT64_MAX;
	p.npools = KVS_MAX_POOLS;
	p.pools = calloc(KVS_MAX_POOLS, sizeof *p.pools);
	CU_ASSERT_PTR_NOT_NULL_FATAL(p.pools);
	for (i = 0; i < KVS_MAX_POOLS; i++) {
		p.pools[i] = (struct restore_pool){ .no = i, .ordinal = UINT32_MAX,
						    .fingerprint = UINT64_MAX, .size = UINT64_MAX,
						    .chunk_bytes = UINT64_MAX };
		snprintf(num, sizeof num, "%05u", i);
		memset(p.pools[i].file, 'a', RESTORE_NAME_MAX - 1);
		memcpy(p.pools[i].file, num, 5);
		/* "pool", the fields and the name: 140 bytes, and the number */
		want += 140 + (size_t)snprintf(NULL, 0, "%u", i);
	}
	p.pools[0].chunk_bytes = 1;
	want -= 19;
	p.pools[0].nlost = RESTORE_LOST_MAX;
	p.pools[0].lost = calloc(RESTORE_LOST_MAX + 1, sizeof *p.pools[0].lost);
	CU_ASSERT_PTR_NOT_NULL_FATAL(p.pools[0].lost);
	for (i = 0; i <= RESTORE_LOST_MAX; i++)
		p.pools[0].lost[i] = UINT64_MAX - 1 - RESTORE_LOST_MAX + i;
	want += RESTORE_LOST_MAX * (size_t)RESTORE_LOST_LINE_MAX;
	n = restore_plan_format(&p, text, sizeof text, err, sizeof err);
	CU_ASSERT_EQUAL_FATAL((size_t)n, want);
	CU_ASSERT(n <= (int)RESTORE_PLAN_MAX);
	CU_ASSERT_EQUAL((size_t)n, strlen(text));
	CU_ASSERT(strstr(text, "window 18446744073709551615 18446744073709551615 "
			 "18446744073709551615\npool 0 ffffffffffffffff 18446744073709551615 "
			 "4294967295 1 00000aaa") != NULL);
	CU_ASSERT(strstr(text, "aaa\nlost 18446744073709486078\nlost 18446744073709486079\n") != NULL);
	CU_ASSERT(strstr(text, "\npool 32703 ffffffffffffffff 18446744073709551615 4294967295 "
			 "18446744073709551615 32703aaa") != NULL);
	CU_ASSERT_EQUAL_FATAL(restore_plan_parse(text, &q, err, sizeof err), 0);
	CU_ASSERT(same(&p, &q));
	restore_plan_free(&q);
	p.pools[0].nlost++;
	CU_ASSERT_EQUAL(restore_plan_format(&p, text, sizeof text, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "more than 65536 lost chunks") != NULL);
	free(p.pools[0].lost);
	free(p.pools);
}

/* The writer refuses p with exactly the message want. */
static void refused(const struct restore_plan *p, const char *want)
{
	static char text[RESTORE_PLAN_MAX + 1];
	char err[200] = "";

	CU_ASSERT_EQUAL(restore_plan_format(p, text, sizeof text, err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, want);
}

/* The writer refuses what the parser would, naming the line; and a buffer
 * too small, leaving a NUL-terminated prefix. */
static void test_write_refused(void)
{
	static struct restore_plan p;
	char text[4096], err[200];
	size_t need = strlen(good);

	CU_ASSERT_EQUAL_FATAL(restore_plan_parse(good, &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(restore_plan_format(&p, text, need, err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, "the plan takes 222 bytes and a NUL; the buffer holds 222");
	CU_ASSERT_EQUAL(strlen(text), need - 1);
	CU_ASSERT_EQUAL(restore_plan_format(&p, text, need + 1, err, sizeof err), (int)need);

	strcpy(p.pools[2].file, "../kv-pool-5.bin");
	refused(&p, "line 8: the file name may hold letters, digits, '.', '_', '-'");
	strcpy(p.pools[2].file, "kv-pool-1.bin");
	refused(&p, "line 8: pool 5 or file kv-pool-1.bin given twice");
	strcpy(p.pools[2].file, "kv-pool-5.bin");
	p.pools[1].chunk_bytes = 0;
	refused(&p, "line 5: a pool has a size and a chunk size");
	p.pools[1].chunk_bytes = 4096;
	p.pools[1].no = KVS_MAX_POOLS;
	refused(&p, "line 5: expected a number up to 32703");
	p.pools[1].no = 1;
	memset(p.pools[1].file, 'a', sizeof p.pools[1].file);   /* no NUL */
	refused(&p, "line 5: expected a file name of 1 to 63 bytes");
	strcpy(p.pools[1].file, "");
	refused(&p, "line 5: expected a file name of 1 to 63 bytes");
	strcpy(p.pools[1].file, "kv-pool-1.bin");
	p.last_step = p.first_step - 1;
	refused(&p, "line 3: the window ends before it begins");
	p.last_step = 159;
	p.npools = KVS_MAX_POOLS + 1;
	refused(&p, "32705 pools, more than 32704");
	p.npools = 3;
	CU_ASSERT_EQUAL(restore_plan_format(&p, text, sizeof text, err, sizeof err), (int)need);
	CU_ASSERT_STRING_EQUAL(text, good);
	restore_plan_free(&p);
}

/* A server's restore set file: its names, and every way not to be one. */
static void test_set_file(void)
{
	static const char set[] = "moeft-restore-set 1\nsched.nodev\nworker.0000_3b_00_0\n";

	CU_ASSERT_EQUAL(restore_set_lists(set, "sched.nodev"), 1);
	CU_ASSERT_EQUAL(restore_set_lists(set, "worker.0000_3b_00_0"), 1);
	CU_ASSERT_EQUAL(restore_set_lists(set, "sched"), 0);
	CU_ASSERT_EQUAL(restore_set_lists(set, ""), 0);
	CU_ASSERT_EQUAL(restore_set_lists("moeft-restore-set 1\n", "a"), 0);
	CU_ASSERT_EQUAL(restore_set_lists("moeft-restore-set 2\na\n", "a"), -1);
	CU_ASSERT_EQUAL(restore_set_lists("moeft-restore-set 1\na\nb", "a"), -1);
	CU_ASSERT_EQUAL(restore_set_lists("moeft-restore-set 1\na\n\n", "a"), -1);
	CU_ASSERT_EQUAL(restore_set_lists("moeft-restore-set 1\na/b\n", "a/b"), -1);
	CU_ASSERT_EQUAL(restore_set_lists("moeft-restore-set 1\na b\n", "a"), -1);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "parse", test_parse },
		{ "errors name their line", test_errors },
		{ "round trip, exact text", test_round_trip },
		{ "a server's set file", test_set_file },
		{ "every field at its widest", test_widest },
		{ "the writer refuses what the parser would", test_write_refused },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "restore plan", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
