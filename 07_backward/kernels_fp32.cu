// FlashAttention's backward pass in fp32, on the CUDA cores (FA-2's Algorithm 2).
//
// One thread block per (key block j, head): K_j and V_j (Bc = 64 keys) are loaded once, dK_j and
// dV_j live in registers for the whole loop, and the query blocks i that see key block j (Br = 64
// rows; causal: from the diagonal on) stream past. At each step the block recomputes
// S = scale·Q_i·K_jᵀ and P = exp(S − L_i) from the forward's logsumexp L (stage 06), instead of
// reading a stored P; then dV_j += Pᵀ·dO_i, dP = dO_i·V_jᵀ, dS = P ∘ (dP − D_i), dK_j += dSᵀ·Q_i,
// and its share dS·K_j of dQ_i is added into the float array dQacc with reductions done in L2
// (ptx::red_add_f32x4): many key blocks add to the same rows of dQ, in no fixed order.
//
// IO per head: K, V read and dK, dV written once; per (i, j) pair Q_i and dO_i read and dQ_i's
// share added: ≈ 12·N²·d/Bc bytes (flash_backward_model_bytes), against standard backward's
// Θ(N²) reads and writes of P and dS.
//
// Threads: 256 as 16 × 16, (ty, tx). Three phases a step, each a register-blocked product over
// tiles in shared memory (floats, rows padded by 4 so that 16-byte loads of neighbouring rows fall
// in different banks):
//   A  S and dP for rows 4·ty .. +3 and keys tx + 16·b (b < 4): 16 float4 loads per 128 FMAs
//   B  dV and dK for keys 4·ty .. +3 and VEC = d/16 columns (chunks of 4 at 4·tx + 64·u; d = 32:
//      2 at 2·tx): a float4 of P (of dS) and VEC values of dO (of Q) per row
//   C  dQ_i's share for rows 4·ty .. +3 and the same columns; then its reductions, 16 bytes each
// P and dS go through shared memory between A and B/C: the thread that computes P[r][c] is not
// the one that owns key c's row of dV.
#include <cuda_runtime.h>

#include <cmath>

#include "../06_flash_v2/ptx.cuh"
#include "check.hpp"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {

namespace {

template <int D>
struct Fp32Bwd {
  static constexpr int Br = kFp32Tiles.Br, Bc = kFp32Tiles.Bc, kThreads = 256;
  static_assert(Br == 64 && Bc == 64, "the thread layout covers 64 × 64");
  // A thread owns VEC = d/16 columns of dK, dV and dQ: U chunks of W neighbours, at W·tx + 16·W·u,
  // so that the 16 threads of a row cover 16·W neighbouring floats (whole sectors) per request.
  static constexpr int kLd = D + 4, kLdP = Bc + 4, VEC = D / 16, W = VEC < 4 ? VEC : 4, U = VEC / W;
  // K, V [Bc][kLd], Q, dO [Br][kLd], P, dS [Br][kLdP], L, D [Br]
  static constexpr int kFloats = 2 * Bc * kLd + 2 * Br * kLd + 2 * Br * kLdP + 2 * Br;
  static constexpr size_t kBytes = 4 * size_t(kFloats);
};

// `rows` rows of D floats from global memory (row stride D) into shared memory (row stride ld);
// rows past `rows` up to R are zeros.
template <int D, int R, int kThreads>
__device__ void load_rows(float* dst, int ld, const float* src, int rows) {
  for (int f = threadIdx.x; f < R * D / 4; f += kThreads) {
    const int r = f / (D / 4), x = 4 * (f % (D / 4));
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < rows) v = __ldcg(reinterpret_cast<const float4*>(src + size_t(r) * D + x));
    *reinterpret_cast<float4*>(dst + r * ld + x) = v;
  }
}

// A thread's VEC floats of a row (p: the row) from shared memory: U chunks of W (2 or 4).
template <int W, int U>
__device__ inline void load_vec(float (&v)[W * U], const float* p, int tx) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const float* q = p + W * tx + 16 * W * u;
    if constexpr (W == 2) {
      const float2 a = *reinterpret_cast<const float2*>(q);
      v[2 * u] = a.x, v[2 * u + 1] = a.y;
    } else {
      const float4 a = *reinterpret_cast<const float4*>(q);
      v[4 * u] = a.x, v[4 * u + 1] = a.y, v[4 * u + 2] = a.z, v[4 * u + 3] = a.w;
    }
  }
}

