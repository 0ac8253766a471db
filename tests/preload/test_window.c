/*
 * test_window.c - the decode-window assembler (preload/window.c) against a
 * real log and KV store: routing placed by its lane's marker, windows cut
 * at snapshot marks, their WINDOW extra, KV chunks copied from a staging
 * area filled by hand as the snapshot kernel would, gaps and partial KV
 * flagged (a staging overflow, a pool the store could not take), a full
 * log, and windows that allocation commits never split.  Everything is
 * checked by reading the files back.
 */
#include <pthread.h>
#include <sched.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "crc32c.h"
#include "record.h"
#include "testutil.h"
#include "window.h"

enum { A = 0xa, B = 0xb, C = 0xc };	/* lanes */

#define LOG_SIZE (4u << 20)
#define STAGE_LEN (64u << 10)
#define CHUNK 4096u

/* ---- fixture ----------------------------------------------------------- */

/* A log, its KV store (or none), the lock the assembler shares with the
 * allocation path, a staging area and the assembler. */
struct fx {
	char path[256], kvpath[272];
	pthread_mutex_t lock;
	struct wal *wal;
	struct kvs *kvs;
	struct kv_stage *stage;
	atomic_int busy;
	struct window_asm *wa;
	uint64_t log_id, first_window;	/* id of the first window committed */
};

/* KV pools the store could not take, as the sink asks (pools.h). */
static unsigned untracked_pools;

static unsigned untracked(void)
{
	return untracked_pools;
}

/* The boundary's completion as the sink asks (snapshot.h's snap_done):
 * "not yet" for the next not_staged asks (UINT_MAX: never); and the
 * restage requests the assembler made. */
static unsigned not_staged, staged_asks, restaged;

static int staged(void)
{
	staged_asks++;
	if (!not_staged)
		return 1;
	if (not_staged != UINT_MAX)
		not_staged--;
	return 0;
}

static void restage(void)
{
	restaged++;
}

static void fx_open(struct fx *f, uint64_t size, int with_kv)
{
	struct wal_error err = { 0 };
	struct wal_options opt;
	struct wal_stats st;
	struct wa_sink sink;

	memset(f, 0, sizeof *f);
	test_path(f->path, sizeof f->path, "window");
	kvs_path(f->path, f->kvpath, sizeof f->kvpath);
	pthread_mutex_init(&f->lock, NULL);
	wal_options_init(&opt);
	opt.size = size;
	opt.flags = WAL_OPEN_CREATE;
	if (wal_open(f->path, &opt, &f->wal, &err) != 0)
		fprintf(stderr, "\nwal_open: %s\n", err.msg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f->wal);
	wal_stats(f->wal, &st);
	f->log_id = st.log_id;
	f->first_window = st.open_window;
	if (with_kv) {
		if (kvs_open(f->kvpath, st.log_id, -1, st.open_window, &f->kvs, &err) != 0)
			fprintf(stderr, "\nkvs_open: %s\n", err.msg);
		CU_ASSERT_PTR_NOT_NULL_FATAL(f->kvs);
	}
	f->stage = aligned_alloc(KVSNAP_ALIGN, STAGE_LEN);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f->stage);
	CU_ASSERT_EQUAL_FATAL(kv_stage_init(f->stage, STAGE_LEN, CHUNK), 0);
	sink = (struct wa_sink){ .wal = f->wal, .kvs = f->kvs, .log_lock = &f->lock,
				 .untracked = untracked, .staged = staged, .restage = restage };
	untracked_pools = 0;
	not_staged = staged_asks = restaged = 0;
	f->wa = wa_create(&sink);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f->wa);
	wa_set_stage(f->wa, f->stage, &f->busy);
}

/* fx_open with a KV store and one pool of 4 chunks in it: its number. */
static uint32_t fx_open_pool(struct fx *f, uint64_t fingerprint)
{
	struct kvs_pool_desc d = { .fingerprint = fingerprint, .size = 4 * CHUNK,
				   .chunk_bytes = CHUNK };
	uint32_t p = 99;

	fx_open(f, LOG_SIZE, 1);
	CU_ASSERT_EQUAL_FATAL(kvs_pool(f->kvs, &d, &p), 0);
	return p;
}

static void fx_close(struct fx *f)
{
	wa_destroy(f->wa);
	kvs_close(f->kvs);
	wal_close(f->wal);
	free(f->stage);
	pthread_mutex_destroy(&f->lock);
	unlink(f->kvpath);
	unlink(f->path);
}

static void expect_stats(struct fx *f, struct wa_stats want)
{
	struct wa_stats st;

	wa_stats(f->wa, &st);
	CU_ASSERT_EQUAL(st.entries, want.entries);
	CU_ASSERT_EQUAL(st.windows, want.windows);
	CU_ASSERT_EQUAL(st.routing, want.routing);
	CU_ASSERT_EQUAL(st.unplaced, want.unplaced);
	CU_ASSERT_EQUAL(st.kv_chunks, want.kv_chunks);
	CU_ASSERT_EQUAL(st.kv_bytes, want.kv_bytes);
	CU_ASSERT_EQUAL(st.failures, want.failures);
}

static uint64_t commits(struct fx *f)
{
	struct wal_stats st;

	wal_stats(f->wal, &st);
	return st.commits;
}

/* ---- ring entries ------------------------------------------------------ */

/* An entry of rows x k ids and, with wdtype, as many weights after them in
 * payload. */
static void feed_weighed(struct fx *f, uint64_t tag, uint64_t step, uint32_t rows, uint32_t k,
			 const void *payload, uint32_t wdtype)
{
	uint32_t bytes = rows * k * (4 + cap_weight_bytes(wdtype));
	struct cap_entry e = { .size = (CAP_ENTRY_HDR + bytes + CAP_ALIGN - 1) & ~(CAP_ALIGN - 1),
			       .type = CAP_ENTRY_DATA, .dtype = CAP_DT_I32, .tag = tag,
			       .step = step, .rows = rows, .k = k, .bytes = bytes,
			       .wdtype = wdtype };

	wa_entry(f->wa, &e, payload, bytes);
}

