profile vllm
# Routing: vLLM topkGating, <<<>>>: ids [4], rows [3], k [6], weights [2]
# (float, rows x k); the ids' type
# is the template's first type argument, mangled right after the int ones:
# Ej uint32, El int64, else int32 (tests/engines: every instantiation)
routing *4vllm3moe10topkGatingI*Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6
routing *4vllm3moe10topkGatingI*El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6
routing *4vllm3moe10topkGatingI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6
# Routing: vLLM topkGating, older name topkGatingSoftmax: the same
routing *4vllm3moe17topkGatingSoftmaxI*Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6
routing *4vllm3moe17topkGatingSoftmaxI*El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6
routing *4vllm3moe17topkGatingSoftmaxI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6
# Routing: vLLM topkGatingSoftplusSqrt (DeepSeek-V4): as topkGating; the
# ids' type follows the int arguments and a bool (ELb0E, ELb1E)
routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?Ej* ids=p4:u32 weights=p2:f32 rows=p3 k=p6
routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?El* ids=p4:i64 weights=p2:f32 rows=p3 k=p6
routing *4vllm3moe22topkGatingSoftplusSqrtI* ids=p4:i32 weights=p2:f32 rows=p3 k=p6
# Routing: vLLM dsv4HashTopkSoftplusSqrt (DeepSeek-V4 hash layers): ids [2],
# rows [3], experts [4], weights [1]; k is no parameter: 6, the one top-k vLLM takes it
# for; the ids' type is the first template argument
routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIj* ids=p2:u32 weights=p1:f32 rows=p3 k=6 experts=p4
routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIl* ids=p2:i64 weights=p1:f32 rows=p3 k=6 experts=p4
routing *4vllm3moe24dsv4HashTopkSoftplusSqrtI* ids=p2:i32 weights=p1:f32 rows=p3 k=6 experts=p4
# Routing: vLLM moeTopK (fallback), <<<>>>: ids [3], gridDim.x rows, k [6],
# weights [2];
# the ids' type as topkGating's
routing *4vllm3moe7moeTopKI*Ej* ids=p3:u32 weights=p2:f32 rows=grid.x k=p6
routing *4vllm3moe7moeTopKI*El* ids=p3:i64 weights=p2:f32 rows=grid.x k=p6
routing *4vllm3moe7moeTopKI* ids=p3:i32 weights=p2:f32 rows=grid.x k=p6
# Routing: vLLM single_group_topk_warp_kernel (one group, one warp a token):
# ids [2] (the row of single_group_topk); tokens [4], experts [5], topk [6],
# weights [1] (float), as a public launcher of the kernel passes them (its
# binary names only the types: long, long, long); the ids' type is the
# third template argument, right before the scoring function.  k is at
# most the template's MaxTopK (4 to 32 in vLLM 0.33.0): a launch whose p6
# is past 64 is not read.  The block kernel (two longs) has no rule:
# which is which is not known
routing *29single_group_topk_warp_kernelI*jLNS0_11ScoringFunc* ids=p2:u32 weights=p1:f32 rows=p4 k=p6 experts=p5 when=p6<=64
routing *29single_group_topk_warp_kernelI*lLNS0_11ScoringFunc* ids=p2:i64 weights=p1:f32 rows=p4 k=p6 experts=p5 when=p6<=64
routing *29single_group_topk_warp_kernelI*iLNS0_11ScoringFunc* ids=p2:i32 weights=p1:f32 rows=p4 k=p6 experts=p5 when=p6<=64
# Routing: vLLM grouped_topk_fused_kernel, ExC: ids [2], tokens [4], topk [8],
# topk_values [1] (float)
routing *grouped_topk_fused_kernel* ids=p2:i32 weights=p1:f32 rows=p4 k=p8
# Routing: vLLM grouped_topk_fused_small_expert_count_kernel, ExC: [2], [4], [7];
# topk_values [1]
routing *grouped_topk_fused_small_expert_count_kernel* ids=p2:i32 weights=p1:f32 rows=p4 k=p7
# KV: vLLM reshape_and_cache_flash_kernel: slot_mapping [4] int64, gridDim.x,
# block_size [12], key_cache [2], value_cache [3]; block_stride [5] int64
# elements of the 2nd template type: h (fp8) 1 byte, f 4, bf16 and t 2
kv *30reshape_and_cache_flash_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p4:i64 count=grid.x block=p12 stride=p5:i64 pool=p2,p3
kv *30reshape_and_cache_flash_kernelIff* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*4 pool=p2,p3
kv *30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*2 pool=p2,p3
kv *30reshape_and_cache_flash_kernelItt* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*2 pool=p2,p3
# (a cache type not named above: its pools are hashed)
kv *30reshape_and_cache_flash_kernelI* slots=p4:i64 count=grid.x block=p12 pool=p2,p3
# KV: vLLM reshape_and_cache_kernel: [4] int64, block_size [9]; caches [2], [3]
kv *24reshape_and_cache_kernelI* slots=p4:i64 count=grid.x block=p9 pool=p2,p3
# KV: vLLM concat_and_cache_mla_kernel: [3] int64, block_size [10]; kv_cache [2];
# block_stride [4] int elements of the 2nd template type, as for the flash rule
kv *27concat_and_cache_mla_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p3:i64 count=grid.x block=p10 stride=p4 pool=p2
kv *27concat_and_cache_mla_kernelIff* slots=p3:i64 count=grid.x block=p10 stride=p4*4 pool=p2
kv *27concat_and_cache_mla_kernelI13__nv_bfloat16S1_* slots=p3:i64 count=grid.x block=p10 stride=p4*2 pool=p2
kv *27concat_and_cache_mla_kernelItt* slots=p3:i64 count=grid.x block=p10 stride=p4*2 pool=p2
kv *27concat_and_cache_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2
# KV: vLLM concat_and_cache_mla_kernel row, "(and ds_mla)": same positions
kv *30concat_and_cache_ds_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2
# KV: vLLM concat_and_cache_mla_rope_fused_kernel (RoPE and the MLA cache write
# fused, a block a token): slot_mapping [12] int64, gridDim.x, block_size [16],
# kv_cache [11]
kv *38concat_and_cache_mla_rope_fused_kernelI* slots=p12:i64 count=grid.x block=p16 pool=p11
# KV: vLLM concat_and_cache_nvfp4_ds_mla_kernel: [3] int64, gridDim.x,
# block_size [8], kv_cache [2]
kv *36concat_and_cache_nvfp4_ds_mla_kernelE* slots=p3:i64 count=grid.x block=p8 pool=p2
# KV: vLLM indexer_k_quant_and_cache_kernel (DeepSeek-V3.2's indexer keys):
# [2] int64, gridDim.x, cache_block_size [5], kv_cache [1]
kv *32indexer_k_quant_and_cache_kernelI* slots=p2:i64 count=grid.x block=p5 pool=p1
# KV: vLLM's Triton reshape_and_cache_kernel_flash (ROCm, the Triton attention
# backend): slot_mapping_ptr int64, a program per slot (grid.x); pools
# key_cache_ptr, value_cache_ptr; its block size is a constexpr (no block=, so no
# stride=: the pools are hashed); the head-major layout (dim_stride_k != 0) has
# no rule
kv reshape_and_cache_kernel_flash slots=p4:i64 count=grid.x pool=p2,p3 when=p11==0 triton=key_ptr,value_ptr,key_cache_ptr,value_cache_ptr,slot_mapping_ptr,k_scale,v_scale,key_stride,value_stride,block_stride,head_stride,dim_stride_k,dim_stride_v,page_stride
