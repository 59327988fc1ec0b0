// Stage 01 on the GPU: each kernel against the float64 reference, and its measured traffic
// against the model.
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
  dC.poison();  // an element the kernel does not write stays NaN and fails the comparison
  launch(dA.get(), dB.get(), dC.get(), s.M, s.N, s.K);
  return dC.download();
}

const std::pair<const char*, Launcher> kKernels[] = {
    {"uncoalesced", launch_naive_uncoalesced}, {"coalesced", launch_naive_coalesced}};

}  // namespace

TEST_CASE("naive kernels match the float64 reference on every shape") {
  for (const auto& [kernel, launch] : kKernels) {
    for (const auto& s : testing::shapes()) {
      CAPTURE(kernel);
      testing::check_against_reference(s, [&](const auto& A, const auto& B) {
        return run_on_gpu(launch, s, A, B);
      });
    }
  }
}

TEST_CASE("naive kernels: measured SM<->L2 traffic is the model's, within 10%") {
  if (testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  const testing::Shape s{512, 512, 512};
  const auto A = course::random_uniform(std::size_t(s.M) * s.K, course::fresh_seed());
  const auto B = course::random_uniform(std::size_t(s.K) * s.N, course::fresh_seed());
  course::DeviceBuffer<float> dA(A), dB(B), dC(std::size_t(s.M) * s.N);
  const Naive layouts[] = {Naive::uncoalesced, Naive::coalesced};
  for (int v = 0; v < 2; ++v) {
    const auto r = course::measure_traffic(
        [&] { kKernels[v].second(dA.get(), dB.get(), dC.get(), s.M, s.N, s.K); });
    if (!r.traffic) {
      MESSAGE("counters unavailable, not checked: " << r.why_not);
      return;
    }
    const double measured = r.traffic->l2_read_bytes + r.traffic->l2_write_bytes;
    const double model = naive_model_bytes(layouts[v], s.M, s.N, s.K);
    CAPTURE(kKernels[v].first);
    MESSAGE(kKernels[v].first << ": measured / model = " << measured / model);
    CHECK(measured == doctest::Approx(model).epsilon(0.10));
  }
}
