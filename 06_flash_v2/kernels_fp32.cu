// Part A: FlashAttention-2's forward in fp32, on the CUDA cores.
//
// What changed from stage 05's FA-1 kernel (05_flash_v1/kernels.cu): the loops are swapped. A
// thread block owns one query block Q_i (Br = 128 rows) of one head, for the whole run, and streams
// every K_j, V_j (Bc = 64 keys) past it; grid = Tr × B·H blocks instead of B·H. O_i, l_i and m_i
// live in registers from the first key block to the last, so they are never read from or written
// to global memory in between; O is divided by l once, at the end (deferred normalisation); and
// each row's logsumexp L = scale·m + log l is written for the backward pass. Causal: query block i
// visits only key blocks up to its last row, and only the blocks that reach past its first row
// (or past N) apply the mask.
//
// IO per head: Q read once, K and V once per query block, O and L written once:
// 4·d·(2·N + 2·Tr·N) + 4·N bytes ≈ 8·N²·d/Br. FA-1 moved ≈ 12·N²·d/Bc (Q once per key block; O,
// l and m read and written once per key block). At d = 64 (FA-1's Bc = 256, Br = 128 here) that
// makes FA-2's SM↔L2 traffic about 4/3 of FA-1's, but all of it reads of K and V that stay in L2:
// the blocks running at once belong to a few heads, so the DRAM sees little more than each tensor
// once, where FA-1's O round trips went to DRAM at every step.
//
// Threads: 256, as 32 × 8: thread (ty, tx) owns rows 4·ty .. 4·ty+3 of the block (of S and of O),
// key columns tx + 8·b of S (b < 8) and O columns 4·tx + 32·h .. +3 (h < d/32). A row's 8 threads
// are 8 neighbouring lanes, so its max is 3 shuffles. S = Q·Kᵀ is a register-blocked product (4 × 8
// per thread) over Qᵀ and K in shared memory; P̃ goes through shared memory (transposed, as Pᵀ) to
// the threads that own its row of O, which is the same thread layout, so m and l need no sharing.
// Scores are exponentiated as 2^(S·c − m·c), c = scale·log₂e: one FFMA and one MUFU.EX2; o and l
// are rescaled by the ratio of the rounded shifts m·c, exactly 1 while a row's max stays.
// Shared memory (floats): Qᵀ [d][Br + 4], K [Bc][d + 4], V [Bc][d], Pᵀ [Bc][Br + 4]: 101 KB at
// d = 64, so two blocks share an SM and each hides the other's loads.
#include <cuda_runtime.h>

#include <cmath>

#include "check.hpp"
#include "gpu.hpp"
#include "kernels.cuh"
#include "ptx.cuh"

namespace attention {

namespace {

template <int D>
struct Fp32 {
  static constexpr int Br = 128, Bc = 64, kThreads = 256;
  static constexpr int H = D / 32;  // float4 columns of O per thread
  static constexpr int kLdQ = Br + 4, kLdK = D + 4, kLdP = Br + 4;
  static constexpr int kFloats = D * kLdQ + Bc * kLdK + Bc * D + Bc * kLdP;
  static constexpr size_t kBytes = 4 * size_t(kFloats);
};

// Two blocks per SM where shared memory allows it (d <= 64): at most 128 registers a thread.
template <int D>
__global__ void __launch_bounds__(256, D <= 64 ? 2 : 1) flash_v2_fp32(const float* __restrict__ Q, const float* __restrict__ K,
                                                     const float* __restrict__ V, float* __restrict__ O,
                                                     float* __restrict__ L, int N, bool causal, float scale) {
  using F = Fp32<D>;
  constexpr int Br = F::Br, Bc = F::Bc, H = F::H;
  extern __shared__ __align__(16) float smem[];
  float* Qt = smem;                 // Qᵀ: Qt[k * kLdQ + r] = Q_i[r][k]
  float* Ks = Qt + D * F::kLdQ;     // K_j, rows padded
  float* Vs = Ks + Bc * F::kLdK;    // V_j
  float* Pt = Vs + Bc * D;          // P̃ᵀ: Pt[c * kLdP + r] = P̃[r][c]
  const int tx = threadIdx.x % 8, ty = threadIdx.x / 8;
  const int i = blockIdx.x, row0 = i * Br, rows = min(Br, N - row0);
  const size_t head = size_t(blockIdx.y) * N * D;
  const float c = scale * ptx::kLog2e;

  // Q_i, transposed on its way into shared memory (once per block; rows past N are zeros).
  for (int f = threadIdx.x; f < Br * D / 4; f += F::kThreads) {
    const int r = f / (D / 4), k = 4 * (f % (D / 4));
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows) v = __ldcg(reinterpret_cast<const float4*>(Q + head + size_t(row0 + r) * D + k));
    Qt[(k + 0) * F::kLdQ + r] = v.x;
    Qt[(k + 1) * F::kLdQ + r] = v.y;
    Qt[(k + 2) * F::kLdQ + r] = v.z;
    Qt[(k + 3) * F::kLdQ + r] = v.w;
  }

