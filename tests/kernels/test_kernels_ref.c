/*
 * test_kernels_ref.c - host reference of moeft_capture_append: what it
 * writes for each source layout and dtype.
 *
 * Ring entries are read straight from the layout in capture.h (no consumer,
 * but for the producers in device memory, whose consumer is played here),
 * so these tests pin the layout too.  Sources are allocated at their exact
 * size: under ASan any read past them fails.
 */
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "testutil.h"

#define CAP 4096

static struct cap_ring *new_ring(void)
{
	struct cap_ring *r = aligned_alloc(64, CAP_DATA_OFF + CAP);

	CU_ASSERT_FATAL(r != NULL);
	memset(r, 0, CAP_DATA_OFF + CAP);
	r->magic = CAP_RING_MAGIC;
	r->version = CAP_RING_VERSION;
	r->capacity = CAP;
	return r;
}

static const struct cap_entry *entry_at(const struct cap_ring *r, uint64_t pos)
{
	return (const struct cap_entry *)((const unsigned char *)r + CAP_DATA_OFF + pos % CAP);
}

static const int32_t *ids_of(const struct cap_entry *e)
{
	return (const int32_t *)((const unsigned char *)e + CAP_ENTRY_HDR);
}

/* A malloc'd copy of n elements of `size` bytes (exact size for ASan). */
static void *dup_exact(const void *src, size_t n, size_t size)
{
	void *p = malloc(n * size);

	CU_ASSERT_FATAL(p != NULL);
	memcpy(p, src, n * size);
	return p;
}

static struct cap_append_args args(struct cap_ring *r, const void *src, uint32_t dtype,
				   uint32_t rows, uint32_t k, uint32_t stride)
{
	struct cap_append_args a;

	memset(&a, 0, sizeof a);
	a.ring = r;
	a.src = src;
	a.tag = 0x1122334455667788u;
	a.step = 42;
	a.rows = rows;
	a.k = k;
	a.stride = stride;
	a.dtype = dtype;
	return a;
}

static void test_dtypes(void)
{
	static const int32_t i32[] = { -5, 0, 7, INT32_MAX, INT32_MIN, 3 };
	static const uint32_t u32[] = { 0, 5, 0x7fffffffu, 0x80000000u, 0xffffffffu, 9 };
	static const int64_t i64[] = { -1, 3, INT32_MAX, (int64_t)INT32_MAX + 1,
				       INT32_MIN, (int64_t)INT32_MIN - 1, INT64_MIN, INT64_MAX };
	static const int32_t want_u32[] = { 0, 5, INT32_MAX, -1, -1, 9 };
	static const int32_t want_i64[] = { -1, 3, INT32_MAX, -1, INT32_MIN, -1, -1, -1 };
	struct cap_ring *r = new_ring();
	void *src;
	struct cap_append_args a;
	const struct cap_entry *e;
	uint64_t pos = 0;

	src = dup_exact(i32, 6, 4);
	a = args(r, src, CAP_DT_I32, 3, 2, 2);
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, pos);
	CU_ASSERT(e->seq == pos + 1);
	CU_ASSERT(e->size == 48 + 32 && e->type == CAP_ENTRY_DATA && e->dtype == CAP_DT_I32);
	CU_ASSERT(e->tag == 0x1122334455667788u && e->step == 42);
	CU_ASSERT(e->rows == 3 && e->k == 2 && e->bytes == 24 && e->wdtype == 0);
	CU_ASSERT(memcmp(ids_of(e), i32, sizeof i32) == 0);
	pos += e->size;
	free(src);

	src = dup_exact(u32, 6, 4);
	a = args(r, src, CAP_DT_U32, 2, 3, 3);
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, pos);
	CU_ASSERT(e->seq == pos + 1 && e->dtype == CAP_DT_U32 && e->bytes == 24);
	CU_ASSERT(memcmp(ids_of(e), want_u32, sizeof want_u32) == 0);
	pos += e->size;
	free(src);

	src = dup_exact(i64, 8, 8);
	a = args(r, src, CAP_DT_I64, 1, 8, 8);
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, pos);
	CU_ASSERT(e->seq == pos + 1 && e->dtype == CAP_DT_I64 && e->bytes == 32);
	CU_ASSERT(e->size == 48 + 32);
	CU_ASSERT(memcmp(ids_of(e), want_i64, sizeof want_i64) == 0);
	pos += e->size;
	free(src);

	CU_ASSERT(r->head == pos && r->dropped_entries == 0);
	free(r);
}

