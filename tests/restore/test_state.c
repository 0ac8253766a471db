/*
 * test_state.c - tools/state.c on logs and KV stores forged with the
 * writers: the last decode window; the allocation table (role changes,
 * frees, a reclaimed start); pools and their chunks (data, zeros, a second
 * process's pool whose old copies are stale, store pools no allocation
 * holds); KVREFs the store contradicts; the routing windows and their
 * records; a missing store and one of another log; the engine's requests
 * with and without decode windows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forge.h"
#include "kvstore.h"
#include "record.h"
#include "state.h"
#include "testutil.h"
#include "wal.h"

#define CHUNK 4096u
#define FP UINT64_C(0xf00d)

/* ---- forging (tools/forge.h) --------------------------------------------- */

/* A new log of 1 MiB and its store, pools of CHUNK-byte chunks. */
static void forge_new(struct forge *f, const char *tag)
{
	memset(f, 0, sizeof *f);
	test_path(f->path, sizeof f->path, tag);
	f->log_size = 1 << 20;
	f->fingerprint = FP;
	f->chunk_bytes = CHUNK;
	CU_ASSERT_EQUAL_FATAL(forge_open(f), 0);
}

/* Close what was forged; a forging call that failed ends the test. */
static void forge_done(struct forge *f)
{
	if (forge_close(f))
		fprintf(stderr, "\nforge: %s\n", f->msg);
	CU_ASSERT_EQUAL_FATAL(f->status, 0);
}

/* Chunk `chunk` filled with `byte`, into the store and the open window. */
static void put(struct forge *f, uint32_t no, uint64_t chunk, uint8_t byte)
{
	static uint8_t data[CHUNK];

	memset(data, byte, sizeof data);
	forge_put(f, no, chunk, data, CHUNK);
}

/* One ROUTING record: `tokens` rows of 2 experts each, ids e and e + 1. */
static void routing(struct forge *f, uint64_t step, uint32_t layer, uint32_t tokens, uint8_t e)
{
	struct rec_routing r = { .step = step, .layer = layer, .tokens = tokens, .k = 2,
				 .id_bytes = 1, .experts = 8 };
	uint8_t p[ROUTING_HDR_SIZE + 64];

	rec_routing_encode(p, &r);
	for (uint32_t i = 0; i < tokens; i++) {
		p[ROUTING_HDR_SIZE + 2 * i] = e;
		p[ROUTING_HDR_SIZE + 2 * i + 1] = (uint8_t)(e + 1);
	}
	CU_ASSERT_FATAL(wal_append(f->w, WAL_REC_ROUTING, p, ROUTING_HDR_SIZE + 2 * tokens) > 0);
}

static int load(struct state *s, const struct forge *f, char *msg, size_t len)
{
	int ret = state_load(s, f->path, msg, len);

	if (ret < 0)
		fprintf(stderr, "\nstate_load: %s\n", msg);
	return ret;
}

