/*
 * test_reqindex.c - the request index (reqindex.h): what the writer
 * writes parses back; every cut, every flipped bit and every forged
 * inconsistency (with a CRC made to match) is refused; a token sequence
 * matches the longest recorded prefix whose KV is restored, in whole
 * blocks, never its last token.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "reqindex.h"
#include "testutil.h"

/* Three requests in blocks of 4 tokens: "a" (10 tokens, 9 computed),
 * "bb" (its first 6 tokens those of "a", then others; 12 computed), "c"
 * (2 tokens, none computed). */
static const uint32_t a_tok[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
static const uint32_t bb_tok[12] = { 1, 2, 3, 4, 5, 6, 70, 80, 90, 100, 110, 120 };
static const uint32_t c_tok[2] = { 1, 2 };
static const uint32_t a_blk[3] = { 5, 6, 7 }, bb_blk[3] = { 8, 9, 10 };
static const uint32_t *const a_g[1] = { a_blk }, *const bb_g[1] = { bb_blk }, *const c_g[1] = { a_blk };

struct three {
	uint8_t pay[3][256];
	const uint8_t *p[3];
	uint32_t len[3];
};

static void make(struct three *t, const char *bb_id)
{
	struct rec_request r[3] = {
		{ .step = 31, .ntokens = 10, .nprompt = 4, .ncomputed = 9, .block_tokens = 4,
		  .id_len = 1, .ngroups = 1, .id = (const uint8_t *)"a", .nblocks = { 3 } },
		{ .step = 31, .ntokens = 12, .nprompt = 6, .ncomputed = 12, .block_tokens = 4,
		  .id_len = (uint8_t)strlen(bb_id), .ngroups = 1, .id = (const uint8_t *)bb_id,
		  .nblocks = { 3 } },
		{ .step = 31, .ntokens = 2, .nprompt = 2, .ncomputed = 0, .block_tokens = 4,
		  .id_len = 1, .ngroups = 1, .id = (const uint8_t *)"c", .nblocks = { 0 } },
	};
	const uint32_t *tok[3] = { a_tok, bb_tok, c_tok };
	const uint32_t *const *blk[3] = { a_g, bb_g, c_g };

	for (int i = 0; i < 3; i++) {
		t->len[i] = (uint32_t)rec_request_encode(t->pay[i], sizeof t->pay[i], &r[i], tok[i],
							 blk[i]);
		CU_ASSERT_FATAL(t->len[i] > 0);
		t->p[i] = t->pay[i];
	}
}

static const struct reqindex head = { .log_id = 0x1122334455667788u, .window = 9,
				      .first_step = 16, .last_step = 31 };

/* A good file of the three requests in a new buffer, its length in *len. */
static uint8_t *good(size_t *len)
{
	struct three t;
	uint8_t *buf;

	make(&t, "bb");
	*len = reqindex_format(NULL, 0, &head, t.p, t.len, 3);
	CU_ASSERT_FATAL(*len > REQINDEX_HDR_SIZE);
	buf = malloc(*len);
	CU_ASSERT_FATAL(buf != NULL);
	CU_ASSERT_EQUAL_FATAL(reqindex_format(buf, *len, &head, t.p, t.len, 3), *len);
	CU_ASSERT_EQUAL(reqindex_format(buf, *len - 1, &head, t.p, t.len, 3), 0);
	return buf;
}

static void recrc(uint8_t *buf, size_t len)
{
	put32(buf + len - 4, crc32c(0, buf, len - 4));
}

static int parses(const uint8_t *buf, size_t len)
{
	struct reqindex x;
	char err[128];
	int r = reqindex_parse(buf, len, &x, err, sizeof err);

	if (r == 0)
		reqindex_free(&x);
	return r == 0;
}

static void test_round_trip(void)
{
	struct reqindex x;
	char err[128];
	size_t len;
	uint8_t *buf = good(&len);
	int seen = 0;

	CU_ASSERT_EQUAL_FATAL(reqindex_parse(buf, len, &x, err, sizeof err), 0);
	CU_ASSERT(x.log_id == head.log_id && x.window == 9 && x.first_step == 16 &&
		  x.last_step == 31);
	CU_ASSERT_EQUAL_FATAL(x.n, 3);
	for (size_t i = 0; i < x.n; i++) {
		const struct rec_request *r = &x.reqs[i];

		if (r->id_len == 2 && !memcmp(r->id, "bb", 2)) {
			seen++;
			CU_ASSERT_EQUAL(r->ntokens, 12);
			CU_ASSERT_EQUAL(rec_request_token(r, 11), 120);
			CU_ASSERT_EQUAL(rec_request_block(r, 0, 2), 10);
		}
	}
	CU_ASSERT_EQUAL(seen, 1);
	reqindex_free(&x);
	free(buf);
}

/* Every shorter length, every flipped bit: refused. */
static void test_damage(void)
{
	size_t len, i;
	uint8_t *buf = good(&len);

	for (i = 0; i < len; i++)
		CU_ASSERT(!parses(buf, i));
	for (i = 0; i < len * 8; i++) {
		buf[i / 8] ^= (uint8_t)(1u << i % 8);
		CU_ASSERT(!parses(buf, len));
		buf[i / 8] ^= (uint8_t)(1u << i % 8);
	}
	CU_ASSERT(parses(buf, len));
	free(buf);
}

/* Inconsistent contents behind a matching CRC. */
static void test_forged(void)
{
	struct three t;
	size_t len, first = REQINDEX_HDR_SIZE;
	uint8_t *buf = good(&len), *copy = malloc(len + 8);

	CU_ASSERT_FATAL(copy != NULL);
#define FORGED(what, change)					\
	do {							\
		memcpy(copy, buf, len);				\
		change;						\
		recrc(copy, len);				\
		if (parses(copy, len))				\
			CU_FAIL(what);				\
	} while (0)
	FORGED("magic", copy[7] = '2');
	FORGED("steps out of order", put64(copy + 24, 32));
	FORGED("reserved header word", copy[44] = 1);
	FORGED("more requests than there are", put32(copy + 40, 4));
	FORGED("fewer requests than there are", put32(copy + 40, 2));
	FORGED("a huge count", put32(copy + 40, REQINDEX_MAX_REQUESTS + 1));
	FORGED("a payload length past the end", put32(copy + first, 1u << 30));
	FORGED("a payload that is no request", put32(copy + first + 4 + 8, 0));
	/* Trailing bytes, under a CRC of their own. */
	memcpy(copy, buf, len - 4);
	memset(copy + len - 4, 0, 4);
	recrc(copy, len + 4);
	CU_ASSERT(!parses(copy, len + 4));
	/* Two requests of one id: the writer refuses, and a forged file too
	 * (the second request's id "d" made "a"). */
	make(&t, "a");
	CU_ASSERT_EQUAL(reqindex_format(NULL, 0, &head, t.p, t.len, 3), 0);
	make(&t, "d");
	len = reqindex_format(copy, len + 8, &head, t.p, t.len, 3);
	CU_ASSERT_FATAL(len > 0);
	CU_ASSERT(parses(copy, len));
	first += 4 + ((t.len[0] + 3) & ~3u) + 4 + REQUEST_HDR_SIZE;
	CU_ASSERT_EQUAL_FATAL(copy[first], 'd');
	copy[first] = 'a';
	recrc(copy, len);
	CU_ASSERT(!parses(copy, len));
	free(copy);
	free(buf);
}

static void test_match(void)
{
	static const uint32_t q_long[11] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
	static const uint32_t q_bb[13] = { 1, 2, 3, 4, 5, 6, 70, 80, 90, 100, 110, 120, 7 };
	static const uint32_t q_other[5] = { 1, 2, 99, 4, 5 };
	const struct rec_request *r;
	struct reqindex x;
	char err[128];
	size_t len;
	uint8_t *buf = good(&len);

	CU_ASSERT_EQUAL_FATAL(reqindex_parse(buf, len, &x, err, sizeof err), 0);
	/* "a" holds 9 computed tokens: 8 in whole blocks. */
	CU_ASSERT_EQUAL(reqindex_match(&x, q_long, 11, &r), 8);
	CU_ASSERT(r && r->id_len == 1 && r->id[0] == 'a');
	/* The whole of "a" asked: never the last token, so 8 still (9 capped at 9). */
	CU_ASSERT_EQUAL(reqindex_match(&x, a_tok, 10, &r), 8);
	/* Five tokens: 4 may be served, one block. */
	CU_ASSERT_EQUAL(reqindex_match(&x, q_long, 5, &r), 4);
	/* Four tokens: at most 3, no whole block. */
	CU_ASSERT_EQUAL(reqindex_match(&x, q_long, 4, &r), 0);
	CU_ASSERT_PTR_NULL(r);
	/* "bb" shares 12 with this query, "a" 6: "bb" wins, 12 tokens. */
	CU_ASSERT_EQUAL(reqindex_match(&x, q_bb, 13, &r), 12);
	CU_ASSERT(r && r->id_len == 2);
	/* A sequence that parts after 2 tokens: nothing. */
	CU_ASSERT_EQUAL(reqindex_match(&x, q_other, 5, &r), 0);
	CU_ASSERT_EQUAL(reqindex_match(&x, q_long, 0, &r), 0);
	reqindex_free(&x);
	free(buf);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "round trip", test_round_trip },
		{ "every cut and flipped bit refused", test_damage },
		{ "forged contents refused", test_forged },
		{ "longest restored prefix, whole blocks, never the last token", test_match },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "request index", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
