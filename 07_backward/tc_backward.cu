// FlashAttention's backward pass on the tensor cores (fp16, bf16; d = 64, 128), with stage 06's
// building blocks: mma.sync m16n8k16, ldmatrix from swizzled tiles, cp.async double buffering.
//
// What changed from the fp32 kernel (kernels_fp32.cu): the five products run as mma's, and the
// block's roles are split by warp so that three of them never leave the registers. Warp w owns the
// keys 16·w .. 16·w+15 of the key block (Bc = 64, 4 warps), and computes the transposed scores
//   Sᵀ = K_w·Q_iᵀ  and  dPᵀ = V_w·dO_iᵀ          (16 keys × Br queries: stage 06's Q·Kᵀ, roles swapped)
// so that Pᵀ and dSᵀ come out of the accumulators already in the layout of an mma's A operand:
//   dV_w += Pᵀ·dO_i  and  dK_w += dSᵀ·Q_i         (stage 06's P·V, with dO_i and Q_i for V)
// with P and dS never in shared memory. Only dQ_i's share dS·K_j sums over the keys of all four
// warps: dSᵀ goes to shared memory once (8 KB), and warp w computes query rows 16·w .. +15 of it,
// then adds them into dQacc with red.global.add (ptx::red_add_f32x4, 16 bytes a lane).
// Q_i, dO_i, L_i and D_i of step i+1 arrive by cp.async while step i computes.
//
// The deterministic variant (kAtomic = false) drops dQ here, and flash_backward_dq computes it in
// a query-outer pass of its own: stage 06's forward loop, with dS·K_j summed in registers and dQ_i
// written once. Its cost: S, P, dP and dS computed twice (3.5 instead of 2.5 forward FLOPs) and
// K, V read once per query block.
//
// IO (flash_backward_model_bytes with Tiles {64, 64}): per (i, j) pair Q_i, dO_i read (2·e·Br·d)
// and Br·d floats added into dQacc; K, V, dK, dV once.
//
// Rung tuned (kWarps = 8), two changes:
//  1. Bc = 128 keys a block, 8 warps of 16 keys: Q_i, dO_i and the dQacc additions now serve
//     twice the keys, so the key-outer pass moves half the bytes (≈ (2e + 4)·N²·d/128). Each warp
//     keeps its 16 keys; dQ_i's 64 rows are split by rows and by column halves.
//  2. dQ one step late: step i's dQ share is computed in step i+1, after that step's other four
//     products, from a second dSᵀ buffer. The barrier at the top of step i+1 already makes every
//     warp's dSᵀ_i visible, so a step has one barrier instead of two.
// The kernel is bound by latency (2 warps a scheduler), not by L2: change 1 halves the L2 traffic,
// change 2's fewer barriers are what make it faster (chapter 07).
//
// Rung wide (d = 64; kWarps = 4, MT = 2): the latency answer. Each warp owns 32 keys (two 16-row
// mma tiles, MT) instead of 16, so each Q_i / dO_i fragment it loads by ldmatrix feeds two mma's,
// and 4 warps cover Bc = 128 keys. Br drops to 32 so that the accumulators (Sᵀ, dPᵀ, dK_w, dV_w
// for 32 keys) fit 255 registers without spills, two blocks an SM; dSᵀ rows of 32 queries are
// paired into 128-byte swizzled rows (ds_at). dQ stays one step late. IO: Bc = 128 as tuned, so
// the same key-outer bytes (flash_backward_model_bytes with Tiles {32, 128}: Q_i and dO_i are
// read once per (i, j) pair whatever Br is). 13-19% faster than tuned at d = 64 (chapter 07).
//
// At d = 128 the next rung, split, divides the block's work differently (FA-2's warp grid, P and dS
// through shared memory): tc_split.cu.
#include "check.hpp"
#include "gpu.hpp"
#include "kernels.cuh"
#include "tc_bwd.cuh"

