// What the tensor-core rungs share: the kernel's parameters, the tile loads, the fragment loads
// (plain ones for rung 1, ldmatrix from rung 2 on), the mask, the online-softmax step on the
// accumulators, and the epilogue. Each rung's own file (tc1_mma.cu ... tc3_cp_async.cu, then rung
// 4's steps tc4a_exp2.cu ... tc4d_heaviest_first.cu and tc4_tuned.cu) is the loop that strings
// these together; the differences between those files are the lessons.
//
// Layout on chip: a tile of R rows × D halves (16-bit values) in shared memory, row-major; from
// rung 2 on, 16-byte chunks swizzled (ptx::swizzle). Warp w owns the rows 16·MT·w .. 16·MT·(w+1)−1
// of the query block (MT "m-tiles" of 16 rows). Its registers hold, per m-tile:
//   S[NT][4]   the scores of its 16 rows × Bc keys (NT = Bc/8 accumulator tiles)
//   o[DT][4]   its 16 rows of O (DT = D/8 tiles), unnormalised, in fp32
//   m[2], l[2] the running max (of the raw scores) and the lane's share of the row sum, rows g, g+8
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "ptx.cuh"

namespace attention::tc {

// Q, K, V and O hold 16-bit values (fp16 or bf16: the kernel's template argument T says which;
// moving them around does not need to know).
struct Params {
  const uint16_t* __restrict__ Q;
  const uint16_t* __restrict__ K;
  const uint16_t* __restrict__ V;
  uint16_t* __restrict__ O;
  float* __restrict__ L;
  int N;
  bool causal;
  float scale;  // 1/√d
  int Nk;       // keys at or past Nk are hidden: N, except in stage 10, whose chunks end in padding rows
  // Not null: write_output also writes O before its rounding, in fp32 (stage 07's D from the
  // unrounded O; launch_tc_tuned_unrounded).
  float* O32 = nullptr;
};

__device__ inline int lane_id() { return threadIdx.x % 32; }

// --- tiles: global -> shared ----------------------------------------------------------------------
// R rows of D halves from `src` (rows of D, 16-byte aligned) into shared memory, 16 bytes a thread
// per step; rows >= `rows` are zero-filled and not read. Consecutive threads take consecutive
// chunks of a row: each warp reads whole 128-byte lines.

// Through registers (rungs 1 and 2): the thread waits for its load before it stores to shared.
template <int D, int R, int kThreads, bool kSwizzle>
__device__ void load_tile_sync(uint16_t* smem, const uint16_t* src, int rows) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int f = threadIdx.x; f < R * kChunks; f += kThreads) {
    const int r = f / kChunks, c = f % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = __ldcg(reinterpret_cast<const uint4*>(src + size_t(r) * D) + c);
    *reinterpret_cast<uint4*>(smem + (kSwizzle ? ptx::swizzle<D>(r, c) : r * D + 8 * c)) = v;
  }
}

// With cp.async (rung 3 on): the copies run in the background, always swizzled. A thread
// always copies the same chunk c of rows r0, r0 + S, r0 + 2S, ... (S = kThreads / chunks a row),
// and (r0 + kS) & 7 = r0 & 7 when S is a multiple of 8: its shared and global addresses both
// advance by a constant stride, one base register each (and immediate offsets) instead of one
// address per copy.
template <int D, int R, int kThreads>
__device__ void load_tile_async(uint16_t* smem, const uint16_t* src, int rows) {
  constexpr int kChunks = D / 8, kStride = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kStride % 8 == 0 && R % kStride == 0, "tile shape");
  const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  uint16_t* dst = smem + ptx::swizzle<D>(r0, c);
  src += size_t(r0) * D + 8 * c;
#pragma unroll
  for (int s = 0; s < R / kStride; ++s) {
    // A row past the end reads nothing (src-size 0): its address is never dereferenced.
    ptx::cp_async_16(dst + s * kStride * D, src + s * kStride * D, r0 + s * kStride < rows);
  }
}

// --- fragments, rung 1: plain 32-bit shared-memory loads from an unswizzled tile -----------------
__device__ inline uint32_t lds32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// The A fragments of the 16 rows from `row0` of Q, for every 16-wide step k of d.
template <int D>
__device__ void load_q_plain(uint32_t (&q)[D / 16][4], const uint16_t* Qs, int row0) {
  const int g = lane_id() / 4, t = lane_id() % 4;
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const uint16_t* p = Qs + (row0 + g) * D + 16 * k + 2 * t;
    q[k][0] = lds32(p);
    q[k][1] = lds32(p + 8 * D);
    q[k][2] = lds32(p + 8);
    q[k][3] = lds32(p + 8 * D + 8);
  }
}

