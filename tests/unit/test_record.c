/*
 * test_record.c - record.c: each payload codec round-trips, lays its
 * fields out as FORMAT.md says, and its decoder rejects every length but
 * the right one and every internally inconsistent payload.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "format.h"
#include "kvstore.h"
#include "record.h"
#include "testutil.h"

#define SLACK 8u

/* Decode `len` bytes of buf with `dec` for every len in 0..right+SLACK;
 * only `right` may succeed.  Returns the number of lengths accepted. */
typedef int (*decode_fn)(const uint8_t *p, size_t len, void *out);

static unsigned accepted_lengths(decode_fn dec, const uint8_t *buf, size_t right, void *out)
{
	unsigned n = 0;
	size_t len;

	for (len = 0; len <= right + SLACK; len++) {
		int rc = dec(buf, len, out);

		CU_ASSERT(rc == 0 || rc == -1);
		if (rc == 0) {
			n++;
			CU_ASSERT_EQUAL(len, right);
		}
	}
	return n;
}

/* Adapters from the typed decoders to decode_fn. */
#define ADAPTER(name, decoder)						\
	static int name(const uint8_t *p, size_t len, void *out)	\
	{								\
		return decoder(p, len, out);				\
	}
ADAPTER(dec_epoch, rec_epoch_decode)
ADAPTER(dec_kvref, rec_kvref_decode)
ADAPTER(dec_alloc, rec_alloc_decode)
ADAPTER(dec_free, rec_free_decode)
ADAPTER(dec_crash, rec_crash_decode)
ADAPTER(dec_steps, rec_window_steps_decode)
ADAPTER(dec_routing, rec_routing_decode)
ADAPTER(dec_request, rec_request_decode)

/* ---- EPOCH ----------------------------------------------------------- */

static void test_epoch(void)
{
	static const struct rec_epoch in = { .prev_epoch = 0xa1a2a3a4u, .pid = 0x00b1b2b3u,
		.prev_commit_lsn = UINT64_C(0x0000c1c2c3c4c5c6),
		.start_ns = UINT64_C(0xd1d2d3d4d5d6d7d8) };
	uint8_t buf[EPOCH_PAYLOAD_SIZE + SLACK] = { 0 };
	struct rec_epoch out;

	rec_epoch_encode(buf, &in);
	CU_ASSERT_EQUAL(get32(buf), in.prev_epoch);
	CU_ASSERT_EQUAL(get32(buf + 4), in.pid);
	CU_ASSERT_EQUAL(get64(buf + 8), in.prev_commit_lsn);
	CU_ASSERT_EQUAL(get64(buf + 16), in.start_ns);
	memset(&out, 0, sizeof out);
	CU_ASSERT_EQUAL_FATAL(rec_epoch_decode(buf, EPOCH_PAYLOAD_SIZE, &out), 0);
	CU_ASSERT_EQUAL(out.prev_epoch, in.prev_epoch);
	CU_ASSERT_EQUAL(out.pid, in.pid);
	CU_ASSERT_EQUAL(out.prev_commit_lsn, in.prev_commit_lsn);
	CU_ASSERT_EQUAL(out.start_ns, in.start_ns);
	CU_ASSERT_EQUAL(accepted_lengths(dec_epoch, buf, EPOCH_PAYLOAD_SIZE, &out), 1);
}

/* ---- ROUTING --------------------------------------------------------- */

static void routing_hdr_flags(uint8_t *buf, uint32_t tokens, uint16_t k, uint8_t id_bytes,
			      uint8_t flags)
{
	const struct rec_routing r = { .step = UINT64_C(0x1122334455667788), .layer = 61,
		.tokens = tokens, .k = k, .id_bytes = id_bytes, .flags = flags, .experts = 256 };

	rec_routing_encode(buf, &r);
}

static void routing_hdr(uint8_t *buf, uint32_t tokens, uint16_t k, uint8_t id_bytes)
{
	routing_hdr_flags(buf, tokens, k, id_bytes, ROUTING_W_NONE);
}

/* Header plus tokens*k ids of id_bytes each, id i = (i * 37 + 1) masked. */
static size_t make_routing(uint8_t *buf, uint32_t tokens, uint16_t k, uint8_t id_bytes)
{
	size_t i, n = (size_t)tokens * k;

	routing_hdr(buf, tokens, k, id_bytes);
	for (i = 0; i < n; i++) {
		uint8_t *p = buf + ROUTING_HDR_SIZE + i * id_bytes;
		uint32_t v = (uint32_t)(i * 37 + 1);

		if (id_bytes == 1)
			p[0] = (uint8_t)v;
		else if (id_bytes == 2)
			put16(p, (uint16_t)(v | 0x8000));
		else
			put32(p, v | 0x80000000u);
	}
	return ROUTING_HDR_SIZE + n * id_bytes;
}

