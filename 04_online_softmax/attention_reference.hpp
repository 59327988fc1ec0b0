// The CPU reference for single-head attention, in float64 with Eigen:
//   O = softmax(Q · Kᵀ / √d) · V,   Q: Nq × d,  K, V: N × d,  row-major.
#pragma once

#include <vector>

namespace softmax {

std::vector<double> attention_reference(const float* Q, const float* K, const float* V, int Nq,
                                        int N, int d);

}  // namespace softmax
