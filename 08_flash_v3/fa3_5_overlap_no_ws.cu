// Rung 5 without warp specialisation: the FA-3 paper's ablation "without warp specialisation" on
// our kernel (the ablation variant overlap_no_ws). The paper: 661 TFLOP/s with everything at
// d = 128, 570-582 without it. Everything but who issues the loads is rung 5's.
//
// What changed from rung 5 (fa3_5_overlap.cu):
//  - 256 threads, not 384: no producer warpgroup, no setmaxnreg (__launch_bounds__(256, 1): up to
//    255 registers a thread); rung 5's ping-pong and intra-warpgroup overlap stay.
//  - One thread issues every TMA copy: the loader, thread 128, the first of warpgroup 1, the second
//    to give each tile back in the ping-pong, so right after its own release the slot is usually
//    free. The ring is rung 5's Pipeline; only its producer loop is not used. The loader asks for Q
//    and the ring's first round at the start, then for K_{it+kStages} (V_{it+kStages}) once both
//    warpgroups gave K_it (V_it) back, into the slot just freed.
//  - Where the loader may wait: not between a warpgroup's wgmma_wait<1> and wgmma_wait<0>, where a
//    spin loop or a branch around the copies makes ptxas serialise every wgmma of the kernel
//    (nvcc 13.0's C7520). There every thread runs a test that does not wait (mbarrier.test_wait) and
//    the copies go out under a predicate; only after wgmma_wait<0> does the loader wait for a slot.
//  Why no wait can form a cycle, and why the barriers' parities stay unambiguous: chapter 08,
//  "The loader cannot deadlock".
//
// What it should cost against rung 5 (the paper: 12-14% at d = 128): the copies and tests sit on
// warpgroup 1's critical path, a copy whose slot is not free in the window goes out a softmax later,
// and a late warpgroup 0 stalls the loader's warp. Registers are not scarcer (255 against 240).
//
// IO: rung 5's (the same tiles and loads; TMA's delivered boxes, tma_delivered_read_bytes).
#include "check.hpp"
#include "fa3_common.cuh"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

namespace {
// Three of hopper.cuh's instructions in the forms this rung needs between a wgmma and its wait,
// where a branch or a spin loop that depends on the thread would make ptxas serialise the kernel's
// wgmma's (see the header): a test that does not wait, and the copy and its announcement under a
// predicate (`@p`) instead of a branch.
// "mbarrier.test_wait.parity": has the phase of this parity completed? Returns at once.
__device__ inline bool mbarrier_test_wait(uint64_t* bar, int parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(hopper::smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// hopper::mbarrier_arrive_expect_tx and hopper::tma_load_3d, done only where `go`.
__device__ inline void mbarrier_arrive_expect_tx_if(bool go, uint64_t* bar, unsigned bytes) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n"
      " @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n}\n" ::"r"(hopper::smem_u32(bar)),
      "r"(bytes), "r"(int(go))
      : "memory");
}
__device__ inline void tma_load_3d_if(bool go, void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                      int c2) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
      " @p cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n}\n" ::"r"(hopper::smem_u32(smem_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(hopper::smem_u32(bar)), "r"(int(go))
      : "memory");
}
}  // namespace