  float o[4][H][4] = {}, m[4], l[4] = {};
#pragma unroll
  for (int a = 0; a < 4; ++a) m[a] = -INFINITY;
  const int blocks = key_blocks(N, Br, Bc, causal, i);
  for (int j = 0; j < blocks; ++j) {
    const int key0 = j * Bc, keys = min(Bc, N - key0);
    __syncthreads();  // every thread is done with K_{j-1}, V_{j-1} and P̃ (and Qᵀ is complete)
    // A thread copies float4 number k/4 of rows r0, r0 + kStep, ...: one base address, fixed strides.
    constexpr int kStep = F::kThreads / (D / 4);
    const int r0 = threadIdx.x / (D / 4), k = 4 * (threadIdx.x % (D / 4));
    const float* Kg = K + head + size_t(key0 + r0) * D + k;
    const float* Vg = V + head + size_t(key0 + r0) * D + k;
#pragma unroll
    for (int r = r0; r < Bc; r += kStep) {
      float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
      if (r < keys) {
        kv = __ldcg(reinterpret_cast<const float4*>(Kg + (r - r0) * D));
        vv = __ldcg(reinterpret_cast<const float4*>(Vg + (r - r0) * D));
      }
      *reinterpret_cast<float4*>(Ks + r * F::kLdK + k) = kv;
      *reinterpret_cast<float4*>(Vs + r * D + k) = vv;
    }
    __syncthreads();

    // S = Q_i·K_jᵀ: rows 4ty + a, keys tx + 8b.
    float S[4][8] = {};
#pragma unroll 2
    for (int k = 0; k < D; k += 4) {
      float q[4][4];  // q[kk][a] = Q[4ty + a][k + kk]
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const float4 x = *reinterpret_cast<const float4*>(Qt + (k + kk) * F::kLdQ + 4 * ty);
        q[kk][0] = x.x, q[kk][1] = x.y, q[kk][2] = x.z, q[kk][3] = x.w;
      }
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const float4 kv = *reinterpret_cast<const float4*>(Ks + (tx + 8 * b) * F::kLdK + k);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          S[a][b] = fmaf(q[0][a], kv.x, S[a][b]);
          S[a][b] = fmaf(q[1][a], kv.y, S[a][b]);
          S[a][b] = fmaf(q[2][a], kv.z, S[a][b]);
          S[a][b] = fmaf(q[3][a], kv.w, S[a][b]);
        }
      }
    }
    // The mask, only in blocks that reach past N or (causal) past the block's first row.
    if (COURSE_BLOCK_NEEDS_MASK(row0, (j + 1) * Bc, N, causal)) {
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 8; ++b) {
          const int key = key0 + tx + 8 * b;
          if (COURSE_MASKED(row0 + 4 * ty + a, key, N, causal)) S[a][b] = -INFINITY;
        }
    }
    // Online softmax: m_new = max(m, rowmax S); rescale o and l by 2^(c·(m − m_new)); P̃ = 2^(c·S − c·m_new).
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      float mx = m[a];
#pragma unroll
      for (int b = 0; b < 8; ++b) mx = fmaxf(mx, S[a][b]);