/* The kind of a chunk; *byte its first byte when it has data. */
static int chunk_of(const struct state *s, const struct state_pool *p, uint64_t c, int *byte,
		    char *why, size_t len)
{
	const uint8_t *data = NULL;
	uint32_t crc;
	int k = state_chunk(s, p, c, &data, &crc, why, len);

	*byte = k == STATE_CHUNK_DATA ? data[0] : -1;
	return k;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_no_decode_window(void)
{
	struct forge f;
	struct state s;
	char msg[512];

	forge_new(&f, "nodecode");
	forge_alloc(&f, 1, 3 * CHUNK, 0, ALLOC_ROLE_OTHER);
	forge_done(&f);
	CU_ASSERT_EQUAL(state_load(&s, f.path, msg, sizeof msg), STATE_NOTHING);
	CU_ASSERT(strstr(msg, "no committed decode window") != NULL);
	CU_ASSERT(strstr(msg, f.path) != NULL);
	unlink(f.path);
	CU_ASSERT_EQUAL(state_load(&s, f.path, msg, sizeof msg), -1);
	CU_ASSERT(strstr(msg, f.path) != NULL);
}

/* Role changes, frees, the decode window found past later allocation
 * windows, data and never-written chunks. */
static void test_table_and_chunks(void)
{
	struct forge f;
	struct state s;
	char msg[512], why[160];
	uint64_t kvw, c;
	uint32_t no;
	int byte;

	forge_new(&f, "table");
	forge_alloc(&f, 1, 3 * CHUNK, 0, ALLOC_ROLE_OTHER);
	forge_alloc(&f, 2, 100, 0, ALLOC_ROLE_OTHER);
	forge_alloc(&f, 3, 200, 0, ALLOC_ROLE_WEIGHTS);
	no = forge_pool(&f, 3 * CHUNK, 0);
	kvw = forge_alloc(&f, 1, 3 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	forge_free(&f, 2);
	put(&f, no, 0, 0xa0);
	put(&f, no, 1, 0xa1);
	routing(&f, 0, 0, 3, 4);
	c = forge_commit(&f, 0, 4, 0);
	forge_alloc(&f, 4, 300, 0, ALLOC_ROLE_OTHER); /* after C: not in the table */
	forge_done(&f);

	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.c->id, c);
	CU_ASSERT_EQUAL(s.cs.first_step, 0);
	CU_ASSERT_EQUAL(s.cs.steps, 4);
	CU_ASSERT_EQUAL(s.history_complete, 1);
	CU_ASSERT_EQUAL_FATAL(s.nalloc, 2);
	CU_ASSERT_EQUAL(s.alloc[0].a.alloc_id, 1);
	CU_ASSERT_EQUAL(s.alloc[0].a.role, ALLOC_ROLE_KV_POOL);
	CU_ASSERT_EQUAL(s.alloc[0].kv_known, 1);
	CU_ASSERT_EQUAL(s.alloc[0].kv_window, kvw);
	CU_ASSERT_EQUAL(s.alloc[1].a.alloc_id, 3);
	CU_ASSERT_EQUAL(s.alloc[1].a.role, ALLOC_ROLE_WEIGHTS);
	CU_ASSERT_EQUAL(s.alloc[1].a.size, 200);
	CU_ASSERT_EQUAL_FATAL(s.npools, 1);
	CU_ASSERT_PTR_EQUAL(s.pool[0].alloc, &s.alloc[0]);
	CU_ASSERT_EQUAL(s.pool[0].floor, kvw);
	CU_ASSERT_EQUAL(s.kvrefs, 2);
	CU_ASSERT_EQUAL(s.bad, 0);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 0, &byte, why, sizeof why), STATE_CHUNK_DATA);
	CU_ASSERT_EQUAL(byte, 0xa0);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 1, &byte, why, sizeof why), STATE_CHUNK_DATA);
	CU_ASSERT_EQUAL(byte, 0xa1);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 2, &byte, why, sizeof why), STATE_CHUNK_ZERO);
	CU_ASSERT_EQUAL(state_chunk_len(&s.pool[0], 2), CHUNK);
	state_free(&s);
}

/*
 * A second process gets the same pool back: its chunk 1, never written by
 * it, reads as zeros, not as the first process's bytes; a pool only the
 * first process had is left out; the routing is the second process's.
 */
static void test_second_process(void)
{
	struct forge f;
	struct state s;
	struct state_iter it;
	struct wal_record rec;
	char msg[512], why[160];
	uint64_t kvw, n = 0;
	uint32_t no, other;
	int byte;

	forge_new(&f, "epochs");
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_OTHER);
	forge_alloc(&f, 2, 1 * CHUNK, 0, ALLOC_ROLE_OTHER);
	no = forge_pool(&f, 2 * CHUNK, 0);
	other = forge_pool(&f, 1 * CHUNK, 0);
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	forge_alloc(&f, 2, 1 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	put(&f, no, 0, 0x10);
	put(&f, no, 1, 0x11);
	put(&f, other, 0, 0x12);
	routing(&f, 0, 0, 2, 0);
	routing(&f, 1, 0, 2, 0);
	forge_commit(&f, 0, 2, 0);
	forge_done(&f);

	CU_ASSERT_EQUAL_FATAL(forge_open(&f), 0);
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_OTHER);
	CU_ASSERT_EQUAL(forge_pool(&f, 2 * CHUNK, 0), no);
	kvw = forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	put(&f, no, 0, 0x20);
	routing(&f, 0, 0, 3, 6);
	routing(&f, 0, 1, 3, 2);
	forge_commit(&f, 0, 1, 0);
	forge_done(&f);

	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.c->epoch, 2);
	CU_ASSERT_EQUAL(s.history_complete, 1);
	CU_ASSERT_EQUAL(s.stale_pools, 1);
	CU_ASSERT_EQUAL_FATAL(s.npools, 1);
	CU_ASSERT_EQUAL(s.pool[0].no, no);
	CU_ASSERT_EQUAL(s.pool[0].floor, kvw);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 0, &byte, why, sizeof why), STATE_CHUNK_DATA);
	CU_ASSERT_EQUAL(byte, 0x20);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 1, &byte, why, sizeof why), STATE_CHUNK_ZERO);

	/* routing: the second process's window only */
	CU_ASSERT_EQUAL_FATAL(s.nwin, 1);
	CU_ASSERT_EQUAL(s.win[0].id, s.c->id);
	CU_ASSERT_EQUAL(s.routing, 2);
	CU_ASSERT_EQUAL_FATAL(s.hist.nlayers, 2);
	CU_ASSERT_EQUAL(s.hist.layer[0].tokens, 3);
	CU_ASSERT_EQUAL(s.hist.layer[0].count[6], 3);
	CU_ASSERT_EQUAL(s.hist.layer[0].count[7], 3);
	CU_ASSERT_EQUAL(s.hist.layer[0].count[0], 0);
	CU_ASSERT_EQUAL(s.hist.layer[1].count[2], 3);
	state_routing_init(&it, &s);
	while (state_routing_next(&it, &rec)) {
		CU_ASSERT_EQUAL(rec.type, WAL_REC_ROUTING);
		CU_ASSERT_EQUAL(rec.window, s.c->id);
		n++;
	}
	CU_ASSERT_EQUAL(n, 2);
	state_free(&s);
}

