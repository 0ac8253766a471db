/*
 * test_crc32c.c - CRC-32C known vectors, hardware against portable, chaining,
 * the copy that checksums as it goes, and the CPU feature check that
 * drives dispatch.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "crc32c.h"
#include "testutil.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* Fixed-seed xorshift64, so failures reproduce. */
static uint64_t rng_state;

static void fill_random(unsigned char *p, size_t len, uint64_t seed)
{
	rng_state = seed;
	while (len--) {
		rng_state ^= rng_state << 13;
		rng_state ^= rng_state >> 7;
		rng_state ^= rng_state << 17;
		*p++ = (unsigned char)(rng_state >> 32);
	}
}

static unsigned char *xmalloc(size_t len)
{
	unsigned char *p = malloc(len ? len : 1);

	CU_ASSERT_PTR_NOT_NULL_FATAL(p);
	return p;
}

/* Every implementation this machine can run. */
static size_t impls(crc_fn fns[3])
{
	size_t n = 0;

	fns[n++] = crc32c;
	fns[n++] = crc32c_portable;
	if (crc32c_hw_available())
		fns[n++] = crc32c_hw;
	return n;
}

static void check_vector(const void *buf, size_t len, uint32_t want)
{
	crc_fn fns[3];
	size_t i, n = impls(fns);

	for (i = 0; i < n; i++)
		CU_ASSERT_EQUAL(fns[i](0, buf, len), want);
}

