/*
 * profiles_builtin.c - the built-in engine profiles, as rule text.
 *
 * They go through the same parser as a MOEFT_PROFILE file, so a built-in
 * is data a user can read (PROFILES.md lists them), copy and tighten.
 * Every rule carries a '#' line naming its row in shared/ENGINES.md; the
 * parameter positions are those rows' (0-based indices into void **args).
 *
 * Patterns match mangled names.  Where a name alone is ambiguous they lean
 * on the mangling: "4vllm3moe" is the vllm::moe namespace (SGLang has a
 * global topkGatingSoftmax with another parameter order), "24..._kernelI"
 * is exactly that identifier followed by template arguments (vLLM's Triton
 * reshape_and_cache_kernel_flash is plain text and must not match), and
 * "ILi128E" is an int template argument 128.
 */
#include <stddef.h>
#include <string.h>

#include "profile.h"

/* vLLM's text is longer than the 4095 bytes C99 promises a string literal;
 * GCC and Clang, the compilers the build takes, have no such limit. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverlength-strings"
static const char vllm_rules[] =
	"profile vllm\n"
	"# Routing: vLLM topkGating, <<<>>>: ids [4], rows [3], k [6], weights [2]\n"
	"# (float, rows x k); the ids' type\n"
	"# is the template's first type argument, mangled right after the int ones:\n"
	"# Ej uint32, El int64, else int32 (tests/engines: every instantiation)\n"
	"routing *4vllm3moe10topkGatingI*Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6\n"
	"routing *4vllm3moe10topkGatingI*El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6\n"
	"routing *4vllm3moe10topkGatingI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6\n"
	"# Routing: vLLM topkGating, older name topkGatingSoftmax: the same\n"
	"routing *4vllm3moe17topkGatingSoftmaxI*Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6\n"
	"routing *4vllm3moe17topkGatingSoftmaxI*El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6\n"
	"routing *4vllm3moe17topkGatingSoftmaxI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6\n"
	"# Routing: vLLM topkGatingSoftplusSqrt (DeepSeek-V4): as topkGating; the\n"
	"# ids' type follows the int arguments and a bool (ELb0E, ELb1E)\n"
	"routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6\n"
	"routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6\n"
	"routing *4vllm3moe22topkGatingSoftplusSqrtI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6\n"
	"# Routing: vLLM dsv4HashTopkSoftplusSqrt (DeepSeek-V4 hash layers): ids [2],\n"
	"# rows [3], experts [4], weights [1]; k is no parameter: 6, the one top-k vLLM takes it\n"
	"# for; the ids' type is the first template argument\n"
	"routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIj* ids=p2:u32 weights=p1:f32 rows=p3 k=6 experts=p4\n"
	"routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIl* ids=p2:i64 weights=p1:f32 rows=p3 k=6 experts=p4\n"
	"routing *4vllm3moe24dsv4HashTopkSoftplusSqrtI* ids=p2:i32 weights=p1:f32 rows=p3 k=6 experts=p4\n"
	"# Routing: vLLM moeTopK (fallback), <<<>>>: ids [3], gridDim.x rows, k [6],\n"
	"# weights [2];\n"
	"# the ids' type as topkGating's\n"
	"routing *4vllm3moe7moeTopKI*Ej* ids=p3:u32 weights=p2:f32 rows=grid.x k=p6\n"
	"routing *4vllm3moe7moeTopKI*El* ids=p3:i64 weights=p2:f32 rows=grid.x k=p6\n"
	"routing *4vllm3moe7moeTopKI* ids=p3:i32 weights=p2:f32 rows=grid.x k=p6\n"
	"# Routing: vLLM single_group_topk_warp_kernel (one group, one warp a token):\n"
	"# ids [2] (the row of single_group_topk); tokens [4], experts [5], topk [6],\n"
	"# weights [1] (float), as a public launcher of the kernel passes them (its\n"
	"# binary names only the types: long, long, long); the ids' type is the\n"
	"# third template argument, right before the scoring function.  k is at\n"
	"# most the template's MaxTopK (4 to 32 in vLLM 0.33.0): a launch whose p6\n"
	"# is past 64 is not read.  The block kernel (two longs) has no rule:\n"
	"# which is which is not known\n"
	"routing *29single_group_topk_warp_kernelI*jLNS0_11ScoringFunc* ids=p2:u32 weights=p1:f32"
	" rows=p4 k=p6 experts=p5 when=p6<=64\n"
	"routing *29single_group_topk_warp_kernelI*lLNS0_11ScoringFunc* ids=p2:i64 weights=p1:f32"
	" rows=p4 k=p6 experts=p5 when=p6<=64\n"
	"routing *29single_group_topk_warp_kernelI*iLNS0_11ScoringFunc* ids=p2:i32 weights=p1:f32"
	" rows=p4 k=p6 experts=p5 when=p6<=64\n"
	"# Routing: vLLM grouped_topk_fused_kernel, ExC: ids [2], tokens [4], topk [8],\n"
	"# topk_values [1] (float)\n"
	"routing *grouped_topk_fused_kernel* ids=p2:i32 weights=p1:f32 rows=p4 k=p8\n"
	"# Routing: vLLM grouped_topk_fused_small_expert_count_kernel, ExC: [2], [4], [7];\n"
	"# topk_values [1]\n"
	"routing *grouped_topk_fused_small_expert_count_kernel* ids=p2:i32 weights=p1:f32 rows=p4 k=p7\n"
	"# KV: vLLM reshape_and_cache_flash_kernel: slot_mapping [4] int64, gridDim.x,\n"
	"# block_size [12], key_cache [2], value_cache [3]; block_stride [5] int64\n"
	"# elements of the 2nd template type: h (fp8) 1 byte, f 4, bf16 and t 2\n"
	"kv *30reshape_and_cache_flash_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p4:i64 count=grid.x"
	" block=p12 stride=p5:i64 pool=p2,p3\n"
	"kv *30reshape_and_cache_flash_kernelIff* slots=p4:i64 count=grid.x block=p12"
	" stride=p5:i64*4 pool=p2,p3\n"
	"kv *30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_* slots=p4:i64 count=grid.x"
	" block=p12 stride=p5:i64*2 pool=p2,p3\n"
	"kv *30reshape_and_cache_flash_kernelItt* slots=p4:i64 count=grid.x block=p12"
	" stride=p5:i64*2 pool=p2,p3\n"
	"# (a cache type not named above: its pools are hashed)\n"
	"kv *30reshape_and_cache_flash_kernelI* slots=p4:i64 count=grid.x block=p12 pool=p2,p3\n"
	"# KV: vLLM reshape_and_cache_kernel: [4] int64, block_size [9]; caches [2], [3]\n"
	"kv *24reshape_and_cache_kernelI* slots=p4:i64 count=grid.x block=p9 pool=p2,p3\n"
	"# KV: vLLM concat_and_cache_mla_kernel: [3] int64, block_size [10]; kv_cache [2];\n"
	"# block_stride [4] int elements of the 2nd template type, as for the flash rule\n"
	"kv *27concat_and_cache_mla_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p3:i64 count=grid.x block=p10 stride=p4 pool=p2\n"
	"kv *27concat_and_cache_mla_kernelIff* slots=p3:i64 count=grid.x block=p10 stride=p4*4 pool=p2\n"
	"kv *27concat_and_cache_mla_kernelI13__nv_bfloat16S1_* slots=p3:i64 count=grid.x block=p10 stride=p4*2 pool=p2\n"
	"kv *27concat_and_cache_mla_kernelItt* slots=p3:i64 count=grid.x block=p10 stride=p4*2 pool=p2\n"
	"kv *27concat_and_cache_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2\n"
	"# KV: vLLM concat_and_cache_mla_kernel row, \"(and ds_mla)\": same positions\n"
	"kv *30concat_and_cache_ds_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2\n"
	"# KV: vLLM concat_and_cache_mla_rope_fused_kernel (RoPE and the MLA cache write\n"
	"# fused, a block a token): slot_mapping [12] int64, gridDim.x, block_size [16],\n"
	"# kv_cache [11]\n"
	"kv *38concat_and_cache_mla_rope_fused_kernelI* slots=p12:i64 count=grid.x block=p16 pool=p11\n"
	"# KV: vLLM concat_and_cache_nvfp4_ds_mla_kernel: [3] int64, gridDim.x,\n"
	"# block_size [8], kv_cache [2]\n"
	"kv *36concat_and_cache_nvfp4_ds_mla_kernelE* slots=p3:i64 count=grid.x block=p8 pool=p2\n"
	"# KV: vLLM indexer_k_quant_and_cache_kernel (DeepSeek-V3.2's indexer keys):\n"
	"# [2] int64, gridDim.x, cache_block_size [5], kv_cache [1]\n"
	"kv *32indexer_k_quant_and_cache_kernelI* slots=p2:i64 count=grid.x block=p5 pool=p1\n"
	"# KV: vLLM's Triton reshape_and_cache_kernel_flash (ROCm, the Triton attention\n"
	"# backend): slot_mapping_ptr int64, a program per slot (grid.x); pools\n"
	"# key_cache_ptr, value_cache_ptr; its block size is a constexpr (no block=, so no\n"
	"# stride=: the pools are hashed); the head-major layout (dim_stride_k != 0) has\n"
	"# no rule\n"
	"kv reshape_and_cache_kernel_flash slots=p4:i64 count=grid.x pool=p2,p3 "
	"when=p11==0 triton=key_ptr,value_ptr,key_cache_ptr,value_cache_ptr,slot_mapping_ptr,"
	"k_scale,v_scale,key_stride,value_stride,block_stride,head_stride,dim_stride_k,"
	"dim_stride_v,page_stride\n";
#pragma GCC diagnostic pop

static const char sglang_rules[] =
	"profile sglang\n"
	"# Routing: SGLang topkGatingSoftmax, <<<>>>: ids [4], rows [3], k [5],\n"
	"# weights [2] (float, rows x k)\n"
	"routing *topkGatingSoftmax* ids=p4:i32 weights=p2:f32 rows=p3 k=p5\n"
	"# Routing: SGLang topkGatingSigmoid: as topkGatingSoftmax\n"
	"routing *topkGatingSigmoid* ids=p4:i32 weights=p2:f32 rows=p3 k=p5\n"
	"# Routing: SGLang moeTopK (also moeTopKFast), <<<>>>: ids [3], gridDim.x, k [5],\n"
	"# weights [2]\n"
	"routing *moeTopK* ids=p3:i32 weights=p2:f32 rows=grid.x k=p5\n"
	"# Routing: SGLang kimi_k2_moe_fused_gate_kernel (and _small_token): ids [3],\n"
	"# rows [4], k [5], weights [2] (before the next rules, whose patterns also\n"
	"# match it)\n"
	"routing *kimi_k2_moe_fused_gate_kernel* ids=p3:i32 weights=p2:f32 rows=p4 k=p5\n"
	"# Routing: SGLang moe_fused_gate_kernel_dynamic, ExC: ids [3], rows [4], topk [8],\n"
	"# weights [2]\n"
	"# (before the next rule, whose pattern also matches this name)\n"
	"routing *moe_fused_gate_kernel_dynamic* ids=p3:i32 weights=p2:f32 rows=p4 k=p8\n"
	"# Routing: SGLang moe_fused_gate_kernel: ids [3], rows [4], topk [6], weights [2];\n"
	"# fused shared-expert ids >= num_experts are part of the k\n"
	"routing *moe_fused_gate_kernel* ids=p3:i32 weights=p2:f32 rows=p4 k=p6\n"
	"# Routing: SGLang 0.5.23's Triton _router_triton_kernel (moe_fused_gate.py):\n"
	"# ids out_indices_ptr, weights out_weights_ptr (f32, M x K), rows M; K is a\n"
	"# constexpr, so k is out_indices' row stride stride_im (a new (M, K) tensor)\n"
	"routing _router_triton_kernel ids=p6:i32 weights=p5:f32 rows=p8 k=p18 "
	"triton=scores_ptr,bias_ptr,bias_alt_ptr,input_ids_ptr,num_token_non_padded_ptr,"
	"out_weights_ptr,out_indices_ptr,out_packed_ptr,M,routed_scaling_factor,"
	"moe_softcapping,stride_bias,stride_bias_alt,stride_input_ids,stride_sm,stride_sn,"
	"stride_wm,stride_wk,stride_im,stride_ik,stride_pm,stride_pk\n";

/*
 * torch.topk is also what samplers call.  A router's slice is the expert
 * count (8 to 512 in current models), a sampler's the vocabulary (32K+),
 * so `p1<=1024` keeps routers; p9 == 1 (indicesWithinSliceStride) keeps
 * top-k along the last dimension, where row r's ids start at r * k.  The
 * values are the gating weights, of the input's type (the template's first
 * argument: N3c104HalfE, N3c108BFloat16E, f); p7 == 1
 * (topKWithinSliceStride) puts row r's at r * k too.  Other types keep
 * their ids, without weights.
 */
