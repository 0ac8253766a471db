/*
 * crc32c.c - CRC-32C, portable slice-by-8 and SSE4.2 crc32 instruction.
 *
 * The hardware path runs three independent crc32q streams over three
 * adjacent blocks, which hides the instruction's three-cycle latency, and
 * then folds the three CRCs together with a precomputed "append n zero
 * bytes" operator.  All tables are built once, on first use.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"

#define POLY 0x82F63B78u	/* reflected Castagnoli polynomial */

static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;
static uint32_t crc32c_table[8][256];
static int crc32c_hw_ok;

/* Little-endian 32-bit load; compilers turn this into a single mov. */
static inline uint32_t load_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 |
	       (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t crc32c_sw(uint32_t crc, const unsigned char *p, size_t len)
{
	uint32_t (*t)[256] = crc32c_table;

	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = crc ^ load_le32(p), hi = load_le32(p + 4);

		crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^
		      t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
		      t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^
		      t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

static void crc32c_sw_init(void)
{
	unsigned n, k;

	for (n = 0; n < 256; n++) {
		uint32_t c = n;

		for (k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		crc32c_table[0][n] = c;
	}
	for (n = 0; n < 256; n++)
		for (k = 1; k < 8; k++)
			crc32c_table[k][n] = (crc32c_table[k - 1][n] >> 8) ^
				crc32c_table[0][crc32c_table[k - 1][n] & 0xff];
}

/* a * b modulo POLY, polynomials in reflected bit order (x^0 is bit 31). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (; m; m >>= 1) {
		if (a & m)
			p ^= b;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

/* x^(8n) mod POLY: x^8 squared along the bits of n. */
static uint32_t x8n(uint64_t n)
{
	uint32_t p = 1u << 31, sq = 1u << 23;	/* x^0, x^8 */

	for (; n; n >>= 1) {
		if (n & 1)
			p = multmodp(sq, p);
		sq = multmodp(sq, sq);
	}
	return p;
}

/* Appending B to A shifts A's register by |B| bytes of zeros; the
 * conditioning of the two finalised CRCs cancels out. */
uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
	return multmodp(x8n(len2), crc1) ^ crc2;
}

/* Zeros only shift the register (the finalised CRC is its complement). */
uint32_t crc32c_zeros(uint32_t crc, uint64_t len)
{
	return ~multmodp(x8n(len), ~crc);
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <nmmintrin.h>

/* Block lengths of the 3-way loops: long for bulk, short for the rest. */
#define LONG_BLOCK	8192
#define SHORT_BLOCK	256

static uint32_t crc32c_long[4][256];
static uint32_t crc32c_short[4][256];

/*
 * Fill t so that shift(t, crc) is the raw CRC register after feeding n more
 * zero bytes, i.e. crc * x^(8n) mod POLY.  That map is linear, so it splits
 * into one 256-entry table per byte of crc.
 */
static void zeros_table(uint32_t t[4][256], size_t n)
{
	uint32_t xn = 1u << 31;	/* x^0 */
	unsigned b, k;

	while (n--)		/* each zero byte multiplies by x^8 */
		xn = (xn >> 8) ^ crc32c_table[0][xn & 0xff];
	for (k = 0; k < 4; k++)
		for (b = 0; b < 256; b++)
			t[k][b] = multmodp(xn, (uint32_t)b << (8 * k));
}

static inline uint32_t shift(uint32_t t[4][256], uint32_t crc)
{
	return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^
	       t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof w);
	return w;
}

static inline void store64(unsigned char *p, uint64_t w)
{
	memcpy(p, &w, sizeof w);
}

/*
 * CRC 3*n bytes at p onto the raw register c0; n is a multiple of 16.  When
 * dst is not NULL the bytes are copied there in the same pass, 16 at a
 * time, so a record is read once to checksum and place it.  Plain stores:
 * non-temporal ones, tried here, made appends of 64 KiB and 1 MiB records
 * slower by a third or more (README, "Benchmarks").  Always inlined, so
 * that the dst test folds away in each caller.
 */
__attribute__((target("sse4.2"), always_inline))
static inline uint64_t crc32c_3way(uint64_t c0, unsigned char *dst, const unsigned char *p,
				   size_t n, uint32_t t[4][256])
{
	const unsigned char *end = p + n;
	uint64_t c1 = 0, c2 = 0;

	do {
		c0 = _mm_crc32_u64(c0, load64(p));
		c1 = _mm_crc32_u64(c1, load64(p + n));
		c2 = _mm_crc32_u64(c2, load64(p + 2 * n));
		c0 = _mm_crc32_u64(c0, load64(p + 8));
		c1 = _mm_crc32_u64(c1, load64(p + n + 8));
		c2 = _mm_crc32_u64(c2, load64(p + 2 * n + 8));
		if (dst) {
			_mm_storeu_si128((__m128i *)dst, _mm_loadu_si128((const __m128i *)p));
			_mm_storeu_si128((__m128i *)(dst + n),
					 _mm_loadu_si128((const __m128i *)(p + n)));
			_mm_storeu_si128((__m128i *)(dst + 2 * n),
					 _mm_loadu_si128((const __m128i *)(p + 2 * n)));
			dst += 16;
		}
		p += 16;
	} while (p < end);
	c0 = shift(t, (uint32_t)c0) ^ c1;
	return shift(t, (uint32_t)c0) ^ c2;
}

__attribute__((target("sse4.2"), always_inline))
static inline uint32_t crc32c_run(uint32_t crc, unsigned char *dst, const unsigned char *p,
				  size_t len)
{
	uint64_t c = ~crc;

	/* Align the loads (no 8-byte load across a cache line), or a copy's
	 * stores, which are the dearer to split. */
	while (len && ((uintptr_t)(dst ? dst : p) & (dst ? 15 : 7))) {
		if (dst)
			*dst++ = *p;
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	for (; len >= 3 * LONG_BLOCK; len -= 3 * LONG_BLOCK) {
		c = crc32c_3way(c, dst, p, LONG_BLOCK, crc32c_long);
		p += 3 * LONG_BLOCK;
		dst = dst ? dst + 3 * LONG_BLOCK : NULL;
	}
	for (; len >= 3 * SHORT_BLOCK; len -= 3 * SHORT_BLOCK) {
		c = crc32c_3way(c, dst, p, SHORT_BLOCK, crc32c_short);
		p += 3 * SHORT_BLOCK;
		dst = dst ? dst + 3 * SHORT_BLOCK : NULL;
	}
	for (; len >= 8; len -= 8) {
		uint64_t w = load64(p);
		c = _mm_crc32_u64(c, w);
		if (dst) {
			store64(dst, w);
			dst += 8;
		}
		p += 8;
	}
	while (len--) {
		if (dst)
			*dst++ = *p;
		c = _mm_crc32_u8((uint32_t)c, *p++);
	}
	return ~(uint32_t)c;
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t len)
{
	return crc32c_run(crc, NULL, p, len);
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42_copy(uint32_t crc, unsigned char *dst, const unsigned char *p,
				  size_t len)
{
	return crc32c_run(crc, dst, p, len);
}

static void crc32c_init(void)
{
	unsigned a, b, c, d;

	crc32c_sw_init();
	crc32c_hw_ok = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
	if (crc32c_hw_ok) {
		zeros_table(crc32c_long, LONG_BLOCK);
		zeros_table(crc32c_short, SHORT_BLOCK);
	}
}

#else	/* !__x86_64__: no instruction to use, crc32c_hw_ok stays 0 */

#define crc32c_sse42 crc32c_sw
#define crc32c_init crc32c_sw_init

#endif

uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc32c_once, crc32c_init);
	return crc32c_sw(crc, buf, len);
}

uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc32c_once, crc32c_init);
	return crc32c_sse42(crc, buf, len);
}

int crc32c_hw_available(void)
{
	pthread_once(&crc32c_once, crc32c_init);
	return crc32c_hw_ok;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc32c_once, crc32c_init);
	return crc32c_hw_ok ? crc32c_sse42(crc, buf, len)
			    : crc32c_sw(crc, buf, len);
}

uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&crc32c_once, crc32c_init);
#if defined(__x86_64__)
	if (crc32c_hw_ok)
		return crc32c_sse42_copy(crc, dst, src, len);
#endif
	memcpy(dst, src, len);
	return crc32c_sw(crc, src, len);
}