/* KVREFs the store contradicts: a CRC, a newer copy than the store has,
 * a copy the store never got. */
static void test_contradictions(void)
{
	struct forge f;
	struct state s;
	char msg[512], why[160];
	uint64_t off;
	uint32_t no, crc;
	int byte;

	forge_new(&f, "contra");
	no = forge_pool(&f, 4 * CHUNK, 0);
	forge_alloc(&f, 1, 4 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	put(&f, no, 0, 0x30);
	put(&f, no, 1, 0x31);
	forge_commit(&f, 0, 1, 0);
	{
		static uint8_t data[CHUNK];

		CU_ASSERT_EQUAL_FATAL(kvs_put(f.kv, no, 2, data, CHUNK,
					      forge_open_window(&f), &off, &crc), 0);
	}
	forge_kvref(&f, no, 2, CHUNK, off, crc ^ 1);   /* the wrong CRC */
	forge_kvref(&f, no, 1, CHUNK, 0, 0);           /* a copy of this window: never put */
	forge_kvref(&f, no, 3, CHUNK, 0, 0);           /* the same, and no copy at all */
	forge_kvref(&f, no + 7, 0, CHUNK, 0, 0);       /* a pool the store lacks */
	forge_commit(&f, 1, 1, 0);
	forge_done(&f);

	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.bad, 1);
	CU_ASSERT_EQUAL(s.kvrefs, 6);
	CU_ASSERT_EQUAL_FATAL(s.npools, 1);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 0, &byte, why, sizeof why), STATE_CHUNK_DATA);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 1, &byte, why, sizeof why), STATE_CHUNK_LOST);
	CU_ASSERT(strstr(why, "the KV store holds window") != NULL);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 2, &byte, why, sizeof why), STATE_CHUNK_LOST);
	CU_ASSERT(strstr(why, "its KVREF says") != NULL);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 3, &byte, why, sizeof why), STATE_CHUNK_LOST);
	CU_ASSERT(strstr(why, "the KV store has none") != NULL);
	state_free(&s);
}

/*
 * The log no longer holds the epoch's start: the table lacks what was
 * reclaimed, and the pool, which no known allocation holds, is kept with
 * every copy taken.  Damage to a chunk's data makes it lost.
 */
