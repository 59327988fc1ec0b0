// Rung 1: wgmma. Stage 07's key-outer backward (FA-2's Algorithm 2: a thread block a key block, dK
// and dV summed in registers over the query blocks, dQ's shares added into dQacc) with its five
// products as Hopper's warpgroup MMAs. Two warpgroups of 64 keys each (Bc = 128), query blocks of
// Br = 64, Q, dO, L and D by cp.async into two buffers, each product waited for at once.
//
// Which products read what, and why:
//  - Sᵀ = K_w·Q_iᵀ and dPᵀ = V_w·dO_iᵀ: SS (both operands from shared memory, both K-major: the rows
//    of K, V, Q and dO are d-contiguous). Transposed, so that the warpgroup's 64 keys are the
//    accumulator's rows: Pᵀ and dSᵀ are then already in the A operand's layout of the next two
//    products, packed in registers (pack_a), as P is for P·V in the forward.
//  - dV_w += Pᵀ·dO_i and dK_w += dSᵀ·Q_i: RS (A from registers; B = dO_i, Q_i MN-major: the sum
//    runs over queries, their rows), as the forward's P·V.
//  - dQ_i += dS·K_w: SS, both MN-major. dQ's rows are queries, so its A is dS, not the dSᵀ the
//    registers hold: dSᵀ goes through shared memory and the descriptor transposes it
//    (imm-trans-a); K_w as B is key-major, like V in the forward. Each warpgroup adds its 64 keys'
//    share into dQacc (stage 07's red_add_dq): two shares a query block.
//
// What it should buy against stage 07's fastest (mma.sync): a wgmma is 64 × N × 16 from one
// instruction a warpgroup, with no ldmatrix; the time still bounded by the loads and the softmax
// gradient, which nothing overlaps yet (rungs 2 and 3).
#include "fa3_bwd_common.cuh"
#include "check.hpp"
#include "kernels.cuh"