/* llama.cpp's argsort: rows of n_expert sorted ids, the first k used.  The
 * source ends right after the last row's k-th id: nothing past it is read. */
static void test_stride(void)
{
	int64_t rows64[3 * 8];
	int32_t want[3 * 2];
	struct cap_ring *r = new_ring();
	struct cap_append_args a;
	const struct cap_entry *e;
	void *src;
	int i;

	for (i = 0; i < 24; i++)
		rows64[i] = 100 + i;
	src = dup_exact(rows64, 2 * 8 + 2, 8);
	a = args(r, src, CAP_DT_I64, 3, 2, 8);
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, 0);
	for (i = 0; i < 6; i++)
		want[i] = 100 + i / 2 * 8 + i % 2;
	CU_ASSERT(e->rows == 3 && e->k == 2 && e->bytes == 24 && e->size == 80);
	CU_ASSERT(memcmp(ids_of(e), want, sizeof want) == 0);
	free(src);

	/* empty requests still append a (payload-less) entry */
	a = args(r, rows64, CAP_DT_I64, 0, 8, 8);
	CU_ASSERT(cap_append_ref(&a) == 1);
	a = args(r, rows64, CAP_DT_I32, 5, 0, 4);
	CU_ASSERT(cap_append_ref(&a) == 1);
	e = entry_at(r, 80);
	CU_ASSERT(e->rows == 0 && e->k == 8 && e->bytes == 0 && e->size == 48);
	e = entry_at(r, 128);
	CU_ASSERT(e->rows == 5 && e->k == 0 && e->bytes == 0 && e->seq == 129);

	/* invalid requests count as drops and reserve nothing */
	a = args(r, rows64, CAP_DT_I64, 2, 8, 7);
	CU_ASSERT(cap_append_ref(&a) == 0);
	a = args(r, rows64, 0, 1, 1, 1);
	CU_ASSERT(cap_append_ref(&a) == 0);
	a = args(r, rows64, CAP_DT_I64 + 1, 1, 2, 2);
	CU_ASSERT(cap_append_ref(&a) == 0);
	a = args(r, rows64, CAP_DT_I32, 0xffffffffu, 0xffffffffu, 0xffffffffu);
	CU_ASSERT(cap_append_ref(&a) == 0);
	CU_ASSERT(r->head == 176);
	CU_ASSERT(r->dropped_entries == 4);
	CU_ASSERT(r->dropped_bytes == 64 + 4 + 8 + UINT64_MAX);
	free(r);
}

/* Gating weights after the ids: dense rows x k of 4 or 2 bytes, their bits
 * as the source has them (a NaN and a negative zero too), whatever the ids'
 * stride; a request that names weights without a pointer, or a type that
 * is no weights', is a drop. */
