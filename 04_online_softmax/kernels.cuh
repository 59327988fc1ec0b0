// Stage 04's kernels (row-major, device pointers). Defined only in a CUDA build (kernels.cu).
#pragma once

namespace softmax {

// Row softmax of an R × C matrix: `workspace` holds workspace_floats(R, C) floats.
void launch_online(const float* X, float* Y, float* workspace, int R, int C);
// C <= kOnChipMaxCols; needs no workspace.
void launch_on_chip(const float* X, float* Y, float* workspace, int R, int C);

// O = softmax(Q·Kᵀ/√d)·V for Nq queries and N keys; d is 32, 64 or 128.
void launch_attention_row(const float* Q, const float* K, const float* V, float* O, int Nq, int N,
                          int d);

}  // namespace softmax
