/*
 * test_format.c - format.c: superblock, checkpoint slot, commit word,
 * record header, record CRC seeding and chaining, WINDOW payload, and the
 * little-endian byte layout of each, held to the offsets of FORMAT.md.
 */
#include <stdint.h>
#include <string.h>

#include "crc32c.h"
#include "format.h"
#include "testutil.h"
#include "wal.h"

#define LOG_ID UINT64_C(0x0123456789abcdef)
#define OTHER_ID UINT64_C(0xfedcba9876543210)

static const struct sb test_sb = {
	.version = WAL_VERSION,
	.log_id = LOG_ID,
	.created_ns = UINT64_C(0x1122334455667788),
	.size = UINT64_C(0x0000000100001000),
	.data_off = WAL_DATA_OFF,
	.capacity = UINT64_C(0x00000000fffff000),
};

static const struct ckpt test_ckpt = {
	.gen = UINT64_C(0x8070605040302010),
	.epoch = 0xa1b2c3d4u,
	.tail_pos = UINT64_C(0x0000123456789ab0),
	.tail_lsn = UINT64_C(0x0000fedcba987654),
	.tail_window = UINT64_C(0x0000000abcdef012),
};

static const struct rec_hdr test_hdr = {
	.magic = REC_MAGIC,
	.type = 0xbeef,
	.flags = 0x1234,
	.len = 0x00abcdefu,
	.index = 0x87654321u,
	.lsn = UINT64_C(0x0000a1a2a3a4a5a6),
	.window = UINT64_C(0xb1b2b3b4b5b6b7b8),
	.epoch = 0xc1c2c3c4u,
	.crc = 0xd1d2d3d4u,
};

/* The CRC seed of everything but the superblock: crc(0, log_id LE). */
static uint32_t id_seed(uint64_t log_id)
{
	uint8_t b[8];

	put64(b, log_id);
	return crc32c(0, b, sizeof b);
}

/* ---- little-endian helpers ------------------------------------------ */

static void test_le_helpers(void)
{
	static const uint8_t bytes[8] = { 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x88 };
	uint8_t out[8];

	CU_ASSERT_EQUAL(get16(bytes), 0x0201);
	CU_ASSERT_EQUAL(get32(bytes), 0x04030201u);
	CU_ASSERT_EQUAL(get64(bytes), UINT64_C(0x8807060504030201));
	memset(out, 0, sizeof out);
	put64(out, UINT64_C(0x8807060504030201));
	CU_ASSERT_EQUAL(memcmp(out, bytes, 8), 0);
	memset(out, 0xee, sizeof out);
	put32(out, 0x04030201u);
	CU_ASSERT_EQUAL(memcmp(out, bytes, 4), 0);
	CU_ASSERT_EQUAL(out[4], 0xee);
	put16(out, 0xfffe);
	CU_ASSERT_EQUAL(out[0], 0xfe);
	CU_ASSERT_EQUAL(out[1], 0xff);
	CU_ASSERT_EQUAL(out[2], 0x03);
}

/* ---- superblock ------------------------------------------------------ */

static void test_sb_round_trip(void)
{
	uint8_t buf[SB_SIZE];
	struct sb sb;

	sb_encode(buf, &test_sb);
	memset(&sb, 0x5a, sizeof sb);
	CU_ASSERT_EQUAL_FATAL(sb_decode(buf, &sb), 0);
	CU_ASSERT_EQUAL(sb.version, WAL_VERSION);
	CU_ASSERT_EQUAL(sb.log_id, test_sb.log_id);
	CU_ASSERT_EQUAL(sb.created_ns, test_sb.created_ns);
	CU_ASSERT_EQUAL(sb.size, test_sb.size);
	CU_ASSERT_EQUAL(sb.data_off, test_sb.data_off);
	CU_ASSERT_EQUAL(sb.capacity, test_sb.capacity);
}

