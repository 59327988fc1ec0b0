// Stage 02's kernels: C = A·B in fp32, tiled. Row-major, device pointers.
// Defined only in a CUDA build (kernels.cu); see COURSE_GPU in common/check.hpp.
#pragma once

namespace matmul {

void launch_smem_tiled(const float* A, const float* B, float* C, int M, int N, int K);
void launch_register_blocked(const float* A, const float* B, float* C, int M, int N, int K);
// `batch` products C_b = A_b·B_b, each matrix right after the previous one (stage 05's heads).
void launch_register_blocked_batched(const float* A, const float* B, float* C, int M, int N, int K,
                                     int batch);
// The yardstick: cuBLAS SGEMM (plain fp32, no TF32), the library a reader would otherwise use.
void launch_cublas(const float* A, const float* B, float* C, int M, int N, int K);

}  // namespace matmul
