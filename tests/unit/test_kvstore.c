/*
 * test_kvstore.c - kvstore.c: create, reopen and reformat; pools (find,
 * add, limits, persistence); reclaim, and regions placed in the gaps it
 * leaves; put and read back; the two-slot rule; the erase of uncommitted
 * windows; the log-id binding; damage in data, slot headers, pool entries
 * and the header; overlapping regions; truncated files; short last
 * chunks; argument checks; concurrent puts beside pool adds and reclaims;
 * and a robustness run of the reader over mutated images.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <numa.h>

#include "crc32c.h"
#include "kvformat.h"
#include "testutil.h"
#include "wal.h"

#define LOG_A UINT64_C(0x1122334455667788)
#define LOG_B UINT64_C(0x0badc0ffee15600d)
#define CHUNK 4096u
#define REGION0 KVS_REGION_ALIGN

/* ---- helpers ----------------------------------------------------------- */

static char logged[16][320];
static int nlogged;

static void capture_log(int level, const char *msg)
{
	if (level <= WAL_LOG_INFO && nlogged < 16)
		snprintf(logged[nlogged++], sizeof logged[0], "%s", msg);
}

static void capture_start(void)
{
	nlogged = 0;
	wal_set_log(capture_log, WAL_LOG_INFO);
}

static void capture_stop(void)
{
	wal_set_log(NULL, WAL_LOG_WARN);
}

static int has(const char *msg, const char *needle)
{
	return strstr(msg, needle) != NULL;
}

static struct kvs *open_store(const char *path, uint64_t log_id, uint64_t first)
{
	struct wal_error err = { 0 };
	struct kvs *s = NULL;
	int rc = kvs_open(path, log_id, -1, first, &s, &err);

	if (rc != 0)
		fprintf(stderr, "\nkvs_open %s: %d %s\n", path, rc, err.msg);
	return s;
}

static struct kvs_reader *open_reader(const char *path, uint64_t expect)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r = NULL;
	int rc = kvs_reader_open(path, expect, &r, &err);

	if (rc != 0)
		fprintf(stderr, "\nkvs_reader_open %s: %d %s\n", path, rc, err.msg);
	return r;
}

static struct kvs_pool_desc desc(uint64_t fp, uint64_t size, uint64_t chunk, uint32_t ordinal)
{
	return (struct kvs_pool_desc){ .fingerprint = fp, .size = size, .chunk_bytes = chunk,
				       .ordinal = ordinal };
}

static uint32_t add_pool(struct kvs *s, uint64_t fp, uint64_t size, uint64_t chunk,
			 uint32_t ordinal)
{
	struct kvs_pool_desc d = desc(fp, size, chunk, ordinal);
	uint32_t no = UINT32_MAX;

	CU_ASSERT_EQUAL(kvs_pool(s, &d, &no), 0);
	return no;
}

/* The bytes of (chunk, window): what every put writes and every read checks. */
static void fill(uint8_t *buf, uint32_t len, uint32_t pool, uint64_t chunk, uint64_t window)
{
	uint64_t x = (uint64_t)pool << 56 ^ chunk << 20 ^ window;

	for (uint32_t i = 0; i < len; i++) {
		x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
		buf[i] = (uint8_t)(x >> 56);
	}
}

static uint64_t put(struct kvs *s, uint32_t pool, uint64_t chunk, uint32_t len, uint64_t window)
{
	uint8_t *buf = malloc(len);
	uint64_t off = 0;
	uint32_t crc = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	fill(buf, len, pool, chunk, window);
	CU_ASSERT_EQUAL(kvs_put(s, pool, chunk, buf, len, window, &off, &crc), 0);
	CU_ASSERT_EQUAL(crc, crc32c(0, buf, len));
	free(buf);
	return off;
}

/* As of upto, the chunk holds what window w wrote, len bytes. */
static void expect_chunk(const struct kvs_reader *r, uint32_t pool, uint64_t chunk, uint64_t upto,
			 uint64_t w, uint32_t len)
{
	const uint8_t *data = NULL;
	uint64_t window = 0;
	uint32_t got = 0, crc = 0;
	uint8_t *want = malloc(len);

	CU_ASSERT_PTR_NOT_NULL_FATAL(want);
	fill(want, len, pool, chunk, w);
	CU_ASSERT_EQUAL(kvs_reader_chunk(r, pool, chunk, upto, &data, &got, &window, &crc),
			KVS_CHUNK_OK);
	CU_ASSERT_EQUAL(window, w);
	CU_ASSERT_EQUAL(got, len);
	CU_ASSERT_EQUAL(crc, crc32c(0, want, len));
	CU_ASSERT(data && got == len && memcmp(data, want, len) == 0);
	free(want);
}

static int chunk_state(const struct kvs_reader *r, uint32_t pool, uint64_t chunk, uint64_t upto)
{
	const uint8_t *data;
	uint64_t window;
	uint32_t len, crc;

	return kvs_reader_chunk(r, pool, chunk, upto, &data, &len, &window, &crc);
}

static void flip(const char *path, uint64_t off, unsigned bit)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	uint8_t b = 0;

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, &b, 1, (off_t)off), 1);
	b ^= (uint8_t)(1u << bit);
	CU_ASSERT_EQUAL(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
}

/* Which slot (0 or 1) a put at data offset `off` of the first pool used. */
static unsigned slot_of(const struct kvs_pool_desc *d, uint64_t chunk, uint64_t off)
{
	struct kvs_geom g;

	CU_ASSERT_EQUAL_FATAL(kvs_geometry(d, REGION0, &g), 0);
	return (unsigned)((off - REGION0 - g.data_off) / d->chunk_bytes - 2 * chunk);
}

static uint64_t slot_hdr_off(uint64_t region, uint64_t chunk, unsigned k)
{
	return region + (2 * chunk + k) * KVS_SLOT_SIZE;
}

/* ---- create, reopen, reformat ------------------------------------------ */

static void test_create_reopen(void)
{
	char path[256];
	struct kvs_reader *r;
	struct stat st;
	struct kvs *s;
	uint8_t hdr[KVS_HDR_SIZE];
	struct kvs_hdr h;
	int fd;

	test_path(path, sizeof path, "kv-create");
	capture_start();
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(nlogged, 0); /* a new file is formatted silently */
	CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
	CU_ASSERT_EQUAL(st.st_size, KVS_META_SIZE);
	kvs_close(s);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
	close(fd);
	CU_ASSERT_EQUAL(memcmp(hdr, "MOEFTKVS", 8), 0);
	CU_ASSERT_EQUAL(kvs_hdr_decode(hdr, &h), 0);
	CU_ASSERT_EQUAL(h.version, KVS_VERSION);
	CU_ASSERT_EQUAL(h.table, KVS_MAX_POOLS);
	CU_ASSERT_EQUAL(h.log_id, LOG_A);

	/* Reopen: the same store, nothing logged, nothing lost. */
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(nlogged, 0);
	kvs_close(s);
	capture_stop();

	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 0);
	kvs_reader_close(r);
	r = open_reader(path, 0); /* 0: any log */
	CU_ASSERT_PTR_NOT_NULL(r);
	kvs_reader_close(r);
	unlink(path);
}

