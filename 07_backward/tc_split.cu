// Rung split (d = 128): FlashAttention-2's own division of the block's work between its warps,
// with P and dS through shared memory.
//
// Why: at d = 128, `tuned` is bound by shared memory, not by the tensor cores. ncu on the H100 (N =
// 16384, fp16): L1/shared throughput 81%, 3.22 G load wavefronts against FA-2's 2.42 G, and its
// time 1.20× FA-2's. A warp that owns 16 keys and every query of the block reads all of Q_i and
// dO_i twice a step (for Sᵀ, dPᵀ, and again for dK, dV), 512 of the ≈ 750 KB a step reads from
// shared memory. For an m × n tile of a product whose operands both come from shared memory, a
// warp reads (m + n)·k·2 bytes for 2·m·n·k FLOPs, so the square tiles read the least:
//   Sᵀ, dPᵀ   warp (wk, wq) of 4 × 2: keys 32·wk .. +31 × queries 32·wq .. +31    (16 × 64: 32 × 32)
//   dV, dK    the same 32 keys × columns 64·wq .. +63 of d, k = all 64 queries:  A = Pᵀ, dSᵀ from
//             shared memory (the whole block's, hence the barrier), B = dO_i, Q_i
//   dQ        queries 32·(w % 2) .. +31 × columns 32·(w / 2) .. +31              (16 × 64: 32 × 32)
// Per step (Br = 64, Bc = 128) that is ≈ 590 KB instead of ≈ 750 KB, plus 32 KB of Pᵀ and dSᵀ
// stores; the price is a barrier between the halves of a step (Pᵀ and dSᵀ of every warp before dV
// and dK). It is the step's only one: with Q/dO in three buffers and Pᵀ/dSᵀ in two, the barrier at
// the top of a step (tiles arrived, buffers free) folds into the previous step's. Measured on the
// H100 against two barriers a step (N = 16384, fp16): barrier stalls 0.27 → 0.16 cycles per
// instruction, 17.80 → 17.53 ms under ncu, 1-2% in every d = 128 cell.
// Registers are as in `tuned`: dK_w, dV_w (32 keys × 64 columns each) are 128 floats a lane, Sᵀ
// and dPᵀ 64. IO between the SMs and L2: that of `tuned` (the same tiles, Br = 64, Bc = 128).
#include "check.hpp"
#include "gpu.hpp"
#include "kernels.cuh"
#include "tc_bwd.cuh"

namespace attention {
namespace bwd {

struct Split {
  static constexpr Tiles kTiles = kTunedTiles;
  static constexpr int Br = kTiles.Br, Bc = kTiles.Bc, kWarps = 8, kThreads = 32 * kWarps;
  static_assert(Br == 64 && Bc == 128, "warps of 32 keys × 32 queries, 4 × 2");
  // One barrier a step: Q_i, dO_i, L_i, D_i in 3 buffers, Pᵀ and dSᵀ in 2 (see the loop).
  static constexpr int kQBuf = 3, kPBuf = 2;
  // K, V [Bc][D]; Q, dO [kQBuf][Br][D]; Pᵀ, dSᵀ [kPBuf][Bc][Br] (halves); L, D [kQBuf][Br] (floats):
  // 225.5 KB at d = 128, of the 227 KB a block may have.
  template <int D>
  static constexpr size_t bytes() {
    return 2 * size_t(2 * Bc * D + kQBuf * 2 * Br * D + kPBuf * 2 * Bc * Br) + 4 * kQBuf * 2 * Br;
  }
};

// Addresses. Every fragment a lane loads by ldmatrix lies at a fixed place relative to the lane's
// first one: a step of 16 rows is an immediate offset, and a step of 2 chunks (16 columns) along a
// swizzled row is an XOR of 32 bytes, since the swizzle XORs the chunk with the row's low three
// bits and those are the lane's own (l % 8) in every tile. So each operand keeps one 32-bit byte
// offset a lane (from the start of shared memory; every tile starts on a multiple of 256 bytes, so
// the XOR touches the chunk's bits only), and each ldmatrix costs one LOP3 at most. Measured on the
// H100 (d = 128, N = 16384) against computing each address from its row and chunk, as stage 06's
// helpers do: 11% fewer instructions (5.16 → 4.61 G), 1% less time; the kernel waits on ldmatrix
// and mma latencies, not on issue. The lane's first offset, in a tile that starts `tile` halves
// into shared memory:
template <int kRowHalves>
__device__ uint32_t lane_offset(int tile, int row, int chunk) {
  return 2 * (tile + ptx::swizzle<kRowHalves>(row, chunk));
}

// Sᵀ += A·Bᵀ over d (k = D/16 steps of 16 columns), both operands row-major in tiles of rows of D
// halves: A's MT m-tiles of 16 rows from a, B's NT n-tiles of 8 rows from b (the lanes' offsets,
// lane_offset, in shared memory from `smem`; one ldmatrix_x4 of B covers two n-tiles).
template <class T, int D, int MT, int NT>
__device__ void mma_abt(float (&S)[MT][NT][4], uint32_t smem, uint32_t a, uint32_t b) {
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ptx::ldmatrix_x4(af[mt], smem + (a ^ (32 * k)) + mt * 16 * D * 2);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];
      ptx::ldmatrix_x4(bf, smem + (b ^ (32 * k)) + n * 8 * D * 2);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ptx::mma_m16n8k16<T>(S[mt][n], af[mt], {bf[0], bf[1]});
        ptx::mma_m16n8k16<T>(S[mt][n + 1], af[mt], {bf[2], bf[3]});
      }
    }
  }
}

