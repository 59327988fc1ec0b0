// Stage 07's kernels (device pointers, the layout of algorithm.hpp). Defined only in a CUDA build.
// Every launcher checks the problem and throws UsageError for what its kernel does not take.
#pragma once

#include "algorithm.hpp"
#include "dtype.hpp"

namespace attention {

// The pointers of one backward pass. Q, K, V, O, dO, dQ, dK, dV hold values of the run's dtype;
// L (the forward's logsumexp), D and dQacc are floats. dQacc: the atomic variants only.
struct BackwardArgs {
  const void *Q, *K, *V, *O, *dO;
  const float* L;
  float* D;
  float* dQacc;
  void *dQ, *dK, *dV;
  // Standard attention only. fp16/bf16: P, kept by its forward, and dS, for dP then dS (B·H·N²
  // values of the dtype each). fp32: `work`, stage 05's workspace (standard_workspace_floats: Kt,
  // S, P, the softmax's partials; the backward reuses Kt for Vᵀ and S for dP, then dS), and T for
  // Pᵀ, then dSᵀ (B·H·N² floats).
  void *P = nullptr, *dS = nullptr;
  float *work = nullptr, *T = nullptr;
  // The key-outer passes on the tensor cores (tc, tuned, wide, split): keys at or past Nk are
  // hidden, as keys past N are; 0: Nk = N. Stage 10's chunks of keys end in padding rows.
  int Nk = 0;
  // Not null: D is taken from this O before its rounding (fp32, written by the forward beside O)
  // instead of from O: chapter 07's "precision of D".
  const float* O32 = nullptr;
};

// D = rowsum(dO ∘ O), one float a row; and dQacc = 0 when dQacc is not null (preprocess.cu).
void launch_backward_preprocess(const Shape& s, course::Dtype t, const BackwardArgs& a);
// dQ = scale·dQacc, in the dtype (preprocess.cu).
void launch_dq_convert(const Shape& s, course::Dtype t, const BackwardArgs& a);

// The key-outer pass in fp32 on the CUDA cores: dK, dV, and dQ's shares added into dQacc
// (kernels_fp32.cu). d = 32, 64, 128.
void launch_flash_backward_fp32(const Shape& s, const BackwardArgs& a);

// The key-outer pass on the tensor cores, fp16 or bf16, d = 64 or 128 (tc_backward.cu). With
// a.dQacc it adds dQ's shares there; with a.dQacc null it leaves dQ to launch_flash_backward_dq.
void launch_flash_backward_tc(const Shape& s, course::Dtype t, const BackwardArgs& a);
// The same with Bc = 128 keys a block and 8 warps (the tuned rung; tc_backward.cu).
void launch_flash_backward_tuned(const Shape& s, course::Dtype t, const BackwardArgs& a);
// The wide rung: 4 warps of 32 keys (Bc = 128), Br = 32, dQ one step late; d = 64 only.
void launch_flash_backward_wide(const Shape& s, course::Dtype t, const BackwardArgs& a);
// The split rung (d = 128; tc_split.cu): FA-2's division of the work between 8 warps, P and dS
// through shared memory.
void launch_flash_backward_split(const Shape& s, course::Dtype t, const BackwardArgs& a);
// Standard attention (standard.cu). fp16/bf16: cuBLAS products and the softmax rows kept in a.P;
// the forward writes P and O; the backward reads P and uses a.dS for dP, then dS. fp32: the
// forward is stage 05's (stages 02 and 03), the backward stage 02's matmul with transposes.
void launch_standard_forward(const Shape& s, course::Dtype t, const BackwardArgs& a, void* O);
void launch_standard_backward(const Shape& s, course::Dtype t, const BackwardArgs& a);
// The deterministic variant's dQ: a query-outer pass, dQ_i summed on chip and written once.
void launch_flash_backward_dq(const Shape& s, course::Dtype t, const BackwardArgs& a);

}  // namespace attention