static void test_busy(void)
{
	struct wal_error err = { 0 };
	struct kvs *a, *b;
	char path[256];

	test_path(path, sizeof path, "kv-busy");
	a = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	b = a;
	CU_ASSERT_EQUAL(kvs_open(path, LOG_A, -1, 0, &b, &err), WAL_EBUSY);
	CU_ASSERT_PTR_NULL(b);
	CU_ASSERT(has(err.msg, "in use by another writer"));
	kvs_close(a);
	b = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL(b);
	kvs_close(b);
	unlink(path);
}

static void test_not_regular(void)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r;
	struct kvs *s;
	char path[256];

	CU_ASSERT_EQUAL(kvs_open("/dev/zero", LOG_A, -1, 0, &s, &err), WAL_EINVAL);
	CU_ASSERT(has(err.msg, "/dev/zero: not a regular file"));
	CU_ASSERT(has(err.msg, "device-DAX"));
	CU_ASSERT_EQUAL(kvs_open("/dev/shm", LOG_A, -1, 0, &s, &err), WAL_EINVAL);
	CU_ASSERT(has(err.msg, "/dev/shm: not a regular file"));
	CU_ASSERT_EQUAL(kvs_open(NULL, LOG_A, -1, 0, &s, &err), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_open("", LOG_A, -1, 0, &s, &err), WAL_EINVAL);

	test_path(path, sizeof path, "kv-nolog");
	CU_ASSERT_EQUAL(kvs_open(path, 0, -1, 0, &s, &err), WAL_EINVAL);
	CU_ASSERT(has(err.msg, "no log id"));
	CU_ASSERT_EQUAL(access(path, F_OK), -1);

	CU_ASSERT_EQUAL(kvs_reader_open(path, 0, &r, &err), WAL_EIO);
	CU_ASSERT(has(err.msg, "No such file"));
	CU_ASSERT_PTR_NULL(r);
}

/* A file of a KV store of another log: reformatted by the writer, refused
 * by a reader that expects this log. */
static void test_other_log(void)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r = NULL;
	char path[256], want[400];
	struct kvs *s;

	test_path(path, sizeof path, "kv-other");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, 1, 8 * CHUNK, CHUNK, 0);
	put(s, 0, 3, CHUNK, 5);
	kvs_close(s);
	CU_ASSERT(file_size(path) > REGION0);

	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_B, &r, &err), WAL_ENOTLOG);
	CU_ASSERT_PTR_NULL(r);
	snprintf(want, sizeof want, "%s: the KV store of log %016llx, not of log %016llx", path,
		 (unsigned long long)LOG_A, (unsigned long long)LOG_B);
	CU_ASSERT_STRING_EQUAL(err.msg, want);

	capture_start();
	s = open_store(path, LOG_B, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(nlogged, 1);
	snprintf(want, sizeof want, "%s: the KV store of log %016llx; formatting it for log %016llx",
		 path, (unsigned long long)LOG_A, (unsigned long long)LOG_B);
	CU_ASSERT_STRING_EQUAL(logged[0], want);
	capture_stop();
	/* Nothing of the old store is left: no pool, no region. */
	CU_ASSERT_EQUAL(file_size(path), KVS_META_SIZE);
	CU_ASSERT_EQUAL(add_pool(s, 2, 4 * CHUNK, CHUNK, 0), 0);
	kvs_close(s);

	r = open_reader(path, LOG_B);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 1);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 3, UINT64_MAX), KVS_CHUNK_NONE);
	kvs_reader_close(r);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ENOTLOG);
	unlink(path);
}

/* Files that are no store of this version: the writer formats them, with
 * one line naming why; a reader refuses them with the right status. */
