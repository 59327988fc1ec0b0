// The CPU reference for attention, in float64 with Eigen, head by head:
//   O = softmax(Q·Kᵀ/√d + mask)·V,  mask[i][j] = −∞ where causal and j > i.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithm.hpp"
#include "compare.hpp"

namespace attention {

// Rows `rows` of head h's O (|rows| × d, row-major).
std::vector<double> reference_rows(const Shape& s, const float* Q, const float* K, const float* V,
                                   int h, const std::vector<int>& rows);

// Compares O with the reference on a sample that keeps the float64 work small: the first, a middle
// and the last head; in each, every row when N <= 2048, else 1024 rows spread over N and the last.
// Tolerance: fp32 sums of N + d terms (compare.hpp), unless `tolerance` is given.
course::Comparison check_attention(const Shape& s, const float* Q, const float* K, const float* V,
                                   const float* O, double tolerance = 0.0);

// The tolerance for scores far from 1 in size: a float score is known only to a few ulps of its
// size, and exp turns an absolute error δ in a score into a relative error δ in its weight. So:
// fp32_sum_tolerance(N + d) + 8·2⁻²⁴·max|s| over head 0's scores s = q·k/√d.
double large_score_tolerance(const Shape& s, const float* Q, const float* K);

}  // namespace attention