// o += A·B over KT steps of 16 (k), B k-major (rows of kBRow halves) by ldmatrix .trans, NC
// n-tiles of 8 columns from b; A's MT m-tiles from a, stored row-major (A[m][k], rows of kARow
// halves) or, with kATrans, k-major (A[k][m], ldmatrix .trans).
template <class T, int MT, int KT, int NC, int kARow, bool kATrans, int kBRow>
__device__ void mma_ab(float (&o)[MT][NC][4], uint32_t smem, uint32_t a, uint32_t b) {
#pragma unroll
  for (int k = 0; k < KT; ++k) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (kATrans) ptx::ldmatrix_x4_trans(af[mt], smem + (a ^ (32 * mt)) + k * 16 * kARow * 2);
      else ptx::ldmatrix_x4(af[mt], smem + (a ^ (32 * k)) + mt * 16 * kARow * 2);
    }
#pragma unroll
    for (int n = 0; n < NC; n += 2) {
      uint32_t bf[4];
      ptx::ldmatrix_x4_trans(bf, smem + (b ^ (16 * n)) + k * 16 * kBRow * 2);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ptx::mma_m16n8k16<T>(o[mt][n], af[mt], {bf[0], bf[1]});
        ptx::mma_m16n8k16<T>(o[mt][n + 1], af[mt], {bf[2], bf[3]});
      }
    }
  }
}

template <class T, int D, bool kAtomic>
__global__ void __launch_bounds__(256, 1) flash_backward_split(Params p, const uint16_t* __restrict__ dO,
                                                               const float* __restrict__ L, const float* __restrict__ Dv,
                                                               float* __restrict__ dQacc, uint16_t* __restrict__ dK,
                                                               uint16_t* __restrict__ dV) {
  using F = Split;
  constexpr int Br = F::Br, Bc = F::Bc, kThreads = F::kThreads;
  constexpr int MT = 2, NT = 4;  // a warp's Sᵀ: 2 tiles of 16 keys × 4 tiles of 8 queries
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Ks = smem;
  uint16_t* Vs = Ks + Bc * D;
  auto Qs = [&](int b) { return Vs + Bc * D + b * 2 * Br * D; };
  auto dOs = [&](int b) { return Qs(b) + Br * D; };
  constexpr int kQBuf = F::kQBuf, kPBuf = F::kPBuf;
  uint16_t* Pt = Vs + Bc * D + kQBuf * 2 * Br * D;  // Pᵀ [key][query], rows of Br halves, swizzled
  float* stats = reinterpret_cast<float*>(Pt + kPBuf * 2 * Bc * Br);
  auto Ls = [&](int b) { return stats + b * 2 * Br; };
  auto Ds = [&](int b) { return Ls(b) + Br; };
  const int warp = threadIdx.x / 32, lane = lane_id(), g = lane / 4, t = lane % 4;
  const int wk = warp / 2, wq = warp % 2;  // keys 32·wk .. +31; queries (Sᵀ) and columns (dK, dV) half wq
  const int j = blockIdx.x, key0 = j * Bc;
  const size_t head = size_t(blockIdx.y) * p.N * D, stat0 = size_t(blockIdx.y) * p.N;
  const float c = p.scale * ptx::kLog2e;
  const int Tr = (p.N + Br - 1) / Br;
  auto fetch = [&](int i, int b) {  // Q_i, dO_i, L_i, D_i into buffer b (i >= Tr: an empty group)
    if (i < Tr) {
      const int row0 = i * Br, rows = p.N - row0;
      load_tile_async<D, Br, kThreads>(Qs(b), p.Q + head + size_t(row0) * D, rows);
      load_tile_async<D, Br, kThreads>(dOs(b), dO + head + size_t(row0) * D, rows);
      load_stats_async<Br>(Ls(b), Ds(b), L + stat0 + row0, Dv + stat0 + row0, rows);
    }
    ptx::cp_async_commit();
  };

  const int first = first_query_block(Br, Bc, p.causal, j);
  load_tile_async<D, Bc, kThreads>(Ks, p.K + head + size_t(key0) * D, p.N - key0);
  load_tile_async<D, Bc, kThreads>(Vs, p.V + head + size_t(key0) * D, p.N - key0);
  fetch(first, 0);
  fetch(first + 1, 1);
  ptx::cp_async_wait<1>();
  __syncthreads();

  // The lanes' offsets (lane_offset): l % 8 is the lane's row in its 8 × 8 tile, l / 8 the tile.
  const uint32_t smem0 = ptx::shared_address(smem);
  const int r8 = lane % 8, tile = lane / 8;
  constexpr int kQ = 2 * Bc * D, kPt = kQ + kQBuf * 2 * Br * D;  // where Q(0) and Pᵀ start (halves)
  constexpr uint32_t kKV = Bc * D * 2, kQdO = Br * D * 2, kBuffer = 2 * kQdO, kPdS = Bc * Br * 2;  // bytes apart
  static_assert(kKV % 256 == 0 && kQdO % 256 == 0 && kPdS % 256 == 0 && (2 * kQ) % 256 == 0 && (2 * kPt) % 256 == 0,
                "every tile on 256 bytes: the XORs of lane_offset reach the chunk bits only");
  const uint32_t k_at = lane_offset<D>(0, 32 * wk + 8 * (tile % 2) + r8, tile / 2);        // A of Sᵀ (K; V + kKV)
  const uint32_t q_at0 = lane_offset<D>(kQ, 32 * wq + 8 * (tile / 2) + r8, tile % 2);      // B of Sᵀ (Q; dO + kQdO)
  const uint32_t p_at = lane_offset<Br>(kPt, 32 * wk + 8 * (tile % 2) + r8, tile / 2);    // A of dV (Pᵀ; dSᵀ + kPdS)
  const uint32_t dO_cols0 = lane_offset<D>(kQ + Br * D, 8 * (tile % 2) + r8, D / 16 * wq + tile / 2);  // B of dV (dO; Q − kQdO)
  const uint32_t dS_rows = lane_offset<Br>(kPt + Bc * Br, 8 * (tile / 2) + r8, 4 * wq + tile % 2);   // A of dQ (dS, from dSᵀ)
  const uint32_t k_cols = lane_offset<D>(0, 8 * (tile % 2) + r8, 4 * wk + tile / 2);       // B of dQ (K)
  const uint32_t st_at = lane_offset<Br>(kPt, 32 * wk + g, 4 * wq) + 4 * t;                // Pᵀ, dSᵀ stores

  float dk[MT][D / 16][4] = {}, dv[MT][D / 16][4] = {};  // 32 keys × D/2 columns each
  // One barrier a step, in its middle. Step i writes Pᵀ and dSᵀ into the buffer step i−2 used,
  // whose readers (step i−2's dV, dK, dQ) all finished before the barrier of step i−1; its Q_i, dO_i
  // arrived by the barrier of step i−1; and after its own barrier every warp is done with step i−1,
  // so that step i+2's tiles can be fetched into step i−1's buffer, to be waited for at step i+1's
  // barrier.
  int b = 0, pb = 0;  // this step's Q/dO buffer (of 3) and Pᵀ/dSᵀ buffer (of 2)
  for (int i = first; i < Tr; ++i) {
    const int row0 = i * Br;

    // Sᵀ = K_w·Q_wᵀ and dPᵀ = V_w·dO_wᵀ: 32 keys × 32 queries each.
    const uint32_t q_at = q_at0 + b * kBuffer, pd = pb * 2 * kPdS;
    float St[MT][NT][4] = {}, dPt[MT][NT][4] = {};
    mma_abt<T, D, MT, NT>(St, smem0, k_at, q_at);
    // The mask before dPᵀ's mma's, then Pᵀ = exp(scale·Sᵀ − L) and dSᵀ = Pᵀ ∘ (dPᵀ − D), as in
    // tc_backward.cu (one basic block: the exps and the mma's interleave).
    const bool mask = COURSE_BLOCK_NEEDS_MASK(row0, key0 + Bc, p.Nk, p.causal);  // Nk: N but in stage 10
    if (mask) mask_scores<true>(St, key0 + 32 * wk, row0 + 32 * wq, p.Nk, p.causal);  // Sᵀ: keys in rows
    mma_abt<T, D, MT, NT>(dPt, smem0, k_at + kKV, q_at + kQdO);
    softmax_backward_t(St, dPt, Ls(b) + 32 * wq, Ds(b) + 32 * wq, c);

    // Pᵀ and dSᵀ into shared memory, packed to 16 bits: the accumulator layout, 4 bytes a lane
    // (rows 16·mt + 8·(x % 2) on: immediates; chunks 2k + x / 2 on: XOR, as for ldmatrix).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      uint32_t Pa[NT / 2][4], dSa[NT / 2][4];
      pack_a<T>(St[mt], Pa);
      pack_a<T>(dPt[mt], dSa);
#pragma unroll
      for (int k = 0; k < NT / 2; ++k)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const uint32_t at = (st_at ^ (16 * (2 * k + x / 2))) + (16 * mt + 8 * (x % 2)) * Br * 2 + pd;
          ptx::st_shared_b32(smem0 + at, Pa[k][x]);
          ptx::st_shared_b32(smem0 + at + kPdS, dSa[k][x]);
        }
    }
    ptx::cp_async_wait<0>();  // step i+1's tiles (this thread's copies)
    __syncthreads();          // every warp's Pᵀ and dSᵀ, and step i+1's tiles; every warp is done with step i−1
    fetch(i + 2, b == 0 ? 2 : b - 1);

    // dV_w += Pᵀ·dO_i and dK_w += dSᵀ·Q_i: 32 keys × columns 64·wq .. +63, k = the Br queries.
    const uint32_t dO_cols = dO_cols0 + b * kBuffer;
    mma_ab<T, MT, Br / 16, D / 16, Br, false, D>(dv, smem0, p_at + pd, dO_cols);
    mma_ab<T, MT, Br / 16, D / 16, Br, false, D>(dk, smem0, p_at + pd + kPdS, dO_cols - kQdO);

    if constexpr (kAtomic) {  // dQ_i's share: queries 32·wq .. +31 × columns 32·wk .. +31, k = the Bc keys
      float dq[MT][4][4] = {};
      mma_ab<T, MT, Bc / 16, 4, Br, true, D>(dq, smem0, dS_rows + pd, k_cols);
      red_add_dq<D>(dq, dQacc + head + size_t(row0 + 32 * wq) * D + 32 * wk, p.N - row0 - 32 * wq);
    }
    b = b == 2 ? 0 : b + 1;
    pb ^= 1;
  }

  // dK_w·scale and dV_w through shared memory (this warp's own rows and columns of K and V, once
  // every warp is done reading them), so that each lane writes whole 16-byte chunks (tc_bwd.cuh):
  // the warp's 32 keys, and its half of each row, D / 16 chunks from chunk D / 16 · wq.
  __syncthreads();
  stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, 32 * wk, D / 16 * wq, g, t);
  __syncwarp();
  store_dk_dv<D, 32, D / 16>(dK, dV, Ks, Vs, head, key0, 32 * wk, D / 16 * wq, p.N, lane);
}

}  // namespace bwd

