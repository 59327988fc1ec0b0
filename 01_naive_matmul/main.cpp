// 01_naive_matmul: C = A·B with one thread per element of C, uncoalesced then coalesced.
// Run with no options for a small sweep, --help for the options; docs/01_naive_matmul.md explains.
#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "matmul_bench.hpp"

int main(int argc, char** argv) {
  using matmul::Naive;
  auto counted = [](Naive layout) {
    return [layout](const float* A, const float* B, float* C, int M, int N, int K) {
      return matmul::naive_counted(layout, A, B, C, M, N, K);
    };
  };
  auto model = [](Naive layout) {
    return [layout](int M, int N, int K) { return matmul::naive_model_bytes(layout, M, N, K); };
  };
  const matmul::Program program{
      "01_naive_matmul",
      "01_naive_matmul: the naive fp32 matmul, one thread per output, and the memory traffic it "
      "causes",
      {256, 512, 1024},
      {{"uncoalesced", model(Naive::uncoalesced), counted(Naive::uncoalesced),
        COURSE_GPU(matmul::launch_naive_uncoalesced)},
       {"coalesced", model(Naive::coalesced), counted(Naive::coalesced),
        COURSE_GPU(matmul::launch_naive_coalesced)}}};
  return matmul::run(argc, argv, program);
}