static void test_sb_layout(void)
{
	uint8_t buf[SB_SIZE];
	int i;

	memset(buf, 0xff, sizeof buf);
	sb_encode(buf, &test_sb);
	CU_ASSERT_EQUAL(memcmp(buf, "MOEFTWAL", 8), 0);
	CU_ASSERT_EQUAL(get32(buf + 8), 1);
	CU_ASSERT_EQUAL(get32(buf + 12), 128);
	CU_ASSERT_EQUAL(buf[16], 0xef); /* log id, least significant byte first */
	CU_ASSERT_EQUAL(buf[23], 0x01);
	CU_ASSERT_EQUAL(get64(buf + 16), test_sb.log_id);
	CU_ASSERT_EQUAL(get64(buf + 24), test_sb.created_ns);
	CU_ASSERT_EQUAL(get64(buf + 32), test_sb.size);
	CU_ASSERT_EQUAL(get64(buf + 40), 4096);
	CU_ASSERT_EQUAL(get64(buf + 48), test_sb.capacity);
	CU_ASSERT_EQUAL(get32(buf + 56), 16);
	for (i = 60; i < 124; i++)
		CU_ASSERT_EQUAL(buf[i], 0);
	CU_ASSERT_EQUAL(get32(buf + 124), crc32c(0, buf, 124));
}

static void test_sb_bad_magic(void)
{
	uint8_t buf[SB_SIZE];
	struct sb sb;
	int i;

	for (i = 0; i < 8; i++) {
		sb_encode(buf, &test_sb);
		buf[i] = (uint8_t)(buf[i] + 1);
		put32(buf + 124, crc32c(0, buf, 124)); /* only the magic is wrong */
		CU_ASSERT_EQUAL(sb_decode(buf, &sb), WAL_ENOTLOG);
	}
	memset(buf, 0, sizeof buf);
	CU_ASSERT_EQUAL(sb_decode(buf, &sb), WAL_ENOTLOG);
}

static void test_sb_version(void)
{
	static const uint32_t bad[] = { 0, 2, 0x100, UINT32_MAX };
	uint8_t buf[SB_SIZE];
	struct sb sb;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		sb_encode(buf, &test_sb);
		put32(buf + 8, bad[i]);
		put32(buf + 124, crc32c(0, buf, 124));
		CU_ASSERT_EQUAL(sb_decode(buf, &sb), WAL_EVERSION);
		CU_ASSERT_EQUAL(sb.version, bad[i]);
	}
}

/* The size and alignment fields are fixed: a valid CRC does not save them. */
static void test_sb_fixed_fields(void)
{
	uint8_t buf[SB_SIZE];
	struct sb sb;

	sb_encode(buf, &test_sb);
	put32(buf + 12, 256);
	put32(buf + 124, crc32c(0, buf, 124));
	CU_ASSERT_EQUAL(sb_decode(buf, &sb), WAL_ECORRUPT);

	sb_encode(buf, &test_sb);
	put32(buf + 56, 8);
	put32(buf + 124, crc32c(0, buf, 124));
	CU_ASSERT_EQUAL(sb_decode(buf, &sb), WAL_ECORRUPT);
}

static void test_sb_every_bit_flip(void)
{
	uint8_t good[SB_SIZE], buf[SB_SIZE];
	struct sb sb;
	unsigned bit, rejected = 0;

	sb_encode(good, &test_sb);
	for (bit = 0; bit < SB_SIZE * 8; bit++) {
		int want = bit < 64 ? WAL_ENOTLOG : WAL_ECORRUPT;

		memcpy(buf, good, sizeof buf);
		buf[bit / 8] ^= (uint8_t)(1u << bit % 8);
		if (sb_decode(buf, &sb) == want)
			rejected++;
		else
			CU_FAIL("superblock bit flip not rejected as expected");
	}
	CU_ASSERT_EQUAL(rejected, SB_SIZE * 8);
}

/* ---- checkpoint slot ------------------------------------------------- */

static void test_ckpt_round_trip(void)
{
	uint8_t buf[CKPT_SIZE];
	struct ckpt c;

	ckpt_encode(buf, &test_ckpt, LOG_ID);
	memset(&c, 0, sizeof c);
	CU_ASSERT_EQUAL_FATAL(ckpt_decode(buf, &c, LOG_ID), 1);
	CU_ASSERT_EQUAL(c.gen, test_ckpt.gen);
	CU_ASSERT_EQUAL(c.epoch, test_ckpt.epoch);
	CU_ASSERT_EQUAL(c.tail_pos, test_ckpt.tail_pos);
	CU_ASSERT_EQUAL(c.tail_lsn, test_ckpt.tail_lsn);
	CU_ASSERT_EQUAL(c.tail_window, test_ckpt.tail_window);
}

