// The float64 reference of the tiled attention stages (06 onward; Eigen): O and the logsumexp L of
// sampled rows, on the inputs as they are stored (already rounded to the dtype), and the tolerance
// each dtype is held to.
//
// Tolerance. fp32: stage 05's (the sums' rounding plus 8 ulps of the largest score, per element).
// fp16 and bf16: FlashAttention-2's own rule. Attention computed plainly in the dtype, as a
// framework's unfused path does it (S = Q·Kᵀ·scale rounded to the dtype, P = softmax(S) in float
// rounded to the dtype, O = P·V with float sums rounded to the dtype), has some error against the
// float64 reference; a kernel passes when its error is at most twice that (FA-2's tests compare max
// |out − ref| with 2 × max |plain − ref|). We measure both errors the course's way (relative to
// max(|ref|, rms ref)), and the bound never drops below the dtype's unit roundoff (2⁻¹¹ for fp16,
// 2⁻⁸ for bf16): a kernel is always allowed the rounding of its own output. L, which the kernels
// keep in float, is held to the same rule with the plain L = m + log Σ exp(S − m) of the rounded S.
#pragma once

#include <cstddef>
#include <vector>

#include "attention/shape.hpp"
#include "compare.hpp"
#include "dtype.hpp"

namespace attention {

// The rows a check compares: every head when B·H·N <= 16384, else the first, a middle and the
// last; in each, every row when N <= 2048, else 512 rows spread over N and the last.
struct Sample {
  std::vector<int> heads, rows;
};
Sample sample_rows(const Shape& s);

// The reference of one problem, computed once and used for every variant run on it.
class Reference {
 public:
  // Q, K, V: the values as stored (rounded to `dtype`). Computes the float64 O and L of the
  // sample, and for 16-bit dtypes the plain attention's errors that set the tolerance.
  Reference(const Shape& s, course::Dtype dtype, const float* Q, const float* K, const float* V);

  // O (all B·H·N·d values, as floats) and L (B·H·N floats) of a run, against the reference.
  course::Comparison check_O(const float* O) const;
  course::Comparison check_L(const float* L) const;

  double tolerance_O() const { return tol_O_; }
  double tolerance_L() const { return tol_L_; }
  // The errors of plain attention in the dtype (0 for fp32, which has no plain variant here).
  double plain_error_O() const { return plain_O_; }
  double plain_error_L() const { return plain_L_; }

 private:
  Shape s_;
  std::vector<double> O_, L_;
  std::vector<std::size_t> where_O_, where_L_;
  double tol_O_ = 0, tol_L_ = 0, plain_O_ = 0, plain_L_ = 0;
};

// O's comparison and L's in one: O's, failing (with L's mismatches added) if L fails.
course::Comparison with_L(course::Comparison O, const course::Comparison& L);

}  // namespace attention
