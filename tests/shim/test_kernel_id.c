/*
 * test_kernel_id.c - kernel_id.c: unknown/none/match decisions, the first
 * decision standing against a second insert, copies of name and sizes,
 * the half-full and match-pool limits, probing in a full table, a module's
 * matches switched off at its unload, and 4 threads
 * inserting and looking up the same handles at once.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "kernel_id.h"
#include "testutil.h"

static const void *handle(uintptr_t n)
{
	return (const void *)(n * 64);
}

static struct kid_desc desc(int rule, const char *name, unsigned nparams)
{
	struct kid_desc d;
	unsigned i;

	memset(&d, 0, sizeof d);
	d.rule = rule;
	d.name = name;
	d.params_known = 1;
	d.nparams = nparams;
	for (i = 0; i < nparams && i < KID_MAX_PARAMS; i++)
		d.sizes[i] = 4 + 4 * (i % 2);
	return d;
}

static void test_decisions(void)
{
	struct kid_cache *k = kid_create(8, 4);
	struct kid_match *m = NULL, *m2 = NULL;
	struct kid_desc d = desc(3, "_ZN4vllm3moe10topkGatingILi8EEEvv", 9);

	CU_ASSERT_FATAL(k != NULL);
	CU_ASSERT(kid_lookup(k, handle(1), &m) == KID_UNKNOWN);
	CU_ASSERT(kid_lookup(k, NULL, &m) == KID_UNKNOWN);
	CU_ASSERT(kid_insert(k, NULL, &d, &m) == KID_FULL);

	CU_ASSERT(kid_insert(k, handle(1), &d, &m) == KID_MATCH);
	CU_ASSERT_FATAL(m != NULL);
	CU_ASSERT(m->rule == 3 && m->nparams == 9 && m->params_known);
	CU_ASSERT(m->sizes[3] == 8 && m->sizes[4] == 4);
	CU_ASSERT_STRING_EQUAL(m->name, d.name);
	CU_ASSERT(kid_lookup(k, handle(1), &m2) == KID_MATCH && m2 == m);

	/* A second decision for a known handle does not replace the first. */
	d = desc(-1, "other", 0);
	CU_ASSERT(kid_insert(k, handle(1), &d, &m2) == KID_MATCH && m2 == m);

	CU_ASSERT(kid_insert(k, handle(2), &d, &m2) == KID_NONE);
	CU_ASSERT(kid_lookup(k, handle(2), &m2) == KID_NONE);
	d = desc(-1, NULL, 0);
	CU_ASSERT(kid_insert(k, handle(3), &d, &m2) == KID_NONE);
	CU_ASSERT(kid_count(k) == 3 && kid_named(k) == 2 && kid_matched(k) == 1);
	kid_destroy(k);
}

/* A module unloaded: its kernels' matches switched off, others kept. */
static void test_forget_module(void)
{
	struct kid_cache *k = kid_create(8, 4);
	struct kid_match *a = NULL, *b = NULL, *c = NULL;
	struct kid_desc d = desc(1, "_router_triton_kernel", 17);
	int mod_a, mod_b;

	CU_ASSERT_FATAL(k != NULL);
	d.module = &mod_a;
	CU_ASSERT(kid_insert(k, handle(1), &d, &a) == KID_MATCH);
	CU_ASSERT(kid_insert(k, handle(2), &d, &b) == KID_MATCH);
	d.module = &mod_b;
	CU_ASSERT(kid_insert(k, handle(3), &d, &c) == KID_MATCH);
	CU_ASSERT_FATAL(a && b && c);
	CU_ASSERT(a->module == &mod_a && c->module == &mod_b);
	kid_forget_module(k, NULL);
	CU_ASSERT(!atomic_load(&a->off) && !atomic_load(&c->off));
	kid_forget_module(k, &mod_a);
	CU_ASSERT(atomic_load(&a->off) && atomic_load(&b->off) && !atomic_load(&c->off));
	/* The handle is still known: a kernel at a reused address is not
	 * claimed again, and not evaluated. */
	CU_ASSERT(kid_lookup(k, handle(1), &a) == KID_MATCH && atomic_load(&a->off));
	kid_destroy(k);
}