static void test_reclaimed_start(void)
{
	struct forge f;
	struct state s;
	char msg[512], why[160], kp[sizeof f.path + 3];
	uint64_t off;
	uint32_t no, crc;
	uint8_t b;
	FILE *kf;
	int byte;

	forge_new(&f, "reclaimed");
	no = forge_pool(&f, 2 * CHUNK, 0);
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	put(&f, no, 0, 0x40);
	forge_commit(&f, 0, 1, 0);
	CU_ASSERT_EQUAL_FATAL(wal_checkpoint(f.w), 0);
	forge_alloc(&f, 2, 100, 0, ALLOC_ROLE_OTHER);
	{
		static uint8_t data[CHUNK];

		memset(data, 0x41, sizeof data);
		CU_ASSERT_EQUAL_FATAL(kvs_put(f.kv, no, 1, data, CHUNK,
					      forge_open_window(&f), &off, &crc), 0);
		forge_kvref(&f, no, 1, CHUNK, off, crc);
	}
	forge_commit(&f, 1, 1, WINDOW_ROUTING_GAP);
	forge_done(&f);

	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.history_complete, 0);
	CU_ASSERT_EQUAL(s.cs.flags, WINDOW_ROUTING_GAP);
	CU_ASSERT_EQUAL_FATAL(s.nalloc, 1);
	CU_ASSERT_EQUAL(s.alloc[0].a.alloc_id, 2);
	CU_ASSERT_EQUAL_FATAL(s.npools, 1);
	CU_ASSERT_PTR_NULL(s.pool[0].alloc);
	CU_ASSERT_EQUAL(s.pool[0].floor, 0);
	CU_ASSERT_EQUAL(s.nwin, 2);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 0, &byte, why, sizeof why), STATE_CHUNK_DATA);
	CU_ASSERT_EQUAL(byte, 0x40);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 1, &byte, why, sizeof why), STATE_CHUNK_DATA);
	CU_ASSERT_EQUAL(byte, 0x41);
	state_free(&s);

	kvs_path(f.path, kp, sizeof kp);
	CU_ASSERT_PTR_NOT_NULL_FATAL(kf = fopen(kp, "r+b"));
	CU_ASSERT_EQUAL(fseek(kf, (long)off + 100, SEEK_SET), 0);
	b = 0x41 ^ 0xff;
	CU_ASSERT_EQUAL(fwrite(&b, 1, 1, kf), 1);
	fclose(kf);
	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(chunk_of(&s, &s.pool[0], 1, &byte, why, sizeof why), STATE_CHUNK_LOST);
	CU_ASSERT(strstr(why, "damaged") != NULL);
	state_free(&s);
}

/* Routing only in decode windows, undecodable records counted, not used. */
static void test_routing_records(void)
{
	struct forge f;
	struct state s;
	struct state_iter it;
	struct wal_record rec;
	char msg[512];
	uint8_t junk[ROUTING_HDR_SIZE + 3] = { 0 };
	uint64_t n = 0;

	forge_new(&f, "routing");
	routing(&f, 0, 0, 1, 1);
	forge_commit(&f, 0, 0, 0);           /* not a decode window */
	routing(&f, 0, 0, 2, 3);
	CU_ASSERT_FATAL(wal_append(f.w, WAL_REC_ROUTING, junk, sizeof junk) > 0);
	forge_commit(&f, 0, 1, 0);
	routing(&f, 1, 0, 1, 5);
	forge_commit(&f, 1, 1, 0);
	routing(&f, 2, 0, 1, 5);             /* never committed */
	forge_done(&f);

	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.nwin, 2);
	CU_ASSERT_EQUAL(s.routing, 2);
	CU_ASSERT_EQUAL(s.bad, 1);
	CU_ASSERT_EQUAL(s.hist.layer[0].tokens, 3);
	CU_ASSERT_EQUAL(s.hist.layer[0].count[1], 0);
	state_routing_init(&it, &s);
	while (state_routing_next(&it, &rec))
		n++;
	CU_ASSERT_EQUAL(n, 2);
	state_free(&s);
}

/* No KV store: routing only.  A store of another log: refused. */
static void test_store_presence(void)
{
	struct forge f, g;
	struct state s;
	char msg[512], kp[sizeof f.path + 3], kq[sizeof g.path + 3];

	forge_new(&f, "nostore");
	forge_pool(&f, CHUNK, 0);
	forge_alloc(&f, 1, CHUNK, 0, ALLOC_ROLE_KV_POOL);
	put(&f, 0, 0, 0x50);
	forge_commit(&f, 0, 1, 0);
	forge_done(&f);
	forge_new(&g, "otherstore");
	forge_done(&g);

	kvs_path(f.path, kp, sizeof kp);
	kvs_path(g.path, kq, sizeof kq);
	CU_ASSERT_EQUAL(rename(kq, kp), 0);
	CU_ASSERT_EQUAL(state_load(&s, f.path, msg, sizeof msg), -1);
	CU_ASSERT(strstr(msg, "KV store of log") != NULL);
	CU_ASSERT(strstr(msg, kp) != NULL);

	CU_ASSERT_EQUAL(unlink(kp), 0);
	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_PTR_NULL(s.kv);
	CU_ASSERT_EQUAL(s.npools, 0);
	CU_ASSERT_EQUAL(s.kvrefs, 1);
	CU_ASSERT_EQUAL(s.bad, 0);
	state_free(&s);
}