__device__ inline float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

template <int D>
__global__ void __launch_bounds__(256, D <= 32 ? 2 : 1) flash_backward_fp32(const float* __restrict__ Q, const float* __restrict__ K,
                                                          const float* __restrict__ V, const float* __restrict__ dO,
                                                          const float* __restrict__ L, const float* __restrict__ Dv,
                                                          float* __restrict__ dQacc, float* __restrict__ dK,
                                                          float* __restrict__ dV, int N, bool causal, float scale) {
  using F = Fp32Bwd<D>;
  constexpr int Br = F::Br, Bc = F::Bc, kLd = F::kLd, kLdP = F::kLdP, VEC = F::VEC, W = F::W, U = F::U;
  extern __shared__ __align__(16) float smem[];
  float* Ks = smem;
  float* Vs = Ks + Bc * kLd;
  float* Qs = Vs + Bc * kLd;
  float* dOs = Qs + Br * kLd;
  float* Ps = dOs + Br * kLd;
  float* dSs = Ps + Br * kLdP;
  float* Ls = dSs + Br * kLdP;
  float* Ds = Ls + Br;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int j = blockIdx.x, key0 = j * Bc, keys = min(Bc, N - key0);
  const size_t head = size_t(blockIdx.y) * N * D, stats = size_t(blockIdx.y) * N;
  const float c = scale * ptx::kLog2e, log2e = ptx::kLog2e;

  load_rows<D, Bc, 256>(Ks, kLd, K + head + size_t(key0) * D, keys);
  load_rows<D, Bc, 256>(Vs, kLd, V + head + size_t(key0) * D, keys);
  float dk[4][VEC] = {}, dv[4][VEC] = {};

  const int Tr = (N + Br - 1) / Br;
  for (int i = first_query_block(Br, Bc, causal, j); i < Tr; ++i) {
    const int row0 = i * Br, rows = min(Br, N - row0);
    __syncthreads();  // every thread is done with the previous step's Q, dO, P and dS
    load_rows<D, Br, 256>(Qs, kLd, Q + head + size_t(row0) * D, rows);
    load_rows<D, Br, 256>(dOs, kLd, dO + head + size_t(row0) * D, rows);
    if (threadIdx.x < Br) {  // rows past N: P = exp(S − ∞) = 0
      const bool in = threadIdx.x < rows;
      Ls[threadIdx.x] = in ? L[stats + row0 + threadIdx.x] * log2e : INFINITY;
      Ds[threadIdx.x] = in ? Dv[stats + row0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();

    // A: S and dP for rows 4ty + a, keys tx + 16b; then P and dS into shared memory.
    float S[4][4] = {}, dP[4][4] = {};
#pragma unroll 4
    for (int x = 0; x < D; x += 4) {
      float4 q[4], g[4], k[4], v[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) q[a] = ld4(Qs + (4 * ty + a) * kLd + x), g[a] = ld4(dOs + (4 * ty + a) * kLd + x);
#pragma unroll
      for (int b = 0; b < 4; ++b) k[b] = ld4(Ks + (tx + 16 * b) * kLd + x), v[b] = ld4(Vs + (tx + 16 * b) * kLd + x);
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          S[a][b] += q[a].x * k[b].x + q[a].y * k[b].y + q[a].z * k[b].z + q[a].w * k[b].w;
          dP[a][b] += g[a].x * v[b].x + g[a].y * v[b].y + g[a].z * v[b].z + g[a].w * v[b].w;
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int r = 4 * ty + a;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int key = key0 + tx + 16 * b;
        const float P = COURSE_MASKED(row0 + r, key, N, causal) ? 0.0f : ptx::exp2_approx(S[a][b] * c - Ls[r]);
        Ps[r * kLdP + tx + 16 * b] = P;
        dSs[r * kLdP + tx + 16 * b] = P * (dP[a][b] - Ds[r]);
      }
    }
    __syncthreads();

    // B: dV += Pᵀ·dO_i and dK += dSᵀ·Q_i for keys 4ty + a, columns VEC·tx + v.
#pragma unroll 2
    for (int r = 0; r < Br; ++r) {
      const float4 p = ld4(Ps + r * kLdP + 4 * ty), ds = ld4(dSs + r * kLdP + 4 * ty);
      float g[VEC], q[VEC];
      load_vec<W, U>(g, dOs + r * kLd, tx);
      load_vec<W, U>(q, Qs + r * kLd, tx);
      const float pa[4] = {p.x, p.y, p.z, p.w}, da[4] = {ds.x, ds.y, ds.z, ds.w};
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int v = 0; v < VEC; ++v) dv[a][v] += pa[a] * g[v], dk[a][v] += da[a] * q[v];
    }

    // C: dQ_i's share, dS·K_j, for rows 4ty + a, columns VEC·tx + v; then added into dQacc.
    float dq[4][VEC] = {};
#pragma unroll 2
    for (int k = 0; k < Bc; k += 4) {
      float4 ds[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) ds[a] = ld4(dSs + (4 * ty + a) * kLdP + k);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float kv[VEC];
        load_vec<W, U>(kv, Ks + (k + kk) * kLd, tx);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          const float w = kk == 0 ? ds[a].x : kk == 1 ? ds[a].y : kk == 2 ? ds[a].z : ds[a].w;
#pragma unroll
          for (int v = 0; v < VEC; ++v) dq[a][v] += w * kv[v];
        }
      }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      if (4 * ty + a >= rows) continue;
      float* out = dQacc + head + size_t(row0 + 4 * ty + a) * D + W * tx;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float* x = &dq[a][W * u];
        if constexpr (W == 2) ptx::red_add_f32x2(out + 32 * u, x[0], x[1]);
        else ptx::red_add_f32x4(out + 64 * u, make_float4(x[0], x[1], x[2], x[3]));
      }
    }
  }

  // dK_j = scale·Σ dSᵀ·Q and dV_j, written once.
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int key = 4 * ty + a;
    if (key >= keys) continue;
