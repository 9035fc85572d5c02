// Backend::cast_async on the device: every pair of fp32, bf16 and fp16, round to nearest even,
// bit for bit as core/dtype.cpp (NaN included, see cuda_kernel_utils.cuh). Two 16-bit types go
// through fp32, which loses nothing: every fp16 and bf16 value is exact in fp32.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_kernel_utils.cuh"

namespace zt::cuda {
namespace {

template <typename S, typename D>
struct CastOp {
  const S* src;
  D* dst;
  __device__ void apply(size_t i) const { store_float(dst, i, load_float(src, i)); }
  template <int N>
  __device__ void apply_vec(size_t i) const {
    float v[N];
    load_vec<N>(src + i, v);
    store_vec<N>(dst + i, v);
  }
};

template <typename S, typename D>
void launch_cast_typed(const S* src, D* dst, size_t n, cudaStream_t stream) {
  // 4 elements per thread when either side is fp32 (one float4), 8 when both are 16-bit (16 bytes).
  constexpr int N = (sizeof(S) == 4 || sizeof(D) == 4) ? 4 : 8;
  const bool vectorised = is_aligned(src, vec_align<S, N>()) && is_aligned(dst, vec_align<D, N>());
  launch_elementwise<N>(CastOp<S, D>{src, dst}, n, vectorised, stream, 0, "cast_kernel");
}

}  // namespace

void launch_cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDefault, stream));
    return;
  }
  with_storage_type(src_dtype, [&](auto* s) {
    with_storage_type(dst_dtype, [&](auto* d) {
      launch_cast_typed(static_cast<decltype(s)>(const_cast<void*>(src)), static_cast<decltype(d)>(dst), n, stream);
    });
  });
}

}  // namespace zt::cuda
