// router_triton.cu - a kernel with the name and parameter table that
// Triton 3.7.1 gives SGLang 0.5.23's _router_triton_kernel for a
// DeepSeek-V3-like model, M > 1 (triton/sglang-0.5.23/deepseek-v3-m8):
// the arguments it kept, then Triton's two scratch pointers.  It does
// nothing; check.sh reads its cubin as the cubin of a Triton cache entry.
extern "C" __global__ void _router_triton_kernel(
	const void *scores, const void *bias, float *weights, int *indices, int *packed, int m,
	float routed_scaling_factor, float moe_softcapping, int stride_bias_alt,
	int stride_input_ids, int stride_sm, int stride_wm, int stride_im, int stride_pm,
	int stride_pk, void *global_scratch, void *profile_scratch)
{
}