static void test_routing_round_trip(void)
{
	static const uint8_t widths[] = { 1, 2, 4 };
	uint8_t buf[ROUTING_HDR_SIZE + 3 * 8 * 4];
	struct rec_routing out;
	size_t w, i;

	for (w = 0; w < 3; w++) {
		size_t len = make_routing(buf, 3, 8, widths[w]);

		CU_ASSERT_EQUAL(len, ROUTING_HDR_SIZE + 24u * widths[w]);
		memset(&out, 0, sizeof out);
		CU_ASSERT_EQUAL_FATAL(rec_routing_decode(buf, len, &out), 0);
		CU_ASSERT_EQUAL(out.step, UINT64_C(0x1122334455667788));
		CU_ASSERT_EQUAL(out.layer, 61);
		CU_ASSERT_EQUAL(out.tokens, 3);
		CU_ASSERT_EQUAL(out.k, 8);
		CU_ASSERT_EQUAL(out.id_bytes, widths[w]);
		CU_ASSERT_EQUAL(out.flags, 0);
		CU_ASSERT_EQUAL(out.experts, 256);
		CU_ASSERT_PTR_EQUAL(out.ids, buf + ROUTING_HDR_SIZE);
		CU_ASSERT_PTR_NULL(out.weights);
		for (i = 0; i < 24; i++) {
			uint32_t v = (uint32_t)(i * 37 + 1);
			uint32_t want = widths[w] == 1 ? (uint8_t)v
				      : widths[w] == 2 ? (uint16_t)(v | 0x8000) : (v | 0x80000000u);

			CU_ASSERT_EQUAL(rec_routing_id(&out, i), want);
		}
	}
}

static void test_routing_layout(void)
{
	uint8_t buf[ROUTING_HDR_SIZE];

	routing_hdr_flags(buf, 0x01020304u, 0x0506, 2, ROUTING_W_F16);
	CU_ASSERT_EQUAL(get64(buf), UINT64_C(0x1122334455667788));
	CU_ASSERT_EQUAL(get32(buf + 8), 61);
	CU_ASSERT_EQUAL(buf[12], 0x04);
	CU_ASSERT_EQUAL(get32(buf + 12), 0x01020304u);
	CU_ASSERT_EQUAL(get16(buf + 16), 0x0506);
	CU_ASSERT_EQUAL(buf[18], 2);
	CU_ASSERT_EQUAL(buf[19], 3);
	CU_ASSERT_EQUAL(get32(buf + 20), 256);
}

static void test_routing_id_widths(void)
{
	static const uint8_t ids[] = { 0xff, 0xfe, 0x01, 0x80, 0x7f, 0x00, 0x10, 0x20 };
	struct rec_routing r = { .ids = ids };

	r.id_bytes = 1;
	CU_ASSERT_EQUAL(rec_routing_id(&r, 0), 0xff);
	CU_ASSERT_EQUAL(rec_routing_id(&r, 3), 0x80);
	CU_ASSERT_EQUAL(rec_routing_id(&r, 7), 0x20);
	r.id_bytes = 2;
	CU_ASSERT_EQUAL(rec_routing_id(&r, 0), 0xfeff);
	CU_ASSERT_EQUAL(rec_routing_id(&r, 1), 0x8001);
	CU_ASSERT_EQUAL(rec_routing_id(&r, 3), 0x2010);
	r.id_bytes = 4;
	CU_ASSERT_EQUAL(rec_routing_id(&r, 0), 0x8001feffu);
	CU_ASSERT_EQUAL(rec_routing_id(&r, 1), 0x2010007fu);
}

static void test_routing_id_bytes(void)
{
	static const uint8_t bad[] = { 0, 3, 5, 8, 255 };
	uint8_t buf[ROUTING_HDR_SIZE + 4 * 255] = { 0 };
	struct rec_routing out;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		/* Lay out a consistent length for the bad width: only the width is wrong. */
		make_routing(buf, 2, 2, 1);
		buf[18] = bad[i];
		CU_ASSERT_EQUAL(rec_routing_decode(buf, ROUTING_HDR_SIZE + 4u * bad[i], &out), -1);
	}
	for (i = 1; i <= 4; i *= 2) {
		size_t len = make_routing(buf, 2, 2, (uint8_t)i);

		CU_ASSERT_EQUAL(rec_routing_decode(buf, len, &out), 0);
	}
}

static void test_routing_lengths(void)
{
	static const uint8_t widths[] = { 1, 2, 4 };
	uint8_t buf[ROUTING_HDR_SIZE + 5 * 3 * 4 + SLACK];
	struct rec_routing out;
	size_t w;

	for (w = 0; w < 3; w++) {
		size_t right = make_routing(buf, 5, 3, widths[w]);

		CU_ASSERT_EQUAL(accepted_lengths(dec_routing, buf, right, &out), 1);
	}
	/* No ids at all is consistent. */
	make_routing(buf, 0, 8, 4);
	CU_ASSERT_EQUAL(accepted_lengths(dec_routing, buf, ROUTING_HDR_SIZE, &out), 1);
	make_routing(buf, 7, 0, 1);
	CU_ASSERT_EQUAL(accepted_lengths(dec_routing, buf, ROUTING_HDR_SIZE, &out), 1);
}

/* tokens * k * id_bytes must not wrap: products that are 0 or small modulo
 * 2^32 must not match a short payload. */