/* The request id and step of s->req's i-th request. */
static int request_is(const struct state *s, size_t i, const char *id, uint64_t step,
		      uint32_t ntokens)
{
	struct rec_request r;

	return i < s->req.n && rec_request_decode(s->req.payload[i], s->req.len[i], &r) == 0 &&
	       r.id_len == strlen(id) && !memcmp(r.id, id, r.id_len) && r.step == step &&
	       r.ntokens == ntokens;
}

/* With decode windows the engine's steps and the preload's are not paired
 * yet: C is the decode window, and no requests are taken. */
static void test_requests_with_decode(void)
{
	struct forge f;
	struct state s;
	char msg[512];
	uint64_t c;

	forge_new(&f, "requests");
	forge_request(&f, "a", 7, 10, 9);
	forge_commit(&f, 0, 8, WINDOW_REQUESTS);
	routing(&f, 3, 0, 2, 1);
	c = forge_commit(&f, 0, 8, 0);
	forge_request(&f, "a", 15, 18, 17);
	forge_commit(&f, 8, 8, WINDOW_REQUESTS);
	forge_done(&f);
	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.c->id, c);
	CU_ASSERT_PTR_NULL(s.req.w);
	CU_ASSERT_EQUAL(s.req.n, 0);
	CU_ASSERT_EQUAL(s.nwin, 1);	/* adapter windows are no routing windows */
	state_free(&s);
}

/* A process that logged KV, its decode windows gone: not its requests
 * alone. */
static void test_requests_without_kv(void)
{
	struct forge f;
	struct state s;
	char msg[512];

	forge_new(&f, "reqnokv");
	forge_alloc(&f, 1, 2 * CHUNK, 0, ALLOC_ROLE_KV_POOL);
	forge_request(&f, "a", 7, 10, 9);
	forge_commit(&f, 0, 8, WINDOW_REQUESTS);
	forge_done(&f);
	CU_ASSERT_EQUAL(state_load(&s, f.path, msg, sizeof msg), STATE_NOTHING);
	CU_ASSERT(strstr(msg, "logged KV, and no decode window of it is left") != NULL);
}

/* A scheduler's process logs no kernels: its newest adapter window is C. */
static void test_requests_only(void)
{
	struct forge f;
	struct state s;
	char msg[512];
	uint64_t w;

	forge_new(&f, "reqonly");
	forge_request(&f, "a", 15, 18, 17);
	forge_commit(&f, 0, 16, WINDOW_REQUESTS);
	forge_request(&f, "a", 31, 34, 33);
	forge_request(&f, "b", 31, 5, 4);
	w = forge_commit(&f, 16, 16, WINDOW_REQUESTS);
	forge_done(&f);
	CU_ASSERT_EQUAL_FATAL(load(&s, &f, msg, sizeof msg), 0);
	CU_ASSERT_EQUAL(s.c->id, w);
	CU_ASSERT(s.cs.first_step == 16 && s.cs.steps == 16);
	CU_ASSERT_PTR_EQUAL(s.req.w, s.c);
	CU_ASSERT_EQUAL_FATAL(s.req.n, 2);
	CU_ASSERT(request_is(&s, 0, "a", 31, 34));
	CU_ASSERT(request_is(&s, 1, "b", 31, 5));
	CU_ASSERT_EQUAL(s.nwin, 0);
	CU_ASSERT_EQUAL(s.npools, 0);
	state_free(&s);
}

static CU_TestInfo state_tests[] = {
	{ "no decode window", test_no_decode_window },
	{ "table and chunks", test_table_and_chunks },
	{ "second process", test_second_process },
	{ "KVREFs the store contradicts", test_contradictions },
	{ "reclaimed start", test_reclaimed_start },
	{ "routing records", test_routing_records },
	{ "store missing or of another log", test_store_presence },
	{ "requests beside decode windows", test_requests_with_decode },
	{ "requests of a process that logged KV", test_requests_without_kv },
	{ "requests alone", test_requests_only },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ "state", NULL, NULL, NULL, NULL, state_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}