namespace attention {
namespace bwd {

using namespace attention::tc;

// kWarps = 4: rung tc (Bc = 64). kWarps = 8: rung tuned (Bc = 128; see the note above the kernel).
// MT = 2 (4 warps of 32 keys, Bc = 128, Br = 32): rung wide (d = 64).
template <int D, int kWarps, int MT = 1>
struct KeyOuter {
  static constexpr Tiles kTiles = MT == 2 ? kWideTiles : kWarps == 4 ? kTcTiles : kTunedTiles;
  static constexpr int Br = kTiles.Br, Bc = kTiles.Bc, kThreads = 32 * kWarps;
  static constexpr int NT = Br / 8, DT = D / 8;
  static_assert(Bc == 16 * MT * kWarps && Br % 32 == 0, "warps of 16·MT keys; whole dSᵀ rows");
  // dQ_i's share (Br rows × D): warp w takes rows 16·(w % kRowTiles) .. +15 and the columns
  // (w / kRowTiles)·kDqCols .. +kDqCols − 1 (with 8 warps, or MT = 2: half of them).
  static constexpr int kRowTiles = Br / 16;
  static constexpr int kDqCols = D / (kWarps / kRowTiles);
  // dSᵀ [key][query]: rows of Br halves, swizzled (Br = 32: two keys share a 128-byte row).
  static __device__ int ds_at(int key, int chunk) {
    if constexpr (Br >= 64) return ptx::swizzle<Br>(key, chunk);
    else return ptx::swizzle<64>(key / 2, (key % 2) * (Br / 8) + chunk);
  }
  // Rung tuned adds step i's dQ share one step late, after step i+1's other products: the barrier
  // at the top of step i+1 already says every warp's dSᵀ_i is in shared memory, so the step needs
  // one barrier instead of two, and dQ's mma's overlap step i+1's. dSᵀ gets two buffers.
  static constexpr bool kLateDq = kWarps == 8 || MT == 2;
  static constexpr int kDsBuffers = kLateDq ? 2 : 1;
  static constexpr bool kFragsInRegisters = D == 64 && MT == 1;  // K_w, V_w's A fragments (else from smem)
  // K, V [Bc][D]; Q, dO [2][Br][D]; dSᵀ [kDsBuffers][Bc][Br] (halves); L, D [2][Br] (floats)
  static constexpr int kHalves = 2 * Bc * D + 4 * Br * D + kDsBuffers * Bc * Br;
  static constexpr size_t kBytes = 2 * size_t(kHalves) + 4 * 4 * Br;
};

template <class T, int D, int kWarps, bool kAtomic, int MT = 1>
__global__ void __launch_bounds__(32 * kWarps, 8 / kWarps) flash_backward_kv(Params p, const uint16_t* __restrict__ dO,
                                                            const float* __restrict__ L, const float* __restrict__ Dv,
                                                            float* __restrict__ dQacc, uint16_t* __restrict__ dK,
                                                            uint16_t* __restrict__ dV) {
  using F = KeyOuter<D, kWarps, MT>;
  constexpr int Br = F::Br, Bc = F::Bc, NT = F::NT, DT = F::DT, kThreads = F::kThreads;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Ks = smem;
  uint16_t* Vs = Ks + Bc * D;
  auto Qs = [&](int b) { return Vs + Bc * D + b * 2 * Br * D; };
  auto dOs = [&](int b) { return Qs(b) + Br * D; };
  auto dSt = [&](int b) { return Vs + Bc * D + 4 * Br * D + (F::kLateDq ? b : 0) * Bc * Br; };  // [key][query]
  float* stats = reinterpret_cast<float*>(dSt(0) + F::kDsBuffers * Bc * Br);
  auto Ls = [&](int b) { return stats + b * 2 * Br; };
  auto Ds = [&](int b) { return Ls(b) + Br; };
  const int warp = threadIdx.x / 32, lane = lane_id(), g = lane / 4, t = lane % 4;
  const int j = blockIdx.x, key0 = j * Bc;
  const size_t head = size_t(blockIdx.y) * p.N * D, stat0 = size_t(blockIdx.y) * p.N;
  const float c = p.scale * ptx::kLog2e;
  auto fetch = [&](int i, int b) {  // Q_i, dO_i, L_i, D_i into buffer b
    const int row0 = i * Br, rows = p.N - row0;
    load_tile_async<D, Br, kThreads>(Qs(b), p.Q + head + size_t(row0) * D, rows);
    load_tile_async<D, Br, kThreads>(dOs(b), dO + head + size_t(row0) * D, rows);
    load_stats_async<Br>(Ls(b), Ds(b), L + stat0 + row0, Dv + stat0 + row0, rows);
    ptx::cp_async_commit();
  };

  const int first = first_query_block(Br, Bc, p.causal, j), Tr = (p.N + Br - 1) / Br;
  load_tile_async<D, Bc, kThreads>(Ks, p.K + head + size_t(key0) * D, p.N - key0);
  load_tile_async<D, Bc, kThreads>(Vs, p.V + head + size_t(key0) * D, p.N - key0);
  fetch(first, 0);

  // dQ_i's share, from dSᵀ_i in shared memory (every warp's), added into dQacc.
  auto add_dq = [&](const uint16_t* dS, int row0) {
    // dQ_i's share for queries 16·rw .. +15, columns col0 .. col0 + kDqCols − 1: A = dS
    // (queries × keys) by ldmatrix .trans from dSᵀ; B = K_j (keys × d) by ldmatrix .trans, as V
    // in P·V.
    constexpr int kRowTiles = F::kRowTiles;
    const int rw = kWarps == kRowTiles ? warp : warp % kRowTiles;
    const int col0 = kWarps == kRowTiles ? 0 : (warp / kRowTiles) * F::kDqCols;
    uint32_t dSq[1][Bc / 16][4];
#pragma unroll
    for (int k = 0; k < Bc / 16; ++k) {
      const int tile = lane / 8, key = 16 * k + 8 * (tile / 2) + lane % 8;
      ptx::ldmatrix_x4_trans(dSq[0][k], dS + F::ds_at(key, 2 * rw + tile % 2));
    }
    float dq[1][F::kDqCols / 8][4] = {};
    pv_ldmatrix<T, D, 1, Bc / 8, F::kDqCols>(dq, dSq, Ks, col0);
    red_add_dq<D>(dq, dQacc + head + size_t(row0 + 16 * rw) * D + col0, p.N - row0 - 16 * rw);
  };

  uint32_t kf[1][F::kFragsInRegisters ? D / 16 : 1][4], vf[1][F::kFragsInRegisters ? D / 16 : 1][4];
  float dk[MT][DT][4] = {}, dv[MT][DT][4] = {};
  for (int i = first; i < Tr; ++i) {
    const int b = (i - first) & 1, row0 = i * Br;
    ptx::cp_async_wait<0>();
    __syncthreads();  // step i's tiles are visible; every warp is done with step i−1 (its buffer, dSᵀ)
    if (i + 1 < Tr) fetch(i + 1, b ^ 1);
    if constexpr (F::kFragsInRegisters) {
      if (i == first) load_q_ldmatrix<D, 1>(kf, Ks, 16 * warp), load_q_ldmatrix<D, 1>(vf, Vs, 16 * warp);
    }

    // Sᵀ = K_w·Q_iᵀ and dPᵀ = V_w·dO_iᵀ (16·MT keys × Br queries each), then Pᵀ = exp(scale·Sᵀ − L),
    // the forward's P recomputed, and dSᵀ = Pᵀ ∘ (dPᵀ − D). The mask goes on Sᵀ first, as stage 06
    // does it (−∞, in blocks that need it), so that no branch separates the exps from dPᵀ's mma's:
    // in one basic block the compiler interleaves them. With the mask test inside the exp loop, every
    // exp would wait for the last mma.
    float St[MT][NT][4] = {}, dPt[MT][NT][4] = {};
    if constexpr (F::kFragsInRegisters) qk_ldmatrix<T, D, 1, NT>(St, kf, Qs(b));
    else qk_smem_q<T, D, MT, NT>(St, Ks, 16 * MT * warp, Qs(b));
    const bool mask = COURSE_BLOCK_NEEDS_MASK(row0, key0 + Bc, p.Nk, p.causal);  // Nk: N but in stage 10
    if (mask) mask_scores<true>(St, key0 + 16 * MT * warp, row0, p.Nk, p.causal);  // Sᵀ: keys in rows
    if constexpr (F::kFragsInRegisters) qk_ldmatrix<T, D, 1, NT>(dPt, vf, dOs(b));
    else qk_smem_q<T, D, MT, NT>(dPt, Vs, 16 * MT * warp, dOs(b));
    softmax_backward_t(St, dPt, Ls(b), Ds(b), c);
    // Packed to 16 bits as A fragments (k = queries).
    uint32_t Pa[MT][NT / 2][4], dSa[MT][NT / 2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pack_a<T>(St[mt], Pa[mt]);
      pack_a<T>(dPt[mt], dSa[mt]);
    }
    if constexpr (kAtomic) {  // dSᵀ rows 16(MT·w + mt) + g (+8) into shared memory, for dQ
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int k = 0; k < NT / 2; ++k)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int key = 16 * (MT * warp + mt) + g + 8 * (x % 2), chunk = 2 * k + x / 2;
            *reinterpret_cast<uint32_t*>(dSt(b) + F::ds_at(key, chunk) + 2 * t) = dSa[mt][k][x];
          }
    }

