/*
 * test_copyin.c - restored KV from the KV store through chunk maps
 * (copyin.h, kvmap.h), on a stub device: the shim's device operations
 * below act on host memory, in order, at once.
 *
 * Random maps over a store file of random bytes (chunks of 4 KiB to
 * 4 MiB, a short last chunk, entries shorter than their chunk, runs of
 * zero chunks short and long, entries whose bytes follow each other in
 * the store) must arrive byte for byte, whole pools and ranges of them,
 * with data + zeros = the pool and the bytes read = the entries' lengths.
 * A byte changed in the store fails the copy, naming pool and chunk; a
 * slot header whose window word changed fails a copy again (ranges), but
 * not the first copy, which the CRC alone guards; a store cut short fails.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "copyin.h"
#include "crc32c.h"
#include "format.h"
#include "kvformat.h"
#include "kvmap.h"
#include "shim.h"
#include "testutil.h"

/* ---- the stub device: host memory --------------------------------------- */

int shim_dev_copy_to_device(uint64_t dev, const void *src, size_t len, void *stream)
{
	(void)stream;
	memcpy((void *)(uintptr_t)dev, src, len);
	return 0;
}

int shim_dev_zero(uint64_t dev, size_t len, void *stream)
{
	(void)stream;
	memset((void *)(uintptr_t)dev, 0, len);
	return 0;
}

static char token;	/* what the stub hands out as streams and events */

void shim_dev_bind_thread(void *context) { (void)context; }
void *shim_dev_current(void) { return NULL; }
int shim_dev_event(void **event) { *event = &token; return 0; }
void shim_dev_event_free(void *event) { (void)event; }
int shim_dev_stream(void **stream) { *stream = &token; return 0; }
void shim_dev_stream_free(void *stream) { (void)stream; }
int shim_dev_record(void *event, void *stream) { (void)event; (void)stream; return 0; }
int shim_dev_wait(void *stream, void *event) { (void)stream; (void)event; return 0; }
int shim_dev_sync(void *event) { (void)event; return 0; }
void shim_dev_host_free(void *host) { free(host); }

int shim_dev_host_alloc(size_t len, void **host, uint64_t *dev)
{
	*dev = 0;
	return (*host = malloc(len)) ? 0 : 1;
}

/* ---- the store ------------------------------------------------------------ */

#define STORE (48u << 20)
#define HDRS (1u << 20)         /* slot headers below (8 bytes a chunk of a
				   map), chunk bytes above */
#define WINDOW 9u

static uint8_t *store;
static char path[64];
static int fd = -1;
static uint64_t seed = UINT64_C(0x9e3779b97f4a7c15);

static uint64_t rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return seed;
}

static int make_store(void)
{
	snprintf(path, sizeof path, "/tmp/moeft-test-copyin-XXXXXX");
	if ((fd = mkstemp(path)) < 0 || !(store = malloc(STORE)))
		return -1;
	for (size_t i = 0; i < STORE; i += 8) {
		uint64_t v = rnd();

		memcpy(store + i, &v, 8);
	}
	return write(fd, store, STORE) == (ssize_t)STORE ? 0 : -1;
}

static int drop_store(void)
{
	close(fd);
	unlink(path);
	free(store);
	return 0;
}

/* Write the store's bytes [off, off + len) from store[] again. */
static void rewrite(uint64_t off, uint64_t len)
{
	CU_ASSERT_EQUAL_FATAL(pwrite(fd, store + off, len, (off_t)off), (ssize_t)len);
}

/* A pool of one map over the store, and its plan. */
struct fixture {
	struct restore_pool q;
	struct restore_plan p;
	uint8_t *want, *dev;
	uint64_t live;
};

/* A random map: `mode` picks how its zero chunks fall (0 every other at
 * random, 1 in runs, 2 rare, 3 none). */
static void make_map(struct fixture *x, uint64_t cb, uint64_t nch, uint64_t size, int mode)
{
	struct kvmap *m = &x->q.map;
	uint64_t prev = 0, c, cl, off;
	unsigned run = 1 + (unsigned)(rnd() % 40);
	struct stat st;
	uint32_t len;

	CU_ASSERT_EQUAL_FATAL(fstat(fd, &st), 0);
	*m = (struct kvmap){ .size = size, .chunk_bytes = cb, .nchunks = nch, .window = WINDOW };
	m->e = calloc(nch, sizeof *m->e);
	x->want = calloc(1, size);
	x->dev = malloc(size);
	CU_ASSERT_FATAL(m->e && x->want && x->dev);
	memset(x->dev, 0xcc, size);
	x->live = 0;
	for (c = 0; c < nch; c++) {
		cl = size - c * cb < cb ? size - c * cb : cb;
		if ((mode == 0 && rnd() % 2) || (mode == 1 && (c / run) % 2) ||
		    (mode == 2 && rnd() % 10 == 0))
			continue;
		len = (uint32_t)(rnd() % 4 ? cl : 1 + rnd() % cl);
		if (prev && rnd() % 2 && prev + len <= STORE)
			off = prev;	/* right after the chunk before */
		else
			off = HDRS + rnd() % (STORE - HDRS - len + 1);
		prev = off + len;
		m->e[c] = (struct kvmap_entry){ off, len, crc32c(0, store + off, len),
						8 * c, rnd() % (WINDOW + 1) };
		put64(store + m->e[c].hdr, (m->e[c].window + 1) | KVS_SLOT_FULL);
		rewrite(m->e[c].hdr, 8);
		memcpy(x->want + c * cb, store + off, len);
		x->live += len;
	}
	x->q = (struct restore_pool){ .no = 3, .fd = -1, .size = size, .chunk_bytes = cb,
				      .map = *m, .base = (uint64_t)(uintptr_t)x->dev };
	x->p = (struct restore_plan){ .window = WINDOW, .npools = 1, .pools = &x->q,
				      .store_fd = fd, .store_dev = (uint64_t)st.st_dev,
				      .store_ino = (uint64_t)st.st_ino, .store_bytes = STORE };
}