// S += Q·K_jᵀ for 16 rows: B[k][n] = K[n][k], so a lane's b[0] is K[key g][2t, 2t+1]: two
// neighbouring values of one row of K, one 32-bit load. All 8 keys g of a warp's load sit 128 or
// 256 bytes apart, in the same banks: an 8-way bank conflict (4-way for D = 128).
template <class T, int D, int NT>
__device__ void qk_plain(float (&S)[NT][4], const uint32_t (&q)[D / 16][4], const uint16_t* Ks) {
  const int g = lane_id() / 4, t = lane_id() % 4;
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const uint16_t* p = Ks + (8 * n + g) * D + 16 * k + 2 * t;
      const uint32_t b[2] = {lds32(p), lds32(p + 8)};
      ptx::mma_m16n8k16<T>(S[n], q[k], b);
    }
}

// o += P̃·V_j for 16 rows: B[k][n] = V[key k][column n], so a lane's b[0] is V[2t][g] and
// V[2t+1][g]: two values from two rows of V, two 16-bit loads per register.
template <class T, int D, int NT>
__device__ void pv_plain(float (&o)[D / 8][4], const uint32_t (&P)[NT / 2][4], const uint16_t* Vs) {
  const int g = lane_id() / 4, t = lane_id() % 4;
#pragma unroll
  for (int k = 0; k < NT / 2; ++k)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const uint16_t* p = Vs + (16 * k + 2 * t) * D + 8 * n + g;
      const uint32_t b[2] = {uint32_t(p[0]) | uint32_t(p[D]) << 16,
                             uint32_t(p[8 * D]) | uint32_t(p[9 * D]) << 16};
      ptx::mma_m16n8k16<T>(o[n], P[k], b);
    }
}

// --- fragments, rung 2 on: ldmatrix from a swizzled tile ----------------------------------------
// In each ldmatrix_x4, lane l gives the address of row l % 8 of tile q = l / 8.

// The A fragments of MT m-tiles (16 rows each) from `row0` of Q, for every step k of d: tiles
// q = 0..3 are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
template <int D, int MT>
__device__ void load_q_ldmatrix(uint32_t (&q)[MT][D / 16][4], const uint16_t* Qs, int row0) {
  const int l = lane_id(), tile = l / 8;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const int r = row0 + 16 * mt + 8 * (tile % 2) + l % 8;
      ptx::ldmatrix_x4(q[mt][k], Qs + ptx::swizzle<D>(r, 2 * k + tile / 2));
    }
}

// S += Q·K_jᵀ: one ldmatrix_x4 brings the B fragments of two 8-key tiles n, n+1 for one k step
// (tiles: keys 0-7 at k 0-7 and 8-15, keys 8-15 at k 0-7 and 8-15), and each feeds MT mma's.
template <class T, int D, int MT, int NT>
__device__ void qk_ldmatrix(float (&S)[MT][NT][4], const uint32_t (&q)[MT][D / 16][4],
                            const uint16_t* Ks) {
  const int l = lane_id(), tile = l / 8;
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, Ks + ptx::swizzle<D>(8 * n + 8 * (tile / 2) + l % 8, 2 * k + tile % 2));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ptx::mma_m16n8k16<T>(S[mt][n], q[mt][k], {b[0], b[1]});
        ptx::mma_m16n8k16<T>(S[mt][n + 1], q[mt][k], {b[2], b[3]});
      }
    }
}

// The same product with Q's fragments brought from shared memory at each step k, for MT m-tiles
// from `row0`, instead of kept in registers (rung 4e, tuned, at d = 128, where registers are short).
template <class T, int D, int MT, int NT>
__device__ void qk_smem_q(float (&S)[MT][NT][4], const uint16_t* Qs, int row0, const uint16_t* Ks) {
  const int l = lane_id(), tile = l / 8;
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    uint32_t q[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ptx::ldmatrix_x4(q[mt], Qs + ptx::swizzle<D>(row0 + 16 * mt + 8 * (tile % 2) + l % 8, 2 * k + tile / 2));
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, Ks + ptx::swizzle<D>(8 * n + 8 * (tile / 2) + l % 8, 2 * k + tile % 2));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ptx::mma_m16n8k16<T>(S[mt][n], q[mt], {b[0], b[1]});
        ptx::mma_m16n8k16<T>(S[mt][n + 1], q[mt], {b[2], b[3]});
      }
    }
  }
}

