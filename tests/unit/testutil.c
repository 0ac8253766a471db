/*
 * testutil.c - see testutil.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "testutil.h"

int cu_run(CU_SuiteInfo *suites)
{
	unsigned failures;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	if (CU_register_suites(suites) != CUE_SUCCESS) {
		fprintf(stderr, "CU_register_suites: %s\n", CU_get_error_msg());
		CU_cleanup_registry();
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	return failures ? 1 : 0;
}

const char *test_path(char *buf, size_t len, const char *tag)
{
	static unsigned seq;
	const char *dir = getenv("MOEFT_TEST_DIR");

	snprintf(buf, len, "%s/moeft-test-%ld-%u-%s.wal", dir ? dir : "/dev/shm",
		 (long)getpid(), seq++, tag);
	unlink(buf);
	return buf;
}