template <class T, int D, int kStages>
__global__ void __launch_bounds__(256, 1)
    flash_v3_overlap_no_ws(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                           const __grid_constant__ CUtensorMap mapV, Params p) {
  constexpr int NT = kBc / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  const Pipeline<D, kStages> pipe{{}, align1024(smem_raw)};
  const int warp = threadIdx.x / 32, cwg = warp / 4;
  const int i = query_block(p.causal), row0 = i * kBr, warp_row0 = row0 + 16 * warp;
  const int h = blockIdx.y;
  const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);
  const bool loader = threadIdx.x == 128;  // warpgroup 1's first thread: the second to give each tile back
  // Load n of K (or V): key block blocks − 1 − n into slot n % kStages, once every consumer warp gave
  // back the slot's previous use (load n − kStages; the first kStages loads find their slots free).
  // The loader alone, outside any wgmma's window: waits for the slot, then asks.
  auto load_k = [&](int n) {
    if (n >= blocks) return;
    hopper::mbarrier_wait(pipe.k_empty(n), pipe.phase(n) ^ 1);
    hopper::mbarrier_arrive_expect_tx(pipe.k_full(n), kBc * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b)
      hopper::tma_load_3d(pipe.K(n) + b * kBc * 64, &mapK, pipe.k_full(n), 64 * b, (blocks - 1 - n) * kBc, h);
  };
  auto load_v = [&](int n) {
    if (n >= blocks) return;
    hopper::mbarrier_wait(pipe.v_empty(n), pipe.phase(n) ^ 1);
    hopper::mbarrier_arrive_expect_tx(pipe.v_full(n), kBc * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b)
      hopper::tma_load_3d(pipe.V(n) + b * kBc * 64, &mapV, pipe.v_full(n), 64 * b, (blocks - 1 - n) * kBc, h);
  };
  // Inside a window (every thread runs it, no branch): the loader asks for load n of K if its slot
  // is free already and it has not asked yet. Returns whether it has asked by now.
  auto ask_k_if_free = [&](int n, bool asked) {
    const bool free = mbarrier_test_wait(pipe.k_empty(n), pipe.phase(n) ^ 1);
    const bool go = loader & !asked & (n < blocks) & free;
    mbarrier_arrive_expect_tx_if(go, pipe.k_full(n), kBc * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b)
      tma_load_3d_if(go, pipe.K(n) + b * kBc * 64, &mapK, pipe.k_full(n), 64 * b, (blocks - 1 - n) * kBc, h);
    return asked | go;
  };
  if (threadIdx.x == 0) pipe.init(8);
  __syncthreads();
  if (loader) {  // Q, then the ring's first round, in the order rung 5's producer asks for them
    hopper::mbarrier_arrive_expect_tx(pipe.q_full(), kBr * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) hopper::tma_load_3d(pipe.Q() + b * kBr * 64, &mapQ, pipe.q_full(), 64 * b, row0, h);
    for (int n = 0; n < kStages; ++n) {
      load_k(n);
      load_v(n);
    }
  }

  // ---- rung 5's consumers, warpgroups 0 and 1 ----
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
  if (loader) load_k(kStages);  // into K_0's slot (no wgmma is running: the loader may wait)
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
    bool asked = ask_k_if_free(it + kStages, false);  // into K_it's slot, if warpgroup 0 gave it back
    if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
    float alpha[2];
    softmax_scores(S[0], m[0], l[0], p.scale, alpha);  // under the product into o
    asked = ask_k_if_free(it + kStages, asked);        // the slot was not free yet: a softmax later
    hopper::wgmma_wait<0>();
    hopper::fence_registers(o[0]);
    pipe.release_v(it - 1);
    if (loader) {  // no wgmma is running: the loader may wait for a slot
      if (!asked) load_k(it + kStages);
      load_v(it - 1 + kStages);  // into V_{it−1}'s slot
    }
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
  pipe.release_v(blocks - 1);  // (no load is left to ask for: blocks − 1 + kStages >= blocks)

  hopper::named_barrier_sync(1 + cwg, 128);
  tc::write_output<T, D, 1>(o, m, l, staging<D>(pipe.Q(), cwg, warp % 4), p, size_t(h) * p.N * D, warp_row0);
}

}  // namespace fa3

void launch_fa3_overlap_no_ws(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                              float* L) {
  tc::dispatch("overlap_no_ws", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("overlap_no_ws");
    constexpr int kStages = 2;
    fa3::launch_per_tile(fa3::flash_v3_overlap_no_ws<typename C::T, C::D, kStages>, fa3::Smem<C::D, kStages>::kBytes, 256,
                         s, t, C::D, Q, K, V, O, L);
  });
}

}  // namespace attention