static void test_routing_overflow(void)
{
	static const struct { uint32_t tokens; uint16_t k; uint8_t id_bytes; size_t ids_len; } c[] = {
		{ 0x80000000u, 2, 1, 0 },       /* 2^32 */
		{ 0x40000000u, 2, 2, 0 },       /* 2^32 */
		{ 0x40000000u, 1, 4, 0 },       /* 2^32 */
		{ 0x80000001u, 2, 1, 2 },       /* 2^32 + 2 */
		{ 0xffffffffu, 0xffff, 4, 0 },  /* ~2^50 */
		{ 0x00010000u, 0x8000, 2, 0 },  /* 2^32 */
	};
	uint8_t buf[ROUTING_HDR_SIZE + 8] = { 0 };
	struct rec_routing out;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct rec_routing r = { .tokens = c[i].tokens, .k = c[i].k, .id_bytes = c[i].id_bytes };

		rec_routing_encode(buf, &r);
		CU_ASSERT_EQUAL(rec_routing_decode(buf, ROUTING_HDR_SIZE + c[i].ids_len, &out), -1);
	}
}

/* Weights after the ids, as flags bits 0-1 type them: the length must
 * count them exactly, other flag bits are refused, and each type reads as
 * its float (f16 subnormals, infinities and NaNs, bf16 signs). */
static void test_routing_weights(void)
{
	static const uint16_t h16[] = { 0x3c00, 0xc000, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x7e00,
					0x8000, 0x7bff };
	static const float h16_want[] = { 1.0f, -2.0f, 0x1p-24f, 0x3ffp-24f, INFINITY, -INFINITY,
					  NAN, -0.0f, 65504.0f };
	uint8_t buf[ROUTING_HDR_SIZE + 9 * 4 + 9 * 4 + SLACK];
	struct rec_routing out;
	size_t i, len;
	float f;

	/* f16: 3 tokens x 3, ids of 4 bytes */
	len = make_routing(buf, 3, 3, 4);
	routing_hdr_flags(buf, 3, 3, 4, ROUTING_W_F16);
	for (i = 0; i < 9; i++)
		put16(buf + len + 2 * i, h16[i]);
	CU_ASSERT_EQUAL(accepted_lengths(dec_routing, buf, len + 18, &out), 1);
	CU_ASSERT_EQUAL_FATAL(rec_routing_decode(buf, len + 18, &out), 0);
	CU_ASSERT_PTR_EQUAL(out.weights, buf + len);
	CU_ASSERT_EQUAL(rec_routing_weight_bytes(&out), 2);
	for (i = 0; i < 9; i++) {
		f = rec_routing_weight(&out, i);
		if (isnan(h16_want[i])) {
			CU_ASSERT(isnan(f));
		} else {
			CU_ASSERT(f == h16_want[i] && signbit(f) == signbit(h16_want[i]));
		}
	}
	CU_ASSERT_EQUAL(rec_routing_id(&out, 8), (uint32_t)(8 * 37 + 1) | 0x80000000u);

	/* bf16: the high half of a float */
	routing_hdr_flags(buf, 3, 3, 4, ROUTING_W_BF16);
	put16(buf + len, 0x3f80);
	put16(buf + len + 2, 0xbec0);
	CU_ASSERT_EQUAL_FATAL(rec_routing_decode(buf, len + 18, &out), 0);
	CU_ASSERT(rec_routing_weight(&out, 0) == 1.0f && rec_routing_weight(&out, 1) == -0.375f);

	/* f32, and ids of 1 byte before them */
	len = make_routing(buf, 2, 2, 1);
	routing_hdr_flags(buf, 2, 2, 1, ROUTING_W_F32);
	for (i = 0; i < 4; i++) {
		f = 0.125f * (float)(i + 1);
		memcpy(buf + len + 4 * i, &f, 4);
	}
	CU_ASSERT_EQUAL(accepted_lengths(dec_routing, buf, len + 16, &out), 1);
	CU_ASSERT_EQUAL_FATAL(rec_routing_decode(buf, len + 16, &out), 0);
	CU_ASSERT(rec_routing_weight(&out, 3) == 0.5f && out.weights == buf + len);

	/* no weights: a record of ids alone; unknown flag bits refused */
	routing_hdr_flags(buf, 2, 2, 1, ROUTING_W_NONE);
	CU_ASSERT_EQUAL(accepted_lengths(dec_routing, buf, len, &out), 1);
	CU_ASSERT(rec_routing_weight_bytes(&out) == 0 && isnan(rec_routing_weight(&out, 0)));
	for (i = 2; i < 8; i++) {
		routing_hdr_flags(buf, 2, 2, 1, (uint8_t)(1u << i));
		CU_ASSERT_EQUAL(rec_routing_decode(buf, len, &out), -1);
	}
}

/* ---- KVREF, ALLOC, FREE ---------------------------------------------- */