static void feed(struct fx *f, uint64_t tag, uint64_t step, uint32_t rows, uint32_t k,
		 const int32_t *ids)
{
	feed_weighed(f, tag, step, rows, k, ids, 0);
}

static void marker(struct fx *f, uint32_t lane, uint64_t step)
{
	feed(f, WA_TAG(WA_RULE_MARKER, 0, lane), step, 0, 0, NULL);
}

/* The snapshot mark of boundary `step`, enqueued on the side stream. */
static void snap(struct fx *f, uint64_t step)
{
	feed(f, WA_TAG(WA_RULE_SNAP, 0, 0x5eed), step, 0, 0, NULL);
}

/* Id i of (lane, step, layer): spread so that the largest is rarely the
 * first, and in layer 2 one that did not fit int32. */
static int32_t id_of(uint32_t lane, uint64_t step, uint32_t layer, uint32_t i)
{
	if (layer == 2 && i == 1)
		return CAP_ID_INVALID;
	return (int32_t)((lane * 13 + step * 7 + layer * 3 + (uint64_t)i * 5) % 61);
}

/* A routing record the log should hold. */
struct want {
	uint32_t lane;
	uint64_t step;
	uint32_t layer, rows, k, experts;
};

/* Feed a routing entry of rule 1 on lane, the ids of (lane, step, layer),
 * experts from the tag (0: none); returns its record as it should be
 * logged: experts from the tag, else the largest valid id + 1. */
static struct want route(struct fx *f, uint32_t lane, uint32_t experts, uint64_t step,
			 uint32_t layer, uint32_t rows, uint32_t k)
{
	struct want w = { lane, step, layer, rows, k, experts };
	int32_t *ids = malloc((size_t)rows * k * 4 + 4);
	uint32_t i;

	CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
	for (i = 0; i < rows * k; i++) {
		ids[i] = id_of(lane, step, layer, i);
		if (!experts && ids[i] >= 0 && (uint32_t)ids[i] + 1 > w.experts)
			w.experts = (uint32_t)ids[i] + 1;
	}
	feed(f, WA_TAG(1, experts, lane), layer, rows, k, ids);
	free(ids);
	return w;
}

/* ---- the staging area, filled as moeft_kv_snapshot would ---------------- */

static void pattern(uint8_t *p, uint32_t len, uint32_t seed)
{
	uint64_t x = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
	uint32_t i;

	for (i = 0; i < len; i++) {
		x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
		p[i] = (uint8_t)(x >> 56);
	}
}

/* A table entry only: its data may lie outside the data area. */
static void stage_entry(struct kv_stage *s, uint32_t pool, uint64_t chunk, uint32_t len,
			uint64_t off, uint64_t hash)
{
	struct kv_stage_entry *t = (struct kv_stage_entry *)((uint8_t *)s + s->table_off);

	t[s->entries++] = (struct kv_stage_entry){ pool, len, chunk, off, hash };
	s->used += (len + KVSNAP_ALIGN - 1) & ~(uint64_t)(KVSNAP_ALIGN - 1);
}

/* Stage chunk `chunk` of pool: len bytes of pattern `seed` at data offset off. */
static void stage_put(struct kv_stage *s, uint32_t pool, uint64_t chunk, uint32_t len,
		      uint64_t off, uint32_t seed)
{
	uint8_t *d = (uint8_t *)s + s->data_off + off;

	CU_ASSERT_FATAL(off % KVSNAP_ALIGN == 0 && off + len <= s->capacity);
	pattern(d, len, seed);
	stage_entry(s, pool, chunk, len, off, kv_chunk_hash(d, len));
}

/* ---- reading back ------------------------------------------------------ */

static struct wal_reader *reader(const struct fx *f)
{
	struct wal_error err = { 0 };
	struct wal_reader *r = NULL;

	if (wal_reader_open_path(f->path, &r, &err) != 0)
		fprintf(stderr, "\nwal_reader_open_path: %s\n", err.msg);
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(wal_reader_recovery(r)->damaged_windows, 0);
	return r;
}

/* Record types as letters: E EPOCH, K KVREF, R ROUTING, A ALLOC,
 * W WINDOW, ? any other. */
static char letter(unsigned type)
{
	switch (type) {
	case WAL_REC_EPOCH: return 'E';
	case WAL_REC_KVREF: return 'K';
	case WAL_REC_ROUTING: return 'R';
	case WAL_REC_ALLOC: return 'A';
	case WAL_REC_WINDOW: return 'W';
	default: return '?';
	}
}

/* The record types of window `window` in log order, one letter each. */
static const char *shape(const struct wal_reader *r, uint64_t window, char *buf, size_t len)
{
	struct wal_iter it;
	struct wal_record rec;
	size_t n = 0;

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec))
		if (rec.window == window && n + 1 < len)
			buf[n++] = letter(rec.type);
	buf[n] = 0;
	return buf;
}

/* The shape pre, n routing records, post. */
static const char *with_routing(char *buf, size_t len, const char *pre, size_t n,
				const char *post)
{
	size_t p = strlen(pre);

	CU_ASSERT_FATAL(p + n + strlen(post) < len);
	memcpy(buf, pre, p);
	memset(buf + p, 'R', n);
	strcpy(buf + p + n, post);
	return buf;
}

static void expect_shape(const struct wal_reader *r, uint64_t window, const char *want)
{
	static char got[1 << 16];

	CU_ASSERT_STRING_EQUAL(shape(r, window, got, sizeof got), want);
}

