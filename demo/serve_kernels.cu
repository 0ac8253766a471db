/*
 * serve_kernels.cu - the demo serving program's kernels for a real GPU.
 *
 * Each kernel maps the items of serve_algo.h onto threads; the parameters
 * and launch shapes are serve_kernels.h's.  The two vLLM stand-ins are
 * templates in vLLM's namespaces so that their manglings are the ones the
 * built-in vllm profile matches; the others are extern "C".
 */
#include "serve_algo.h"
#include "serve_kernels.h"

extern "C" __global__ void serve_fill(uint32_t *dst, uint64_t n, uint32_t value)
{
	uint64_t i;

	for (i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		dst[i] = value;
}

extern "C" __global__ void serve_embed(const int32_t *input_ids, uint32_t *hidden, int rows,
				       int hs, uint32_t seed)
{
	for (int h = threadIdx.x; h < hs; h += blockDim.x)
		sv_embed(input_ids, hidden, blockIdx.x, h, hs, seed);
}

extern "C" __global__ void serve_kv_proj(const uint32_t *hidden, float *key, float *value,
					 int rows, int hs, int layer, uint32_t seed)
{
	for (int h = threadIdx.x; h < hs; h += blockDim.x)
		sv_kv_proj(hidden, key, value, blockIdx.x, h, hs, layer, seed);
}

namespace vllm {

enum class Fp8KVCacheDataType { kAuto = 0, kFp8E4M3 = 1, kFp8E5M2 = 2 };

template <typename scalar_t, typename cache_t, Fp8KVCacheDataType kv_dt>
__global__ void reshape_and_cache_flash_kernel(
	const scalar_t *__restrict__ key, const scalar_t *__restrict__ value,
	cache_t *__restrict__ key_cache, cache_t *__restrict__ value_cache,
	const int64_t *__restrict__ slot_mapping, const int64_t block_stride,
	const int64_t page_stride, const int64_t head_stride, const int64_t key_stride,
	const int64_t value_stride, const int num_heads, const int head_size,
	const int block_size, const float *k_scale, const float *v_scale)
{
	for (int i = threadIdx.x; i < num_heads * head_size; i += blockDim.x)
		sv_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping,
				     block_stride, page_stride, head_stride, key_stride,
				     value_stride, head_size, block_size, blockIdx.x, i);
}

} /* namespace vllm */

extern "C" __global__ void serve_attention(uint32_t *hidden, const float *key_cache,
					   const float *value_cache, const int32_t *block_tables,
					   const int32_t *seq_lens, int rows, int hs, int max_blocks,
					   int block_size, int64_t block_stride)
{
	for (int h = threadIdx.x; h < hs; h += blockDim.x)
		sv_attention(hidden, key_cache, value_cache, block_tables, seq_lens, blockIdx.x,
			     h, hs, max_blocks, block_size, block_stride);
}

extern "C" __global__ void serve_router(const uint32_t *hidden, float *logits, int rows, int hs,
					int experts, int layer, uint32_t seed)
{
	for (int e = threadIdx.x; e < experts; e += blockDim.x)
		sv_router(hidden, logits, blockIdx.x, e, hs, experts, layer, seed);
}

namespace vllm {
namespace moe {

template <int ROWS_PER_CTA, typename IndType>
__global__ void __launch_bounds__(ROWS_PER_CTA)
topkGating(const float *input, const bool *finished, float *output, const int num_rows,
	   IndType *indices, int *source_rows, const int k, const int start_expert,
	   const int end_expert, const int num_experts)
{
	int row = blockIdx.x * ROWS_PER_CTA + threadIdx.x;

	if (row < num_rows)
		sv_topk_gating(input, output, num_rows, indices, source_rows, k, start_expert,
			       end_expert, num_experts, row);
}

} /* namespace moe */
} /* namespace vllm */

extern "C" __global__ void serve_moe_mlp(uint32_t *hidden, const int32_t *topk_ids, int rows,
					 int hs, int k, int layer, uint32_t seed)
{
	for (int h = threadIdx.x; h < hs; h += blockDim.x)
		sv_moe_mlp(hidden, topk_ids, blockIdx.x, h, hs, k, layer, seed);
}

/* One thread per row: a 1-thread argmax is slow but exactly the host's. */
extern "C" __global__ void serve_sample(const uint32_t *hidden, int32_t *tokens, int rows, int hs,
					int vocab, uint32_t seed)
{
	if (threadIdx.x == 0)
		sv_sample(hidden, tokens, blockIdx.x, hs, vocab, seed);
}

extern "C" const void *serve_kernel_fn(enum serve_kernel k)
{
	static const void *const fn[SK_COUNT] = {
		(const void *)serve_fill,
		(const void *)serve_embed,
		(const void *)serve_kv_proj,
		(const void *)vllm::reshape_and_cache_flash_kernel<
			float, float, vllm::Fp8KVCacheDataType::kAuto>,
		(const void *)serve_attention,
		(const void *)serve_router,
		(const void *)vllm::moe::topkGating<SERVE_TOPK_ROWS_PER_BLOCK, int>,
		(const void *)serve_moe_mlp,
		(const void *)serve_sample,
	};

	return fn[k];
}