#pragma unroll
      for (int lane_mask = 1; lane_mask < 8; lane_mask *= 2) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, lane_mask));
      // P̃ is taken against shift = round(m_new·c), and o and l are rescaled by the ratio of the old
      // and new shifts, 2^(round(m·c) − round(m_new·c)): exactly 2^0 = 1 while the row's max stays.
      // Both products rounded (__fmul_rn is never fused): written m·c − shift, ptxas may fuse it into
      // FFMA(m, c, −shift) = m·c − round(m·c), the product's rounding error e (|e| <= 2^-24·|m·c|),
      // so alpha = 2^e and l and o would take that factor again at every key block after the max:
      // L off by up to (blocks after the max)·|e|·ln 2, 6e-5 with Q × 30 at N = 700, enough to fail
      // stage 07's fp32 dK tolerance (07_backward/test_cpu.cpp, "the fp32 kernels' arithmetic").
      const float shift = mx == -INFINITY ? 0.0f : __fmul_rn(mx, c);  // a row with nothing visible yet: 0
      const float alpha = ptx::exp2_approx(__fmul_rn(m[a], c) - shift);  // m = −∞: 2^−∞ = 0
      m[a] = mx;
      l[a] *= alpha;
#pragma unroll
      for (int h = 0; h < H; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[a][h][e] *= alpha;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        S[a][b] = ptx::exp2_approx(fmaf(S[a][b], c, -shift));
        l[a] += S[a][b];  // this thread's share of the row sum; the 8 shares are added at the end
      }
    }
#pragma unroll
    for (int b = 0; b < 8; ++b)
      *reinterpret_cast<float4*>(Pt + (tx + 8 * b) * F::kLdP + 4 * ty) = make_float4(S[0][b], S[1][b], S[2][b], S[3][b]);
    __syncthreads();  // P̃ is complete

    // O += P̃·V_j: rows 4ty + a, columns 4tx + 32h + e.
#pragma unroll 4
    for (int col = 0; col < Bc; ++col) {
      const float4 p = *reinterpret_cast<const float4*>(Pt + col * F::kLdP + 4 * ty);
      const float pa[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int h = 0; h < H; ++h) {
        const float4 v = *reinterpret_cast<const float4*>(Vs + col * D + 4 * tx + 32 * h);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          o[a][h][0] = fmaf(pa[a], v.x, o[a][h][0]);
          o[a][h][1] = fmaf(pa[a], v.y, o[a][h][1]);
          o[a][h][2] = fmaf(pa[a], v.z, o[a][h][2]);
          o[a][h][3] = fmaf(pa[a], v.w, o[a][h][3]);
        }
      }
    }
  }

  // O_i = O / l, L_i = scale·m + log l.
  float L_mine = 0.0f;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
#pragma unroll
    for (int lane_mask = 1; lane_mask < 8; lane_mask *= 2) l[a] += __shfl_xor_sync(~0u, l[a], lane_mask);
    const int r = 4 * ty + a;
    const float inv = 1.0f / l[a];
    if (r < rows) {
#pragma unroll
      for (int h = 0; h < H; ++h)
        __stcg(reinterpret_cast<float4*>(O + head + size_t(row0 + r) * D + 4 * tx + 32 * h),
               make_float4(o[a][h][0] * inv, o[a][h][1] * inv, o[a][h][2] * inv, o[a][h][3] * inv));
    }
    if (tx == a) L_mine = scale * m[a] + logf(l[a]);
  }
  if (tx < 4 && 4 * ty + tx < rows) L[size_t(blockIdx.y) * N + row0 + 4 * ty + tx] = L_mine;
}

template <int D>
void launch(const Shape& s, const float* Q, const float* K, const float* V, float* O, float* L) {
  using F = Fp32<D>;
  course::require_shared_memory(F::kBytes, "flash_v2 (fp32) at d = " + std::to_string(D));
  CUDA_CHECK(cudaFuncSetAttribute(flash_v2_fp32<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(F::kBytes)));
  const dim3 grid((s.N + F::Br - 1) / F::Br, s.heads());
  flash_v2_fp32<D><<<grid, F::kThreads, F::kBytes>>>(Q, K, V, O, L, s.N, s.causal, 1.0f / std::sqrt(float(D)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_flash_v2_fp32(const Shape& s, const float* Q, const float* K, const float* V, float* O,
                          float* L) {
  require_supported(s);  // d in {32, 64, 128}, B·H <= 65535
  if (s.d == 32) return launch<32>(s, Q, K, V, O, L);
  if (s.d == 64) return launch<64>(s, Q, K, V, O, L);
  return launch<128>(s, Q, K, V, O, L);
}

}  // namespace attention
