/*
 * test_kvmap.c - a pool's chunk map (kvmap.h): the writer's exact bytes,
 * the round trip, and every refusal of the parser: each header field,
 * each cut, every flipped byte, entries that break a rule (re-sealed with
 * a good CRC, so the rule and not the CRC refuses them); and the writer
 * refusing what the parser would.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "kvmap.h"
#include "testutil.h"

#define STORE (1u << 24)        /* the store the maps point into */

/* A pool of 3 chunks of 4 KiB, the last one 1000 bytes: data, zeros, a
 * short last chunk. */
static struct kvmap_entry entries[3] = {
	{ 2u << 20, 4096, 0x11223344, 1u << 20, 40 },
	{ 0, 0, 0, 0, 0 },
	{ (2u << 20) + 3 * 4096, 600, 0x55667788, (1u << 20) + 5 * 32, 41 },
};
static const struct kvmap good = { .pool = 7, .log_id = 0x0102030405060708, .window = 41,
				   .size = 2 * 4096 + 1000, .chunk_bytes = 4096, .nchunks = 3,
				   .e = entries };

/* m written into buf: its length (at most len), or 0 on failure. */
static size_t write_map(const struct kvmap *m, uint8_t *buf, size_t len, char *err, size_t errlen)
{
	FILE *f = fmemopen(buf, len, "w");
	size_t n;
	int r;

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	setvbuf(f, NULL, _IONBF, 0);
	r = kvmap_write(f, m, STORE, err, errlen);
	n = (size_t)ftell(f);
	fclose(f);
	return r < 0 ? 0 : n;
}

static void test_round_trip(void)
{
	uint8_t buf[256];
	struct kvmap m;
	char err[200];
	size_t n = write_map(&good, buf, sizeof buf, err, sizeof err);

	CU_ASSERT_EQUAL_FATAL(n, 64 + 3 * 32 + 4);
	CU_ASSERT_EQUAL(n, kvmap_file_bytes(good.size, good.chunk_bytes));
	CU_ASSERT_EQUAL(memcmp(buf, "moeftmap", 8), 0);
	CU_ASSERT_EQUAL(get32(buf + 8), 1);
	CU_ASSERT_EQUAL(get32(buf + 12), 7);
	CU_ASSERT_EQUAL(get64(buf + 16), 0x0102030405060708);
	CU_ASSERT_EQUAL(get64(buf + 24), 41);
	CU_ASSERT_EQUAL(get64(buf + 32), 9192);
	CU_ASSERT_EQUAL(get64(buf + 40), 4096);
	CU_ASSERT_EQUAL(get64(buf + 48), 3);
	CU_ASSERT_EQUAL(get32(buf + 56), crc32c(0, buf, 56));
	CU_ASSERT_EQUAL(get32(buf + 60), 0);
	CU_ASSERT_EQUAL(get64(buf + 64), 2u << 20);
	CU_ASSERT_EQUAL(get32(buf + 72), 4096);
	CU_ASSERT_EQUAL(get32(buf + 76), 0x11223344);
	CU_ASSERT_EQUAL(get64(buf + 80), 1u << 20);
	CU_ASSERT_EQUAL(get64(buf + 88), 40);
	CU_ASSERT_EQUAL(get64(buf + 96), 0);
	CU_ASSERT_EQUAL(get64(buf + 152), 41);
	CU_ASSERT_EQUAL(get32(buf + 160), crc32c(0, buf + 64, 96));

	CU_ASSERT_EQUAL_FATAL(kvmap_parse(buf, n, STORE, &m, err, sizeof err), 0);
	CU_ASSERT_EQUAL(m.pool, 7);
	CU_ASSERT_EQUAL(m.log_id, good.log_id);
	CU_ASSERT_EQUAL(m.window, 41);
	CU_ASSERT_EQUAL(m.size, good.size);
	CU_ASSERT_EQUAL(m.chunk_bytes, 4096);
	CU_ASSERT_EQUAL_FATAL(m.nchunks, 3);
	CU_ASSERT_EQUAL(memcmp(m.e, entries, sizeof entries), 0);
	CU_ASSERT_EQUAL(kvmap_chunk_len(&m, 2), 1000);
	kvmap_free(&m);
	CU_ASSERT_PTR_NULL(m.e);
}

