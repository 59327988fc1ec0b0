// Stage 06's kernels and their launchers (device pointers, the layout of algorithm.hpp). Defined
// only in a CUDA build. Each launcher checks the shape, and throws UsageError, before launching.
#pragma once

#include "algorithm.hpp"
#include "dtype.hpp"

namespace attention {

// Part A: FlashAttention-2 in fp32 on the CUDA cores (kernels_fp32.cu), d = 32, 64 or 128.
void launch_flash_v2_fp32(const Shape& s, const float* Q, const float* K, const float* V, float* O,
                          float* L);

// Part B: the tensor-core ladder (fp16 or bf16 storage, fp32 sums), d = 64 or 128. Q, K, V and O
// point to 16-bit values of `dtype`. One launcher per rung, in the order of the chapter:
//   mma        (tc1_mma.cu)       warps split Q; mma.sync fed by plain shared-memory loads
//   ldmatrix   (tc2_ldmatrix.cu)  ldmatrix (.trans for V) from a swizzled layout
//   cp_async   (tc3_cp_async.cu)  K/V double-buffered with cp.async
// then rung 4, FA-2's remaining steps, one idea a step:
//   exp2            (tc4a_exp2.cu)            exp2 with scale·log₂e folded in: one FFMA and one MUFU a score
//   one_barrier     (tc4b_one_barrier.cu)     one barrier per key block instead of two
//   skip_mask       (tc4c_skip_mask.cu)       the mask only on the blocks that need it, walked first
//   heaviest_first  (tc4d_heaviest_first.cu)  causal: the query blocks with the most keys start first
//   tuned           (tc4_tuned.cu)            32 rows a warp (Br = 128): each K/V fragment feeds two mma's
// and rung 5:
//   lazy_rescale    (tc4_tuned.cu)            one step past FA-2, from FlashAttention-4: o rescaled only
//                                             when a row max grew by more than a factor 2^8
void launch_tc_mma(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                   void* O, float* L);
void launch_tc_ldmatrix(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L);
void launch_tc_cp_async(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L);
void launch_tc_exp2(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                    void* O, float* L);
void launch_tc_one_barrier(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                           void* O, float* L);
void launch_tc_skip_mask(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                         void* O, float* L);
void launch_tc_heaviest_first(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                              void* O, float* L);
void launch_tc_tuned(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                     void* O, float* L);
void launch_tc_lazy_rescale(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                           void* O, float* L);
// Rung tuned for stage 07's D from the unrounded O: it also writes O before its rounding to the
// dtype, in fp32 (B·H·N·d floats at O32), beside O.
void launch_tc_tuned_unrounded(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                               void* O, float* L, float* O32);

}  // namespace attention
