// 02_tiled_matmul: shared-memory tiling, then register blocking, against cuBLAS SGEMM.
// Run with no options for a small sweep, --help for the options; docs/02_tiled_matmul.md explains.
#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "matmul_bench.hpp"

int main(int argc, char** argv) {
  const matmul::Program program{
      "02_tiled_matmul",
      "02_tiled_matmul: tiling in shared memory and registers cuts global traffic by the tile size",
      {256, 512, 1024},
      {{"smem_tiled",
        [](int M, int N, int K) { return matmul::tiled_model_bytes(M, N, K, matmul::kTile, matmul::kTile); },
        matmul::tiled_counted, COURSE_GPU(matmul::launch_smem_tiled)},
       {"register_blocked",
        [](int M, int N, int K) { return matmul::tiled_model_bytes(M, N, K, matmul::kBM, matmul::kBN); },
        matmul::register_blocked_counted, COURSE_GPU(matmul::launch_register_blocked)},
       {"cublas", nullptr, nullptr, COURSE_GPU(matmul::launch_cublas)}}};
  return matmul::run(argc, argv, program);
}