static void test_ckpt_layout(void)
{
	uint8_t buf[CKPT_SIZE];
	int i;

	memset(buf, 0xff, sizeof buf);
	ckpt_encode(buf, &test_ckpt, LOG_ID);
	CU_ASSERT_EQUAL(get64(buf), test_ckpt.gen);
	CU_ASSERT_EQUAL(buf[0], 0x10);
	CU_ASSERT_EQUAL(get32(buf + 8), test_ckpt.epoch);
	CU_ASSERT_EQUAL(get32(buf + 12), 0);
	CU_ASSERT_EQUAL(get64(buf + 16), test_ckpt.tail_pos);
	CU_ASSERT_EQUAL(get64(buf + 24), test_ckpt.tail_lsn);
	CU_ASSERT_EQUAL(get64(buf + 32), test_ckpt.tail_window);
	for (i = 40; i < 60; i++)
		CU_ASSERT_EQUAL(buf[i], 0);
	CU_ASSERT_EQUAL(get32(buf + 60), crc32c(id_seed(LOG_ID), buf, 60));
}

static void test_ckpt_every_bit_flip(void)
{
	uint8_t good[CKPT_SIZE], buf[CKPT_SIZE];
	struct ckpt c;
	unsigned bit, rejected = 0;

	ckpt_encode(good, &test_ckpt, LOG_ID);
	for (bit = 0; bit < CKPT_SIZE * 8; bit++) {
		memcpy(buf, good, sizeof buf);
		buf[bit / 8] ^= (uint8_t)(1u << bit % 8);
		if (ckpt_decode(buf, &c, LOG_ID) == 0)
			rejected++;
	}
	CU_ASSERT_EQUAL(rejected, CKPT_SIZE * 8);
}

static void test_ckpt_gen_zero(void)
{
	struct ckpt in = test_ckpt, c;
	uint8_t buf[CKPT_SIZE];

	in.gen = 0;
	ckpt_encode(buf, &in, LOG_ID);
	CU_ASSERT_EQUAL(get32(buf + 60), crc32c(id_seed(LOG_ID), buf, 60)); /* CRC is fine */
	CU_ASSERT_EQUAL(ckpt_decode(buf, &c, LOG_ID), 0);
	memset(buf, 0, sizeof buf); /* a slot never written */
	CU_ASSERT_EQUAL(ckpt_decode(buf, &c, LOG_ID), 0);
}

static void test_ckpt_other_log(void)
{
	uint8_t buf[CKPT_SIZE];
	struct ckpt c;

	ckpt_encode(buf, &test_ckpt, OTHER_ID);
	CU_ASSERT_EQUAL(ckpt_decode(buf, &c, OTHER_ID), 1);
	CU_ASSERT_EQUAL(ckpt_decode(buf, &c, LOG_ID), 0);
	CU_ASSERT_EQUAL(ckpt_decode(buf, &c, 0), 0);
}

/* ---- commit word ----------------------------------------------------- */

static const uint64_t word_lsns[] = { 0, 1, COMMIT_LSN_MASK };
static const uint64_t word_ids[] = { LOG_ID, OTHER_ID, 0, UINT64_MAX };

#define NLSN (sizeof word_lsns / sizeof word_lsns[0])
#define NID (sizeof word_ids / sizeof word_ids[0])

static void test_commit_round_trip(void)
{
	size_t i, j;

	CU_ASSERT_EQUAL(COMMIT_LSN_MASK, (UINT64_C(1) << 48) - 1);
	for (i = 0; i < NID; i++)
		for (j = 0; j < NLSN; j++) {
			uint64_t lsn = UINT64_MAX, w = commit_word_encode(word_lsns[j], word_ids[i]);

			CU_ASSERT_EQUAL(commit_word_decode(w, word_ids[i], &lsn), 1);
			CU_ASSERT_EQUAL(lsn, word_lsns[j]);
		}
}

