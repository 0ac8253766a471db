/*
 * kernel_id.c - the kernel decision cache (kernel_id.h has the table's
 * layout, its publication rule and the lookup).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_id.h"

struct kid_cache *kid_create(unsigned slots_log2, unsigned max_match)
{
	struct kid_cache *k;

	if (slots_log2 < 6 || slots_log2 > 24 || max_match == 0)
		return NULL;
	if (!(k = calloc(1, sizeof *k)))
		return NULL;
	k->slots = calloc((size_t)1 << slots_log2, sizeof *k->slots);
	k->matches = calloc(max_match, sizeof *k->matches);
	if (!k->slots || !k->matches || pthread_mutex_init(&k->lock, NULL) != 0) {
		free(k->slots);
		free(k->matches);
		free(k);
		return NULL;
	}
	k->mask = ((uintptr_t)1 << slots_log2) - 1;
	k->shift = 64 - slots_log2;
	k->max_count = 1u << (slots_log2 - 1);
	k->max_match = max_match;
	return k;
}

void kid_destroy(struct kid_cache *k)
{
	if (!k)
		return;
	pthread_mutex_destroy(&k->lock);
	free(k->slots);
	free(k->matches);
	free(k);
}

static void copy_name(char *dst, const char *src)
{
	size_t n = src ? strlen(src) : 0;

	if (n >= KID_NAME_MAX)
		n = KID_NAME_MAX - 1;
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

int kid_insert(struct kid_cache *k, const void *handle, const struct kid_desc *d,
	       struct kid_match **m)
{
	uintptr_t key = (uintptr_t)handle, i, got;
	unsigned value = 0, n;
	int rc;

	if (key == 0)
		return KID_FULL;
	pthread_mutex_lock(&k->lock);
	for (i = kid_home(k, key);; i = (i + 1) & k->mask) {
		got = atomic_load_explicit(&k->slots[i].key, memory_order_relaxed);
		if (got == key) {
			rc = kid_decode(k, atomic_load_explicit(&k->slots[i].value,
								memory_order_relaxed), m);
			goto out;
		}
		if (got == 0)
			break;
	}
	rc = KID_FULL;
	if (atomic_load_explicit(&k->count, memory_order_relaxed) >= k->max_count)
		goto out;
	if (d->rule >= 0) {
		struct kid_match *x;

		n = atomic_load_explicit(&k->nmatch, memory_order_relaxed);
		if (n >= k->max_match)
			goto out;
		x = &k->matches[n];
		x->rule = d->rule;
		x->module = d->module;
		x->params_known = d->params_known;
		x->nparams = d->nparams < KID_MAX_PARAMS ? d->nparams : KID_MAX_PARAMS;
		memcpy(x->sizes, d->sizes, x->nparams * sizeof x->sizes[0]);
		copy_name(x->name, d->name);
		atomic_store_explicit(&k->nmatch, n + 1, memory_order_relaxed);
		value = n + 1;
	}
	atomic_store_explicit(&k->slots[i].value, value, memory_order_relaxed);
	atomic_store_explicit(&k->slots[i].key, key, memory_order_release);
	atomic_fetch_add_explicit(&k->count, 1, memory_order_relaxed);
	if (d->name)
		atomic_fetch_add_explicit(&k->named, 1, memory_order_relaxed);
	rc = kid_decode(k, value, m);
out:
	pthread_mutex_unlock(&k->lock);
	return rc;
}

void kid_forget_module(struct kid_cache *k, const void *module)
{
	unsigned n;

	pthread_mutex_lock(&k->lock);	/* no insert fills a match meanwhile */
	n = atomic_load_explicit(&k->nmatch, memory_order_relaxed);
	for (unsigned i = 0; module && i < n; i++)
		if (k->matches[i].module == module)
			atomic_store_explicit(&k->matches[i].off, 1, memory_order_relaxed);
	pthread_mutex_unlock(&k->lock);
}

unsigned kid_count(const struct kid_cache *k)
{
	return atomic_load_explicit(&k->count, memory_order_relaxed);
}

unsigned kid_named(const struct kid_cache *k)
{
	return atomic_load_explicit(&k->named, memory_order_relaxed);
}

unsigned kid_matched(const struct kid_cache *k)
{
	return atomic_load_explicit(&k->nmatch, memory_order_relaxed);
}
