// Stage 02 on the GPU: each kernel (and cuBLAS) against the float64 reference, and the measured
// traffic of the tiled kernels against the CPU count of the same algorithm.
#include <doctest/doctest.h>

#include <string>

#include "algorithm.hpp"
#include "kernels.cuh"
#include "test_util_gpu.hpp"

using namespace matmul;

namespace {

const std::pair<const char*, Launcher> kKernels[] = {{"smem_tiled", launch_smem_tiled},
                                                     {"register_blocked", launch_register_blocked},
                                                     {"cublas", launch_cublas}};
const Counted kCounted[] = {tiled_counted, register_blocked_counted};

}  // namespace

TEST_CASE("tiled kernels and cuBLAS match the float64 reference on every shape") {
  for (const auto& [kernel, launch] : kKernels) {
    // cuBLAS is not ours to sanitize (and initcheck flags its internal workspace).
    if (testing::under_sanitizer() && std::string(kernel) == "cublas") continue;
    for (const auto& s : testing::shapes()) {
      CAPTURE(kernel);
      testing::check_against_reference(s, [&](const auto& A, const auto& B) {
        return testing::run_on_gpu(launch, s, A, B);
      });
    }
  }
}

TEST_CASE("register_blocked: both load paths (16-byte and 4-byte) on shapes around the tile") {
  for (auto s : std::vector<testing::Shape>{{128, 128, 8}, {129, 132, 12}, {127, 131, 9}, {256, 4, 4}}) {
    testing::check_against_reference(s, [&](const auto& A, const auto& B) {
      return testing::run_on_gpu(launch_register_blocked, s, A, B);
    });
  }
}

TEST_CASE("tiled kernels: measured SM<->L2 traffic is the counted traffic") {
  if (testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  // Exact model; 16-byte path with rows off the sector grid; 4-byte path.
  const testing::Shape shapes[] = {{1024, 1024, 1024}, {1000, 1004, 1012}, {1030, 1026, 1022}};
  for (int v = 0; v < 2; ++v) {
    for (const auto& s : shapes) {
      CAPTURE(kKernels[v].first);
      testing::check_measured_traffic(kKernels[v].second, kCounted[v], s);
    }
  }
}