static void test_weights(void)
{
	static const int32_t ids[] = { 1, 2, 9, 3, 4, 9, 5, 6 };	/* stride 3 */
	static const uint32_t f32[] = { 0x3f000000u, 0x3e800000u, 0x7fc00001u, 0x80000000u,
					0x3f800000u, 0x00000001u };
	static const uint16_t h16[] = { 0x3c00, 0x3800, 0x0001, 0xfc00, 0x7e01, 0x8000 };
	static const int32_t want_ids[] = { 1, 2, 3, 4, 5, 6 };
	struct cap_ring *r = new_ring();
	struct cap_append_args a;
	const struct cap_entry *e;
	void *src = dup_exact(ids, 8, 4), *w;
	uint64_t pos = 0;

	w = dup_exact(f32, 6, 4);
	a = args(r, src, CAP_DT_I32, 3, 2, 3);
	a.wsrc = w;
	a.wdtype = CAP_DT_F32;
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, pos);
	CU_ASSERT(e->rows == 3 && e->k == 2 && e->bytes == 6 * 8 && e->wdtype == CAP_DT_F32);
	CU_ASSERT(e->size == 48 + 48);
	CU_ASSERT(memcmp(ids_of(e), want_ids, sizeof want_ids) == 0);
	CU_ASSERT(memcmp(ids_of(e) + 6, f32, sizeof f32) == 0);
	pos += e->size;
	free(w);

	w = dup_exact(h16, 6, 2);
	a.wsrc = w;
	a.wdtype = CAP_DT_BF16;
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, pos);
	CU_ASSERT(e->bytes == 6 * 6 && e->wdtype == CAP_DT_BF16 && e->size == 48 + 48);
	CU_ASSERT(memcmp(ids_of(e) + 6, h16, sizeof h16) == 0);
	pos += e->size;
	a.wdtype = CAP_DT_F16;
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e = entry_at(r, pos);
	CU_ASSERT(e->bytes == 36 && e->wdtype == CAP_DT_F16);
	CU_ASSERT(memcmp(ids_of(e) + 6, h16, sizeof h16) == 0);
	pos += e->size;
	free(w);

	a.wsrc = NULL;
	CU_ASSERT(cap_append_ref(&a) == 0);
	a.wsrc = src;
	a.wdtype = CAP_DT_I64;
	CU_ASSERT(cap_append_ref(&a) == 0);
	a.wdtype = CAP_DT_F16 + 1;
	CU_ASSERT(cap_append_ref(&a) == 0);
	CU_ASSERT(r->head == pos && r->dropped_entries == 3);
	free(src);
	free(r);
}

/* Producers counting in a cap_prod: the header's capacity and head are not
 * read (garbage there), head advances in prod; with the ring full as far as
 * tail_seen says, an append reads the header's tail once: still full, a
 * drop (counted in the header); once the consumer has released entries,
 * tail_seen rises to that tail and the append lands after the last one. */
static void test_prod(void)
{
	static const int32_t ids[4] = { 1, 2, 3, 4 };
	struct cap_ring *r = new_ring();
	struct cap_prod *p = aligned_alloc(64, sizeof *p);
	struct cap_append_args a;
	const struct cap_entry *e;
	void *src = dup_exact(ids, 4, 4);
	uint64_t pos = 0, n = 0;

	CU_ASSERT_FATAL(p != NULL);
	memset(p, 0, sizeof *p);
	p->capacity = CAP;
	r->capacity = 3;	/* not read */
	r->head = 7;		/* not read, not written */
	a = args(r, src, CAP_DT_I32, 2, 2, 2);
	a.prod = p;
	while (cap_append_ref(&a) == 1) {	/* entries of 64 bytes fill it */
		e = entry_at(r, pos);
		CU_ASSERT(e->seq == pos + 1 && e->size == 64);
		CU_ASSERT(memcmp(ids_of(e), ids, sizeof ids) == 0);
		pos += e->size;
		n++;
	}
	CU_ASSERT(n == CAP / 64 && p->head == CAP && p->tail_seen == 0);
	CU_ASSERT(r->head == 7 && r->dropped_entries == 1 && r->dropped_bytes == 16);

	/* the consumer releases two entries: zeroed, then tail */
	memset((unsigned char *)r + CAP_DATA_OFF, 0, 128);
	r->tail = 128;
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	CU_ASSERT(p->tail_seen == 128 && p->head == CAP + 64);
	e = entry_at(r, CAP);
	CU_ASSERT(e->seq == CAP + 1 && memcmp(ids_of(e), ids, sizeof ids) == 0);
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	CU_ASSERT(cap_append_ref(&a) == 0);	/* full again: 128 was all */
	CU_ASSERT(p->tail_seen == 128 && p->head == CAP + 128 && r->dropped_entries == 2);

	/* a tail beyond head is damage: never overwrite */
	r->tail = CAP * 4;
	CU_ASSERT(cap_append_ref(&a) == 0);
	CU_ASSERT(p->head == CAP + 128 && r->dropped_entries == 3);
	free(src);
	free(p);
	free(r);
}

int main(void)
{
	CU_TestInfo capture[] = {
		{ "dtypes", test_dtypes },
		{ "stride", test_stride },
		{ "gating weights", test_weights },
		{ "producers in device memory", test_prod },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "capture_append", NULL, NULL, NULL, NULL, capture },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
