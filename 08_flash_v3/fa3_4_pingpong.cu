// Rung 4: ping-pong. The two consumer warpgroups take turns at the tensor cores, so that one's
// softmax runs while the other's products do.
//
// What changed from rung 3 (fa3_3_warp_specialized.cu):
//  - The loop is turned so that a warpgroup's two products come back to back: step `it` issues
//    S_it = Q·K_itᵀ and then o += P̃_{it−1}·V_{it−1} (the previous block's), waits for both, and
//    then does block it's softmax. (The first block's S comes before the loop, the last block's
//    P̃·V after it.) A warpgroup's time is now "products, softmax, products, softmax, ...".
//  - Two named barriers order the products: warpgroup c waits on barrier kSched + c before issuing
//    its products and, once they are issued, arrives on the other's barrier. Each barrier counts
//    256 threads: the 128 of the waiting warpgroup and the 128 of the other's arrival. So
//    warpgroup 1 issues only after warpgroup 0 has issued, and the other way round: their
//    products alternate on the tensor cores, and while one warpgroup's products run the other
//    does its softmax (warpgroup 1 arrives once at the start so that warpgroup 0 goes first).
//  - K_it is given back after the step's wait, V_{it−1} too (a whole step after K_{it−1}).
// The softmax, the products and the loads are rung 3's.
//
// IO: rung 3's. What should move: the tensor pipe's utilisation up (the FA-3 paper: 570 → 620
// TFLOP/s for its kernel at d = 128); the warps' stalls on wgmma waits down, since a warpgroup's
// wait now overlaps the other's softmax.
#include "check.hpp"
#include "fa3_common.cuh"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D, int kStages>
__global__ void __launch_bounds__(384, 1)
    flash_v3_pingpong(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                      const __grid_constant__ CUtensorMap mapV, Params p) {
  constexpr int NT = kBc / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  const Pipeline<D, kStages> pipe{{}, align1024(smem_raw)};
  const int warp = threadIdx.x / 32, wg = warp / 4;
  const int i = query_block(p.causal), row0 = i * kBr;
  const int h = blockIdx.y;
  const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);
  if (threadIdx.x == 0) pipe.init(8);
  __syncthreads();

  if (wg == 0) {  // ---- the producer: rung 3's ----
    hopper::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) pipe.produce(&mapQ, &mapK, &mapV, row0, h, blocks);
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<240>();
    const int cwg = wg - 1, cwarp = warp - 4, warp_row0 = row0 + 16 * cwarp;
    // My turn at the tensor cores / the other's turn.
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (1 - cwg), 256); };
    if (cwg == 1) pass_turn();  // warpgroup 0 goes first

    float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
    float S[1][NT][4];
    uint32_t P[1][NT / 2][4];
    auto softmax = [&](int it) {  // block it's softmax on S: o rescaled, P̃ into P
      const int j = blocks - 1 - it;
      if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
      tc::online_softmax<T, true>(S, o, m, l, p.scale, P);
    };

    pipe.wait_q();
    pipe.wait_k(0);
    wait_turn();
    hopper::wgmma_fence();
    issue_qk<T, D>(S[0], pipe.Q(), cwg, pipe.K(0));
    hopper::wgmma_commit();
    pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(S[0]);
    pipe.release_k(0);
    softmax(0);
    for (int it = 1; it < blocks; ++it) {
      pipe.wait_k(it);
      pipe.wait_v(it - 1);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<T, D>(S[0], pipe.Q(), cwg, pipe.K(it));  // S_it
      issue_pv<T, D>(o[0], P[0], pipe.V(it - 1));      // o += P̃_{it−1}·V_{it−1}
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      hopper::fence_registers(o[0]);
      pipe.release_k(it);
      pipe.release_v(it - 1);
      softmax(it);
    }
    pipe.wait_v(blocks - 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_pv<T, D>(o[0], P[0], pipe.V(blocks - 1));
    hopper::wgmma_commit();
    if (cwg == 0) pass_turn();  // warpgroup 1's last turn; warpgroup 0 has no more
    hopper::wgmma_wait<0>();
    hopper::fence_registers(o[0]);
    pipe.release_v(blocks - 1);

    hopper::named_barrier_sync(1 + cwg, 128);
    tc::write_output<T, D, 1>(o, m, l, staging<D>(pipe.Q(), cwg, cwarp % 4), p, size_t(h) * p.N * D, warp_row0);
  }
}

}  // namespace fa3

void launch_fa3_pingpong(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                         float* L) {
  tc::dispatch("pingpong", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("pingpong");
    constexpr int kStages = 2;
    fa3::launch_per_tile(fa3::flash_v3_pingpong<typename C::T, C::D, kStages>, fa3::Smem<C::D, kStages>::kBytes, 384, s, t,
                         C::D, Q, K, V, O, L);
  });
}

}  // namespace attention
