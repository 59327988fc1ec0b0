// Rung 3: warp specialisation. A producer warpgroup only loads; two consumer warpgroups only
// compute, each on its 64 keys of the block, and they meet only at the ring's mbarriers.
//
// What changed from rung 2 (fa3_bwd_2_tma.cu):
//  - 384 threads: warpgroup 0 is the producer (its first warp issues every copy), warpgroups 1 and
//    2 are rung 2's two compute warpgroups.
//  - No __syncthreads in the loop. Each slot has a second barrier, "empty": every consumer thread
//    arrives on it once its products that read Q_i, dO_i, L_i, D_i have completed, that is before
//    dQ's product; the producer waits on it before refilling the slot. The producer runs kStages
//    query blocks ahead, and a consumer that is done with a block goes on without the other.
//  - dSᵀ has two tiles a warpgroup, used by turns: a warp can store step k + 1's dSᵀ while a
//    slower warp of its warpgroup still waits for step k's dQ product to read the other one (rung 2's
//    __syncthreads kept them in step).
//  - setmaxnreg: 24 registers a producer thread, 240 a consumer thread (128·24 + 256·240 = 64,512
//    of the SM's 65,536); 384 threads would otherwise get 168 each, too few for a consumer's dK and
//    dV (128 floats at d = 128) beside Sᵀ and dPᵀ.
//  - L_i and D_i by the producer warp's loads and shared stores, each lane arriving on the slot's
//    barrier after them (an arrival releases the lane's stores to the barrier's waiters); the
//    producer warp has nothing else to do while it waits for them.
// Compute is rung 2's, unchanged.
//
// IO: rung 2's. What should move: the warps' wait at the block-wide barrier of every step and the
// slot's refill behind it (the producer refills while the consumers compute dQ); by stage 08's
// rung 3 (1.05-1.1x over its rung 2), about 1.1x.
#include "fa3_bwd_common.cuh"

namespace attention::fa3_bwd {

using fa3::issue_pv;
using fa3::issue_qk;

namespace {

constexpr int kStages = 2, kWsThreads = 384;

// Shared memory (in 16-bit values from a 1024-aligned base): K_j, V_j (Bc × D each); kStages slots
// of Q_i and dO_i (Br × D each); two dSᵀ tiles a consumer warpgroup (64 keys × Br queries); kStages
// slots of L_i and D_i (Br floats each); the barriers (K and V's, a slot's full, a slot's empty).
template <int D>
struct Smem {
  static constexpr int kK = 0, kV = kBc * D, kQ = 2 * kBc * D, kSlot = 2 * kBr * D;  // Q, then dO
  static constexpr int kDs = kQ + kStages * kSlot, kStats = kDs + 2 * 2 * 64 * kBr;
  static constexpr int kBars = kStats + kStages * 2 * kBr * 2;  // after the floats (2 halves each)
  static constexpr size_t kBytes = 2 * size_t(kBars) + 8 * (1 + 2 * kStages) + 1024;
};

template <class T, int D>
__global__ void __launch_bounds__(kWsThreads, 1)
    flash_v3_bwd_warp_specialized(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                                  const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapdO,
                                  tc::Params p, const float* __restrict__ L, const float* __restrict__ Dv,
                                  float* __restrict__ dQacc, uint16_t* __restrict__ dK, uint16_t* __restrict__ dV) {
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
  uint64_t* const full = bar_kv + 1;         // full[s]: slot s's Q, dO (bytes) and L, D (the warp's 32 arrivals) are in
  uint64_t* const empty = full + kStages;    // empty[s]: the 256 consumer threads are done with slot s
  const int warp = threadIdx.x / 32, wg = warp / 4, lane = tc::lane_id();
  const int j = blockIdx.x, h = blockIdx.y, key0 = j * kBc;
  const size_t head = size_t(h) * p.N * D, stat0 = size_t(h) * p.N;
  const int first = first_query_block(kBr, kBc, p.causal, j), Tr = (p.N + kBr - 1) / kBr;
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(&full[s], 1 + 32);  // lane 0's expect_tx, and every lane's after its L, D stores
      hopper::mbarrier_init(&empty[s], 256);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- the producer: its first warp ----
    hopper::setmaxnreg_dec<24>();
    if (warp != 0) return;
    if (lane == 0) {
      hopper::mbarrier_arrive_expect_tx(bar_kv, 2 * kBc * D * 2);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) {
        hopper::tma_load_3d(Ks + b * kBc * 64, &mapK, bar_kv, 64 * b, key0, h);
        hopper::tma_load_3d(Vs + b * kBc * 64, &mapV, bar_kv, 64 * b, key0, h);
      }
    }
    // Step k (query block first + k) into slot k % kStages, once the slot's use k − kStages is
    // given back: Q_i and dO_i by lane 0's TMA copies, L_i and D_i by the warp's loads and shared
    // stores (two rows a lane), each lane arriving after its stores. Rows past N take L = 0 and
    // D = 0, as in rung 2.
    for (int k = 0; first + k < Tr; ++k) {
      const int slot = k % kStages, row0 = (first + k) * kBr;
      if (k >= kStages) hopper::mbarrier_wait(&empty[slot], (k / kStages - 1) & 1);
      if (lane == 0) {
        hopper::mbarrier_arrive_expect_tx(&full[slot], 2 * kBr * D * 2);
#pragma unroll
        for (int b = 0; b < D / 64; ++b) {
          hopper::tma_load_3d(Qs(slot) + b * kBr * 64, &mapQ, &full[slot], 64 * b, row0, h);
          hopper::tma_load_3d(dOs(slot) + b * kBr * 64, &mapdO, &full[slot], 64 * b, row0, h);
        }
      }
#pragma unroll
      for (int r = lane; r < kBr; r += 32) {
        const bool in = row0 + r < p.N;
        Ls(slot)[r] = in ? (L + stat0)[row0 + r] : 0.0f;
        Ds(slot)[r] = in ? (Dv + stat0)[row0 + r] : 0.0f;
      }
      hopper::mbarrier_arrive(&full[slot]);  // release: the stores above are seen by its waiters
    }
    return;
  }

  // ---- the consumers: warpgroups 1 and 2, 64 keys each ----
  hopper::setmaxnreg_inc<240>();
  const int cwg = wg - 1, g = lane / 4, t = lane % 4, key_w = 64 * cwg + 16 * (warp % 4);
  const float c = p.scale * ptx::kLog2e;
  uint16_t* const dSt0 = smem + Sm::kDs + cwg * 2 * 64 * kBr;  // this warpgroup's two dSᵀ tiles
  hopper::mbarrier_wait(bar_kv, 0);

  float dk[1][DT][4] = {}, dv[1][DT][4] = {};
  for (int i = first; i < Tr; ++i) {
    const int k = i - first, slot = k % kStages, row0 = i * kBr;
    uint16_t* const dSt = dSt0 + (k % 2) * 64 * kBr;
    hopper::mbarrier_wait(&full[slot], (k / kStages) & 1);

    // Sᵀ and dPᵀ: the warpgroup's 64 keys × Br queries each.
    float St[1][NT][4], dPt[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D, kBc>(St[0], Ks, cwg, Qs(slot));
    issue_qk<T, D, kBc>(dPt[0], Vs, cwg, dOs(slot));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(St[0]);
    hopper::fence_registers(dPt[0]);
    if (COURSE_BLOCK_NEEDS_MASK(row0, key0 + kBc, p.Nk, p.causal))
      tc::mask_scores<true>(St, key0 + key_w, row0, p.Nk, p.causal);  // Sᵀ: keys in rows
    bwd::softmax_backward_t(St, dPt, Ls(slot), Ds(slot), c);           // Pᵀ in St, dSᵀ in dPt

    // Pᵀ and dSᵀ packed as A operands; dSᵀ also into this step's tile, for dQ.
    uint32_t Pa[1][NT / 2][4], dSa[1][NT / 2][4];
    tc::pack_a<T>(St[0], Pa[0]);
    tc::pack_a<T>(dPt[0], dSa[0]);
    store_ds_t<T>(dSt, dPt[0], warp % 4, g, t);
    hopper::fence_proxy_async();  // the stores (generic proxy) before the wgmma that reads them

    hopper::wgmma_fence();
    issue_pv<T, D>(dv[0], Pa[0], dOs(slot));
    issue_pv<T, D>(dk[0], dSa[0], Qs(slot));
    hopper::wgmma_commit();
    hopper::named_barrier_sync(1 + cwg, 128);  // every warp's dSᵀ is in the tile
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dv[0]);
    hopper::fence_registers(dk[0]);
    // Q_i, dO_i, L_i, D_i no longer read. Every thread arrives: an arrival releases what its own
    // thread did (here, its reads of L_i and D_i) to the producer that waits on the barrier.
    hopper::mbarrier_arrive(&empty[slot]);

    float dq[1][DT][4];
    hopper::wgmma_fence();
    issue_dq<T, D>(dq[0], dSt, Ks, cwg);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dq[0]);
    const int q_w = 16 * (warp % 4);  // the warp's 16 queries of dQ's share
    bwd::red_add_dq<D>(dq, dQacc + head + size_t(row0 + q_w) * D, p.N - row0 - q_w);
  }

  // dK_w·scale and dV_w through the tiles K_j and V_j held (stage 07's epilogue). A warp's rows of D
  // values there cover the other warpgroup's rows of the swizzled tiles too: both are done first.
  hopper::named_barrier_sync(3, 256);
  bwd::stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, key_w, 0, g, t);
  __syncwarp();
  bwd::store_dk_dv<D, 16, D / 8>(dK, dV, Ks, Vs, head, key0, key_w, 0, p.N, lane);
}

}  // namespace

}  // namespace attention::fa3_bwd

namespace attention {

void launch_fa3_bwd_warp_specialized(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(a.dQacc != nullptr, "warp_specialized (stage 11): its dQ goes through dQacc");
  tc::dispatch("warp_specialized", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("warp_specialized (stage 11)");
    using Sm = fa3_bwd::Smem<C::D>;
    static_assert(Sm::kBytes <= 227 * 1024, "rung 3's shared memory: at most 227 KB a block");
    const auto m = fa3_bwd::tensor_maps(s, t, C::D, a, fa3_bwd::kBr);
    fa3_bwd::launch_per_key_block(fa3_bwd::flash_v3_bwd_warp_specialized<typename C::T, C::D>, Sm::kBytes, fa3_bwd::kWsThreads, s, C::D, a,
                                  m.Q, m.K, m.V, m.dO);
  });
}

}  // namespace attention
