// Stage 01's kernels: C = A·B in fp32, one thread per element of C. Row-major, device pointers.
// Defined only in a CUDA build (kernels.cu); see COURSE_GPU in common/check.hpp.
#pragma once

namespace matmul {

void launch_naive_uncoalesced(const float* A, const float* B, float* C, int M, int N, int K);
void launch_naive_coalesced(const float* A, const float* B, float* C, int M, int N, int K);

}  // namespace matmul
