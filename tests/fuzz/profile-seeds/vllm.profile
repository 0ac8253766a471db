profile vllm
# Routing: vLLM topkGating, <<<>>>: ids [4], rows [3], k [6]; the ids' type
# is the template's first type argument, mangled right after the int ones:
# Ej uint32, El int64, else int32 (tests/engines: every instantiation)
routing *4vllm3moe10topkGatingI*Ej* ids=p4:u32 rows=p3 k=p6
routing *4vllm3moe10topkGatingI*El* ids=p4:i64 rows=p3 k=p6
routing *4vllm3moe10topkGatingI* ids=p4:i32 rows=p3 k=p6
# Routing: vLLM topkGating, older name topkGatingSoftmax: the same
routing *4vllm3moe17topkGatingSoftmaxI*Ej* ids=p4:u32 rows=p3 k=p6
routing *4vllm3moe17topkGatingSoftmaxI*El* ids=p4:i64 rows=p3 k=p6
routing *4vllm3moe17topkGatingSoftmaxI* ids=p4:i32 rows=p3 k=p6
# Routing: vLLM topkGatingSoftplusSqrt (DeepSeek-V4): as topkGating; the
# ids' type follows the int arguments and a bool (ELb0E, ELb1E)
routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?Ej* ids=p4:u32 rows=p3 k=p6
routing *4vllm3moe22topkGatingSoftplusSqrtI*ELb?El* ids=p4:i64 rows=p3 k=p6
routing *4vllm3moe22topkGatingSoftplusSqrtI* ids=p4:i32 rows=p3 k=p6
# Routing: vLLM dsv4HashTopkSoftplusSqrt (DeepSeek-V4 hash layers): ids [2],
# rows [3], experts [4]; k is no parameter: 6, the one top-k vLLM takes it
# for; the ids' type is the first template argument
routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIj* ids=p2:u32 rows=p3 k=6 experts=p4
routing *4vllm3moe24dsv4HashTopkSoftplusSqrtIl* ids=p2:i64 rows=p3 k=6 experts=p4
routing *4vllm3moe24dsv4HashTopkSoftplusSqrtI* ids=p2:i32 rows=p3 k=6 experts=p4
# Routing: vLLM moeTopK (fallback), <<<>>>: ids [3], gridDim.x rows, k [6];
# the ids' type as topkGating's
routing *4vllm3moe7moeTopKI*Ej* ids=p3:u32 rows=grid.x k=p6
routing *4vllm3moe7moeTopKI*El* ids=p3:i64 rows=grid.x k=p6
routing *4vllm3moe7moeTopKI* ids=p3:i32 rows=grid.x k=p6
# Routing: vLLM grouped_topk_fused_kernel, ExC: ids [2], tokens [4], topk [8]
routing *grouped_topk_fused_kernel* ids=p2:i32 rows=p4 k=p8
# Routing: vLLM grouped_topk_fused_small_expert_count_kernel, ExC: [2], [4], [7]
routing *grouped_topk_fused_small_expert_count_kernel* ids=p2:i32 rows=p4 k=p7
# KV: vLLM reshape_and_cache_flash_kernel: slot_mapping [4] int64, gridDim.x,
# block_size [12], key_cache [2], value_cache [3]
kv *30reshape_and_cache_flash_kernelI*hLNS_18Fp8KVCacheDataTypeE* slots=p4:i64 count=grid.x block=p12 stride=p5:i64 pool=p2,p3
kv *30reshape_and_cache_flash_kernelIff* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*4 pool=p2,p3
kv *30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_* slots=p4:i64 count=grid.x block=p12 stride=p5:i64*2 pool=p2,p3
kv *30reshape_and_cache_flash_kernelI* slots=p4:i64 count=grid.x block=p12 pool=p2,p3
# KV: vLLM reshape_and_cache_kernel: [4] int64, block_size [9]; caches [2], [3]
kv *24reshape_and_cache_kernelI* slots=p4:i64 count=grid.x block=p9 pool=p2,p3
# KV: vLLM concat_and_cache_mla_kernel: [3] int64, block_size [10]; kv_cache [2]
kv *27concat_and_cache_mla_kernelIff* slots=p3:i64 count=grid.x block=p10 stride=p4*4 pool=p2
kv *27concat_and_cache_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2
# KV: vLLM concat_and_cache_mla_kernel row, "(and ds_mla)": same positions
kv *30concat_and_cache_ds_mla_kernelI* slots=p3:i64 count=grid.x block=p10 pool=p2