/* Parsing buf (n bytes) fails, saying want, and leaves m empty. */
static void refused(const uint8_t *buf, size_t n, const char *want)
{
	struct kvmap m;
	char err[200] = "";

	CU_ASSERT_EQUAL(kvmap_parse(buf, n, STORE, &m, err, sizeof err), -1);
	CU_ASSERT_PTR_NULL(m.e);
	CU_ASSERT_EQUAL(m.nchunks, 0);
	if (!strstr(err, want)) {
		fprintf(stderr, "\n  said \"%s\", want \"%s\"\n", err, want);
		CU_FAIL("the refusal's reason");
	}
}

static void test_cuts_and_flips(void)
{
	uint8_t buf[256], bad[256];
	char err[200];
	size_t n = write_map(&good, buf, sizeof buf, err, sizeof err), i;
	int bit;

	CU_ASSERT_EQUAL_FATAL(n, 164);
	for (i = 0; i < n; i++)
		refused(buf, i, "");
	refused(buf, 0, "not a chunk map");
	refused(buf, 63, "not a chunk map");
	refused(buf, 64, "bytes, not the 164 of a map of 3 chunks");
	refused(buf, 163, "163 bytes, not the 164");
	memcpy(bad, buf, n);
	bad[n] = 0;
	refused(bad, n + 1, "165 bytes, not the 164");
	/* Every bit of every byte: refused (the magic, a CRC, or a rule). */
	for (i = 0; i < n; i++)
		for (bit = 0; bit < 8; bit++) {
			memcpy(bad, buf, n);
			bad[i] ^= (uint8_t)(1u << bit);
			refused(bad, n, "");
		}
	memcpy(bad, buf, n);
	bad[70] ^= 1;
	refused(bad, n, "its entries fail their CRC-32C");
	memcpy(bad, buf, n);
	bad[20] ^= 1;
	refused(bad, n, "its header fails its CRC-32C");
}

/* The header field at off set to v (8 bytes, or 4 with wide 0), the
 * header's CRC made good again: refused, saying want. */
static void header_rule(size_t off, uint64_t v, int wide, const char *want)
{
	uint8_t buf[256];
	char err[200];
	size_t n = write_map(&good, buf, sizeof buf, err, sizeof err);

	if (wide)
		put64(buf + off, v);
	else
		put32(buf + off, (uint32_t)v);
	put32(buf + 56, crc32c(0, buf, 56));
	refused(buf, n, want);
}

static void test_header_rules(void)
{
	header_rule(8, 2, 0, "version 2, not 1");
	header_rule(60, 1, 0, "its header fails its CRC-32C");
	header_rule(32, 0, 1, "a pool of 0 bytes");
	header_rule(40, 2048, 1, "chunk size 2048 is not a power of two from 4096 to 4194304");
	header_rule(40, 8 << 20, 1, "chunk size 8388608 is not a power of two");
	header_rule(40, 12288, 1, "chunk size 12288 is not a power of two");
	header_rule(48, 4, 1, "4 chunks for 9192 bytes in chunks of 4096");
	/* A size whose entries would be huge: refused on the file's length,
	 * before anything is allocated. */
	{
		uint8_t buf[256];
		char err[200];
		size_t n = write_map(&good, buf, sizeof buf, err, sizeof err);

		put64(buf + 32, UINT64_C(1) << 50);
		put64(buf + 48, (UINT64_C(1) << 50) / 4096);
		put32(buf + 56, crc32c(0, buf, 56));
		refused(buf, n, "164 bytes, not the 8796093022276 of a map of 274877906944 chunks");
	}
	/* A size within a chunk of 2^64: its chunks are counted without
	 * wrapping (2^52), not as 0. */
	header_rule(32, UINT64_MAX, 1, "3 chunks for 18446744073709551615 bytes in chunks of 4096");
}

/* Entry c set to e, both CRCs made good again: refused, saying want; and
 * the writer refuses the same map, saying the same. */
