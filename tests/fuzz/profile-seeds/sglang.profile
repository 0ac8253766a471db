profile sglang
# Routing: SGLang topkGatingSoftmax, <<<>>>: ids [4], rows [3], k [5],
# weights [2] (float, rows x k)
routing *topkGatingSoftmax* ids=p4:i32 weights=p2:f32 rows=p3 k=p5
# Routing: SGLang topkGatingSigmoid: as topkGatingSoftmax
routing *topkGatingSigmoid* ids=p4:i32 weights=p2:f32 rows=p3 k=p5
# Routing: SGLang moeTopK (also moeTopKFast), <<<>>>: ids [3], gridDim.x, k [5],
# weights [2]
routing *moeTopK* ids=p3:i32 weights=p2:f32 rows=grid.x k=p5
# Routing: SGLang kimi_k2_moe_fused_gate_kernel (and _small_token): ids [3],
# rows [4], k [5], weights [2] (before the next rules, whose patterns also
# match it)
routing *kimi_k2_moe_fused_gate_kernel* ids=p3:i32 weights=p2:f32 rows=p4 k=p5
# Routing: SGLang moe_fused_gate_kernel_dynamic, ExC: ids [3], rows [4], topk [8],
# weights [2]
# (before the next rule, whose pattern also matches this name)
routing *moe_fused_gate_kernel_dynamic* ids=p3:i32 weights=p2:f32 rows=p4 k=p8
# Routing: SGLang moe_fused_gate_kernel: ids [3], rows [4], topk [6], weights [2];
# fused shared-expert ids >= num_experts are part of the k
routing *moe_fused_gate_kernel* ids=p3:i32 weights=p2:f32 rows=p4 k=p6
# Routing: SGLang 0.5.23's Triton _router_triton_kernel (moe_fused_gate.py):
# ids out_indices_ptr, weights out_weights_ptr (f32, M x K), rows M; K is a
# constexpr, so k is out_indices' row stride stride_im (a new (M, K) tensor)
routing _router_triton_kernel ids=p6:i32 weights=p5:f32 rows=p8 k=p18 triton=scores_ptr,bias_ptr,bias_alt_ptr,input_ids_ptr,num_token_non_padded_ptr,out_weights_ptr,out_indices_ptr,out_packed_ptr,M,routed_scaling_factor,moe_softcapping,stride_bias,stride_bias_alt,stride_input_ids,stride_sm,stride_sn,stride_wm,stride_wk,stride_im,stride_ik,stride_pm,stride_pk
