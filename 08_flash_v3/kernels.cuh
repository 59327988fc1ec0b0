// Stage 08's kernels and their launchers (device pointers, stage 06's layout: B·H heads of N × d,
// L in floats). Defined only in a CUDA build with a compiler that targets sm_90a; each launcher
// checks the shape and the GPU (a Hopper) and throws UsageError before launching. One launcher per
// rung, in the order of the chapter:
//   wgmma              (fa3_1_wgmma.cu)             warpgroup MMAs from shared memory, cp.async loads
//   tma                (fa3_2_tma.cu)               tiles by the copy engine into a ring, mbarriers
//   warp_specialized   (fa3_3_warp_specialized.cu)  a producer warpgroup, two consumers, setmaxnreg
//   pingpong           (fa3_4_pingpong.cu)          named barriers take turns at the tensor cores
//   overlap            (fa3_5_overlap.cu)           the softmax of block j under the P·V of block j−1
//   persistent         (fa3_6_persistent.cu)        one block an SM, tiles from a counter
//   three_warpgroups   (fa3_7_three_warpgroups.cu)  d = 64: three consumers (Br = 192); tree reductions
//   tuned              (fa3_8_tuned.cu)             O written out by TMA stores
// the ablations overlap_no_ws (fa3_5_overlap_no_ws.cu: the FA-3 paper's, no producer warpgroup) and
// tuned_lpt (causal tiles in FlashAttention-3's LPT order); and the experiment tile_overlap
// (fa3_tile_overlap.cu: the next tile's first S under this tile's epilogue), with
// tile_overlap_wait_v_first (V waited for before the turn).
#pragma once

#include <string>

#include "../06_flash_v2/algorithm.hpp"
#include "dtype.hpp"

namespace attention {

void launch_fa3_wgmma(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                      float* L);
void launch_fa3_tma(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                    float* L);
void launch_fa3_warp_specialized(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                 void* O, float* L);
void launch_fa3_pingpong(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                         float* L);
void launch_fa3_overlap(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                        float* L);
// Rung 5 with its producer warpgroup removed (fa3_5_overlap_no_ws.cu): the ablation overlap_no_ws.
void launch_fa3_overlap_no_ws(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                              float* L);

void launch_fa3_persistent(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                           float* L);
void launch_fa3_three_warpgroups(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                                 float* L);
void launch_fa3_tuned(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                      float* L);
// The same with the keys at or past Nk (1 ≤ Nk ≤ N) hidden, as keys past N are: stage 10 pairs a
// chunk of queries with a chunk of keys, both stored as N rows, whose last rows may be padding.
void launch_fa3_tuned_keys(const Shape& s, int Nk, course::Dtype t, const void* Q, const void* K, const void* V,
                           void* O, float* L);
void launch_fa3_tuned_lpt(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                          float* L);
void launch_fa3_tile_overlap(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                             float* L);
void launch_fa3_tile_overlap_wait_v_first(const Shape& s, course::Dtype t, const void* Q, const void* K,
                                          const void* V, void* O, float* L);

// The persistent kernels with what a launch may be asked besides the problem: at most grid_cap
// blocks (0: one an SM; the tests make one block take many tiles), and tuned_lpt's heads a group (0:
// as many as keep K and V within 16 MB of L2). launch_fa3_with_options takes them by name (persistent,
// three_warpgroups, tuned, tuned_lpt, tile_overlap; UsageError for another).
struct PersistentOptions {
  int grid_cap = 0;
  int head_group = 0;
};
void launch_fa3_with_options(const std::string& variant, const Shape& s, course::Dtype t, const void* Q,
                             const void* K, const void* V, void* O, float* L, const PersistentOptions& options);
void launch_fa3_persistent_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                                float* L, const PersistentOptions& options);
void launch_fa3_three_warpgroups_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                                      float* L, const PersistentOptions& options);
void launch_fa3_tuned_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                           float* L, const PersistentOptions& options);
void launch_fa3_tuned_lpt_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                               float* L, const PersistentOptions& options);
void launch_fa3_tile_overlap_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                                  float* L, const PersistentOptions& options);

}  // namespace attention