static void test_kvref(void)
{
	static const struct rec_kvref in = { .pool = 0xa1a2a3a4u, .bytes = 0x00020000u,
		.block = UINT64_C(0xb1b2b3b4b5b6b7b8), .store_off = UINT64_C(0x0000c1c2c3c4c5c0),
		.step = UINT64_C(0xd1d2d3d4d5d6d7d8), .crc = 0xe1e2e3e4u, .flags = 0xf1f2f3f4u };
	uint8_t buf[KVREF_PAYLOAD_SIZE + SLACK] = { 0 };
	struct rec_kvref out;

	rec_kvref_encode(buf, &in);
	CU_ASSERT_EQUAL(get32(buf), in.pool);
	CU_ASSERT_EQUAL(get32(buf + 4), in.bytes);
	CU_ASSERT_EQUAL(get64(buf + 8), in.block);
	CU_ASSERT_EQUAL(get64(buf + 16), in.store_off);
	CU_ASSERT_EQUAL(get64(buf + 24), in.step);
	CU_ASSERT_EQUAL(get32(buf + 32), in.crc);
	CU_ASSERT_EQUAL(get32(buf + 36), in.flags);
	memset(&out, 0, sizeof out);
	CU_ASSERT_EQUAL_FATAL(rec_kvref_decode(buf, KVREF_PAYLOAD_SIZE, &out), 0);
	CU_ASSERT_EQUAL(out.pool, in.pool);
	CU_ASSERT_EQUAL(out.bytes, in.bytes);
	CU_ASSERT_EQUAL(out.block, in.block);
	CU_ASSERT_EQUAL(out.store_off, in.store_off);
	CU_ASSERT_EQUAL(out.step, in.step);
	CU_ASSERT_EQUAL(out.crc, in.crc);
	CU_ASSERT_EQUAL(out.flags, in.flags);
	CU_ASSERT_EQUAL(accepted_lengths(dec_kvref, buf, KVREF_PAYLOAD_SIZE, &out), 1);
}

static void test_alloc(void)
{
	static const struct rec_alloc in = { .alloc_id = UINT64_C(0xa1a2a3a4a5a6a7a8),
		.base = UINT64_C(0x00007f0000001000), .size = UINT64_C(0x0000000200000000),
		.fingerprint = UINT64_C(0xd1d2d3d4d5d6d7d8), .ordinal = 0xe1e2e3e4u,
		.api = 0xf1f2, .role = 0x0102 };
	uint8_t buf[ALLOC_PAYLOAD_SIZE + SLACK] = { 0 };
	struct rec_alloc out;

	rec_alloc_encode(buf, &in);
	CU_ASSERT_EQUAL(get64(buf), in.alloc_id);
	CU_ASSERT_EQUAL(get64(buf + 8), in.base);
	CU_ASSERT_EQUAL(get64(buf + 16), in.size);
	CU_ASSERT_EQUAL(get64(buf + 24), in.fingerprint);
	CU_ASSERT_EQUAL(get32(buf + 32), in.ordinal);
	CU_ASSERT_EQUAL(get16(buf + 36), in.api);
	CU_ASSERT_EQUAL(get16(buf + 38), in.role);
	memset(&out, 0, sizeof out);
	CU_ASSERT_EQUAL_FATAL(rec_alloc_decode(buf, ALLOC_PAYLOAD_SIZE, &out), 0);
	CU_ASSERT_EQUAL(out.alloc_id, in.alloc_id);
	CU_ASSERT_EQUAL(out.base, in.base);
	CU_ASSERT_EQUAL(out.size, in.size);
	CU_ASSERT_EQUAL(out.fingerprint, in.fingerprint);
	CU_ASSERT_EQUAL(out.ordinal, in.ordinal);
	CU_ASSERT_EQUAL(out.api, in.api);
	CU_ASSERT_EQUAL(out.role, in.role);
	CU_ASSERT_EQUAL(accepted_lengths(dec_alloc, buf, ALLOC_PAYLOAD_SIZE, &out), 1);
}

/* An allocation's identity: fingerprint, size and ordinal, each of them;
 * its address, id, api and role are no part of it, nor a pool's chunk size. */
static void test_alloc_ident(void)
{
	struct rec_alloc a = { .alloc_id = 1, .base = 0x1000, .size = 8192, .fingerprint = 0xf00d,
			       .ordinal = 2, .api = 1, .role = 1 };
	struct rec_alloc b = { .alloc_id = 9, .base = 0x9000, .size = 8192, .fingerprint = 0xf00d,
			       .ordinal = 2, .api = 6, .role = 0 };
	struct kvs_pool_desc d = { .fingerprint = 0xf00d, .size = 8192, .chunk_bytes = 4096,
				   .ordinal = 2 };
	struct alloc_ident i = rec_alloc_ident(&a);

	CU_ASSERT_EQUAL(i.fingerprint, 0xf00d);
	CU_ASSERT_EQUAL(i.size, 8192);
	CU_ASSERT_EQUAL(i.ordinal, 2);
	CU_ASSERT(alloc_ident_eq(i, rec_alloc_ident(&b)));
	CU_ASSERT(alloc_ident_eq(i, kvs_pool_ident(&d)));
	d.chunk_bytes = 1u << 20;
	CU_ASSERT(alloc_ident_eq(i, kvs_pool_ident(&d)));
	b.fingerprint++;
	CU_ASSERT(!alloc_ident_eq(i, rec_alloc_ident(&b)));
	b = a;
	b.size++;
	CU_ASSERT(!alloc_ident_eq(i, rec_alloc_ident(&b)));
	b = a;
	b.ordinal = 3;
	CU_ASSERT(!alloc_ident_eq(i, rec_alloc_ident(&b)));
}