static const char torch_rules[] =
	"profile torch\n"
	"# Routing: PyTorch at::native::sbtopk::gatherTopK: ids = first 8 bytes of\n"
	"# TensorInfo [8] (int64), slices [4] x k [2], slice size [1] = experts,\n"
	"# values = first 8 bytes of TensorInfo [6], of the input's type\n"
	"routing *6sbtopk10gatherTopKIN3c104HalfE* ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1\n"
	"routing *6sbtopk10gatherTopKIN3c108BFloat16E* ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1\n"
	"routing *6sbtopk10gatherTopKIf* ids=p8@0:i64 weights=p6@0:f32 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1\n"
	"routing *6sbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1\n"
	"# Routing: PyTorch row, mbtopk:: (multi-block, large slices): same positions\n"
	"routing *6mbtopk10gatherTopKIN3c104HalfE* ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1\n"
	"routing *6mbtopk10gatherTopKIN3c108BFloat16E* ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1\n"
	"routing *6mbtopk10gatherTopKIf* ids=p8@0:i64 weights=p6@0:f32 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1\n"
	"routing *6mbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1\n";

/*
 * topk_moe_cuda rows are n_experts ids apart, n_experts being a template
 * argument no launch parameter carries: one rule per instantiated expert
 * count reads it from the mangled name.  An unforeseen instantiation
 * falls through to the last rule, which takes single-row launches only
 * (row 0 needs no stride).
 */
