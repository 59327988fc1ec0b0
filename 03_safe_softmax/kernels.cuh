// Stage 03's kernels: row-wise softmax of an R × C fp32 matrix X into Y (row-major, device
// pointers). `workspace` holds workspace_floats(R, C) floats for the per-segment partials.
// Defined only in a CUDA build (kernels.cu); see COURSE_GPU in common/check.hpp.
#pragma once

namespace softmax {

void launch_naive(const float* X, float* Y, float* workspace, int R, int C);
void launch_safe(const float* X, float* Y, float* workspace, int R, int C);

// Threads per block for rows of C columns: enough for one float4 (or float) per thread of a
// segment, a multiple of 32, at most kMaxThreads.
int block_threads(int C);
// Blocks of a pass over an R × C matrix: one per (row, segment). Rejects empty or too large ones.
int segment_blocks(int R, int C);

}  // namespace softmax