static void test_free(void)
{
	static const struct rec_free in = { .alloc_id = UINT64_C(0xa1a2a3a4a5a6a7a8),
					    .base = UINT64_C(0xb1b2b3b4b5b6b7b8) };
	uint8_t buf[FREE_PAYLOAD_SIZE + SLACK] = { 0 };
	struct rec_free out;

	rec_free_encode(buf, &in);
	CU_ASSERT_EQUAL(get64(buf), in.alloc_id);
	CU_ASSERT_EQUAL(get64(buf + 8), in.base);
	memset(&out, 0, sizeof out);
	CU_ASSERT_EQUAL_FATAL(rec_free_decode(buf, FREE_PAYLOAD_SIZE, &out), 0);
	CU_ASSERT_EQUAL(out.alloc_id, in.alloc_id);
	CU_ASSERT_EQUAL(out.base, in.base);
	CU_ASSERT_EQUAL(accepted_lengths(dec_free, buf, FREE_PAYLOAD_SIZE, &out), 1);
}

/* ---- CRASH ----------------------------------------------------------- */

static void fill_crash(struct rec_crash *c, uint32_t nframes)
{
	uint32_t i;

	memset(c, 0, sizeof *c);
	c->signo = -11;
	c->code = -0x7ffffff0;
	c->addr = UINT64_C(0xdeadbeefcafef00d);
	c->pid = 0x7fff1234u;
	c->nframes = nframes;
	for (i = 0; i < CRASH_MAX_FRAMES; i++)
		c->frames[i] = UINT64_C(0x00007f0000000000) + i * 0x10 + 1;
}

static void test_crash_round_trip(void)
{
	static const uint32_t counts[] = { 0, 1, 5, CRASH_MAX_FRAMES };
	uint8_t buf[CRASH_HDR_SIZE + 8 * CRASH_MAX_FRAMES];
	struct rec_crash in, out;
	size_t i;
	uint32_t f;

	for (i = 0; i < sizeof counts / sizeof counts[0]; i++) {
		size_t len;

		fill_crash(&in, counts[i]);
		len = rec_crash_encode(buf, sizeof buf, &in);
		CU_ASSERT_EQUAL(len, CRASH_HDR_SIZE + 8u * counts[i]);
		CU_ASSERT_EQUAL(get32(buf), (uint32_t)-11);
		CU_ASSERT_EQUAL(get64(buf + 8), in.addr);
		CU_ASSERT_EQUAL(get32(buf + 16), in.pid);
		CU_ASSERT_EQUAL(get32(buf + 20), counts[i]);
		memset(&out, 0, sizeof out);
		CU_ASSERT_EQUAL_FATAL(rec_crash_decode(buf, len, &out), 0);
		CU_ASSERT_EQUAL(out.signo, -11);
		CU_ASSERT_EQUAL(out.code, -0x7ffffff0);
		CU_ASSERT_EQUAL(out.addr, in.addr);
		CU_ASSERT_EQUAL(out.pid, in.pid);
		CU_ASSERT_EQUAL(out.nframes, counts[i]);
		for (f = 0; f < counts[i]; f++)
			CU_ASSERT_EQUAL(out.frames[f], in.frames[f]);
	}
}

static void test_crash_lengths(void)
{
	uint8_t buf[CRASH_HDR_SIZE + 8 * 5 + SLACK] = { 0 };
	struct rec_crash in, out;

	fill_crash(&in, 5);
	CU_ASSERT_EQUAL(rec_crash_encode(buf, sizeof buf, &in), CRASH_HDR_SIZE + 40);
	CU_ASSERT_EQUAL(accepted_lengths(dec_crash, buf, CRASH_HDR_SIZE + 40, &out), 1);
}

static void test_crash_too_many_frames(void)
{
	static const uint32_t bad[] = { CRASH_MAX_FRAMES + 1, 1000, 0x20000000u, UINT32_MAX };
	uint8_t buf[CRASH_HDR_SIZE + 8 * (CRASH_MAX_FRAMES + 1)] = { 0 };
	struct rec_crash in, out;
	size_t i;

	fill_crash(&in, CRASH_MAX_FRAMES);
	rec_crash_encode(buf, sizeof buf, &in);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t len = CRASH_HDR_SIZE + 8 * (size_t)bad[i];

		put32(buf + 20, bad[i]);
		/* Even with a length that matches the claimed count. */
		CU_ASSERT_EQUAL(rec_crash_decode(buf, len < sizeof buf ? len : sizeof buf, &out), -1);
		CU_ASSERT_EQUAL(rec_crash_decode(buf, sizeof buf, &out), -1);
	}
}

