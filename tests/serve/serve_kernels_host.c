/*
 * serve_kernels_host.c - the demo serving program's kernels
 * (demo/serve_kernels.h) for the CPU fixture: the tests' serve.
 *
 * Each is a host function registered under the device name the CUDA build
 * gives the same kernel (serve_kernels.h); it runs every item of
 * serve_algo.h that the launch's grid covers, in a loop, reading its
 * parameters from the launch's args with the sizes registered for them.
 */
#include <stdint.h>
#include <string.h>

#include "fixture.h"
#include "serve_algo.h"
#include "serve_kernels.h"

/* Parameter i of launch l, of type t. */
#define ARG(l, i, t) (*(t const *)(l)->args[i])

static void serve_fill(const struct fixture_launch *l)
{
	uint32_t *dst = ARG(l, 0, uint32_t *);
	uint64_t n = ARG(l, 1, uint64_t), i;

	for (i = 0; i < n; i++)
		dst[i] = ARG(l, 2, uint32_t);
}
FIXTURE_KERNEL(serve_fill, "serve_fill", 3, 8, 8, 4)

static void serve_embed(const struct fixture_launch *l)
{
	unsigned row;
	int h, hs = ARG(l, 3, int);

	for (row = 0; row < l->grid.x; row++)
		for (h = 0; h < hs; h++)
			sv_embed(ARG(l, 0, int32_t *), ARG(l, 1, uint32_t *), (int)row, h, hs,
				 ARG(l, 4, uint32_t));
}
FIXTURE_KERNEL(serve_embed, "serve_embed", 5, 8, 8, 4, 4, 4)

static void serve_kv_proj(const struct fixture_launch *l)
{
	unsigned row;
	int h, hs = ARG(l, 4, int);

	for (row = 0; row < l->grid.x; row++)
		for (h = 0; h < hs; h++)
			sv_kv_proj(ARG(l, 0, uint32_t *), ARG(l, 1, float *), ARG(l, 2, float *),
				   (int)row, h, hs, ARG(l, 5, int), ARG(l, 6, uint32_t));
}
FIXTURE_KERNEL(serve_kv_proj, "serve_kv_proj", 7, 8, 8, 8, 4, 4, 4, 4)

static void reshape_and_cache_flash(const struct fixture_launch *l)
{
	unsigned token;
	int i, n = ARG(l, 10, int) * ARG(l, 11, int);

	for (token = 0; token < l->grid.x; token++)
		for (i = 0; i < n; i++)
			sv_reshape_and_cache(ARG(l, 0, float *), ARG(l, 1, float *),
					     ARG(l, 2, float *), ARG(l, 3, float *),
					     ARG(l, 4, int64_t *), ARG(l, 5, int64_t),
					     ARG(l, 6, int64_t), ARG(l, 7, int64_t),
					     ARG(l, 8, int64_t), ARG(l, 9, int64_t),
					     ARG(l, 11, int), ARG(l, 12, int), token, i);
}
FIXTURE_KERNEL(reshape_and_cache_flash, SERVE_KV_WRITE_NAME, 15,
	       8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 8, 8)

static void serve_attention(const struct fixture_launch *l)
{
	unsigned row;
	int h, hs = ARG(l, 6, int);

	for (row = 0; row < l->grid.x; row++)
		for (h = 0; h < hs; h++)
			sv_attention(ARG(l, 0, uint32_t *), ARG(l, 1, float *), ARG(l, 2, float *),
				     ARG(l, 3, int32_t *), ARG(l, 4, int32_t *), (int)row, h, hs,
				     ARG(l, 7, int), ARG(l, 8, int), ARG(l, 9, int64_t));
}
FIXTURE_KERNEL(serve_attention, "serve_attention", 10, 8, 8, 8, 8, 8, 4, 4, 4, 4, 8)

static void serve_router(const struct fixture_launch *l)
{
	unsigned row;
	int e, experts = ARG(l, 4, int);

	for (row = 0; row < l->grid.x; row++)
		for (e = 0; e < experts; e++)
			sv_router(ARG(l, 0, uint32_t *), ARG(l, 1, float *), (int)row, e,
				  ARG(l, 3, int), experts, ARG(l, 5, int), ARG(l, 6, uint32_t));
}
FIXTURE_KERNEL(serve_router, "serve_router", 7, 8, 8, 4, 4, 4, 4, 4)

static void topk_gating(const struct fixture_launch *l)
{
	int rows = ARG(l, 3, int), row;
	int end = (int)(l->grid.x * SERVE_TOPK_ROWS_PER_BLOCK);

	for (row = 0; row < rows && row < end; row++)
		sv_topk_gating(ARG(l, 0, float *), ARG(l, 2, float *), rows,
			       ARG(l, 4, int32_t *), ARG(l, 5, int32_t *), ARG(l, 6, int),
			       ARG(l, 7, int), ARG(l, 8, int), ARG(l, 9, int), row);
}
FIXTURE_KERNEL(topk_gating, SERVE_TOPK_NAME, 10, 8, 8, 8, 4, 8, 8, 4, 4, 4, 4)

static void serve_moe_mlp(const struct fixture_launch *l)
{
	unsigned row;
	int h, hs = ARG(l, 3, int);

	for (row = 0; row < l->grid.x; row++)
		for (h = 0; h < hs; h++)
			sv_moe_mlp(ARG(l, 0, uint32_t *), ARG(l, 1, int32_t *), (int)row, h, hs,
				   ARG(l, 4, int), ARG(l, 5, int), ARG(l, 6, uint32_t));
}
FIXTURE_KERNEL(serve_moe_mlp, "serve_moe_mlp", 7, 8, 8, 4, 4, 4, 4, 4)

static void serve_sample(const struct fixture_launch *l)
{
	unsigned row;

	for (row = 0; row < l->grid.x; row++)
		sv_sample(ARG(l, 0, uint32_t *), ARG(l, 1, int32_t *), (int)row, ARG(l, 3, int),
			  ARG(l, 4, int), ARG(l, 5, uint32_t));
}
FIXTURE_KERNEL(serve_sample, "serve_sample", 6, 8, 8, 4, 4, 4, 4)

/* The CUDA API passes kernels as const void *; ISO C has no cast from a
 * function pointer to an object pointer, hence the copy. */
static const void *handle(fixture_kernel_fn fn)
{
	const void *p;

	_Static_assert(sizeof p == sizeof fn, "function and object pointers differ in size");
	memcpy(&p, &fn, sizeof p);
	return p;
}

const void *serve_kernel_fn(enum serve_kernel k)
{
	static const fixture_kernel_fn fn[SK_COUNT] = {
		[SK_FILL] = serve_fill,
		[SK_EMBED] = serve_embed,
		[SK_KV_PROJ] = serve_kv_proj,
		[SK_KV_WRITE] = reshape_and_cache_flash,
		[SK_ATTN] = serve_attention,
		[SK_ROUTER] = serve_router,
		[SK_TOPK] = topk_gating,
		[SK_MLP] = serve_moe_mlp,
		[SK_SAMPLE] = serve_sample,
	};

	return handle(fn[k]);
}
