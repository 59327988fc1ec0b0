// Stage 01: the naive matmul, C = A·B, one thread per element of C.
//
// Every thread reads a whole row of A and a whole column of B from global memory: 2·K floats for
// one output, 2·M·N·K floats in all, with no reuse on the chip. The two kernels differ only in how
// a warp's 32 threads are laid over C, which decides how many 32-byte sectors each warp-wide load
// touches (algorithm.hpp has the CPU version, and the formulas).
//
// Both read with __ldcg ("cache global": keep in L2, not in the SM's L1), and a block is a single
// warp. We switch the L1 off, and keep warps that ask for the same sectors at the same moment out
// of one block, on purpose: so that the traffic you measure is the traffic the code asks for, not
// what the SM's caches save (the chapter measures that too). Stage 02 then builds the on-chip reuse
// explicitly, in shared memory.
#include <cstdlib>
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
  const int i = blockIdx.y * kWarpLanes + threadIdx.x;
  const int j = blockIdx.x * blockDim.y + threadIdx.y;  // blockDim.y = 1 unless experimenting
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
  const int i = blockIdx.x * blockDim.y + threadIdx.y;  // blockDim.y = 1 unless experimenting
  const int j = blockIdx.y * kWarpLanes + threadIdx.x;
  if (i >= M || j >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) {
    acc += __ldcg(&A[size_t(i) * K + k]) * __ldcg(&B[size_t(k) * N + j]);
  }
  C[size_t(i) * N + j] = acc;
}

namespace {
// Warps per block: 1. The experiment of docs/01_naive_matmul.md sets COURSE_NAIVE_WARPS_PER_BLOCK
// (1..32) to put several warps that read the same sectors into one block.
int warps_per_block() {
  const char* text = std::getenv("COURSE_NAIVE_WARPS_PER_BLOCK");
  if (text == nullptr) return 1;
  const int w = std::atoi(text);
  course::require(w >= 1 && w <= 32, "COURSE_NAIVE_WARPS_PER_BLOCK must be 1..32");
  return w;
}

// blockIdx.x (with threadIdx.y) is the index the 32 lanes share (j, or i); blockIdx.y is the
// warp's 32-wide chunk of the other.
void launch(void (*kernel)(const float*, const float*, float*, int, int, int), int shared_count,
            int lane_count, const float* A, const float* B, float* C, int M, int N, int K) {
  const int w = warps_per_block();
  const dim3 grid((shared_count + w - 1) / w, (lane_count + kWarpLanes - 1) / kWarpLanes);
  course::require(grid.y <= 65535u, "matrix too large for the naive kernels' grid (at most " +
                                        std::to_string(65535 * kWarpLanes) + " along a warp)");
  kernel<<<grid, dim3(kWarpLanes, w)>>>(A, B, C, M, N, K);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_naive_uncoalesced(const float* A, const float* B, float* C, int M, int N, int K) {
  launch(naive_uncoalesced, N, M, A, B, C, M, N, K);
}

void launch_naive_coalesced(const float* A, const float* B, float* C, int M, int N, int K) {
  launch(naive_coalesced, M, N, A, B, C, M, N, K);
}

}  // namespace matmul
