#include "kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.hpp"
#include "merge.hpp"

namespace ring {
namespace {

template <class T>
__device__ float2 to_float2(const T* p);
template <>
__device__ float2 to_float2<__half>(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <>
__device__ float2 to_float2<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// One warp a row: lane i takes values 4i … 4i + 3 (and 4i + 128 … when d = 128 needs two passes of
// 128). Reads Op (2 bytes a value), L's, and O_acc (4 bytes) unless first; writes O_acc and L_acc.
template <class T>
__global__ void merge_kernel(int rows, int d, float* __restrict__ O_acc, float* __restrict__ L_acc,
                             const T* __restrict__ Op, const float* __restrict__ Lp, bool first) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const MergeWeights w = first ? MergeWeights{Lp[row], 0.0f, 1.0f} : merge_weights(L_acc[row], Lp[row]);
  for (int e = 4 * lane; e < d; e += 128) {
    const size_t at = size_t(row) * d + e;
    const float2 b0 = to_float2(Op + at), b1 = to_float2(Op + at + 2);
    float4 o = first ? make_float4(0, 0, 0, 0) : *reinterpret_cast<const float4*>(O_acc + at);
    // first: w1 = 0 and o = 0, so o is Op whatever O_acc held (no 0·NaN).
    o = make_float4(w.w1 * o.x + w.w2 * b0.x, w.w1 * o.y + w.w2 * b0.y, w.w1 * o.z + w.w2 * b1.x,
                    w.w1 * o.w + w.w2 * b1.y);
    *reinterpret_cast<float4*>(O_acc + at) = o;
  }
  __syncwarp();
  if (lane == 0) L_acc[row] = w.L;
}

template <class T>
__global__ void accumulate_kernel(size_t n, float* __restrict__ acc, const T* __restrict__ part) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc[i] += float(part[i]);
}

template <class T>
__global__ void round_kernel(size_t n, const float* __restrict__ O_acc, T* __restrict__ O) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    O[i] = T(O_acc[i]);
}

}  // namespace

void launch_merge(course::Dtype t, int rows, int d, float* O_acc, float* L_acc, const void* Op, const float* Lp,
                  bool first, cudaStream_t stream) {
  course::require(d % 4 == 0, "merge: d must be a multiple of 4");
  if (rows == 0) return;
  const unsigned blocks = unsigned((rows + 3) / 4);
  if (t == course::Dtype::bf16)
    merge_kernel<<<blocks, 128, 0, stream>>>(rows, d, O_acc, L_acc, static_cast<const __nv_bfloat16*>(Op), Lp,
                                             first);
  else
    merge_kernel<<<blocks, 128, 0, stream>>>(rows, d, O_acc, L_acc, static_cast<const __half*>(Op), Lp, first);
  CUDA_CHECK_LAUNCH();
}

void launch_accumulate(course::Dtype t, std::size_t n, float* acc, const void* part, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<std::size_t>((n + 255) / 256, 4096));
  if (t == course::Dtype::bf16)
    accumulate_kernel<<<blocks, 256, 0, stream>>>(n, acc, static_cast<const __nv_bfloat16*>(part));
  else
    accumulate_kernel<<<blocks, 256, 0, stream>>>(n, acc, static_cast<const __half*>(part));
  CUDA_CHECK_LAUNCH();
}

void launch_round(course::Dtype t, std::size_t n, const float* O_acc, void* O, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<std::size_t>((n + 255) / 256, 4096));
  if (t == course::Dtype::bf16)
    round_kernel<<<blocks, 256, 0, stream>>>(n, O_acc, static_cast<__nv_bfloat16*>(O));
  else
    round_kernel<<<blocks, 256, 0, stream>>>(n, O_acc, static_cast<__half*>(O));
  CUDA_CHECK_LAUNCH();
}

}  // namespace ring
