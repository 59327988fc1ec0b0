// What the tensor-core decode rungs (3 and 4) share: a block of up to 16 query rows of one K/V
// head, 4 warps, each taking 16 keys of every 64-key tile with stage 06's warp step; the key tile's
// load through the block table; the rows' Q; the last key each row sees; and the end, where the
// four warps' (m, l, o) merge by ⊕ and the rows' O and L (or their split's partial record) are
// written. Device code of stage 12.
#pragma once

#include <cmath>
#include <string>

#include "../06_flash_v2/tc_common.cuh"
#include "algorithm.hpp"
#include "check.hpp"
#include "decode_common.cuh"
#include "kernels.cuh"

namespace inference::tcd {

namespace tc = attention::tc;

constexpr int kWarps = 4, kRows = 16, kKeys = 64;  // a block's rows; a key tile (16 a warp)

// The block's rows: j = hq·R + r in L's order, the n ≤ 16 of them from first_j, of K/V head h.
struct RowTile {
  int h, first_j, n;
};
__device__ inline RowTile row_tile(unsigned y, int group_rows) {
  const int tiles_a_group = (group_rows + kRows - 1) / kRows, h = y / tiles_a_group;
  const int first_j = h * group_rows + (y % tiles_a_group) * kRows;
  return {h, first_j, min(kRows, (h + 1) * group_rows - first_j)};
}

// Key tile [key0, key0 + 64) of the split (keys at or past `end` zero-filled) into Ks and Vs,
// swizzled, each key's row found through the block table.
template <int D>
__device__ void load_keys(uint16_t* Ks, uint16_t* Vs, const DecodeArgs& a, int b, int h, int heads_kv, int key0,
                          int end) {
  constexpr int kChunks = D / 8, kStep = 32 * kWarps / kChunks;  // 16-byte chunks a row; rows a pass
  const int c = threadIdx.x % kChunks;
#pragma unroll
  for (int r = threadIdx.x / kChunks; r < kKeys; r += kStep) {
    const int pos = key0 + r;
    const bool valid = pos < end;
    size_t at = 0;  // a row past the end reads nothing (src-size 0): any address will do
    if (valid) at = ((size_t(a.table[size_t(b) * a.stride + pos / a.page]) * a.page + pos % a.page) * heads_kv + h) * D;
    ptx::cp_async_16(Ks + ptx::swizzle<D>(r, c), a.K + at + 8 * c, valid);
    ptx::cp_async_16(Vs + ptx::swizzle<D>(r, c), a.V + at + 8 * c, valid);
  }
}

// Where row i of the tile starts in Q (and O): j = hq·R + r, Q is [B][R][H_q][d].
__device__ inline size_t q_row(int b, int j, int rows, int heads_q, int d) {
  return ((size_t(b) * rows + j % rows) * heads_q + j / rows) * d;
}

// The last key each of the lane's rows g, g + 8 sees (speculative rows are causal among themselves).
__device__ inline void last_keys(int (&last)[2], int len, int rows, int first_j) {
  const int lane = threadIdx.x % 32, g = lane / 4;
#pragma unroll
  for (int e = 0; e < 2; ++e) last[e] = len - rows + (first_j + g + 8 * e) % rows;
}

// One 64-key tile into the warp's state: S = Q·Kᵀ for its 16 keys, masked past `end` and past each
// row's last key, then the online softmax and O += P̃·V (stage 06's warp step).
template <class T, int D>
__device__ void tile_step(float (&o)[1][D / 8][4], float (&m)[1][2], float (&l)[1][2], const uint32_t (&q)[1][D / 16][4],
                          const uint16_t* Ks, int key0, int end, const int (&last)[2], float scale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const uint16_t* Kw = Ks + 16 * warp * D;  // the warp's 16 keys (swizzle: rows mod 8 kept)
  const uint16_t* Vw = Kw + kKeys * D;
  float S[1][2][4] = {};
  tc::qk_ldmatrix<T, D, 1, 2>(S, q, Kw);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = key0 + 16 * warp + 8 * nt + 2 * t + e % 2;
      if (pos >= end || pos > last[e / 2]) S[0][nt][e] = -INFINITY;
    }
  uint32_t P[1][1][4];
  tc::online_softmax<T, true>(S, o, m, l, scale, P);
  tc::pv_ldmatrix<T, D, 1, 2>(o, P, Vw);
}