static void test_vectors(void)
{
	unsigned char b[32];
	crc_fn fns[3];
	size_t i, n = impls(fns);

	check_vector("123456789", 9, 0xE3069283);

	memset(b, 0, sizeof b);
	check_vector(b, sizeof b, 0x8A9136AA);
	memset(b, 0xff, sizeof b);
	check_vector(b, sizeof b, 0x62A8AB43);
	for (i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	check_vector(b, sizeof b, 0x46DD794E);
	for (i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	check_vector(b, sizeof b, 0x113FDB5C);

	/* An empty buffer leaves any CRC unchanged. */
	for (i = 0; i < n; i++) {
		CU_ASSERT_EQUAL(fns[i](0, b, 0), 0);
		CU_ASSERT_EQUAL(fns[i](0xE3069283, b, 0), 0xE3069283);
	}
}

static void test_hw_matches_portable(void)
{
	static const size_t big[] = { 8191, 8192, 3 * 8192, 3 * 8192 + 7,
				      65536, (1u << 20) + 13 };
	size_t max = (1u << 20) + 13 + 16, len, off, i;
	unsigned char *buf;

	if (!crc32c_hw_available())
		return;
	buf = xmalloc(max);
	fill_random(buf, max, 0x9E3779B97F4A7C15ull);
	for (off = 0; off < 16; off++) {
		for (len = 0; len <= 1100; len++)
			CU_ASSERT_EQUAL_FATAL(crc32c_hw(0, buf + off, len),
					      crc32c_portable(0, buf + off, len));
		for (i = 0; i < sizeof big / sizeof big[0]; i++)
			CU_ASSERT_EQUAL_FATAL(
				crc32c_hw(0x12345678, buf + off, big[i]),
				crc32c_portable(0x12345678, buf + off, big[i]));
	}
	free(buf);
}

static void check_split(crc_fn fn, const unsigned char *buf, size_t len,
			size_t at)
{
	CU_ASSERT_EQUAL_FATAL(fn(fn(0, buf, at), buf + at, len - at),
			      fn(0, buf, len));
}

static void test_chaining(void)
{
	static const size_t splits[] = { 1, 7, 4096, 3 * 8192 + 5,
					 (1u << 19) + 3, (1u << 20) - 1 };
	size_t small = 300, big = 1u << 20, at, i, f;
	unsigned char *buf = xmalloc(big);
	crc_fn fns[3];
	size_t n = impls(fns);

	fill_random(buf, big, 42);
	for (f = 0; f < n; f++) {
		for (at = 0; at <= small; at++)
			check_split(fns[f], buf, small, at);
		for (i = 0; i < sizeof splits / sizeof splits[0]; i++)
			check_split(fns[f], buf, big, splits[i]);
	}
	free(buf);
}

/* Does the first "flags" line of /proc/cpuinfo list sse4_2?  -1: unknown. */
static int cpuinfo_has_sse42(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192], *tok, *save;
	int found = -1;

	if (!f)
		return -1;
	while (found < 0 && fgets(line, sizeof line, f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		found = 0;
		for (tok = strtok_r(line, " \t\n", &save); tok;
		     tok = strtok_r(NULL, " \t\n", &save))
			if (strcmp(tok, "sse4_2") == 0)
				found = 1;
	}
	fclose(f);
	/* No flags line (e.g. arm64 says "Features"): no SSE4.2 either. */
	return found < 0 ? 0 : found;
}

/* combine(crc(A), crc(B), |B|) == crc(AB) at every split of random bytes,
 * empty parts included; a wrong length gives another CRC. */
static void test_combine(void)
{
	static unsigned char buf[3000];
	uint32_t whole, seed = 12345;
	size_t i, cut;

	for (i = 0; i < sizeof buf; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (unsigned char)(seed >> 16);
	}
	whole = crc32c(0, buf, sizeof buf);
	for (cut = 0; cut <= sizeof buf; cut += cut < 80 ? 1 : 97)
		CU_ASSERT_EQUAL(crc32c_combine(crc32c(0, buf, cut),
					       crc32c(0, buf + cut, sizeof buf - cut),
					       sizeof buf - cut), whole);
	CU_ASSERT_EQUAL(crc32c_combine(whole, 0, 0), whole);
	CU_ASSERT_EQUAL(crc32c_combine(0, whole, sizeof buf), whole);
	CU_ASSERT_NOT_EQUAL(crc32c_combine(crc32c(0, buf, 10), crc32c(0, buf + 10, 20), 21),
			    crc32c(0, buf, 30));
}

/* crc32c_zeros(crc, n) == crc32c(crc, n zero bytes), from any start. */
static void test_zeros(void)
{
	static const unsigned char zeros[70000];
	static const size_t lens[] = { 0, 1, 7, 8, 63, 4096, 65536, 70000 };
	const uint32_t starts[] = { 0, 0xdeadbeef, crc32c(0, "moeft", 5) };
	size_t i, k;

	for (i = 0; i < sizeof starts / sizeof *starts; i++)
		for (k = 0; k < sizeof lens / sizeof *lens; k++)
			CU_ASSERT_EQUAL(crc32c_zeros(starts[i], lens[k]),
					crc32c(starts[i], zeros, lens[k]));
}

/* crc32c_copy at every alignment of source and destination (the copy
 * aligns its 16-byte stores) and at lengths around each of its paths
 * (bytes, words, short and long blocks): the bytes copied exactly, not one
 * byte around them touched, and the CRC that of the source, chained. */
static void test_copy(void)
{
	static const size_t lens[] = { 0, 1, 7, 8, 9, 15, 16, 17, 767, 768, 769, 783, 784,
				       3 * 8192 - 1, 3 * 8192 + 6, 3 * 8192 + 7, 3 * 8192 + 8,
				       3 * 8192 + 15, 3 * 8192 + 16, 2 * 3 * 8192 + 3 * 256 + 13,
				       100003 };
	enum { GUARD = 64 };
	size_t max = 100003 + 16, i, so, dof, g;
	unsigned char *src = xmalloc(max), *dst = xmalloc(max + 2 * GUARD);

	fill_random(src, max, 99);
	for (i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (so = 0; so < 16; so += 3)
			for (dof = 0; dof < 16; dof++) {
				size_t len = lens[i];
				uint32_t got;

				memset(dst, 0xEE, max + 2 * GUARD);
				got = crc32c_copy(0x1234567u, dst + GUARD + dof, src + so, len);
				CU_ASSERT_EQUAL(got, crc32c(0x1234567u, src + so, len));
				CU_ASSERT(memcmp(dst + GUARD + dof, src + so, len) == 0);
				for (g = 0; g < GUARD; g++) {
					CU_ASSERT(dst[GUARD + dof - 1 - g] == 0xEE);
					CU_ASSERT(dst[GUARD + dof + len + g] == 0xEE);
				}
			}
	free(src);
	free(dst);
}

static void test_hw_detection(void)
{
	int want = cpuinfo_has_sse42();

	if (want < 0) {
		fprintf(stderr, "no /proc/cpuinfo, skipping\n");
		return;
	}
	CU_ASSERT_EQUAL(crc32c_hw_available(), want);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "known vectors", test_vectors },
		{ "hw matches portable", test_hw_matches_portable },
		{ "chaining", test_chaining },
		{ "combine", test_combine },
		{ "zeros", test_zeros },
		{ "copy", test_copy },
		{ "hw detection matches cpuinfo", test_hw_detection },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "crc32c", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
