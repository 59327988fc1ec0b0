// Rung 1: one block of four warps for each (sequence, query head), a loop over the sequence's cache
// through its block table. Warp w takes the cache's tokens w, w + 4, ...: a lane loads 8 bytes of the
// token's K row and of its V row (the warp: the whole 256-byte row at d = 128, one coalesced request
// each), computes its share of q·k for each query row, and the warp sums the shares by shuffles; the
// online softmax (chapter 04) keeps each row's (m, l, o) in the warp's registers. At the end the four
// warps' states merge by ⊕ in shared memory and O, L are written.
// What it costs: every query head reads its K/V head's cache itself, G = H_q / H_kv times in all
// (rung 3 packs a group into one block); one block a head fills the GPU only when B·H_q blocks do
// (rung 2 splits the cache). The model: decode_model with DecodePlan{1, false}.
#include <cmath>
#include <string>

#include "check.hpp"
#include "decode_common.cuh"
#include "kernels.cuh"

namespace inference {

namespace {

constexpr int kWarps = 4, kMaxRows = 8;

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_per_head(DecodeArgs a, int heads_q, int heads_kv, int rows,
                                                               float scale_log2) {
  constexpr int E = D / 32;  // a lane's elements of a row: 4 at d = 128 (8 bytes)
  __shared__ float o_s[kWarps][kMaxRows][D];
  __shared__ float m_s[kWarps][kMaxRows], l_s[kWarps][kMaxRows];
  const int b = blockIdx.x, hq = blockIdx.y, h = hq / (heads_q / heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = a.lengths[b];
  float q[kMaxRows][E], o[kMaxRows][E], m[kMaxRows], l[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      o[r][e] = 0.0f;
      q[r][e] = r < rows ? to_float<T>(a.Q[((size_t(b) * rows + r) * heads_q + hq) * D + lane * E + e]) * scale_log2 : 0.0f;
    }
  }
  for (int pos = warp; pos < len; pos += kWarps) {
    const int pg = a.table[size_t(b) * a.stride + pos / a.page];
    const size_t at = ((size_t(pg) * a.page + pos % a.page) * heads_kv + h) * D + lane * E;
    float k[E], v[E];
    load_values<T>(a.K + at, k);
    load_values<T>(a.V + at, v);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= rows || pos > len - rows + r) continue;  // warp-uniform: the step's later rows
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot = fmaf(q[r][e], k[e], dot);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const float m_new = fmaxf(m[r], dot), alpha = rescale2(m[r], m_new), p = exp2f(dot - m_new);
      l[r] = l[r] * alpha + p;
#pragma unroll
      for (int e = 0; e < E; ++e) o[r][e] = fmaf(p, v[e], o[r][e] * alpha);
      m[r] = m_new;
    }
  }
  // The four warps' states by ⊕: m = max, l and o rescaled to it and summed.
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    if (r >= rows) continue;
#pragma unroll
    for (int e = 0; e < E; ++e) o_s[warp][r][lane * E + e] = o[r][e];
    if (lane == 0) m_s[warp][r] = m[r], l_s[warp][r] = l[r];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * D; i += 32 * kWarps) {
    const int r = i / D, e = i % D;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w][r]);
    float sum_l = 0.0f, sum_o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = m_s[w][r] == -INFINITY ? 0.0f : exp2f(m_s[w][r] - M);  // a warp that saw no key adds nothing
      sum_l += f * l_s[w][r];
      sum_o += f * o_s[w][r][e];
    }
    a.O[((size_t(b) * rows + r) * heads_q + hq) * D + e] = to_bits<T>(sum_o / sum_l);
    if (e == 0) a.L[(size_t(b) * heads_q + hq) * rows + r] = M * 0.69314718f + logf(sum_l);  // natural log
  }
}

}  // namespace

void launch_decode_per_head(const DecodeShape& s, course::Dtype t, const DecodeArgs& a) {
  s.validate();
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  std::string("per_head (stage 12) runs fp16 or bf16, not ") + course::name(t));
  course::require(s.d == 64 || s.d == 128, "per_head (stage 12) runs d = 64 or 128, not d = " + std::to_string(s.d));
  course::require(s.rows <= kMaxRows, "per_head (stage 12) takes at most " + std::to_string(kMaxRows) +
                                          " query rows a step, not " + std::to_string(s.rows));
  course::require(a.page >= 1 && a.stride >= 1, "per_head (stage 12): a page of at least one token, a table row of one page");
  const dim3 grid(s.batch(), s.heads_q);
  const float scale_log2 = 1.4426950409f / std::sqrt(float(s.d));
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) {
    if (half) decode_per_head<__half, 64><<<grid, 32 * kWarps>>>(a, s.heads_q, s.heads_kv, s.rows, scale_log2);
    else decode_per_head<__nv_bfloat16, 64><<<grid, 32 * kWarps>>>(a, s.heads_q, s.heads_kv, s.rows, scale_log2);
  } else {
    if (half) decode_per_head<__half, 128><<<grid, 32 * kWarps>>>(a, s.heads_q, s.heads_kv, s.rows, scale_log2);
    else decode_per_head<__nv_bfloat16, 128><<<grid, 32 * kWarps>>>(a, s.heads_q, s.heads_kv, s.rows, scale_log2);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace inference
