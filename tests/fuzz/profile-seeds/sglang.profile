profile sglang
# Routing: SGLang topkGatingSoftmax, <<<>>>: ids [4], rows [3], k [5]
routing *topkGatingSoftmax* ids=p4:i32 rows=p3 k=p5
# Routing: SGLang topkGatingSigmoid: as topkGatingSoftmax
routing *topkGatingSigmoid* ids=p4:i32 rows=p3 k=p5
# Routing: SGLang moeTopK (also moeTopKFast), <<<>>>: ids [3], gridDim.x, k [5]
routing *moeTopK* ids=p3:i32 rows=grid.x k=p5
# Routing: SGLang kimi_k2_moe_fused_gate_kernel (and _small_token): ids [3],
# rows [4], k [5] (before the next rules, whose patterns also match it)
routing *kimi_k2_moe_fused_gate_kernel* ids=p3:i32 rows=p4 k=p5
# Routing: SGLang moe_fused_gate_kernel_dynamic, ExC: ids [3], rows [4], topk [8]
# (before the next rule, whose pattern also matches this name)
routing *moe_fused_gate_kernel_dynamic* ids=p3:i32 rows=p4 k=p8
# Routing: SGLang moe_fused_gate_kernel: ids [3], rows [4], topk [6];
# fused shared-expert ids >= num_experts are part of the k
routing *moe_fused_gate_kernel* ids=p3:i32 rows=p4 k=p6
