// The accuracy side of stage 09, on the CPU: the inputs of FlashAttention-3's FP8 experiment, the
// float64 reference on them, and "plain" attention after each quantisation: the same roundings as
// the kernel (Q, K, V quantised by the scheme, P̃ rounded to e4m3, O to the output's dtype), with
// every sum and the softmax exact (float64). A kernel's error against the float64 reference is held
// to twice the plain error of its scheme (stage 06's rule, FlashAttention-2's tests' rule): what is
// left to the kernel is the order of its sums and its fp32 arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/problem.hpp"    // Inputs
#include "attention/reference.hpp"  // sample_rows
#include "compare.hpp"
#include "dtype.hpp"
#include "fp8.hpp"

namespace attention::fp8 {

// Q, K and V of `s`: N(0, 1), and each entry with probability `outlier_fraction` drawn from
// N(0, outlier_sigma²) instead (FA-3: 0.1 % of the entries from N(0, 10²)); rounded to `t`.
struct NormalInputs {
  std::vector<float> Q, K, V;
};
NormalInputs normal_inputs(const Shape& s, course::Dtype t, std::uint64_t seed, double outlier_fraction = 0.0,
                           double outlier_sigma = 10.0);
// The same values as stage 06's Inputs (the values, and the 16-bit bits the GPU gets).
Inputs to_inputs(const NormalInputs& n, course::Dtype t, std::uint64_t seed);

// O of attention in float64 (softmax(Q·Kᵀ/√d)·V, every head and row), the rows' logsumexp in L.
std::vector<double> attention_f64(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                                  const std::vector<double>& V, std::vector<double>* L = nullptr);
std::vector<double> to_double(const std::vector<float>& x);

// Every value of a quantised tensor, decoded (value = e4m3 · descale).
std::vector<double> dequantize(const Quantized& q);

// The three quantised tensors of a scheme, as the GPU's quantisation makes them.
struct QuantizedInputs {
  Scheme scheme;
  Quantized Q, K, V;         // V: of V − v̄
  std::vector<float> signs;  // the incoherent processing's (empty without it)
  std::vector<float> v_mean;  // v̄, heads × d (zeros without centre_v): added to O at the end
};
QuantizedInputs quantize_inputs(const Shape& s, const std::vector<float>& Q, const std::vector<float>& K,
                                const std::vector<float>& V, Scheme scheme, std::uint64_t sign_seed);

// Plain FP8 attention on quantised inputs: S and the softmax exact; P̃ = exp(S − rowmax) · 2^8
// rounded to e4m3 (the 2^8 as in the kernel: it keeps P̃'s small values out of e4m3's subnormals,
// and cancels in O = Σ P̃·V / Σ P̃); v̄ added; O rounded to `out`.
std::vector<float> plain_fp8(const Shape& s, const QuantizedInputs& in, course::Dtype out);
// Plain attention in a 16-bit dtype on inputs already rounded to it: P̃ and O rounded to `t` (the
// FP8 table's 16-bit row, on a machine without a GPU).
std::vector<float> plain_16bit(const Shape& s, const std::vector<float>& Q, const std::vector<float>& K,
                               const std::vector<float>& V, course::Dtype t);

// Errors of O against the reference, in the FA-3 paper's terms: the root mean square and the largest
// absolute error (NaN or inf in `out`: both infinite).
struct Errors {
  double rmse = 0, max_abs = 0;
};
Errors errors(const std::vector<float>& out, const std::vector<double>& ref);

// The check of a kernel's O and L, on stage 06's sample of rows (every row of every head at small
// shapes, else three heads × 513 rows): the float64 reference on the 16-bit inputs, and plain FP8
// attention of the scheme on the same rows. Tolerance (the course's relative error, compare.hpp):
// twice the plain FP8 error, and never below the output dtype's unit roundoff; L likewise, with
// plain FP8's L = m + log Σ exp(S − m) of the quantised S, plus `extra` (an absolute error: a kernel's own
// allowance, e.g. the lin rule's log(1 + kLinMaxRelError)) in units of the reference L's rms.
class Fp8Reference {
 public:
  Fp8Reference(const Shape& s, course::Dtype out, const std::vector<float>& Q, const std::vector<float>& K,
               const std::vector<float>& V, const QuantizedInputs& q);
  course::Comparison check_O(const float* O) const;  // all B·H·N·d values of a run
  course::Comparison check_L(const float* L, double extra = 0.0) const;  // all B·H·N
  double plain_error_O() const { return plain_O_; }
  double plain_error_L() const { return plain_L_; }
  double tolerance_O() const { return tol_O_; }

 private:
  Shape s_;
  std::vector<double> O_, L_;
  std::vector<std::size_t> where_O_, where_L_;
  double plain_O_ = 0, plain_L_ = 0, tol_O_ = 0, tol_L_ = 0, rms_L_ = 0;
};

}  // namespace attention::fp8
