// Split-KV's second kernel: each row's partial records (o_s, L_s), s = 0 .. S_b − 1, merged by ⊕
// (chapter 04's combine, softmax::merge_weights, taken over all S_b at once): L = log Σ_s e^(L_s),
// o = Σ_s e^(L_s − L)·o_s. A block a rung's block of rows (its records are contiguous), a warp a row:
// the lanes first take L's maximum and sum over the splits, then each lane adds its d/32 values of
// every record, weighted. A split that saw none of a row's keys has L_s = −∞ and adds nothing.
#include <cmath>
#include <string>

#include "check.hpp"
#include "decode_common.cuh"
#include "kernels.cuh"

namespace inference {

namespace {

constexpr int kWarps = 4;

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_merge(DecodeArgs a, SplitArgs sa, int slots, int heads_q,
                                                            int rows, int group_rows, int block_rows) {
  constexpr int E = D / 32;
  const int tiles = (group_rows + block_rows - 1) / block_rows, h = blockIdx.x / tiles;
  const int first = h * group_rows + (blockIdx.x % tiles) * block_rows;  // j = hq·R + r of the block's first row
  const int n = min(block_rows, (h + 1) * group_rows - first), b = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Splits sp = split_cache(a.lengths[b], a.page, sa.splits);
  if (sp.count == 1) return;  // the splits' kernel wrote this sequence's O and L
  for (int i = warp; i < n; i += kWarps) {
    const int j = first + i, hq = j / rows, r = j % rows;
    const size_t l_at = size_t(b) * heads_q * rows + j;
    const float* rec = sa.partial + record_at(l_at, slots, 0, D);
    constexpr size_t kRecord = D + 8;
    float M = -INFINITY;
    for (int s = lane; s < sp.count; s += 32) M = fmaxf(M, rec[s * kRecord + D]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float sum = 0.0f;
    if (M != -INFINITY)
      for (int s = lane; s < sp.count; s += 32) sum += __expf(rec[s * kRecord + D] - M);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float L = M == -INFINITY ? -INFINITY : M + logf(sum);
    float o[E] = {};
    if (M != -INFINITY)
      for (int s = 0; s < sp.count; ++s) {
        const float w = __expf(rec[s * kRecord + D] - L);  // 0 for L_s = −∞
        float x[E];
        if constexpr (E == 4) *reinterpret_cast<float4*>(x) = *reinterpret_cast<const float4*>(rec + s * kRecord + lane * E);
        else *reinterpret_cast<float2*>(x) = *reinterpret_cast<const float2*>(rec + s * kRecord + lane * E);
#pragma unroll
        for (int e = 0; e < E; ++e) o[e] = fmaf(w, x[e], o[e]);
      }
#pragma unroll
    for (int e = 0; e < E; ++e) a.O[((size_t(b) * rows + r) * heads_q + hq) * D + lane * E + e] = to_bits<T>(o[e]);
    if (lane == 0) a.L[l_at] = L;
  }
}

}  // namespace

void launch_decode_merge(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split,
                         int block_rows) {
  s.validate();
  course::require(split.splits >= 1 && split.partial != nullptr && block_rows >= 1,
                  "decode merge (stage 12): a split count, the partial records and a block's rows");
  course::require(s.d == 64 || s.d == 128, "decode merge (stage 12) runs d = 64 or 128, not d = " + std::to_string(s.d));
  int slots = 1;
  for (int len : s.lengths) slots = std::max(slots, split_cache(len, a.page, split.splits).count);
  const int group_rows = s.group() * s.rows, tiles = (group_rows + block_rows - 1) / block_rows;
  const dim3 grid(s.heads_kv * tiles, s.batch());
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) {
    if (half) decode_merge<__half, 64><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows, group_rows, block_rows);
    else decode_merge<__nv_bfloat16, 64><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows, group_rows, block_rows);
  } else {
    if (half) decode_merge<__half, 128><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows, group_rows, block_rows);
    else decode_merge<__nv_bfloat16, 128><<<grid, 32 * kWarps>>>(a, split, slots, s.heads_q, s.rows, group_rows, block_rows);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace inference