namespace attention::fa3_bwd {

using fa3::issue_pv;
using fa3::issue_qk;

namespace {

// Shared memory (in 16-bit values from a 1024-aligned base): K_j, V_j (Bc × D each); two buffers
// of Q_i and dO_i (Br × D each); each warpgroup's dSᵀ (64 keys × Br queries); then two buffers of
// L_i and D_i (Br floats each). Every tile in hopper::swizzle128's layout.
template <int D>
struct Smem {
  static constexpr int kK = 0, kV = kBc * D, kQ = 2 * kBc * D, kBuffer = 2 * kBr * D;  // Q, then dO
  static constexpr int kDs = kQ + 2 * kBuffer, kStats = kDs + 2 * 64 * kBr;
  static constexpr size_t kBytes = 2 * size_t(kStats) + 2 * 2 * kBr * sizeof(float) + 1024;
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_v3_bwd_wgmma(tc::Params p, const uint16_t* __restrict__ dO, const float* __restrict__ L,
                       const float* __restrict__ Dv, float* __restrict__ dQacc, uint16_t* __restrict__ dK,
                       uint16_t* __restrict__ dV) {
  using Sm = Smem<D>;
  constexpr int NT = kBr / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const smem = fa3::align1024(smem_raw);
  uint16_t* const Ks = smem + Sm::kK;
  uint16_t* const Vs = smem + Sm::kV;
  auto Qs = [&](int b) { return smem + Sm::kQ + b * Sm::kBuffer; };
  auto dOs = [&](int b) { return Qs(b) + kBr * D; };
  float* const stats = reinterpret_cast<float*>(smem + Sm::kStats);
  auto Ls = [&](int b) { return stats + b * 2 * kBr; };
  auto Ds = [&](int b) { return Ls(b) + kBr; };
  const int warp = threadIdx.x / 32, wg = warp / 4, lane = tc::lane_id(), g = lane / 4, t = lane % 4;
  uint16_t* const dSt = smem + Sm::kDs + wg * 64 * kBr;  // this warpgroup's dSᵀ
  const int j = blockIdx.x, key0 = j * kBc, key_w = 64 * wg + 16 * (warp % 4);  // the warp's 16 keys
  const size_t head = size_t(blockIdx.y) * p.N * D, stat0 = size_t(blockIdx.y) * p.N;
  const float c = p.scale * ptx::kLog2e;
  auto fetch = [&](int i, int b) {  // Q_i, dO_i, L_i, D_i into buffer b
    const int row0 = i * kBr, rows = p.N - row0;
    fa3::load_tile_cp_async<D, kBr, kThreads>(Qs(b), p.Q + head + size_t(row0) * D, rows, threadIdx.x);
    fa3::load_tile_cp_async<D, kBr, kThreads>(dOs(b), dO + head + size_t(row0) * D, rows, threadIdx.x);
    bwd::load_stats_async<kBr>(Ls(b), Ds(b), L + stat0 + row0, Dv + stat0 + row0, rows);
    ptx::cp_async_commit();
  };

  const int first = first_query_block(kBr, kBc, p.causal, j), Tr = (p.N + kBr - 1) / kBr;
  fa3::load_tile_cp_async<D, kBc, kThreads>(Ks, p.K + head + size_t(key0) * D, p.N - key0, threadIdx.x);
  fa3::load_tile_cp_async<D, kBc, kThreads>(Vs, p.V + head + size_t(key0) * D, p.N - key0, threadIdx.x);
  fetch(first, 0);

  float dk[1][DT][4] = {}, dv[1][DT][4] = {};
  for (int i = first; i < Tr; ++i) {
    const int b = (i - first) & 1, row0 = i * kBr;
    ptx::cp_async_wait<0>();
    hopper::fence_proxy_async();  // cp.async wrote the tiles (generic proxy); wgmma reads them (async)
    __syncthreads();              // step i's tiles are visible; every warp is done with step i − 1's
    if (i + 1 < Tr) fetch(i + 1, b ^ 1);

    // Sᵀ and dPᵀ: the warpgroup's 64 keys × Br queries each.
    float St[1][NT][4], dPt[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D, kBc>(St[0], Ks, wg, Qs(b));
    issue_qk<T, D, kBc>(dPt[0], Vs, wg, dOs(b));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(St[0]);
    hopper::fence_registers(dPt[0]);
    if (COURSE_BLOCK_NEEDS_MASK(row0, key0 + kBc, p.Nk, p.causal))
      tc::mask_scores<true>(St, key0 + key_w, row0, p.Nk, p.causal);  // Sᵀ: keys in rows
    bwd::softmax_backward_t(St, dPt, Ls(b), Ds(b), c);                 // Pᵀ in St, dSᵀ in dPt

    // Pᵀ and dSᵀ packed as A operands; dSᵀ also into the warpgroup's tile, for dQ.
    uint32_t Pa[1][NT / 2][4], dSa[1][NT / 2][4];
    tc::pack_a<T>(St[0], Pa[0]);
    tc::pack_a<T>(dPt[0], dSa[0]);
    store_ds_t<T>(dSt, dPt[0], warp % 4, g, t);
    hopper::fence_proxy_async();  // the stores (generic proxy) before the wgmma that reads them

    hopper::wgmma_fence();
    issue_pv<T, D>(dv[0], Pa[0], dOs(b));
    issue_pv<T, D>(dk[0], dSa[0], Qs(b));
    hopper::wgmma_commit();
    hopper::named_barrier_sync(1 + wg, 128);  // every warp's dSᵀ is in the tile
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dv[0]);
    hopper::fence_registers(dk[0]);

    float dq[1][DT][4];
    hopper::wgmma_fence();
    issue_dq<T, D>(dq[0], dSt, Ks, wg);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dq[0]);
    const int q_w = 16 * (warp % 4);  // the warp's 16 queries of dQ's share
    bwd::red_add_dq<D>(dq, dQacc + head + size_t(row0 + q_w) * D, p.N - row0 - q_w);
  }

  // dK_w·scale and dV_w through the tiles K_j and V_j held (stage 07's epilogue), once every warp
  // is done reading them.
  __syncthreads();
  bwd::stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, key_w, 0, g, t);
  __syncwarp();
  bwd::store_dk_dv<D, 16, D / 8>(dK, dV, Ks, Vs, head, key0, key_w, 0, p.N, lane);
}

}  // namespace

}  // namespace attention::fa3_bwd

namespace attention {

void launch_fa3_bwd_wgmma(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(a.dQacc != nullptr, "wgmma (stage 11): its dQ goes through dQacc");
  tc::dispatch("wgmma", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("wgmma (stage 11)");
    constexpr size_t bytes = fa3_bwd::Smem<C::D>::kBytes;
    const auto kernel = fa3_bwd::flash_v3_bwd_wgmma<typename C::T, C::D>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const dim3 grid((s.N + fa3_bwd::kBc - 1) / fa3_bwd::kBc, s.heads());
    kernel<<<grid, fa3_bwd::kThreads, bytes>>>(
        bwd::with_keys(tc::params(a.Q, a.K, a.V, nullptr, nullptr, s.N, s.causal, C::D), a),
        static_cast<const uint16_t*>(a.dO), a.L, a.D, a.dQacc, static_cast<uint16_t*>(a.dK),
        static_cast<uint16_t*>(a.dV));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention
