// Stage 01: the naive matmul, C = A·B, one thread per element of C.
//
// Every thread reads a whole row of A and a whole column of B from global memory: 2·K floats for
// one output, 2·M·N·K floats in all, with no reuse on the chip. The two kernels differ only in how
// a warp's 32 threads are laid over C, which decides how many 32-byte sectors each warp-wide load
// touches (algorithm.hpp has the CPU version, and the formulas).
//
// Both read with __ldcg ("cache global": keep in L2, not in the SM's L1). We switch the L1 off on
// purpose, so that the traffic you measure is the traffic the code asks for, not what a cache
// happens to save; stage 02 then builds the on-chip reuse explicitly, in shared memory.
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"

namespace matmul {

// Variant 1, uncoalesced: the lane walks down a column of C, so the 32 lanes read
// A[i..i+31][k] — 32 rows, 32 different sectors — and all read the same B[k][j] (one sector).
// IO: 33 sectors per warp and k: 33·M·N·K bytes read, 32·M·N written (one sector per lane).
__global__ void naive_uncoalesced(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ C, int M, int N, int K) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= M || j >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) {
    acc += __ldcg(&A[size_t(i) * K + k]) * __ldcg(&B[size_t(k) * N + j]);
  }
  C[size_t(i) * N + j] = acc;
}

// Variant 2, coalesced: the same code with i and j swapped in the thread mapping. Now the lane walks
// along a row of C: the 32 lanes read B[k][j..j+31] (128 consecutive bytes, four sectors) and share
// A[i][k] (one sector).
// IO: 5 sectors per warp and k: 5·M·N·K bytes read (6.6x less), 4·M·N written.
__global__ void naive_coalesced(const float* __restrict__ A, const float* __restrict__ B,
                                float* __restrict__ C, int M, int N, int K) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M || j >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) {
    acc += __ldcg(&A[size_t(i) * K + k]) * __ldcg(&B[size_t(k) * N + j]);
  }
  C[size_t(i) * N + j] = acc;
}

namespace {
// A block of 32 x 8 threads: threadIdx.x is the lane, so x is the direction a warp walks.
dim3 grid_for(int along_x, int along_y) {
  const dim3 grid((along_x + kBlockX - 1) / kBlockX, (along_y + kBlockY - 1) / kBlockY);
  course::require(grid.y <= 65535u, "matrix too large for the naive kernels' grid (at most " +
                                        std::to_string(65535 * kBlockY) + " along y)");
  return grid;
}
}  // namespace

void launch_naive_uncoalesced(const float* A, const float* B, float* C, int M, int N, int K) {
  naive_uncoalesced<<<grid_for(M, N), dim3(kBlockX, kBlockY)>>>(A, B, C, M, N, K);
  CUDA_CHECK_LAUNCH();
}

void launch_naive_coalesced(const float* A, const float* B, float* C, int M, int N, int K) {
  naive_coalesced<<<grid_for(N, M), dim3(kBlockX, kBlockY)>>>(A, B, C, M, N, K);
  CUDA_CHECK_LAUNCH();
}

}  // namespace matmul
