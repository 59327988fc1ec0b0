// Stage 09's kernels and their launchers (device pointers). Defined only in a CUDA build whose
// compiler targets sm_90a; each launcher checks the shape, the inputs and the GPU (a Hopper) and
// throws UsageError before launching.
//   quantize.cu          Q, K, V (fp16 or bf16, stage 06's layout) to e4m3 with their scales, by the
//                        scheme: per tensor (an amax pass, then the quantisation) or per block (one
//                        pass); with incoherent processing (Q's and K's rows through the random signs
//                        and the Walsh–Hadamard transform) or without; V written as Vᵀ (fp8.hpp)
//   fp8_1_e4m3.cu ...    the FP8 forward pass, one launcher a rung (variants.cpp lists them): O in
//   fp8_7_lin.cu         fp16 or bf16 and L, as stage 06 writes them
#pragma once

#include <cstdint>
#include <vector>

#include "dtype.hpp"
#include "fp8.hpp"

namespace attention::fp8 {

// The quantised tensors of one problem, on the device, and the scheme they were quantised by. Q and
// K: heads × N × d bytes; Vt: heads × d × padded_keys(N) bytes (of V − v̄); the descales heads ×
// ⌈N/128⌉ floats each; amax: 3 floats the per-tensor scheme reduces into; bad: the count of scale blocks with NaN or
// ±inf values the quantisation met (0 when the inputs are finite; check_quantized reads it); v_mean:
// v̄, heads × d floats (0 without centring), which the attention adds to O; v_sums: heads × ⌈N/128⌉ ×
// d floats, the column sums of each block of V's rows, on the way to v̄.
struct DeviceFp8 {
  std::uint8_t *Q = nullptr, *K = nullptr, *Vt = nullptr;
  float *q_scale = nullptr, *k_scale = nullptr, *v_scale = nullptr;
  float* amax = nullptr;
  int* bad = nullptr;
  float *v_mean = nullptr, *v_sums = nullptr;
  Scheme scheme;
};

// Q, K, V (16-bit, `t`) into `out` by out.scheme; `signs`: the incoherent processing's d signs.
void launch_quantize(const Shape& s, course::Dtype t, const std::vector<float>& signs, const void* Q, const void* K,
                     const void* V, const DeviceFp8& out);
// Throws UsageError if the quantisation met NaN or inf, or if a head's V descales span more than kMaxVScaleSpan
// (fp8.hpp; synchronises: after the checked run only).
void check_quantized(const Shape& s, const DeviceFp8& q);

// What a launch may be asked besides the problem: at most grid_cap blocks on the persistent grid (0:
// one an SM; the tests make one block take many tiles), and the causal LPT order's heads a group
// (rungs 4-7; 0: as many as keep K and V within 16 MB of L2; 1: a head at a time).
struct LaunchOptions {
  int grid_cap = 0;
  int head_group = 0;
};

// The rungs (fp8_N_*.cu) and ablations: O (B·H·N·d values of `out`: fp16 or bf16) and L (B·H·N
// floats) from the quantised tensors. Rungs 3-7 at d = 128 take V per tensor and centred.
using AttentionLaunch = void (*)(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                                 const LaunchOptions& options);
void launch_e4m3(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L, const LaunchOptions& options);
void launch_row_sum(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                    const LaunchOptions& options);
void launch_p_in_registers(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                           const LaunchOptions& options);
void launch_wide(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L, const LaunchOptions& options);
void launch_wide_exact_max(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                           const LaunchOptions& options);
void launch_tile_overlap(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                         const LaunchOptions& options);
void launch_tile_start(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                       const LaunchOptions& options);
void launch_epilogue(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                     const LaunchOptions& options);
void launch_lin(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L, const LaunchOptions& options);

}  // namespace attention::fp8
