// Rung 2: TMA and mbarriers. The copy engine brings the tiles; one thread asks for each.
//
// What changed from rung 1 (fa3_1_wgmma.cu):
//  - Loads: instead of 256 threads each computing addresses and issuing 16-byte cp.async's (D/8 ·
//    2·Bc / 256 = 8 or 16 a thread per key block, with their address arithmetic and predicates),
//    thread 0 issues one cp.async.bulk.tensor per 64-column block of K_j and of V_j. The tensor map
//    (made on the host, fa3_host.cu) knows the shape and strides; the copy engine computes every
//    address, writes the 128-byte swizzle, and fills rows past N with zeros (no predicate anywhere).
//  - Completion by bytes, on an mbarrier per slot: thread 0 announces the slot's bytes
//    (arrive.expect_tx), the copy engine counts them down as they land, and a thread that waits on
//    the slot's phase (try_wait.parity) knows its tile is there. No cp.async.wait_group, no
//    fence.proxy.async (TMA writes through the async proxy, which wgmma reads through).
//  - A ring of kStages slots (2 here: 160 KB at d = 128), refilled as soon as every warp is done with
//    a slot (one __syncthreads a key block, as rung 1's).
// Compute is rung 1's, unchanged.
//
// IO: rung 1's. What should move: the instructions issued per key block (no address arithmetic for
// the loads: a few hundred fewer a thread), registers, and the time the warps spend issuing loads.
#include "check.hpp"
#include "fa3_common.cuh"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D, int kStages>
__global__ void __launch_bounds__(256, 1)
    flash_v3_tma(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                 const __grid_constant__ CUtensorMap mapV, Params p) {
  using L = Smem<D, kStages>;
  constexpr int NT = kBc / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const smem = align1024(smem_raw);
  uint16_t* const Qs = smem + L::kQ;
  auto Ks = [&](int slot) { return smem + L::kKV + slot * L::kSlot; };
  auto Vs = [&](int slot) { return Ks(slot) + kBc * D; };
  uint64_t* const bar_q = reinterpret_cast<uint64_t*>(smem + L::kHalves);
  uint64_t* const full = bar_q + 1;  // full[s]: slot s's K and V have landed
  const int warp = threadIdx.x / 32, wg = warp / 4;
  const int i = query_block(p.causal), row0 = i * kBr, warp_row0 = row0 + 16 * warp;
  const int h = blockIdx.y;
  const size_t head = size_t(h) * p.N * D;
  const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);

  // Load `it` (the it-th key block visited, j = blocks − 1 − it) into slot it % kStages.
  auto load_kv = [&](int it) {
    const int slot = it % kStages, key0 = (blocks - 1 - it) * kBc;
    hopper::mbarrier_arrive_expect_tx(&full[slot], 2 * kBc * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) {
      hopper::tma_load_3d(Ks(slot) + b * kBc * 64, &mapK, &full[slot], 64 * b, key0, h);
      hopper::tma_load_3d(Vs(slot) + b * kBc * 64, &mapV, &full[slot], 64 * b, key0, h);
    }
  };
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbarrier_init(&full[s], 1);
    hopper::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbarrier_arrive_expect_tx(bar_q, kBr * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) hopper::tma_load_3d(Qs + b * kBr * 64, &mapQ, bar_q, 64 * b, row0, h);
    for (int it = 0; it < kStages && it < blocks; ++it) load_kv(it);
  }

  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  hopper::mbarrier_wait(bar_q, 0);
  for (int it = 0; it < blocks; ++it) {
    const int j = blocks - 1 - it, slot = it % kStages;
    hopper::mbarrier_wait(&full[slot], (it / kStages) & 1);  // the slot's phase it / kStages

    float S[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D>(S[0], Qs, wg, Ks(slot));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(S[0]);

    if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    tc::online_softmax<T, true>(S, o, m, l, p.scale, P);

    hopper::wgmma_fence();
    issue_pv<T, D>(o[0], P[0], Vs(slot));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(o[0]);

    __syncthreads();  // every warp is done with the slot: refill it
    if (threadIdx.x == 0 && it + kStages < blocks) load_kv(it + kStages);
  }
  hopper::named_barrier_sync(1 + wg, 128);
  tc::write_output<T, D, 1>(o, m, l, staging<D>(Qs, wg, warp % 4), p, head, warp_row0);
}

}  // namespace fa3

void launch_fa3_tma(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                    float* L) {
  tc::dispatch("tma", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("tma");
    constexpr int kStages = 2;
    fa3::launch_per_tile(fa3::flash_v3_tma<typename C::T, C::D, kStages>, fa3::Smem<C::D, kStages>::kBytes, 256, s, t,
                         C::D, Q, K, V, O, L);
  });
}

}  // namespace attention