static void entry_rule(unsigned c, struct kvmap_entry e, uint64_t store, const char *want)
{
	struct kvmap_entry es[3];
	struct kvmap m = good, out;
	uint8_t buf[256];
	char err[200] = "";

	memcpy(es, entries, sizeof es);
	m.e = es;
	CU_ASSERT_EQUAL_FATAL(write_map(&good, buf, sizeof buf, err, sizeof err), 164);
	put64(buf + 64 + 32 * c, e.off);
	put32(buf + 72 + 32 * c, e.len);
	put32(buf + 76 + 32 * c, e.crc);
	put64(buf + 80 + 32 * c, e.hdr);
	put64(buf + 88 + 32 * c, e.window);
	put32(buf + 160, crc32c(0, buf + 64, 96));
	CU_ASSERT_EQUAL(kvmap_parse(buf, 164, store, &out, err, sizeof err), -1);
	CU_ASSERT_PTR_NULL(out.e);
	if (!strstr(err, want)) {
		fprintf(stderr, "\n  parser said \"%s\", want \"%s\"\n", err, want);
		CU_FAIL("the parser's reason");
	}
	es[c] = e;
	err[0] = '\0';
	{
		FILE *f = fopen("/dev/null", "w");

		CU_ASSERT_PTR_NOT_NULL_FATAL(f);
		CU_ASSERT_EQUAL(kvmap_write(f, &m, store, err, sizeof err), -1);
		fclose(f);
	}
	if (!strstr(err, want)) {
		fprintf(stderr, "\n  writer said \"%s\", want \"%s\"\n", err, want);
		CU_FAIL("the writer's reason");
	}
}

static void test_entry_rules(void)
{
	entry_rule(1, (struct kvmap_entry){ 4096, 0, 0, 0, 0 }, STORE,
		   "chunk 1: zeros with an offset");
	entry_rule(1, (struct kvmap_entry){ 0, 0, 5, 0, 0 }, STORE,
		   "chunk 1: zeros with an offset, a CRC or a window");
	entry_rule(1, (struct kvmap_entry){ 0, 0, 0, 64, 0 }, STORE, "chunk 1: zeros with an offset");
	entry_rule(1, (struct kvmap_entry){ 0, 0, 0, 0, 3 }, STORE, "chunk 1: zeros with an offset");
	entry_rule(0, (struct kvmap_entry){ 4096, 4097, 1, 64, 1 }, STORE,
		   "chunk 0: 4097 bytes, more than the chunk's 4096");
	entry_rule(2, (struct kvmap_entry){ 4096, 1001, 1, 64, 1 }, STORE,
		   "chunk 2: 1001 bytes, more than the chunk's 1000");
	entry_rule(0, (struct kvmap_entry){ STORE - 4095, 4096, 1, 64, 1 }, STORE,
		   "chunk 0: bytes 16773121-16777216 past the KV store's end (16777216)");
	entry_rule(0, (struct kvmap_entry){ UINT64_MAX - 10, 4096, 1, 64, 1 }, STORE,
		   "past the KV store's end");
	entry_rule(0, (struct kvmap_entry){ 4096, 4096, 1, STORE - 7, 1 }, STORE,
		   "chunk 0: its header at 16777209 past the KV store's end (16777216)");
	entry_rule(0, (struct kvmap_entry){ 4096, 4096, 1, UINT64_MAX - 3, 1 }, STORE,
		   "chunk 0: its header at");
	entry_rule(2, (struct kvmap_entry){ 4096, 600, 1, 64, 42 }, STORE,
		   "chunk 2: a copy of window 42, after the map's 41");
	/* A store shorter than the good map's entries. */
	entry_rule(0, entries[0], 1u << 20, "chunk 0: bytes 2097152-2101247 past the KV store's end");
	/* The writer checks the header too. */
	{
		struct kvmap m = good;
		char err[200];
		FILE *f = fopen("/dev/null", "w");

		m.chunk_bytes = 1000;
		CU_ASSERT_EQUAL(kvmap_write(f, &m, STORE, err, sizeof err), -1);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "chunk size 1000 is not a power of two"));
		fclose(f);
	}
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "the writer's bytes and the round trip", test_round_trip },
		{ "every cut and every flipped bit refused", test_cuts_and_flips },
		{ "each header rule", test_header_rules },
		{ "each entry rule, in the parser and the writer", test_entry_rules },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "kvmap", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
