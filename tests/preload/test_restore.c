/*
 * test_restore.c - restore mode: the images of a plan, matching
 * allocations by identity.  The plan's text: test_plan.c.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "restore.h"
#include "testutil.h"

/* Allocations claim pools by (fingerprint, size, ordinal), each once. */
static void test_match(void)
{
	static struct restore_pool pools[] = {
		{ .no = 0, .fingerprint = UINT64_C(0xa1a2a3a4a5a6a7a8), .size = 8192 },
		{ .no = 1, .fingerprint = UINT64_C(0xa1a2a3a4a5a6a7a8), .size = 8192, .ordinal = 1 },
		{ .no = 5, .fingerprint = 1, .size = 100 },
	};
	struct restore_plan p = { .npools = 3, .pools = pools };
	const struct restore_pool *q;

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

/* Loading opens each image, which must be a file of exactly its size, and
 * not a link. */
static void test_load(void)
{
	static const char plan[] = "moeft-restore-plan 1\nlog 0000000000000001\n"
				   "window 3 16 31\npool 2 0000000000000001 100 0 4096 img\n";
	static struct restore_plan p;
	char dir[256], path[300], link[300], err[600];
	unsigned char bytes[100], back[200];
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
	CU_ASSERT(!p.pools && !p.npools);
	snprintf(path, sizeof path, "%s/img", dir);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, bytes, sizeof bytes), 0);
	snprintf(path, sizeof path, "%s/plan", dir);
	CU_ASSERT_EQUAL_FATAL(restore_plan_load(path, &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(pread(p.pools[0].fd, back, sizeof back, 0), (ssize_t)sizeof bytes);
	CU_ASSERT_EQUAL(memcmp(back, bytes, sizeof bytes), 0);
	CU_ASSERT_EQUAL(p.last_step, 31);
	close(p.pools[0].fd);
	restore_plan_free(&p);

	/* A link to an image of the right size is refused. */
	snprintf(path, sizeof path, "%s/img", dir);
	snprintf(link, sizeof link, "%s/img.real", dir);
	CU_ASSERT_EQUAL_FATAL(rename(path, link), 0);
	CU_ASSERT_EQUAL_FATAL(symlink(link, path), 0);
	snprintf(path, sizeof path, "%s/plan", dir);
	CU_ASSERT_EQUAL(restore_plan_load(path, &p, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "/img: Too many levels of symbolic links") != NULL);
	CU_ASSERT(!p.pools && !p.npools);
	unlink(link);
	snprintf(path, sizeof path, "%s/img", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/plan", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "match by identity", test_match },
		{ "load opens the images", test_load },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "restore mode", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
