// Rung 3: warp specialisation. A producer warpgroup only loads; two consumer warpgroups only
// compute; they talk through the ring's mbarriers and never wait for each other otherwise.
//
// What changed from rung 2 (fa3_2_tma.cu):
//  - 384 threads: warpgroup 0 is the producer (one of its threads issues every TMA copy), warpgroups
//    1 and 2 are the consumers (rung 2's two compute warpgroups).
//  - No __syncthreads in the loop. The ring becomes a producer/consumer pipeline (Pipeline in
//    fa3_common.cuh): each K tile and each V tile has a "full" barrier (the copy engine's bytes
//    landed: the consumers wait on it) and an "empty" one (all 8 consumer warps are done with it:
//    the producer waits on it before refilling). K_j is given back as soon as S is computed, V_j
//    after P̃·V_j. The producer runs up to kStages key blocks ahead, whatever the consumers are
//    doing; a consumer warpgroup that finishes a block early goes on to the next without waiting
//    for the other one.
//  - setmaxnreg: the producer needs few registers and gives them up (24 a thread); the consumers
//    take them (240 a thread): 128·24 + 256·240 = 64,512 of the SM's 65,536. Without it, 384
//    threads would get at most 168 registers each, too few for a consumer's 64 S + 64 o + 32 P.
// Compute is rung 2's, unchanged.
//
// IO: rung 2's. What should move: the barrier stalls (no block-wide barrier per key block), the
// tensor pipe's utilisation up a little; the softmax is still exposed within each warpgroup, but
// the two consumers now drift apart, so one's softmax can meet the other's products by chance
// (rung 4 arranges it).
#include "check.hpp"
#include "fa3_common.cuh"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D, int kStages>
__global__ void __launch_bounds__(384, 1)
    flash_v3_warp_specialized(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                              const __grid_constant__ CUtensorMap mapV, Params p) {
  constexpr int NT = kBc / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  const Pipeline<D, kStages> pipe{{}, align1024(smem_raw)};
  const int warp = threadIdx.x / 32, wg = warp / 4;
  const int i = query_block(p.causal), row0 = i * kBr;
  const int h = blockIdx.y;
  const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);
  if (threadIdx.x == 0) pipe.init(8);  // 8 consumer warps give each tile back
  __syncthreads();

  if (wg == 0) {  // ---- the producer ----
    hopper::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) pipe.produce(&mapQ, &mapK, &mapV, row0, h, blocks);
  } else {  // ---- the consumers: warpgroups 1 and 2, 64 query rows each ----
    hopper::setmaxnreg_inc<240>();
    const int cwg = wg - 1, cwarp = warp - 4, warp_row0 = row0 + 16 * cwarp;
    float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
    pipe.wait_q();
    for (int it = 0; it < blocks; ++it) {
      const int j = blocks - 1 - it;
      pipe.wait_k(it);
      float S[1][NT][4];
      hopper::wgmma_fence();
      issue_qk<T, D>(S[0], pipe.Q(), cwg, pipe.K(it));
      hopper::wgmma_commit();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it);  // K_j's slot can be refilled while we do the softmax

      if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
      uint32_t P[1][NT / 2][4];
      tc::online_softmax<T, true>(S, o, m, l, p.scale, P);

      pipe.wait_v(it);
      hopper::wgmma_fence();
      issue_pv<T, D>(o[0], P[0], pipe.V(it));
      hopper::wgmma_commit();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o[0]);
      pipe.release_v(it);
    }
    hopper::named_barrier_sync(1 + cwg, 128);
    tc::write_output<T, D, 1>(o, m, l, staging<D>(pipe.Q(), cwg, cwarp % 4), p, size_t(h) * p.N * D, warp_row0);
  }
}

}  // namespace fa3

void launch_fa3_warp_specialized(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                 void* O, float* L) {
  tc::dispatch("warp_specialized", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("warp_specialized");
    constexpr int kStages = 2;
    fa3::launch_per_tile(fa3::flash_v3_warp_specialized<typename C::T, C::D, kStages>, fa3::Smem<C::D, kStages>::kBytes, 384, s, t,
                         C::D, Q, K, V, O, L);
  });
}

}  // namespace attention
