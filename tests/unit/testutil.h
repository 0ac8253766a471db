/*
 * testutil.h - shared scaffolding of the CUnit test programs.
 */
#ifndef MOEFT_TESTUTIL_H
#define MOEFT_TESTUTIL_H

#include <stddef.h>
#include <CUnit/CUnit.h>

/* Register `suites`, run them in basic mode, return the number of failures
 * (so main can return it: nonzero fails the meson test). */
int cu_run(CU_SuiteInfo *suites);

/* A fresh path for a scratch log, unique per process and call, under
 * $MOEFT_TEST_DIR or /dev/shm.  The file does not exist yet. */
const char *test_path(char *buf, size_t len, const char *tag);

#endif
