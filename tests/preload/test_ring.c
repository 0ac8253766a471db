/*
 * test_ring.c - the capture ring: host consumer (preload/ring.c) against
 * the host reference producer (kernels/capture_ref.c).
 *
 * Every payload is a pattern of (tag, step, index), so a delivered entry
 * proves its own integrity; steps number a producer's attempts, so the
 * consumer can check order and exactly-once delivery.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"
#include "testutil.h"

static int32_t pattern(uint64_t tag, uint64_t step, uint32_t i)
{
	uint32_t v = (uint32_t)tag * 2654435761u ^ (uint32_t)step * 40503u ^
		     (uint32_t)(step >> 32) ^ i * 2246822519u;

	return (int32_t)v;
}

static uint64_t esize(uint32_t rows, uint32_t k)
{
	return (CAP_ENTRY_HDR + (uint64_t)rows * k * 4 + 15) & ~(uint64_t)15;
}

static struct cap_ring *new_ring(struct ring *r, uint64_t cap)
{
	void *mem = aligned_alloc(64, ring_size(cap));

	CU_ASSERT_FATAL(mem != NULL);
	CU_ASSERT_FATAL(ring_init(r, mem, ring_size(cap)) == 0);
	CU_ASSERT_FATAL(r->hdr->capacity == cap);
	return r->hdr;
}

/* Fill ids with the pattern and describe them; ids holds rows * k. */
static void prep(struct cap_append_args *a, struct cap_ring *ring, int32_t *ids,
		 uint32_t rows, uint32_t k, uint64_t tag, uint64_t step)
{
	uint32_t i;

	for (i = 0; i < rows * k; i++)
		ids[i] = pattern(tag, step, i);
	memset(a, 0, sizeof *a);
	a->ring = ring;
	a->src = ids;
	a->tag = tag;
	a->step = step;
	a->rows = rows;
	a->k = k;
	a->stride = k;
	a->dtype = CAP_DT_I32;
}

static int append(struct cap_ring *ring, uint32_t rows, uint32_t k, uint64_t tag,
		  uint64_t step)
{
	int32_t ids[1024];
	struct cap_append_args a;

	prep(&a, ring, ids, rows, k, tag, step);
	return cap_append_ref(&a);
}

static int payload_ok(const struct cap_entry *e, const void *payload, size_t len)
{
	const int32_t *ids = payload;
	uint32_t i;

	if (e->type != CAP_ENTRY_DATA || e->dtype != CAP_DT_I32 ||
	    len != (size_t)e->rows * e->k * 4 || len != e->bytes ||
	    e->size != esize(e->rows, e->k) || e->wdtype != 0)
		return 0;
	for (i = 0; i < e->rows * e->k; i++)
		if (ids[i] != pattern(e->tag, e->step, i))
			return 0;
	return 1;
}

/* What a single-threaded consumer saw. */
struct seen {
	uint64_t n;
	uint64_t steps[4096];
	uint32_t rows[4096];
	uint32_t k[4096];
	int bad;
};

static void collect(void *arg, const struct cap_entry *e, const void *payload, size_t len)
{
	struct seen *s = arg;

	if (!payload_ok(e, payload, len) || s->n == 4096) {
		s->bad++;
		return;
	}
	s->rows[s->n] = e->rows;
	s->k[s->n] = e->k;
	s->steps[s->n++] = e->step;
}