static void test_not_a_store(void)
{
	static const struct {
		uint64_t off;
		const char *why;
		int rc;
	} cases[] = {
		{ 0, "not a KV store", WAL_ENOTLOG },
		{ 20, "a KV store whose header fails its check", WAL_ECORRUPT },
		{ 8, "a KV store of version 3", WAL_EVERSION },
	};
	struct wal_error err = { 0 };
	struct kvs_reader *r;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-notstore");
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		s = open_store(path, LOG_A, 0);
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		add_pool(s, 1, 4 * CHUNK, CHUNK, 0);
		kvs_close(s);
		if (cases[i].rc == WAL_EVERSION) {
			/* Version 3 with a CRC that matches it. */
			uint8_t hdr[KVS_HDR_SIZE];
			int fd = open(path, O_RDWR | O_CLOEXEC);

			CU_ASSERT_FATAL(fd >= 0);
			CU_ASSERT_EQUAL(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
			put32(hdr + 8, 3);
			put32(hdr + KVS_HDR_SIZE - 4, crc32c(0, hdr, KVS_HDR_SIZE - 4));
			CU_ASSERT_EQUAL(pwrite(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
			close(fd);
		} else {
			flip(path, cases[i].off, 1);
		}
		CU_ASSERT_EQUAL(kvs_reader_open(path, 0, &r, &err), cases[i].rc);
		CU_ASSERT(has(err.msg, path));

		capture_start();
		s = open_store(path, LOG_A, 0);
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		CU_ASSERT_EQUAL(nlogged, 1);
		CU_ASSERT(has(logged[0], cases[i].why));
		CU_ASSERT(has(logged[0], "formatting it for log 1122334455667788"));
		capture_stop();
		kvs_close(s);
		CU_ASSERT_EQUAL(file_size(path), KVS_META_SIZE);
		r = open_reader(path, LOG_A);
		CU_ASSERT(r && kvs_reader_pools(r) == 0);
		kvs_reader_close(r);
	}

	/* A stub shorter than the header page and table: formatted silently. */
	CU_ASSERT_EQUAL(truncate(path, 100), 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, 0, &r, &err), WAL_ECORRUPT);
	CU_ASSERT(has(err.msg, "truncated"));
	capture_start();
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL(s);
	CU_ASSERT_EQUAL(nlogged, 0);
	capture_stop();
	kvs_close(s);
	CU_ASSERT_EQUAL(file_size(path), KVS_META_SIZE);
	unlink(path);
}

/* ---- pools ------------------------------------------------------------- */

static void test_pools(void)
{
	struct kvs_pool_desc bad[] = {
		desc(9, 4 * CHUNK, 3000, 0),              /* not a power of two */
		desc(9, 4 * CHUNK, 2048, 0),              /* below 4 KiB */
		desc(9, 4 * CHUNK, UINT64_C(2) << 30, 0), /* above 1 GiB */
		desc(9, 4 * CHUNK, CHUNK + 1, 0),
		desc(9, 0, CHUNK, 0),                     /* empty */
		desc(9, UINT64_C(1) << 62, CHUNK, 0),     /* past any file offset */
		desc(9, UINT64_MAX, UINT64_C(1) << 30, 0),
	};
	struct kvs_pool_desc d0 = desc(0xf1, 10 * CHUNK, CHUNK, 0);
	struct kvs_pool_desc d2 = desc(0xf1, 10 * CHUNK, 2 * CHUNK, 0);
	struct kvs_pool_info info;
	struct kvs_reader *r;
	struct kvs_geom g0, g1, g2;
	char path[256];
	struct kvs *s;
	uint32_t no;

	test_path(path, sizeof path, "kv-pools");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, CHUNK, 0), 0);
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, CHUNK, 1), 1);      /* ordinal */
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, 2 * CHUNK, 0), 2);  /* chunk size */
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, CHUNK, 1), 1);      /* found */
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, CHUNK, 0), 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		no = 77;
		CU_ASSERT_EQUAL(kvs_pool(s, &bad[i], &no), WAL_EINVAL);
		CU_ASSERT_EQUAL(no, 77);
	}
	CU_ASSERT_EQUAL(kvs_pool(s, NULL, &no), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_pool(NULL, &bad[0], &no), WAL_EINVAL);

	/* Regions on 2 MiB boundaries, back to back, the file ending with the last. */
	CU_ASSERT_EQUAL_FATAL(kvs_geometry(&d0, REGION0, &g0), 0);
	CU_ASSERT_EQUAL_FATAL(kvs_geometry(&d0, kvs_next_region(&g0), &g1), 0);
	CU_ASSERT_EQUAL_FATAL(kvs_geometry(&d2, kvs_next_region(&g1), &g2), 0);
	CU_ASSERT_EQUAL(g0.nchunks, 10);
	CU_ASSERT_EQUAL(g0.data_off, 4096);           /* 10 x 2 x 32 header bytes, page-aligned */
	CU_ASSERT_EQUAL(g0.len, 4096 + 20 * CHUNK);
	CU_ASSERT_EQUAL(g1.off, 2 * REGION0);
	CU_ASSERT_EQUAL(g2.off, 3 * REGION0);
	CU_ASSERT_EQUAL(g2.nchunks, 5);
	CU_ASSERT_EQUAL(file_size(path), g2.off + g2.len);
	CU_ASSERT_EQUAL(put(s, 2, 4, 2 * CHUNK, 1), g2.off + g2.data_off + 8 * 2 * CHUNK);
	kvs_close(s);

	/* Across a reopen: the same numbers, the same data. */
	s = open_store(path, LOG_A, 100);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, 2 * CHUNK, 0), 2);
	CU_ASSERT_EQUAL(add_pool(s, 0xf1, 10 * CHUNK, CHUNK, 1), 1);
	CU_ASSERT_EQUAL(add_pool(s, 0xf2, 3 * CHUNK, CHUNK, 0), 3);
	kvs_close(s);

	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 4);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 2, &info), 0);
	CU_ASSERT_EQUAL(info.d.fingerprint, 0xf1);
	CU_ASSERT_EQUAL(info.d.size, 10 * CHUNK);
	CU_ASSERT_EQUAL(info.d.chunk_bytes, 2 * CHUNK);
	CU_ASSERT_EQUAL(info.d.ordinal, 0);
	CU_ASSERT_EQUAL(info.nchunks, 5);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 1, &info), 0);
	CU_ASSERT_EQUAL(info.d.ordinal, 1);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 3, &info), 0);
	CU_ASSERT_EQUAL(info.d.fingerprint, 0xf2);
	CU_ASSERT_EQUAL(info.nchunks, 3);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 4, &info), WAL_EINVAL);
	expect_chunk(r, 2, 4, 1, 1, 2 * CHUNK);
	kvs_reader_close(r);
	unlink(path);
}

/* Make the store at path one whose pool table has `entries` entries (the
 * header says how many; this build's writer formats the largest table). */
