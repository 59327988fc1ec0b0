// The two small passes around the backward's main loop.
//
// preprocess: D = rowsum(dO ∘ O), one float a row (FA-2's Algorithm 2, line 4): the term every
// dS_ij = P_ij·(dP_ij − D_i) needs. It equals rowsum(P ∘ dP) (docs/07_backward.md), but costs one
// pass over O and dO instead of one over N² values. The atomic variants also zero dQacc here.
// IO: O and dO read once, D written once (and dQacc written once): 2·e·N·d + 4·N (+ 4·N·d).
// With BackwardArgs::O32 (chapter 07's "precision of D"), O is read in fp32, before its rounding:
// 4·N·d instead of e·N·d.
//
// convert: dQ = scale·dQacc in the dtype. IO: 4·N·d read, e·N·d written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "check.hpp"
#include "kernels.cuh"

namespace attention {

namespace {

constexpr int kThreads = 256;

// 16 bytes of values as floats (4 floats, or 8 16-bit values).
template <class T>
struct Chunk;
template <>
struct Chunk<float> {
  static constexpr int n = 4;
  __device__ static void load(const void* p, float* x) {
    const float4 v = __ldcg(static_cast<const float4*>(p));
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  }
};
template <class T>
struct Chunk16 {
  static constexpr int n = 8;
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  __device__ static float2 to_float2(T2 v) {
    if constexpr (std::is_same_v<T, __half>) return __half22float2(v);
    else return __bfloat1622float2(v);
  }
  __device__ static T2 from_float2(float a, float b) {
    if constexpr (std::is_same_v<T, __half>) return __floats2half2_rn(a, b);
    else return __floats2bfloat162_rn(a, b);
  }
  __device__ static void load(const void* p, float* x) {
    const uint4 v = __ldcg(static_cast<const uint4*>(p));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 4; ++k) {
      const float2 f = to_float2(*reinterpret_cast<const T2*>(&w[k]));
      x[2 * k] = f.x, x[2 * k + 1] = f.y;
    }
  }
};
template <>
struct Chunk<__half> : Chunk16<__half> {};
template <>
struct Chunk<__nv_bfloat16> : Chunk16<__nv_bfloat16> {};

// One block: kPreprocessRows rows. Thread f % C takes chunk c of row f / C (C chunks a row, 8 to
// 32: a row's chunks are neighbouring lanes of one warp, summed with shuffles).
// TO: O's type, T's or float (O before its rounding: C::n floats in C::n / 4 loads).
template <class TO, class T, int D>
__global__ void __launch_bounds__(kThreads) backward_preprocess(const TO* __restrict__ O, const T* __restrict__ dO,
                                                                float* __restrict__ Dv, float* __restrict__ dQacc, int N) {
  using C = Chunk<T>;
  constexpr int kChunks = D / C::n, kRows = kPreprocessRows;
  static_assert(kChunks <= 32 && kThreads % kChunks == 0, "a row's chunks in one warp");
  __shared__ float Ds[kRows];
  const int row0 = blockIdx.x * kRows, rows = min(kRows, N - row0);
  const size_t head = size_t(blockIdx.y) * N * D;
  for (int f = threadIdx.x; f < kRows * kChunks; f += kThreads) {
    const int r = f / kChunks, c = f % kChunks;
    float sum = 0.0f;
    if (r < rows) {
      float o[C::n], g[C::n];
      const size_t at = head + size_t(row0 + r) * D + c * C::n;
      if constexpr (std::is_same_v<TO, T>) C::load(O + at, o);
      else
#pragma unroll
        for (int k = 0; k < C::n; k += 4) Chunk<float>::load(O + at + k, o + k);
      C::load(dO + at, g);
#pragma unroll
      for (int k = 0; k < C::n; ++k) sum = fmaf(o[k], g[k], sum);
    }
#pragma unroll
    for (int offset = kChunks / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (c == 0) Ds[r] = sum;
  }
  if (dQacc)
    for (int f = threadIdx.x; f < rows * D / 4; f += kThreads)
      __stcg(reinterpret_cast<float4*>(dQacc + head + size_t(row0) * D) + f, make_float4(0.f, 0.f, 0.f, 0.f));
  __syncthreads();
  if (threadIdx.x < rows) Dv[size_t(blockIdx.y) * N + row0 + threadIdx.x] = Ds[threadIdx.x];
}

// Thread x: 4 values of dQ from 4 floats of dQacc (one 16-byte load): a warp reads 512
// neighbouring bytes and writes 256 or 512, whole sectors both. (Measured: with 8 values a thread,
// two 16-byte loads each covering half of every sector a warp touches, the L2 delivered dQacc
// twice.)
template <class T>
__device__ inline void store4(T* p, float a, float b, float c, float d) {
  if constexpr (std::is_same_v<T, float>) {
    __stcg(reinterpret_cast<float4*>(p), make_float4(a, b, c, d));
  } else {
    const auto lo = Chunk16<T>::from_float2(a, b), hi = Chunk16<T>::from_float2(c, d);
    __stcg(reinterpret_cast<uint2*>(p), make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                                   *reinterpret_cast<const uint32_t*>(&hi)));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) dq_convert(const float* __restrict__ dQacc, T* __restrict__ dQ,
                                                       size_t quads, float scale) {
  for (size_t x = blockIdx.x * size_t(kThreads) + threadIdx.x; x < quads; x += size_t(gridDim.x) * kThreads) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(dQacc) + x);
    store4(dQ + 4 * x, a.x * scale, a.y * scale, a.z * scale, a.w * scale);
  }
}

// Calls f(T{}, integral_constant<D>) for the run's dtype and d.
template <class F>
void dispatch(const Shape& s, course::Dtype t, F&& f) {
  require_supported(s);
  auto by_d = [&](auto zero) {
    using T = decltype(zero);
    if (s.d == 32) f(T{}, std::integral_constant<int, 32>{});
    else if (s.d == 64) f(T{}, std::integral_constant<int, 64>{});
    else f(T{}, std::integral_constant<int, 128>{});
  };
  if (t == course::Dtype::fp32) by_d(float{});
  else if (t == course::Dtype::fp16) by_d(__half{});
  else by_d(__nv_bfloat16{});
}

}  // namespace

void launch_backward_preprocess(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  dispatch(s, t, [&](auto zero, auto d) {
    using T = decltype(zero);
    const dim3 grid((s.N + kPreprocessRows - 1) / kPreprocessRows, s.heads());
    if constexpr (!std::is_same_v<T, float>)
      if (a.O32) {
        backward_preprocess<float, T, decltype(d)::value>
            <<<grid, kThreads>>>(a.O32, static_cast<const T*>(a.dO), a.D, a.dQacc, s.N);
        CUDA_CHECK_LAUNCH();
        return;
      }
    backward_preprocess<T, T, decltype(d)::value><<<grid, kThreads>>>(
        static_cast<const T*>(a.O), static_cast<const T*>(a.dO), a.D, a.dQacc, s.N);
    CUDA_CHECK_LAUNCH();
  });
}

void launch_dq_convert(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  dispatch(s, t, [&](auto zero, auto) {
    using T = decltype(zero);
    const size_t quads = s.elements() / 4;
    const unsigned blocks = unsigned(std::min<size_t>((quads + kThreads - 1) / kThreads, 132 * 16));
    dq_convert<T><<<blocks, kThreads>>>(a.dQacc, static_cast<T*>(a.dQ), quads, 1.0f / std::sqrt(float(s.d)));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention
