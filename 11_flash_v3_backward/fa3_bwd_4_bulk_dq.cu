// Rung 4: dQ by the copy engine. The consumers hand their share of dQ to a writer warp through
// shared memory; it adds the tile into global memory by the bulk reduction, not 256 threads by atomics.
//
// What changed from rung 3 (fa3_bwd_3_warp_specialized.cu):
//  - A consumer thread stores its dQ fragment (2 rows × D/4 floats, 8-byte stores) into its
//    warpgroup's staging tile, boxes of 32 floats × Br rows in TMA's 128-byte swizzle, and arrives
//    on the tile's "full" mbarrier (a warp at a time, after fence.proxy.async: the copy engine reads
//    what ordinary stores wrote). In rung 3 each thread issued D/8 shuffles and D/8 16-byte
//    red.global.add a step.
//  - The producer warpgroup's second warp is the writer: per step and warpgroup it waits for the
//    tile, issues D/32 TMA reductions (cp.reduce.async.bulk.tensor .add, f32; a tensor map over
//    dQacc, whose rows past N the engine leaves alone), waits until the engine has read the tile
//    (wait_group.read) and gives it back on its "empty" mbarrier. (A bulk reduction a row, 128 a
//    step, ran at 0.45x rung 3 at d = 64: the copy engine takes its operations one at a time.)
//  - One dSᵀ tile a warpgroup again (the staging takes the room of rung 3's second): a warp
//    stores step k + 1's dSᵀ after waiting for step k's full barrier, which every warp of its
//    warpgroup reaches only after its dQ product has read the tile.
// Compute is rung 3's; the bytes into the L2 are the same (two shares of dQ a query block).
//
// IO: rung 3's. What should move: the consumers' instructions a step (no shuffles, no 16 red's a
// thread at d = 128) and their stalls on the LSU's queue of reductions; FlashAttention-3's
// backward does it so; predicted 1.05-1.15x over rung 3.
#include "fa3_bwd_common.cuh"

namespace attention::fa3_bwd {

using fa3::issue_pv;
using fa3::issue_qk;

namespace {

constexpr int kStages = 2, kWsThreads = 384;

// Shared memory (in 16-bit values from a 1024-aligned base): K_j, V_j (Bc × D each); kStages slots
// of Q_i and dO_i (Br × D each); a dSᵀ tile a consumer warpgroup (64 keys × Br queries); a dQ
// staging tile a consumer warpgroup (D / 32 boxes of Br rows × 32 floats, in the 128-byte swizzle); kStages slots of L_i and D_i (Br
// floats each); the barriers (K and V's; a slot's full and empty; a staging tile's full and empty).
template <int D>
struct Smem {
  static constexpr int kK = 0, kV = kBc * D, kQ = 2 * kBc * D, kSlot = 2 * kBr * D;  // Q, then dO
  static constexpr int kDs = kQ + kStages * kSlot, kDq = kDs + 2 * 64 * kBr;
  static constexpr int kStats = kDq + 2 * 2 * kBr * D;
  static constexpr int kBars = kStats + kStages * 2 * kBr * 2;  // after the floats (2 halves each)
  static constexpr size_t kBytes = 2 * size_t(kBars) + 8 * (1 + 2 * kStages + 4) + 1024;
};

template <class T, int D>
__global__ void __launch_bounds__(kWsThreads, 1)
    flash_v3_bwd_bulk_dq(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                                  const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapdO,
                     const __grid_constant__ CUtensorMap mapdQ,
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
  uint64_t* const dq_full = empty + kStages;  // dq_full[c]: consumer warpgroup c's 4 warps staged their dQ
  uint64_t* const dq_empty = dq_full + 2;     // dq_empty[c]: the writer's reductions have read the tile
  auto dQs = [&](int cwg) { return reinterpret_cast<float*>(smem + Sm::kDq) + cwg * kBr * D; };
  const int warp = threadIdx.x / 32, wg = warp / 4, lane = tc::lane_id();
  const int j = blockIdx.x, h = blockIdx.y, key0 = j * kBc;
  // Computed after setmaxnreg in each role, not before it: what is live across the producer's
  // setmaxnreg.dec must fit in its 24 registers (ptxas spilled 8-12 bytes there otherwise).
  auto geometry = [&] {
    return make_int2(first_query_block(kBr, kBc, p.causal, j), (p.N + kBr - 1) / kBr);  // first, Tr
  };
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(&full[s], 1 + 32);  // lane 0's expect_tx, and every lane's after its L, D stores
      hopper::mbarrier_init(&empty[s], 256);
    }
    for (int c = 0; c < 2; ++c) {
      hopper::mbarrier_init(&dq_full[c], 4);
      hopper::mbarrier_init(&dq_empty[c], 1);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- the producer: its first warp loads, its second writes dQ ----
    hopper::setmaxnreg_dec<24>();
    const int first = geometry().x, Tr = geometry().y;
    if (warp == 1) {
      // Step k's two shares of dQ (query block first + k), each in its staging tile: lane 0 adds
      // the tile's D / 32 boxes into dQacc by TMA reductions (rows past N are not added), waits
      // until the engine has read them, and gives the tile back. All writes done before exit.
      for (int k = 0; first + k < Tr; ++k) {
        for (int c = 0; c < 2; ++c) {
          hopper::mbarrier_wait(&dq_full[c], k & 1);
          if (lane == 0) {
#pragma unroll
            for (int b = 0; b < D / 32; ++b)
              hopper::tma_reduce_add_3d(&mapdQ, dQs(c) + b * kBr * 32, 32 * b, (first + k) * kBr, h);
            hopper::bulk_commit();
            hopper::bulk_wait_read<0>();
            hopper::mbarrier_arrive(&dq_empty[c]);
          }
          __syncwarp();
        }
      }
      hopper::bulk_wait<0>();
      return;
    }
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
        Ls(slot)[r] = in ? (L + size_t(h) * p.N)[row0 + r] : 0.0f;
        Ds(slot)[r] = in ? (Dv + size_t(h) * p.N)[row0 + r] : 0.0f;
      }
      hopper::mbarrier_arrive(&full[slot]);  // release: the stores above are seen by its waiters
    }
    return;
  }

  // ---- the consumers: warpgroups 1 and 2, 64 keys each ----
  hopper::setmaxnreg_inc<240>();
  const int first = geometry().x, Tr = geometry().y;
  const size_t head = size_t(h) * p.N * D;
  const int cwg = wg - 1, g = lane / 4, t = lane % 4, key_w = 64 * cwg + 16 * (warp % 4);
  const float c = p.scale * ptx::kLog2e;
  uint16_t* const dSt = smem + Sm::kDs + cwg * 64 * kBr;  // this warpgroup's dSᵀ
  // Where the thread's dQ element (row r, column 8n + 2t) lies in the staging tile: box n / 4 (32
  // columns), its row r (128 bytes), its 16-byte chunk 2·(n % 4) + t / 2 XOR r % 8 (the swizzle;
  // r % 8 = g), word 2·(t % 2). Rows g and g ^ 1 share banks: a warp's 256 bytes in two wavefronts.
  auto dq_at = [&](int n, int half) {
    return dQs(cwg) + (n / 4) * kBr * 32 + (16 * (warp % 4) + g + 8 * half) * 32 + (((2 * (n % 4) + t / 2) ^ g) * 4) +
           2 * (t % 2);
  };
  hopper::mbarrier_wait(bar_kv, 0);

  float dk[1][DT][4] = {}, dv[1][DT][4] = {};
  for (int i = first; i < Tr; ++i) {
    const int k = i - first, slot = k % kStages, row0 = i * kBr;
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

    // Pᵀ and dSᵀ packed as A operands; dSᵀ also into the tile, for dQ, once every warp's product
    // of step k − 1 has read it (they arrive on dq_full after it).
    uint32_t Pa[1][NT / 2][4], dSa[1][NT / 2][4];
    tc::pack_a<T>(St[0], Pa[0]);
    tc::pack_a<T>(dPt[0], dSa[0]);
    if (k > 0) hopper::mbarrier_wait(&dq_full[cwg], (k - 1) & 1);
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
    // The share into the staging tile, once the writer has read step k − 1's; then to the writer.
    if (k > 0) hopper::mbarrier_wait(&dq_empty[cwg], (k - 1) & 1);
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      *reinterpret_cast<float2*>(dq_at(n, 0)) = make_float2(dq[0][n][0], dq[0][n][1]);
      *reinterpret_cast<float2*>(dq_at(n, 1)) = make_float2(dq[0][n][2], dq[0][n][3]);
    }
    hopper::fence_proxy_async();
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(&dq_full[cwg]);
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

void launch_fa3_bwd_bulk_dq(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(a.dQacc != nullptr, "bulk_dq (stage 11): its dQ goes through dQacc");
  tc::dispatch("bulk_dq", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("bulk_dq (stage 11)");
    using Sm = fa3_bwd::Smem<C::D>;
    static_assert(Sm::kBytes <= 227 * 1024, "rung 4's shared memory: at most 227 KB a block");
    const auto m = fa3_bwd::tensor_maps(s, t, C::D, a, fa3_bwd::kBr);
    fa3_bwd::launch_per_key_block(fa3_bwd::flash_v3_bwd_bulk_dq<typename C::T, C::D>, Sm::kBytes, fa3_bwd::kWsThreads, s, C::D, a,
                                  m.Q, m.K, m.V, m.dO, fa3_bwd::dq_tensor_map(s, C::D, a, fa3_bwd::kBr));
  });
}

}  // namespace attention