    // dV_w += Pᵀ·dO_i and dK_w += dSᵀ·Q_i (stage 06's P·V, k = the Br queries).
    pv_ldmatrix<T, D, MT, NT>(dv, Pa, dOs(b));
    pv_ldmatrix<T, D, MT, NT>(dk, dSa, Qs(b));

    if constexpr (kAtomic) {
      if constexpr (F::kLateDq) {
        if (i > first) add_dq(dSt(b ^ 1), row0 - Br);  // step i−1's, made visible by the barrier above
      } else {
        __syncthreads();  // dSᵀ of every warp is in shared memory
        add_dq(dSt(0), row0);
      }
    }
  }
  if constexpr (kAtomic && F::kLateDq) {  // the last step's share
    __syncthreads();
    add_dq(dSt((Tr - 1 - first) & 1), (Tr - 1) * Br);
  }

  // dK_w·scale and dV_w, through shared memory (this warp's own rows of K and V, once every warp
  // is done reading them) so that each lane writes whole 16-byte chunks (tc_bwd.cuh).
  __syncthreads();
  const int key_w = 16 * MT * warp;
  stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, key_w, 0, g, t);
  __syncwarp();
  store_dk_dv<D, 16 * MT, D / 8>(dK, dV, Ks, Vs, head, key0, key_w, 0, p.N, lane);
}

