// Split-KV's second kernel: each row's partial records (o_s, L_s), s = 0 .. S_b − 1, merged by ⊕
// (chapter 04's combine, softmax::merge_weights, taken over all S_b at once): L = log Σ_s e^(L_s),
// o = Σ_s e^(L_s − L)·o_s. A block a row: its threads first take L's maximum and sum over the
// splits, then warp w adds the records s ≡ w (mod 4), four loads in flight a lane, and the four
// warps' sums meet in shared memory. A split that saw none of a row's keys has L_s = −∞ and adds
// nothing. Why a block a row, four warps over the splits: each record is a round trip to the L2
// (~0.3 µs), so one warp walking a row's 47 records in turn takes ~15 µs (NVIDIA H200, a warp a
// row, B = 1, H_q = 32, 32k tokens: 14.6 µs beside the splits' 39 µs; docs/12_inference.md).
#include <cmath>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "decode_common.cuh"
#include "kernels.cuh"

namespace inference {

namespace {

constexpr int kWarps = 4, kAhead = 4;  // warps a row; records a lane loads before it adds them

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_merge(DecodeArgs a, SplitArgs sa, int slots, int heads_q,
                                                            int rows) {
  constexpr int E = D / 32;
  constexpr size_t kRecord = D + 8;
  __shared__ float red[kWarps], o_s[kWarps][D];
  const int j = blockIdx.x, b = blockIdx.y;  // the row j = hq·R + r of sequence b
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hq = j / rows, r = j % rows;
  const Splits sp = split_cache(a.lengths[b], a.page, sa.splits);
  if (sp.count == 1) return;  // the splits' kernel wrote this sequence's O and L
  const size_t l_at = size_t(b) * heads_q * rows + j;
  const float* __restrict__ rec = sa.partial + record_at(l_at, slots, 0, D);
  auto block_reduce = [&](float x, bool is_max) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float y = __shfl_xor_sync(0xffffffffu, x, off);
      x = is_max ? fmaxf(x, y) : x + y;
    }
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = red[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) x = is_max ? fmaxf(x, red[w]) : x + red[w];
    __syncthreads();  // red is free again
    return x;
  };
  float M = -INFINITY;
  for (int s = threadIdx.x; s < sp.count; s += 32 * kWarps) M = fmaxf(M, rec[s * kRecord + D]);
  M = block_reduce(M, true);
  float sum = 0.0f;
  if (M != -INFINITY)
    for (int s = threadIdx.x; s < sp.count; s += 32 * kWarps) sum += __expf(rec[s * kRecord + D] - M);
  sum = block_reduce(sum, false);
  const float L = M == -INFINITY ? -INFINITY : M + logf(sum);
  float o[E] = {};
  if (M != -INFINITY)
    for (int s0 = warp; s0 < sp.count; s0 += kWarps * kAhead) {
      float x[kAhead][E], w[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {  // the loads first, then the sums: kAhead round trips at once
        const int s = s0 + u * kWarps;
        w[u] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) x[u][e] = 0.0f;
        if (s < sp.count) {
          w[u] = rec[s * kRecord + D];
          if constexpr (E == 4) *reinterpret_cast<float4*>(x[u]) = *reinterpret_cast<const float4*>(rec + s * kRecord + lane * E);
          else *reinterpret_cast<float2*>(x[u]) = *reinterpret_cast<const float2*>(rec + s * kRecord + lane * E);
        }
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const float wu = s0 + u * kWarps < sp.count ? __expf(w[u] - L) : 0.0f;  // 0 for L_s = −∞
#pragma unroll
        for (int e = 0; e < E; ++e) o[e] = fmaf(wu, x[u][e], o[e]);
      }
    }
#pragma unroll
  for (int e = 0; e < E; ++e) o_s[warp][lane * E + e] = o[e];
  __syncthreads();
  for (int e = threadIdx.x; e < D; e += 32 * kWarps) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += o_s[w][e];
    a.O[((size_t(b) * rows + r) * heads_q + hq) * D + e] = to_bits<T>(v);
  }
  if (threadIdx.x == 0) a.L[l_at] = L;
}

}  // namespace

void launch_decode_merge(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split) {
  s.validate();
  course::require(split.splits >= 1 && split.partial != nullptr,
                  "decode merge (stage 12): a split count and the partial records");
  course::require(s.d == 64 || s.d == 128, "decode merge (stage 12) runs d = 64 or 128, not d = " + std::to_string(s.d));
  const int slots = max_splits(s, a.page, split.splits);
  const dim3 grid(s.heads_q * s.rows, s.batch());
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) {
    if (half) decode_merge<__half, 64><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows);
    else decode_merge<__nv_bfloat16, 64><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows);
  } else {
    if (half) decode_merge<__half, 128><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows);
    else decode_merge<__nv_bfloat16, 128><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace inference
