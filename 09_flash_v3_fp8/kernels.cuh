// Stage 09's kernels and their launchers (device pointers). Defined only in a CUDA build whose
// compiler targets sm_90a; each launcher checks the shape and the GPU (a Hopper) and throws
// UsageError before launching.
//   quantize.cu       Q, K, V (fp16 or bf16, stage 06's layout) to e4m3 with their scales, by the
//                     scheme: per tensor (an amax pass, then the quantisation) or per block (one
//                     pass); with incoherent processing (Q's and K's rows through the random
//                     signs and the Walsh–Hadamard transform) or without; V written as Vᵀ
//                     (fp8.hpp's layout)
//   fp8_attention.cu  the forward pass on the FP8 tensor cores: stage 08's last rung (a persistent
//                     grid, a producer warpgroup, two consumer warpgroups taking turns, the softmax
//                     of one block under the products of the next) with e4m3 operands; O in fp16 or
//                     bf16 and L, as stage 06 writes them
#pragma once

#include <cstdint>
#include <vector>

#include "dtype.hpp"
#include "fp8.hpp"

namespace attention::fp8 {

// The quantised tensors of one problem, on the device. Q and K: heads × N × d bytes; Vt: heads × d ×
// padded_keys(N) bytes (of V − v̄); the descales heads × ⌈N/128⌉ floats each; amax: 3 floats the
// per-tensor scheme reduces into; bad: the count of NaN or ±inf values the quantisation met (0 when
// the inputs are finite; check_quantized reads it); v_mean: v̄, heads × d floats (0 without
// centring), which the attention adds to O; v_sums: heads × ⌈N/128⌉ × d floats, the column sums of
// each block of V's rows, on the way to v̄.
struct DeviceFp8 {
  std::uint8_t *Q = nullptr, *K = nullptr, *Vt = nullptr;
  float *q_scale = nullptr, *k_scale = nullptr, *v_scale = nullptr;
  float* amax = nullptr;
  int* bad = nullptr;
  float *v_mean = nullptr, *v_sums = nullptr;
};

// Q, K, V (16-bit, `t`) into `out` by `scheme`; `signs`: the incoherent processing's d signs.
void launch_quantize(const Shape& s, course::Dtype t, Scheme scheme, const std::vector<float>& signs, const void* Q,
                     const void* K, const void* V, const DeviceFp8& out);
// Throws UsageError if the quantisation met NaN or inf, or if a head's V descales span more than kMaxVScaleSpan
// (fp8.hpp; synchronises: after the checked run only).
void check_quantized(const Shape& s, const DeviceFp8& q);

// O (B·H·N·d values of `out`: fp16 or bf16) and L (B·H·N floats) from the quantised tensors.
void launch_attention(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L);
// An experiment on launch_attention: every k-th 8-key tile's exponentials (k = 4, 8) by a polynomial
// on the FMA pipe instead of the exponential unit; 0 (the default): none. UsageError for other k.
void set_exp2_poly_every(int k);
// The ablation of the row sum on the tensor cores: false sums l by FADDs in the softmax, as stage 08
// does (the kernel before that rung); true (the default): l from P̃·V's 8 extra columns of ones.
// The polynomial (set_exp2_poly_every) runs with the default only.
void set_row_sum_by_mma(bool by_mma);
// Where P̃ goes as P̃·V's A operand. by_d (the default): through shared memory at d = 128 (stored by
// stmatrix, read by the wgmma: P̃·V may then run under the whole softmax), in registers at d = 64,
// where the stores measured slower. registers, shared: that at every d (the ablations fp8_*_preg and
// fp8_*_psmem), with the default kernel only.
enum class POperand { by_d, registers, shared };
void set_p_operand(POperand where);
// An experiment (the ablations fp8_*_acc2, _acc3, _lazy3): O accumulated on the tensor cores across
// key blocks (no fresh accumulator, as FlashAttention-3), l by FADDs, with 2 (d = 128 only) or 3
// consumer warpgroups, and with 3 optionally the lazy rescale (m moves only when a block's max passes
// it by more than 0.8 in log₂ units, and o's rescale is skipped while its factors are 1). 0 (the
// default): off. O drifts low on inputs whose mean is not 0 unless V is centred (Scheme::centre_v,
// which the program's rows and the tests use with it; chapter 09).
void set_o_on_tensor_cores(int warpgroups, bool lazy = false);
// The wide rung (the ablation fp8_*_wide, d = 128): key blocks of 256 keys (K's two descales a
// block), O and the row sums accumulated on the tensor cores with the lazy rescale, two consumer
// warpgroups. V must be centred (as the experiment above) and its descale per tensor (v_scales):
// UsageError otherwise. off (the default): key blocks of 128.
// Its experiments, each on the one before it (turns: on optimistic):
//   optimistic (fp8_*_wide_opt): P̃ first with m as it stands, the row max only when some P̃ overflowed;
//   turns (fp8_*_wide_turns): the two warpgroups' softmaxes taking turns;
//   vbar_smem (fp8_*_wide_epi): the epilogue reads v̄ from shared memory, copied in with Q;
//   overlap (fp8_*_wide_ovl): a tile's last P̃·V and epilogue under the next tile's first S;
//   overlap_mask (fp8_*_wide_mask): that with the causal diagonal's mask not checking N where the
//     block ends before it;
//   overlap_decoded (fp8_*_wide_dec): that with each tile's head and query block from the producer;
//   overlap_qhalves (fp8_*_wide_qh): that with Q in two halves, each given back by its own warpgroup;
//   overlap_diagonal (fp8_*_wide_diag): that with the causal diagonal's 32-key steps past a warp's
//     rows left out of its softmax (no mask, max or exponentials there; P̃ zero);
//   overlap_q_prefetch (fp8_*_wide_pfq): that with the first half of each tile's Q (the first
//     warpgroup's rows) prefetched into L2 when the producer takes the tile;
//   overlap_log2 (fp8_*_wide_lg2): that with L by lg2.approx, stored after O's TMA store is issued;
//   overlap_stsm (fp8_*_wide_stsm): that with the epilogue's staging written by stmatrix.
enum class Wide { off, rung, optimistic, turns, vbar_smem, overlap, overlap_mask, overlap_decoded, overlap_qhalves,
                  overlap_diagonal, overlap_q_prefetch, overlap_log2, overlap_stsm, overlap_lin };
// overlap_lin (fp8_*_wide_lin, an experiment on _wide_stsm): P̃'s bytes from fp16's bit pattern, without MUFU.
void set_wide_key_blocks(Wide kernel, Granularity v_scales = Granularity::tensor);
// An experiment on the default kernel (fp8_*_lin): P̃'s bytes from fp16's bit pattern, as overlap_lin, at
// d = 64 and 128 and every scheme, P̃'s operand where set_p_operand puts it (fp8_*_lin_psmem: shared). false (the
// default): P̃ by the exponential unit. UsageError with the row sum by FADDs, the polynomial, O on the tensor cores
// or the wide rung.
void set_lin_p(bool on);
// Whether launch_attention now makes P̃ by the lin rule (set_lin_p, or the wide rung's overlap_lin): the checks widen
// L's bound by log(1 + kLinMaxRelError) for it (fp8.hpp).
bool p_by_lin();
// fp8_*_wide_ovl, causal: its tiles in groups of `heads` heads, a group's heaviest first across its
// heads (FlashAttention-3's LPT order). 0 (the default): the largest group whose K and V take at
// most 16 MB; 1: a head at a time, as the other kernels.
void set_head_group(int heads);

}  // namespace attention::fp8
