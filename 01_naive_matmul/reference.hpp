// The CPU reference for C = A·B, in float64 with Eigen: the formula and nothing else.
// All matrices are row-major: A is M×K, B is K×N, C is M×N.
#pragma once

#include <cstddef>
#include <vector>

namespace matmul {

// C = A·B in float64, all M×N entries.
std::vector<double> reference(const float* A, const float* B, int M, int N, int K);

// C[i][j] alone, in float64: for spot checks of products too large for the full reference.
double reference_entry(const float* A, const float* B, int N, int K, int i, int j);

}  // namespace matmul
