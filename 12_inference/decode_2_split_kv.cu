// Rung 2: split-KV (Flash-Decoding). Rung 1's block, but each takes one split of its sequence's cache:
// the cache's pages cut into S_b parts (split_cache), a block a part, so that B·H_q·S_b blocks
// fill the GPU even for one sequence. A block's (o, L) over its split's keys is a partial record;
// a second kernel (decode_merge.cu) merges a row's records by ⊕ into O and L. A sequence with one
// split writes O and L itself, as rung 1.
// What it should buy: at B = 1, H_q = 32 rung 1 has 32 blocks on 132 SMs; with S = 16 splits, 512.
// What it costs: Q read once a split, the records written and read back (1 KB a row a split at
// d = 128), a second launch. Still G reads of each K/V head (rung 3). Model: DecodePlan{S, false}.
#include <cmath>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "decode_common.cuh"
#include "kernels.cuh"

namespace inference {

namespace {

constexpr int kWarps = 4, kMaxRows = 8;

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_split_kv(DecodeArgs a, SplitArgs sa, int slots, int heads_q,
                                                               int heads_kv, int rows, float scale_log2) {
  constexpr int E = D / 32;  // a lane's elements of a row: 4 at d = 128 (8 bytes)
  __shared__ float o_s[kWarps][kMaxRows][D];
  __shared__ float m_s[kWarps][kMaxRows], l_s[kWarps][kMaxRows];
  const int split = blockIdx.x, hq = blockIdx.y, b = blockIdx.z, h = hq / (heads_q / heads_kv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = a.lengths[b];
  const Splits sp = split_cache(len, a.page, sa.splits);
  if (split >= sp.count) return;  // the grid has the most splits of any sequence
  const int first = split * sp.pages_each * a.page, end = min(first + sp.pages_each * a.page, len);
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
  for (int pos = first + warp; pos < end; pos += kWarps) {
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
  // The four warps' states by ⊕, as rung 1.
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
    const size_t l_at = (size_t(b) * heads_q + hq) * rows + r;
    if (sp.count == 1) {
      a.O[((size_t(b) * rows + r) * heads_q + hq) * D + e] = to_bits<T>(sum_o / sum_l);
      if (e == 0) a.L[l_at] = M * kLn2 + logf(sum_l);
    } else {  // the record: o (0 for a row that saw none of this split's keys), L (−∞ then), 7 zeros
      float* rec = sa.partial + record_at(l_at, slots, split, D);
      rec[e] = sum_l == 0.0f ? 0.0f : sum_o / sum_l;
      if (e < 8) rec[D + e] = e > 0 ? 0.0f : sum_l == 0.0f ? -INFINITY : M * kLn2 + logf(sum_l);
    }
  }
}

}  // namespace

int auto_splits_split_kv(const DecodeShape& s) {
  int per_sm = 0, sms = 0, device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_split_kv<__half, 128>, 32 * kWarps, 0));
  return choose_splits(s, s.heads_q, std::max(1, per_sm) * sms);
}

void launch_decode_split_kv(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split) {
  s.validate();
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  std::string("split_kv (stage 12) runs fp16 or bf16, not ") + course::name(t));
  course::require(s.d == 64 || s.d == 128, "split_kv (stage 12) runs d = 64 or 128, not d = " + std::to_string(s.d));
  course::require(s.rows <= kMaxRows, "split_kv (stage 12) takes at most " + std::to_string(kMaxRows) +
                                          " query rows a step, not " + std::to_string(s.rows));
  course::require(a.page >= 1 && a.stride >= 1, "split_kv (stage 12): a page of at least one token, a table row of one page");
  course::require(split.splits >= 0, "split_kv (stage 12): splits must be >= 0 (0: auto), not " + std::to_string(split.splits));
  SplitArgs sa = split;
  if (sa.splits == 0) sa.splits = auto_splits_split_kv(s);
  const int slots = max_splits(s, a.page, sa.splits);
  course::require(slots == 1 || sa.partial != nullptr,
                  "split_kv (stage 12): " + std::to_string(slots) + " splits need the partial records' buffer");
  const dim3 grid(slots, s.heads_q, s.batch());
  const float scale_log2 = 1.4426950409f / std::sqrt(float(s.d));
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) {
    if (half) decode_split_kv<__half, 64><<<grid, 32 * kWarps>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale_log2);
    else decode_split_kv<__nv_bfloat16, 64><<<grid, 32 * kWarps>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale_log2);
  } else {
    if (half) decode_split_kv<__half, 128><<<grid, 32 * kWarps>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale_log2);
    else decode_split_kv<__nv_bfloat16, 128><<<grid, 32 * kWarps>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale_log2);
  }
  CUDA_CHECK_LAUNCH();
  if (slots > 1) launch_decode_merge(s, t, a, sa);
}

}  // namespace inference
