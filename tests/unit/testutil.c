/*
 * testutil.c - see testutil.h.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

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
	test_cleanup();
	return failures ? 1 : 0;
}

/* A failed fatal assertion skips the rest of its test, unlink included:
 * remove whatever test_path() named for this process and is still there. */
void test_cleanup(void)
{
	const char *dir = getenv("MOEFT_TEST_DIR");
	char prefix[64], path[512];
	struct dirent *e;
	DIR *d;

	if (!dir)
		dir = "/dev/shm";
	if (!(d = opendir(dir)))
		return;
	snprintf(prefix, sizeof prefix, "moeft-test-%ld-", (long)getpid());
	while ((e = readdir(d)))
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			unlink(path);
		}
	closedir(d);
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

void *test_slurp(const char *path, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && (buf = malloc(st.st_size ? (size_t)st.st_size : 1))) {
		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got != (size_t)st.st_size) {
			free(buf);
			buf = NULL;
		}
	}
	close(fd);
	*len = got;
	return buf;
}

int test_spew(const char *path, const void *buf, size_t len)
{
	const char *p = buf;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n <= 0) {
			close(fd);
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return close(fd);
}