static void test_commit_layout(void)
{
	uint8_t b[8];
	uint64_t w = commit_word_encode(0x123456789abcu, LOG_ID), lsn = 0;

	CU_ASSERT_EQUAL(w & COMMIT_LSN_MASK, 0x123456789abcu);
	put64(b, 0x123456789abcu);
	CU_ASSERT_EQUAL(w >> 48, crc32c(id_seed(LOG_ID), b, 8) >> 16);
	/* Bits above 48 of the LSN are dropped, not folded into the check. */
	w = commit_word_encode((UINT64_C(1) << 48) | 5, LOG_ID);
	CU_ASSERT_EQUAL(w, commit_word_encode(5, LOG_ID));
	CU_ASSERT_EQUAL(commit_word_decode(w, LOG_ID, &lsn), 1);
	CU_ASSERT_EQUAL(lsn, 5);
}

/* A 16-bit CRC remainder could in principle miss a single-bit flip; for
 * CRC-32C's upper half it does not, for any of the 64 bits. */
static void test_commit_every_bit_flip(void)
{
	size_t i, j;
	unsigned bit;

	for (i = 0; i < NID; i++)
		for (j = 0; j < NLSN; j++) {
			uint64_t w = commit_word_encode(word_lsns[j], word_ids[i]);
			unsigned rejected = 0;

			for (bit = 0; bit < 64; bit++) {
				uint64_t lsn = 0xdead;

				if (commit_word_decode(w ^ UINT64_C(1) << bit, word_ids[i], &lsn) == 0) {
					rejected++;
					CU_ASSERT_EQUAL(lsn, 0xdead); /* untouched */
				}
			}
			CU_ASSERT_EQUAL(rejected, 64);
		}
}

static void test_commit_other_log(void)
{
	size_t i, j, k;

	for (i = 0; i < NID; i++)
		for (j = 0; j < NID; j++)
			for (k = 0; k < NLSN; k++) {
				uint64_t lsn, w = commit_word_encode(word_lsns[k], word_ids[i]);

				if (i != j)
					CU_ASSERT_EQUAL(commit_word_decode(w, word_ids[j], &lsn), 0);
			}
	/* An all-zero word (a never-formatted medium) is not a commit. */
	{
		uint64_t lsn;

		CU_ASSERT_EQUAL(commit_word_decode(0, LOG_ID, &lsn), 0);
	}
}

/* ---- record header and CRC ------------------------------------------- */

static void test_hdr_round_trip(void)
{
	uint8_t buf[REC_HDR_SIZE];
	struct rec_hdr h;

	rec_hdr_encode(buf, &test_hdr);
	memset(&h, 0, sizeof h);
	rec_hdr_decode(buf, &h);
	CU_ASSERT_EQUAL(h.magic, test_hdr.magic);
	CU_ASSERT_EQUAL(h.type, test_hdr.type);
	CU_ASSERT_EQUAL(h.flags, test_hdr.flags);
	CU_ASSERT_EQUAL(h.len, test_hdr.len);
	CU_ASSERT_EQUAL(h.index, test_hdr.index);
	CU_ASSERT_EQUAL(h.lsn, test_hdr.lsn);
	CU_ASSERT_EQUAL(h.window, test_hdr.window);
	CU_ASSERT_EQUAL(h.epoch, test_hdr.epoch);
	CU_ASSERT_EQUAL(h.crc, test_hdr.crc);
}