static void set_table(const char *path, uint32_t entries)
{
	uint8_t hdr[KVS_HDR_SIZE];
	int fd = open(path, O_RDWR | O_CLOEXEC);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
	put32(hdr + 12, entries);
	put32(hdr + KVS_HDR_SIZE - 4, crc32c(0, hdr, KVS_HDR_SIZE - 4));
	CU_ASSERT_EQUAL(pwrite(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
	close(fd);
}

/* A full table: WAL_EFULL, finding still works, and a reclaim makes room.
 * On a table of 4 entries: the largest one would take 32704 regions. */
static void test_pool_limit(void)
{
	struct wal_error err = { 0 };
	struct kvs_pool_desc d = desc(2000, CHUNK, CHUNK, 0);
	struct kvs_reader *r = NULL;
	char path[256];
	struct kvs *s;
	uint32_t no = 0;

	test_path(path, sizeof path, "kv-limit");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	kvs_close(s);
	set_table(path, 4);
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	for (uint32_t i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(add_pool(s, 1000 + i, CHUNK, CHUNK, 0), i);
	CU_ASSERT_EQUAL(kvs_pool(s, &d, &no), WAL_EFULL);
	CU_ASSERT_EQUAL(add_pool(s, 1003, CHUNK, CHUNK, 0), 3); /* finding still works */
	put(s, 3, 0, CHUNK, 2);
	kvs_close(s);

	/* A writer that asks for pools 1 and 3 only: the others go, and the
	 * new pool takes the lowest free entry. */
	s = open_store(path, LOG_A, 10);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(add_pool(s, 1003, CHUNK, CHUNK, 0), 3);
	CU_ASSERT_EQUAL(add_pool(s, 1001, CHUNK, CHUNK, 0), 1);
	CU_ASSERT_EQUAL(kvs_pool(s, &d, &no), WAL_EFULL);
	CU_ASSERT_EQUAL(kvs_reclaim(s), 2);
	CU_ASSERT_EQUAL(add_pool(s, 2000, CHUNK, CHUNK, 0), 0);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 4);
	expect_chunk(r, 3, 0, 2, 2, CHUNK);
	kvs_reader_close(r);

	/* A table size out of range is refused, not guessed at. */
	set_table(path, 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
	CU_ASSERT(has(err.msg, "header fails its check"));
	set_table(path, KVS_MAX_POOLS + 1);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
	unlink(path);
}

/* Blocks the file holds, in 512-byte units. */
static uint64_t file_blocks(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_blocks : UINT64_MAX;
}

/*
 * Reclaim drops the pools the writer did not ask for: their entries are
 * free, their regions' blocks given back and the file cut after the last
 * region in use; the pools it asked for, and added, stay with their data.
 * A new pool takes the lowest free entry and the first gap that holds its
 * region, where it reads as never written; a larger one goes to the end.
 */
static void test_reclaim(void)
{
	struct kvs_pool_info info;
	struct kvs_reader *r;
	uint64_t blocks;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-reclaim");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(kvs_reclaim(s), 0);     /* every pool is its own */
	for (uint32_t i = 0; i < 4; i++) {
		CU_ASSERT_EQUAL(add_pool(s, 10 + i, 64 * CHUNK, CHUNK, 0), i);
		for (uint64_t c = 0; c < 64; c++)
			put(s, i, c, CHUNK, 1);
	}
	CU_ASSERT_EQUAL(kvs_reclaim(s), 0);
	kvs_close(s);
	blocks = file_blocks(path);

	/* The next process asks for pool 1 and adds one of its own (4). */
	s = open_store(path, LOG_A, 2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(add_pool(s, 11, 64 * CHUNK, CHUNK, 0), 1);
	CU_ASSERT_EQUAL(add_pool(s, 20, 8 * CHUNK, CHUNK, 0), 4);
	put(s, 4, 7, CHUNK, 2);
	capture_start();
	CU_ASSERT_EQUAL(kvs_reclaim(s), 3);
	CU_ASSERT(nlogged == 1 && has(logged[0], "3 KV pools of earlier processes reclaimed "
				     "(786432 bytes of KV): no restore can take them any more"));
	capture_stop();
	CU_ASSERT_EQUAL(kvs_reclaim(s), 0);
	/* Three regions of 64 data chunks x 2 slots gone. */
	CU_ASSERT(file_blocks(path) + 3 * 2 * 64 * CHUNK / 512 <= blocks + 2 * 8 * CHUNK / 512 + 64);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 5);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 0, &info), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 3, &info), WAL_EINVAL);
	CU_ASSERT_EQUAL(chunk_state(r, 2, 0, 1), WAL_EINVAL);
	expect_chunk(r, 1, 63, 1, 1, CHUNK);
	expect_chunk(r, 4, 7, 2, 2, CHUNK);
	CU_ASSERT_EQUAL(kvs_reader_pool(r, 4, &info), 0);
	CU_ASSERT_EQUAL(info.off, 5 * REGION0);    /* after pool 3's region, then */
	kvs_reader_close(r);

	/* Into the gaps: pool 0's number and region (the first gap), then
	 * pool 2's number and pool 2's region; one too large for any gap goes
	 * past the last region.  Their chunks were never written. */
	CU_ASSERT_EQUAL(add_pool(s, 30, 16 * CHUNK, CHUNK, 0), 0);
	CU_ASSERT_EQUAL(add_pool(s, 31, 64 * CHUNK, CHUNK, 0), 2);
	CU_ASSERT_EQUAL(add_pool(s, 32, 300 * CHUNK, CHUNK, 0), 3);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 5);
	CU_ASSERT(kvs_reader_pool(r, 0, &info) == 0 && info.off == REGION0);
	CU_ASSERT(kvs_reader_pool(r, 2, &info) == 0 && info.off == 3 * REGION0);
	CU_ASSERT(kvs_reader_pool(r, 3, &info) == 0 && info.off == 6 * REGION0);
	for (uint64_t c = 0; c < 16; c++)
		CU_ASSERT_EQUAL(chunk_state(r, 0, c, UINT64_MAX), KVS_CHUNK_NONE);
	for (uint64_t c = 0; c < 64; c++)
		CU_ASSERT_EQUAL(chunk_state(r, 2, c, UINT64_MAX), KVS_CHUNK_NONE);
	expect_chunk(r, 1, 0, 1, 1, CHUNK);
	kvs_reader_close(r);

	/* Reclaiming the last region cuts the file after the last in use. */
	s = open_store(path, LOG_A, 3);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(add_pool(s, 30, 16 * CHUNK, CHUNK, 0), 0);
	CU_ASSERT_EQUAL(kvs_reclaim(s), 4);
	CU_ASSERT_EQUAL(file_size(path), REGION0 + KVS_DATA_ALIGN + 2 * 16 * CHUNK);
	kvs_close(s);
	unlink(path);
}

/* ---- put and read back ------------------------------------------------- */

static void test_round_trip(void)
{
	struct kvs_pool_desc d = desc(7, 16 * CHUNK, 2 * CHUNK, 0);
	uint8_t buf[2 * CHUNK], *img;
	struct kvs_reader *r;
	const uint8_t *data;
	uint64_t off, window;
	uint32_t len, crc;
	char path[256];
	struct kvs *s;
	size_t n;

	test_path(path, sizeof path, "kv-round");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, d.fingerprint, d.size, d.chunk_bytes, d.ordinal);
	fill(buf, sizeof buf, 0, 6, 42);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 6, buf, sizeof buf, 42, &off, &crc), 0);
	CU_ASSERT_EQUAL(crc, crc32c(0, buf, sizeof buf));
	CU_ASSERT_EQUAL(slot_of(&d, 6, off), 0);
	/* Outputs are optional. */
	CU_ASSERT_EQUAL(kvs_put(s, 0, 7, buf, 100, 42, NULL, NULL), 0);
	kvs_close(s);

	/* The bytes are in the file at the offset kvs_put gave. */
	img = test_slurp(path, &n);
	CU_ASSERT_PTR_NOT_NULL_FATAL(img);
	CU_ASSERT(off + sizeof buf <= n && memcmp(img + off, buf, sizeof buf) == 0);
	free(img);

	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 6, 42, 42, sizeof buf);
	CU_ASSERT_EQUAL(kvs_reader_chunk(r, 0, 6, 42, &data, &len, &window, &crc), KVS_CHUNK_OK);
	CU_ASSERT_EQUAL(crc, crc32c(0, buf, sizeof buf));
	CU_ASSERT_EQUAL(chunk_state(r, 0, 6, 41), KVS_CHUNK_NONE);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 5, UINT64_MAX), KVS_CHUNK_NONE);
	CU_ASSERT_EQUAL(kvs_reader_chunk(r, 0, 7, 42, &data, &len, &window, &crc), KVS_CHUNK_OK);
	CU_ASSERT_EQUAL(len, 100);
	CU_ASSERT_EQUAL(crc, crc32c(0, buf, 100));
	CU_ASSERT_EQUAL(chunk_state(r, 0, 8, 42), WAL_EINVAL);  /* past the pool */
	CU_ASSERT_EQUAL(chunk_state(r, 1, 0, 42), WAL_EINVAL);  /* no such pool */
	kvs_reader_close(r);
	unlink(path);
}

/* Two slots a chunk: the newest copy of an earlier window is never the one
 * written, so one copy older than the open window always survives. */