// The deterministic variant's dQ: one block per (query block i, head), 4 warps of 16 rows, K_j and
// V_j double-buffered as in stage 06's rung 3. Per key block: S = Q_w·K_jᵀ, dP = dO_w·V_jᵀ,
// P = exp(scale·S − L), dS = P ∘ (dP − D), dQ_w += dS·K_j; dQ_w·scale written once at the end.
template <int D>
struct QueryOuter {
  static constexpr int Br = kDqTiles.Br, Bc = kDqTiles.Bc, kThreads = 128, NT = Bc / 8, DT = D / 8;
  static_assert(Br == 16 * (kThreads / 32), "one warp per 16 rows");
  static constexpr bool kFragsInRegisters = D == 64;  // Q_w and dO_w's A fragments
  static constexpr int kHalves = 2 * Br * D + 4 * Bc * D;  // Q, dO; K[2], V[2]
  static constexpr size_t kBytes = 2 * size_t(kHalves);
};

template <class T, int D>
__global__ void __launch_bounds__(128, 2) flash_backward_dq(Params p, const uint16_t* __restrict__ dO,
                                                            const float* __restrict__ L, const float* __restrict__ Dv,
                                                            uint16_t* __restrict__ dQ) {
  using F = QueryOuter<D>;
  constexpr int Br = F::Br, Bc = F::Bc, NT = F::NT, DT = F::DT;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Qs = smem;
  uint16_t* dOs = Qs + Br * D;
  auto Ks = [&](int j) { return dOs + Br * D + (j & 1) * 2 * Bc * D; };
  auto Vs = [&](int j) { return Ks(j) + Bc * D; };
  const int warp = threadIdx.x / 32, lane = lane_id(), g = lane / 4, t = lane % 4;
  const int i = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest first when causal
  const int row0 = i * Br, warp_row0 = row0 + 16 * warp;
  const size_t head = size_t(blockIdx.y) * p.N * D, stat0 = size_t(blockIdx.y) * p.N;
  const float c = p.scale * ptx::kLog2e, log2e = ptx::kLog2e;
  auto fetch_kv = [&](int j) {
    const int key0 = j * Bc;
    load_tile_async<D, Bc, 128>(Ks(j), p.K + head + size_t(key0) * D, p.N - key0);
    load_tile_async<D, Bc, 128>(Vs(j), p.V + head + size_t(key0) * D, p.N - key0);
    ptx::cp_async_commit();
  };
  const int blocks = key_blocks(p.N, Br, Bc, p.causal, i);
  load_tile_async<D, Br, 128>(Qs, p.Q + head + size_t(row0) * D, p.N - row0);
  load_tile_async<D, Br, 128>(dOs, dO + head + size_t(row0) * D, p.N - row0);
  fetch_kv(0);
  // L and D of the lane's rows g and g + 8 (rows past N: L = +∞ makes P = 0).
  float Lr[2], Dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp_row0 + g + 8 * h;
    Lr[h] = row < p.N ? L[stat0 + row] * log2e : INFINITY;
    Dr[h] = row < p.N ? Dv[stat0 + row] : 0.0f;
  }

  uint32_t qf[1][F::kFragsInRegisters ? D / 16 : 1][4], gf[1][F::kFragsInRegisters ? D / 16 : 1][4];
  float dq[1][DT][4] = {};
  for (int j = 0; j < blocks; ++j) {
    ptx::cp_async_wait<0>();
    __syncthreads();  // block j is visible, and every warp is done with block j−1's buffer
    if (j + 1 < blocks) fetch_kv(j + 1);
    if constexpr (F::kFragsInRegisters) {
      if (j == 0) load_q_ldmatrix<D, 1>(qf, Qs, 16 * warp), load_q_ldmatrix<D, 1>(gf, dOs, 16 * warp);
    }
    // S = Q_w·K_jᵀ, masked as in the forward (before dP's mma's: see the key-outer kernel), dP.
    const int key0 = j * Bc;
    float S[1][NT][4] = {}, dP[1][NT][4] = {};
    if constexpr (F::kFragsInRegisters) qk_ldmatrix<T, D, 1, NT>(S, qf, Ks(j));
    else qk_smem_q<T, D, 1, NT>(S, Qs, 16 * warp, Ks(j));
    const bool mask = COURSE_BLOCK_NEEDS_MASK(row0, key0 + Bc, p.N, p.causal);
    if (mask) mask_scores(S, warp_row0, key0, p.N, p.causal);
    if constexpr (F::kFragsInRegisters) qk_ldmatrix<T, D, 1, NT>(dP, gf, Vs(j));
    else qk_smem_q<T, D, 1, NT>(dP, dOs, 16 * warp, Vs(j));
    uint32_t dSa[1][NT / 2][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float P = ptx::exp2_approx(fmaf(S[0][n][e], c, -Lr[e / 2]));
        S[0][n][e] = P * (dP[0][n][e] - Dr[e / 2]);
      }
    pack_a<T>(S[0], dSa[0]);
    pv_ldmatrix<T, D, 1, NT>(dq, dSa, Ks(j));
  }
  // dQ_w·scale through this warp's own rows of Q's tile (only this warp ever read them).
  __syncwarp();
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < DT; ++n)
      *reinterpret_cast<uint32_t*>(Qs + ptx::swizzle<D>(16 * warp + g + 8 * h, n) + 2 * t) =
          ptx::pack<T>(dq[0][n][2 * h] * p.scale, dq[0][n][2 * h + 1] * p.scale);
  __syncwarp();
  constexpr int kChunks = D / 8;
  for (int f = lane; f < 16 * kChunks; f += 32) {
    const int r = f / kChunks, ch = f % kChunks;
    if (warp_row0 + r >= p.N) continue;
    __stcg(reinterpret_cast<uint4*>(dQ + head + size_t(warp_row0 + r) * D) + ch,
           *reinterpret_cast<const uint4*>(Qs + ptx::swizzle<D>(16 * warp + r, ch)));
  }
}

}  // namespace bwd

