/*
 * serve_algo.h - the demo serving program's arithmetic, one text for two
 * compilers.
 *
 * Each function computes one work item (one row, or one row and hidden
 * unit) of a kernel; tests/serve/serve_kernels_host.c loops over the
 * items on the CPU fixture, serve_kernels.cu gives each item a GPU thread.  Items of one
 * launch never read what another item writes, so the order they run in
 * cannot change a result.
 *
 * The model is integer hashing, not floating point: the hidden state is
 * 32-bit words, K/V and router logits are floats holding small integers
 * (exact), so results do not depend on evaluation order, FMA contraction
 * or the math library.  The only float arithmetic with rounding is the
 * softmax weight topkGating writes, and nothing downstream reads it.
 */
#ifndef MOEFT_SERVE_ALGO_H
#define MOEFT_SERVE_ALGO_H

#include <stdint.h>

#ifdef __CUDACC__
#define SV_FN static __device__ __forceinline__
#else
#include <math.h>
#define SV_FN static inline
#endif

/* A 32-bit integer finaliser (lowbias32): full avalanche, cheap on both. */
SV_FN uint32_t sv_hash(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	x ^= x >> 16;
	return x;
}

SV_FN uint32_t sv_mix(uint32_t a, uint32_t b)
{
	return sv_hash(a ^ sv_hash(b + 0x9e3779b9U));
}

/* A weight of matrix `which` of layer `layer`, at (i, j): the model's
 * parameters are a function of the seed instead of a loaded checkpoint. */
SV_FN uint32_t sv_weight(uint32_t seed, uint32_t which, uint32_t layer, uint32_t i, uint32_t j)
{
	return sv_mix(sv_mix(seed ^ which, layer), i * 0x10001U + j);
}

enum { SV_W_K = 1, SV_W_V, SV_W_ROUTER, SV_W_EXPERT };

/* Embedding: the hidden state of a row from its input token. */
SV_FN void sv_embed(const int32_t *ids, uint32_t *hidden, int row, int h, int hs, uint32_t seed)
{
	hidden[row * hs + h] = sv_mix(sv_mix(seed, (uint32_t)ids[row]), (uint32_t)h);
}

/* K/V projection: 16-bit integers, exact in a float. */
SV_FN void sv_kv_proj(const uint32_t *hidden, float *key, float *value, int row, int h, int hs,
		      int layer, uint32_t seed)
{
	uint32_t x = hidden[row * hs + h];

	key[row * hs + h] = (float)(sv_mix(x, sv_weight(seed, SV_W_K, (uint32_t)layer, 0,
							(uint32_t)h)) & 0xffffU);
	value[row * hs + h] = (float)(sv_mix(x, sv_weight(seed, SV_W_V, (uint32_t)layer, 0,
							  (uint32_t)h)) & 0xffffU);
}

/*
 * vLLM's reshape_and_cache_flash_kernel, one (token, element) item: copy
 * the token's K and V element into its slot of the paged cache.  Slot -1
 * is padding (graph replays run a padded batch).
 */
SV_FN void sv_reshape_and_cache(const float *key, const float *value, float *key_cache,
				float *value_cache, const int64_t *slot_mapping, int64_t block_stride,
				int64_t page_stride, int64_t head_stride, int64_t key_stride,
				int64_t value_stride, int head_size, int block_size, int64_t token,
				int i)
{
	int64_t slot = slot_mapping[token];
	int64_t dst;

	if (slot < 0)
		return;
	dst = slot / block_size * block_stride + slot % block_size * page_stride +
	      i / head_size * head_stride + i % head_size;
	key_cache[dst] = key[token * key_stride + i];
	value_cache[dst] = value[token * value_stride + i];
}

/*
 * Attention stand-in: fold the row's sequence, read back from the paged
 * cache through its block table, into hidden unit h.  It reads every
 * earlier token's K/V, so a lost or wrong KV block changes what the
 * program emits from then on.
 */
