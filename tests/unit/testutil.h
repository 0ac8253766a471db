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

/* Remove every file test_path() named for this process (cu_run does it
 * after the run, so a test stopped by a fatal assertion leaves nothing). */
void test_cleanup(void);

/* The whole file at `path` in a malloc'd buffer (free it), its size in
 * *len; NULL when it cannot be read. */
void *test_slurp(const char *path, size_t *len);

/* Create or replace `path` (mode 0600) with `len` bytes of `buf`: 0 or -1. */
int test_spew(const char *path, const void *buf, size_t len);

#endif