static void expect_steps(const struct wal_reader *r, uint64_t window, struct rec_window_steps want)
{
	const struct wal_window *w;
	struct rec_window_steps ws;
	size_t n, i;

	w = wal_reader_windows(r, &n);
	for (i = 0; i < n && w[i].id != window; i++)
		;
	CU_ASSERT_FATAL(i < n);
	CU_ASSERT_EQUAL_FATAL(w[i].extra_len, WINDOW_STEPS_SIZE);
	CU_ASSERT_EQUAL_FATAL(rec_window_steps_decode(w[i].extra, w[i].extra_len, &ws), 0);
	CU_ASSERT_EQUAL(ws.first_step, want.first_step);
	CU_ASSERT_EQUAL(ws.steps, want.steps);
	CU_ASSERT_EQUAL(ws.tokens, want.tokens);
	CU_ASSERT_EQUAL(ws.flags, want.flags);
	CU_ASSERT_EQUAL(ws.kv_chunks, want.kv_chunks);
}

/* How routing record rec differs from w: 0, or these bits. */
enum { D_TYPE = 1, D_STEP = 2, D_LAYER = 4, D_TOKENS = 8, D_K = 16, D_FORMAT = 32,
       D_EXPERTS = 64, D_IDS = 128 };

static unsigned routing_diff(const struct wal_record *rec, const struct want *w)
{
	struct rec_routing rt;
	unsigned d = 0;
	uint32_t i;

	if (rec->type != WAL_REC_ROUTING || rec_routing_decode(rec->payload, rec->len, &rt) < 0)
		return D_TYPE;
	d |= rt.step != w->step ? D_STEP : 0;
	d |= rt.layer != w->layer ? D_LAYER : 0;
	d |= rt.tokens != w->rows ? D_TOKENS : 0;
	d |= rt.k != w->k ? D_K : 0;
	d |= rt.id_bytes != 4 || rt.flags != 0 ? D_FORMAT : 0;
	d |= rt.experts != w->experts ? D_EXPERTS : 0;
	/* The decoder vouched for tokens x k ids of id_bytes each. */
	for (i = 0; !(d & (D_TOKENS | D_K | D_FORMAT)) && i < w->rows * w->k; i++)
		if (rec_routing_id(&rt, i) != (uint32_t)id_of(w->lane, w->step, w->layer, i))
			d |= D_IDS;
	return d;
}

/* The ROUTING records of window `window` are exactly want[0..n), in order. */
static void expect_routing(const struct wal_reader *r, uint64_t window, const struct want *want,
			   size_t n)
{
	struct wal_iter it;
	struct wal_record rec;
	size_t got = 0;

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec)) {
		unsigned d;

		if (rec.window != window || rec.type != WAL_REC_ROUTING || got++ >= n)
			continue;
		if ((d = routing_diff(&rec, &want[got - 1])) != 0)
			fprintf(stderr, "\nwindow %llu, routing record %zu differs: 0x%x "
				"(2 step, 4 layer, 8 tokens, 16 k, 32 format, 64 experts, 128 ids)\n",
				(unsigned long long)window, got - 1, d);
		CU_ASSERT_EQUAL(d, 0);
	}
	CU_ASSERT_EQUAL(got, n);
}

static size_t nwindows(const struct wal_reader *r)
{
	size_t n;

	wal_reader_windows(r, &n);
	return n;
}

/* A staged chunk the store and the log should hold. */
struct kwant {
	uint32_t pool, bytes;
	uint64_t chunk;
	uint32_t seed;
};

/* The KVREF records of window `window` are exactly want[0..n), in order,
 * stamped with `step`, and the store holds their bytes where they say and
 * as of that window. */
static void expect_kv(const struct fx *f, const struct wal_reader *r, uint64_t window,
		      uint64_t step, const struct kwant *want, size_t n)
{
	uint8_t *file, *bytes = malloc(CHUNK);
	struct kvs_reader *kr = NULL;
	struct wal_error err = { 0 };
	struct wal_iter it;
	struct wal_record rec;
	size_t flen = 0, got = 0;

	file = test_slurp(f->kvpath, &flen);
	CU_ASSERT_FATAL(file != NULL && bytes != NULL);
	CU_ASSERT_EQUAL_FATAL(kvs_reader_open(f->kvpath, f->log_id, &kr, &err), 0);
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec)) {
		const struct kwant *w;
		struct rec_kvref ref;
		const uint8_t *data = NULL;
		uint64_t at = 0;
		uint32_t len = 0, crc = 0;

		if (rec.window != window || rec.type != WAL_REC_KVREF)
			continue;
		CU_ASSERT_FATAL(got < n);
		w = &want[got++];
		CU_ASSERT_EQUAL_FATAL(rec_kvref_decode(rec.payload, rec.len, &ref), 0);
		pattern(bytes, w->bytes, w->seed);
		CU_ASSERT_EQUAL(ref.pool, w->pool);
		CU_ASSERT_EQUAL(ref.block, w->chunk);
		CU_ASSERT_EQUAL(ref.bytes, w->bytes);
		CU_ASSERT_EQUAL(ref.step, step);
		CU_ASSERT_EQUAL(ref.flags, 0);
		CU_ASSERT_EQUAL(ref.crc, crc32c(0, bytes, w->bytes));
		CU_ASSERT(ref.store_off <= flen && w->bytes <= flen - ref.store_off &&
			  memcmp(file + ref.store_off, bytes, w->bytes) == 0);
		CU_ASSERT_EQUAL(kvs_reader_chunk(kr, w->pool, w->chunk, window, &data, &len, &at, &crc),
				KVS_CHUNK_OK);
		CU_ASSERT_EQUAL(at, window);
		CU_ASSERT_EQUAL(crc, ref.crc);
		CU_ASSERT(len == w->bytes && data && memcmp(data, bytes, len) == 0);
	}
	CU_ASSERT_EQUAL(got, n);
	kvs_reader_close(kr);
	free(file);
	free(bytes);
}

/* ---- tests ------------------------------------------------------------- */

/*
 * Two lanes, lane B a step behind lane A in ring order (streams run
 * apart): each routing entry takes its own lane's step.  Lane A's rule
 * gives the expert count, lane B's does not.  Nothing reaches the log
 * before the mark.
 */
static void test_window(void)
{
	struct fx f;
	struct wal_reader *r;
	struct want w[24];
	size_t n = 0;
	uint64_t t;
	uint32_t l;
	char buf[64];

	fx_open(&f, LOG_SIZE, 1);
	for (t = 0; t <= 4; t++) {
		if (t < 4)
			marker(&f, A, t);
		if (t > 0)
			marker(&f, B, t - 1);
		for (l = 0; l < 3; l++) {
			if (t < 4)
				w[n++] = route(&f, A, 64, t, l, 1 + (uint32_t)t, 2);
			if (t > 0)
				w[n++] = route(&f, B, 0, t - 1, l, 2, 2);
		}
	}
	CU_ASSERT_EQUAL_FATAL(n, 24);
	expect_stats(&f, (struct wa_stats){ .entries = 24 });
	CU_ASSERT_EQUAL(commits(&f), 0);

	atomic_store(&f.busy, 1);
	snap(&f, 4);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);
	expect_stats(&f, (struct wa_stats){ .entries = 24, .windows = 1, .routing = 24 });

	r = reader(&f);
	CU_ASSERT_EQUAL(nwindows(r), 1);
	/* The epoch's first window also holds its EPOCH record. */
	expect_shape(r, f.first_window, with_routing(buf, sizeof buf, "E", 24, "W"));
	/* Layer-0 rows: lane A 1 + 2 + 3 + 4, lane B 4 x 2. */
	expect_steps(r, f.first_window, (struct rec_window_steps){ 0, 4, 18, 0, 0 });
	expect_routing(r, f.first_window, w, n);
	wal_reader_close(r);
	fx_close(&f);
}

/* Gating weights travel with their ids into the record, typed by its
 * flags, bit for bit; an entry without them makes a record that says so. */
static void test_weights(void)
{
	static const int32_t ids[4] = { 3, 1, 0, 2 };
	static const float values[4] = { 0.5f, 0.25f, 0.75f, -0.125f };
	static const uint16_t bf16[4] = { 0x3f00, 0x3e80, 0x3f40, 0xbe00 };
	static const uint16_t f16[4] = { 0x3800, 0x3400, 0x3a00, 0xb000 };
	static const uint8_t flags[4] = { ROUTING_W_F32, ROUTING_W_BF16, ROUTING_W_F16,
					  ROUTING_W_NONE };
	unsigned char payload[4 * 4 + 4 * 4];
	struct wal_reader *r;
	struct wal_record rec;
	struct rec_routing rt;
	struct wal_iter it;
	unsigned layer = 0, i;
	struct fx f;

	fx_open(&f, LOG_SIZE, 1);
	marker(&f, A, 0);
	memcpy(payload, ids, sizeof ids);
	memcpy(payload + 16, values, sizeof values);
	feed_weighed(&f, WA_TAG(1, 4, A), 0, 2, 2, payload, CAP_DT_F32);
	memcpy(payload + 16, bf16, sizeof bf16);
	feed_weighed(&f, WA_TAG(1, 4, A), 1, 2, 2, payload, CAP_DT_BF16);
	memcpy(payload + 16, f16, sizeof f16);
	feed_weighed(&f, WA_TAG(1, 4, A), 2, 2, 2, payload, CAP_DT_F16);
	feed(&f, WA_TAG(1, 4, A), 3, 2, 2, ids);
	snap(&f, 1);
	expect_stats(&f, (struct wa_stats){ .entries = 4, .windows = 1, .routing = 4 });

	r = reader(&f);
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec)) {
		if (rec.type != WAL_REC_ROUTING)
			continue;
		CU_ASSERT_FATAL(rec_routing_decode(rec.payload, rec.len, &rt) == 0);
		CU_ASSERT_FATAL(rt.layer == layer && layer < 4);
		CU_ASSERT(rt.tokens == 2 && rt.k == 2 && rt.experts == 4);
		CU_ASSERT_EQUAL(rt.flags, flags[layer]);
		CU_ASSERT(memcmp(rt.ids, ids, sizeof ids) == 0);
		if (layer == 3) {
			CU_ASSERT(rt.weights == NULL && rec.len == ROUTING_HDR_SIZE + 16);
		} else {
			CU_ASSERT_FATAL(rt.weights != NULL);
			CU_ASSERT_EQUAL(rec.len, ROUTING_HDR_SIZE + 16 + (layer ? 8 : 16));
			for (i = 0; i < 4; i++)
				CU_ASSERT(rec_routing_weight(&rt, i) == values[i]);
		}
		layer++;
	}
	CU_ASSERT_EQUAL(layer, 4);
	wal_reader_close(r);
	fx_close(&f);
}

/*
 * Routing that cannot be placed (a lane without a marker, or whose last
 * marker is older than the window) is not logged and flags the window;
 * so do appends the GPU dropped.  The flag lasts one window.
 */
