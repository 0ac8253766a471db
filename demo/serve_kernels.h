/*
 * serve_kernels.h - the demo serving program's kernels: names, parameters,
 * launch shapes, and the handle serve.c launches each one by.
 *
 * Two implementations compute the same items of serve_algo.h:
 * tests/serve/serve_kernels_host.c as CPU fixture kernels (host functions
 * registered under the device names below), serve_kernels.cu as CUDA
 * kernels for sm_90.  serve_kernel_fn() returns what cudaLaunchKernel and
 * cudaGetFuncBySymbol take: the registered host function on the fixture,
 * nvcc's host stub on a GPU.
 *
 * Parameters are 0-based positions in the launch's void **args.  Rows are
 * token rows of one batch; hs is the hidden size.
 *
 * SK_FILL    serve_fill: torch.zeros-like initialiser of the KV pool
 *            (u32 *dst, u64 nwords, u32 value); any grid
 * SK_EMBED   serve_embed (const i32 *input_ids, u32 *hidden, int rows,
 *            int hs, u32 seed); grid.x = rows
 * SK_KV_PROJ serve_kv_proj (const u32 *hidden, float *key, float *value,
 *            int rows, int hs, int layer, u32 seed); grid.x = rows
 * SK_KV_WRITE vllm::reshape_and_cache_flash_kernel<float, float, kAuto>,
 *            vLLM's parameters: [0] key, [1] value, [2] key_cache,
 *            [3] value_cache, [4] slot_mapping (i64, -1 = padding),
 *            [5] block_stride, [6] page_stride, [7] head_stride,
 *            [8] key_stride, [9] value_stride (i64 each), [10] num_heads,
 *            [11] head_size, [12] block_size (int each), [13] k_scale,
 *            [14] v_scale (const float *, unused); grid.x = tokens
 * SK_ATTN    serve_attention (u32 *hidden, const float *key_cache,
 *            const float *value_cache, const i32 *block_tables,
 *            const i32 *seq_lens, int rows, int hs, int max_blocks,
 *            int block_size, i64 block_stride); grid.x = rows
 * SK_ROUTER  serve_router (const u32 *hidden, float *logits, int rows,
 *            int hs, int experts, int layer, u32 seed); grid.x = rows
 * SK_TOPK    vllm::moe::topkGating<128, int>: [0] const float *gating
 *            logits, [1] const bool *finished (NULL, unused), [2] float
 *            *weights, [3] int num_rows, [4] int *indices, [5] int
 *            *source_rows, [6] int k, [7] int start_expert, [8] int
 *            end_expert, [9] int num_experts (vLLM has it as a template
 *            argument); grid.x = ceil(rows / 128), 128 threads
 * SK_MLP     serve_moe_mlp (u32 *hidden, const i32 *topk_ids, int rows,
 *            int hs, int k, int layer, u32 seed); grid.x = rows
 * SK_SAMPLE  serve_sample (const u32 *hidden, i32 *tokens, int rows, int hs,
 *            int vocab, u32 seed); grid.x = rows; launched Triton-style
 *
 * The two vLLM names are the exact manglings nvcc gives the templates in
 * serve_kernels.cu, so the built-in vllm profile matches both builds
 * (check.sh names compares them with the PTX).
 */
#ifndef MOEFT_SERVE_KERNELS_H
#define MOEFT_SERVE_KERNELS_H

#define SERVE_TOPK_NAME "_ZN4vllm3moe10topkGatingILi128EiEEvPKfPKbPfiPT0_Piiiii"
#define SERVE_KV_WRITE_NAME "_ZN4vllm30reshape_and_cache_flash_kernelIffLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S6_PKlllllliiiPKfSA_"

/* topkGating's rows per block (its first template argument). */
#define SERVE_TOPK_ROWS_PER_BLOCK 128

enum serve_kernel {
	SK_FILL,
	SK_EMBED,
	SK_KV_PROJ,
	SK_KV_WRITE,
	SK_ATTN,
	SK_ROUTER,
	SK_TOPK,
	SK_MLP,
	SK_SAMPLE,
	SK_COUNT
};

#ifdef __cplusplus
extern "C"
#endif
const void *serve_kernel_fn(enum serve_kernel k);

#endif