static void test_two_slots(void)
{
	struct kvs_pool_desc d = desc(7, 4 * CHUNK, CHUNK, 0);
	struct kvs_reader *r;
	uint64_t o5, o7, o9, o9b;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-slots");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, d.fingerprint, d.size, d.chunk_bytes, d.ordinal);

	o5 = put(s, 0, 1, CHUNK, 5);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 1, 4), KVS_CHUNK_NONE);
	expect_chunk(r, 0, 1, 5, 5, CHUNK);
	expect_chunk(r, 0, 1, 100, 5, CHUNK);
	kvs_reader_close(r);

	o7 = put(s, 0, 1, CHUNK, 7);
	CU_ASSERT_NOT_EQUAL(o7, o5);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 1, 5, 5, CHUNK);
	expect_chunk(r, 0, 1, 6, 5, CHUNK);
	expect_chunk(r, 0, 1, 7, 7, CHUNK);
	kvs_reader_close(r);

	/* Window 9 overwrites the copy of 5, as designed: 7 is the newest
	 * earlier copy, so a reader as of 6 finds nothing any more. */
	o9 = put(s, 0, 1, CHUNK, 9);
	CU_ASSERT_EQUAL(o9, o5);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 1, 6), KVS_CHUNK_NONE);
	expect_chunk(r, 0, 1, 8, 7, CHUNK);
	expect_chunk(r, 0, 1, 9, 9, CHUNK);
	kvs_reader_close(r);

	/* Again within window 9: the same slot, 7 stays. */
	o9b = put(s, 0, 1, CHUNK / 2, 9);
	CU_ASSERT_EQUAL(o9b, o9);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 1, 8, 7, CHUNK);
	expect_chunk(r, 0, 1, 9, 9, CHUNK / 2);
	kvs_reader_close(r);

	/* Window 10 takes the slot of 7; window 11 that of 9. */
	CU_ASSERT_EQUAL(put(s, 0, 1, CHUNK, 10), o7);
	CU_ASSERT_EQUAL(put(s, 0, 1, CHUNK, 11), o9);
	/* Other chunks are untouched by all this. */
	CU_ASSERT_EQUAL(slot_of(&d, 2, put(s, 0, 2, CHUNK, 11)), 0);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 1, 10, 10, CHUNK);
	expect_chunk(r, 0, 1, 11, 11, CHUNK);
	expect_chunk(r, 0, 2, 11, 11, CHUNK);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 0, 11), KVS_CHUNK_NONE);
	kvs_reader_close(r);
	unlink(path);
}

static void test_short_last_chunk(void)
{
	uint8_t buf[CHUNK] = { 0 };
	struct kvs_reader *r;
	char path[256];
	struct kvs *s;
	uint64_t off;

	test_path(path, sizeof path, "kv-short");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, 3, 3 * CHUNK + 100, CHUNK, 0);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 3, buf, 101, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 3, buf, CHUNK, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 4, buf, 1, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 2, buf, CHUNK + 1, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 2, buf, 0, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 2, NULL, 10, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 0, 2, buf, 10, KVS_MAX_WINDOW + 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(s, 1, 0, buf, 10, 1, &off, NULL), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_put(NULL, 0, 0, buf, 10, 1, &off, NULL), WAL_EINVAL);
	put(s, 0, 3, 100, 1);
	put(s, 0, 2, CHUNK, KVS_MAX_WINDOW); /* the largest window id */
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 3, 1, 1, 100);
	expect_chunk(r, 0, 2, UINT64_MAX, KVS_MAX_WINDOW, CHUNK);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 2, KVS_MAX_WINDOW - 1), KVS_CHUNK_NONE);
	kvs_reader_close(r);
	unlink(path);
}

/* ---- uncommitted windows ----------------------------------------------- */

static void test_erase_uncommitted(void)
{
	struct kvs_pool_desc d = desc(7, 8 * CHUNK, CHUNK, 0);
	struct kvs_reader *r;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-erase");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, d.fingerprint, d.size, d.chunk_bytes, d.ordinal);
	add_pool(s, 8, 2 * CHUNK, CHUNK, 0);
	put(s, 0, 0, CHUNK, 3);
	put(s, 0, 0, CHUNK, 5);  /* uncommitted */
	put(s, 0, 1, CHUNK, 4);
	put(s, 0, 2, CHUNK, 6);  /* uncommitted */
	put(s, 0, 3, CHUNK, 5);  /* uncommitted */
	put(s, 0, 3, CHUNK, 6);  /* uncommitted */
	put(s, 1, 1, CHUNK, 9);  /* uncommitted */
	put(s, 1, 0, CHUNK, 2);
	kvs_close(s);

	/* The log committed up to window 4: windows >= 5 go. */
	capture_start();
	s = open_store(path, LOG_A, 5);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_EQUAL(nlogged, 1);
	CU_ASSERT(has(logged[0], "erased 5 slots of windows >= 5"));
	capture_stop();

	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 0, UINT64_MAX, 3, CHUNK);
	expect_chunk(r, 0, 1, UINT64_MAX, 4, CHUNK);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 2, UINT64_MAX), KVS_CHUNK_NONE);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 3, UINT64_MAX), KVS_CHUNK_NONE);
	CU_ASSERT_EQUAL(chunk_state(r, 1, 1, UINT64_MAX), KVS_CHUNK_NONE);
	expect_chunk(r, 1, 0, UINT64_MAX, 2, CHUNK);
	kvs_reader_close(r);

	/* The new epoch reuses window 5: its copy, and the old one of 3. */
	put(s, 0, 0, CHUNK, 5);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 0, 4, 3, CHUNK);
	expect_chunk(r, 0, 0, 5, 5, CHUNK);
	kvs_reader_close(r);

	/* Nothing more to erase: no line. */
	capture_start();
	s = open_store(path, LOG_A, 6);
	CU_ASSERT_PTR_NOT_NULL(s);
	CU_ASSERT_EQUAL(nlogged, 0);
	capture_stop();
	kvs_close(s);
	unlink(path);
}

/* A window whose commit failed (wal_abort) leaves copies with its id, an
 * id the log gives the next commit, whatever it holds: kvs_unput empties
 * them, so that no later commit names them, and the next window's copy
 * goes into their slot, not over the committed copy. */
static void test_unput(void)
{
	struct kvs_reader *r;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-unput");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, 7, 4 * CHUNK, CHUNK, 0);
	put(s, 0, 1, CHUNK, 5);			/* committed */
	put(s, 0, 1, CHUNK, 7);			/* 7's commit failed: */
	CU_ASSERT_EQUAL(kvs_unput(s, 0, 1, 7), 0);
	CU_ASSERT_EQUAL(kvs_unput(s, 0, 2, 7), 0);	/* never put: nothing */
	CU_ASSERT_EQUAL(kvs_unput(s, 0, 9, 7), WAL_EINVAL);
	CU_ASSERT_EQUAL(kvs_unput(s, 3, 1, 7), WAL_EINVAL);
	/* Window 7 committed without it (an allocation window); 8's copy. */
	put(s, 0, 1, CHUNK, 8);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 1, 7, 5, CHUNK);	/* as of 7: 5's, not the undone 7's */
	expect_chunk(r, 0, 1, 8, 8, CHUNK);
	kvs_reader_close(r);
	unlink(path);
}

/* ---- damage ------------------------------------------------------------ */

/* One chunk with copies of windows 5 and 7, written to `path`. */
static void two_copies(const char *path, uint64_t *o5, uint64_t *o7)
{
	struct kvs *s;

	unlink(path);
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, 7, 4 * CHUNK, CHUNK, 0);
	*o5 = put(s, 0, 2, CHUNK, 5);
	*o7 = put(s, 0, 2, CHUNK, 7);
	put(s, 0, 3, CHUNK, 7);
	kvs_close(s);
}

