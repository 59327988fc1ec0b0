// Stage 08's kernels and their launchers (device pointers, stage 06's layout: B·H heads of N × d,
// L in floats). Defined only in a CUDA build with a compiler that targets sm_90a; each launcher
// checks the shape and the GPU (a Hopper) and throws UsageError before launching. One launcher per
// rung, in the order of the chapter:
//   wgmma              (fa3_1_wgmma.cu)             warpgroup MMAs from shared memory, cp.async loads
//   tma                (fa3_2_tma.cu)               tiles by the copy engine into a ring, mbarriers
//   warp_specialized   (fa3_3_warp_specialized.cu)  a producer warpgroup, two consumers, setmaxnreg
//   pingpong           (fa3_4_pingpong.cu)          named barriers take turns at the tensor cores
//   overlap            (fa3_5_overlap.cu)           the softmax of block j under the P·V of block j+1
#pragma once

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

}  // namespace attention