// The end of a block's split: the four warps' (m, l, o) by ⊕ in `scratch` (kWarps·16·(D + 2)
// floats, free shared memory), then each row's O and L when the sequence has one split, else its
// partial record. A caller that reuses `scratch` synchronises the block first.
template <class T, int D>
__device__ void finish(float* scratch, const float (&o)[1][D / 8][4], const float (&m)[1][2], const float (&l)[1][2],
                       const DecodeArgs& a, const SplitArgs& sa, int slots, int heads_q, int rows, int b, int first_j,
                       int n, int split, int count, float scale) {
  constexpr int DT = D / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float* o_s = scratch;                    // [warp][row][D]
  float* m_s = o_s + kWarps * kRows * D;  // [warp][row]
  float* l_s = m_s + kWarps * kRows;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int row = g + 8 * e;
    const float lsum = tc::quad_sum(l[0][e]);
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o_s[(warp * kRows + row) * D + 8 * dt + 2 * t] = o[0][dt][2 * e];
      o_s[(warp * kRows + row) * D + 8 * dt + 2 * t + 1] = o[0][dt][2 * e + 1];
    }
    if (t == 0) m_s[warp * kRows + row] = m[0][e], l_s[warp * kRows + row] = lsum;
  }
  __syncthreads();
  const float c = scale * ptx::kLog2e;
  for (int f = threadIdx.x; f < n * D; f += 32 * kWarps) {
    const int i = f / D, e = f % D, j = first_j + i;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w * kRows + i]);
    float sum_l = 0.0f, sum_o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float mw = m_s[w * kRows + i], fw = mw == -INFINITY ? 0.0f : exp2f((mw - M) * c);
      sum_l += fw * l_s[w * kRows + i];
      sum_o += fw * o_s[(w * kRows + i) * D + e];
    }
    const size_t l_at = size_t(b) * heads_q * rows + j;
    const float L = sum_l == 0.0f ? -INFINITY : M * scale + logf(sum_l);  // raw scores' max: L = scale·M + ln l
    if (count == 1) {
      a.O[q_row(b, j, rows, heads_q, D) + e] = to_bits<T>(sum_o / sum_l);
      if (e == 0) a.L[l_at] = L;
    } else {
      float* rec = sa.partial + record_at(l_at, slots, split, D);
      rec[e] = sum_l == 0.0f ? 0.0f : sum_o / sum_l;
      if (e < 8) rec[D + e] = e > 0 ? 0.0f : L;
    }
  }
}

// What a tensor-core rung's launcher checks before it launches (throwing course::UsageError), and
// what it then runs: the split count (auto_splits' for 0), the partial records' slots (the most
// splits of any sequence) and the row tiles of a sequence (H_kv · ⌈G·R / 16⌉).
struct Launch {
  SplitArgs sa;
  int slots, row_tiles;
};
inline Launch check_launch(const std::string& rung, const DecodeShape& s, course::Dtype t, const DecodeArgs& a,
                           const SplitArgs& split, int (*auto_splits)(const DecodeShape&)) {
  s.validate();
  const std::string who = rung + " (stage 12)";
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16, who + " runs fp16 or bf16, not " + course::name(t));
  course::require(s.d == 64 || s.d == 128, who + " runs d = 64 or 128, not d = " + std::to_string(s.d));
  course::require(a.page >= 1 && a.stride >= 1, who + ": a page of at least one token, a table row of one page");
  course::require(split.splits >= 0, who + ": splits must be >= 0 (0: auto), not " + std::to_string(split.splits));
  Launch l{split, 1, s.heads_kv * ((s.group() * s.rows + kRows - 1) / kRows)};
  if (l.sa.splits == 0) l.sa.splits = auto_splits(s);
  l.slots = max_splits(s, a.page, l.sa.splits);
  course::require(l.slots == 1 || l.sa.partial != nullptr,
                  who + ": " + std::to_string(l.slots) + " splits need the partial records' buffer");
  return l;
}

}  // namespace inference::tcd
