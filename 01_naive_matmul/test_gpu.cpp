// Stage 01 on the GPU: each kernel against the float64 reference, and its measured traffic
// against the CPU count of the same algorithm (and so against the model, where it is exact).
#include <doctest/doctest.h>

#include "algorithm.hpp"
#include "kernels.cuh"
#include "test_util_gpu.hpp"

using namespace matmul;

namespace {

const std::pair<const char*, Launcher> kKernels[] = {
    {"uncoalesced", launch_naive_uncoalesced}, {"coalesced", launch_naive_coalesced}};
const Naive kLayouts[] = {Naive::uncoalesced, Naive::coalesced};

}  // namespace

TEST_CASE("naive kernels match the float64 reference on every shape") {
  for (const auto& [kernel, launch] : kKernels) {
    for (const auto& s : testing::shapes()) {
      CAPTURE(kernel);
      testing::check_against_reference(s, [&](const auto& A, const auto& B) {
        return testing::run_on_gpu(launch, s, A, B);
      });
    }
  }
}

TEST_CASE("naive kernels: measured SM<->L2 traffic is the counted traffic") {
  if (testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  for (int v = 0; v < 2; ++v) {
    // 512^3, where the model is exact, and a ragged shape, where only the count is.
    for (const testing::Shape s : {testing::Shape{512, 512, 512}, testing::Shape{200, 136, 300}}) {
      CAPTURE(kKernels[v].first);
      const Naive layout = kLayouts[v];
      testing::check_measured_traffic(
          kKernels[v].second,
          [layout](const float* A, const float* B, float* C, int M, int N, int K) {
            return naive_counted(layout, A, B, C, M, N, K);
          },
          s);
    }
  }
}