/* Many laps of variable-size entries, with pads at lap ends. */
static void test_wrap(void)
{
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 4096);
	struct ring_stats st;
	struct seen *s = calloc(1, sizeof *s);
	uint64_t i, next = 0, total = 0;

	CU_ASSERT_FATAL(s != NULL);
	for (i = 0; i < 20000; i++) {
		uint32_t rows = 1 + i % 7, k = 1 + i * 5 % 8;

		CU_ASSERT_FATAL(append(ring, rows, k, 7, i) == 1);
		total += (uint64_t)rows * k * 4;
		/* 4 entries + pads < 4096: no drop is possible */
		if (i % 4 == 3) {
			uint64_t j;

			s->n = 0;
			CU_ASSERT_FATAL(ring_poll(&r, collect, s, NULL) == 4);
			CU_ASSERT_FATAL(s->bad == 0);
			for (j = 0; j < 4; j++, next++) {
				CU_ASSERT_FATAL(s->steps[j] == next);
				CU_ASSERT(s->rows[j] == 1 + next % 7);
				CU_ASSERT(s->k[j] == 1 + next * 5 % 8);
			}
		}
	}
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 0);
	ring_stats(&r, &st);
	CU_ASSERT(st.entries == 20000);
	CU_ASSERT(st.bytes == total);
	CU_ASSERT(st.reserved == st.released);
	CU_ASSERT(st.released / st.capacity > 500);	/* laps */
	CU_ASSERT(st.skips > 100);
	CU_ASSERT(st.dropped_entries == 0 && st.dropped_bytes == 0);
	free(s);
	free(ring);
}

/* Move the head of an empty 1024-byte ring to data offset `off` with
 * filler entries. */
static void seek(struct ring *r, uint64_t off)
{
	struct seen *s = calloc(1, sizeof *s);
	int i;

	CU_ASSERT_FATAL(s != NULL);
	for (i = 0; i < 100 && (r->hdr->head & r->mask) != off; i++) {
		uint64_t d = (off - r->hdr->head) & r->mask;
		uint64_t size = d < CAP_ENTRY_HDR ? 64 : d > 512 ? 448 : d;

		if ((r->hdr->head & r->mask) + size > 1024)
			size = 1024 - (r->hdr->head & r->mask);	/* end the lap */
		if (size < CAP_ENTRY_HDR)
			size = 64;

		CU_ASSERT_FATAL(append(r->hdr, (uint32_t)(size - CAP_ENTRY_HDR) / 16, 4, 0, 0) == 1);
		CU_ASSERT_FATAL(ring_poll(r, collect, s, NULL) == 1);
	}
	CU_ASSERT_FATAL((r->hdr->head & r->mask) == off);
	free(s);
}

/* Entry sizes at the limits, and where pads make an entry not fit. */
static void test_sizes(void)
{
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 1024);
	struct ring_stats st;
	struct ring_gap gap;
	struct seen *s = calloc(1, sizeof *s);
	uint64_t o;

	CU_ASSERT_FATAL(s != NULL);
	/* capacity / 2 is the largest entry: 48 + 464 bytes */
	CU_ASSERT(append(ring, 29, 4, 1, 0) == 1);
	CU_ASSERT(append(ring, 30, 4, 1, 1) == 0);
	CU_ASSERT(append(ring, 0, 4, 1, 2) == 1);
	CU_ASSERT(append(ring, 5, 0, 1, 3) == 1);
	CU_ASSERT(ring_poll(&r, collect, s, &gap) == 3);
	CU_ASSERT(s->bad == 0);
	CU_ASSERT(s->steps[0] == 0 && s->rows[0] == 29 && s->k[0] == 4);
	CU_ASSERT(s->steps[1] == 2 && s->rows[1] == 0);
	CU_ASSERT(s->steps[2] == 3 && s->k[2] == 0);
	CU_ASSERT(gap.entries == 1 && gap.bytes == 480);
	CU_ASSERT(ring->head == 512 + 48 + 48 && ring->tail == ring->head);

	/* a max entry fits an empty ring wherever one can start: offset 0, or
	 * past the smallest entry (48) */
	for (o = 0; o < 1024; o += o ? 16 : CAP_ENTRY_HDR) {
		seek(&r, o);
		s->n = 0;
		CU_ASSERT_FATAL(append(ring, 29, 4, 3, o) == 1);
		CU_ASSERT_FATAL(ring_poll(&r, collect, s, NULL) == 1);
		CU_ASSERT_FATAL(s->bad == 0);
	}
	ring_stats(&r, &st);
	CU_ASSERT(st.skips > 0);
	free(ring);

	/* at offset 576 with 576 bytes in use a 512-byte entry needs a 448-byte
	 * pad: 960 > 448 free, so it drops and reserves nothing */
	ring = new_ring(&r, 1024);
	CU_ASSERT(append(ring, 4, 1, 5, 0) == 1);	/* 64 bytes */
	CU_ASSERT(append(ring, 29, 4, 5, 1) == 1);
	CU_ASSERT(ring->head == 576);
	CU_ASSERT(append(ring, 29, 4, 5, 2) == 0);
	CU_ASSERT(ring->head == 576);
	s->n = 0;
	CU_ASSERT(ring_poll(&r, collect, s, &gap) == 2);
	CU_ASSERT(gap.entries == 1 && gap.bytes == 464);
	CU_ASSERT(append(ring, 29, 4, 5, 3) == 1);	/* now it fits, padded */
	CU_ASSERT(ring->head == 576 + 448 + 512);
	s->n = 0;
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 1);
	CU_ASSERT(s->n == 1 && s->steps[0] == 3 && s->bad == 0);
	ring_stats(&r, &st);
	CU_ASSERT(st.skips == 1 && st.released == 576 + 448 + 512);
	CU_ASSERT(st.dropped_entries == 1 && st.dropped_bytes == 464);
	free(s);
	free(ring);
}

