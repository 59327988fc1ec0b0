// Rung 2: TMA and mbarriers. The copy engine brings the tiles; one thread asks for each.
//
// What changed from rung 1 (fa3_bwd_1_wgmma.cu):
//  - K_j and V_j once, and each step's Q_i and dO_i, by TMA (cp.async.bulk.tensor, a 64-column
//    block a copy) into a ring of kStages slots: the copy engine computes every address, writes the
//    128-byte swizzle and fills rows past N with zeros, where 256 threads each issued D/8 · 2·Br/256
//    16-byte cp.async's a step with their address arithmetic.
//  - Completion on an mbarrier a slot: thread 0 announces Q_i's and dO_i's bytes (arrive.expect_tx);
//    L_i and D_i (64 floats each, whose rows need not start on 16 bytes, so no bulk copy) still come
//    by 4-byte cp.async's, each of the 64 threads that issue them arriving on the same barrier when
//    its copies have landed (cp.async.mbarrier.arrive.noinc). A step waits on its slot's phase; no
//    cp.async.wait_group and no proxy fence for the tiles (TMA writes through the async proxy).
//  - The slot is refilled kStages steps ahead once every warp is done with it (one __syncthreads a
//    step, as rung 1's).
// Compute is rung 1's, unchanged.
//
// IO: rung 1's. What should move: the instructions a step (no address arithmetic for the tile loads),
// the registers, the time the warps spend issuing loads; by stage 08's rung 2, 1.2-1.4x.
#include "fa3_bwd_common.cuh"

namespace attention::fa3_bwd {

using fa3::issue_pv;
using fa3::issue_qk;

namespace {

constexpr int kStages = 2;

// Shared memory (in 16-bit values from a 1024-aligned base): K_j, V_j (Bc × D each); kStages slots
// of Q_i and dO_i (Br × D each); each warpgroup's dSᵀ (64 keys × Br queries); kStages slots of L_i
// and D_i (Br floats each); the barriers (K and V's, then a slot's each). Tiles in swizzle128's layout.
template <int D>
struct Smem {
  static constexpr int kK = 0, kV = kBc * D, kQ = 2 * kBc * D, kSlot = 2 * kBr * D;  // Q, then dO
  static constexpr int kDs = kQ + kStages * kSlot, kStats = kDs + 2 * 64 * kBr;
  static constexpr int kBars = kStats + kStages * 2 * kBr * 2;  // after the floats (2 halves each)
  static constexpr size_t kBytes = 2 * size_t(kBars) + 8 * (1 + kStages) + 1024;
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_v3_bwd_tma(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                     const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapdO, tc::Params p,
                     const float* __restrict__ L, const float* __restrict__ Dv, float* __restrict__ dQacc,
                     uint16_t* __restrict__ dK, uint16_t* __restrict__ dV) {
  using Sm = Smem<D>;
  constexpr int NT = kBr / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const smem = fa3::align1024(smem_raw);
  uint16_t* const Ks = smem + Sm::kK;
  uint16_t* const Vs = smem + Sm::kV;
  auto Qs = [&](int slot) { return smem + Sm::kQ + slot * Sm::kSlot; };
  auto dOs = [&](int slot) { return Qs(slot) + kBr * D; };
  float* const stats = reinterpret_cast<float*>(smem + Sm::kStats);
  auto Ls = [&](int slot) { return stats + slot * 2 * kBr; };
  auto Ds = [&](int slot) { return Ls(slot) + kBr; };
  uint64_t* const bar_kv = reinterpret_cast<uint64_t*>(smem + Sm::kBars);
  uint64_t* const full = bar_kv + 1;  // full[s]: slot s's Q, dO (bytes) and L, D (64 arrivals) are in
  const int warp = threadIdx.x / 32, wg = warp / 4, lane = tc::lane_id(), g = lane / 4, t = lane % 4;
  uint16_t* const dSt = smem + Sm::kDs + wg * 64 * kBr;  // this warpgroup's dSᵀ
  const int j = blockIdx.x, h = blockIdx.y, key0 = j * kBc, key_w = 64 * wg + 16 * (warp % 4);
  const size_t head = size_t(h) * p.N * D, stat0 = size_t(h) * p.N;
  const float c = p.scale * ptx::kLog2e;
  const int first = first_query_block(kBr, kBc, p.causal, j), Tr = (p.N + kBr - 1) / kBr;
  // Step k (query block first + k) into slot k % kStages: Q_i and dO_i by thread 0's TMA copies,
  // L_i and D_i by threads 0 .. Br − 1. Rows past N take L = 0 and D = 0 by the copies' own zero fill,
  // not stage 07's L = +∞ by a store, which the barrier's cp.async arrival would not order for the
  // other threads: there Q_i and dO_i are zeros too (TMA), so P = 1 but dP = 0 and dS = 0, and such a
  // row adds nothing to dK or dV (its dQ is not written).
  auto load = [&](int k) {
    const int slot = k % kStages, row0 = (first + k) * kBr;
    if (threadIdx.x == 0) {
      hopper::mbarrier_arrive_expect_tx(&full[slot], 2 * kBr * D * 2);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) {
        hopper::tma_load_3d(Qs(slot) + b * kBr * 64, &mapQ, &full[slot], 64 * b, row0, h);
        hopper::tma_load_3d(dOs(slot) + b * kBr * 64, &mapdO, &full[slot], 64 * b, row0, h);
      }
    }
    if (threadIdx.x < kBr) {
      const bool in = row0 + int(threadIdx.x) < p.N;
      ptx::cp_async_4(Ls(slot) + threadIdx.x, L + stat0 + row0 + threadIdx.x, in);
      ptx::cp_async_4(Ds(slot) + threadIdx.x, Dv + stat0 + row0 + threadIdx.x, in);
      hopper::cp_async_mbarrier_arrive_noinc(&full[slot]);
    }
  };
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar_kv, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbarrier_init(&full[s], 1 + kBr);  // thread 0's, and L, D's
    hopper::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbarrier_arrive_expect_tx(bar_kv, 2 * kBc * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) {
      hopper::tma_load_3d(Ks + b * kBc * 64, &mapK, bar_kv, 64 * b, key0, h);
      hopper::tma_load_3d(Vs + b * kBc * 64, &mapV, bar_kv, 64 * b, key0, h);
    }
  }
  for (int k = 0; k < kStages && first + k < Tr; ++k) load(k);
  hopper::mbarrier_wait(bar_kv, 0);

