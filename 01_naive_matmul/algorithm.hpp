// The naive matmul as the GPU runs it — one thread per element of C, 32 threads to a warp — but
// on the CPU, through the counting view of global memory (common/io_count.hpp). Its count is the
// exact traffic the kernels cause between the SMs and L2, and the models below are the chapter's
// formulas for it.
#pragma once

#include "io_count.hpp"

namespace matmul {

// Which way the 32 threads of a warp are laid over C.
enum class Naive {
  uncoalesced,  // lanes walk down a column of C: 32 rows of A at once, 32 sectors per load
  coalesced,    // lanes walk along a row of C: 32 consecutive floats of B, 4 sectors per load
};
const char* name(Naive layout);

// The kernels' thread block: 32 x 8 threads; threadIdx.x is the lane within a warp.
constexpr int kBlockX = 32;
constexpr int kBlockY = 8;

// Runs the naive algorithm warp by warp, writes C, and returns the bytes moved.
course::IoCount naive_counted(Naive layout, const float* A, const float* B, float* C, int M, int N,
                              int K);

// The model (see docs/01_naive_matmul.md), in bytes between the SMs and L2:
//   coalesced:   per warp and k, A is one broadcast sector and B four: 5·M·N·K read, 4·M·N written
//   uncoalesced: per warp and k, A is 32 sectors and B one:       33·M·N·K read, 32·M·N written
double naive_model_bytes(Naive layout, int M, int N, int K);
// The model is exact when every warp is full and no two lanes' elements share a sector:
//   coalesced: N % 32 == 0;   uncoalesced: M % 32 == 0, K % 8 == 0, N % 8 == 0.
bool naive_model_exact(Naive layout, int M, int N, int K);

// What the threads ask for before any coalescing: 2·M·N·K floats read, M·N written.
double logical_bytes(int M, int N, int K);

}  // namespace matmul
