/*
 * misfit.cu - device code that the built-in rules misread (check.sh
 * binary): a KV writer named like vLLM's with too few parameters, and
 * torch's top-k whose TensorInfo is too small on sm_80 only, so that
 * the sm_80 table disagrees with the sm_90 one and misfits alone.
 */
namespace vllm {
enum class Fp8KVCacheDataType { kAuto = 0 };

template <typename scalar_t, typename cache_t, Fp8KVCacheDataType kv_dt>
__global__ void reshape_and_cache_flash_kernel(const scalar_t *, const scalar_t *)
{
}

template __global__ void reshape_and_cache_flash_kernel<float, float, Fp8KVCacheDataType::kAuto>(
	const float *, const float *);
} /* namespace vllm */

namespace at {
namespace cuda {
namespace detail {
template <typename T, typename IndexType>
struct TensorInfo {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
	IndexType dims;
#else
	T *data;
	IndexType sizes[25];
	IndexType strides[25];
	int dims;
#endif
};
} /* namespace detail */
} /* namespace cuda */

namespace native {
namespace sbtopk {
template <typename T, typename IndexType, int Dim, bool WithKthValues>
__global__ void gatherTopK(cuda::detail::TensorInfo<const T, IndexType>, IndexType, IndexType,
			   bool, IndexType, IndexType, cuda::detail::TensorInfo<T, IndexType>,
			   IndexType, cuda::detail::TensorInfo<long, IndexType>, IndexType, T *)
{
}

template __global__ void gatherTopK<float, unsigned int, 1, false>(
	cuda::detail::TensorInfo<const float, unsigned int>, unsigned int, unsigned int, bool,
	unsigned int, unsigned int, cuda::detail::TensorInfo<float, unsigned int>, unsigned int,
	cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float *);
} /* namespace sbtopk */
} /* namespace native */
} /* namespace at */