SV_FN void sv_attention(uint32_t *hidden, const float *key_cache, const float *value_cache,
			const int32_t *block_tables, const int32_t *seq_lens, int row, int h,
			int hs, int max_blocks, int block_size, int64_t block_stride)
{
	uint32_t acc = 0x811c9dc5U;
	int p;

	for (p = 0; p < seq_lens[row]; p++) {
		int64_t at = block_tables[row * max_blocks + p / block_size] * block_stride +
			     (int64_t)(p % block_size) * hs + h;
		uint32_t k = (uint32_t)key_cache[at], v = (uint32_t)value_cache[at];

		acc = (acc ^ (k * (uint32_t)(p + 1) + v)) * 0x01000193U;
	}
	hidden[row * hs + h] = sv_mix(hidden[row * hs + h], acc);
}

/* Router logit of (row, expert): a hashed dot product, as a 20-bit
 * fraction so it is exact in a float. */
SV_FN void sv_router(const uint32_t *hidden, float *logits, int row, int e, int hs, int experts,
		     int layer, uint32_t seed)
{
	uint32_t acc = 0;
	int h;

	for (h = 0; h < hs; h++)
		acc += hidden[row * hs + h] *
		       sv_weight(seed, SV_W_ROUTER, (uint32_t)layer, (uint32_t)e, (uint32_t)h);
	logits[row * experts + e] = (float)(sv_hash(acc) >> 12) * (1.0f / 1048576.0f);
}

/* Does (a, ea) rank before (b, eb)?  Larger logit first, lower id on ties. */
SV_FN int sv_before(float a, int ea, float b, int eb)
{
	return a > b || (a == b && ea < eb);
}

/*
 * vLLM's topkGating, one row: the k best experts in rank order, each with
 * its softmax probability over all experts; source_rows as vLLM lays it
 * out (k-major).  Selection needs no scratch memory: the j-th pick is the
 * best expert ranking after pick j-1.  Ids outside [start, end) would be
 * written as num_experts, as vLLM does for experts of another rank.
 */
SV_FN void sv_topk_gating(const float *input, float *output, int rows, int32_t *indices,
			  int32_t *source_rows, int k, int start, int end, int experts, int row)
{
	const float *in = input + row * experts;
	float max = in[0], sum = 0.0f, prev = 0.0f;
	int e, j, prev_e = -1;

	for (e = 1; e < experts; e++)
		if (in[e] > max)
			max = in[e];
	for (e = 0; e < experts; e++)
		sum += expf(in[e] - max);
	for (j = 0; j < k; j++) {
		int best = -1;

		for (e = 0; e < experts; e++) {
			if (prev_e >= 0 && !sv_before(prev, prev_e, in[e], e))
				continue;
			if (best < 0 || sv_before(in[e], e, in[best], best))
				best = e;
		}
		output[row * k + j] = expf(in[best] - max) / sum;
		indices[row * k + j] = best >= start && best < end ? best - start : experts;
		source_rows[j * rows + row] = j * rows + row;
		prev = in[best];
		prev_e = best;
	}
}

/* Expert-MLP stand-in: hidden unit h through the row's experts in rank
 * order, so routing decides the next layer's input and the token. */
SV_FN void sv_moe_mlp(uint32_t *hidden, const int32_t *topk_ids, int row, int h, int hs, int k,
		      int layer, uint32_t seed)
{
	uint32_t x = hidden[row * hs + h];
	int j;

	for (j = 0; j < k; j++)
		x = sv_mix(x + sv_weight(seed, SV_W_EXPERT, (uint32_t)layer,
					 (uint32_t)topk_ids[row * k + j], (uint32_t)h),
			   (uint32_t)j);
	hidden[row * hs + h] = x;
}

/* Greedy sampling: the argmax (lowest id on ties) of a logit per token
 * id, each a hash of the row's final hidden state. */
SV_FN void sv_sample(const uint32_t *hidden, int32_t *tokens, int row, int hs, int vocab,
		     uint32_t seed)
{
	uint32_t f = seed, best = 0;
	int h, v, arg = 0;

	for (h = 0; h < hs; h++)
		f = sv_mix(f, hidden[row * hs + h]);
	for (v = 0; v < vocab; v++) {
		uint32_t x = sv_mix(f, (uint32_t)v);

		if (v == 0 || x > best) {
			best = x;
			arg = v;
		}
	}
	tokens[row] = arg;
}

#endif
