/*
 * test_profile.c - profile.c and profiles_builtin.c: the rule grammar and
 * its canonical form, every parse error with its line, glob matching
 * (anchors, wildcards, no blowup), first-match-wins, the exact rules of
 * each built-in profile, and rule_eval against synthetic launches:
 * pointers, ints of each size, struct offsets, grid/block, conditions,
 * out-of-range parameters and parameter sizes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "profile.h"
#include "testutil.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const unsigned grid1[3] = { 1, 1, 1 }, block1[3] = { 1, 1, 1 };

/* Parse `text` as one profile; the parse must succeed. */
static void parse_ok(const char *text, struct profile *p)
{
	char err[512] = "";
	int rc = profile_parse(text, "t.rules", p, err, sizeof err);

	if (rc != 0)
		fprintf(stderr, "\nunexpected parse error: %s\n", err);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static void assert_format(const struct rule *r, const char *want)
{
	char got[1024];

	rule_format(r, got, sizeof got);
	if (strcmp(got, want) != 0)
		fprintf(stderr, "\n got: %s\nwant: %s\n", got, want);
	CU_ASSERT_STRING_EQUAL(got, want);
}

/* ---- glob ---------------------------------------------------------------- */

static void test_glob_table(void)
{
	static const struct { const char *pat, *name; int want; } t[] = {
		{ "", "", 1 },
		{ "", "a", 0 },
		{ "*", "", 1 },
		{ "*", "anything at all", 1 },
		{ "**", "", 1 },
		{ "**", "x", 1 },
		{ "?", "", 0 },
		{ "?", "a", 1 },
		{ "?", "ab", 0 },
		{ "??", "ab", 1 },
		{ "abc", "abc", 1 },
		{ "abc", "abcd", 0 },      /* anchored at the end */
		{ "abc", "xabc", 0 },      /* anchored at the start */
		{ "ABC", "abc", 0 },       /* case matters */
		{ "abc*", "abc", 1 },
		{ "abc*", "abcdef", 1 },
		{ "abc*", "xabc", 0 },
		{ "*abc", "xxabc", 1 },
		{ "*abc", "abcx", 0 },
		{ "a*c", "ac", 1 },
		{ "a*c", "abbbc", 1 },
		{ "a*c", "abbbcd", 0 },
		{ "a?c", "abc", 1 },
		{ "a?c", "ac", 0 },
		{ "*?", "", 0 },
		{ "*?", "a", 1 },
		{ "?*?", "a", 0 },
		{ "?*?", "ab", 1 },
		{ "*aab", "aaab", 1 },     /* needs the star to take one more */
		{ "*ab*ab", "abab", 1 },
		{ "*ab*ab", "abaab", 1 },
		{ "*ab*ab", "abba", 0 },
		{ "a*a*a", "aa", 0 },
		{ "a*a*a", "aaa", 1 },
		{ "a**b", "ab", 1 },
		{ "*6sbtopk10gatherTopK*",
		  "_ZN2at6native6sbtopk10gatherTopKIfjLi2ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EE", 1 },
		{ "*6sbtopk10gatherTopK*",
		  "_ZN2at6native6mbtopk10gatherTopKIfjLi2EEEvNS_4cuda6detail10TensorInfoIKT_T0_EE", 0 },
		{ "*13topk_moe_cudaILi1E*", "_ZL13topk_moe_cudaILi128ELb1ELb0EEvPKfPfPiiif", 0 },
		{ "*13topk_moe_cudaILi128E*", "_ZL13topk_moe_cudaILi128ELb1ELb0EEvPKfPfPiiif", 1 },
	};
	size_t i;

	for (i = 0; i < NELEM(t); i++) {
		int got = profile_glob(t[i].pat, t[i].name);

		if (got != t[i].want)
			fprintf(stderr, "\nglob('%s', '%s') = %d\n", t[i].pat, t[i].name, got);
		CU_ASSERT_EQUAL(got, t[i].want);
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Stars must not make matching exponential (a recursive matcher takes
 * forever on these). */
static void test_glob_no_blowup(void)
{
	char name[4097], stars[256], alt[512];
	double t0;
	int i;

	memset(name, 'a', 4096);
	name[4096] = '\0';
	memset(stars, '*', 200);
	stars[200] = '\0';
	for (i = 0; i < 100; i++)
		memcpy(alt + 2 * i, "*a", 2);
	strcpy(alt + 200, "*b");

	t0 = now();
	CU_ASSERT_EQUAL(profile_glob(stars, name), 1);
	strcpy(stars + 200, "b");
	CU_ASSERT_EQUAL(profile_glob(stars, name), 0);
	CU_ASSERT_EQUAL(profile_glob(alt, name), 0);
	name[4095] = 'b';
	CU_ASSERT_EQUAL(profile_glob(alt, name), 1);
	CU_ASSERT(now() - t0 < 1.0);
}

/* ---- grammar ------------------------------------------------------------- */

/* Each feature, and the canonical form rule_format writes back. */
static void test_parse_features(void)
{
	static const struct { const char *line, *canonical; } t[] = {
		{ "routing *topkGating* ids=p4 rows=p3 k=p6",
		  "routing *topkGating* ids=p4:i32 rows=p3 k=p6" },
		{ "routing x ids=p4:u32 rows=p3 k=p6 stride=p7 experts=p8",
		  "routing x ids=p4:u32 rows=p3 k=p6 stride=p7 experts=p8" },
		{ "routing x ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1",
		  "routing x ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1" },
		{ "routing x ids=p0@24:i32 rows=p0@8 k=p0@16:i64 stride=p0@4:i32",
		  "routing x ids=p0@24:i32 rows=p0@8 k=p0@16:i64 stride=p0@4" },
		{ "routing x ids=p1 rows=grid.x k=block.y stride=grid.z experts=block.z",
		  "routing x ids=p1:i32 rows=grid.x k=block.y stride=grid.z experts=block.z" },
		{ "routing x ids=p1 rows=grid.y*block.x k=8 stride=p3:i32*2 experts=p2:i64",
		  "routing x ids=p1:i32 rows=grid.y*block.x k=8 stride=p3:i32*2 experts=p2:i64" },
		{ "kv x slots=p4:i64 count=grid.x block=p12 pool=p2,p3",
		  "kv x slots=p4:i64 count=grid.x block=p12 pool=p2,p3" },
		{ "kv x slots=p1:i64 count=p4:i64*p5:i64*p6:i64 block=1 pool=p2,p0@8,p3,p4",
		  "kv x slots=p1:i64 count=p4:i64*p5:i64*p6:i64 block=1 pool=p2,p0@8,p3,p4" },
		{ "kv x slots=p0@32 count=p0@72 block=16",
		  "kv x slots=p0@32:i32 count=p0@72 block=16" },
		{ "step *decode_start* when=grid.x>=1",
		  "step *decode_start* when=grid.x>=1" },
		{ "step a when=p0==1 when=p1!=-1 when=p2<3 when=p3>-9223372036854775808",
		  "step a when=p0==1 when=p1!=-1 when=p2<3 when=p3>-9223372036854775808" },
		{ "routing a$b.c_d?e* ids=p63 rows=9223372036854775807 k=1",
		  "routing a$b.c_d?e* ids=p63:i32 rows=9223372036854775807 k=1" },
		{ "\t routing\tx   ids=p4  rows=p3\tk=p6   ",
		  "routing x ids=p4:i32 rows=p3 k=p6" },
		{ "routing x k=p6 rows=p3 ids=p4 # keys in any order, comment after",
		  "routing x ids=p4:i32 rows=p3 k=p6" },
		{ "routing x ids=p4 rows=p3 k=p6\r",
		  "routing x ids=p4:i32 rows=p3 k=p6" },
		{ "routing x weights=p2 ids=p4 rows=p3 k=p6",
		  "routing x ids=p4:i32 weights=p2:f32 rows=p3 k=p6" },
		{ "routing x ids=p8@0:i64 rows=p4 k=p2 weights=p6@0:bf16",
		  "routing x ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2" },
		{ "routing x ids=p3 rows=grid.x k=p5 weights=p2:f16",
		  "routing x ids=p3:i32 weights=p2:f16 rows=grid.x k=p5" },
	};
	size_t i;

	for (i = 0; i < NELEM(t); i++) {
		struct profile p = { 0 }, q = { 0 };
		char canon[1024];

		parse_ok(t[i].line, &p);
		CU_ASSERT_EQUAL_FATAL(p.count, 1);
		assert_format(&p.rules[0], t[i].canonical);
		/* The canonical form parses to the same rule. */
		rule_format(&p.rules[0], canon, sizeof canon);
		parse_ok(canon, &q);
		CU_ASSERT_EQUAL_FATAL(q.count, 1);
		assert_format(&q.rules[0], t[i].canonical);
		profile_free(&p);
		profile_free(&q);
	}
}

/* The fields themselves, not only their printed form. */
static void test_parse_fields(void)
{
	struct profile p = { 0 };
	const struct rule *r;

	parse_ok("routing *x* ids=p8@16:i64 rows=p4 k=p2:i64 stride=grid.y*3 experts=-5 "
		 "when=p1<=1024\n"
		 "kv *y* slots=p4:u32 count=grid.x block=p12 pool=p2,p3@40\n", &p);
	CU_ASSERT_EQUAL_FATAL(p.count, 2);
	r = &p.rules[0];
	CU_ASSERT_EQUAL(r->kind, RULE_ROUTING);
	CU_ASSERT_STRING_EQUAL(r->pattern, "*x*");
	CU_ASSERT_EQUAL(r->line, 1);
	CU_ASSERT_EQUAL(r->ref.param, 8);
	CU_ASSERT_EQUAL(r->ref.in_struct, 1);
	CU_ASSERT_EQUAL(r->ref.off, 16);
	CU_ASSERT_EQUAL(r->ref.dtype, RULE_I64);
	CU_ASSERT_EQUAL(r->rows.n, 1);
	CU_ASSERT_EQUAL(r->rows.t[0].kind, TERM_PARAM);
	CU_ASSERT_EQUAL(r->rows.t[0].param, 4);
	CU_ASSERT_EQUAL(r->rows.t[0].width, 0);
	CU_ASSERT_EQUAL(r->k.t[0].width, 8);
	CU_ASSERT_EQUAL(r->stride.n, 2);
	CU_ASSERT_EQUAL(r->stride.t[0].kind, TERM_GRID);
	CU_ASSERT_EQUAL(r->stride.t[0].axis, 1);
	CU_ASSERT_EQUAL(r->stride.t[1].kind, TERM_CONST);
	CU_ASSERT_EQUAL(r->stride.t[1].k, 3);
	CU_ASSERT_EQUAL(r->experts.t[0].k, -5);
	CU_ASSERT_EQUAL(r->nwhen, 1);
	CU_ASSERT_EQUAL(r->when[0].op, OP_LE);
	CU_ASSERT_EQUAL(r->when[0].a.t[0].param, 1);
	CU_ASSERT_EQUAL(r->when[0].b.t[0].k, 1024);
	CU_ASSERT_EQUAL(r->count.n, 0);
	r = &p.rules[1];
	CU_ASSERT_EQUAL(r->kind, RULE_KV);
	CU_ASSERT_EQUAL(r->line, 2);
	CU_ASSERT_EQUAL(r->ref.dtype, RULE_U32);
	CU_ASSERT_EQUAL(r->npool, 2);
	CU_ASSERT_EQUAL(r->pool[1].param, 3);
	CU_ASSERT_EQUAL(r->pool[1].in_struct, 1);
	CU_ASSERT_EQUAL(r->pool[1].off, 40);
	CU_ASSERT_EQUAL(r->pool[1].dtype, 0);
	CU_ASSERT_EQUAL(r->block.t[0].param, 12);
	profile_free(&p);
}

static void test_parse_structure(void)
{
	static const char text[] =
		"# a file with several profiles\n"
		"\n"
		"routing first ids=p0 rows=1 k=1\n"
		"profile alpha\n"
		"   # indented comment\n"
		"routing second ids=p0 rows=1 k=1\n"
		"profile beta-2.x\n"
		"kv third slots=p0 count=1 block=1\n"
		"use torch\n"
		"step last";     /* no newline at the end */
	struct profile p = { 0 };

	parse_ok(text, &p);
	CU_ASSERT_EQUAL_FATAL(p.count, 12);
	CU_ASSERT_STRING_EQUAL(p.rules[0].label, "user");
	CU_ASSERT_EQUAL(p.rules[0].line, 3);
	CU_ASSERT_STRING_EQUAL(p.rules[1].label, "alpha");
	CU_ASSERT_EQUAL(p.rules[1].line, 6);
	CU_ASSERT_STRING_EQUAL(p.rules[2].label, "beta-2.x");
	CU_ASSERT_STRING_EQUAL(p.rules[3].label, "torch");
	CU_ASSERT_STRING_EQUAL(p.rules[3].pattern, "*6sbtopk10gatherTopKIN3c104HalfE*");
	CU_ASSERT_STRING_EQUAL(p.rules[6].pattern, "*6sbtopk10gatherTopK*");
	CU_ASSERT_STRING_EQUAL(p.rules[10].label, "torch");
	/* The outer label is back after `use`. */
	CU_ASSERT_STRING_EQUAL(p.rules[11].label, "beta-2.x");
	CU_ASSERT_EQUAL(p.rules[11].kind, RULE_STEP);
	CU_ASSERT_EQUAL(p.rules[11].line, 10);

	/* Appending: a second text adds after the first. */
	parse_ok("step more\n", &p);
	CU_ASSERT_EQUAL(p.count, 13);
	profile_free(&p);
	CU_ASSERT_PTR_NULL(p.rules);
	CU_ASSERT_EQUAL(p.count, 0);

	/* Empty and comment-only texts are valid and add nothing. */
	parse_ok("", &p);
	parse_ok("# nothing\n\n   \n", &p);
	CU_ASSERT_EQUAL(p.count, 0);
	profile_free(&p);
}

/* Every error names origin:LINE:COL, on the right line; the profile keeps
 * exactly the rules it had. */
static void test_parse_errors(void)
{
	static char long_line[PROFILE_LINE_MAX + 64], long_pat[RULE_PATTERN_MAX + 32];
	static const struct { const char *text; const char *where; const char *msg; } t[] = {
		{ "bogus x", "t.rules:1:1: ", "unknown directive 'bogus' (expected routing, kv, step, profile or use)" },
		{ "# c\nroutng x ids=p1 rows=1 k=1", "t.rules:2:1: ", "unknown directive 'routng'" },
		{ "\n\nrouting x ids=p4 rowz=p3 k=p6", "t.rules:3:18: ",
		  "unknown key 'rowz' for routing (expected ids, rows, k, stride, experts, weights, when, triton)" },
		{ "kv x slots=p4 count=1 block=1 weights=p2", "t.rules:1:31: ",
		  "unknown key 'weights' for kv (expected slots, count, block, stride, pool, when, triton)" },
		{ "routing x ids=p4 rows=1 k=1 weights=p2:f64", "t.rules:1:40: ",
		  "unknown dtype ':f64' (expected f32, bf16 or f16)" },
		{ "routing x ids=p4 rows=1 k=1 weights=p2:i32", "t.rules:1:40: ",
		  "unknown dtype ':i32' (expected f32, bf16 or f16)" },
		{ "routing x ids=p4:f32 rows=1 k=1", "t.rules:1:18: ",
		  "unknown dtype ':f32' (expected i32, u32 or i64)" },
		{ "routing x ids=p4 rows=1 k=1 weights=p2 weights=p3", "t.rules:1:40: ",
		  "duplicate key 'weights'" },
		{ "kv x slots=p4 count=1 block=1 stride=2", "t.rules:1:39: ",
		  "kv rule with stride= but without pool=" },
		{ "kv x slots=p4 count=1 block=1 stride=2 pool=p1 stride=p3", "t.rules:1:48: ",
		  "duplicate key 'stride'" },
		{ "step x ids=p1", "t.rules:1:8: ", "unknown key 'ids' for step (expected when, triton)" },
		{ "routing x slots=p1 rows=1 k=1", "t.rules:1:11: ", "unknown key 'slots' for routing" },
		{ "step a\nrouting x ids=p4 rows=p3 k=p6 k=p7", "t.rules:2:31: ", "duplicate key 'k'" },
		{ "kv x slots=p1 count=1 block=1 pool=p2 pool=p3", "t.rules:1:39: ", "duplicate key 'pool'" },
		{ "routing x ids=p4 k=p6", "t.rules:1:22: ", "routing rule without rows=" },
		{ "routing x rows=p4 k=p6", "t.rules:1:23: ", "routing rule without ids=" },
		{ "\nkv x slots=p1 count=1 stride=2 pool=p3", "t.rules:2:39: ",
		  "kv rule with stride= but without block=" },
		{ "\nkv x slots=p1 block=1", "t.rules:2:22: ", "kv rule without count=" },
		{ "routing x ids=p64 rows=1 k=1", "t.rules:1:16: ", "parameter index '64' out of range (p0 to p63)" },
		{ "routing x ids=p1 rows=p99999999999999999999999 k=1", "t.rules:1:24: ", "out of range" },
		{ "routing x ids=p1 rows=1 k=1 when=p64>0", "t.rules:1:35: ", "parameter index '64'" },
		{ "routing x ids=p4:i16 rows=1 k=1", "t.rules:1:18: ", "unknown dtype ':i16' (expected i32, u32 or i64)" },
		{ "routing x ids=p4: rows=1 k=1", "t.rules:1:18: ", "unknown dtype ':'" },
		{ "routing x ids=p4 rows=p3:u32 k=1", "t.rules:1:26: ", "unknown integer width ':u32' (expected :i32 or :i64)" },
		{ "routing x ids=p4 rows=99999999999999999999 k=1", "t.rules:1:23: ", "integer '99999999999999999999' out of range" },
		{ "routing x ids=p4 rows=-9223372036854775809 k=1", "t.rules:1:23: ", "out of range" },
		{ "routing x ids=p4 rows=p3 k=p6x", "t.rules:1:30: ", "unexpected 'x' in the value of k=" },
		{ "routing x ids=p4x rows=p3 k=p6", "t.rules:1:17: ", "unexpected 'x' in the value of ids=" },
		{ "routing x ids=p4 rows=p3 k=p6 junk", "t.rules:1:31: ", "expected KEY=VALUE, got 'junk'" },
		{ "routing x ids=p4 rows=p3 =p6", "t.rules:1:26: ", "expected KEY=VALUE, got '=p6'" },
		{ "routing x ids=p4 rows=p3 k=", "t.rules:1:28: ", "empty value for k=" },
		{ "routing x ids=4 rows=1 k=1", "t.rules:1:15: ", "expected a parameter pN, got '4'" },
		{ "routing x ids=p4 rows=q3 k=1", "t.rules:1:23: ", "expected pN, pN@OFF, grid.x|y|z, block.x|y|z or an integer, got 'q3'" },
		{ "routing x ids=p4 rows=grid.w k=1", "t.rules:1:28: ", "expected grid.x, grid.y or grid.z" },
		{ "routing x ids=p4 rows=block.xx k=1", "t.rules:1:29: ", "expected block.x, block.y or block.z" },
		{ "routing x ids=p4 rows=p1*p2*p3*p4 k=1", "t.rules:1:32: ", "a value has at most 3 factors" },
		{ "routing x ids=p4 rows=p1* k=1", "t.rules:1:26: ", "expected pN" },
		{ "routing x ids=p8@32768 rows=1 k=1", "t.rules:1:18: ", "struct offset '32768' is not a byte offset from 0 to 32767" },
		{ "routing x ids=p8@ rows=1 k=1", "t.rules:1:18: ", "struct offset" },
		{ "routing x ids=p1 rows=1 k=1 when=p1", "t.rules:1:36: ", "expected ==, !=, <, <=, > or >= in when=, got ''" },
		{ "routing x ids=p1 rows=1 k=1 when=p1=1", "t.rules:1:36: ", "expected ==, !=, <, <=, > or >= in when=, got '=1'" },
		{ "routing x ids=p1 rows=1 k=1 when=p1<=", "t.rules:1:38: ", "expected pN" },
		{ "routing x ids=p1 rows=1 k=1 when=p1<=3x", "t.rules:1:39: ", "unexpected 'x' in the value of when=" },
		{ "step x when=p0>0 when=p0>0 when=p0>0 when=p0>0 when=p0>0", "t.rules:1:48: ",
		  "at most 4 when= conditions per rule" },
		{ "kv x slots=p1 count=1 block=1 pool=p1,p2,p3,p4,p5", "t.rules:1:48: ", "pool= lists at most 4 parameters" },
		{ "kv x slots=p1 count=1 block=1 pool=p2:i64", "t.rules:1:38: ", "unexpected ':i64' in the value of pool=" },
		{ "kv x slots=p1 count=1 block=1 pool=p2,", "t.rules:1:39: ", "expected a parameter pN" },
		{ "routing", "t.rules:1:8: ", "missing kernel name PATTERN" },
		{ "routing ids=p4 rows=1 k=1", "t.rules:1:9: ", "expected a kernel name PATTERN before 'ids=p4'" },
		{ "routing at::native::sbtopk::gatherTopK ids=p8 rows=1 k=1", "t.rules:1:11: ",
		  "':' cannot occur in a mangled kernel name" },
		{ "routing gatherTopK<float> ids=p8 rows=1 k=1", "t.rules:1:19: ", "'<' cannot occur" },
		{ "routing *?* ids=p8 rows=1 k=1", "t.rules:1:9: ", "pattern '*?*' would match every kernel" },
		{ "\n\nstep a\x01", "t.rules:3:7: ", "control character 0x01" },
		{ "step a\rb", "t.rules:1:7: ", "control character 0x0d" },
		{ "step a\x7f", "t.rules:1:7: ", "control character 0x7f" },
		{ "profile", "t.rules:1:8: ", "profile needs a NAME" },
		{ "profile a b", "t.rules:1:11: ", "unexpected 'b' after profile a" },
		{ "profile a/b", "t.rules:1:10: ", "'/' in a profile name" },
		{ "profile abcdefghijklmnopqrstuvwxyz0123456", "t.rules:1:9: ", "profile name longer than 31 bytes" },
		{ "step a\nuse vlm", "t.rules:2:5: ",
		  "unknown built-in profile 'vlm' (expected vllm, sglang, torch, llamacpp or auto)" },
		{ "use", "t.rules:1:4: ", "use needs a NAME" },
		{ "use vllm sglang", "t.rules:1:10: ", "unexpected 'sglang' after use vllm" },
		{ long_line, "t.rules:2:1025: ", "line longer than 1024 bytes" },
		{ long_pat, "t.rules:1:6: ", "pattern longer than 255 bytes" },
	};
	size_t i;

	/* A 1025-byte line 2 after a valid line 1. */
	strcpy(long_line, "step a\n");
	memset(long_line + 7, 'x', PROFILE_LINE_MAX + 1);
	memcpy(long_line + 7, "step ", 5);
	memcpy(long_pat, "step ", 5);
	memset(long_pat + 5, 'x', RULE_PATTERN_MAX);

	for (i = 0; i < NELEM(t); i++) {
		struct profile p = { 0 };
		char err[512] = "";

		parse_ok("step keep\n", &p);
		CU_ASSERT_EQUAL(profile_parse(t[i].text, "t.rules", &p, err, sizeof err), -1);
		if (strncmp(err, t[i].where, strlen(t[i].where)) != 0 || !strstr(err, t[i].msg))
			fprintf(stderr, "\ncase %zu: got '%s'\n  want '%s...%s'\n", i, err,
				t[i].where, t[i].msg);
		CU_ASSERT_EQUAL(strncmp(err, t[i].where, strlen(t[i].where)), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, t[i].msg));
		CU_ASSERT_PTR_NULL(strchr(err, '\n'));
		/* Rolled back: only the rule from before. */
		CU_ASSERT_EQUAL(p.count, 1);
		profile_free(&p);
	}
}

/* A failure after a successful `use` drops the used rules too, and a
 * too-small err buffer is filled without overflow. */
static void test_parse_rollback_and_short_err(void)
{
	struct profile p = { 0 };
	char err[8];

	CU_ASSERT_EQUAL(profile_parse("use vllm\nuse sglang\nbad", "x", &p, err, sizeof err), -1);
	CU_ASSERT_EQUAL(p.count, 0);
	CU_ASSERT_PTR_NULL(p.rules);    /* an empty profile holds no memory after */
	CU_ASSERT_STRING_EQUAL(err, "x:3:1: ");
	CU_ASSERT_EQUAL(profile_parse("bad", "x", &p, NULL, 0), -1);
	profile_free(&p);
}

/* ---- matching ------------------------------------------------------------ */

static void test_first_match_wins(void)
{
	struct profile p = { 0 };

	parse_ok("routing *moe_fused_gate_kernel_dynamic* ids=p3 rows=p4 k=p8\n"
		 "routing *moe_fused_gate_kernel* ids=p3 rows=p4 k=p6\n"
		 "routing *fused* ids=p0 rows=1 k=1\n"
		 "kv exact_name slots=p1 count=1 block=1\n", &p);
	CU_ASSERT_EQUAL(profile_match(&p, "_Z29moe_fused_gate_kernel_dynamicIfEvPv"), 0);
	CU_ASSERT_EQUAL(profile_match(&p, "_Z21moe_fused_gate_kernelIfLi8EEvPv"), 1);
	CU_ASSERT_EQUAL(profile_match(&p, "fused_add_rms_norm"), 2);
	CU_ASSERT_EQUAL(profile_match(&p, "exact_name"), 3);
	CU_ASSERT_EQUAL(profile_match(&p, "exact_name2"), -1);
	CU_ASSERT_EQUAL(profile_match(&p, ""), -1);
	profile_free(&p);
	CU_ASSERT_EQUAL(profile_match(&p, "anything"), -1);
}

/* ---- built-in profiles ---------------------------------------------------- */

static const char *const vllm_want[] = {
	"routing *4vllm3moe10topkGatingI*Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe10topkGatingI*El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe10topkGatingI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe17topkGatingSoftmaxI*Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe17topkGatingSoftmaxI*El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe17topkGatingSoftmaxI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe22topkGatingSoftplusSqrtI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6",
	"routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIj* ids=p2:u32 weights=p1:f32 rows=p3 k=6 experts=p4",
	"routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIl* ids=p2:i64 weights=p1:f32 rows=p3 k=6 experts=p4",
	"routing *4vllm3moe24dsv4HashTopkSoftplusSqrtI* ids=p2:i32 weights=p1:f32 rows=p3 k=6 experts=p4",
	"routing *4vllm3moe7moeTopKI*Ej* ids=p3:u32 weights=p2:f32 rows=grid.x k=p6",
	"routing *4vllm3moe7moeTopKI*El* ids=p3:i64 weights=p2:f32 rows=grid.x k=p6",
	"routing *4vllm3moe7moeTopKI* ids=p3:i32 weights=p2:f32 rows=grid.x k=p6",
	"routing *29single_group_topk_warp_kernelI*jLNS0_11ScoringFunc* ids=p2:u32 weights=p1:f32 rows=p4 k=p6 experts=p5 when=p6<=64",
	"routing *29single_group_topk_warp_kernelI*lLNS0_11ScoringFunc* ids=p2:i64 weights=p1:f32 rows=p4 k=p6 experts=p5 when=p6<=64",
	"routing *29single_group_topk_warp_kernelI*iLNS0_11ScoringFunc* ids=p2:i32 weights=p1:f32 rows=p4 k=p6 experts=p5 when=p6<=64",
	"routing *grouped_topk_fused_kernel* ids=p2:i32 weights=p1:f32 rows=p4 k=p8",
	"routing *grouped_topk_fused_small_expert_count_kernel* ids=p2:i32 weights=p1:f32 rows=p4 k=p7",
	"kv *30reshape_and_cache_flash_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p4:i64 count=grid.x block=p12 stride=p5:i64 pool=p2,p3",
	"kv *30reshape_and_cache_flash_kernelIff* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*4 pool=p2,p3",
	"kv *30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*2 pool=p2,p3",
	"kv *30reshape_and_cache_flash_kernelItt* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*2 pool=p2,p3",
	"kv *30reshape_and_cache_flash_kernelI* slots=p4:i64 count=grid.x block=p12 pool=p2,p3",
	"kv *24reshape_and_cache_kernelI* slots=p4:i64 count=grid.x block=p9 pool=p2,p3",
	"kv *27concat_and_cache_mla_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p3:i64 count=grid.x block=p10 stride=p4 pool=p2",
	"kv *27concat_and_cache_mla_kernelIff* slots=p3:i64 count=grid.x block=p10 stride=p4*4 pool=p2",
	"kv *27concat_and_cache_mla_kernelI13__nv_bfloat16S1_* slots=p3:i64 count=grid.x block=p10 stride=p4*2 pool=p2",
	"kv *27concat_and_cache_mla_kernelItt* slots=p3:i64 count=grid.x block=p10 stride=p4*2 pool=p2",
	"kv *27concat_and_cache_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2",
	"kv *30concat_and_cache_ds_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2",
	"kv *38concat_and_cache_mla_rope_fused_kernelI* slots=p12:i64 count=grid.x block=p16 pool=p11",
	"kv *36concat_and_cache_nvfp4_ds_mla_kernelE* slots=p3:i64 count=grid.x block=p8 pool=p2",
	"kv *32indexer_k_quant_and_cache_kernelI* slots=p2:i64 count=grid.x block=p5 pool=p1",
	"kv reshape_and_cache_kernel_flash slots=p4:i64 count=grid.x pool=p2,p3 "
	"when=p11==0 triton=key_ptr,value_ptr,key_cache_ptr,value_cache_ptr,slot_mapping_ptr,"
	"k_scale,v_scale,key_stride,value_stride,block_stride,head_stride,dim_stride_k,"
	"dim_stride_v,page_stride",
	NULL
};

static const char *const sglang_want[] = {
	"routing *topkGatingSoftmax* ids=p4:i32 weights=p2:f32 rows=p3 k=p5",
	"routing *topkGatingSigmoid* ids=p4:i32 weights=p2:f32 rows=p3 k=p5",
	"routing *moeTopK* ids=p3:i32 weights=p2:f32 rows=grid.x k=p5",
	"routing *kimi_k2_moe_fused_gate_kernel* ids=p3:i32 weights=p2:f32 rows=p4 k=p5",
	"routing *moe_fused_gate_kernel_dynamic* ids=p3:i32 weights=p2:f32 rows=p4 k=p8",
	"routing *moe_fused_gate_kernel* ids=p3:i32 weights=p2:f32 rows=p4 k=p6",
	"routing _router_triton_kernel ids=p6:i32 weights=p5:f32 rows=p8 k=p18 "
	"triton=scores_ptr,bias_ptr,bias_alt_ptr,input_ids_ptr,num_token_non_padded_ptr,"
	"out_weights_ptr,out_indices_ptr,out_packed_ptr,M,routed_scaling_factor,moe_softcapping,"
	"stride_bias,stride_bias_alt,stride_input_ids,stride_sm,stride_sn,stride_wm,stride_wk,"
	"stride_im,stride_ik,stride_pm,stride_pk",
	NULL
};

static const char *const torch_want[] = {
	"routing *6sbtopk10gatherTopKIN3c104HalfE* ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2 "
	"experts=p1 when=p1<=1024 when=p9==1 when=p7==1",
	"routing *6sbtopk10gatherTopKIN3c108BFloat16E* ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2 "
	"experts=p1 when=p1<=1024 when=p9==1 when=p7==1",
	"routing *6sbtopk10gatherTopKIf* ids=p8@0:i64 weights=p6@0:f32 rows=p4 k=p2 "
	"experts=p1 when=p1<=1024 when=p9==1 when=p7==1",
	"routing *6sbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1",
	"routing *6mbtopk10gatherTopKIN3c104HalfE* ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2 "
	"experts=p1 when=p1<=1024 when=p9==1 when=p7==1",
	"routing *6mbtopk10gatherTopKIN3c108BFloat16E* ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2 "
	"experts=p1 when=p1<=1024 when=p9==1 when=p7==1",
	"routing *6mbtopk10gatherTopKIf* ids=p8@0:i64 weights=p6@0:f32 rows=p4 k=p2 "
	"experts=p1 when=p1<=1024 when=p9==1 when=p7==1",
	"routing *6mbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1",
	NULL
};

static const char *const llamacpp_want[] = {
	"routing *13topk_moe_cudaILi1E* ids=p2:i32 rows=p4 k=p5 stride=1",
	"routing *13topk_moe_cudaILi2E* ids=p2:i32 rows=p4 k=p5 stride=2",
	"routing *13topk_moe_cudaILi4E* ids=p2:i32 rows=p4 k=p5 stride=4",
	"routing *13topk_moe_cudaILi8E* ids=p2:i32 rows=p4 k=p5 stride=8",
	"routing *13topk_moe_cudaILi16E* ids=p2:i32 rows=p4 k=p5 stride=16",
	"routing *13topk_moe_cudaILi32E* ids=p2:i32 rows=p4 k=p5 stride=32",
	"routing *13topk_moe_cudaILi64E* ids=p2:i32 rows=p4 k=p5 stride=64",
	"routing *13topk_moe_cudaILi128E* ids=p2:i32 rows=p4 k=p5 stride=128",
	"routing *13topk_moe_cudaILi256E* ids=p2:i32 rows=p4 k=p5 stride=256",
	"routing *13topk_moe_cudaILi512E* ids=p2:i32 rows=p4 k=p5 stride=512",
	"routing *topk_moe_cuda* ids=p2:i32 rows=p4 k=p5 when=p4==1",
	"routing *k_argsort_f32_i32* ids=p1:i32 rows=grid.x k=p2 when=p2<=1024",
	"kv *k_set_rows* slots=p1:i64 count=p4:i64*p5:i64*p6:i64 block=1 pool=p2",
	NULL
};

static const struct { const char *name; const char *const *want; } builtins[] = {
	{ "vllm", vllm_want }, { "sglang", sglang_want },
	{ "torch", torch_want }, { "llamacpp", llamacpp_want },
};

static unsigned check_rules(const struct profile *p, unsigned from, const char *label,
			    const char *const *want)
{
	unsigned n = 0;

	for (; want[n]; n++) {
		CU_ASSERT_FATAL(from + n < p->count);
		assert_format(&p->rules[from + n], want[n]);
		CU_ASSERT_STRING_EQUAL(p->rules[from + n].label, label);
	}
	return n;
}

static void test_builtin_exact(void)
{
	size_t i;

	for (i = 0; i < NELEM(builtins); i++) {
		struct profile p = { 0 };
		char err[256] = "";
		unsigned n;

		CU_ASSERT_EQUAL_FATAL(profile_builtin(builtins[i].name, &p, err, sizeof err), 0);
		n = check_rules(&p, 0, builtins[i].name, builtins[i].want);
		CU_ASSERT_EQUAL(p.count, n);
		profile_free(&p);
	}
}

static void test_builtin_auto(void)
{
	struct profile p = { 0 };
	char err[256] = "";
	unsigned at = 0;
	size_t i;

	CU_ASSERT_EQUAL_FATAL(profile_builtin("auto", &p, err, sizeof err), 0);
	for (i = 0; i < NELEM(builtins); i++)
		at += check_rules(&p, at, builtins[i].name, builtins[i].want);
	CU_ASSERT_EQUAL(p.count, at);
	profile_free(&p);

	CU_ASSERT_PTR_NOT_NULL(profile_builtin_text("auto"));
	CU_ASSERT_PTR_NULL(profile_builtin_text("vLLM"));
	CU_ASSERT_STRING_EQUAL(profile_builtin_names[0], "auto");
	CU_ASSERT_PTR_NULL(profile_builtin_names[5]);
	CU_ASSERT_EQUAL(profile_builtin("nope", &p, err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, "unknown built-in profile 'nope' (expected auto, vllm, sglang, torch or llamacpp)");
}

/* Real (or faithfully built) mangled names land on the intended rule of
 * "auto", and near misses land nowhere. */
static void test_builtin_names(void)
{
	static const struct { const char *name, *label, *pattern; } t[] = {
		{ "_ZN4vllm3moe10topkGatingILi8ELi64ELi4ELi16ELi32EiN3c108BFloat16ELNS0_11ScoringFuncE0EEEvPKT5_PKbPfiPT4_PiiiibPKf",
		  "vllm", "*4vllm3moe10topkGatingI*" },
		{ "_ZN4vllm3moe17topkGatingSoftmaxILi8ELi64ELi4ELi16ELi32EiEEvPKfPKbPfiPT4_Piiii",
		  "vllm", "*4vllm3moe17topkGatingSoftmaxI*" },
		{ "_ZN4vllm3moe7moeTopKILi256EiEEvPKfPKbPfPT0_Piiiii", "vllm", "*4vllm3moe7moeTopKI*" },
		/* The ids' type per instantiation (tests/engines/vllm-0.33.0.tsv). */
		{ "_ZN4vllm3moe10topkGatingILi8ELi4ELi16ELi32Ej6__halfLNS0_11ScoringFuncE1EEEvPKT5_PKbPfiPT4_PiiiibPKfdS8_",
		  "vllm", "*4vllm3moe10topkGatingI*Ej*" },
		{ "_ZN4vllm3moe10topkGatingILi8ELi4ELi16ELi32El13__nv_bfloat16LNS0_11ScoringFuncE0EEEvPKT5_PKbPfiPT4_PiiiibPKfdS8_",
		  "vllm", "*4vllm3moe10topkGatingI*El*" },
		{ "_ZN4vllm3moe10topkGatingILi10ELi320ELi4ELi4ELi32Ei13__nv_bfloat16LNS0_11ScoringFuncE0EEEvPKT5_PKbPfiPT4_PiiiibPKfdS8_",
		  "vllm", "*4vllm3moe10topkGatingI*" },
		{ "_ZN4vllm3moe7moeTopKILi256EjEEvPKfPKbPfPT0_PiiiiibS3_dS5_", "vllm",
		  "*4vllm3moe7moeTopKI*Ej*" },
		{ "_ZN4vllm3moe7moeTopKILi256ElEEvPKfPKbPfPT0_PiiiiibS3_dS5_", "vllm",
		  "*4vllm3moe7moeTopKI*El*" },
		{ "_ZN4vllm3moe22topkGatingSoftplusSqrtILi10ELi320ELi4ELi4ELi32ELb0Eii13__nv_bfloat16EEvPKT7_PKbPfiPT5_PiiiibdPKfPKT6_SG_",
		  "vllm", "*4vllm3moe22topkGatingSoftplusSqrtI*" },
		{ "_ZN4vllm3moe24dsv4HashTopkSoftplusSqrtIiiEEvPKfPfPT_iifPKT0_S9_", "vllm",
		  "*4vllm3moe24dsv4HashTopkSoftplusSqrtI*" },
		{ "_ZN4vllm3moe25grouped_topk_fused_kernelIfiEEvPT_PfPiPKS1_iiiiibfi", "vllm",
		  "*grouped_topk_fused_kernel*" },
		{ "_ZN4vllm3moe17single_group_topk6detail29single_group_topk_warp_kernelI13__nv_bfloat166__halfiLNS0_11ScoringFuncE0ELi1024ELi16EEEvPKT_PfPT1_PKT0_lllbfb",
		  "vllm", "*29single_group_topk_warp_kernelI*iLNS0_11ScoringFunc*" },
		{ "_ZN4vllm3moe17single_group_topk6detail29single_group_topk_warp_kernelIfflLNS0_11ScoringFuncE1ELi512ELi22EEEvPKT_PfPT1_PKT0_lllbfb",
		  "vllm", "*29single_group_topk_warp_kernelI*lLNS0_11ScoringFunc*" },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S6_PKllllliiiPKfSA_",
		  "vllm", "*30reshape_and_cache_flash_kernelItt*" },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelI6__halfS1_LNS_18Fp8KVCacheDataTypeE0EEEvPKT_S5_PT0_S7_PKlllllliiiPKfSB_i",
		  "vllm", "*30reshape_and_cache_flash_kernelI*" },
		{ "_ZN4vllm24reshape_and_cache_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S6_PKliiiiiPKfSA_",
		  "vllm", "*24reshape_and_cache_kernelI*" },
		{ "_ZN4vllm30concat_and_cache_ds_mla_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_PKliiiiiiPKf",
		  "vllm", "*30concat_and_cache_ds_mla_kernelI*" },
		{ "_Z17topkGatingSoftmaxIfLi8ELi8ELi4ELi16EEvPKT_PKbPfiPiiiibfPKf", "sglang", "*topkGatingSoftmax*" },
		{ "_ZN12_GLOBAL__N_117topkGatingSoftmaxIfLi8ELi8ELi4ELi16EEEvPKT_PKbPfiPiiiibfPKf",
		  "sglang", "*topkGatingSoftmax*" },
		{ "_Z11moeTopKFastILi256EEvPfPKbS0_Piiiiib", "sglang", "*moeTopK*" },
		{ "_Z29moe_fused_gate_kernel_dynamicIfEvPvS0_PfPiiiiiiibd", "sglang",
		  "*moe_fused_gate_kernel_dynamic*" },
		{ "_Z21moe_fused_gate_kernelIfLi8ELi256EEvPvS0_PfPiiiibd", "sglang", "*moe_fused_gate_kernel*" },
		{ "_Z29kimi_k2_moe_fused_gate_kernelPfS_S_Pillbdb", "sglang",
		  "*kimi_k2_moe_fused_gate_kernel*" },
		{ "_Z41kimi_k2_moe_fused_gate_kernel_small_tokenPfS_S_Pillbdb", "sglang",
		  "*kimi_k2_moe_fused_gate_kernel*" },
		{ "_Z17topkGatingSigmoidI13__nv_bfloat16Li1ELi1ELi4ELi2EEvPKT_PKbPfiPiiiibPKf", "sglang",
		  "*topkGatingSigmoid*" },
		{ "_ZN2at6native6sbtopk10gatherTopKIfjLi2ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EES8_S8_bS8_S8_NS5_IS6_S8_EES8_NS5_IlS8_EES8_PS6_",
		  "torch", "*6sbtopk10gatherTopKIf*" },
		{ "_ZN2at6native6mbtopk10gatherTopKIfjNS_4cuda6detail7BitwiseIfE4typeELi2EEEvNS3_10TensorInfoIKT_T0_EES9_S9_bjS9_NS6_IS7_S9_EES9_NS6_IlS9_EES9_jjPS7_PjSD_SC_",
		  "torch", "*6mbtopk10gatherTopKIf*" },
		{ "_ZN2at6native6sbtopk10gatherTopKIN3c108BFloat16EjLi1ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EES9_S9_bS9_S9_NS6_IS7_S9_EES9_NS6_IlS9_EES9_PS7_",
		  "torch", "*6sbtopk10gatherTopKIN3c108BFloat16E*" },
		{ "_ZN2at6native6sbtopk10gatherTopKIN3c104HalfEjLi1ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EES9_S9_bS9_S9_NS6_IS7_S9_EES9_NS6_IlS9_EES9_PS7_",
		  "torch", "*6sbtopk10gatherTopKIN3c104HalfE*" },
		{ "_ZN2at6native6sbtopk10gatherTopKIdjLi1ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EES8_S8_bS8_S8_NS5_IS6_S8_EES8_NS5_IlS8_EES8_PS6_",
		  "torch", "*6sbtopk10gatherTopK*" },
		{ "_ZL13topk_moe_cudaILi128ELb1ELb0EEvPKfPfPiiif", "llamacpp", "*13topk_moe_cudaILi128E*" },
		{ "_ZL13topk_moe_cudaILi8ELb0ELb0EEvPKfPfPiiif", "llamacpp", "*13topk_moe_cudaILi8E*" },
		{ "_ZL13topk_moe_cudaILi96ELb1ELb0EEvPKfPfPiiif", "llamacpp", "*topk_moe_cuda*" },
		{ "_ZL17k_argsort_f32_i32IL14ggml_sort_order0EEvPKfPiii", "llamacpp", "*k_argsort_f32_i32*" },
		{ "_ZL10k_set_rowsIflfEvPKT_PKT0_PT1_lllllllllllllll", "llamacpp", "*k_set_rows*" },
		{ "_ZL16k_set_rows_quantIl10block_q8_0Li32EXadL_ZL15quantize_f32_q8_0PKfPS0_EEEvS2_PKT_PT0_lllllllllllllll",
		  "llamacpp", "*k_set_rows*" },
		/* Near misses. */
		/* vLLM's Triton kernel: its own rule, placed from Triton's IR */
		{ "reshape_and_cache_kernel_flash", "vllm", "reshape_and_cache_kernel_flash" },
		{ "reshape_and_cache_kernel_flash_diffkv", NULL, NULL },
		{ "_ZN4vllm3moe17single_group_topk6detail30single_group_topk_block_kernelI13__nv_bfloat166__halfiLNS0_11ScoringFuncE0ELi1024ELi16EEEvPKT_PfPT1_PKT0_llbfb",
		  NULL, NULL },				/* its longs are not known */
		{ "_ZN4vllm31reshape_and_cache_flash_kernel2Iff", NULL, NULL },
		{ "_ZN2at6native6sbtopk9gatherTopIf", NULL, NULL },
		{ "ampere_sgemm_128x64_tn", NULL, NULL },
	};
	struct profile p = { 0 };
	char err[256];
	size_t i;

	CU_ASSERT_EQUAL_FATAL(profile_builtin("auto", &p, err, sizeof err), 0);
	for (i = 0; i < NELEM(t); i++) {
		int at = profile_match(&p, t[i].name);

		if (!t[i].label) {
			if (at >= 0)
				fprintf(stderr, "\n%s matched %s\n", t[i].name, p.rules[at].pattern);
			CU_ASSERT_EQUAL(at, -1);
			continue;
		}
		CU_ASSERT_FATAL(at >= 0);
		if (strcmp(p.rules[at].pattern, t[i].pattern) != 0)
			fprintf(stderr, "\n%s matched %s\n", t[i].name, p.rules[at].pattern);
		CU_ASSERT_STRING_EQUAL(p.rules[at].label, t[i].label);
		CU_ASSERT_STRING_EQUAL(p.rules[at].pattern, t[i].pattern);
	}
	profile_free(&p);
}

/* ---- loading ------------------------------------------------------------- */

static void test_load_file(void)
{
	static const char good[] = "profile mine\nuse torch\nrouting *my_router* ids=p1 rows=p2 k=p3\n";
	static const char broken[] = "# mine\nrouting *a* ids=p1 rows=p2 k=p3\nroutng *b*\n";
	static const char nul[] = "step a\nstep b\nst\0ep c\n";
	struct profile p = { 0 };
	char path[256], want[512], err[512];
	char *big;

	test_path(path, sizeof path, "prof");
	CU_ASSERT_EQUAL_FATAL(test_spew(path, good, strlen(good)), 0);
	CU_ASSERT_EQUAL(profile_load_file(path, &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(p.count, 9);
	CU_ASSERT_STRING_EQUAL(p.rules[8].label, "mine");
	profile_free(&p);
	CU_ASSERT_EQUAL(profile_load(path, &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(p.count, 9);
	profile_free(&p);

	CU_ASSERT_EQUAL_FATAL(test_spew(path, broken, strlen(broken)), 0);
	CU_ASSERT_EQUAL(profile_load(path, &p, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s:3:1: unknown directive 'routng'", path);
	CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
	CU_ASSERT_EQUAL(p.count, 0);

	CU_ASSERT_EQUAL_FATAL(test_spew(path, nul, sizeof nul - 1), 0);
	CU_ASSERT_EQUAL(profile_load_file(path, &p, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s:3: NUL byte: not a text file", path);
	CU_ASSERT_STRING_EQUAL(err, want);

	big = malloc((1u << 20) + 2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	memset(big, '\n', (1u << 20) + 1);
	CU_ASSERT_EQUAL_FATAL(test_spew(path, big, (1u << 20) + 1), 0);
	free(big);
	CU_ASSERT_EQUAL(profile_load_file(path, &p, err, sizeof err), -1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, ": larger than 1048576 bytes"));
	unlink(path);

	CU_ASSERT_EQUAL(profile_load_file(path, &p, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
	CU_ASSERT_STRING_EQUAL(err, want);
	CU_ASSERT_EQUAL(profile_load_file("/", &p, err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, "/: not a regular file");

	CU_ASSERT_EQUAL(profile_load("vllm", &p, err, sizeof err), 0);
	CU_ASSERT_EQUAL(p.count, 36);
	profile_free(&p);
	CU_ASSERT_EQUAL(profile_load("vlm", &p, err, sizeof err), -1);
	CU_ASSERT_STRING_EQUAL(err, "unknown profile 'vlm' (built-in: auto, vllm, sglang, torch, llamacpp; "
			       "a file must be given as a path with a '/', e.g. ./vlm)");
	CU_ASSERT_EQUAL(p.count, 0);
}

/* The rules PROFILES.md shows as examples parse. */
static void test_doc_examples(void)
{
	static const char *const examples[] = {
		"routing *6sbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1==128 when=p9==1\nuse auto\n",
		"kv *store_kvcache* slots=p0@32:i64 count=p0@72 block=1\n",
		"kv *k_set_rowsIfi* slots=p1:i32 count=p4:i64*p5:i64*p6:i64 block=1 pool=p2\nuse llamacpp\n",
	};
	size_t i;

	for (i = 0; i < NELEM(examples); i++) {
		struct profile p = { 0 };

		parse_ok(examples[i], &p);
		profile_free(&p);
	}
}

/* PROFILES.md lists each built-in verbatim.  Found next to this source
 * (meson runs tests in the build directory; __FILE__ is relative to it). */
static void test_doc_lists_builtins(void)
{
	char path[1024], *doc;
	const char *slash = strrchr(__FILE__, '/');
	size_t i, len;

	snprintf(path, sizeof path, "%.*s/../../preload/PROFILES.md",
		 slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
	if (!(doc = test_slurp(path, &len))) {
		fprintf(stderr, "\n(%s not found from here: not checked)\n", path);
		return;
	}
	doc = realloc(doc, len + 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
	doc[len] = '\0';
	for (i = 1; profile_builtin_names[i]; i++) {
		const char *text = profile_builtin_text(profile_builtin_names[i]);

		if (!strstr(doc, text))
			fprintf(stderr, "\nPROFILES.md does not list '%s' verbatim\n",
				profile_builtin_names[i]);
		CU_ASSERT_PTR_NOT_NULL(strstr(doc, text));
	}
	free(doc);
}

/* ---- evaluation ---------------------------------------------------------- */

/* One launch's parameters: each in its own heap block of exactly its size,
 * so ASan flags any read past a parameter. */
struct fake {
	unsigned n;
	void *args[16];
	uint32_t sizes[16];
};

static void fake_add(struct fake *f, const void *bytes, uint32_t size)
{
	void *b = malloc(size);

	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	memcpy(b, bytes, size);
	f->args[f->n] = b;
	f->sizes[f->n++] = size;
}

static void fake_ptr(struct fake *f, uint64_t v) { fake_add(f, &v, 8); }
static void fake_i32(struct fake *f, int32_t v) { fake_add(f, &v, 4); }
static void fake_i64(struct fake *f, int64_t v) { fake_add(f, &v, 8); }

static void fake_free(struct fake *f)
{
	while (f->n)
		free(f->args[--f->n]);
}

static struct rule one_rule(const char *text)
{
	struct profile p = { 0 };
	struct rule r;

	memset(&r, 0, sizeof r);
	parse_ok(text, &p);
	CU_ASSERT_EQUAL(p.count, 1);
	if (p.count)
		r = p.rules[0];
	profile_free(&p);
	return r;
}

/* vLLM topkGating: (input, finished, output, num_rows, indices,
 * source_rows, k, start_expert, end_expert). */
static void make_topk_gating(struct fake *f, int32_t rows, int32_t k)
{
	memset(f, 0, sizeof *f);
	fake_ptr(f, 0x7f0000000000);
	fake_ptr(f, 0);
	fake_ptr(f, 0x7f0000100000);
	fake_i32(f, rows);
	fake_ptr(f, 0x7f0000200000);
	fake_ptr(f, 0x7f0000300000);
	fake_i32(f, k);
	fake_i32(f, 0);
	fake_i32(f, 64);
}

static void test_eval_pointer_and_ints(void)
{
	struct rule r = one_rule("routing x ids=p4 rows=p3 k=p6");
	struct rule_hit h;
	struct fake f;

	make_topk_gating(&f, 7, 8);
	memset(&h, 0xa5, sizeof h);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.kind, RULE_ROUTING);
	CU_ASSERT_EQUAL(h.dtype, RULE_I32);
	CU_ASSERT_EQUAL(h.ptr, UINT64_C(0x7f0000200000));
	CU_ASSERT_EQUAL(h.rows, 7);
	CU_ASSERT_EQUAL(h.k, 8);
	CU_ASSERT_EQUAL(h.stride, 8);   /* default: k */
	CU_ASSERT_EQUAL(h.experts, -1);
	CU_ASSERT_EQUAL(h.npool, 0);

	/* Sizes unknown: pointers are 8 bytes, bare ints 4. */
	memset(&h, 0, sizeof h);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, NULL, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, UINT64_C(0x7f0000200000));
	CU_ASSERT_EQUAL(h.rows, 7);
	CU_ASSERT_EQUAL(h.k, 8);

	/* Zero rows is an empty batch, not an error. */
	fake_free(&f);
	make_topk_gating(&f, 0, 2);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 0);
	fake_free(&f);
}

/* Gating weights: the pointer and type the rule names, or none (0, 0) when
 * it names none or the launch passes NULL; read like any pointer. */
static void test_eval_weights(void)
{
	struct rule r = one_rule("routing x ids=p4 rows=p3 k=p6 weights=p2:bf16");
	struct rule bare = one_rule("routing x ids=p4 rows=p3 k=p6");
	struct rule wide = one_rule("routing x ids=p4 rows=p6 k=p6 weights=p3");
	struct rule_hit h;
	struct fake f;
	uint64_t null = 0;

	make_topk_gating(&f, 7, 8);
	memset(&h, 0xa5, sizeof h);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.weights, UINT64_C(0x7f0000100000));
	CU_ASSERT_EQUAL(h.wdtype, RULE_BF16);
	CU_ASSERT_EQUAL(h.ptr, UINT64_C(0x7f0000200000));
	memset(&h, 0xa5, sizeof h);
	CU_ASSERT_EQUAL(rule_eval(&bare, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.weights, 0);
	CU_ASSERT_EQUAL(h.wdtype, 0);
	/* A NULL weights pointer: the ids, without weights. */
	memcpy(f.args[2], &null, 8);
	memset(&h, 0xa5, sizeof h);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, UINT64_C(0x7f0000200000));
	CU_ASSERT_EQUAL(h.weights, 0);
	CU_ASSERT_EQUAL(h.wdtype, 0);
	/* Weights out of a 4-byte param: the rule does not fit. */
	CU_ASSERT_EQUAL(rule_eval(&wide, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	fake_free(&f);
}

/* A 4-byte param is read as 4 bytes even where the next bytes in memory
 * would make it a different number; an 8-byte one as 8. */
static void test_eval_param_sizes(void)
{
	static const uint8_t bytes8[8] = { 7, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f };
	struct rule r = one_rule("routing x ids=p0 rows=p1 k=p2");
	struct rule r64 = one_rule("routing x ids=p0 rows=p1:i64 k=p2");
	struct rule r32 = one_rule("routing x ids=p0 rows=p1:i32 k=p2");
	struct rule_hit h;
	struct fake f;
	uint8_t one = 2;

	memset(&f, 0, sizeof f);
	fake_ptr(&f, 0x1000);
	fake_add(&f, bytes8, 8);
	/* A 2-byte param in 8 bytes of storage: with sizes unknown the
	 * caller vouches for 8 readable bytes. */
	fake_i64(&f, 3);
	f.sizes[2] = 2;
	/* p1 is 8 bytes: read whole, 0x7fffffff00000007 rows. */
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, INT64_C(0x7fffffff00000007));
	CU_ASSERT_EQUAL(h.k, 3);
	CU_ASSERT_EQUAL(rule_eval(&r64, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, INT64_C(0x7fffffff00000007));
	/* An explicit width that disagrees with the real size: stale rule. */
	CU_ASSERT_EQUAL(rule_eval(&r32, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	/* Sizes unknown: bare reads 4 bytes, :i64 reads 8. */
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, NULL, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 7);
	CU_ASSERT_EQUAL(rule_eval(&r64, f.args, NULL, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, INT64_C(0x7fffffff00000007));
	CU_ASSERT_EQUAL(rule_eval(&r32, f.args, NULL, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 7);
	fake_free(&f);

	/* p1 really is 4 bytes (its heap block ends there). */
	fake_ptr(&f, 0x1000);
	fake_add(&f, bytes8, 4);
	fake_add(&f, &one, 1);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 7);
	CU_ASSERT_EQUAL(h.k, 2);
	CU_ASSERT_EQUAL(rule_eval(&r32, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(rule_eval(&r64, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	/* A pointer REF on a param that is not 8 bytes. */
	f.sizes[0] = 4;
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	f.sizes[0] = 8;
	/* A bare pN of an odd size (a 3-byte struct) is no integer. */
	f.sizes[1] = 3;
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	f.sizes[1] = 4;
	/* A negative 4-byte int sign-extends (and -1 rows is impossible). */
	memset(f.args[1], 0xff, 4);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	fake_free(&f);
}

/* PyTorch gatherTopK: the ids pointer is the first field of the by-value
 * TensorInfo param 8; IndexType params are 4 or 8 bytes. */
static void make_gather_topk(struct fake *f, uint32_t slice, uint32_t k, uint32_t slices,
			     uint32_t within_stride)
{
	uint8_t info[416];
	uint64_t ids = 0x7e0000004000;
	uint8_t largest = 1;

	memset(f, 0, sizeof *f);
	memset(info, 0x11, sizeof info);
	fake_add(f, info, sizeof info);          /* p0 input TensorInfo */
	fake_add(f, &slice, 4);                   /* p1 inputSliceSize */
	fake_add(f, &k, 4);                       /* p2 outputSliceSize */
	fake_add(f, &largest, 1);                 /* p3 largest */
	fake_add(f, &slices, 4);                  /* p4 numInputSlices */
	fake_i32(f, 1);                           /* p5 */
	fake_add(f, info, sizeof info);          /* p6 topK TensorInfo */
	fake_i32(f, 1);                           /* p7 */
	memcpy(info, &ids, 8);
	fake_add(f, info, sizeof info);          /* p8 indices TensorInfo */
	fake_add(f, &within_stride, 4);           /* p9 */
	fake_ptr(f, 0);                           /* p10 kthValues */
}

static void test_eval_struct_offsets(void)
{
	struct profile p = { 0 };
	struct rule_hit h;
	struct fake f;
	char err[256];
	const struct rule *r;

	CU_ASSERT_EQUAL_FATAL(profile_builtin("torch", &p, err, sizeof err), 0);
	r = &p.rules[0];

	make_gather_topk(&f, 64, 8, 5, 1);
	CU_ASSERT_EQUAL(rule_eval(r, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, UINT64_C(0x7e0000004000));
	CU_ASSERT_EQUAL(h.dtype, RULE_I64);
	CU_ASSERT_EQUAL(h.rows, 5);
	CU_ASSERT_EQUAL(h.k, 8);
	CU_ASSERT_EQUAL(h.stride, 8);
	CU_ASSERT_EQUAL(h.experts, 64);
	/* Sizes unknown: p8@0 still fits the 8 bytes a param is taken for. */
	CU_ASSERT_EQUAL(rule_eval(r, f.args, NULL, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, UINT64_C(0x7e0000004000));
	fake_free(&f);

	/* A sampler's top-k over a vocabulary, and one not along the last dim. */
	make_gather_topk(&f, 151936, 50, 1, 1);
	CU_ASSERT_EQUAL(rule_eval(r, f.args, f.sizes, f.n, grid1, block1, &h), 0);
	fake_free(&f);
	make_gather_topk(&f, 64, 8, 5, 5);
	CU_ASSERT_EQUAL(rule_eval(r, f.args, f.sizes, f.n, grid1, block1, &h), 0);
	fake_free(&f);
	profile_free(&p);
}

static void test_eval_struct_bounds(void)
{
	struct rule ref16 = one_rule("routing x ids=p0@16 rows=1 k=1");
	struct rule val12 = one_rule("routing x ids=p1 rows=p0@12 k=1");
	struct rule val13 = one_rule("routing x ids=p1 rows=p0@13 k=1");
	struct rule val8w = one_rule("routing x ids=p1 rows=p0@8:i64 k=1");
	struct rule val12w = one_rule("routing x ids=p1 rows=p0@12:i64 k=1");
	struct rule_hit h;
	uint8_t s[24];
	uint64_t ptr = 0xabc0;
	int32_t four = 4;
	int64_t eight = 8;
	struct fake f;

	memset(s, 0, sizeof s);
	memcpy(s + 16, &ptr, 8);
	memcpy(s + 12, &four, 4);
	memset(&f, 0, sizeof f);
	fake_add(&f, s, 24);
	fake_ptr(&f, 0x1000);
	CU_ASSERT_EQUAL(rule_eval(&ref16, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, 0xabc0);
	CU_ASSERT_EQUAL(rule_eval(&val12, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 4);
	fake_free(&f);

	/* The same struct cut to 16 bytes: the pointer at 16 is outside it. */
	memcpy(s + 8, &eight, 8);
	fake_add(&f, s, 16);
	fake_ptr(&f, 0x1000);
	CU_ASSERT_EQUAL(rule_eval(&ref16, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	CU_ASSERT_EQUAL(rule_eval(&val12, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(rule_eval(&val13, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	CU_ASSERT_EQUAL(rule_eval(&val8w, f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 8);
	CU_ASSERT_EQUAL(rule_eval(&val12w, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	/* Sizes unknown: a param counts as 8 bytes, so @12 and @16 are out. */
	CU_ASSERT_EQUAL(rule_eval(&ref16, f.args, NULL, f.n, grid1, block1, &h), -1);
	CU_ASSERT_EQUAL(rule_eval(&val12, f.args, NULL, f.n, grid1, block1, &h), -1);
	fake_free(&f);
}

static void test_eval_grid_block(void)
{
	static const unsigned grid[3] = { 33, 2, 3 }, block[3] = { 128, 4, 5 };
	struct rule r = one_rule("routing x ids=p0 rows=grid.x k=block.y stride=grid.y*block.x "
				 "experts=grid.z*block.z*2");
	struct rule kv = one_rule("kv x slots=p0:i64 count=grid.x block=p1 pool=p2,p3");
	struct rule_hit h;
	struct fake f;

	memset(&f, 0, sizeof f);
	fake_ptr(&f, 0x5000);
	fake_i32(&f, 16);
	fake_ptr(&f, 0x100000);
	fake_ptr(&f, 0x200000);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid, block, &h), 1);
	CU_ASSERT_EQUAL(h.rows, 33);
	CU_ASSERT_EQUAL(h.k, 4);
	CU_ASSERT_EQUAL(h.stride, 256);
	CU_ASSERT_EQUAL(h.experts, 30);
	CU_ASSERT_EQUAL(rule_eval(&kv, f.args, f.sizes, f.n, grid, block, &h), 1);
	CU_ASSERT_EQUAL(h.kind, RULE_KV);
	CU_ASSERT_EQUAL(h.dtype, RULE_I64);
	CU_ASSERT_EQUAL(h.ptr, 0x5000);
	CU_ASSERT_EQUAL(h.count, 33);
	CU_ASSERT_EQUAL(h.block, 16);
	CU_ASSERT_EQUAL(h.npool, 2);
	CU_ASSERT_EQUAL(h.pool[0], 0x100000);
	CU_ASSERT_EQUAL(h.pool[1], 0x200000);
	fake_free(&f);
}

/* llama.cpp k_set_rows: count is a product of three int64 params. */
static void test_eval_product(void)
{
	struct profile p = { 0 };
	struct rule big = one_rule("kv x slots=p0 count=p1*p1*p1 block=1");
	struct rule_hit h;
	struct fake f;
	char err[256];
	int at;

	CU_ASSERT_EQUAL_FATAL(profile_builtin("llamacpp", &p, err, sizeof err), 0);
	at = profile_match(&p, "_ZL10k_set_rowsIflfEvPKT_PKT0_PT1_lllllllllllllll");
	CU_ASSERT_FATAL(at >= 0);
	memset(&f, 0, sizeof f);
	fake_ptr(&f, 0x9000);     /* src0 */
	fake_ptr(&f, 0x9100);     /* src1: idx */
	fake_ptr(&f, 0x9200);     /* dst */
	fake_i64(&f, 4096);       /* ne_total */
	fake_i64(&f, 7);          /* ne10 */
	fake_i64(&f, 2);          /* ne11 */
	fake_i64(&f, 1);          /* ne12 */
	CU_ASSERT_EQUAL(rule_eval(&p.rules[at], f.args, f.sizes, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, 0x9100);
	CU_ASSERT_EQUAL(h.dtype, RULE_I64);
	CU_ASSERT_EQUAL(h.count, 14);
	CU_ASSERT_EQUAL(h.block, 1);
	CU_ASSERT_EQUAL(h.npool, 1);
	CU_ASSERT_EQUAL(h.pool[0], 0x9200);
	CU_ASSERT_EQUAL(rule_eval(&p.rules[at], f.args, NULL, f.n, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(h.count, 14);
	fake_free(&f);
	profile_free(&p);

	/* 2^21 cubed overflows int64: the rule cannot be right. */
	fake_ptr(&f, 0x9100);
	fake_i64(&f, INT64_C(1) << 21);
	CU_ASSERT_EQUAL(rule_eval(&big, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	fake_free(&f);
}

/* A quotient, left to right, exact: block = block_stride / page_stride. */
static void test_eval_quotient(void)
{
	struct rule r = one_rule("kv x slots=p0:i64 count=grid.x block=p1/p2 stride=p1*2/p3 pool=p0");
	static const struct { int64_t a, b, c; int ret; int64_t block, stride; } t[] = {
		{ 16384, 1024, 1, 1, 16, 32768 },
		{ 16384, 1024, 2, 1, 16, 16384 },
		{ 16384, 1000, 1, -1, 0, 0 },	/* a remainder: not what was meant */
		{ 16384, 0, 1, -1, 0, 0 },	/* by zero */
		{ 16384, -1024, 1, -1, 0, 0 },	/* by a negative */
		{ 16384, 1024, 3, -1, 0, 0 },	/* the stride's remainder */
	};
	char text[200];

	rule_format(&r, text, sizeof text);
	CU_ASSERT_STRING_EQUAL(text, "kv x slots=p0:i64 count=grid.x block=p1/p2 stride=p1*2/p3 "
			       "pool=p0");
	for (size_t i = 0; i < NELEM(t); i++) {
		struct rule_hit h;
		struct fake f;

		memset(&f, 0, sizeof f);
		fake_ptr(&f, 0x9100);
		fake_i64(&f, t[i].a);
		fake_i64(&f, t[i].b);
		fake_i64(&f, t[i].c);
		CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), t[i].ret);
		if (t[i].ret == 1)
			CU_ASSERT(h.block == t[i].block && h.stride == t[i].stride);
		fake_free(&f);
	}
}

static void test_eval_conditions(void)
{
	static const struct { const char *op; int lt, eq, gt; } t[] = {
		{ "==", 0, 1, 0 }, { "!=", 1, 0, 1 }, { "<", 1, 0, 0 },
		{ "<=", 1, 1, 0 }, { ">", 0, 0, 1 }, { ">=", 0, 1, 1 },
	};
	struct rule_hit h;
	struct fake f;
	size_t i;
	int v;

	for (i = 0; i < NELEM(t); i++) {
		char text[128];
		struct rule r;

		snprintf(text, sizeof text, "routing x ids=p0 rows=1 k=1 when=p1%s5", t[i].op);
		r = one_rule(text);
		for (v = 4; v <= 6; v++) {
			int want = v < 5 ? t[i].lt : v == 5 ? t[i].eq : t[i].gt;

			memset(&f, 0, sizeof f);
			fake_ptr(&f, 0x10);
			fake_i32(&f, v);
			CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), want);
			fake_free(&f);
		}
	}
}

static void test_eval_conditions_all_must_hold(void)
{
	struct rule r = one_rule("routing x ids=p0 rows=1 k=1 when=p1!=-1 when=p2*2>=grid.x when=3<p3");
	struct rule step = one_rule("step *decode* when=p0==0");
	static const unsigned grid[3] = { 10, 1, 1 };
	struct rule_hit h;
	struct fake f;

	memset(&f, 0, sizeof f);
	fake_ptr(&f, 0x10);
	fake_i32(&f, 0);
	fake_i32(&f, 5);
	fake_i32(&f, 4);
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid, block1, &h), 1);
	*(int32_t *)f.args[1] = -1;
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid, block1, &h), 0);
	*(int32_t *)f.args[1] = 0;
	*(int32_t *)f.args[2] = 4;
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid, block1, &h), 0);
	*(int32_t *)f.args[2] = 5;
	*(int32_t *)f.args[3] = 3;
	CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid, block1, &h), 0);

	/* A step marker: 1 when its condition holds. */
	*(uint64_t *)f.args[0] = 0;
	CU_ASSERT_EQUAL(rule_eval(&step, f.args, f.sizes, f.n, grid, block1, &h), 1);
	CU_ASSERT_EQUAL(h.kind, RULE_STEP);
	*(uint64_t *)f.args[0] = 1;
	CU_ASSERT_EQUAL(rule_eval(&step, f.args, f.sizes, f.n, grid, block1, &h), 0);
	fake_free(&f);
}

static void test_eval_out_of_range(void)
{
	struct rule ids5 = one_rule("routing x ids=p5 rows=1 k=1");
	struct rule cond9 = one_rule("routing x ids=p4 rows=p3 k=p6 when=p9>0");
	struct rule pool9 = one_rule("kv x slots=p4 count=1 block=1 pool=p9");
	struct rule ok = one_rule("routing x ids=p4 rows=p3 k=p6");
	struct rule_hit h;
	struct fake f;
	void *save;

	make_topk_gating(&f, 3, 2);
	CU_ASSERT_EQUAL(rule_eval(&ids5, f.args, f.sizes, 5, grid1, block1, &h), -1);
	CU_ASSERT_EQUAL(rule_eval(&ids5, f.args, f.sizes, 6, grid1, block1, &h), 1);
	CU_ASSERT_EQUAL(rule_eval(&cond9, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	CU_ASSERT_EQUAL(rule_eval(&pool9, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	CU_ASSERT_EQUAL(rule_eval(&ok, NULL, f.sizes, f.n, grid1, block1, &h), -1);
	/* A launch that passed no bytes for a param the rule reads. */
	save = f.args[3];
	f.args[3] = NULL;
	CU_ASSERT_EQUAL(rule_eval(&ok, f.args, f.sizes, f.n, grid1, block1, &h), -1);
	f.args[3] = save;
	fake_free(&f);
}

static void test_eval_impossible_values(void)
{
	static const struct { const char *rule; int want; } t[] = {
		{ "routing x ids=p0 rows=p1 k=1", -1 },         /* rows -3 */
		{ "routing x ids=p0 rows=1 k=0", -1 },
		{ "routing x ids=p0 rows=1 k=4 stride=3", -1 },
		{ "routing x ids=p0 rows=1 k=4 stride=4", 1 },
		{ "routing x ids=p0 rows=1 k=1 experts=0", -1 },
		{ "kv x slots=p0 count=p1 block=1", -1 },
		{ "kv x slots=p0 count=0 block=0", -1 },
		{ "kv x slots=p0 count=0 block=1", 1 },
		{ "routing x ids=p2 rows=1 k=1", 0 },           /* NULL ids */
		{ "kv x slots=p2 count=1 block=1", 0 },
	};
	struct rule_hit h;
	struct fake f;
	size_t i;

	memset(&f, 0, sizeof f);
	fake_ptr(&f, 0x10);
	fake_i32(&f, -3);
	fake_ptr(&f, 0);
	for (i = 0; i < NELEM(t); i++) {
		struct rule r = one_rule(t[i].rule);

		CU_ASSERT_EQUAL(rule_eval(&r, f.args, f.sizes, f.n, grid1, block1, &h), t[i].want);
	}
	fake_free(&f);
}

/* Each built-in KV rule of vLLM against its kernel's real parameter list. */
static void test_eval_vllm_flash(void)
{
	static const unsigned grid[3] = { 48, 1, 1 }, block[3] = { 128, 1, 1 };
	struct profile p = { 0 };
	struct rule_hit h;
	struct fake f;
	char err[256];
	int at, i;

	CU_ASSERT_EQUAL_FATAL(profile_builtin("vllm", &p, err, sizeof err), 0);
	at = profile_match(&p, "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S6_PKllllliiiPKfSA_");
	CU_ASSERT_FATAL(at >= 0);
	memset(&f, 0, sizeof f);
	fake_ptr(&f, 0xa000);     /* key */
	fake_ptr(&f, 0xb000);     /* value */
	fake_ptr(&f, 0xc000);     /* key_cache */
	fake_ptr(&f, 0xd000);     /* value_cache */
	fake_ptr(&f, 0xe000);     /* slot_mapping */
	for (i = 0; i < 5; i++)
		fake_i64(&f, 1000 + i);   /* block/page/head/key/value strides */
	fake_i32(&f, 8);          /* num_heads */
	fake_i32(&f, 128);        /* head_size */
	fake_i32(&f, 16);         /* block_size */
	fake_ptr(&f, 0);          /* k_scale */
	fake_ptr(&f, 0);          /* v_scale */
	CU_ASSERT_EQUAL(rule_eval(&p.rules[at], f.args, f.sizes, f.n, grid, block, &h), 1);
	CU_ASSERT_EQUAL(h.ptr, 0xe000);
	CU_ASSERT_EQUAL(h.dtype, RULE_I64);
	CU_ASSERT_EQUAL(h.count, 48);
	CU_ASSERT_EQUAL(h.block, 16);
	CU_ASSERT_EQUAL(h.npool, 2);
	CU_ASSERT_EQUAL(h.pool[0], 0xc000);
	CU_ASSERT_EQUAL(h.pool[1], 0xd000);
	CU_ASSERT_EQUAL(h.stride, 1000 * 2);	/* block_stride in 2-byte elements */
	fake_free(&f);
	profile_free(&p);
}

/* A cache write's name and the bytes of its cache type's element (0: no
 * rule gives that type a stride). */
struct stride_case {
	const char *name;
	int64_t bytes;
};

/*
 * Each of t[0..n) against the launch f of the built-in vllm profile: its
 * rule applies, reads the slots at want->ptr, want->block slots a block
 * and the pool at want->pool[0], and gives a stride of `elements` times
 * the case's element bytes.
 */
static void check_strides(const struct stride_case *t, size_t n, const struct fake *f,
			  unsigned rows, const struct rule_hit *want, int64_t elements)
{
	const unsigned grid[3] = { rows, 1, 1 }, block[3] = { 128, 1, 1 };
	struct profile p = { 0 };
	struct rule_hit h;
	char err[256];
	size_t i;
	int at;

	CU_ASSERT_EQUAL_FATAL(profile_builtin("vllm", &p, err, sizeof err), 0);
	for (i = 0; i < n; i++) {
		at = profile_match(&p, t[i].name);
		CU_ASSERT_FATAL(at >= 0);
		CU_ASSERT_EQUAL(rule_eval(&p.rules[at], f->args, f->sizes, f->n, grid, block, &h),
				1);
		CU_ASSERT_EQUAL(h.ptr, want->ptr);
		CU_ASSERT_EQUAL(h.block, want->block);
		CU_ASSERT_EQUAL(h.pool[0], want->pool[0]);
		CU_ASSERT_EQUAL(h.stride, elements * t[i].bytes);
	}
	profile_free(&p);
}

/* The flash rule's block stride in bytes follows the cache type, the
 * template's second argument (names from tests/engines/vllm-0.33.0.tsv). */
static void test_eval_vllm_flash_stride(void)
{
	static const struct stride_case t[] = {
		{ "_ZN4vllm30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_LNS_18Fp8KVCacheDataTypeE0EEEvPKT_S5_PT0_S7_PKlllllliiiPKfSB_i", 2 },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelI13__nv_bfloat16hLNS_18Fp8KVCacheDataTypeE1EEEvPKT_S5_PT0_S7_PKlllllliiiPKfSB_i", 1 },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelIfhLNS_18Fp8KVCacheDataTypeE2EEEvPKT_S4_PT0_S6_PKlllllliiiPKfSA_i", 1 },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelIthLNS_18Fp8KVCacheDataTypeE1EEEvPKT_S4_PT0_S6_PKlllllliiiPKfSA_i", 1 },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelIffLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S6_PKlllllliiiPKfSA_i", 4 },
		{ "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S6_PKlllllliiiPKfSA_i", 2 },
		/* no such build: a cache type no rule names has no stride */
		{ "_ZN4vllm30reshape_and_cache_flash_kernelI6__halfS1_LNS_18Fp8KVCacheDataTypeE0EEEvPKT_S5_PT0_S7_PKlllllliiiPKfSB_i", 0 },
	};
	const struct rule_hit want = { .ptr = 0xe000, .block = 16, .pool = { 0xc000 } };
	struct fake f;
	int j;

	memset(&f, 0, sizeof f);
	for (j = 0; j < 5; j++)
		fake_ptr(&f, 0xa000 + 0x1000 * (uint64_t)j);	/* key .. slot_mapping */
	fake_i64(&f, 8 * 16 * 64);	/* block_stride, in elements */
	for (j = 0; j < 4; j++)
		fake_i64(&f, 64);
	fake_i32(&f, 8);
	fake_i32(&f, 64);
	fake_i32(&f, 16);		/* block_size */
	fake_ptr(&f, 0);
	fake_ptr(&f, 0);
	fake_i32(&f, 0);
	check_strides(t, sizeof t / sizeof t[0], &f, 4, &want, 8 * 16 * 64);
	fake_free(&f);
}

/* vLLM's MLA cache write: block_stride [4], an int, in elements of the
 * cache type, as for the flash kernel (names from the 0.33.0 corpus). */
static void test_eval_vllm_mla_stride(void)
{
	static const struct stride_case t[] = {
		{ "_ZN4vllm27concat_and_cache_mla_kernelI13__nv_bfloat16S1_LNS_18Fp8KVCacheDataTypeE0EEEvPKT_S5_PT0_PKliiiiiiiPKf", 2 },
		{ "_ZN4vllm27concat_and_cache_mla_kernelI13__nv_bfloat16S1_LNS_18Fp8KVCacheDataTypeE0ELb1EEEvPKT_S5_PT0_PKliiiiiiiPKf", 2 },
		{ "_ZN4vllm27concat_and_cache_mla_kernelI13__nv_bfloat16hLNS_18Fp8KVCacheDataTypeE1ELb0EEEvPKT_S5_PT0_PKliiiiiiiPKf", 1 },
		{ "_ZN4vllm27concat_and_cache_mla_kernelIffLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_PKliiiiiiiPKf", 4 },
		{ "_ZN4vllm27concat_and_cache_mla_kernelIttLNS_18Fp8KVCacheDataTypeE0ELb0EEEvPKT_S4_PT0_PKliiiiiiiPKf", 2 },
	};
	const struct rule_hit want = { .ptr = 0xd000, .block = 64, .pool = { 0xc000 } };
	struct fake f;
	int j;

	memset(&f, 0, sizeof f);
	for (j = 0; j < 4; j++)
		fake_ptr(&f, 0xa000 + 0x1000 * (uint64_t)j);	/* kv_c, k_pe, kv_cache, slots */
	fake_i32(&f, 64 * 576);		/* block_stride */
	fake_i32(&f, 576);		/* entry_stride */
	fake_i32(&f, 512);		/* kv_c_stride */
	fake_i32(&f, 64);		/* k_pe_stride */
	fake_i32(&f, 512);		/* kv_lora_rank */
	fake_i32(&f, 64);		/* pe_dim */
	fake_i32(&f, 64);		/* block_size */
	fake_ptr(&f, 0);		/* scale */
	check_strides(t, sizeof t / sizeof t[0], &f, 4, &want, 64 * 576);
	fake_free(&f);
}

static CU_TestInfo glob_tests[] = {
	{ "table: empty, *, **, ?, anchors, backtracking", test_glob_table },
	{ "200 stars and *a*a...*b on 4 KiB names stay fast", test_glob_no_blowup },
	CU_TEST_INFO_NULL
};

static CU_TestInfo parse_tests[] = {
	{ "every feature, canonical form round trip", test_parse_features },
	{ "parsed fields", test_parse_fields },
	{ "comments, labels, use, appending, empty text", test_parse_structure },
	{ "every error with its line and column", test_parse_errors },
	{ "rollback after use, short err buffer", test_parse_rollback_and_short_err },
	{ "first match wins", test_first_match_wins },
	CU_TEST_INFO_NULL
};

static CU_TestInfo builtin_tests[] = {
	{ "each built-in holds exactly the ENGINES.md rules", test_builtin_exact },
	{ "auto is the union, in order", test_builtin_auto },
	{ "mangled names land on the intended rule", test_builtin_names },
	{ "files: load, errors with path and line", test_load_file },
	{ "PROFILES.md examples parse", test_doc_examples },
	{ "PROFILES.md lists each built-in verbatim", test_doc_lists_builtins },
	CU_TEST_INFO_NULL
};

/* rule_fits against parameter tables as cuobjdump lists them: the first
 * misfit, in words, or 0. */
static void fits(const char *text, const uint32_t *sizes, unsigned n, const char *want)
{
	struct rule r = one_rule(text);
	char why[160];
	int ret = rule_fits(&r, sizes, n, why, sizeof why);

	CU_ASSERT_EQUAL(ret, want ? -1 : 0);
	CU_ASSERT_STRING_EQUAL(why, want ? want : "");
	if (strcmp(why, want ? want : ""))
		fprintf(stderr, "\n%s: '%s', want '%s'\n", text, why, want ? want : "");
}

static void test_fits(void)
{
	/* vLLM topkGating: (input, finished, output, num_rows, indices,
	 * source_rows, k, start_expert, end_expert) */
	static const uint32_t topk[] = { 8, 8, 8, 4, 8, 8, 4, 4, 4 };
	/* torch gatherTopK: TensorInfo structs (p0, p6, p8) of 416 bytes */
	static const uint32_t gather[] = { 416, 4, 4, 1, 4, 416, 416, 4, 416, 4 };
	/* a kv writer: slots p4 int64*, block p9 int */
	static const uint32_t kv[] = { 8, 8, 8, 8, 8, 4, 4, 4, 4, 4 };

	fits("routing x ids=p4:i32 rows=p3 k=p6", topk, 9, NULL);
	fits("routing x ids=p4:i32 rows=p3 k=p6 when=p8>=1", topk, 9, NULL);
	fits("routing x ids=p4:i32 rows=p3 k=p9", topk, 9,
	     "k: p9: the kernel has 9 parameters");
	fits("routing x ids=p3:i32 rows=p4 k=p6", topk, 9,
	     "ids: p3: a pointer is 8 bytes, the parameter 4");
	fits("routing x ids=p4:i32 rows=p3:i64 k=p6", topk, 9,
	     "rows: p3 read as 8 bytes, the parameter is 4");
	fits("routing x ids=p4 rows=p3 k=p6 stride=p1*2", topk, 9, NULL);
	fits("routing x ids=p4:i32 weights=p2:f32 rows=p3 k=p6", topk, 9, NULL);
	fits("routing x ids=p4:i32 weights=p3:f32 rows=p3 k=p6", topk, 9,
	     "weights: p3: a pointer is 8 bytes, the parameter 4");
	fits("routing x ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2", gather, 10, NULL);
	fits("routing x ids=p8@0:i64 weights=p6@410:f16 rows=p4 k=p2", gather, 10,
	     "weights: p6@410: 8 bytes at byte 410 pass the end of the 416-byte parameter");
	fits("routing x ids=p12 rows=p3 k=p6", topk, 9, "ids: p12: the kernel has 9 parameters");
	fits("routing x ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1", gather,
	     10, NULL);
	fits("routing x ids=p8@412:i64 rows=p4 k=p2", gather, 10,
	     "ids: p8@412: 8 bytes at byte 412 pass the end of the 416-byte parameter");
	fits("routing x ids=p8 rows=p4 k=p2", gather, 10,
	     "ids: p8: a pointer is 8 bytes, the parameter 416");
	fits("routing x ids=p8@0 rows=p4 k=p2 when=p0@412:i64==1", gather, 10,
	     "when: p0@412: 8 bytes at byte 412 pass the end of the 416-byte parameter");
	fits("routing x ids=p8@0 rows=p0 k=p2", gather, 10, "rows: p0 is 416 bytes, not an integer");
	fits("kv x slots=p4:i64 count=grid.x block=p9 pool=p2,p3", kv, 10, NULL);
	fits("kv x slots=p4:i64 count=grid.x block=p9 pool=p2,p5", kv, 10,
	     "pool: p5: a pointer is 8 bytes, the parameter 4");
	fits("step x when=p0==0", kv, 10, NULL);
	fits("step x when=p20==0", kv, 10, "when: p20: the kernel has 10 parameters");
}

static CU_TestInfo eval_tests[] = {
	{ "pointers and ints, sizes known and unknown", test_eval_pointer_and_ints },
	{ "gating weights: named, absent, NULL, misfit", test_eval_weights },
	{ "param sizes respected", test_eval_param_sizes },
	{ "struct offsets: torch gatherTopK", test_eval_struct_offsets },
	{ "struct offsets past the param size", test_eval_struct_bounds },
	{ "grid and block values, kv pools", test_eval_grid_block },
	{ "products: llama.cpp k_set_rows, overflow", test_eval_product },
	{ "quotients: exact, else the rule does not fit", test_eval_quotient },
	{ "each comparison operator", test_eval_conditions },
	{ "all conditions must hold; step rules", test_eval_conditions_all_must_hold },
	{ "out-of-range params", test_eval_out_of_range },
	{ "impossible values and NULL pointers", test_eval_impossible_values },
	{ "vLLM reshape_and_cache_flash_kernel", test_eval_vllm_flash },
	{ "vLLM reshape_and_cache_flash_kernel: stride by cache type", test_eval_vllm_flash_stride },
	{ "vLLM concat_and_cache_mla_kernel: stride by cache type", test_eval_vllm_mla_stride },
	{ "rule_fits: positions against parameter tables", test_fits },
	CU_TEST_INFO_NULL
};

static CU_SuiteInfo suites[] = {
	{ .pName = "glob", .pTests = glob_tests },
	{ .pName = "parse", .pTests = parse_tests },
	{ .pName = "builtin", .pTests = builtin_tests },
	{ .pName = "eval", .pTests = eval_tests },
	CU_SUITE_INFO_NULL
};

int main(void)
{
	return cu_run(suites);
}
