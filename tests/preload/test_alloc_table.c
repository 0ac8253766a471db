/*
 * test_alloc_table.c - alloc_table.c: insert/find/remove and their
 * boundaries, overlap and unknown-free rejection, a full table, the ordinal
 * rule, VMM map/unmap, address-order iteration, roles, the ALLOC record,
 * a 4-thread stress, and call-site fingerprints, including their stability
 * across two processes under ASLR (the binary re-executes itself with
 * --fingerprints to get values from fresh processes).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "alloc_table.h"
#include "fingerprint.h"
#include "record.h"
#include "testutil.h"

#define MiB (UINT64_C(1) << 20)
#define FP_A UINT64_C(0xaaaa)
#define FP_B UINT64_C(0xbbbb)

static struct alloc_table *at;

static int setup(void)
{
	return !(at = at_create(64));
}

static int teardown(void)
{
	at_destroy(at);
	at = NULL;
	return 0;
}

/* Empty the shared table (tests of one suite run on it in turn). */
static void clear(void)
{
	struct alloc_info a;

	while (at_next(at, 0, &a) == 0)
		CU_ASSERT_EQUAL_FATAL(at_remove(at, a.base, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_count(at), 0);
}

static uint64_t find_id(uint64_t addr)
{
	struct alloc_info a;

	return at_find(at, addr, &a) == AT_OK ? a.alloc_id : 0;
}

/* ---- table ------------------------------------------------------------ */

static void test_create_limits(void)
{
	struct alloc_table *t;

	CU_ASSERT_PTR_NULL(at_create(0));
	CU_ASSERT_PTR_NULL(at_create((1u << 24) + 1));
	CU_ASSERT_PTR_NOT_NULL_FATAL(t = at_create(1));
	at_destroy(t);
	at_destroy(NULL);
	CU_ASSERT_EQUAL(at_insert(NULL, 0x1000, 1, ALLOC_API_CUDA_MALLOC, 0, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_find(NULL, 0x1000, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_count(NULL), 0);
}

static void test_insert_find_remove(void)
{
	struct alloc_info a, b;
	uint64_t base = UINT64_C(0x7f0000000000);

	clear();
	CU_ASSERT_EQUAL(at_find(at, base, &a), AT_ENOENT);
	CU_ASSERT_EQUAL_FATAL(at_insert(at, base, 3 * MiB, ALLOC_API_CUDA_MALLOC_ASYNC, FP_A, &a), AT_OK);
	CU_ASSERT(a.alloc_id > 0);
	CU_ASSERT_EQUAL(a.base, base);
	CU_ASSERT_EQUAL(a.size, 3 * MiB);
	CU_ASSERT_EQUAL(a.fingerprint, FP_A);
	CU_ASSERT_EQUAL(a.handle, 0);
	CU_ASSERT_EQUAL(a.ordinal, 0);
	CU_ASSERT_EQUAL(a.api, ALLOC_API_CUDA_MALLOC_ASYNC);
	CU_ASSERT_EQUAL(a.role, ALLOC_ROLE_OTHER);
	CU_ASSERT_EQUAL(at_count(at), 1);

	memset(&b, 0, sizeof b);
	CU_ASSERT_EQUAL(at_find(at, base + MiB, &b), AT_OK);
	CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
	CU_ASSERT_EQUAL(at_find(at, base + MiB, NULL), AT_OK);

	memset(&b, 0, sizeof b);
	CU_ASSERT_EQUAL(at_remove(at, base, &b), AT_OK);
	CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
	CU_ASSERT_EQUAL(at_count(at), 0);
	CU_ASSERT_EQUAL(at_find(at, base, NULL), AT_ENOENT);
	CU_ASSERT_EQUAL(at_find(at, base + MiB, NULL), AT_ENOENT);
}

static void test_ids_monotonic(void)
{
	struct alloc_info a, b, c;

	clear();
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &a), AT_OK);
	CU_ASSERT_EQUAL_FATAL(at_remove(at, 0x10000, NULL), AT_OK);
	/* Same place, same everything: still a new id. */
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &b), AT_OK);
	CU_ASSERT_EQUAL(b.alloc_id, a.alloc_id + 1);
	/* A rejected insert consumes no id. */
	CU_ASSERT_EQUAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_EOVERLAP);
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x20000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &c), AT_OK);
	CU_ASSERT_EQUAL(c.alloc_id, b.alloc_id + 1);
}