static void test_crash_encode_clamps(void)
{
	uint8_t buf[CRASH_HDR_SIZE + 8 * CRASH_MAX_FRAMES + 64];
	struct rec_crash in, out;

	/* More frames than the format holds: CRASH_MAX_FRAMES are written. */
	fill_crash(&in, 64);
	in.nframes = 100;
	memset(buf, 0xcc, sizeof buf);
	CU_ASSERT_EQUAL(rec_crash_encode(buf, sizeof buf, &in), CRASH_HDR_SIZE + 8 * 64);
	CU_ASSERT_EQUAL(get32(buf + 20), 64);
	CU_ASSERT_EQUAL(buf[CRASH_HDR_SIZE + 8 * 64], 0xcc);

	/* Room for 3 frames and 7 spare bytes: 3 frames, nothing past them. */
	fill_crash(&in, 10);
	memset(buf, 0xcc, sizeof buf);
	CU_ASSERT_EQUAL(rec_crash_encode(buf, CRASH_HDR_SIZE + 3 * 8 + 7, &in), CRASH_HDR_SIZE + 24);
	CU_ASSERT_EQUAL(get32(buf + 20), 3);
	CU_ASSERT_EQUAL(buf[CRASH_HDR_SIZE + 24], 0xcc);
	CU_ASSERT_EQUAL_FATAL(rec_crash_decode(buf, CRASH_HDR_SIZE + 24, &out), 0);
	CU_ASSERT_EQUAL(out.nframes, 3);
	CU_ASSERT_EQUAL(out.frames[2], in.frames[2]);

	/* Exactly a header: no frames. */
	CU_ASSERT_EQUAL(rec_crash_encode(buf, CRASH_HDR_SIZE, &in), CRASH_HDR_SIZE);
	CU_ASSERT_EQUAL(get32(buf + 20), 0);

	/* Below a header: nothing written at all. */
	memset(buf, 0xcc, sizeof buf);
	CU_ASSERT_EQUAL(rec_crash_encode(buf, CRASH_HDR_SIZE - 1, &in), 0);
	CU_ASSERT_EQUAL(buf[0], 0xcc);
	CU_ASSERT_EQUAL(rec_crash_encode(buf, 0, &in), 0);
	CU_ASSERT_EQUAL(buf[0], 0xcc);
}

/* ---- WINDOW steps ---------------------------------------------------- */

static void test_window_steps(void)
{
	static const struct rec_window_steps in = { .first_step = UINT64_C(0xa1a2a3a4a5a6a7a8),
						    .steps = 0xb1b2b3b4u, .tokens = 0xc1c2c3c4u,
						    .flags = 0xd1d2d3d4u, .kv_chunks = 0xe1e2e3e4u };
	uint8_t buf[WINDOW_STEPS_SIZE + SLACK] = { 0 };
	struct rec_window_steps out;

	rec_window_steps_encode(buf, &in);
	CU_ASSERT_EQUAL(get64(buf), in.first_step);
	CU_ASSERT_EQUAL(get32(buf + 8), in.steps);
	CU_ASSERT_EQUAL(get32(buf + 12), in.tokens);
	CU_ASSERT_EQUAL(get32(buf + 16), in.flags);
	CU_ASSERT_EQUAL(get32(buf + 20), in.kv_chunks);
	memset(&out, 0, sizeof out);
	CU_ASSERT_EQUAL_FATAL(rec_window_steps_decode(buf, WINDOW_STEPS_SIZE, &out), 0);
	CU_ASSERT_EQUAL(out.first_step, in.first_step);
	CU_ASSERT_EQUAL(out.steps, in.steps);
	CU_ASSERT_EQUAL(out.tokens, in.tokens);
	CU_ASSERT_EQUAL(out.flags, in.flags);
	CU_ASSERT_EQUAL(out.kv_chunks, in.kv_chunks);
	CU_ASSERT_EQUAL(accepted_lengths(dec_steps, buf, WINDOW_STEPS_SIZE, &out), 1);
}

/* ---- REQUEST --------------------------------------------------------- */

/* A request of 6 tokens (4 of prompt, 5 computed), blocks of 2 tokens, id
 * "req-7" (5 bytes: 3 bytes of padding), two groups of 3 and 4 blocks,
 * params {"n":1} (7 bytes). */
static const uint32_t req_tokens[6] = { 11, 12, 13, 14, 0xfffffffeu, 16 };
static const uint32_t req_g0[3] = { 7, 3, 0x80000001u }, req_g1[4] = { 1, 2, 3, 4 };
static const uint32_t *const req_blocks[2] = { req_g0, req_g1 };
#define REQ_PARAMS "{\"n\":1}"
#define REQ_LEN (REQUEST_HDR_SIZE + 8 + 2 * 4 + 6 * 4 + 7 * 4 + 7)

static struct rec_request req_in(void)
{
	return (struct rec_request){ .step = UINT64_C(0x0102030405060708), .ntokens = 6,
		.nprompt = 4, .ncomputed = 5, .block_tokens = 2, .id_len = 5, .ngroups = 2,
		.flags = REQUEST_FINISHED, .id = (const uint8_t *)"req-7", .nblocks = { 3, 4 },
		.params_len = 7, .params = (const uint8_t *)REQ_PARAMS };
}

