// Stage 11's kernels: the key-outer pass of the backward on Hopper (device pointers, stage 07's
// layout and BackwardArgs). Defined only in a CUDA build that targets sm_90a; each launcher checks
// the shape and the GPU (a Hopper) and throws UsageError before launching. One launcher a rung:
//   wgmma   (fa3_bwd_1_wgmma.cu)   the five products by warpgroup MMAs, loads by cp.async
//   tma     (fa3_bwd_2_tma.cu)     K, V, Q, dO by TMA into a ring of slots, completion on mbarriers
//   warp_specialized (fa3_bwd_3_warp_specialized.cu)  a producer warpgroup, two consumers, setmaxnreg
//   bulk_dq (fa3_bwd_4_bulk_dq.cu)  dQ's shares staged in shared memory, added by cp.reduce.async.bulk
//   one_dq  (fa3_bwd_5_one_dq.cu)  one share of dQ a key block, split between the two consumers
//   deterministic (fa3_bwd_5_one_dq.cu)  rung 5 with dQ's additions in a fixed order (a counter each)
//   tiles   (fa3_bwd_7_tiles.cu)   FlashAttention-3's tiles: 80 × 128 at d = 128 not causal (dQ transposed)
// Each adds dQ's shares into dQacc; stage 07's preprocess (D, dQacc = 0) runs before it and its
// dq_convert after (variants.cpp).
#pragma once

#include "../07_backward/kernels.cuh"

namespace attention {

void launch_fa3_bwd_wgmma(const Shape& s, course::Dtype t, const BackwardArgs& a);
void launch_fa3_bwd_tma(const Shape& s, course::Dtype t, const BackwardArgs& a);
void launch_fa3_bwd_warp_specialized(const Shape& s, course::Dtype t, const BackwardArgs& a);
void launch_fa3_bwd_bulk_dq(const Shape& s, course::Dtype t, const BackwardArgs& a);
void launch_fa3_bwd_one_dq(const Shape& s, course::Dtype t, const BackwardArgs& a);
void launch_fa3_bwd_deterministic(const Shape& s, course::Dtype t, const BackwardArgs& a);
void launch_fa3_bwd_tiles(const Shape& s, course::Dtype t, const BackwardArgs& a);

// Rungs 5 and 6's query block (Br): 128 at d = 64, 64 at d = 128, so that a consumer's half of dQ is 64 × 64.
constexpr int one_dq_query_rows(int d) { return d == 64 ? 128 : 64; }
// Rung 7's: 80 at d = 128 without the mask, rung 5's elsewhere.
constexpr int tiles_query_rows(int d, bool causal) { return d == 128 && !causal ? 80 : one_dq_query_rows(d); }

}  // namespace attention