static void test_gaps(void)
{
	struct fx f;
	struct wal_reader *r;
	struct want w[8];
	uint64_t id;

	fx_open(&f, LOG_SIZE, 1);
	/* [0, 2): lane C never marked. */
	marker(&f, A, 0);
	w[0] = route(&f, A, 8, 0, 0, 1, 1);
	route(&f, C, 8, 0, 0, 1, 1);
	marker(&f, B, 1);
	w[1] = route(&f, B, 8, 1, 0, 1, 1);
	snap(&f, 2);
	/* [2, 4): whole. */
	marker(&f, A, 2);
	w[2] = route(&f, A, 8, 2, 0, 1, 1);
	marker(&f, A, 3);
	snap(&f, 4);
	/* [4, 6): drops. */
	marker(&f, A, 4);
	w[3] = route(&f, A, 8, 4, 0, 1, 1);
	wa_gap(f.wa, 3);
	snap(&f, 6);
	/* [6, 8): nothing dropped. */
	marker(&f, A, 6);
	wa_gap(f.wa, 0);
	w[4] = route(&f, A, 8, 6, 0, 1, 1);
	snap(&f, 8);
	/* [8, 10): lane B's marker is of step 1. */
	marker(&f, A, 8);
	w[5] = route(&f, A, 8, 8, 0, 1, 1);
	route(&f, B, 8, 8, 0, 1, 1);
	snap(&f, 10);

	expect_stats(&f, (struct wa_stats){ .entries = 8, .windows = 5, .routing = 6,
					    .unplaced = 2 });
	r = reader(&f);
	CU_ASSERT_EQUAL_FATAL(nwindows(r), 5);
	id = f.first_window;
	expect_shape(r, id, "ERRW");
	expect_steps(r, id, (struct rec_window_steps){ 0, 2, 2, WINDOW_ROUTING_GAP, 0 });
	expect_routing(r, id, w, 2);
	expect_shape(r, id + 1, "RW");
	expect_steps(r, id + 1, (struct rec_window_steps){ 2, 2, 1, 0, 0 });
	expect_routing(r, id + 1, w + 2, 1);
	expect_shape(r, id + 2, "RW");
	expect_steps(r, id + 2, (struct rec_window_steps){ 4, 2, 1, WINDOW_ROUTING_GAP, 0 });
	expect_routing(r, id + 2, w + 3, 1);
	expect_shape(r, id + 3, "RW");
	expect_steps(r, id + 3, (struct rec_window_steps){ 6, 2, 1, 0, 0 });
	expect_routing(r, id + 3, w + 4, 1);
	expect_shape(r, id + 4, "RW");
	expect_steps(r, id + 4, (struct rec_window_steps){ 8, 2, 1, WINDOW_ROUTING_GAP, 0 });
	expect_routing(r, id + 4, w + 5, 1);
	wal_reader_close(r);
	fx_close(&f);
}

/*
 * KV chunks: copied from the staging area into the store for the window
 * being committed, their KVREFs before its routing.  Overflow and entries
 * whose data lies outside the data area make the window partial; those
 * entries are neither stored nor logged.
 */
static void test_kv(void)
{
	struct kvs_pool_desc d0 = { .fingerprint = 0x1111, .size = 4 * CHUNK, .chunk_bytes = CHUNK };
	struct kvs_pool_desc d1 = { .fingerprint = 0x2222, .size = 2 * CHUNK + 1000,
				    .chunk_bytes = CHUNK };
	struct kvs_reader *kr = NULL;
	struct wal_error err = { 0 };
	struct wal_reader *r;
	struct kv_stage *s;
	struct want w[1];
	struct fx f;
	uint32_t p0 = 99, p1 = 99;
	uint64_t id, cap;

	fx_open(&f, LOG_SIZE, 1);
	s = f.stage;
	cap = s->capacity;
	CU_ASSERT_EQUAL_FATAL(kvs_pool(f.kvs, &d0, &p0), 0);
	CU_ASSERT_EQUAL_FATAL(kvs_pool(f.kvs, &d1, &p1), 0);
	CU_ASSERT_FATAL(p0 != p1);

	/* [0, 1): three chunks, data in another order than the table. */
	marker(&f, A, 0);
	w[0] = route(&f, A, 8, 0, 0, 3, 1);
	stage_put(s, p0, 1, CHUNK, 1024 + CHUNK, 1);
	stage_put(s, p1, 2, 1000, 0, 2);	/* the pool's short last chunk */
	stage_put(s, p0, 3, CHUNK, 1024, 3);
	atomic_store(&f.busy, 1);
	snap(&f, 1);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);

	/* [1, 3): chunk 1 again, and one that found no room. */
	kv_stage_reset(s);
	stage_put(s, p0, 1, CHUNK, 0, 4);
	s->overflow = 1;
	s->overflow_bytes = CHUNK;
	marker(&f, A, 1);
	marker(&f, A, 2);
	atomic_store(&f.busy, 1);
	snap(&f, 3);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);
	/* What found no room is still changed for the snapshots: no restage. */
	CU_ASSERT_EQUAL(restaged, 0);

	/* [3, 4): entries past the data area: one ends past it, one starts
	 * past it; one good.  The bad ones never reach the store while their
	 * sums say staged: every chunk is staged again. */
	kv_stage_reset(s);
	stage_entry(s, p0, 0, CHUNK, cap - KVSNAP_ALIGN, 0);
	stage_put(s, p1, 0, CHUNK, 0, 5);
	stage_entry(s, p0, 2, CHUNK, cap + KVSNAP_ALIGN, 0);
	marker(&f, A, 3);
	atomic_store(&f.busy, 1);
	snap(&f, 4);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);
	CU_ASSERT_EQUAL(restaged, 2);

	/* [4, 5): nothing changed. */
	kv_stage_reset(s);
	marker(&f, A, 4);
	atomic_store(&f.busy, 1);
	snap(&f, 5);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);

	expect_stats(&f, (struct wa_stats){ .entries = 1, .windows = 4, .routing = 1,
					    .kv_chunks = 5, .kv_bytes = 4 * CHUNK + 1000 });
	r = reader(&f);
	CU_ASSERT_EQUAL_FATAL(nwindows(r), 4);
	id = f.first_window;
	expect_shape(r, id, "EKKKRW");
	expect_steps(r, id, (struct rec_window_steps){ 0, 1, 3, 0, 3 });
	expect_kv(&f, r, id, 0,
		  (struct kwant[]){ { p0, CHUNK, 1, 1 }, { p1, 1000, 2, 2 }, { p0, CHUNK, 3, 3 } },
		  3);
	expect_routing(r, id, w, 1);
	expect_shape(r, id + 1, "KW");
	expect_steps(r, id + 1, (struct rec_window_steps){ 1, 2, 0, WINDOW_KV_PARTIAL, 1 });
	expect_kv(&f, r, id + 1, 2, (struct kwant[]){ { p0, CHUNK, 1, 4 } }, 1);
	expect_shape(r, id + 2, "KW");
	expect_steps(r, id + 2, (struct rec_window_steps){ 3, 1, 0, WINDOW_KV_PARTIAL, 1 });
	expect_kv(&f, r, id + 2, 3, (struct kwant[]){ { p1, CHUNK, 0, 5 } }, 1);
	expect_shape(r, id + 3, "W");
	expect_steps(r, id + 3, (struct rec_window_steps){ 4, 1, 0, 0, 0 });
	wal_reader_close(r);

	/* The entries past the data area never reached the store. */
	CU_ASSERT_EQUAL_FATAL(kvs_reader_open(f.kvpath, f.log_id, &kr, &err), 0);
	CU_ASSERT_EQUAL(kvs_reader_chunk(kr, p0, 0, id + 3, NULL, NULL, NULL, NULL),
			KVS_CHUNK_NONE);
	CU_ASSERT_EQUAL(kvs_reader_chunk(kr, p0, 2, id + 3, NULL, NULL, NULL, NULL),
			KVS_CHUNK_NONE);
	kvs_reader_close(kr);
	fx_close(&f);
}