/* A stalled consumer: producers drop, exactly counted; nothing accepted is
 * lost or repeated; the consumer then catches up. */
static void test_overflow(void)
{
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 1024);
	struct ring_stats st;
	struct ring_gap gap;
	struct seen *s = calloc(1, sizeof *s);
	uint64_t i, accepted = 0, dropped = 0, dbytes = 0;
	uint64_t acc[512];

	CU_ASSERT_FATAL(s != NULL);
	/* 64-byte entries: exactly 16 fit */
	for (i = 0; i < 100; i++)
		CU_ASSERT(append(ring, 4, 1, 9, i) == (i < 16));
	CU_ASSERT(ring->dropped_entries == 84 && ring->dropped_bytes == 84 * 16);
	CU_ASSERT(ring_poll(&r, collect, s, &gap) == 16);
	CU_ASSERT(gap.entries == 84 && gap.bytes == 84 * 16);
	for (i = 0; i < 16; i++)
		CU_ASSERT(s->steps[i] == i);
	/* resume: with room again, everything lands */
	s->n = 0;
	for (i = 100; i < 200; i++) {
		CU_ASSERT(append(ring, 4, 1, 9, i) == 1);
		if (i % 10 == 9)
			CU_ASSERT(ring_poll(&r, collect, s, &gap) == 10 && gap.entries == 0);
	}
	CU_ASSERT(s->n == 100 && s->bad == 0);
	for (i = 0; i < 100; i++)
		CU_ASSERT(s->steps[i] == 100 + i);

	/* variable sizes, consumer polling now and then */
	s->n = 0;
	for (i = 0; i < 2000 && accepted < 512; i++) {
		uint32_t rows = 1 + i % 11, k = 1 + i % 3;

		if (append(ring, rows, k, 10, i)) {
			acc[accepted++] = i;
		} else {
			dropped++;
			dbytes += (uint64_t)rows * k * 4;
		}
		if (i % 37 == 36)
			CU_ASSERT_FATAL(ring_poll(&r, collect, s, NULL) >= 0);
	}
	CU_ASSERT_FATAL(ring_poll(&r, collect, s, NULL) >= 0);
	CU_ASSERT(dropped > 0);
	CU_ASSERT_FATAL(s->n == accepted && s->bad == 0);
	CU_ASSERT(memcmp(s->steps, acc, accepted * sizeof acc[0]) == 0);
	ring_stats(&r, &st);
	CU_ASSERT(st.dropped_entries == 84 + dropped);
	CU_ASSERT(st.dropped_bytes == 84 * 16 + dbytes);
	CU_ASSERT(st.entries == 116 + accepted);
	free(s);
	free(ring);
}

/* A reserved, unpublished entry holds the consumer at its position only. */
static void test_unpublished(void)
{
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 4096);
	struct cap_append_args a, e;
	struct cap_resv ra, re;
	struct ring_stats st;
	struct seen *s = calloc(1, sizeof *s);
	int32_t ids_a[64], ids_e[64];

	CU_ASSERT_FATAL(s != NULL);
	prep(&a, ring, ids_a, 8, 8, 1, 0);
	CU_ASSERT_FATAL(cap_append_begin_ref(&a, &ra) == 1);
	CU_ASSERT(append(ring, 3, 2, 1, 1) == 1);
	CU_ASSERT(append(ring, 2, 3, 1, 2) == 1);
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 0);
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 0);
	ring_stats(&r, &st);
	CU_ASSERT(st.released == 0 && st.reserved == esize(8, 8) + 2 * esize(3, 2));
	cap_append_end_ref(ring, &ra);
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 3);
	CU_ASSERT(s->steps[0] == 0 && s->steps[1] == 1 && s->steps[2] == 2);

	/* published, unpublished, published */
	s->n = 0;
	CU_ASSERT(append(ring, 1, 1, 2, 3) == 1);
	prep(&e, ring, ids_e, 4, 4, 2, 4);
	CU_ASSERT_FATAL(cap_append_begin_ref(&e, &re) == 1);
	CU_ASSERT(append(ring, 1, 1, 2, 5) == 1);
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 1);
	CU_ASSERT(s->n == 1 && s->steps[0] == 3);
	cap_append_end_ref(ring, &re);
	CU_ASSERT(ring_poll(&r, collect, s, NULL) == 2);
	CU_ASSERT(s->n == 3 && s->steps[1] == 4 && s->steps[2] == 5 && s->bad == 0);
	ring_stats(&r, &st);
	CU_ASSERT(st.released == st.reserved);
	free(s);
	free(ring);
}

/* ---- concurrent producers ---------------------------------------------- */

#define NPROD 4
#define MAXN (1u << 22)
#define RUN_NS 1000000000LL

struct prod {
	pthread_t th;
	struct cap_ring *ring;
	uint64_t tag;
	uint64_t attempted;
	uint64_t accepted;
	uint64_t dropped_bytes;
	uint64_t *acc;		/* bit per step: accepted */
};

struct cons {
	struct ring *r;
	int stop;		/* set once producers have finished */
	uint64_t next[NPROD];	/* lowest step still acceptable per producer */
	uint64_t *got[NPROD];	/* bit per step: delivered */
	uint64_t delivered;
	uint64_t bad;
	long err;
};

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *producer(void *arg)
{
	struct prod *p = arg;
	long long end = now_ns() + RUN_NS;
	int32_t ids[64];
	struct cap_append_args a;
	uint64_t n;

	for (n = 0; n < MAXN; n++) {
		uint32_t rows = 1 + n % 5, k = 1 + n * 3 % 8;

		if (n % 256 == 0 && now_ns() > end)
			break;
		prep(&a, p->ring, ids, rows, k, p->tag, n);
		if (cap_append_ref(&a)) {
			p->acc[n / 64] |= UINT64_C(1) << n % 64;
			p->accepted++;
		} else {
			p->dropped_bytes += (uint64_t)rows * k * 4;
			sched_yield();	/* a GPU would not retry at once either */
		}
	}
	p->attempted = n;
	return NULL;
}

static void deliver(void *arg, const struct cap_entry *e, const void *payload, size_t len)
{
	struct cons *c = arg;

	if (e->tag >= NPROD || e->step < c->next[e->tag] || e->step >= MAXN ||
	    !payload_ok(e, payload, len)) {
		c->bad++;
		return;
	}
	c->next[e->tag] = e->step + 1;
	c->got[e->tag][e->step / 64] |= UINT64_C(1) << e->step % 64;
	c->delivered++;
}

static void *consumer(void *arg)
{
	struct cons *c = arg;
	unsigned polls = 0;

	for (;;) {
		int last = __atomic_load_n(&c->stop, __ATOMIC_ACQUIRE);
		long n = ring_poll(c->r, deliver, c, NULL);

		if (n < 0) {
			c->err = n;
			return NULL;
		}
		if (last)
			return NULL;
		/* stall now and then so producers overflow the ring */
		if (++polls % 512 == 0)
			usleep(300);
	}
}

static void test_concurrent(void)
{
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 4096);
	struct prod p[NPROD];
	struct cons c;
	struct ring_stats st;
	pthread_t cth;
	uint64_t attempted = 0, accepted = 0, dbytes = 0;
	int i;

	memset(&c, 0, sizeof c);
	c.r = &r;
	for (i = 0; i < NPROD; i++) {
		memset(&p[i], 0, sizeof p[i]);
		p[i].ring = ring;
		p[i].tag = (uint64_t)i;
		p[i].acc = calloc(MAXN / 64, sizeof(uint64_t));
		c.got[i] = calloc(MAXN / 64, sizeof(uint64_t));
		CU_ASSERT_FATAL(p[i].acc && c.got[i]);
	}
	CU_ASSERT_FATAL(pthread_create(&cth, NULL, consumer, &c) == 0);
	for (i = 0; i < NPROD; i++)
		CU_ASSERT_FATAL(pthread_create(&p[i].th, NULL, producer, &p[i]) == 0);
	for (i = 0; i < NPROD; i++)
		pthread_join(p[i].th, NULL);
	__atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
	pthread_join(cth, NULL);

	CU_ASSERT(c.err == 0);
	CU_ASSERT(c.bad == 0);
	for (i = 0; i < NPROD; i++) {
		attempted += p[i].attempted;
		accepted += p[i].accepted;
		dbytes += p[i].dropped_bytes;
		/* exactly the accepted steps were delivered, each once (in
		 * order: deliver() rejects a step below the last one) */
		CU_ASSERT(memcmp(p[i].acc, c.got[i], MAXN / 8) == 0);
		free(p[i].acc);
		free(c.got[i]);
	}
	ring_stats(&r, &st);
	CU_ASSERT(c.delivered == accepted);
	CU_ASSERT(st.entries == accepted);
	CU_ASSERT(accepted + st.dropped_entries == attempted);
	CU_ASSERT(st.dropped_bytes == dbytes);
	CU_ASSERT(st.reserved == st.released);
	CU_ASSERT(st.dropped_entries > 0);	/* the stalls overflowed it */
	CU_ASSERT(accepted > 1000);
	free(ring);
}

/* ---- damage and setup ---------------------------------------------------- */

static void nop(void *arg, const struct cap_entry *e, const void *payload, size_t len)
{
	(*(int *)arg)++;
}

static void test_damage(void)
{
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 1024);
	unsigned char *data = (unsigned char *)ring + CAP_DATA_OFF;
	struct cap_entry *e;
	struct ring_stats st;
	int calls = 0;

	/* a seq from another lap at the consumer's position */
	e = (struct cap_entry *)data;
	e->seq = 1024 + 1;
	CU_ASSERT(ring_poll(&r, nop, &calls, NULL) == -EBADMSG);
	CU_ASSERT(ring_poll(&r, nop, &calls, NULL) == -EBADMSG);
	e->seq = 0;

	/* a good entry, then one whose size disagrees with rows * k */
	CU_ASSERT(append(ring, 2, 2, 1, 0) == 1);
	CU_ASSERT(append(ring, 2, 2, 1, 1) == 1);
	e = (struct cap_entry *)(data + esize(2, 2));
	e->rows = 3;
	CU_ASSERT(ring_poll(&r, nop, &calls, NULL) == -EBADMSG);
	CU_ASSERT(calls == 1);
	e->rows = 2;
	CU_ASSERT(ring_poll(&r, nop, &calls, NULL) == 1);

	/* a skip entry that does not end the lap */
	e = (struct cap_entry *)(data + 2 * esize(2, 2));
	e->size = 32;
	e->type = CAP_ENTRY_SKIP;
	e->seq = 2 * esize(2, 2) + 1;
	CU_ASSERT(ring_poll(&r, nop, &calls, NULL) == -EBADMSG);
	ring_stats(&r, &st);
	CU_ASSERT(st.entries == 2 && calls == 2);
	free(ring);
}

