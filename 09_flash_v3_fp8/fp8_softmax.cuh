// The softmax pieces of stage 09's rungs, on S's accumulator: the scores' unit (the descales folded
// into the exponent), the row max and P̃ = 2^(x − m + 8) for key blocks of 128 (rungs 1, 2) and of
// 256 (rungs 3-7, with the lazy rescale and the optimistic max), the causal diagonal's mask and dead
// steps (rung 5), and o's rescale and the row sums out of the accumulator (rungs 3-7).
//
// P̃ · 2^8: P̃ = 2^(x − m) is at most 1, and e4m3's normal range starts at 2^-6, so the small weights
// of a long row would be subnormal (fewer bits) or 0. The exponent subtracts m − 8 instead: P̃ in
// [0, 256], O = o/l unchanged (l sums the same scaled values), L less 8 ln 2.
#pragma once

#include <cfloat>

#include "fp8_mma.cuh"

namespace attention::fp8 {

// A block's multiplier c·sq·sk (its scores' unit), never 0. Below 2^-149 it rounds to 0 in fp32, and a
// masked score (−inf) times 0 is NaN. Only bf16 inputs get there (an amax below 2^-119 is floored there,
// a descale of 2^-127.8: two multiply to 2^-255.6). Every score is then below 448²·d·2^-149 < 2^-100,
// which no exponential tells from 0; floored at FLT_MIN (2^-126), still below 2^-100. One FMNMX a block.
__device__ inline float score_unit(float cq, float sk) { return fmaxf(cq * sk, FLT_MIN); }

// Rungs 1 and 2: stage 08's softmax_scores_tuned with the block's multiplier cj = scale·log₂e·sq·sk_j:
// m is in units of x = S_acc·cj; P̃ = 2^(x − m + 8). kSum = false: l is not summed here (rung 2 on:
// the tensor cores sum it with P̃·V). kLin (rung 7): S left as lin_t's floats, which pack_p<kBc, true>
// turns into P̃'s bytes (l then from the tensor cores).
template <bool kSum, int NT, bool kLin = false>
__device__ void softmax_scores(float (&S)[NT][4], float (&m)[2], float (&l)[2], float cj, float (&alpha)[2]) {
  static_assert(!(kLin && kSum), "P̃ by fp16's bit pattern: l on the tensor cores");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[4] = {S[0][2 * h], S[0][2 * h + 1], S[1][2 * h], S[1][2 * h + 1]};
#pragma unroll
    for (int n = 2; n < NT; n += 2)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = fmaxf(v[e], S[n + e / 2][2 * h + e % 2]);
    fa3::tree_reduce(v, [](float a, float b) { return fmaxf(a, b); });
    const float m_new = tc::quad_max(fmaxf(m[h], v[0] * cj));
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::exp2_approx(m[h] - shift);
    m[h] = m_new;
    const float base = shift - 8.0f;  // P̃ · 2^8
    if constexpr (kLin) {  // one multiplier a block (cj) and one offset a row: lin_t's FFMA.SAT operands
      const float a = lin_a(cj), b = lin_b(base);
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) S[n][e] = lin_t(S[n][e], a, b);
      continue;
    }
    float sum[4] = {};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        const float x = fmaf(S[n][e], cj, -base);
        S[n][e] = ptx::exp2_approx(x);
        if constexpr (kSum) sum[(n % 2) * 2 + e % 2] += S[n][e];
      }
    if constexpr (kSum) {
      fa3::tree_reduce(sum, [](float a, float b) { return a + b; });
      l[h] = l[h] * alpha[h] + sum[0];
    }
  }
}

// ---- rungs 3-7: key blocks of 256 ----
// The lazy rescale (FlashAttention-4's): m moves only when the block's max passes it by more than
// kLazyTau (log₂ units); otherwise alpha is exactly 1 and o needs no rescale. P̃ is then at most
// 2^(8 + kLazyTau), inside e4m3's 448 = 2^8.8.
constexpr float kLazyTau = 0.8f;
// The optimistic max: m = max(m, the block's max + kHeadroom) for every row, so that the next blocks'
// scores mostly stay below m (P̃ at most 2^(8 − kHeadroom) right after a move).
constexpr float kHeadroom = 3.0f;