static void test_damaged_data(void)
{
	struct kvs_reader *r;
	uint64_t o5, o7;
	char path[256];

	test_path(path, sizeof path, "kv-data");
	/* A flipped bit in the newest copy: DAMAGED, never the older copy. */
	two_copies(path, &o5, &o7);
	flip(path, o7 + 1234, 6);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 2, 7), KVS_CHUNK_DAMAGED);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 2, 100), KVS_CHUNK_DAMAGED);
	expect_chunk(r, 0, 2, 6, 5, CHUNK);   /* as of 6, the copy of 5 decides */
	expect_chunk(r, 0, 3, 7, 7, CHUNK);   /* a neighbour is not affected */
	kvs_reader_close(r);

	/* In the older copy: only a reader as of an older window sees it. */
	two_copies(path, &o5, &o7);
	flip(path, o5 + CHUNK - 1, 0);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 2, 7, 7, CHUNK);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 2, 6), KVS_CHUNK_DAMAGED);
	kvs_reader_close(r);
	unlink(path);
}

static void test_damaged_slot_header(void)
{
	struct kvs_pool_desc d = desc(7, 4 * CHUNK, CHUNK, 0);
	struct kvs_reader *r;
	uint64_t o5, o7;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-slothdr");
	/* Every bit of either header: the chunk is DAMAGED as of any window,
	 * whichever copy the flip hit (a bad header's window is unknown: it
	 * may be the newest).  No flip of the window word makes it look empty. */
	for (unsigned k = 0; k < 2; k++)
		for (unsigned b = 0; b < KVS_SLOT_SIZE * 8; b++) {
			two_copies(path, &o5, &o7);
			CU_ASSERT_EQUAL(slot_of(&d, 2, o5), 0);
			flip(path, slot_hdr_off(REGION0, 2, k) + b / 8, b % 8);
			r = open_reader(path, LOG_A);
			CU_ASSERT_PTR_NOT_NULL_FATAL(r);
			CU_ASSERT_EQUAL(chunk_state(r, 0, 2, 7), KVS_CHUNK_DAMAGED);
			CU_ASSERT_EQUAL(chunk_state(r, 0, 2, 6), KVS_CHUNK_DAMAGED);
			expect_chunk(r, 0, 3, 7, 7, CHUNK);
			kvs_reader_close(r);
		}

	/* The writer neither erases nor trusts a bad header: it is reported
	 * until a put of a later window replaces it. */
	two_copies(path, &o5, &o7);
	flip(path, slot_hdr_off(REGION0, 2, 1) + 3, 7); /* window word of 7: + 2^31 */
	s = open_store(path, LOG_A, 6);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(chunk_state(r, 0, 2, 5), KVS_CHUNK_DAMAGED);
	kvs_reader_close(r);
	CU_ASSERT_EQUAL(put(s, 0, 2, CHUNK, 6), o7);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 2, 5, 5, CHUNK);
	expect_chunk(r, 0, 2, 6, 6, CHUNK);
	kvs_reader_close(r);
	unlink(path);
}

static void test_damaged_table(void)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r = NULL;
	char path[256], want[400];
	uint64_t o5, o7;
	struct kvs *s = NULL;

	test_path(path, sizeof path, "kv-table");
	/* Any bit of a pool entry: the reader and the writer both refuse. */
	for (unsigned b = 0; b < KVS_ENTRY_SIZE * 8; b += 13) {
		two_copies(path, &o5, &o7);
		flip(path, KVS_TABLE_OFF + b / 8, b % 8);
		CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
		CU_ASSERT_PTR_NULL(r);
		snprintf(want, sizeof want, "%s: pool 0: table entry fails its check", path);
		CU_ASSERT_STRING_EQUAL(err.msg, want);
		CU_ASSERT_EQUAL(kvs_open(path, LOG_A, -1, 0, &s, &err), WAL_ECORRUPT);
		CU_ASSERT_PTR_NULL(s);
		CU_ASSERT_STRING_EQUAL(err.msg, want);
	}

	/* A free entry's other bytes (a crashed addition's, a reclaimed
	 * pool's) mean nothing. */
	two_copies(path, &o5, &o7);
	for (unsigned b = 64; b < KVS_ENTRY_SIZE * 8; b += 7)
		flip(path, KVS_TABLE_OFF + KVS_ENTRY_SIZE + b / 8, b % 8);
	r = open_reader(path, LOG_A);
	CU_ASSERT(r && kvs_reader_pools(r) == 1);
	kvs_reader_close(r);
	s = open_store(path, LOG_A, 8);
	CU_ASSERT_PTR_NOT_NULL(s);
	kvs_close(s);

	/* Two entries that verify, whose regions overlap: refused. */
	two_copies(path, &o5, &o7);
	{
		struct kvs_pool_desc d = desc(8, 4 * CHUNK, CHUNK, 0);
		uint8_t e[KVS_ENTRY_SIZE];
		struct kvs_geom g;
		int fd = open(path, O_RDWR | O_CLOEXEC);

		CU_ASSERT_EQUAL_FATAL(kvs_geometry(&d, REGION0, &g), 0);
		kvs_entry_encode(e, &d, 1, &g, log_id_crc(LOG_A));
		CU_ASSERT_FATAL(fd >= 0);
		CU_ASSERT_EQUAL(pwrite(fd, e, sizeof e, KVS_TABLE_OFF + KVS_ENTRY_SIZE),
				(ssize_t)sizeof e);
		close(fd);
	}
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
	CU_ASSERT(has(err.msg, "pools 0 and 1: their regions overlap at offset 2097152"));
	CU_ASSERT_EQUAL(kvs_open(path, LOG_A, -1, 0, &s, &err), WAL_ECORRUPT);
	unlink(path);
}

