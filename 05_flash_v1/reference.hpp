// The CPU reference for attention, in float64 with Eigen, head by head:
//   O = softmax(Q·Kᵀ/√d + mask)·V,  mask[i][j] = −∞ where causal and j > i.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithm.hpp"
#include "compare.hpp"

namespace attention {

// Rows `rows` of head h's O (|rows| × d, row-major). With `max_score`, also the largest |q·k/√d|
// among those rows' visible scores.
std::vector<double> reference_rows(const Shape& s, const float* Q, const float* K, const float* V,
                                   int h, const std::vector<int>& rows, double* max_score = nullptr);

// Compares O with the reference on a sample that keeps the float64 work small: every head when
// B·H·N <= 16384, else the first, a middle and the last; in each, every row when N <= 2048, else
// 1024 rows spread over N and the last.
// Tolerance: fp32_sum_tolerance(N + d) (compare.hpp) for the sums, plus 8·2⁻²⁴·max|s|: a float
// score s is known only to a few ulps of its size, and exp turns an absolute error δ in a score
// into a relative error δ in its weight. (Scores of a few units add ~2e-6; scores near -150, 1e-4.)
course::Comparison check_attention(const Shape& s, const float* Q, const float* K, const float* V,
                                   const float* O);

}  // namespace attention