void launch_flash_backward_split(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  const char* what = "flash backward (tensor cores, split)";
  tc::dispatch(what, s, t, [&](auto config) {
    using C = decltype(config);
    if constexpr (C::D != 128) {  // at d = 64, rung wide reads less (two blocks an SM)
      throw course::UsageError(std::string(what) + " runs d = 128 only");
    } else {
      constexpr size_t kBytes = bwd::Split::bytes<C::D>();
      course::require_shared_memory(kBytes, what);  // 227 KB on an H100; an A100 offers 163 KB
      auto run = [&](auto kernel) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBytes)));
        const dim3 grid((s.N + bwd::Split::Bc - 1) / bwd::Split::Bc, s.heads());
        kernel<<<grid, bwd::Split::kThreads, kBytes>>>(bwd::with_keys(tc::params(a.Q, a.K, a.V, nullptr, nullptr, s.N, s.causal, C::D), a),
                                                       static_cast<const uint16_t*>(a.dO), a.L, a.D, a.dQacc,
                                                       static_cast<uint16_t*>(a.dK), static_cast<uint16_t*>(a.dV));
        CUDA_CHECK_LAUNCH();
      };
      if (a.dQacc) run(bwd::flash_backward_split<typename C::T, C::D, true>);
      else run(bwd::flash_backward_split<typename C::T, C::D, false>);
    }
  });
}

}  // namespace attention