static void test_long_name(void)
{
	struct kid_cache *k = kid_create(6, 1);
	char name[400];
	struct kid_match *m = NULL;
	struct kid_desc d;

	CU_ASSERT_FATAL(k != NULL);
	memset(name, 'x', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	d = desc(0, name, KID_MAX_PARAMS + 5);
	CU_ASSERT(kid_insert(k, handle(7), &d, &m) == KID_MATCH);
	CU_ASSERT(strlen(m->name) == KID_NAME_MAX - 1);
	CU_ASSERT(m->nparams == KID_MAX_PARAMS);
	kid_destroy(k);
}

static void test_limits(void)
{
	struct kid_cache *k = kid_create(6, 2);   /* 64 slots: 32 handles */
	struct kid_match *m;
	struct kid_desc none = desc(-1, "n", 0), rule = desc(1, "r", 1);
	uintptr_t i;

	CU_ASSERT_FATAL(k != NULL);
	CU_ASSERT(kid_create(5, 1) == NULL && kid_create(25, 1) == NULL && kid_create(8, 0) == NULL);
	CU_ASSERT(kid_insert(k, handle(100), &rule, &m) == KID_MATCH);
	CU_ASSERT(kid_insert(k, handle(101), &rule, &m) == KID_MATCH);
	CU_ASSERT(kid_insert(k, handle(102), &rule, &m) == KID_FULL);   /* pool */
	CU_ASSERT(kid_lookup(k, handle(102), &m) == KID_UNKNOWN);
	for (i = 0; i < 30; i++)
		CU_ASSERT(kid_insert(k, handle(200 + i), &none, &m) == KID_NONE);
	CU_ASSERT(kid_count(k) == 32);
	CU_ASSERT(kid_insert(k, handle(300), &none, &m) == KID_FULL);   /* half full */
	CU_ASSERT(kid_lookup(k, handle(300), &m) == KID_UNKNOWN);
	for (i = 0; i < 30; i++)
		CU_ASSERT(kid_lookup(k, handle(200 + i), &m) == KID_NONE);
	CU_ASSERT(kid_insert(k, handle(229), &rule, &m) == KID_NONE);   /* known */
	kid_destroy(k);
}

/* A table filled to its limit: 32 handles in 64 slots share home slots,
 * so lookups must probe past other keys to hit or to miss. */
static void test_probing(void)
{
	struct kid_cache *k = kid_create(6, 32);
	struct kid_match *m;
	struct kid_desc d;
	uintptr_t i;

	CU_ASSERT_FATAL(k != NULL);
	for (i = 1; i <= 32; i++) {
		d = desc((int)i, "c", 0);
		CU_ASSERT(kid_insert(k, (const void *)(i * i * 4096 + i * 16), &d, &m) == KID_MATCH);
	}
	for (i = 1; i <= 32; i++)
		CU_ASSERT(kid_lookup(k, (const void *)(i * i * 4096 + i * 16), &m) == KID_MATCH &&
			  m->rule == (int)i);
	for (i = 33; i <= 200; i++)
		CU_ASSERT(kid_lookup(k, (const void *)(i * i * 4096 + i * 16), &m) == KID_UNKNOWN);
	kid_destroy(k);
}

#define THREADS 4
#define HANDLES 2000

static struct kid_cache *shared;
static atomic_int wrong;

/* Every thread inserts every handle (odd ones matched to rule n % 7) and
 * checks after each insert that all handles it has inserted read back
 * the one decision that stands. */
static void *worker(void *arg)
{
	unsigned start = (unsigned)(uintptr_t)arg, j;
	struct kid_match *m;

	for (j = 0; j < HANDLES; j++) {
		unsigned n = (start + j) % HANDLES + 1;
		struct kid_desc d = desc(n % 2 ? (int)(n % 7) : -1, "w", 2);
		int r = kid_insert(shared, handle(n), &d, &m);

		if (n % 2 ? r != KID_MATCH || m->rule != (int)(n % 7) : r != KID_NONE)
			atomic_fetch_add(&wrong, 1);
		r = kid_lookup(shared, handle(n), &m);
		if (n % 2 ? r != KID_MATCH || m->rule != (int)(n % 7) : r != KID_NONE)
			atomic_fetch_add(&wrong, 1);
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[THREADS];
	uintptr_t i;

	shared = kid_create(13, HANDLES);
	CU_ASSERT_FATAL(shared != NULL);
	for (i = 0; i < THREADS; i++)
		CU_ASSERT_FATAL(pthread_create(&t[i], NULL, worker,
					       (void *)(i * HANDLES / THREADS)) == 0);
	for (i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CU_ASSERT(atomic_load(&wrong) == 0);
	CU_ASSERT(kid_count(shared) == HANDLES);
	CU_ASSERT(kid_matched(shared) == HANDLES / 2);
	kid_destroy(shared);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "decisions", test_decisions },
		{ "a module unloaded", test_forget_module },
		{ "long name", test_long_name },
		{ "limits", test_limits },
		{ "probing", test_probing },
		{ "threads", test_threads },
		CU_TEST_INFO_NULL,
	};
	CU_SuiteInfo suites[] = {
		{ "kernel_id", NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};

	return cu_run(suites);
}