static void test_truncated(void)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r = NULL;
	struct kvs_geom g;
	struct kvs_pool_desc d = desc(7, 4 * CHUNK, CHUNK, 0);
	uint64_t o5, o7, full;
	struct kvs *s = NULL;
	char path[256];

	CU_ASSERT_EQUAL_FATAL(kvs_geometry(&d, REGION0, &g), 0);
	test_path(path, sizeof path, "kv-trunc");
	two_copies(path, &o5, &o7);
	full = file_size(path);
	CU_ASSERT_EQUAL(full, g.off + g.len);

	CU_ASSERT_EQUAL(truncate(path, (off_t)full - 1), 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
	CU_ASSERT(has(err.msg, "pool 0: region [2097152, "));
	CU_ASSERT(has(err.msg, "runs past the end of the file"));
	CU_ASSERT_PTR_NULL(r);
	CU_ASSERT_EQUAL(kvs_open(path, LOG_A, -1, 0, &s, &err), WAL_ECORRUPT);
	CU_ASSERT(has(err.msg, "truncated"));

	CU_ASSERT_EQUAL(truncate(path, REGION0), 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
	CU_ASSERT_EQUAL(truncate(path, KVS_META_SIZE - 1), 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ECORRUPT);
	CU_ASSERT(has(err.msg, "truncated"));
	CU_ASSERT_EQUAL(truncate(path, 10), 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ENOTLOG);
	CU_ASSERT(has(err.msg, "too short for a KV store"));
	CU_ASSERT_EQUAL(truncate(path, 0), 0);
	CU_ASSERT_EQUAL(kvs_reader_open(path, LOG_A, &r, &err), WAL_ENOTLOG);
	CU_ASSERT(has(err.msg, "empty file, not a KV store"));
	unlink(path);
}

/* ---- threads ----------------------------------------------------------- */

#define PUTTERS 4
#define ROUNDS 200

struct putter {
	struct kvs *s;
	uint32_t pool;
	int failures;
	pthread_t t;
};

static void *put_rounds(void *arg)
{
	struct putter *p = arg;
	uint8_t buf[CHUNK];

	for (uint64_t w = 1; w <= ROUNDS; w++)
		for (uint64_t c = 0; c < 4; c++) {
			fill(buf, sizeof buf, p->pool, c, w);
			p->failures += kvs_put(p->s, p->pool, c, buf, sizeof buf, w, NULL, NULL) != 0;
		}
	return NULL;
}

/* Puts into existing pools while other pools are added, and an earlier
 * process's pools reclaimed (their entries and gaps taken again): no
 * mapping the puts use moves, and the data comes back exact. */
static void test_threads(void)
{
	struct putter p[PUTTERS];
	struct kvs_reader *r;
	char path[256];
	struct kvs *s;

	test_path(path, sizeof path, "kv-threads");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	for (unsigned i = 0; i < 8; i++)
		add_pool(s, 400 + i, 64 * CHUNK, CHUNK, 0);
	kvs_close(s);
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	for (unsigned i = 0; i < PUTTERS; i++) {
		p[i] = (struct putter){ .s = s, .pool = add_pool(s, 500 + i, 4 * CHUNK, CHUNK, 0) };
		CU_ASSERT_EQUAL(p[i].pool, 8 + i);
		CU_ASSERT_EQUAL_FATAL(pthread_create(&p[i].t, NULL, put_rounds, &p[i]), 0);
	}
	for (unsigned i = 0; i < 20; i++)
		CU_ASSERT_EQUAL(add_pool(s, 600 + i, 64 * CHUNK, CHUNK, 0), 8 + PUTTERS + i);
	CU_ASSERT_EQUAL(kvs_reclaim(s), 8);
	for (unsigned i = 0; i < 20; i++)
		CU_ASSERT_EQUAL(add_pool(s, 700 + i, 64 * CHUNK, CHUNK, 0),
				i < 8 ? i : 8 + PUTTERS + 20 + i - 8);
	for (unsigned i = 0; i < PUTTERS; i++) {
		pthread_join(p[i].t, NULL);
		CU_ASSERT_EQUAL(p[i].failures, 0);
	}
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(kvs_reader_pools(r), 8 + PUTTERS + 40 - 8);
	for (unsigned i = 0; i < PUTTERS; i++)
		for (uint64_t c = 0; c < 4; c++) {
			expect_chunk(r, 8 + i, c, ROUNDS, ROUNDS, CHUNK);
			expect_chunk(r, 8 + i, c, ROUNDS - 1, ROUNDS - 1, CHUNK);
		}
	kvs_reader_close(r);
	unlink(path);
}

/* ---- media: NUMA, a filesystem that is not tmpfs ------------------------ */

static void test_numa(void)
{
	struct wal_error err = { 0 };
	struct kvs_reader *r;
	char path[256];
	struct kvs *s = NULL;

	test_path(path, sizeof path, "kv-numa");
	CU_ASSERT_EQUAL(kvs_open(path, LOG_A, 1 << 20, 0, &s, &err), WAL_ENUMA);
	CU_ASSERT(has(err.msg, "NUMA node 1048576"));
	CU_ASSERT_EQUAL(access(path, F_OK), -1);
	if (numa_available() < 0) {
		printf("[skipped binding: no NUMA] ");
		return;
	}
	capture_start();
	CU_ASSERT_EQUAL_FATAL(kvs_open(path, LOG_A, 0, 0, &s, &err), 0);
	CU_ASSERT(nlogged >= 1 && has(logged[0], "bound to NUMA node 0"));
	capture_stop();
	add_pool(s, 1, 16 * CHUNK, CHUNK, 0);
	put(s, 0, 15, CHUNK, 1);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 0, 15, 1, 1, CHUNK);
	kvs_reader_close(r);
	unlink(path);
}

static void test_non_tmpfs(void)
{
	static const char *dirs[] = { "/var/tmp", "/tmp" };
	struct kvs_reader *r;
	const char *dir = NULL;
	struct statfs sf;
	char path[256];
	struct kvs *s;

	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0] && !dir; i++)
		if (statfs(dirs[i], &sf) == 0 && sf.f_type != TMPFS_MAGIC &&
		    sf.f_type != RAMFS_MAGIC && access(dirs[i], W_OK) == 0)
			dir = dirs[i];
	if (!dir) {
		printf("[skipped: no writable non-tmpfs directory] ");
		return;
	}
	snprintf(path, sizeof path, "%s/moeft-test-%ld-nontmpfs.kv", dir, (long)getpid());
	unlink(path);
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, 1, 8 * CHUNK, CHUNK, 0);
	add_pool(s, 2, 8 * CHUNK, CHUNK, 0);
	put(s, 1, 7, CHUNK, 3);
	kvs_close(s);
	r = open_reader(path, LOG_A);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	expect_chunk(r, 1, 7, 3, 3, CHUNK);
	kvs_reader_close(r);
	unlink(path);
}

/* ---- robustness: the reader over mutated images ------------------------ */