#pragma unroll
    for (int v = 0; v < VEC; ++v) dk[a][v] *= scale;
    const size_t at = head + size_t(key0 + key) * D + W * tx;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float *k = &dk[a][W * u], *v = &dv[a][W * u];
      if constexpr (W == 2) {
        __stcg(reinterpret_cast<float2*>(dK + at + 32 * u), make_float2(k[0], k[1]));
        __stcg(reinterpret_cast<float2*>(dV + at + 32 * u), make_float2(v[0], v[1]));
      } else {
        __stcg(reinterpret_cast<float4*>(dK + at + 64 * u), make_float4(k[0], k[1], k[2], k[3]));
        __stcg(reinterpret_cast<float4*>(dV + at + 64 * u), make_float4(v[0], v[1], v[2], v[3]));
      }
    }
  }
}

template <int D>
void launch(const Shape& s, const BackwardArgs& a) {
  using F = Fp32Bwd<D>;
  const auto kernel = flash_backward_fp32<D>;
  course::require_shared_memory(F::kBytes, "flash_bwd (fp32) at d = " + std::to_string(D));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(F::kBytes)));
  const dim3 grid((s.N + F::Bc - 1) / F::Bc, s.heads());
  kernel<<<grid, F::kThreads, F::kBytes>>>(
      static_cast<const float*>(a.Q), static_cast<const float*>(a.K), static_cast<const float*>(a.V),
      static_cast<const float*>(a.dO), a.L, a.D, a.dQacc, static_cast<float*>(a.dK), static_cast<float*>(a.dV), s.N,
      s.causal, 1.0f / std::sqrt(float(D)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_flash_backward_fp32(const Shape& s, const BackwardArgs& a) {
  require_supported(s);
  course::require(a.dQacc != nullptr, "flash_bwd (fp32) adds dQ into dQacc: it needs one");
  if (s.d == 32) launch<32>(s, a);
  else if (s.d == 64) launch<64>(s, a);
  else launch<128>(s, a);
}

}  // namespace attention