static const char llamacpp_rules[] =
	"profile llamacpp\n"
	"# Routing: llama.cpp topk_moe_cuda: ids [2], rows [4], first n_expert_used [5]\n"
	"# of each row valid, row stride = n_experts (template)\n"
	"routing *13topk_moe_cudaILi1E* ids=p2:i32 rows=p4 k=p5 stride=1\n"
	"routing *13topk_moe_cudaILi2E* ids=p2:i32 rows=p4 k=p5 stride=2\n"
	"routing *13topk_moe_cudaILi4E* ids=p2:i32 rows=p4 k=p5 stride=4\n"
	"routing *13topk_moe_cudaILi8E* ids=p2:i32 rows=p4 k=p5 stride=8\n"
	"routing *13topk_moe_cudaILi16E* ids=p2:i32 rows=p4 k=p5 stride=16\n"
	"routing *13topk_moe_cudaILi32E* ids=p2:i32 rows=p4 k=p5 stride=32\n"
	"routing *13topk_moe_cudaILi64E* ids=p2:i32 rows=p4 k=p5 stride=64\n"
	"routing *13topk_moe_cudaILi128E* ids=p2:i32 rows=p4 k=p5 stride=128\n"
	"routing *13topk_moe_cudaILi256E* ids=p2:i32 rows=p4 k=p5 stride=256\n"
	"routing *13topk_moe_cudaILi512E* ids=p2:i32 rows=p4 k=p5 stride=512\n"
	"routing *topk_moe_cuda* ids=p2:i32 rows=p4 k=p5 when=p4==1\n"
	"# Routing: llama.cpp k_argsort_f32_i32: ids [1], gridDim.x rows x ncols [2];\n"
	"# a full ranking per row, of which the model uses the first n_expert_used\n"
	"routing *k_argsort_f32_i32* ids=p1:i32 rows=grid.x k=p2 when=p2<=1024\n"
	"# KV: llama.cpp k_set_rows / k_set_rows_quant: idx [1] int64,\n"
	"# ne10 [4] x ne11 [5] x ne12 [6] (int64 each), dst [2]; a slot is one cell\n"
	"kv *k_set_rows* slots=p1:i64 count=p4:i64*p5:i64*p6:i64 block=1 pool=p2\n";

/* Most specific first: first match wins, and vLLM's namespaced patterns
 * must see vLLM kernels before SGLang's looser ones do. */
static const char auto_rules[] =
	"use vllm\n"
	"use sglang\n"
	"use torch\n"
	"use llamacpp\n";

const char *const profile_builtin_names[] = {
	"auto", "vllm", "sglang", "torch", "llamacpp", NULL
};

static const char *const builtin_texts[] = {
	auto_rules, vllm_rules, sglang_rules, torch_rules, llamacpp_rules
};

const char *profile_builtin_text(const char *name)
{
	size_t i;

	for (i = 0; profile_builtin_names[i]; i++)
		if (strcmp(name, profile_builtin_names[i]) == 0)
			return builtin_texts[i];
	return NULL;
}