static void free_map(struct fixture *x)
{
	free(x->q.map.e);
	free(x->want);
	free(x->dev);
}

static void test_random_maps(void)
{
	struct copyin_stats st;
	char err[400];
	void *done;

	for (int it = 0; it < 80; it++) {
		uint64_t cb = UINT64_C(4096) << (rnd() % 11);
		uint64_t nch = 1 + rnd() % (it % 3 ? 64 : 2000), size;
		struct fixture x;

		if (nch * cb > (64u << 20))
			nch = (64u << 20) / cb;
		size = nch * cb - (rnd() % 2 ? rnd() % cb : 0);
		make_map(&x, cb, nch, size, (int)(rnd() % 4));
		CU_ASSERT_EQUAL_FATAL(copyin_pools(&x.p, NULL, &done, &st, err, sizeof err), 0);
		CU_ASSERT_EQUAL(memcmp(x.dev, x.want, size), 0);
		CU_ASSERT_EQUAL(st.data + st.zero, size);
		CU_ASSERT_EQUAL(st.live, x.live);
		CU_ASSERT(st.data >= x.live);
		for (int r = 0; r < 12; r++) {
			uint64_t off = rnd() % size, len = 1 + rnd() % (size - off);
			uint8_t *to;

			if (rnd() % 2 && len > 3 * cb)
				len = 1 + rnd() % (3 * cb);
			CU_ASSERT_PTR_NOT_NULL_FATAL(to = malloc(len));
			CU_ASSERT_EQUAL_FATAL(copyin_ranges(&x.p, &(struct copyin_range){
							    0, off, len, (uint64_t)(uintptr_t)to },
						    1, NULL, err, sizeof err), 0);
			CU_ASSERT_EQUAL(memcmp(to, x.want + off, len), 0);
			free(to);
		}
		free_map(&x);
	}
}

/* The first chunk with bytes of x's map. */
static uint64_t first_live(const struct fixture *x)
{
	uint64_t c = 0;

	while (!x->q.map.e[c].len)
		c++;
	return c;
}

static void test_changed(void)
{
	struct copyin_stats st;
	struct fixture x;
	char err[400], want[160];
	uint64_t c;
	uint8_t *to = malloc(16384);
	void *done;

	CU_ASSERT_PTR_NOT_NULL_FATAL(to);
	make_map(&x, 16384, 64, 64 * 16384, 2);
	c = first_live(&x);
	/* A byte of chunk c's copy, changed in the file. */
	store[x.q.map.e[c].off] ^= 0x5a;
	rewrite(x.q.map.e[c].off, 1);
	CU_ASSERT_EQUAL(copyin_pools(&x.p, NULL, &done, &st, err, sizeof err), -1);
	snprintf(want, sizeof want, "pool 3 chunk %llu: its bytes in the KV store fail their "
		 "CRC-32C", (unsigned long long)c);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
	store[x.q.map.e[c].off] ^= 0x5a;
	rewrite(x.q.map.e[c].off, 1);

	/* Its slot's window word changed (a writer took the slot): a first
	 * copy goes by the CRC, a copy again is refused. */
	put64(store + x.q.map.e[c].hdr, 0);
	rewrite(x.q.map.e[c].hdr, 8);
	CU_ASSERT_EQUAL(copyin_pools(&x.p, NULL, &done, &st, err, sizeof err), 0);
	CU_ASSERT_EQUAL(copyin_ranges(&x.p, &(struct copyin_range){ 0, c * 16384, 16384,
								   (uint64_t)(uintptr_t)to },
				      1, NULL, err, sizeof err), -1);
	snprintf(want, sizeof want, "pool 3 chunk %llu: its copy of window %llu in the KV store was "
		 "written over since the restore", (unsigned long long)c,
		 (unsigned long long)x.q.map.e[c].window);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
	put64(store + x.q.map.e[c].hdr, (x.q.map.e[c].window + 1) | KVS_SLOT_FULL);
	rewrite(x.q.map.e[c].hdr, 8);
	CU_ASSERT_EQUAL(copyin_ranges(&x.p, &(struct copyin_range){ 0, c * 16384, 16384,
								   (uint64_t)(uintptr_t)to },
				      1, NULL, err, sizeof err), 0);
	CU_ASSERT_EQUAL(memcmp(to, x.want + c * 16384, 16384), 0);

	/* The store cut short under the map: the read fails. */
	CU_ASSERT_EQUAL_FATAL(ftruncate(fd, HDRS), 0);
	CU_ASSERT_EQUAL(copyin_pools(&x.p, NULL, &done, &st, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "the store ends there (changed since the restore)"));
	CU_ASSERT_EQUAL_FATAL(ftruncate(fd, STORE), 0);
	rewrite(HDRS, STORE - HDRS);
	free_map(&x);
	free(to);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "random maps, whole pools and ranges, byte for byte", test_random_maps },
		{ "a changed byte, a taken slot, a short store", test_changed },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "copyin", make_store, drop_store, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
