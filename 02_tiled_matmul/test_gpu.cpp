// Stage 02 on the GPU: each kernel (and cuBLAS) against the float64 reference, and the measured
// traffic of the tiled kernels against their model.
#include <doctest/doctest.h>

#include "algorithm.hpp"
#include "counters.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"
#include "test_util.hpp"

using namespace matmul;

namespace {

std::vector<float> run_on_gpu(const Launcher& launch, const testing::Shape& s,
                              const std::vector<float>& A, const std::vector<float>& B) {
  course::DeviceBuffer<float> dA(A), dB(B), dC(std::size_t(s.M) * s.N);
  dC.poison();
  launch(dA.get(), dB.get(), dC.get(), s.M, s.N, s.K);
  return dC.download();
}

const std::pair<const char*, Launcher> kKernels[] = {{"smem_tiled", launch_smem_tiled},
                                                     {"register_blocked", launch_register_blocked},
                                                     {"cublas", launch_cublas}};

}  // namespace

TEST_CASE("tiled kernels and cuBLAS match the float64 reference on every shape") {
  for (const auto& [kernel, launch] : kKernels) {
    // cuBLAS is not ours to sanitize (and initcheck flags its internal workspace).
    if (testing::under_sanitizer() && std::string(kernel) == "cublas") continue;
    for (const auto& s : testing::shapes()) {
      CAPTURE(kernel);
      testing::check_against_reference(s, [&](const auto& A, const auto& B) {
        return run_on_gpu(launch, s, A, B);
      });
    }
  }
}

TEST_CASE("register_blocked: both load paths (16-byte and scalar) on shapes around the tile") {
  for (auto s : std::vector<testing::Shape>{{128, 128, 8}, {129, 132, 12}, {127, 131, 9}, {256, 4, 4}}) {
    testing::check_against_reference(s, [&](const auto& A, const auto& B) {
      return run_on_gpu(launch_register_blocked, s, A, B);
    });
  }
}

TEST_CASE("tiled kernels: measured SM<->L2 traffic is the model's, within 10%") {
  if (testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  const testing::Shape s{1024, 1024, 1024};
  const auto A = course::random_uniform(std::size_t(s.M) * s.K, course::fresh_seed());
  const auto B = course::random_uniform(std::size_t(s.K) * s.N, course::fresh_seed());
  course::DeviceBuffer<float> dA(A), dB(B), dC(std::size_t(s.M) * s.N);
  const int tiles[] = {kTile, kBM};
  for (int v = 0; v < 2; ++v) {
    const auto r = course::measure_traffic(
        [&] { kKernels[v].second(dA.get(), dB.get(), dC.get(), s.M, s.N, s.K); });
    if (!r.traffic) {
      MESSAGE("counters unavailable, not checked: " << r.why_not);
      return;
    }
    const double measured = r.traffic->l2_read_bytes + r.traffic->l2_write_bytes;
    const double model = tiled_model_bytes(s.M, s.N, s.K, tiles[v], tiles[v]);
    CAPTURE(kKernels[v].first);
    MESSAGE(kKernels[v].first << ": measured / model = " << measured / model);
    CHECK(measured == doctest::Approx(model).epsilon(0.10));
  }
}
