/*
 * test_restore.c - restore mode's plan: parsing (every error with its
 * line), the images, matching allocations by identity.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "restore.h"
#include "testutil.h"

static const char good[] =
	"moeft-restore-plan 1\n"
	"log 00112233445566ff\n"
	"window 9 144 159\n"
	"pool 0 a1a2a3a4a5a6a7a8 8192 0 4096 kv-pool-0.bin\n"
	"pool 1 a1a2a3a4a5a6a7a8 8192 1 4096 kv-pool-1.bin\n"
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
	CU_ASSERT_EQUAL(p.pools[2].no, 5);
	CU_ASSERT_EQUAL(p.pools[2].size, 100);
	/* A plan without pools is a plan. */
	CU_ASSERT_EQUAL(restore_plan_parse("moeft-restore-plan 1\nlog 0000000000000001\n"
					   "window 0 0 15\n", &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(p.npools, 0);
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
		  "pool 64 a1a2a3a4a5a6a7a8 1 0 4096 f\n", "line 4: expected a number up to 63" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 ../etc/passwd\n", "line 4: the file name may" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 ..\n", "line 4: expected a file name" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 f\npool 0 a1a2a3a4a5a6a7a8 1 1 4096 g\n",
		  "line 5: pool 0 or file g given twice" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\n"
		  "pool 0 a1a2a3a4a5a6a7a8 1 0 4096 f", "line 4: expected a file name" },
		{ "moeft-restore-plan 1\nlog 00112233445566ff\nwindow 1 2 3\nkv 0\n",
		  "line 4: expected 'pool '" },
	};
	static struct restore_plan p;
	char err[200];
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = '\0';
		CU_ASSERT_EQUAL(restore_plan_parse(cases[i].text, &p, err, sizeof err), -1);
		if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
			fprintf(stderr, "\ncase %zu: got '%s', want '%s...'\n", i, err, cases[i].want);
		CU_ASSERT(strncmp(err, cases[i].want, strlen(cases[i].want)) == 0);
	}
}

/* Allocations claim pools by (fingerprint, size, ordinal), each once. */
static void test_match(void)
{
	static struct restore_plan p;
	const struct restore_pool *q;
	char err[200];

	CU_ASSERT_EQUAL_FATAL(restore_plan_parse(good, &p, err, sizeof err), 0);
	CU_ASSERT_PTR_NULL(restore_match(&p, UINT64_C(0xa1a2a3a4a5a6a7a8), 8192, 2, 0x1000));
	CU_ASSERT_PTR_NULL(restore_match(&p, UINT64_C(0xa1a2a3a4a5a6a7a8), 4096, 0, 0x1000));
	CU_ASSERT_PTR_EQUAL(restore_unmatched(&p), &p.pools[0]);
	q = restore_match(&p, UINT64_C(0xa1a2a3a4a5a6a7a8), 8192, 1, 0x2000);
	CU_ASSERT_PTR_EQUAL(q, &p.pools[1]);
	CU_ASSERT_EQUAL(p.pools[1].base, 0x2000);
	CU_ASSERT_PTR_NULL(restore_match(&p, UINT64_C(0xa1a2a3a4a5a6a7a8), 8192, 1, 0x3000));
	CU_ASSERT_PTR_EQUAL(restore_match(&p, UINT64_C(0xa1a2a3a4a5a6a7a8), 8192, 0, 0x4000),
			    &p.pools[0]);
	CU_ASSERT_PTR_EQUAL(restore_unmatched(&p), &p.pools[2]);
	CU_ASSERT_PTR_EQUAL(restore_match(&p, 1, 100, 0, 0x5000), &p.pools[2]);
	CU_ASSERT_PTR_NULL(restore_unmatched(&p));
	CU_ASSERT(restore_claimed(&p, 0x2000));
	CU_ASSERT(restore_claimed(&p, 0x5000));
	CU_ASSERT(!restore_claimed(&p, 0x3000));
}

/* Loading maps each image, which must be a file of exactly its size. */
static void test_load(void)
{
	static const char plan[] = "moeft-restore-plan 1\nlog 0000000000000001\n"
				   "window 3 16 31\npool 2 0000000000000001 100 0 4096 img\n";
	static struct restore_plan p;
	char dir[256], path[300], err[600];
	unsigned char bytes[100];
	size_t i;

	for (i = 0; i < sizeof bytes; i++)
		bytes[i] = (unsigned char)(i * 7);
	test_path(dir, sizeof dir, "restore");
	CU_ASSERT_FATAL(mkdir(dir, 0700) == 0);
	snprintf(path, sizeof path, "%s/plan", dir);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, plan, sizeof plan - 1), 0);
	CU_ASSERT_EQUAL(restore_plan_load(path, &p, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "/img: No such file") != NULL);
	snprintf(path, sizeof path, "%s/img", dir);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, bytes, 99), 0);
	snprintf(path, sizeof path, "%s/plan", dir);
	CU_ASSERT_EQUAL(restore_plan_load(path, &p, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "/img: not a file of 100 bytes") != NULL);
	snprintf(path, sizeof path, "%s/img", dir);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, bytes, sizeof bytes), 0);
	snprintf(path, sizeof path, "%s/plan", dir);
	CU_ASSERT_EQUAL_FATAL(restore_plan_load(path, &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(memcmp(p.pools[0].image, bytes, sizeof bytes), 0);
	CU_ASSERT_EQUAL(p.last_step, 31);
	snprintf(path, sizeof path, "%s/img", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/plan", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "parse", test_parse },
		{ "errors name their line", test_errors },
		{ "match by identity", test_match },
		{ "load maps the images", test_load },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "restore plan", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