static uint64_t rng(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Recompute every check the reader verifies, so mutations get past them
 * and reach the logic behind. */
static void reseal(uint8_t *img, size_t len)
{
	struct kvs_pool_desc d;
	struct kvs_geom g = { .off = REGION0, .len = 0 };
	uint64_t nchunks, off;
	uint32_t id;

	if (len < KVS_META_SIZE)
		return;
	put32(img + 12, 1 + get32(img + 12) % KVS_MAX_POOLS);
	put32(img + KVS_HDR_SIZE - 4, crc32c(0, img, KVS_HDR_SIZE - 4));
	id = log_id_crc(get64(img + 16));
	/* The entries a mutation may hit: any word but 0 made the live one. */
	for (uint32_t i = 0; i < 8; i++) {
		uint8_t *e = img + KVS_TABLE_OFF + i * KVS_ENTRY_SIZE;

		if (!get64(e))
			continue;
		put64(e, KVS_ENTRY_LIVE);
		put32(e + 36, i);
		put32(e + KVS_ENTRY_SIZE - 4, crc32c(id, e, KVS_ENTRY_SIZE - 4));
		if (kvs_entry_decode(e, i, id, &d, &nchunks, &off) != 1 ||
		    kvs_geometry(&d, off, &g) < 0 || g.off + g.data_off > len)
			continue;
		for (uint64_t s = 0; s < 2 * g.nchunks && g.off + (s + 1) * KVS_SLOT_SIZE <= len; s++) {
			uint8_t *h = img + g.off + s * KVS_SLOT_SIZE;

			if (get64(h))
				put32(h + KVS_SLOT_SIZE - 4, crc32c(id, h, KVS_SLOT_SIZE - 4));
		}
	}
}

static volatile uint64_t sink;

/* Everything a restore would read, checking the invariants of the answers:
 * 1 opened, 0 refused (with a message), -1 an answer that breaks one. */
static int read_all(const uint8_t *img, size_t len, uint64_t *ok)
{
	struct wal_error err = { 0 };
	struct kvs_pool_info info;
	struct kvs_reader *r;
	const uint8_t *data;
	uint64_t window;
	uint32_t clen, crc;
	int bad = 0;

	if (kvs_reader_open_buf(img, len, 0, &r, &err) < 0)
		return err.msg[0] ? 0 : -1;
	for (uint32_t p = 0; p < kvs_reader_pools(r) && !bad; p++) {
		if (kvs_reader_pool(r, p, &info) < 0)
			continue;	/* a free entry */
		bad = info.off < KVS_META_SIZE || info.off >= len;
		for (uint64_t c = 0; c < info.nchunks && c < 64 && !bad; c++)
			for (uint64_t upto = 0; upto < 12 && !bad; upto += 3) {
				int st = kvs_reader_chunk(r, p, c, upto, &data, &clen, &window, &crc);

				if (st == KVS_CHUNK_OK) {
					bad = data < img || !clen || clen > info.d.chunk_bytes ||
					      clen > len || data > img + len - clen || window > upto ||
					      crc32c(0, data, clen) != crc;
					sink += data[0];
					(*ok)++;
				} else {
					bad = st != KVS_CHUNK_NONE && st != KVS_CHUNK_DAMAGED;
				}
			}
	}
	kvs_reader_close(r);
	return bad ? -1 : 1;
}

/* MOEFT_KVS_MUTATIONS (default 2000) images, each a valid store mutated
 * where the reader looks, cut short one time in eight, its checks mostly
 * recomputed; each in a buffer of exactly its size (one reused for the
 * full length), so that ASan sees a read past it. */
static void test_mutated_images(void)
{
	static const uint64_t spots[] = { 0, KVS_TABLE_OFF, KVS_TABLE_OFF + KVS_ENTRY_SIZE,
					   REGION0, REGION0 + KVS_DATA_ALIGN, 2 * REGION0 };
	const char *env = getenv("MOEFT_KVS_MUTATIONS");
	unsigned iters = env ? (unsigned)strtoul(env, NULL, 10) : 2000, opened = 0;
	uint64_t seed = 12345, ok = 0;
	uint8_t *img, *full, *m;
	char path[256];
	struct kvs *s;
	size_t len;
	int rc;

	test_path(path, sizeof path, "kv-mutate");
	s = open_store(path, LOG_A, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	add_pool(s, 1, 5 * CHUNK + 17, CHUNK, 0);
	add_pool(s, 2, 4 * CHUNK, 2 * CHUNK, 3);
	for (uint64_t w = 1; w <= 9; w++) {
		put(s, 0, w % 6, w % 6 == 5 ? 17 : CHUNK, w);
		put(s, 1, w % 2, 2 * CHUNK - (uint32_t)w, w);
	}
	kvs_close(s);
	img = test_slurp(path, &len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(img);
	unlink(path);
	CU_ASSERT_EQUAL_FATAL(read_all(img, len, &ok), 1);
	CU_ASSERT(ok > 0);
	full = malloc(len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(full);

	for (unsigned i = 0; i < iters; i++) {
		size_t n = len, flips = 1 + rng(&seed) % 8;

		if (rng(&seed) % 8 == 0)
			n = rng(&seed) % 4 ? rng(&seed) % (len + 1) : rng(&seed) % (KVS_META_SIZE + 64);
		m = n == len ? full : malloc(n ? n : 1);
		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		memcpy(m, img, n);
		for (size_t f = 0; f < flips && n; f++) {
			uint64_t at = (spots[rng(&seed) % 6] + rng(&seed) % 256) % n;

			if (rng(&seed) % 4)
				m[at] ^= (uint8_t)(1u << rng(&seed) % 8);
			else if (at + 8 <= n)
				put64(m + at, rng(&seed) % 2 ? UINT64_MAX - rng(&seed) % 4 : rng(&seed));
		}
		if (rng(&seed) % 4)
			reseal(m, n);
		rc = read_all(m, n, &ok);
		if (m != full)
			free(m);
		if (rc < 0) {
			CU_FAIL("the reader answered outside its image");
			break;
		}
		opened += (unsigned)rc;
	}
	printf("[%u images, %u opened, %llu chunks read] ", iters, opened, (unsigned long long)ok);
	CU_ASSERT(opened > iters / 10);
	free(full);
	free(img);
}

/* The store's path: the log's and ".kv", or nothing when it does not fit. */
static void test_path_beside_log(void)
{
	char buf[16];

	CU_ASSERT_EQUAL(kvs_path("/x/a.wal", buf, sizeof buf), 0);
	CU_ASSERT_STRING_EQUAL(buf, "/x/a.wal.kv");
	CU_ASSERT_EQUAL(kvs_path("/x/abcdefgh", buf, sizeof buf), 0);
	CU_ASSERT_STRING_EQUAL(buf, "/x/abcdefgh.kv");
	CU_ASSERT_EQUAL(kvs_path("/x/abcdefghi", buf, sizeof buf), 0);
	CU_ASSERT_STRING_EQUAL(buf, "/x/abcdefghi.kv");
	CU_ASSERT_EQUAL(kvs_path("/x/abcdefghij", buf, sizeof buf), -1);
	CU_ASSERT_STRING_EQUAL(buf, "");
	CU_ASSERT_EQUAL(kvs_path("a", buf, 0), -1);
}

static CU_TestInfo kvstore_tests[] = {
	{ "path beside the log", test_path_beside_log },
	{ "create and reopen", test_create_reopen },
	{ "one writer", test_busy },
	{ "not a regular file, bad arguments", test_not_regular },
	{ "store of another log", test_other_log },
	{ "not a store, bad header, old version, stub", test_not_a_store },
	{ "pools: add, find, regions, reopen", test_pools },
	{ "pool limit", test_pool_limit },
	{ "reclaim, gaps", test_reclaim },
	{ "put and read back", test_round_trip },
	{ "two slots a chunk", test_two_slots },
	{ "short last chunk, put arguments", test_short_last_chunk },
	{ "erase uncommitted windows", test_erase_uncommitted },
	{ "an aborted window's copies undone", test_unput },
	{ "damaged data", test_damaged_data },
	{ "damaged slot header", test_damaged_slot_header },
	{ "damaged pool table", test_damaged_table },
	{ "truncated file", test_truncated },
	{ "puts beside pool adds", test_threads },
	{ "NUMA", test_numa },
	{ "non-tmpfs file", test_non_tmpfs },
	{ "mutated images", test_mutated_images },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "kvstore", .pTests = kvstore_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}