// The row max and P̃ for 256 keys: tiles 0..15 with K's descale c0, 16..31 with c1 (each half's max
// scaled by its own, positive, multiplier). kOptimistic: m as the optimistic max moves it (else the
// lazy rescale's rule). kLin (rung 7): S left as lin_t's floats, which pack_p<Bc, true> turns into bytes.
template <int NT, bool kOptimistic = false, bool kLin = false>
__device__ void softmax_scores_wide(float (&S)[NT][4], float (&m)[2], float c0, float c1, float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[2][4];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int n0 = x * NT / 2;
#pragma unroll
      for (int e = 0; e < 4; ++e) v[x][e] = S[n0 + e / 2][2 * h + e % 2];
#pragma unroll
      for (int n = n0 + 2; n < n0 + NT / 2; n += 2)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[x][e] = fmaxf(v[x][e], S[n + e / 2][2 * h + e % 2]);
      fa3::tree_reduce(v[x], [](float a, float b) { return fmaxf(a, b); });
    }
    const float block_max = fmaxf(v[0][0] * c0, v[1][0] * c1);
    float m_new;
    if constexpr (kOptimistic) {  // the block's own max + kHeadroom: a row whose m is higher keeps it
      m_new = fmaxf(m[h], tc::quad_max(block_max) + kHeadroom);
    } else {
      m_new = tc::quad_max(fmaxf(m[h], block_max));
      m_new = m_new > m[h] + kLazyTau ? m_new : m[h];
    }
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::exp2_approx(m[h] - shift);
    m[h] = m_new;
    const float base = shift - 8.0f;  // P̃ · 2^8
    if constexpr (kLin) {
      const float base2[2] = {base, base};
      const LinP lp(c0, c1, base2);
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) S[n][e] = lin_t(S[n][e], lp.a[n < NT / 2 ? 0 : 1], lp.b[0]);
    } else {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) S[n][e] = ptx::exp2_approx(fmaf(S[n][e], n < NT / 2 ? c0 : c1, -base));
    }
  }
}

// The optimistic step (rung 3 on): P̃ = 2^(x − m + 8) for the block's 256 keys with m as it stands,
// no row max taken; packed as pack_p and stored as store_p, 32 keys at a time, S left as it was.
// Returns true if some P̃ reached e4m3's largest value, 448 (it rounds there from 432 = 2^8.755 up: x
// passed m by 0.755 or more): then m must move and the block be done again. The test is on the
// packed bytes: e4m3's codes are ordered as its values, P̃ ≥ 0 and saturates at 0x7E, so adding 2 to
// every byte carries into its top bit only from 0x7E (FlashDecoding++'s "unified max" with its
// recomputation on overflow).
template <int NT, bool kLin = false>
__device__ bool optimistic_p(const float (&S)[NT][4], const float (&m)[2], float c0, float c1, uint32_t Ps,
                             int warp_in_wg) {
  const float base[2] = {(m[0] == -INFINITY ? 0.0f : m[0]) - 8.0f, (m[1] == -INFINITY ? 0.0f : m[1]) - 8.0f};
  [[maybe_unused]] const LinP lp(c0, c1, base);
  uint32_t hit = 0;
#pragma unroll
  for (int s = 0; s < NT / 4; ++s) {
    const float c = s < NT / 8 ? c0 : c1;
    float e[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if constexpr (kLin) e[q][x] = lin_t(S[4 * s + q][x], lp.a[s < NT / 8 ? 0 : 1], lp.b[x / 2]);
        else e[q][x] = ptx::exp2_approx(fmaf(S[4 * s + q][x], c, -base[x / 2]));
      }
    const uint32_t w[4] = {pack4<kLin>(e[0][0], e[0][1], e[1][0], e[1][1]), pack4<kLin>(e[0][2], e[0][3], e[1][2], e[1][3]),
                           pack4<kLin>(e[2][0], e[2][1], e[3][0], e[3][1]), pack4<kLin>(e[2][2], e[2][3], e[3][2], e[3][3])};
    hit |= (w[0] + 0x02020202u) | (w[1] + 0x02020202u) | (w[2] + 0x02020202u) | (w[3] + 0x02020202u);
    hopper::stmatrix_x4(p_step_address(Ps, s, warp_in_wg), w);
  }
  hopper::fence_proxy_async();
  return (hit & 0x80808080u) != 0;
}

// The softmax of a block and its P̃ in the tile at Ps() (a callable, the address formed where it is
// used; the tile's last reader, the P̃·V two blocks back, has completed), with the block's
// multipliers c0, c1 (K's two descales folded in). kOptimistic, after the tile's first block
// (optimistic): P̃ with m as it stands, and only if some P̃ overflowed (any lane of the warp: the
// branch is the warp's) the row max and P̃ again.
template <int NT, bool kOptimistic, bool kLin = false, class Address>
__device__ void softmax_p_wide(float (&S)[NT][4], uint32_t (&P)[NT / 4][4], float (&m)[2], float (&alpha)[2],
                               float c0, float c1, bool optimistic, const Address& Ps, int warp_in_wg) {
  if (kOptimistic && optimistic) {
    alpha[0] = alpha[1] = 1.0f;
    if (!__any_sync(0xffffffffu, optimistic_p<NT, kLin>(S, m, c0, c1, Ps(), warp_in_wg))) return;
  }
  softmax_scores_wide<NT, kOptimistic, kLin>(S, m, c0, c1, alpha);
  pack_p<NT * 8, kLin>(S, P);
  store_p<NT * 8>(P, Ps(), warp_in_wg);
}