static void test_boundaries(void)
{
	uint64_t top = UINT64_MAX - 0x1000;
	struct alloc_info a, b, c;

	clear();
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x1000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &a), AT_OK);
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x2000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &b), AT_OK);
	CU_ASSERT_EQUAL(find_id(0x0fff), 0);
	CU_ASSERT_EQUAL(find_id(0x1000), a.alloc_id);           /* base */
	CU_ASSERT_EQUAL(find_id(0x1fff), a.alloc_id);           /* base + size - 1 */
	CU_ASSERT_EQUAL(find_id(0x2000), b.alloc_id);           /* a's base + size */
	CU_ASSERT_EQUAL(find_id(0x2fff), b.alloc_id);
	CU_ASSERT_EQUAL(find_id(0x3000), 0);                    /* b's base + size */
	CU_ASSERT_EQUAL(find_id(0), 0);
	CU_ASSERT_EQUAL(find_id(UINT64_MAX), 0);

	/* The highest range there is ends at UINT64_MAX (exclusive). */
	CU_ASSERT_EQUAL_FATAL(at_insert(at, top, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &c), AT_OK);
	CU_ASSERT_EQUAL(find_id(top), c.alloc_id);
	CU_ASSERT_EQUAL(find_id(UINT64_MAX - 1), c.alloc_id);
	CU_ASSERT_EQUAL(find_id(UINT64_MAX), 0);
	CU_ASSERT_EQUAL(find_id(top - 1), 0);
	/* One byte in range 0 .. 0: the lowest there is. */
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0, 1, ALLOC_API_CUDA_MALLOC, FP_A, &a), AT_OK);
	CU_ASSERT_EQUAL(find_id(0), a.alloc_id);
	CU_ASSERT_EQUAL(find_id(1), 0);

	CU_ASSERT_EQUAL(at_insert(at, 0x9000, 0, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_insert(at, top + 1, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_insert(at, 0x9000, UINT64_MAX, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_count(at), 4);
}

static void test_overlap_rejected(void)
{
	static const struct {
		uint64_t base, size;
	} bad[] = {
		{ 0x10000, 0x1000 },    /* same range */
		{ 0x10000, 1 },         /* same base, shorter */
		{ 0x10800, 0x100 },     /* inside */
		{ 0x0f000, 0x1001 },    /* over the start */
		{ 0x10fff, 0x1000 },    /* over the end */
		{ 0x0f000, 0x3000 },    /* around */
	};
	struct alloc_info a, b;

	clear();
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &a), AT_OK);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CU_ASSERT_EQUAL(at_insert(at, bad[i].base, bad[i].size, ALLOC_API_CUDA_MALLOC, FP_B, NULL),
				AT_EOVERLAP);
		CU_ASSERT_EQUAL(at_map(at, bad[i].base, bad[i].size, 7, FP_B, NULL), AT_EOVERLAP);
	}
	CU_ASSERT_EQUAL(at_count(at), 1);
	CU_ASSERT_EQUAL(at_find(at, 0x10000, &b), AT_OK);
	CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
	/* Touching on either side is no overlap. */
	CU_ASSERT_EQUAL(at_insert(at, 0x0f000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_B, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_insert(at, 0x11000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_B, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_count(at), 3);
}

static void test_unknown_free(void)
{
	clear();
	CU_ASSERT_EQUAL(at_remove(at, 0x10000, NULL), AT_ENOENT);
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_remove(at, 0x10001, NULL), AT_ENOENT);      /* interior */
	CU_ASSERT_EQUAL(at_remove(at, 0x0ffff, NULL), AT_ENOENT);
	CU_ASSERT_EQUAL(at_remove(at, 0x11000, NULL), AT_ENOENT);
	CU_ASSERT_EQUAL(at_count(at), 1);
	CU_ASSERT_EQUAL(at_remove(at, 0x10000, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_remove(at, 0x10000, NULL), AT_ENOENT);      /* double free */
	CU_ASSERT_EQUAL(at_remove(NULL, 0x10000, NULL), AT_EINVAL);
}

static void test_bad_api(void)
{
	clear();
	CU_ASSERT_EQUAL(at_insert(at, 0x10000, 0x1000, 0, FP_A, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_VMM, FP_A, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_insert(at, 0x10000, 0x1000, ALLOC_API_COUNT, FP_A, NULL), AT_EINVAL);
	CU_ASSERT_EQUAL(at_count(at), 0);
}

static void test_full(void)
{
	struct alloc_table *t = at_create(3);
	struct alloc_info a;

	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	for (uint64_t i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(at_insert(t, (i + 1) * MiB, MiB, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_insert(t, 8 * MiB, MiB, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_EFULL);
	CU_ASSERT_EQUAL(at_map(t, 8 * MiB, MiB, 1, FP_A, NULL), AT_EFULL);
	CU_ASSERT_EQUAL(at_count(t), 3);
	CU_ASSERT_EQUAL(at_find(t, 8 * MiB, NULL), AT_ENOENT);
	CU_ASSERT_EQUAL(at_remove(t, 2 * MiB, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_insert(t, 8 * MiB, MiB, ALLOC_API_CUDA_MALLOC, FP_A, &a), AT_OK);
	CU_ASSERT_EQUAL(a.ordinal, 1);  /* the hole #1 left */
	CU_ASSERT_EQUAL(at_find(t, 8 * MiB + 5, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_find(t, 1 * MiB, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_find(t, 3 * MiB, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_count(t), 3);
	at_destroy(t);
}

/* Insert at slot k (k MiB up), returning the ordinal. */
static int64_t ord_at(uint64_t k, uint64_t size, uint64_t fp)
{
	struct alloc_info a;

	if (at_insert(at, k * 64 * MiB, size, ALLOC_API_CUDA_MALLOC, fp, &a) != AT_OK)
		return -1;
	return a.ordinal;
}

static void test_ordinals(void)
{
	clear();
	/* Same fingerprint and size: 0, 1, 2. */
	CU_ASSERT_EQUAL(ord_at(1, MiB, FP_A), 0);
	CU_ASSERT_EQUAL(ord_at(2, MiB, FP_A), 1);
	CU_ASSERT_EQUAL(ord_at(3, MiB, FP_A), 2);
	/* Another size or another fingerprint is another group. */
	CU_ASSERT_EQUAL(ord_at(4, 2 * MiB, FP_A), 0);
	CU_ASSERT_EQUAL(ord_at(5, MiB, FP_B), 0);
	CU_ASSERT_EQUAL(ord_at(6, 2 * MiB, FP_A), 1);
	/* Free #1: the next one takes its ordinal, not 3. */
	CU_ASSERT_EQUAL(at_remove(at, 2 * 64 * MiB, NULL), AT_OK);
	CU_ASSERT_EQUAL(ord_at(7, MiB, FP_A), 1);
	CU_ASSERT_EQUAL(ord_at(8, MiB, FP_A), 3);
	/* Free #0 and #2: lowest hole first. */
	CU_ASSERT_EQUAL(at_remove(at, 3 * 64 * MiB, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_remove(at, 1 * 64 * MiB, NULL), AT_OK);
	CU_ASSERT_EQUAL(ord_at(9, MiB, FP_A), 0);
	CU_ASSERT_EQUAL(ord_at(10, MiB, FP_A), 2);
	CU_ASSERT_EQUAL(ord_at(11, MiB, FP_A), 4);
	/* The other groups never moved. */
	CU_ASSERT_EQUAL(ord_at(12, MiB, FP_B), 1);
	CU_ASSERT_EQUAL(ord_at(13, 2 * MiB, FP_A), 2);
}

/*
 * What the rule is for: two runs of one program, the second making and
 * freeing transient allocations of the same group (caching-allocator churn,
 * a profiling pass) before the one restore must find, give it the same
 * ordinal.  A counter would give 1 in the first run and 5 in the second.
 */
static void test_ordinals_two_runs(void)
{
	struct alloc_info pool[2];
	uint64_t gib = 1024 * MiB, va;

	for (int run = 0; run < 2; run++) {
		clear();
		va = (uint64_t)(run + 1) << 40;         /* ASLR: other addresses */
		CU_ASSERT_EQUAL(at_insert(at, va, 32 * MiB, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
		for (int i = 0; i < 2 * run; i++) {
			CU_ASSERT_EQUAL(at_insert(at, va + gib, 32 * MiB, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
			CU_ASSERT_EQUAL(at_insert(at, va + 2 * gib, 32 * MiB, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
			CU_ASSERT_EQUAL(at_remove(at, va + 2 * gib, NULL), AT_OK);
			CU_ASSERT_EQUAL(at_remove(at, va + gib, NULL), AT_OK);
		}
		CU_ASSERT_EQUAL(at_insert(at, va + 3 * gib, 32 * MiB, ALLOC_API_CUDA_MALLOC, FP_A,
					  &pool[run]), AT_OK);
	}
	CU_ASSERT_EQUAL(pool[0].ordinal, 1);
	CU_ASSERT_EQUAL(pool[1].ordinal, 1);
	CU_ASSERT_NOT_EQUAL(pool[0].alloc_id, pool[1].alloc_id);
}

static void test_iteration_order(void)
{
	static const uint64_t order[] = { 5, 1, 9, 3, 7, 2, 8, 4, 6 };
	struct alloc_info a;
	uint64_t expect = 1;
	unsigned n = 0;

	clear();
	for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
		CU_ASSERT_EQUAL(at_insert(at, order[i] * MiB, order[i] * 0x1000, ALLOC_API_CU_MEM_ALLOC,
					  order[i], NULL), AT_OK);
	CU_ASSERT_EQUAL(at_remove(at, 4 * MiB, NULL), AT_OK);
	for (a.base = 0, a.size = 0; at_next(at, a.base + a.size, &a) == 0; n++) {
		if (expect == 4)
			expect++;
		CU_ASSERT_EQUAL(a.base, expect * MiB);
		CU_ASSERT_EQUAL(a.size, expect * 0x1000);
		CU_ASSERT_EQUAL(a.fingerprint, expect);
		expect++;
	}
	CU_ASSERT_EQUAL(n, 8);
	CU_ASSERT_EQUAL(at_count(at), 8);
	/* From an address inside an entry: the next one up. */
	CU_ASSERT_EQUAL(at_next(at, 2 * MiB + 1, &a), AT_OK);
	CU_ASSERT_EQUAL(a.base, 3 * MiB);
	CU_ASSERT_EQUAL(at_next(at, 3 * MiB, &a), AT_OK);
	CU_ASSERT_EQUAL(a.base, 3 * MiB);
	CU_ASSERT_EQUAL(at_next(at, 9 * MiB + 1, &a), AT_ENOENT);
}

static void test_roles(void)
{
	struct alloc_info a, b;

	clear();
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x100000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &a), AT_OK);
	CU_ASSERT_EQUAL_FATAL(at_insert(at, 0x200000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &b), AT_OK);
	CU_ASSERT_EQUAL(at_set_role(at, b.alloc_id, ALLOC_ROLE_KV_POOL), AT_OK);
	CU_ASSERT_EQUAL(at_find(at, 0x200800, &b), AT_OK);
	CU_ASSERT_EQUAL(b.role, ALLOC_ROLE_KV_POOL);
	CU_ASSERT_EQUAL(at_find(at, 0x100800, &a), AT_OK);
	CU_ASSERT_EQUAL(a.role, ALLOC_ROLE_OTHER);
	/* Other writes keep it. */
	CU_ASSERT_EQUAL(at_insert(at, 0x150000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_remove(at, 0x100000, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_find(at, 0x200000, &b), AT_OK);
	CU_ASSERT_EQUAL(b.role, ALLOC_ROLE_KV_POOL);
	CU_ASSERT_EQUAL(at_set_role(at, b.alloc_id, ALLOC_ROLE_COUNT), AT_EINVAL);
	CU_ASSERT_EQUAL(at_set_role(at, a.alloc_id, ALLOC_ROLE_WEIGHTS), AT_ENOENT);  /* freed */
	CU_ASSERT_EQUAL(at_set_role(at, 12345, ALLOC_ROLE_WEIGHTS), AT_ENOENT);
	CU_ASSERT_EQUAL(at_remove(at, 0x200000, &b), AT_OK);
	CU_ASSERT_EQUAL(b.role, ALLOC_ROLE_KV_POOL);
	/* A new allocation at the same place starts as OTHER again. */
	CU_ASSERT_EQUAL(at_insert(at, 0x200000, 0x1000, ALLOC_API_CUDA_MALLOC, FP_A, &b), AT_OK);
	CU_ASSERT_EQUAL(b.role, ALLOC_ROLE_OTHER);
}

/* An expandable segment: one reserved range, 2 MiB handles mapped in turn. */
static void test_vmm(void)
{
	uint64_t va = UINT64_C(0x7f4000000000), chunk = 2 * MiB;
	struct alloc_info a;
	unsigned n = 0;

	clear();
	for (uint64_t i = 0; i < 4; i++) {
		CU_ASSERT_EQUAL(at_map(at, va + i * chunk, chunk, 0x100 + i, FP_A, &a), AT_OK);
		CU_ASSERT_EQUAL(a.api, ALLOC_API_VMM);
		CU_ASSERT_EQUAL(a.handle, 0x100 + i);
		CU_ASSERT_EQUAL(a.ordinal, i);
	}
	/* A cudaMalloc right after the range, as if the driver put it there. */
	CU_ASSERT_EQUAL(at_insert(at, va + 4 * chunk, chunk, ALLOC_API_CUDA_MALLOC, FP_A, NULL), AT_OK);
	CU_ASSERT_EQUAL(at_find(at, va + 2 * chunk + 17, &a), AT_OK);
	CU_ASSERT_EQUAL(a.handle, 0x102);
	CU_ASSERT_EQUAL(at_map(at, va + chunk + MiB, chunk, 9, FP_A, NULL), AT_EOVERLAP);

	/* An unmap that cuts a mapping in two removes nothing. */
	CU_ASSERT_EQUAL(at_unmap(at, va + MiB, chunk, &a), AT_ENOENT);
	CU_ASSERT_EQUAL(at_count(at), 5);
	/* One mapping exactly. */
	CU_ASSERT_EQUAL(at_unmap(at, va + chunk, chunk, &a), AT_OK);
	CU_ASSERT_EQUAL(a.base, va + chunk);
	CU_ASSERT_EQUAL(a.handle, 0x101);
	CU_ASSERT_EQUAL(at_unmap(at, va + chunk, chunk, &a), AT_ENOENT);
	CU_ASSERT_EQUAL(at_find(at, va + chunk, NULL), AT_ENOENT);
	/* Remapped (handle kept across sleep/wake): the freed ordinal again. */
	CU_ASSERT_EQUAL(at_map(at, va + chunk, chunk, 0x101, FP_A, &a), AT_OK);
	CU_ASSERT_EQUAL(a.ordinal, 1);
	/* The whole segment in one cuMemUnmap, cudaMalloc range included:
	 * mappings come out in address order and the cudaMalloc stays. */
	while (at_unmap(at, va, 5 * chunk, &a) == AT_OK) {
		CU_ASSERT_EQUAL(a.base, va + n * chunk);
		CU_ASSERT_EQUAL(a.api, ALLOC_API_VMM);
		n++;
	}
	CU_ASSERT_EQUAL(n, 4);
	CU_ASSERT_EQUAL(at_count(at), 1);
	CU_ASSERT_EQUAL(at_find(at, va + 4 * chunk, &a), AT_OK);
	CU_ASSERT_EQUAL(a.api, ALLOC_API_CUDA_MALLOC);
	CU_ASSERT_EQUAL(at_unmap(at, va, 0, &a), AT_EINVAL);
	CU_ASSERT_EQUAL(at_unmap(at, UINT64_MAX, 2, &a), AT_EINVAL);
}

static void test_record(void)
{
	uint8_t buf[ALLOC_PAYLOAD_SIZE];
	struct alloc_info a;
	struct rec_alloc r, d;

	clear();
	CU_ASSERT_EQUAL_FATAL(at_insert(at, UINT64_C(0x7f1234560000), 5 * MiB,
					ALLOC_API_CU_MEM_ALLOC_ASYNC, UINT64_C(0x0123456789abcdef), NULL), AT_OK);
	CU_ASSERT_EQUAL_FATAL(at_insert(at, UINT64_C(0x7f1234a60000), 5 * MiB,
					ALLOC_API_CU_MEM_ALLOC_ASYNC, UINT64_C(0x0123456789abcdef), &a), AT_OK);
	CU_ASSERT_EQUAL_FATAL(at_set_role(at, a.alloc_id, ALLOC_ROLE_KV_POOL), AT_OK);
	CU_ASSERT_EQUAL_FATAL(at_find(at, a.base, &a), AT_OK);
	at_to_record(&a, &r);
	rec_alloc_encode(buf, &r);
	CU_ASSERT_EQUAL_FATAL(rec_alloc_decode(buf, sizeof buf, &d), 0);
	CU_ASSERT_EQUAL(d.alloc_id, a.alloc_id);
	CU_ASSERT_EQUAL(d.base, UINT64_C(0x7f1234a60000));
	CU_ASSERT_EQUAL(d.size, 5 * MiB);
	CU_ASSERT_EQUAL(d.fingerprint, UINT64_C(0x0123456789abcdef));
	CU_ASSERT_EQUAL(d.ordinal, 1);
	CU_ASSERT_EQUAL(d.api, ALLOC_API_CU_MEM_ALLOC_ASYNC);
	CU_ASSERT_EQUAL(d.role, ALLOC_ROLE_KV_POOL);
}

static void test_strerror(void)
{
	static const int codes[] = { AT_OK, AT_EINVAL, AT_EFULL, AT_EOVERLAP, AT_ENOENT, 42 };

	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		for (size_t j = 0; j < i; j++)
			CU_ASSERT_STRING_NOT_EQUAL(at_strerror(codes[i]), at_strerror(codes[j]));
}

/* ---- concurrency ------------------------------------------------------ */

#define STRESS_THREADS 4
#define STRESS_SLOTS 48         /* per thread: 4 x 48 fill a 192-entry table */
#define STRESS_OPS 100000

struct worker {
	struct alloc_table *t;
	unsigned id;
	uint64_t rng;
	uint64_t alloc_id[STRESS_SLOTS];       /* 0: not live */
	uint32_t ordinal[STRESS_SLOTS];
	unsigned live, inserts, removes, errors;
};

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Thread w owns [(w + 1) << 40, +STRESS_SLOTS MiB); slot k is at k MiB,
 * (k % 3 + 1) pages long, in group (fingerprint w * 8 + k % 2, size). */
static uint64_t stress_base(unsigned w, unsigned k)
{
	return ((uint64_t)(w + 1) << 40) + k * MiB;
}

static uint64_t stress_size(unsigned k)
{
	return (k % 3 + 1) * 4096;
}

static uint64_t stress_fp(unsigned w, unsigned k)
{
	return w * 8 + k % 2;
}

/* The ordinal the rule gives slot k now: the worker's groups are its own. */
static uint32_t model_ordinal(const struct worker *w, unsigned k)
{
	uint32_t o = 0;
	unsigned j;

	for (;;) {
		for (j = 0; j < STRESS_SLOTS; j++)
			if (w->alloc_id[j] && j % 6 == k % 6 && w->ordinal[j] == o)
				break;
		if (j == STRESS_SLOTS)
			return o;
		o++;
	}
}

static void *stress_thread(void *arg)
{
	struct worker *w = arg;
	struct alloc_info a;
	unsigned k;
	uint64_t r, addr;

	for (unsigned op = 0; op < STRESS_OPS; op++) {
		r = xorshift(&w->rng);
		k = r % STRESS_SLOTS;
		if (w->alloc_id[k]) {
			addr = stress_base(w->id, k) + (r >> 32) % stress_size(k);
			if (at_find(w->t, addr, &a) != AT_OK || a.alloc_id != w->alloc_id[k])
				w->errors++;
			if (r & (1 << 20)) {
				if (at_remove(w->t, stress_base(w->id, k), &a) != AT_OK ||
				    a.alloc_id != w->alloc_id[k])
					w->errors++;
				w->alloc_id[k] = 0;
				w->live--;
				w->removes++;
			}
		} else {
			if (at_find(w->t, stress_base(w->id, k), NULL) != AT_ENOENT)
				w->errors++;
			if (at_insert(w->t, stress_base(w->id, k), stress_size(k), ALLOC_API_CUDA_MALLOC,
				      stress_fp(w->id, k), &a) != AT_OK ||
			    a.ordinal != model_ordinal(w, k)) {
				w->errors++;
				continue;
			}
			w->alloc_id[k] = a.alloc_id;
			w->ordinal[k] = a.ordinal;
			w->live++;
			w->inserts++;
		}
		/* Someone else's range: whatever it finds must contain addr. */
		addr = stress_base((w->id + 1 + (unsigned)(r >> 40) % 3) % STRESS_THREADS,
				   (unsigned)(r >> 48) % STRESS_SLOTS) + (r >> 8) % 8192;
		if (at_find(w->t, addr, &a) == AT_OK && (addr < a.base || addr - a.base >= a.size))
			w->errors++;
	}
	return NULL;
}

static void test_stress(void)
{
	struct alloc_table *t = at_create(STRESS_THREADS * STRESS_SLOTS);
	static struct worker w[STRESS_THREADS];
	pthread_t tid[STRESS_THREADS];
	struct alloc_info a, prev = { 0 };
	unsigned live = 0, n = 0, errors = 0, owner, k;
	uint64_t inserts = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	memset(w, 0, sizeof w);
	for (unsigned i = 0; i < STRESS_THREADS; i++) {
		w[i] = (struct worker){ .t = t, .id = i, .rng = 0x9e3779b97f4a7c15u * (i + 1) };
		CU_ASSERT_EQUAL_FATAL(pthread_create(&tid[i], NULL, stress_thread, &w[i]), 0);
	}
	for (unsigned i = 0; i < STRESS_THREADS; i++) {
		pthread_join(tid[i], NULL);
		errors += w[i].errors;
		live += w[i].live;
		inserts += w[i].inserts;
		CU_ASSERT_EQUAL(w[i].inserts - w[i].removes, w[i].live);
	}
	CU_ASSERT_EQUAL(errors, 0);
	CU_ASSERT(inserts > STRESS_THREADS * STRESS_OPS / 4);
	CU_ASSERT_EQUAL(at_count(t), live);
	/* Every entry left is one a worker believes live, in address order. */
	for (a.base = 0, a.size = 0; at_next(t, a.base + a.size, &a) == 0; n++) {
		CU_ASSERT(a.base > prev.base || n == 0);
		owner = (unsigned)(a.base >> 40) - 1;
		k = (unsigned)((a.base & ((UINT64_C(1) << 40) - 1)) / MiB);
		CU_ASSERT_FATAL(owner < STRESS_THREADS && k < STRESS_SLOTS);
		CU_ASSERT_EQUAL(a.alloc_id, w[owner].alloc_id[k]);
		CU_ASSERT_EQUAL(a.ordinal, w[owner].ordinal[k]);
		prev = a;
	}
	CU_ASSERT_EQUAL(n, live);
	at_destroy(t);
}

/* ---- fingerprints ----------------------------------------------------- */

/*
 * The fixed call sites.  Each is noinline, does something after the call
 * so it cannot become a tail call (which would drop its frame), and bumps
 * its own counter so the compiler cannot fold identical bodies into one.
 */
static _Atomic unsigned calls_a, calls_b, calls_wa, calls_wb;

static __attribute__((noinline)) uint64_t site_a(void)
{
	uint64_t fp = fingerprint_callsite(0);

	calls_a++;
	return fp;
}

static __attribute__((noinline)) uint64_t site_b(void)
{
	uint64_t fp = fingerprint_callsite(0);

	calls_b++;
	return fp;
}

static __attribute__((noinline)) uint64_t wrap_a(unsigned skip)
{
	uint64_t fp = fingerprint_callsite(skip);

	calls_wa++;
	return fp;
}

static __attribute__((noinline)) uint64_t wrap_b(unsigned skip)
{
	uint64_t fp = fingerprint_callsite(skip);

	calls_wb++;
	return fp;
}

/* wrap_a then wrap_b, called through one indirect call instruction (an
 * unknown trip count and no array bound to infer one from: no unrolling). */
static __attribute__((noinline)) void call_wraps(unsigned skip, uint64_t *out)
{
	static uint64_t (*const fn[2])(unsigned) = { wrap_a, wrap_b };
	static volatile unsigned n = 2;

	for (unsigned i = 0; i < n; i++)
		out[i] = fn[i % 2](skip);
}

/* A call site below a libc frame: qsort calls the comparator. */
static uint64_t qsort_fp;

static int qsort_cmp(const void *x, const void *y)
{
	if (!qsort_fp)
		qsort_fp = fingerprint_callsite(0);
	return memcmp(x, y, 1);
}

static __attribute__((noinline)) uint64_t site_in_libc(void)
{
	char v[2] = { 2, 1 };

	qsort_fp = 0;
	qsort(v, 2, 1, qsort_cmp);
	return qsort_fp;
}

static void no_hook(unsigned i)
{
}

/*
 * n calls of site_a from one call instruction, hook(i) before each.  The
 * volatile bound and hook keep the compiler from unrolling or unswitching
 * the loop into several call sites, which would change the stack.
 */
static __attribute__((noinline)) void repeat_site_a(unsigned n, uint64_t *out,
						    void (*before)(unsigned))
{
	volatile unsigned bound = n;
	void (*volatile hook)(unsigned) = before;

	for (unsigned i = 0; i < bound; i++) {
		hook(i);
		out[i] = site_a();
	}
}

static void test_fp_same_site(void)
{
	uint64_t fp[3];

	repeat_site_a(3, fp, no_hook);
	CU_ASSERT_EQUAL(fp[0], fp[1]);
	CU_ASSERT_EQUAL(fp[1], fp[2]);
}

static void test_fp_different_sites(void)
{
	uint64_t a = site_a(), b = site_b(), a2 = site_a();

	CU_ASSERT_NOT_EQUAL(a, b);              /* another function */
	CU_ASSERT_NOT_EQUAL(a, a2);             /* same function, called from elsewhere */
	CU_ASSERT_NOT_EQUAL(site_in_libc(), site_in_libc());
}

static void test_fp_skip(void)
{
	uint64_t fp0[2], fp1[2], again[2];

	call_wraps(0, fp0);
	call_wraps(1, fp1);
	call_wraps(1, again);
	CU_ASSERT_NOT_EQUAL(fp0[0], fp0[1]);    /* the wrappers' own call sites */
	CU_ASSERT_EQUAL(fp1[0], fp1[1]);        /* skipped: the shared call site */
	CU_ASSERT_NOT_EQUAL(fp1[0], fp0[0]);
	CU_ASSERT_NOT_EQUAL(fp1[0], again[0]);  /* call_wraps called from elsewhere */
	CU_ASSERT_EQUAL(calls_wa, calls_wb);
	/* Skipping past the whole stack still gives a value, the same one. */
	CU_ASSERT_EQUAL(wrap_a(1000), wrap_b(1000));
}

#define FP_LOOPS 2000

/* out[0]: the first value; out[1]: how many later calls differed. */
static void *fp_thread(void *arg)
{
	uint64_t *out = arg, fp[FP_LOOPS];

	repeat_site_a(FP_LOOPS, fp, no_hook);
	out[0] = fp[0];
	out[1] = 0;
	for (int i = 1; i < FP_LOOPS; i++)
		out[1] += fp[i] != fp[0];
	return NULL;
}

/* Threads share the cache and the module table; the same stack (thread
 * entry, fp_thread, site_a) must give the same value in each. */
static void test_fp_threads(void)
{
	pthread_t tid[4];
	uint64_t res[4][2];

	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL_FATAL(pthread_create(&tid[i], NULL, fp_thread, res[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(tid[i], NULL);
		CU_ASSERT_EQUAL(res[i][1], 0);
		CU_ASSERT_EQUAL(res[i][0], res[0][0]);
	}
	CU_ASSERT_NOT_EQUAL(res[0][0], site_a());
}

static void *dl_handle;

static void dl_hook(unsigned i)
{
	if (i == 1 && !(dl_handle = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL)))
		dl_handle = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
	if (i == 2 && dl_handle)
		dlclose(dl_handle);
}

/* Loading and unloading a library rebuilds the module table and empties
 * the cache; the recomputed value must not change. */
static void test_fp_dlopen(void)
{
	uint64_t fp[3];

	repeat_site_a(3, fp, dl_hook);
	CU_ASSERT_PTR_NOT_NULL(dl_handle);
	CU_ASSERT_EQUAL(fp[1], fp[0]);
	CU_ASSERT_EQUAL(fp[2], fp[0]);
}

/* Child mode: the fixed sites' values and, to show that ASLR moved this
 * process, a hash of its raw return addresses. */
static int print_fingerprints(void)
{
	void *ip[64];
	uint64_t raw = 0;
	int n = unw_backtrace(ip, 64);

	for (int i = 0; i < n; i++)
		raw = raw * 31 + (uintptr_t)ip[i];
	printf("%016" PRIx64 " %016" PRIx64 " %016" PRIx64 "\n", site_a(), site_in_libc(), raw);
	return fflush(stdout) != 0;
}

/* Run this binary with --fingerprints; 0 and its three values, or -1. */
static int child_values(uint64_t v[3])
{
	char buf[256], *argv[] = { "test_alloc_table", "--fingerprints", NULL };
	int fd[2], status;
	ssize_t n, got = 0;
	pid_t pid;

	if (pipe(fd) != 0)
		return -1;
	if ((pid = fork()) == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(fd[1]);
	while (pid > 0 && (n = read(fd[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0)
		got += n;
	close(fd[0]);
	buf[got] = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		return -1;
	return sscanf(buf, "%" SCNx64 " %" SCNx64 " %" SCNx64, &v[0], &v[1], &v[2]) == 3 ? 0 : -1;
}

static void test_fp_across_runs(void)
{
	uint64_t one[3], two[3];
	int aslr = 0;
	FILE *f;

	CU_ASSERT_EQUAL_FATAL(child_values(one), 0);
	CU_ASSERT_EQUAL_FATAL(child_values(two), 0);
	CU_ASSERT_EQUAL(one[0], two[0]);        /* frames in this binary and libc */
	CU_ASSERT_EQUAL(one[1], two[1]);        /* below a libc frame */
	CU_ASSERT_NOT_EQUAL(one[0], one[1]);
	if ((f = fopen("/proc/sys/kernel/randomize_va_space", "r"))) {
		if (fscanf(f, "%d", &aslr) != 1)
			aslr = 0;
		fclose(f);
	}
	/* Otherwise the test shows nothing: insist that ASLR really moved us. */
	if (aslr)
		CU_ASSERT_NOT_EQUAL(one[2], two[2]);
}

static CU_TestInfo table_tests[] = {
	{ "create limits, NULL table", test_create_limits },
	{ "insert, find, remove", test_insert_find_remove },
	{ "ids monotonic, never reused", test_ids_monotonic },
	{ "find at base, base+size-1; not base+size", test_boundaries },
	{ "overlap rejected", test_overlap_rejected },
	{ "unknown free rejected", test_unknown_free },
	{ "bad api rejected", test_bad_api },
	{ "full, then a remove makes room", test_full },
	{ "ordinals: lowest free per (fingerprint, size)", test_ordinals },
	{ "ordinals equal across runs with churn", test_ordinals_two_runs },
	{ "iteration in address order", test_iteration_order },
	{ "roles", test_roles },
	{ "VMM map and unmap", test_vmm },
	{ "ALLOC record", test_record },
	{ "status strings", test_strerror },
	CU_TEST_INFO_NULL
};

static CU_TestInfo stress_tests[] = {
	{ "4 threads insert, remove, find", test_stress },
	CU_TEST_INFO_NULL
};

static CU_TestInfo fp_tests[] = {
	{ "same call site, same value", test_fp_same_site },
	{ "different call sites differ", test_fp_different_sites },
	{ "skip", test_fp_skip },
	{ "4 threads", test_fp_threads },
	{ "stable over dlopen/dlclose", test_fp_dlopen },
	{ "stable across processes under ASLR", test_fp_across_runs },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "table", .pInitFunc = setup, .pCleanupFunc = teardown, .pTests = table_tests },
	{ .pName = "concurrency", .pTests = stress_tests },
	{ .pName = "fingerprint", .pTests = fp_tests },
	CU_SUITE_INFO_NULL
};

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--fingerprints") == 0)
		return print_fingerprints();
	return cu_run(suites);
}
