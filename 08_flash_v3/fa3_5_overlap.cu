// Rung 5: intra-warpgroup overlap. The softmax of block it runs while the tensor cores still work
// on the previous block's P̃·V (the FA-3 paper's "two-stage pipelining" of softmax and GEMMs).
//
// What changed from rung 4 (fa3_4_pingpong.cu):
//  - S_it and P̃_{it−1}·V_{it−1} are committed as two groups, and the warpgroup waits only for the
//    first (wgmma_wait<1>: at most one group still running). The softmax of block it then runs on
//    S while P̃_{it−1}·V_{it−1} is still on the tensor cores; wgmma_wait<0> comes after it.
//  - So the softmax may not touch o or P, which the running product reads and writes: stage 06's
//    online_softmax is split in two (fa3_common.cuh): softmax_scores (the new max, P̃ in place in
//    S as fp32, l, and the factor alpha) before the second wait, and rescale_o plus packing P̃ into P
//    after it. S's 64 fp32 registers stay live until then (as in FA-3).
// The ping-pong between the two warpgroups stays: one's products now also overlap its own softmax.
//
// IO: rung 4's. What should move: the tensor pipe's utilisation up again (the paper: 570 → 661
// TFLOP/s with both overlaps, at d = 128); registers up (S and P live together).
#include "check.hpp"
#include "fa3_common.cuh"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D, int kStages>
__global__ void __launch_bounds__(384, 1)
    flash_v3_overlap(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
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
      const int j = blocks - 1 - it;
      pipe.wait_k(it);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<T, D>(S[0], pipe.Q(), cwg, pipe.K(it));  // S_it: group 1
      hopper::wgmma_commit();
      pipe.wait_v(it - 1);
      issue_pv<T, D>(o[0], P[0], pipe.V(it - 1));  // o += P̃_{it−1}·V_{it−1}: group 2
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<1>();  // S_it is done; the product into o may still run
      hopper::fence_registers(S[0]);
      pipe.release_k(it);
      if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
      float alpha[2];
      softmax_scores(S[0], m[0], l[0], p.scale, alpha);  // under the product into o
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o[0]);
      pipe.release_v(it - 1);
      rescale_o(o[0], alpha);
      tc::pack_a<T>(S[0], P[0]);
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

void launch_fa3_overlap(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                         float* L) {
  tc::dispatch("overlap", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("overlap");
    constexpr int kStages = 2;
    fa3::launch_per_tile(fa3::flash_v3_overlap<typename C::T, C::D, kStages>, fa3::Smem<C::D, kStages>::kBytes, 384, s, t,
                         C::D, Q, K, V, O, L);
  });
}

}  // namespace attention