static void test_request_round_trip(void)
{
	struct rec_request in = req_in(), out;
	uint8_t buf[REQ_LEN + SLACK];
	unsigned i;

	CU_ASSERT_EQUAL(rec_request_size(&in), REQ_LEN);
	CU_ASSERT_EQUAL_FATAL(rec_request_encode(buf, sizeof buf, &in, req_tokens, req_blocks),
			      REQ_LEN);
	CU_ASSERT_EQUAL_FATAL(rec_request_decode(buf, REQ_LEN, &out), 0);
	CU_ASSERT_EQUAL(out.step, in.step);
	CU_ASSERT_EQUAL(out.ntokens, 6);
	CU_ASSERT_EQUAL(out.nprompt, 4);
	CU_ASSERT_EQUAL(out.ncomputed, 5);
	CU_ASSERT_EQUAL(out.block_tokens, 2);
	CU_ASSERT_EQUAL(out.flags, REQUEST_FINISHED);
	CU_ASSERT_EQUAL_FATAL(out.id_len, 5);
	CU_ASSERT_EQUAL(memcmp(out.id, "req-7", 5), 0);
	CU_ASSERT_EQUAL_FATAL(out.ngroups, 2);
	CU_ASSERT_EQUAL(out.nblocks[0], 3);
	CU_ASSERT_EQUAL(out.nblocks[1], 4);
	for (i = 0; i < 6; i++)
		CU_ASSERT_EQUAL(rec_request_token(&out, i), req_tokens[i]);
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(rec_request_block(&out, 0, i), req_g0[i]);
	for (i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(rec_request_block(&out, 1, i), req_g1[i]);
	CU_ASSERT_EQUAL_FATAL(out.params_len, 7);
	CU_ASSERT_EQUAL(memcmp(out.params, REQ_PARAMS, 7), 0);
	CU_ASSERT_EQUAL(accepted_lengths(dec_request, buf, REQ_LEN, &out), 1);
	/* Too small a buffer: nothing. */
	CU_ASSERT_EQUAL(rec_request_encode(buf, REQ_LEN - 1, &in, req_tokens, req_blocks), 0);
}

/* The bytes as FORMAT.md lays them out. */
static void test_request_layout(void)
{
	struct rec_request in = req_in();
	uint8_t buf[REQ_LEN];
	size_t at = REQUEST_HDR_SIZE;

	CU_ASSERT_EQUAL_FATAL(rec_request_encode(buf, sizeof buf, &in, req_tokens, req_blocks),
			      REQ_LEN);
	CU_ASSERT_EQUAL(get64(buf), UINT64_C(0x0102030405060708));
	CU_ASSERT_EQUAL(get32(buf + 8), 6);
	CU_ASSERT_EQUAL(get32(buf + 12), 4);
	CU_ASSERT_EQUAL(get32(buf + 16), 5);
	CU_ASSERT_EQUAL(get32(buf + 20), 2);
	CU_ASSERT(buf[24] == 5 && buf[25] == 2 && buf[26] == REQUEST_FINISHED && buf[27] == 0);
	CU_ASSERT_EQUAL(get32(buf + 28), 7);
	CU_ASSERT_EQUAL(memcmp(buf + at, "req-7\0\0\0", 8), 0);
	at += 8;
	CU_ASSERT(get32(buf + at) == 3 && get32(buf + at + 4) == 4);
	at += 8;
	CU_ASSERT(get32(buf + at) == 11 && get32(buf + at + 16) == 0xfffffffeu);
	at += 24;
	CU_ASSERT(get32(buf + at) == 7 && get32(buf + at + 8) == 0x80000001u);
	CU_ASSERT(get32(buf + at + 12) == 1 && get32(buf + at + 24) == 4);
	at += 28;
	CU_ASSERT(at + 7 == REQ_LEN && memcmp(buf + at, REQ_PARAMS, 7) == 0);
}

/* Each field out of its bounds, on the encoder's side and on the bytes. */
static void test_request_bounds(void)
{
	static const struct {
		const char *what;
		size_t off;         /* where to change the encoding */
		int byte;           /* 1: a byte there, 0: a u32 */
		uint32_t value;
	} bad[] = {
		{ "no tokens", 8, 0, 0 },
		{ "too many tokens", 8, 0, REQUEST_MAX_TOKENS + 1 },
		{ "prompt past the tokens", 12, 0, 7 },
		{ "computed past the tokens", 16, 0, 7 },
		{ "no tokens per block", 20, 0, 0 },
		{ "blocks too large", 20, 0, REQUEST_MAX_BLOCK_TOKENS + 1 },
		{ "blocks that cannot hold the computed tokens", 20, 0, 1 },
		{ "empty id", 24, 1, 0 },
		{ "no group", 25, 1, 0 },
		{ "9 groups", 25, 1, 9 },
		{ "unknown flag", 26, 1, 2 },
		{ "reserved byte", 27, 1, 1 },
		{ "params past the record", 28, 0, 8 },
		{ "params past their limit", 28, 0, REQUEST_MAX_PARAMS + 1 },
		{ "a control byte in the params", REQ_LEN - 1, 1, '\t' },
		{ "id padding", REQUEST_HDR_SIZE + 5, 1, 1 },
		{ "a control byte in the id", REQUEST_HDR_SIZE + 1, 1, '\n' },
		{ "a byte past ASCII in the id", REQUEST_HDR_SIZE + 4, 1, 0x80 },
		{ "group 1 two blocks short", REQUEST_HDR_SIZE + 12, 0, 2 },
	};
	struct rec_request in = req_in(), out;
	uint8_t good[REQ_LEN], buf[REQ_LEN];
	unsigned i;

	CU_ASSERT_EQUAL_FATAL(rec_request_encode(good, sizeof good, &in, req_tokens, req_blocks),
			      REQ_LEN);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memcpy(buf, good, sizeof buf);
		if (bad[i].byte)
			buf[bad[i].off] = (uint8_t)bad[i].value;
		else
			put32(buf + bad[i].off, bad[i].value);
		if (rec_request_decode(buf, sizeof buf, &out) != -1)
			CU_FAIL(bad[i].what);
	}
	/* The encoder keeps the same bounds. */
	in.ncomputed = 7;
	CU_ASSERT_EQUAL(rec_request_size(&in), 0);
	CU_ASSERT_EQUAL(rec_request_encode(buf, sizeof buf, &in, req_tokens, req_blocks), 0);
	in = req_in();
	in.nblocks[1] = 2;	/* 4 tokens in 2 blocks of 2: 5 computed do not fit */
	CU_ASSERT_EQUAL(rec_request_size(&in), 0);
	in = req_in();
	in.flags = 4;
	CU_ASSERT_EQUAL(rec_request_size(&in), 0);
	in = req_in();
	in.params = (const uint8_t *)"{\"n\":\x7f}";
	CU_ASSERT_EQUAL(rec_request_size(&in), 0);
	in = req_in();
	in.params_len = REQUEST_MAX_PARAMS + 1;
	CU_ASSERT_EQUAL(rec_request_size(&in), 0);
}

/* Counts at their largest do not wrap the length: the decoder compares in
 * 64 bits (a 4 M-token request with 8 groups of 4 M blocks is 144 MiB). */
static void test_request_overflow(void)
{
	struct rec_request in = req_in(), out;
	uint8_t buf[REQ_LEN];
	unsigned g;

	in.ntokens = in.nprompt = in.ncomputed = REQUEST_MAX_TOKENS;
	in.block_tokens = 1;
	in.ngroups = REQUEST_MAX_GROUPS;
	for (g = 0; g < REQUEST_MAX_GROUPS; g++)
		in.nblocks[g] = REQUEST_MAX_TOKENS;
	CU_ASSERT_EQUAL(rec_request_size(&in), REQUEST_HDR_SIZE + 8 + 4 * 8 +
			4 * (uint64_t)REQUEST_MAX_TOKENS * 9 + 7);
	/* A header that claims that much, on a small buffer. */
	CU_ASSERT_EQUAL_FATAL(rec_request_encode(buf, sizeof buf, &in, req_tokens, req_blocks), 0);
	in = req_in();
	CU_ASSERT_EQUAL_FATAL(rec_request_encode(buf, sizeof buf, &in, req_tokens, req_blocks),
			      REQ_LEN);
	put32(buf + 8, REQUEST_MAX_TOKENS);
	CU_ASSERT_EQUAL(rec_request_decode(buf, sizeof buf, &out), -1);
}

static CU_TestInfo request_tests[] = {
	{ "round trip, two groups", test_request_round_trip },
	{ "byte layout", test_request_layout },
	{ "every bound, encoder and decoder", test_request_bounds },
	{ "lengths do not wrap", test_request_overflow },
	CU_TEST_INFO_NULL
};

static CU_TestInfo fixed_tests[] = {
	{ "EPOCH", test_epoch },
	{ "KVREF", test_kvref },
	{ "ALLOC", test_alloc },
	{ "allocation identity", test_alloc_ident },
	{ "FREE", test_free },
	{ "WINDOW steps", test_window_steps },
	CU_TEST_INFO_NULL
};

static CU_TestInfo routing_tests[] = {
	{ "round trip, ids of each width", test_routing_round_trip },
	{ "header byte layout", test_routing_layout },
	{ "id reads of each width", test_routing_id_widths },
	{ "id width 1/2/4 only", test_routing_id_bytes },
	{ "ids length must match exactly", test_routing_lengths },
	{ "tokens*k*width does not wrap", test_routing_overflow },
	{ "gating weights: lengths, flags, each type", test_routing_weights },
	CU_TEST_INFO_NULL
};

static CU_TestInfo crash_tests[] = {
	{ "round trip", test_crash_round_trip },
	{ "wrong lengths", test_crash_lengths },
	{ "more than 64 frames rejected", test_crash_too_many_frames },
	{ "encoder clamps to 64 and to the buffer", test_crash_encode_clamps },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "fixed-size payloads", .pTests = fixed_tests },
	{ .pName = "routing", .pTests = routing_tests },
	{ .pName = "crash", .pTests = crash_tests },
	{ .pName = "request", .pTests = request_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}