static void test_hdr_layout(void)
{
	uint8_t buf[REC_HDR_SIZE];
	int i;

	memset(buf, 0xff, sizeof buf);
	rec_hdr_encode(buf, &test_hdr);
	CU_ASSERT_EQUAL(memcmp(buf, "MFTR", 4), 0);
	CU_ASSERT_EQUAL(buf[4], 0xef);
	CU_ASSERT_EQUAL(buf[5], 0xbe);
	CU_ASSERT_EQUAL(get16(buf + 6), test_hdr.flags);
	CU_ASSERT_EQUAL(get32(buf + 8), test_hdr.len);
	CU_ASSERT_EQUAL(get32(buf + 12), test_hdr.index);
	CU_ASSERT_EQUAL(buf[16], 0xa6);
	CU_ASSERT_EQUAL(get64(buf + 16), test_hdr.lsn);
	CU_ASSERT_EQUAL(get64(buf + 24), test_hdr.window);
	CU_ASSERT_EQUAL(get32(buf + 32), test_hdr.epoch);
	for (i = 36; i < 44; i++)
		CU_ASSERT_EQUAL(buf[i], 0); /* reserved, cleared by the encoder */
	CU_ASSERT_EQUAL(get32(buf + 44), test_hdr.crc);
}

static void test_rec_seed(void)
{
	uint8_t e[4];
	uint32_t s = rec_seed(LOG_ID, 7);

	put32(e, 7);
	CU_ASSERT_EQUAL(s, crc32c(id_seed(LOG_ID), e, 4));
	CU_ASSERT_EQUAL(rec_seed(LOG_ID, 7), s);
	CU_ASSERT_NOT_EQUAL(rec_seed(LOG_ID, 8), s);
	CU_ASSERT_NOT_EQUAL(rec_seed(LOG_ID, 6), s);
	CU_ASSERT_NOT_EQUAL(rec_seed(LOG_ID, 0), rec_seed(LOG_ID, 1));
	CU_ASSERT_NOT_EQUAL(rec_seed(OTHER_ID, 7), s);
	CU_ASSERT_NOT_EQUAL(rec_seed(LOG_ID ^ 1, 7), s);
	CU_ASSERT_NOT_EQUAL(rec_seed(0, 0), rec_seed(1, 0));
}

/* rec_crc_finish(crc(seed, payload), hdr) == crc(seed, payload || hdr[0..43]). */
static void test_rec_crc_chaining(void)
{
	uint8_t hdr[REC_HDR_SIZE], joined[200 + REC_CRC_OFF], payload[200];
	uint32_t seed = rec_seed(LOG_ID, 3), c;
	size_t i;

	for (i = 0; i < sizeof payload; i++)
		payload[i] = (uint8_t)(i * 31 + 7);
	rec_hdr_encode(hdr, &test_hdr);
	memcpy(joined, payload, sizeof payload);
	memcpy(joined + sizeof payload, hdr, REC_CRC_OFF);
	c = rec_crc_finish(crc32c(seed, payload, sizeof payload), hdr);
	CU_ASSERT_EQUAL(c, crc32c(seed, joined, sizeof joined));
	/* The CRC field itself is not covered. */
	put32(hdr + REC_CRC_OFF, ~test_hdr.crc);
	CU_ASSERT_EQUAL(rec_crc_finish(crc32c(seed, payload, sizeof payload), hdr), c);
	/* Every covered header byte is. */
	for (i = 0; i < REC_CRC_OFF; i++) {
		hdr[i] ^= 0x40;
		CU_ASSERT_NOT_EQUAL(rec_crc_finish(crc32c(seed, payload, sizeof payload), hdr), c);
		hdr[i] ^= 0x40;
	}
	/* An empty payload reduces to the header alone. */
	CU_ASSERT_EQUAL(rec_crc_finish(seed, hdr), crc32c(seed, hdr, REC_CRC_OFF));
}

static void test_rec_size(void)
{
	CU_ASSERT_EQUAL(rec_size(0), 48);
	CU_ASSERT_EQUAL(rec_size(1), 64);
	CU_ASSERT_EQUAL(rec_size(15), 64);
	CU_ASSERT_EQUAL(rec_size(16), 64);
	CU_ASSERT_EQUAL(rec_size(17), 80);
	CU_ASSERT_EQUAL(rec_size(24), 80);
	CU_ASSERT_EQUAL(rec_size(32), 80);
	CU_ASSERT_EQUAL(rec_size(33), 96);
	/* No 32-bit wrap for the largest length. */
	CU_ASSERT_EQUAL(rec_size(UINT32_MAX), UINT64_C(0x100000030));
}

/* ---- WINDOW payload --------------------------------------------------- */

static void test_window_fixed(void)
{
	static const struct window_fixed in = {
		.first_lsn = UINT64_C(0x0102030405060708),
		.records = 0x11223344u,
		.extra_len = 0x55667788u,
		.bytes = UINT64_C(0x99aabbccddeeff00),
		.commit_ns = UINT64_C(0x0f0e0d0c0b0a0908),
	};
	uint8_t buf[WINDOW_FIXED_SIZE];
	struct window_fixed out;

	window_fixed_encode(buf, &in);
	CU_ASSERT_EQUAL(buf[0], 0x08);
	CU_ASSERT_EQUAL(get64(buf), in.first_lsn);
	CU_ASSERT_EQUAL(get32(buf + 8), in.records);
	CU_ASSERT_EQUAL(get32(buf + 12), in.extra_len);
	CU_ASSERT_EQUAL(get64(buf + 16), in.bytes);
	CU_ASSERT_EQUAL(get64(buf + 24), in.commit_ns);
	memset(&out, 0, sizeof out);
	window_fixed_decode(buf, &out);
	CU_ASSERT_EQUAL(out.first_lsn, in.first_lsn);
	CU_ASSERT_EQUAL(out.records, in.records);
	CU_ASSERT_EQUAL(out.extra_len, in.extra_len);
	CU_ASSERT_EQUAL(out.bytes, in.bytes);
	CU_ASSERT_EQUAL(out.commit_ns, in.commit_ns);
}

/* The fixed offsets FORMAT.md names. */
static void test_layout_constants(void)
{
	CU_ASSERT_EQUAL(SB_COPY0_OFF, 0);
	CU_ASSERT_EQUAL(SB_COPY1_OFF, 256);
	CU_ASSERT_EQUAL(CKPT_SLOT0_OFF, 512);
	CU_ASSERT_EQUAL(CKPT_SLOT1_OFF, 576);
	CU_ASSERT_EQUAL(COMMIT_WORD_OFF, 640);
	CU_ASSERT_EQUAL(COMMIT_WORD_OFF % 64, 0); /* own cache line */
	CU_ASSERT_EQUAL(WAL_DATA_OFF, 4096);
	CU_ASSERT_EQUAL(REC_MAGIC, 0x5254464du);
}

static CU_TestInfo sb_tests[] = {
	{ "little-endian helpers", test_le_helpers },
	{ "round trip", test_sb_round_trip },
	{ "byte layout", test_sb_layout },
	{ "bad magic", test_sb_bad_magic },
	{ "unsupported version", test_sb_version },
	{ "fixed size and alignment fields", test_sb_fixed_fields },
	{ "every single-bit flip rejected", test_sb_every_bit_flip },
	{ "layout constants", test_layout_constants },
	CU_TEST_INFO_NULL
};

static CU_TestInfo ckpt_tests[] = {
	{ "round trip", test_ckpt_round_trip },
	{ "byte layout", test_ckpt_layout },
	{ "every single-bit flip rejected", test_ckpt_every_bit_flip },
	{ "generation 0 rejected", test_ckpt_gen_zero },
	{ "another log's slot rejected", test_ckpt_other_log },
	CU_TEST_INFO_NULL
};

static CU_TestInfo commit_tests[] = {
	{ "round trip of 0, 1, 2^48-1", test_commit_round_trip },
	{ "bit layout", test_commit_layout },
	{ "every single-bit flip rejected", test_commit_every_bit_flip },
	{ "another log's word rejected", test_commit_other_log },
	CU_TEST_INFO_NULL
};

static CU_TestInfo rec_tests[] = {
	{ "header round trip", test_hdr_round_trip },
	{ "header byte layout", test_hdr_layout },
	{ "seed differs by epoch and log", test_rec_seed },
	{ "CRC chains payload then header", test_rec_crc_chaining },
	{ "record size alignment", test_rec_size },
	{ "WINDOW fixed part", test_window_fixed },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "superblock", .pTests = sb_tests },
	{ .pName = "checkpoint", .pTests = ckpt_tests },
	{ .pName = "commit word", .pTests = commit_tests },
	{ .pName = "record", .pTests = rec_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}
