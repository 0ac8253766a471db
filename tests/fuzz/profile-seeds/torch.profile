profile torch
# Routing: PyTorch at::native::sbtopk::gatherTopK: ids = first 8 bytes of
# TensorInfo [8] (int64), slices [4] x k [2], slice size [1] = experts,
# values = first 8 bytes of TensorInfo [6], of the input's type
routing *6sbtopk10gatherTopKIN3c104HalfE* ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1
routing *6sbtopk10gatherTopKIN3c108BFloat16E* ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1
routing *6sbtopk10gatherTopKIf* ids=p8@0:i64 weights=p6@0:f32 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1
routing *6sbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1
# Routing: PyTorch row, mbtopk:: (multi-block, large slices): same positions
routing *6mbtopk10gatherTopKIN3c104HalfE* ids=p8@0:i64 weights=p6@0:f16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1
routing *6mbtopk10gatherTopKIN3c108BFloat16E* ids=p8@0:i64 weights=p6@0:bf16 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1
routing *6mbtopk10gatherTopKIf* ids=p8@0:i64 weights=p6@0:f32 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1 when=p7==1
routing *6mbtopk10gatherTopK* ids=p8@0:i64 rows=p4 k=p2 experts=p1 when=p1<=1024 when=p9==1
