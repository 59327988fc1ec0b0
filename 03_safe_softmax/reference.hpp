// The CPU reference for the row-wise softmax of an R × C matrix, in float64 with Eigen:
//   y[r][c] = exp(x[r][c] - m[r]) / sum_c' exp(x[r][c'] - m[r]),   m[r] = max_c x[r][c].
// A row that holds a NaN gives a row of NaN; a row of -inf gives NaN (0/0), as the formula does.
#pragma once

#include <vector>

namespace softmax {

std::vector<double> reference(const float* X, int R, int C);

}  // namespace softmax