  float dk[1][DT][4] = {}, dv[1][DT][4] = {};
  for (int i = first; i < Tr; ++i) {
    const int k = i - first, slot = k % kStages, row0 = i * kBr;
    hopper::mbarrier_wait(&full[slot], (k / kStages) & 1);  // the slot's phase k / kStages

    // Sᵀ and dPᵀ: the warpgroup's 64 keys × Br queries each.
    float St[1][NT][4], dPt[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D, kBc>(St[0], Ks, wg, Qs(slot));
    issue_qk<T, D, kBc>(dPt[0], Vs, wg, dOs(slot));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(St[0]);
    hopper::fence_registers(dPt[0]);
    if (COURSE_BLOCK_NEEDS_MASK(row0, key0 + kBc, p.Nk, p.causal))
      tc::mask_scores<true>(St, key0 + key_w, row0, p.Nk, p.causal);  // Sᵀ: keys in rows
    bwd::softmax_backward_t(St, dPt, Ls(slot), Ds(slot), c);           // Pᵀ in St, dSᵀ in dPt

    // Pᵀ and dSᵀ packed as A operands; dSᵀ also into the warpgroup's tile, for dQ.
    uint32_t Pa[1][NT / 2][4], dSa[1][NT / 2][4];
    tc::pack_a<T>(St[0], Pa[0]);
    tc::pack_a<T>(dPt[0], dSa[0]);
    store_ds_t<T>(dSt, dPt[0], warp % 4, g, t);
    hopper::fence_proxy_async();  // the stores (generic proxy) before the wgmma that reads them

    hopper::wgmma_fence();
    issue_pv<T, D>(dv[0], Pa[0], dOs(slot));
    issue_pv<T, D>(dk[0], dSa[0], Qs(slot));
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

    __syncthreads();  // every warp is done with the slot (and with dSᵀ): refill it
    if (i + kStages < Tr) load(k + kStages);
  }

  // dK_w·scale and dV_w through the tiles K_j and V_j held (stage 07's epilogue).
  bwd::stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, key_w, 0, g, t);
  __syncwarp();
  bwd::store_dk_dv<D, 16, D / 8>(dK, dV, Ks, Vs, head, key0, key_w, 0, p.N, lane);
}

}  // namespace

}  // namespace attention::fa3_bwd

namespace attention {

void launch_fa3_bwd_tma(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(a.dQacc != nullptr, "tma (stage 11): its dQ goes through dQacc");
  tc::dispatch("tma", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("tma (stage 11)");
    using Sm = fa3_bwd::Smem<C::D>;
    static_assert(Sm::kBytes <= 227 * 1024, "rung 2's shared memory: at most 227 KB a block");
    const auto m = fa3_bwd::tensor_maps(s, t, C::D, a, fa3_bwd::kBr);
    fa3_bwd::launch_per_key_block(fa3_bwd::flash_v3_bwd_tma<typename C::T, C::D>, Sm::kBytes, fa3_bwd::kThreads, s, C::D, a,
                                  m.Q, m.K, m.V, m.dO);
  });
}

}  // namespace attention