/* A mark is handled once its boundary has completed (the counters come
 * back by a copy it does not order): the assembler waits for that; when
 * it never comes, the window is KV-partial, nothing of the staging is
 * read, and every chunk is staged again. */
static void test_wait_for_the_boundary(void)
{
	struct wal_reader *r;
	struct fx f;
	uint32_t p = fx_open_pool(&f, 0x4444);
	uint64_t id;

	stage_put(f.stage, p, 1, CHUNK, 0, 1);
	marker(&f, A, 0);
	not_staged = 3;
	atomic_store(&f.busy, 1);
	snap(&f, 1);
	CU_ASSERT_EQUAL(staged_asks, 4);
	CU_ASSERT_EQUAL(restaged, 0);

	kv_stage_reset(f.stage);
	stage_put(f.stage, p, 2, CHUNK, 0, 2);
	marker(&f, A, 1);
	not_staged = UINT_MAX;
	atomic_store(&f.busy, 1);
	snap(&f, 2);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);
	CU_ASSERT_EQUAL(restaged, 1);
	expect_stats(&f, (struct wa_stats){ .windows = 2, .kv_chunks = 1, .kv_bytes = CHUNK });
	r = reader(&f);
	CU_ASSERT_EQUAL_FATAL(nwindows(r), 2);
	id = f.first_window;
	expect_steps(r, id, (struct rec_window_steps){ 0, 1, 0, 0, 1 });
	expect_kv(&f, r, id, 0, (struct kwant[]){ { p, CHUNK, 1, 1 } }, 1);
	expect_shape(r, id + 1, "W");
	expect_steps(r, id + 1, (struct rec_window_steps){ 1, 1, 0, WINDOW_KV_PARTIAL, 0 });
	wal_reader_close(r);
	fx_close(&f);
}

/* A pool the store could not take is in no snapshot: from then on every
 * window is KV-partial, its other chunks stored and logged all the same. */
static void test_untracked(void)
{
	struct wal_reader *r;
	struct fx f;
	uint32_t p = fx_open_pool(&f, 0x3333);
	uint64_t id;

	for (uint64_t t = 0; t < 3; t++) {
		untracked_pools = t > 0;
		kv_stage_reset(f.stage);
		stage_put(f.stage, p, t, CHUNK, 0, (uint32_t)t + 1);
		marker(&f, A, t);
		atomic_store(&f.busy, 1);
		snap(&f, t + 1);
	}
	r = reader(&f);
	CU_ASSERT_EQUAL_FATAL(nwindows(r), 3);
	id = f.first_window;
	expect_steps(r, id, (struct rec_window_steps){ 0, 1, 0, 0, 1 });
	for (uint64_t t = 1; t < 3; t++) {
		expect_steps(r, id + t, (struct rec_window_steps){ t, 1, 0, WINDOW_KV_PARTIAL, 1 });
		expect_kv(&f, r, id + t, t, (struct kwant[]){ { p, CHUNK, t, (uint32_t)t + 1 } }, 1);
	}
	wal_reader_close(r);
	fx_close(&f);
}

/* Without a KV store (a device-DAX log) windows carry routing only; the
 * staging area is still handed back. */
static void test_no_store(void)
{
	struct wal_reader *r;
	struct fx f;

	fx_open(&f, LOG_SIZE, 0);
	stage_put(f.stage, 0, 0, CHUNK, 0, 1);
	marker(&f, A, 0);
	atomic_store(&f.busy, 1);
	snap(&f, 1);
	CU_ASSERT_EQUAL(atomic_load(&f.busy), 0);
	expect_stats(&f, (struct wa_stats){ .windows = 1 });
	r = reader(&f);
	CU_ASSERT_EQUAL(nwindows(r), 1);
	expect_shape(r, f.first_window, "EW");
	expect_steps(r, f.first_window, (struct rec_window_steps){ 0, 1, 0, 0, 0 });
	wal_reader_close(r);
	fx_close(&f);
}

/* A mark with no step since the last one commits nothing. */
static void test_empty_mark(void)
{
	struct wal_reader *r;
	struct want w[1];
	struct fx f;

	fx_open(&f, LOG_SIZE, 1);
	marker(&f, A, 0);
	marker(&f, A, 1);
	snap(&f, 2);
	CU_ASSERT_EQUAL(commits(&f), 1);
	snap(&f, 2);
	CU_ASSERT_EQUAL(commits(&f), 1);
	marker(&f, A, 2);
	w[0] = route(&f, A, 8, 2, 0, 4, 2);
	snap(&f, 3);
	CU_ASSERT_EQUAL(commits(&f), 2);
	expect_stats(&f, (struct wa_stats){ .entries = 1, .windows = 2, .routing = 1 });
	r = reader(&f);
	CU_ASSERT_EQUAL_FATAL(nwindows(r), 2);
	expect_shape(r, f.first_window, "EW");
	expect_steps(r, f.first_window, (struct rec_window_steps){ 0, 2, 0, 0, 0 });
	expect_shape(r, f.first_window + 1, "RW");
	expect_steps(r, f.first_window + 1, (struct rec_window_steps){ 2, 1, 4, 0, 0 });
	expect_routing(r, f.first_window + 1, w, 1);
	wal_reader_close(r);
	fx_close(&f);
}

static char logged[4][256];
static int nlogged;

static void capture_log(int level, const char *msg)
{
	if (nlogged < 4)
		snprintf(logged[nlogged], sizeof logged[0], "%s", msg);
	nlogged++;
}

/* What the preload's allocation path does: a record and a commit of its
 * own, under the log lock.  0, or the status of the failed call. */
static int alloc_commit(struct fx *f, uint64_t id)
{
	uint8_t p[ALLOC_PAYLOAD_SIZE], extra[WINDOW_STEPS_SIZE];
	struct rec_alloc a = { .alloc_id = id, .base = 0x700000000 + id * 0x1000, .size = 4096 };
	struct rec_window_steps none = { 0 };
	int64_t rc;

	rec_alloc_encode(p, &a);
	rec_window_steps_encode(extra, &none);
	pthread_mutex_lock(&f->lock);
	rc = wal_append(f->wal, WAL_REC_ALLOC, p, sizeof p);
	if (rc > 0)
		rc = wal_commit(f->wal, extra, sizeof extra, NULL);
	pthread_mutex_unlock(&f->lock);
	return (int)rc;
}

/* Window `window` holds its EPOCH record, a prefix (maybe empty) of the
 * routing `failed` of a window whose commit failed, in order, then exactly
 * `own`, then its WINDOW record. */
static void expect_after_failure(const struct wal_reader *r, uint64_t window,
				 const struct want *failed, size_t nfailed, const struct want *own)
{
	static char want_shape[1 << 16];
	struct wal_iter it;
	struct wal_record rec;
	size_t n = 0, i = 0, bad = 0;

	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec))
		n += rec.window == window && rec.type == WAL_REC_ROUTING;
	CU_ASSERT(n >= 1 && n - 1 <= nfailed);
	if (n < 1 || n - 1 > nfailed)
		return;
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec))
		if (rec.window == window && rec.type == WAL_REC_ROUTING) {
			bad += routing_diff(&rec, i + 1 < n ? &failed[i] : own) != 0;
			i++;
		}
	CU_ASSERT_EQUAL(bad, 0);
	expect_shape(r, window, with_routing(want_shape, sizeof want_shape, "E", n, "W"));
}

/*
 * A window whose routing, `layers` entries of rows x 8 ids (experts 256),
 * cannot fit in a 1 MiB log: its commit fails, is reported once, and the
 * next window of one step and one small entry commits, and so does an
 * allocation after it.
 *
 * The log cannot take back what the failed commit had appended: those
 * records stay in the open window and the next WINDOW record commits them
 * with its own (a prefix of the failed window's routing under an extra
 * naming other steps).  That is the writer as it is; a fix that appends
 * nothing of a window that cannot fit leaves the prefix empty, and both
 * pass here.  No fatal assertion after the log is open: a failure here
 * must not leak the fixture into the sanitizers' report.
 */
static void full_log(uint32_t layers, uint32_t rows)
{
	struct want *big = calloc(layers, sizeof *big);
	struct want small;
	struct wal_reader *r;
	struct fx f;
	uint32_t l;

	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	fx_open(&f, 1u << 20, 1);
	marker(&f, A, 0);
	for (l = 0; l < layers; l++)
		big[l] = route(&f, A, 256, 0, l, rows, 8);
	marker(&f, A, 1);
	nlogged = 0;
	wal_set_log(capture_log, WAL_LOG_INFO);
	snap(&f, 2);
	CU_ASSERT_EQUAL(nlogged, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(logged[0], "cannot commit the window of steps 0-1"));
	CU_ASSERT_EQUAL(commits(&f), 0);
	expect_stats(&f, (struct wa_stats){ .entries = layers, .failures = 1 });
	CU_ASSERT_EQUAL(restaged, 1);	/* what it staged was taken back */

	marker(&f, A, 2);
	small = route(&f, A, 256, 2, 0, 2, 8);
	snap(&f, 3);
	wal_set_log(NULL, WAL_LOG_WARN);
	expect_stats(&f, (struct wa_stats){ .entries = layers + 1, .windows = 1, .routing = 1,
					    .failures = 1 });
	CU_ASSERT_EQUAL(alloc_commit(&f, 1), 0);

	r = reader(&f);
	CU_ASSERT_EQUAL(nwindows(r), 2);
	if (nwindows(r) == 2) {
		expect_steps(r, f.first_window, (struct rec_window_steps){ 2, 1, 2, 0, 0 });
		expect_after_failure(r, f.first_window, big, layers, &small);
		expect_shape(r, f.first_window + 1, "AW");
	}
	wal_reader_close(r);
	fx_close(&f);
	free(big);
}

/* 40 entries of 32 KiB: what the failed commit appended leaves room for
 * the next window. */
static void test_full(void)
{
	full_log(40, 1024);
}

/* 2200 entries of 512 bytes: what the failed commit appended fills the
 * log to within less than a record, and no commit fits after it. */
static void test_full_small_records(void)
{
	full_log(2200, 16);
}

/* Allocation windows committed between a window's entries hold none of
 * its records: routing waits in memory for the mark. */
static void test_interleaved(void)
{
	struct wal_reader *r;
	struct want w[4];
	struct fx f;
	uint64_t id;

	fx_open(&f, LOG_SIZE, 1);
	marker(&f, A, 0);
	w[0] = route(&f, A, 8, 0, 0, 2, 2);
	CU_ASSERT_EQUAL(alloc_commit(&f, 1), 0);
	w[1] = route(&f, A, 8, 0, 1, 2, 2);
	marker(&f, A, 1);
	w[2] = route(&f, A, 8, 1, 0, 2, 2);
	CU_ASSERT_EQUAL(alloc_commit(&f, 2), 0);
	w[3] = route(&f, A, 8, 1, 1, 2, 2);
	snap(&f, 2);
	CU_ASSERT_EQUAL(alloc_commit(&f, 3), 0);

	r = reader(&f);
	CU_ASSERT_EQUAL_FATAL(nwindows(r), 4);
	id = f.first_window;
	expect_shape(r, id, "EAW");
	expect_shape(r, id + 1, "AW");
	expect_shape(r, id + 2, "RRRRW");
	expect_steps(r, id + 2, (struct rec_window_steps){ 0, 2, 4, 0, 0 });
	expect_routing(r, id + 2, w, 4);
	expect_shape(r, id + 3, "AW");
	wal_reader_close(r);
	fx_close(&f);
}

/* The same with the allocation path on another thread, racing the marks
 * (a stress: a commit without the log lock fails it most runs, and
 * test_lock_held every run). */
struct racer {
	struct fx *f;
	atomic_int stop;
	atomic_ullong done;
	uint64_t failed;	/* CUnit asserts on the main thread only */
};

static void *race_allocs(void *arg)
{
	struct racer *rc = arg;

	/* Bounded, so that the log (208 bytes a window here) never wraps
	 * over the windows checked. */
	while (!atomic_load(&rc->stop) && rc->done < 10000)
		rc->failed += alloc_commit(rc->f, ++rc->done) != 0;
	return NULL;
}

static void test_interleaved_threads(void)
{
	enum { WINDOWS = 40, LAYERS = 256 };
	static struct want w[WINDOWS][LAYERS];
	struct racer rc = { 0 };
	struct wal_reader *r;
	const struct wal_window *win;
	struct fx f;
	pthread_t th;
	size_t n, i, decode = 0;
	uint64_t s;
	struct wal_iter it;
	struct wal_record rec;
	uint32_t l;
	char (*got)[LAYERS + 8], want[LAYERS + 8];

	fx_open(&f, LOG_SIZE, 1);
	rc.f = &f;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, race_allocs, &rc), 0);
	while (!atomic_load(&rc.done))
		sched_yield();
	for (s = 0; s < WINDOWS; s++) {
		marker(&f, A, s);
		for (l = 0; l < LAYERS; l++)
			w[s][l] = route(&f, A, 8, s, l, 1, 2);
		snap(&f, s + 1);
	}
	atomic_store(&rc.stop, 1);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(rc.failed, 0);
	expect_stats(&f, (struct wa_stats){ .entries = LAYERS * WINDOWS, .windows = WINDOWS,
					    .routing = LAYERS * WINDOWS });

	/* One pass for the shapes of all windows: ids are consecutive. */
	r = reader(&f);
	win = wal_reader_windows(r, &n);
	CU_ASSERT_EQUAL_FATAL(n, WINDOWS + rc.done);
	CU_ASSERT_PTR_NOT_NULL_FATAL(got = calloc(n, sizeof *got));
	wal_iter_init(&it, r);
	while (wal_iter_next(&it, &rec)) {
		size_t k = rec.window - win[0].id, len;

		CU_ASSERT_FATAL(k < n);
		len = strlen(got[k]);
		CU_ASSERT_FATAL(len + 1 < sizeof *got);
		got[k][len] = letter(rec.type);
	}
	for (i = 0; i < n; i++) {
		if (strcmp(got[i], i == 0 ? "EAW" : "AW") == 0)
			continue;
		with_routing(want, sizeof want, i == 0 ? "E" : "", LAYERS, "W");
		CU_ASSERT_STRING_EQUAL(got[i], want);
		CU_ASSERT_FATAL(decode < WINDOWS);
		expect_steps(r, win[i].id, (struct rec_window_steps){ decode, 1, 1, 0, 0 });
		expect_routing(r, win[i].id, w[decode], LAYERS);
		decode++;
	}
	CU_ASSERT_EQUAL(decode, WINDOWS);
	free(got);
	wal_reader_close(r);
	fx_close(&f);
}

/* The commit takes the log lock: while another caller holds it, a mark
 * waits and the log stays as it was. */
struct marker_thread {
	struct fx *f;
	atomic_int done;
};

static void *mark_later(void *arg)
{
	struct marker_thread *m = arg;

	snap(m->f, 1);
	atomic_store(&m->done, 1);
	return NULL;
}

static void test_lock_held(void)
{
	const struct timespec wait = { 0, 50 * 1000 * 1000 };
	struct marker_thread m = { 0 };
	struct wal_reader *r;
	struct want w[1];
	struct fx f;
	pthread_t th;

	fx_open(&f, LOG_SIZE, 1);
	m.f = &f;
	marker(&f, A, 0);
	w[0] = route(&f, A, 8, 0, 0, 2, 2);
	pthread_mutex_lock(&f.lock);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, mark_later, &m), 0);
	nanosleep(&wait, NULL);
	CU_ASSERT_EQUAL(atomic_load(&m.done), 0);
	CU_ASSERT_EQUAL(commits(&f), 0);
	pthread_mutex_unlock(&f.lock);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(commits(&f), 1);
	r = reader(&f);
	expect_shape(r, f.first_window, "ERW");
	expect_routing(r, f.first_window, w, 1);
	wal_reader_close(r);
	fx_close(&f);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "a window of two lanes", test_window },
		{ "gating weights beside the ids", test_weights },
		{ "unplaced routing and drops flag one window", test_gaps },
		{ "KV chunks, overflow, bad staging entries", test_kv },
		{ "a pool the store could not take", test_untracked },
		{ "a mark waits for its boundary", test_wait_for_the_boundary },
		{ "no KV store", test_no_store },
		{ "a mark without steps commits nothing", test_empty_mark },
		{ "a window larger than the log", test_full },
		{ "a failed window of small records", test_full_small_records },
		{ "allocation commits between entries", test_interleaved },
		{ "allocation commits from another thread", test_interleaved_threads },
		{ "the commit waits for the log lock", test_lock_held },
		CU_TEST_INFO_NULL,
	};
	static CU_SuiteInfo suites[] = {
		{ "window", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
