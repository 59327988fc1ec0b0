// Stage 05: standard attention from earlier stages' kernels, and FlashAttention-1.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "../02_tiled_matmul/kernels.cuh"
#include "../03_safe_softmax/algorithm.hpp"
#include "../03_safe_softmax/kernels.cuh"
#include "check.hpp"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {

// === Standard attention ==========================================================================
// Five kernels, each a full pass over its input in global memory. S and P (N × N per head) are
// written and read back: Θ(N²) traffic and memory, whatever the GPU's SRAM.

// Kt = scale·Kᵀ for one 32 × 32 tile per block: read as rows of K, written as rows of Kt, through
// shared memory (padded by one column so the transposed reads hit 32 banks).
// IO: K read once, Kt written once.
__global__ void transpose_scale(const float* __restrict__ K, float* __restrict__ Kt, int N, int d,
                                float scale) {
  constexpr int T = kTransposeTile;
  __shared__ float tile[T][T + 1];
  const size_t head = size_t(blockIdx.z) * N * d;
  const int n0 = blockIdx.x * T, k0 = blockIdx.y * T, tx = threadIdx.x;
  for (int r = threadIdx.y; r < T; r += blockDim.y) {
    if (n0 + r < N) tile[r][tx] = __ldcg(K + head + size_t(n0 + r) * d + k0 + tx);
  }
  __syncthreads();
  for (int k = threadIdx.y; k < T; k += blockDim.y) {
    if (n0 + tx < N) Kt[head + size_t(k0 + k) * N + n0 + tx] = scale * tile[tx][k];
  }
}

// The causal mask: S[i][j] = −∞ for j > i. A warp per row, over aligned 32-column stretches.
// IO: the upper triangle of S written once (no reads).
__global__ void causal_mask(float* __restrict__ S, int rows, int N) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = row % N;
  float* s = S + size_t(row) * N;
  for (int j = (i + 1) / 32 * 32 + lane; j < N; j += 32) {
    if (j > i) s[j] = -INFINITY;
  }
}

std::size_t standard_workspace_floats(const Shape& s) {
  const std::size_t square = std::size_t(s.heads()) * s.N * s.N;
  return s.elements() + 2 * square + softmax::workspace_floats(s.heads() * s.N, s.N);
}

void launch_standard(const Shape& s, const float* Q, const float* K, const float* V, float* O,
                     float* workspace) {
  require_supported(s);
  const int N = s.N, d = s.d, heads = s.heads();
  float* Kt = workspace;
  float* S = Kt + s.elements();
  float* P = S + std::size_t(heads) * N * N;
  float* partials = P + std::size_t(heads) * N * N;
  const dim3 tiles((N + kTransposeTile - 1) / kTransposeTile, d / kTransposeTile, heads);
  transpose_scale<<<tiles, dim3(kTransposeTile, 8)>>>(K, Kt, N, d, 1.0f / std::sqrt(float(d)));
  CUDA_CHECK_LAUNCH();
  matmul::launch_register_blocked_batched(Q, Kt, S, N, N, d, heads);  // S = Q·Kt
  if (s.causal) {
    const int rows = heads * N, warps = 8;
    causal_mask<<<(rows + warps - 1) / warps, 32 * warps>>>(S, rows, N);
    CUDA_CHECK_LAUNCH();
  }
  softmax::launch_safe(S, P, partials, heads * N, N);     // P = softmax(S), row by row
  matmul::launch_register_blocked_batched(P, V, O, N, d, N, heads);  // O = P·V
}

// === FlashAttention-1 ============================================================================
// Algorithm 1 of the paper (see algorithm.hpp), one thread block per head. The outer loop brings
// K_j and V_j on chip once; the inner loop streams every Q_i, and reads and writes O_i, l_i and m_i
// in global memory at every step. S_ij and P̃_ij never leave the chip.
// IO per head: K and V once, Q once per j, O, l, m read and written once per j: Θ(N²d/Bc) =
// Θ(N²d²/M) for Bc = M/4d. Larger blocks (larger M) mean fewer passes over Q and O.
//
// Threads: 16 × 16, thread (ty, tx). A thread owns rows ty + 16a of S_ij and of O_i (a < Br/16),
// columns tx + 16b of S_ij (b < Bc/16), and D/16 columns of O_i. The 16 threads of a row are a
// half-warp, so the row max and sum are 4 shuffles. P̃_ij goes through shared memory to reach the
// threads that multiply it with V_j.
//
// Loads are issued well before their data is needed. The next step's Q block is loaded into
// registers while this step computes P̃·V, and stored to Qs (free by then) at the end of the step;
// O_i, l_i and m_i are loaded into registers at the start of a step and first used after S_ij.
// (Before, Q_i, l_i and m_i went through registers into shared memory ahead of the step's first
// barrier, so every thread waited there for a round trip to memory, at every step.) Three barriers
// per step order shared memory. The requests are the same as before, so the IO is too.
//
// Shared memory (floats): Ks [Bc][D+4], Vs [Bc][D], Qs [Br][D+4], Ps [Br][Bc+16], and four rows of
// Br for l_i and m_i as read (l_in, m_in) and as written (l_out, m_out). The pads keep each warp's
// accesses within as few bank wavefronts as their bytes need.
template <int D, int Bc>
struct FlashV1 {
  static constexpr int Br = Bc < D ? Bc : D;
  static constexpr int kThreads = 256;
  static constexpr int RA = Br / 16, CB = Bc / 16;  // rows and S-columns per thread
  static constexpr int W = D >= 64 ? 4 : 2;         // O columns per vector access
  static constexpr int G = D / 16 / W;              // vector accesses per O row per thread
  static constexpr int kLdK = D + 4, kLdQ = D + 4, kLdP = Bc + 16;
  static constexpr int kFloats = Bc * kLdK + Bc * D + Br * kLdQ + Br * kLdP + 4 * Br;
  // Blocks per SM that shared memory allows on an H100 (228 KiB an SM, 1 KiB of it reserved per
  // block), at most 2: the kernel is compiled to fit that many in registers (2: 128 a thread).
  static constexpr int kSmemBlocks = 233472 / (4 * kFloats + 1024);
  static constexpr int kMinBlocks = kSmemBlocks >= 2 ? 2 : 1;
  static_assert(Br % 16 == 0 && Bc % 16 == 0, "blocks are multiples of the 16 × 16 threads");
  // Then a causal key block j starts on a query block (key0 = i·Br for the first i processed), so
  // every row processed sees at least one key of the block. exp_shifted still guards the other case.
  static_assert(Bc % Br == 0, "Bc is a multiple of Br");
  // Column of O for thread column tx, access g, element e: a warp's accesses are contiguous.
  static __device__ int o_col(int tx, int g, int e) { return W * tx + 16 * W * g + e; }
};

template <int W>
__device__ void load_vec(const float* p, float* v) {
  if constexpr (W == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x, v[1] = x.y;
  }
}
template <int W>
__device__ void load_vec_global(const float* p, float* v) {
  if constexpr (W == 4) {
    const float4 x = __ldcg(reinterpret_cast<const float4*>(p));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    const float2 x = __ldcg(reinterpret_cast<const float2*>(p));
    v[0] = x.x, v[1] = x.y;
  }
}
// __stcg: one 16-byte (8-byte) store instruction. (A plain store through a float4 pointer was
// split into four 4-byte stores here, which quadrupled the sectors written.)
template <int W>
__device__ void store_vec(float* p, const float* v) {
  if constexpr (W == 4) {
    __stcg(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else {
    __stcg(reinterpret_cast<float2*>(p), make_float2(v[0], v[1]));
  }
}

// rows × D floats of global memory (rows of D, 16-byte aligned) into shared memory rows of `ld`
// floats, as float4s; rows up to `total` are zero-filled.
template <int D>
__device__ void load_rows(float* __restrict__ dst, int ld, const float* __restrict__ src, int rows,
                          int total, int threads) {
  for (int f = threadIdx.x; f < total * (D / 4); f += threads) {
    const int r = f / (D / 4), k = 4 * (f % (D / 4));
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows) v = __ldcg(reinterpret_cast<const float4*>(src + size_t(r) * D + k));
    *reinterpret_cast<float4*>(dst + r * ld + k) = v;
  }
}

// A block of kRows × D floats on its way from global to shared memory, held in registers: fetch()
// issues the loads, put() stores what arrived. In between the thread can compute; the loads' latency
// is hidden behind that work. Each of the kThreads threads holds kRows·D / (4·kThreads) float4s.
template <int D, int kRows, int kThreads>
struct BlockInFlight {
  static constexpr int kPer = kRows * D / 4 / kThreads;
  static_assert(kPer >= 1 && kRows * D / 4 % kThreads == 0, "whole float4s per thread");
  float4 v[kPer];
  __device__ void fetch(const float* __restrict__ src, int rows) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int f = threadIdx.x + k * kThreads, r = f / (D / 4), c = 4 * (f % (D / 4));
      v[k] = r < rows ? __ldcg(reinterpret_cast<const float4*>(src + size_t(r) * D + c))
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  __device__ void put(float* __restrict__ dst, int ld) const {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int f = threadIdx.x + k * kThreads, r = f / (D / 4), c = 4 * (f % (D / 4));
      *reinterpret_cast<float4*>(dst + r * ld + c) = v[k];
    }
  }
};

// exp(x − m), with exp(−∞ − (−∞)) taken as 0: a row with nothing visible yet contributes nothing.
__device__ inline float exp_shifted(float x, float m) { return m == -INFINITY ? 0.0f : expf(x - m); }

template <int D, int Bc>
__global__ void __launch_bounds__(256, FlashV1<D, Bc>::kMinBlocks)
    flash_v1(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
             float* __restrict__ O, float* __restrict__ l, float* __restrict__ m, int N, bool causal,
             float scale) {
  using F = FlashV1<D, Bc>;
  constexpr int Br = F::Br, RA = F::RA, CB = F::CB, W = F::W, G = F::G;
  extern __shared__ __align__(16) float smem[];
  float* Ks = smem;
  float* Vs = Ks + Bc * F::kLdK;
  float* Qs = Vs + Bc * D;
  float* Ps = Qs + Br * F::kLdQ;
  float* l_in = Ps + Br * F::kLdP;  // l_i and m_i as read from global memory
  float* m_in = l_in + Br;
  float* l_out = m_in + Br;  // the new l_i and m_i, on their way to global memory
  float* m_out = l_out + Br;

  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const size_t head = size_t(blockIdx.x) * N * D, stats = size_t(blockIdx.x) * N;
  const int Tc = (N + Bc - 1) / Bc, Tr = (N + Br - 1) / Br;
  auto first_i = [&](int j) { return causal ? j * Bc / Br : 0; };
  BlockInFlight<D, Br, F::kThreads> next_Q;
  auto fetch_Q = [&](int i) { next_Q.fetch(Q + head + size_t(i) * Br * D, min(Br, N - i * Br)); };

  fetch_Q(first_i(0));
  next_Q.put(Qs, F::kLdQ);
  for (int j = 0; j < Tc; ++j) {
    const int key0 = j * Bc, kv_rows = min(Bc, N - key0);
    load_rows<D>(Ks, F::kLdK, K + head + size_t(key0) * D, kv_rows, Bc, F::kThreads);
    load_rows<D>(Vs, D, V + head + size_t(key0) * D, kv_rows, Bc, F::kThreads);
    for (int i = first_i(j); i < Tr; ++i) {
      const int row0 = i * Br, rows = min(Br, N - row0);
      // Issue the loads of O_i, l_i, m_i (unless j = 0: the paper's initial O = 0, l = 0, m = −∞)
      // into registers now; they are first needed after S_ij, so S_ij hides their latency.
      float o[RA][G][W], l_old = 0.0f, m_old = -INFINITY;
      if (j > 0 && tid < rows) {
        l_old = __ldcg(l + stats + row0 + tid);
        m_old = __ldcg(m + stats + row0 + tid);
      }
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const int r = ty + 16 * a;
          if (j > 0 && r < rows) {
            load_vec_global<W>(O + head + size_t(row0 + r) * D + F::o_col(tx, g, 0), o[a][g]);
          } else {
#pragma unroll
            for (int e = 0; e < W; ++e) o[a][g][e] = 0.0f;
          }
        }
      // At the first i of a j: K_j and V_j are in shared memory (and, at the very first step, Q_i).
      // Later steps' Q_i was stored before the previous step's last barrier.
      __syncthreads();

      // S_ij = scale·Q_i·K_jᵀ, this thread's RA × CB elements.
      float S[RA][CB] = {};
#pragma unroll
      for (int k = 0; k < D; k += 4) {
        float4 q[RA];
#pragma unroll
        for (int a = 0; a < RA; ++a) q[a] = *reinterpret_cast<const float4*>(Qs + (ty + 16 * a) * F::kLdQ + k);
#pragma unroll
        for (int b = 0; b < CB; ++b) {
          const float4 kk = *reinterpret_cast<const float4*>(Ks + (tx + 16 * b) * F::kLdK + k);
#pragma unroll
          for (int a = 0; a < RA; ++a) {
            S[a][b] = fmaf(q[a].x, kk.x, S[a][b]);
            S[a][b] = fmaf(q[a].y, kk.y, S[a][b]);
            S[a][b] = fmaf(q[a].z, kk.z, S[a][b]);
            S[a][b] = fmaf(q[a].w, kk.w, S[a][b]);
          }
        }
      }
      // m̃ = rowmax, P̃ = exp(S − m̃), l̃ = rowsum.
      float m_tilde[RA], l_tilde[RA];
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const int r = ty + 16 * a;
        m_tilde[a] = -INFINITY;
#pragma unroll
        for (int b = 0; b < CB; ++b) {
          const int c = tx + 16 * b;
          const bool seen = c < kv_rows && (!causal || key0 + c <= row0 + r);
          S[a][b] = seen ? S[a][b] * scale : -INFINITY;
          m_tilde[a] = fmaxf(m_tilde[a], S[a][b]);
        }
        for (int mask = 8; mask > 0; mask /= 2) m_tilde[a] = fmaxf(m_tilde[a], __shfl_xor_sync(~0u, m_tilde[a], mask));
        l_tilde[a] = 0.0f;
#pragma unroll
        for (int b = 0; b < CB; ++b) {
          const float p = exp_shifted(S[a][b], m_tilde[a]);
          l_tilde[a] += p;
          Ps[r * F::kLdP + tx + 16 * b] = p;
        }
        for (int mask = 8; mask > 0; mask /= 2) l_tilde[a] += __shfl_xor_sync(~0u, l_tilde[a], mask);
      }
      if (tid < Br) l_in[tid] = l_old, m_in[tid] = m_old;
      __syncthreads();  // P̃_ij, l_i and m_i are in shared memory; Qs is free

      // Issue the loads of the next step's Q block; they arrive while we compute P̃_ij·V_j.
      const int i_next = i + 1 < Tr ? i + 1 : j + 1 < Tc ? first_i(j + 1) : -1;
      if (i_next >= 0) fetch_Q(i_next);

      // The new m and l of each of our rows.
      float alpha[RA], beta[RA], l_new[RA], m_new[RA];
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const int r = ty + 16 * a;
        m_new[a] = fmaxf(m_in[r], m_tilde[a]);
        alpha[a] = exp_shifted(m_in[r], m_new[a]);
        beta[a] = exp_shifted(m_tilde[a], m_new[a]);
        l_new[a] = alpha[a] * l_in[r] + beta[a] * l_tilde[a];
        alpha[a] *= l_in[r];  // l_i·e^(m_i − m_new): old O_i's weight, still to be divided by l_new
      }

      // P̃_ij·V_j for this thread's RA rows and D/16 columns.
      float pv[RA][G][W] = {};
#pragma unroll 2
      for (int c = 0; c < Bc; c += 4) {
        float4 p[RA];
#pragma unroll
        for (int a = 0; a < RA; ++a) p[a] = *reinterpret_cast<const float4*>(Ps + (ty + 16 * a) * F::kLdP + c);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
#pragma unroll
          for (int g = 0; g < G; ++g) {
            float v[W];
            load_vec<W>(Vs + (c + cc) * D + F::o_col(tx, g, 0), v);
#pragma unroll
            for (int a = 0; a < RA; ++a) {
              const float pc = cc == 0 ? p[a].x : cc == 1 ? p[a].y : cc == 2 ? p[a].z : p[a].w;
#pragma unroll
              for (int e = 0; e < W; ++e) pv[a][g][e] = fmaf(pc, v[e], pv[a][g][e]);
            }
          }
        }
      }
      // O_i ← (l_i·e^(m_i − m_new)·O_i + e^(m̃ − m_new)·P̃_ij·V_j) / l_new, as the paper writes it.
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const int r = ty + 16 * a;
        const float old_weight = alpha[a] / l_new[a], new_weight = beta[a] / l_new[a];
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float out[W];
#pragma unroll
          for (int e = 0; e < W; ++e) out[e] = old_weight * o[a][g][e] + new_weight * pv[a][g][e];
          if (r < rows) store_vec<W>(O + head + size_t(row0 + r) * D + F::o_col(tx, g, 0), out);
        }
        if (tx == 0) l_out[r] = l_new[a], m_out[r] = m_new[a];
      }
      if (i_next >= 0) next_Q.put(Qs, F::kLdQ);  // Qs is free since the barrier after P̃
      __syncthreads();  // Q of the next step, l_out and m_out are complete; Ps and Vs are free
      if (tid < rows) {
        l[stats + row0 + tid] = l_out[tid];
        m[stats + row0 + tid] = m_out[tid];
      }
    }
  }
}

namespace {
using FlashV1Kernel = void (*)(const float*, const float*, const float*, float*, float*, float*,
                               int, bool, float);
struct Config {
  int d, Bc;
  FlashV1Kernel kernel;
  int floats;
};
template <int D, int Bc>
Config config() {
  return {D, Bc, flash_v1<D, Bc>, FlashV1<D, Bc>::kFloats};
}
// Keep in step with flash_v1_compiled (algorithm.cpp).
const Config kConfigs[] = {
    config<32, 64>(),  config<32, 128>(), config<32, 256>(), config<32, 512>(),
    config<64, 16>(),  config<64, 32>(),  config<64, 64>(),  config<64, 128>(),
    config<64, 256>(), config<128, 16>(), config<128, 32>(), config<128, 64>()};

const Config* find_config(int d, int Bc) {
  for (const Config& c : kConfigs)
    if (c.d == d && c.Bc == Bc) return &c;
  return nullptr;
}
}  // namespace

std::size_t flash_v1_smem_bytes(int d, int Bc) {
  const Config* c = find_config(d, Bc);
  return c ? sizeof(float) * std::size_t(c->floats) : 0;
}

void require_flash_v1_compiled(int d, int Bc) {
  std::string compiled;
  for (int c : flash_v1_compiled(d)) compiled += " " + std::to_string(c);
  course::require(find_config(d, Bc) != nullptr,
                  "flash_v1 is compiled for d = " + std::to_string(d) + " with Bc in {" + compiled +
                      " } (M = 4·Bc·d), not Bc = " + std::to_string(Bc));
  const std::size_t bytes = flash_v1_smem_bytes(d, Bc);
  course::require(bytes <= course::gpu().smem_per_block_optin,
                  "flash_v1 with d = " + std::to_string(d) + ", Bc = " + std::to_string(Bc) +
                      " needs " + std::to_string(bytes) + " bytes of shared memory; this GPU allows " +
                      std::to_string(course::gpu().smem_per_block_optin));
}

void launch_flash_v1(const Shape& s, Blocks b, const float* Q, const float* K, const float* V,
                     float* O, float* l, float* m) {
  require_supported(s);
  require_flash_v1_compiled(s.d, b.Bc);
  course::require(b.Br == std::min(b.Bc, s.d), "flash_v1 needs Br = min(Bc, d)");
  const Config* c = find_config(s.d, b.Bc);
  const std::size_t bytes = flash_v1_smem_bytes(s.d, b.Bc);
  CUDA_CHECK(cudaFuncSetAttribute(c->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  c->kernel<<<s.heads(), 256, bytes>>>(Q, K, V, O, l, m, s.N, s.causal, 1.0f / std::sqrt(float(s.d)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace attention