// Rung 5: the causal mask of a key block that ends at or before N: the scores of keys after their
// query become −∞, N never checked. Score S[n][e] of lane (g, t) is query row0 + g + 8·(e / 2)
// against key col0 + 8n + 2t + e % 2, so with the lane's constant d = row0 + g − col0 − 2t it is
// masked when 8n + e % 2 − 8·(e / 2) > d: a compile-time number against one register, one compare
// and one select a score (tc::mask_scores: a key, two compares and the select).
template <int NT>
__device__ void mask_causal(float (&S)[NT][4], int row0, int col0) {
  const int d = row0 + tc::lane_id() / 4 - col0 - 2 * (tc::lane_id() % 4);
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (8 * n + e % 2 - 8 * (e / 2) > d) S[n][e] = -INFINITY;
}

// Rung 5: the causal diagonal's block, a tile's first: softmax_p_wide's first step (the row max, m
// with kHeadroom, P̃ stored) for a warp whose rows, dw to dw + 15 counted from the block's first key,
// see only the keys up to dw + 15. A 32-key step past them (s ≥ live) holds only masked scores: no
// mask, no max, no exponentials there, its P̃ stored as zeros. A step that reaches past the first row
// (32s + 31 > dw) gets mask_causal's compares; the steps before it none. On every score it keeps,
// the same instructions as softmax_scores_wide and pack_p, so P̃ and m come out bit for bit the same.
template <int NT, bool kLin = false, class Address>
__device__ void softmax_p_diag(float (&S)[NT][4], float (&m)[2], float (&alpha)[2], float c0, float c1,
                               const Address& Ps, int warp_in_wg, int dw) {
  constexpr int kSteps = NT / 4;
  const int lane = tc::lane_id(), dl = dw + lane / 4 - 2 * (lane % 4);  // mask_causal's d
  const int live = dw + 15 < 0 ? 0 : min(kSteps, (dw + 15) / 32 + 1);
  float v[2][2][2];  // the row max: [row g, g + 8][the block's half: c0, c1][column parity]
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int x = 0; x < 2; ++x) v[h][x][0] = v[h][x][1] = -INFINITY;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s >= live) continue;
    const bool edge = 32 * s + 31 > dw;
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = 4 * s + q;
        if (edge && 8 * n + e % 2 - 8 * (e / 2) > dl) S[n][e] = -INFINITY;
        float& a = v[e / 2][s / (kSteps / 2)][e % 2];
        a = fmaxf(a, S[n][e]);
      }
  }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // softmax_scores_wide's, kOptimistic
    const float block_max = fmaxf(fmaxf(v[h][0][0], v[h][0][1]) * c0, fmaxf(v[h][1][0], v[h][1][1]) * c1);
    const float m_new = fmaxf(m[h], tc::quad_max(block_max) + kHeadroom);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::exp2_approx(m[h] - shift);
    m[h] = m_new;
    base[h] = shift - 8.0f;
  }
  [[maybe_unused]] const LinP lp(c0, c1, base);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (s < live) {
      const float c = s < kSteps / 2 ? c0 : c1;
      float e[4][4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int x = 0; x < 4; ++x)
          e[q][x] = kLin ? lin_t(S[4 * s + q][x], lp.a[s < kSteps / 2 ? 0 : 1], lp.b[x / 2])
                         : ptx::exp2_approx(fmaf(S[4 * s + q][x], c, -base[x / 2]));
      w[0] = pack4<kLin>(e[0][0], e[0][1], e[1][0], e[1][1]);
      w[1] = pack4<kLin>(e[0][2], e[0][3], e[1][2], e[1][3]);
      w[2] = pack4<kLin>(e[2][0], e[2][1], e[3][0], e[3][1]);
      w[3] = pack4<kLin>(e[2][2], e[2][3], e[3][2], e[3][3]);
    }
    hopper::stmatrix_x4(p_step_address(Ps(), s, warp_in_wg), w);
  }
  hopper::fence_proxy_async();
}

// o = o·alpha (and l) before the P̃·V that adds the block whose softmax set alpha (lazy: skipped while
// alpha is 1); then the fence: o was written, the wgmma that adds into it comes after.
template <int J>
__device__ void rescale_wide(float (&o)[J][4], float (&l)[2], const float (&alpha)[2]) {
  if (alpha[0] != 1.0f || alpha[1] != 1.0f) {
#pragma unroll
    for (int d = 0; d < J - 1; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[d][e] *= alpha[e / 2];
    l[0] *= alpha[0], l[1] *= alpha[1];
  }
  hopper::wgmma_fence();
}
// The block's row sums out of the accumulator's last tile (the ones' columns) into l (fp32), and that
// tile zeroed: a fresh accumulator for l alone (summed over all N keys in the tensor cores, its
// positive terms drifted low: L 0.034 too small at N = 2049). Under a condition (a no-op when it
// fails: the tile's four values are two sums, each twice): written unconditionally, ptxas serialised
// every wgmma (its C7511, "insufficient register resources").
template <int J>
__device__ void take_row_sums(float (&o)[J][4], float (&l)[2]) {
  l[0] += o[J - 1][0], l[1] += o[J - 1][2];
  if (o[J - 1][0] != 0.0f || o[J - 1][2] != 0.0f)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[J - 1][e] = 0.0f;
}

}  // namespace attention::fp8