/* What the consumer hands on of an entry with gating weights. */
struct weighed {
	int calls;
	size_t len;
	uint32_t wdtype;
	uint16_t last;		/* the last weight's bits */
};

static void weighed(void *arg, const struct cap_entry *e, const void *payload, size_t len)
{
	struct weighed *w = arg;

	w->calls++;
	w->len = len;
	w->wdtype = e->wdtype;
	memcpy(&w->last, (const unsigned char *)payload + len - 2, 2);
}

/* An entry with weights is whole with its weights; one whose weight type
 * is unknown, or whose bytes leave the weights out, is damage. */
static void test_weights(void)
{
	static const uint16_t bf16[6] = { 0x3f00, 0x3e80, 0x3f80, 0x0000, 0xbf80, 0x4000 };
	struct ring r;
	struct cap_ring *ring = new_ring(&r, 1024);
	unsigned char *data = (unsigned char *)ring + CAP_DATA_OFF;
	struct cap_append_args a;
	struct cap_entry *e;
	struct weighed w = { 0 };
	int32_t ids[6];

	prep(&a, ring, ids, 3, 2, 1, 0);
	a.wsrc = bf16;
	a.wdtype = CAP_DT_BF16;
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	CU_ASSERT(ring_poll(&r, weighed, &w, NULL) == 1);
	CU_ASSERT(w.calls == 1 && w.len == 6 * 4 + 6 * 2 && w.wdtype == CAP_DT_BF16);
	CU_ASSERT(w.last == 0x4000);

	e = (struct cap_entry *)(data + ring->head);
	CU_ASSERT_FATAL(cap_append_ref(&a) == 1);
	e->wdtype = CAP_DT_I64;
	CU_ASSERT(ring_poll(&r, weighed, &w, NULL) == -EBADMSG);
	e->wdtype = 0;
	CU_ASSERT(ring_poll(&r, weighed, &w, NULL) == -EBADMSG);
	e->wdtype = CAP_DT_F32;
	CU_ASSERT(ring_poll(&r, weighed, &w, NULL) == -EBADMSG);
	e->wdtype = CAP_DT_F16;
	CU_ASSERT(ring_poll(&r, weighed, &w, NULL) == 1);
	CU_ASSERT(w.calls == 2 && w.wdtype == CAP_DT_F16);
	free(ring);
}

static void test_init(void)
{
	struct ring r;
	unsigned char *mem = aligned_alloc(64, ring_size(4096));

	CU_ASSERT_FATAL(mem != NULL);
	CU_ASSERT(ring_size(1024) == CAP_DATA_OFF + 1024);
	CU_ASSERT(ring_init(&r, mem + 8, ring_size(1024)) == -EINVAL);
	CU_ASSERT(ring_init(&r, mem, ring_size(CAP_MIN_CAPACITY) - 1) == -EINVAL);
	CU_ASSERT(ring_init(&r, mem, ring_size(CAP_MIN_CAPACITY)) == 0);
	CU_ASSERT(r.hdr->capacity == CAP_MIN_CAPACITY);
	CU_ASSERT(ring_init(&r, mem, ring_size(4095)) == 0);
	CU_ASSERT(r.hdr->capacity == 2048);
	CU_ASSERT(r.hdr->magic == CAP_RING_MAGIC && r.hdr->version == CAP_RING_VERSION);
	CU_ASSERT(r.hdr->head == 0 && r.hdr->tail == 0 && r.hdr->dropped_entries == 0);
	free(mem);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "init", test_init },
		{ "wrap", test_wrap },
		{ "sizes", test_sizes },
		{ "overflow", test_overflow },
		{ "unpublished", test_unpublished },
		{ "concurrent", test_concurrent },
		{ "damage", test_damage },
		{ "gating weights", test_weights },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "ring", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
