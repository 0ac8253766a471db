/*
 * test_blank.c - blank.c: which media hold a log, may be taken over, or
 * hold something else; holes skipped, not read; wal_open agreeing.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "blank.h"
#include "format.h"
#include "testutil.h"
#include "wal.h"

#define SIZE (UINT64_C(1) << 20)

struct put {
	uint64_t off;
	uint32_t len;
	uint8_t byte;
};

/* A file of `size` bytes, holes but for the puts (zeros are data too). */
static const char *make(char *path, size_t len, uint64_t size, const struct put *puts,
			unsigned n)
{
	static uint8_t buf[1 << 16];
	int fd;

	test_path(path, len, "blank");
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(ftruncate(fd, (off_t)size) == 0);
	for (unsigned i = 0; i < n; i++) {
		CU_ASSERT_FATAL(puts[i].len <= sizeof buf);
		memset(buf, puts[i].byte, puts[i].len);
		CU_ASSERT_FATAL(pwrite(fd, buf, puts[i].len, (off_t)puts[i].off) ==
				(ssize_t)puts[i].len);
	}
	close(fd);
	return path;
}

static int state_of(uint64_t size, const struct put *puts, unsigned n)
{
	struct wal_error err = { 0 };
	char path[256];
	int ret = wal_medium_state_path(make(path, sizeof path, size, puts, n), &err);

	unlink(path);
	return ret;
}

/* What wal_open does with the file: 1 formatted it, 0 refused it. */
static int taken_over(uint64_t size, const struct put *puts, unsigned n)
{
	struct wal_error err = { 0 };
	struct wal *w = NULL;
	char path[256];
	int ret = wal_open(make(path, sizeof path, size, puts, n), NULL, &w, &err);

	CU_ASSERT(ret == 0 || ret == WAL_ENOTLOG);
	wal_close(w);
	unlink(path);
	return ret == 0;
}

static const struct put half_format[] = {
	{ 0, WAL_DATA_OFF, 0xa5 },              /* metadata, magic not yet */
	{ WAL_DATA_OFF, 8192, 0 },              /* zeros written, not holes */
	{ SIZE / 2, 4096, 0 },
};
static const struct put data_first[] = { { WAL_DATA_OFF, 1, 1 } };
static const struct put data_last[] = { { SIZE - 1, 1, 0x80 } };
static const struct put data_after_zeros[] = {
	{ WAL_DATA_OFF, 8192, 0 }, { SIZE / 2, 4096, 0 }, { SIZE / 2 + 4095, 1, 7 },
};
static const struct put meta_only[] = { { 0, 100, 0xff } };

static void test_blank(void)
{
	CU_ASSERT_EQUAL(state_of(SIZE, NULL, 0), WAL_MEDIUM_BLANK);
	CU_ASSERT_EQUAL(state_of(SIZE, half_format, 3), WAL_MEDIUM_BLANK);
	CU_ASSERT_EQUAL(state_of(SIZE, meta_only, 1), WAL_MEDIUM_BLANK);
	CU_ASSERT_EQUAL(state_of(WAL_DATA_OFF + 1, NULL, 0), WAL_MEDIUM_BLANK);
	CU_ASSERT_EQUAL(state_of(0, NULL, 0), WAL_MEDIUM_BLANK);
}

static void test_foreign(void)
{
	CU_ASSERT_EQUAL(state_of(SIZE, data_first, 1), WAL_MEDIUM_FOREIGN);
	CU_ASSERT_EQUAL(state_of(SIZE, data_last, 1), WAL_MEDIUM_FOREIGN);
	CU_ASSERT_EQUAL(state_of(SIZE, data_after_zeros, 3), WAL_MEDIUM_FOREIGN);
	/* No data area at all: nothing says a log was meant to be here. */
	CU_ASSERT_EQUAL(state_of(WAL_DATA_OFF, NULL, 0), WAL_MEDIUM_FOREIGN);
	CU_ASSERT_EQUAL(state_of(100, NULL, 0), WAL_MEDIUM_FOREIGN);
}

/* The magic in either superblock copy makes a log, whatever follows. */
static void test_log(void)
{
	static const unsigned copy[] = { SB_COPY0_OFF, SB_COPY1_OFF };
	struct wal_error err = { 0 };
	struct wal *w = NULL;
	char path[256];
	int fd;

	for (unsigned c = 0; c < 2; c++) {
		fd = open(make(path, sizeof path, SIZE, NULL, 0), O_RDWR);
		CU_ASSERT_FATAL(fd >= 0);
		CU_ASSERT_FATAL(pwrite(fd, SB_MAGIC, sizeof SB_MAGIC, copy[c]) == sizeof SB_MAGIC);
		CU_ASSERT_EQUAL(wal_medium_state_path(path, &err), WAL_MEDIUM_LOG);
		CU_ASSERT_FATAL(pwrite(fd, "x", 1, SIZE - 1) == 1);
		CU_ASSERT_EQUAL(wal_medium_state_path(path, &err), WAL_MEDIUM_LOG);
		close(fd);
		unlink(path);
	}
	test_path(path, sizeof path, "blank");
	CU_ASSERT_EQUAL_FATAL(wal_open(path, NULL, &w, &err), 0);
	wal_close(w);
	CU_ASSERT_EQUAL(wal_medium_state_path(path, &err), WAL_MEDIUM_LOG);
	unlink(path);
}

static void test_unreadable(void)
{
	struct wal_error err = { 0 };
	char path[256];

	test_path(path, sizeof path, "blank");
	CU_ASSERT_EQUAL(wal_medium_state_path(path, &err), WAL_EIO);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "No such file"));
	CU_ASSERT_FATAL(mkdir(path, 0700) == 0);
	CU_ASSERT_EQUAL(wal_medium_state_path(path, &err), WAL_EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not a regular file"));
	rmdir(path);
}

/* A TiB of holes is answered from the file's extents: read, it would take
 * minutes (and the test's timeout would fail it). */
static void test_sparse(void)
{
	const uint64_t tib = UINT64_C(1) << 40;
	const struct put far[] = { { tib - 4096, 1, 0x10 } };

	CU_ASSERT_EQUAL(state_of(tib, NULL, 0), WAL_MEDIUM_BLANK);
	CU_ASSERT_EQUAL(state_of(tib, half_format, 3), WAL_MEDIUM_BLANK);
	CU_ASSERT_EQUAL(state_of(tib, far, 1), WAL_MEDIUM_FOREIGN);
}

/* wal_open formats what the rule calls blank and refuses what it calls
 * foreign: one rule. */
static void test_wal_open_agrees(void)
{
	CU_ASSERT_EQUAL(taken_over(SIZE, NULL, 0), 1);
	CU_ASSERT_EQUAL(taken_over(SIZE, half_format, 3), 1);
	CU_ASSERT_EQUAL(taken_over(SIZE, meta_only, 1), 1);
	CU_ASSERT_EQUAL(taken_over(SIZE, data_first, 1), 0);
	CU_ASSERT_EQUAL(taken_over(SIZE, data_last, 1), 0);
	CU_ASSERT_EQUAL(taken_over(SIZE, data_after_zeros, 3), 0);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "blank: empty, holes, zeros, an interrupted format", test_blank },
		{ "foreign: any nonzero data byte, no data area", test_foreign },
		{ "log: the magic in either copy", test_log },
		{ "missing or not a file", test_unreadable },
		{ "a sparse TiB is not read", test_sparse },
		{ "wal_open agrees", test_wal_open_agrees },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "medium state", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