// o += P̃·V_j: ldmatrix .trans turns 8 keys × 8 columns of V (stored key-major) into the "col" B
// fragment; one x4 covers 16 keys × two 8-column tiles n, n+1 (tiles: keys 0-7 and 8-15 of
// columns n, then of n+1), and each feeds MT mma's. kCols < D: only V's columns col0 .. col0 +
// kCols − 1 (stage 07 splits dQ's columns between two warps).
template <class T, int D, int MT, int NT, int kCols = D>
__device__ void pv_ldmatrix(float (&o)[MT][kCols / 8][4], const uint32_t (&P)[MT][NT / 2][4],
                            const uint16_t* Vs, int col0 = 0) {
  const int l = lane_id(), tile = l / 8;
#pragma unroll
  for (int k = 0; k < NT / 2; ++k)
#pragma unroll
    for (int n = 0; n < kCols / 8; n += 2) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, Vs + ptx::swizzle<D>(16 * k + 8 * (tile % 2) + l % 8, col0 / 8 + n + tile / 2));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ptx::mma_m16n8k16<T>(o[mt][n], P[mt][k], {b[0], b[1]});
        ptx::mma_m16n8k16<T>(o[mt][n + 1], P[mt][k], {b[2], b[3]});
      }
    }
}

// --- the mask and the online softmax -------------------------------------------------------------
// Scores of keys past N, and (causal) of keys after the query, become −∞. row0: the warp's first
// row; col0: the block's first column. S[mt][n][e] is row row0 + 16·mt + g (+8 for e >= 2),
// column col0 + 8·n + 2t + e % 2. Rows are queries and columns keys; with kKeysInRows, the other
// way round (stage 07's transposed scores Sᵀ).
template <bool kKeysInRows = false, int MT, int NT>
__device__ void mask_scores(float (&S)[MT][NT][4], int row0, int col0, int N, bool causal) {
  const int g = lane_id() / 4, t = lane_id() % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + 16 * mt + g + 8 * (e / 2), col = col0 + 8 * n + 2 * t + e % 2;
        const int key = kKeysInRows ? row : col, query = kKeysInRows ? col : row;
        if (COURSE_MASKED(query, key, N, causal)) S[mt][n][e] = -INFINITY;
      }
}

// The row max over a row's four lanes (t = 0..3 of a group hold its 2 × NT columns).
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Accumulators of NT tiles of 16 × 8 (an mma's C) as the A fragments of NT/2 steps of k, packed
// to 16 bits: tiles 2k and 2k+1 are step k's A (ptx.cuh). How P goes from S = Q·Kᵀ into P·V, and
// in stage 07 Pᵀ and dSᵀ into dV and dK, without shared memory.
template <class T, int NT>
__device__ void pack_a(const float (&C)[NT][4], uint32_t (&A)[NT / 2][4]) {
#pragma unroll
  for (int k = 0; k < NT / 2; ++k) {
    A[k][0] = ptx::pack<T>(C[2 * k][0], C[2 * k][1]);
    A[k][1] = ptx::pack<T>(C[2 * k][2], C[2 * k][3]);
    A[k][2] = ptx::pack<T>(C[2 * k + 1][0], C[2 * k + 1][1]);
    A[k][3] = ptx::pack<T>(C[2 * k + 1][2], C[2 * k + 1][3]);
  }
}

// The accumulators S of a block become P̃ = exp(scale·(S − m_new)), packed to 16 bits as the A
// fragments of P̃·V (tiles 2k and 2k+1 of S are step k's A: see ptx.cuh). Before that, o and l are
// rescaled by e^(scale·(m − m_new)). l stays each lane's share of its rows' sums: the four shares
// are added once, at the end (FA-2 does the same). A row with no visible key yet (m_new = −∞)
// uses 0 as its shift, so that exp(−∞ − shift) = 0 and not NaN.
// kExp2: P̃ = 2^(S·c − m_new·c) with c = scale·log₂e: one FFMA and one ex2 per score (rung 4a on);
// otherwise __expf(scale·(S − m_new)): a subtraction and the two multiplications of __expf.
template <class T, bool kExp2, int MT, int NT, int DT>
__device__ void online_softmax(float (&S)[MT][NT][4], float (&o)[MT][DT][4], float (&m)[MT][2],
                               float (&l)[MT][2], float scale, uint32_t (&P)[MT][NT / 2][4]) {
  const float c = scale * ptx::kLog2e;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8
      float mx = m[mt][h];
#pragma unroll
      for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(S[mt][n][2 * h], S[mt][n][2 * h + 1]));
      const float m_new = quad_max(mx);
      const float shift = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = kExp2 ? ptx::exp2_approx(m[mt][h] * c - shift * c)
                                : __expf(scale * (m[mt][h] - shift));
      m[mt][h] = m_new;
      l[mt][h] *= alpha;
#pragma unroll
      for (int d = 0; d < DT; ++d) o[mt][d][2 * h] *= alpha, o[mt][d][2 * h + 1] *= alpha;
      const float shift_c = shift * c;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float p = kExp2 ? ptx::exp2_approx(fmaf(S[mt][n][e], c, -shift_c))
                                : __expf(scale * (S[mt][n][e] - shift));
          S[mt][n][e] = p;
          l[mt][h] += p;
        }
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) pack_a<T>(S[mt], P[mt]);
}

// The same step with FlashAttention-4's lazy rescale: a row keeps its old max m unless the new one
// exceeds it by more than 2^kLazyLog2 in P̃'s scale, and the warp rescales o and l only when one
// of its rows must (a vote, so that the skip is a branch the whole warp takes). Otherwise P̃ =
// 2^(S·c − m·c) is computed against a max that is a little stale: P̃ <= 2^kLazyLog2 (256 for 8),
// which fp16, bf16 and the fp32 sums hold exactly as well as values <= 1; O = o / l and L = scale·m
// + log l come out the same, since o, l and m stay consistent with each other. What it saves: the
// D/8·4 multiplications of o's rescale a row pair, in every key block after the first few.
template <class T, int kLazyLog2, int MT, int NT, int DT>
__device__ void online_softmax_lazy(float (&S)[MT][NT][4], float (&o)[MT][DT][4], float (&m)[MT][2],
                                    float (&l)[MT][2], float scale, uint32_t (&P)[MT][NT / 2][4]) {
  const float c = scale * ptx::kLog2e;
  float m_new[MT][2];
  bool grows = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[mt][h];
#pragma unroll
      for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(S[mt][n][2 * h], S[mt][n][2 * h + 1]));
      m_new[mt][h] = quad_max(mx);
      grows |= (m_new[mt][h] - m[mt][h]) * c > float(kLazyLog2);  // false for −∞ − (−∞) = NaN
    }
  if (__any_sync(0xffffffffu, grows)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float shift = m_new[mt][h] == -INFINITY ? 0.0f : m_new[mt][h];
        const float alpha = ptx::exp2_approx(m[mt][h] * c - shift * c);
        m[mt][h] = m_new[mt][h];
        l[mt][h] *= alpha;
#pragma unroll
        for (int d = 0; d < DT; ++d) o[mt][d][2 * h] *= alpha, o[mt][d][2 * h + 1] *= alpha;
      }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float shift_c = (m[mt][h] == -INFINITY ? 0.0f : m[mt][h]) * c;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float p = ptx::exp2_approx(fmaf(S[mt][n][e], c, -shift_c));
          S[mt][n][e] = p;
          l[mt][h] += p;
        }
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) pack_a<T>(S[mt], P[mt]);
}

// --- the epilogue ----------------------------------------------------------------------------------
// O = o / l (the deferred normalisation: one division per value, once) and L = scale·m + log l
// for the warp's 16·MT rows from `row0` of the head. O goes through `stage`, 16·MT rows × D of
// this warp's own shared memory (swizzled), so that each lane writes whole 16-byte chunks and
// each row whole 32-byte sectors: written straight from the fragments, a store would cover half a
// sector per row and the sector would cross to L2 twice. Rows past N are not written, nor rows
// before 0 (stage 08's causal blocks laid from the end: algorithm.hpp, Tiles::from_end).
// kO32 (rungs tuned and lazy_rescale): also O before its rounding, to p.O32 when it is set.
template <class T, int D, int MT, bool kO32 = false>
__device__ void write_output(const float (&o)[MT][D / 8][4], const float (&m)[MT][2], float (&l)[MT][2],
                             uint16_t* stage, const Params& p, size_t head, int row0) {
  const int lane = lane_id(), g = lane / 4, t = lane % 4;
  // `stage` held this warp's rows of Q: every lane's reads of it (ldmatrix gathers rows that other
  // lanes addressed) come before any lane overwrites it. (Data dependencies order them already;
  // the barrier says so, to the reader and to compute-sanitizer's racecheck.)
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] = quad_sum(l[mt][h]);
      const float inv = 1.0f / l[mt][h];
      const int r = 16 * mt + g + 8 * h;
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<uint32_t*>(stage + ptx::swizzle<D>(r, d) + 2 * t) =
            ptx::pack<T>(o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv);
      if (kO32 && p.O32 && unsigned(row0 + r) < unsigned(p.N))  // a quad's 8 floats: one 32-byte sector
#pragma unroll
        for (int d = 0; d < D / 8; ++d)
          __stcg(reinterpret_cast<float2*>(p.O32 + head + size_t(row0 + r) * D + 8 * d + 2 * t),
                 make_float2(o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv));
      // head = (index of the head) · N · D, so head / D is where the head's N values of L start.
      if (t == 0 && unsigned(row0 + r) < unsigned(p.N)) p.L[head / D + row0 + r] = p.scale * m[mt][h] + logf(l[mt][h]);
    }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int f = lane; f < 16 * MT * kChunks; f += 32) {
    const int r = f / kChunks, c = f % kChunks;
    if (unsigned(row0 + r) < unsigned(p.N))
      __stcg(reinterpret_cast<uint4*>(p.O + head + size_t(row0 + r) * D) + c,
             *reinterpret_cast<const uint4*>(stage + ptx::swizzle<D>(r, c)));
  }
}

// --- the launch ------------------------------------------------------------------------------------
// The course's untyped pointers as the kernels' parameters.
inline Params params(const void* Q, const void* K, const void* V, void* O, float* L, int N,
                     bool causal, int d) {
  return {static_cast<const uint16_t*>(Q), static_cast<const uint16_t*>(K),
          static_cast<const uint16_t*>(V), static_cast<uint16_t*>(O), L, N, causal,
          1.0f / std::sqrt(float(d)), N};
}

// A kernel's compile-time configuration: the 16-bit type and the head dimension.
template <class T_, int D_>
struct Config {
  using T = T_;
  static constexpr int D = D_;
};

// Checks the problem, then calls launch(Config<T, D>{}) for the run's dtype and d.
template <class F>
void dispatch(const char* variant, const Shape& s, course::Dtype t, F&& launch) {
  require_supported(s);
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  std::string(variant) + " runs fp16 or bf16, not " + course::name(t));
  course::require(s.d == 64 || s.d == 128, std::string(variant) + " runs d = 64 or 128, not d = " +
                                               std::to_string(s.d));
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) {
    half ? launch(Config<__half, 64>{}) : launch(Config<__nv_bfloat16, 64>{});
  } else {
    half ? launch(Config<__half, 128>{}) : launch(Config<__nv_bfloat16, 128>{});
  }
}


// Rung 3 and the steps of rung 4 before 4e (tc3_cp_async.cu, tc4a_exp2.cu ... tc4d_heaviest_first.cu):
// Br = 64 query rows a block of 4 warps (16 rows each), Bc = 64 keys a step; in dynamic shared
// memory Q_i, then K_j and V_j in two buffers (80 KB at d = 128).
template <int D>
struct CpAsyncSmem {
  static constexpr int Br = 64, Bc = 64;
  static constexpr int kHalves = Br * D + 4 * Bc * D;  // Q, then K[2] and V[2]
  static constexpr size_t kBytes = 2 * size_t(kHalves);
};

// Launches one of those rungs: kernel_of(Config<T, D>{}) is its kernel for the run's dtype and d;
// one block per (query block of 64 rows, head).
template <class KernelOf>
void launch_cp_async_rung(const char* variant, const Shape& s, course::Dtype t, KernelOf kernel_of, const void* Q,
                          const void* K, const void* V, void* O, float* L) {
  dispatch(variant, s, t, [&](auto config) {
    using C = decltype(config);
    constexpr size_t bytes = CpAsyncSmem<C::D>::kBytes;
    const auto kernel = kernel_of(config);
    course::require_shared_memory(bytes, std::string(variant) + " at d = " + std::to_string(C::D));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const dim3 grid((s.N + CpAsyncSmem<C::D>::Br - 1) / CpAsyncSmem<C::D>::Br, s.heads());
    kernel<<<grid, 128, bytes>>>(params(Q, K, V, O, L, s.N, s.causal, C::D));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention::tc