namespace {
// The key-outer pass with kWarps warps of 16·MT keys (Bc = 16·MT·kWarps a block); dQacc null: no dQ.
template <int kWarps, int MT = 1>
void launch_key_outer(const char* what, const Shape& s, course::Dtype t, const BackwardArgs& a) {
  tc::dispatch(what, s, t, [&](auto config) {
    using C = decltype(config);
    if constexpr (MT == 2 && C::D != 64) {  // 32 keys a warp fit the registers at d = 64 only
      throw course::UsageError(std::string(what) + " runs d = 64 only");
    } else {
    using F = bwd::KeyOuter<C::D, kWarps, MT>;
    course::require_shared_memory(F::kBytes, std::string(what) + " at d = " + std::to_string(C::D));
    auto run = [&](auto kernel) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(F::kBytes)));
      const dim3 grid((s.N + F::Bc - 1) / F::Bc, s.heads());
      kernel<<<grid, F::kThreads, F::kBytes>>>(bwd::with_keys(tc::params(a.Q, a.K, a.V, nullptr, nullptr, s.N, s.causal, C::D), a),
                                               static_cast<const uint16_t*>(a.dO), a.L, a.D, a.dQacc,
                                               static_cast<uint16_t*>(a.dK), static_cast<uint16_t*>(a.dV));
      CUDA_CHECK_LAUNCH();
    };
    if (a.dQacc) run(bwd::flash_backward_kv<typename C::T, C::D, kWarps, true, MT>);
    else run(bwd::flash_backward_kv<typename C::T, C::D, kWarps, false, MT>);
    }
  });
}
}  // namespace

void launch_flash_backward_tc(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  launch_key_outer<4>("flash backward (tensor cores)", s, t, a);
}

void launch_flash_backward_tuned(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  launch_key_outer<8>("flash backward (tensor cores, tuned)", s, t, a);
}

void launch_flash_backward_wide(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  launch_key_outer<4, 2>("flash backward (tensor cores, wide)", s, t, a);
}

void launch_flash_backward_dq(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  tc::dispatch("flash backward dQ (tensor cores)", s, t, [&](auto config) {
    using C = decltype(config);
    using F = bwd::QueryOuter<C::D>;
    const auto kernel = bwd::flash_backward_dq<typename C::T, C::D>;
    course::require_shared_memory(F::kBytes, "flash backward dQ (tensor cores) at d = " + std::to_string(C::D));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(F::kBytes)));
    const dim3 grid((s.N + F::Br - 1) / F::Br, s.heads());
    kernel<<<grid, F::kThreads, F::kBytes>>>(tc::params(a.Q, a.K, a.V, nullptr, nullptr, s.N, s.causal, C::D),
                                             static_cast<const uint16_t*>(a.dO), a.L, a.D,
                                             static_cast<uint16_t*>(a.dQ));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention
