profile llamacpp
# Routing: llama.cpp topk_moe_cuda: ids [2], rows [4], first n_expert_used [5]
# of each row valid, row stride = n_experts (template)
routing *13topk_moe_cudaILi1E* ids=p2:i32 rows=p4 k=p5 stride=1
routing *13topk_moe_cudaILi2E* ids=p2:i32 rows=p4 k=p5 stride=2
routing *13topk_moe_cudaILi4E* ids=p2:i32 rows=p4 k=p5 stride=4
routing *13topk_moe_cudaILi8E* ids=p2:i32 rows=p4 k=p5 stride=8
routing *13topk_moe_cudaILi16E* ids=p2:i32 rows=p4 k=p5 stride=16
routing *13topk_moe_cudaILi32E* ids=p2:i32 rows=p4 k=p5 stride=32
routing *13topk_moe_cudaILi64E* ids=p2:i32 rows=p4 k=p5 stride=64
routing *13topk_moe_cudaILi128E* ids=p2:i32 rows=p4 k=p5 stride=128
routing *13topk_moe_cudaILi256E* ids=p2:i32 rows=p4 k=p5 stride=256
routing *13topk_moe_cudaILi512E* ids=p2:i32 rows=p4 k=p5 stride=512
routing *topk_moe_cuda* ids=p2:i32 rows=p4 k=p5 when=p4==1
# Routing: llama.cpp k_argsort_f32_i32: ids [1], gridDim.x rows x ncols [2];
# a full ranking per row, of which the model uses the first n_expert_used
routing *k_argsort_f32_i32* ids=p1:i32 rows=grid.x k=p2 when=p2<=1024
# KV: llama.cpp k_set_rows / k_set_rows_quant: idx [1] int64,
# ne10 [4] x ne11 [5] x ne12 [6] (int64 each), dst [2]; a slot is one cell
kv *k_set_rows* slots=p1:i64 count=p4:i64*p5:i64*p6:i64 block=1 pool=p2
