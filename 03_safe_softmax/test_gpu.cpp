// Stage 03 on the GPU: the kernels against the float64 reference (random rows, special rows,
// overflow), their measured traffic against the CPU count, and bad input.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "counters.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"
#include "test_util.hpp"
#include "test_util_gpu.hpp"

using namespace softmax;

namespace {

const std::pair<const char*, Launcher> kKernels[] = {{"naive", launch_naive}, {"safe", launch_safe}};
const Counted kCounted[] = {naive_counted, safe_counted};

using testing::run_on_gpu;

}  // namespace

TEST_CASE("softmax kernels match the float64 reference on every shape") {
  for (const auto& [name, launch] : kKernels) {
    for (const auto& s : testing::shapes()) {
      CAPTURE(name);
      CAPTURE(s.R);
      CAPTURE(s.C);
      const auto X = testing::logits(s);
      testing::check_softmax(X, run_on_gpu(launch, X, s.R, s.C), s.R, s.C);
    }
  }
}

TEST_CASE("special rows (masked, one-hot, equal, NaN, +inf), and the overflow naive cannot survive") {
  for (int C : {1000, 5000, 20000}) {
    const auto X = testing::special_rows(C);
    testing::check_softmax(X, run_on_gpu(launch_safe, X, 5, C), 5, C);
    const std::vector<float> four(X.begin(), X.begin() + 4 * std::size_t(C));  // naive: no +inf
    testing::check_softmax(four, run_on_gpu(launch_naive, four, 4, C), 4, C);
  }
  const std::vector<float> one = {-3.5f};
  CHECK(run_on_gpu(launch_safe, one, 1, 1)[0] == 1.0f);

  const auto big = testing::logits({4, 300}, 80.0f, 120.0f);
  testing::check_softmax(big, run_on_gpu(launch_safe, big, 4, 300), 4, 300);
  const auto naive = run_on_gpu(launch_naive, big, 4, 300);
  CHECK(std::count_if(naive.begin(), naive.end(), [](float y) { return !std::isfinite(y); }) > 0);
}

TEST_CASE("softmax kernels refuse an empty matrix") {
  course::DeviceBuffer<float> d(8);
  CHECK_THROWS_AS(launch_safe(d.get(), d.get(), d.get(), 0, 4), course::UsageError);
  CHECK_THROWS_AS(launch_naive(d.get(), d.get(), d.get(), 4, 0), course::UsageError);
}

TEST_CASE("softmax kernels: measured SM<->L2 traffic is the counted traffic") {
  if (testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  for (int v = 0; v < 2; ++v) {
    for (const testing::Shape s : {testing::Shape{256, 16384}, {8, 200003}, {1000, 1000}, {300, 4100}}) {
      CAPTURE(kKernels[v].first);
      CAPTURE(s.R);
      CAPTURE(s.C);
      const auto X = testing::logits(s);
      std::vector<float> Y(X.size());
      const course::IoCount io = kCounted[v](X.data(), Y.data(), s.R, s.C);
      course::DeviceBuffer<float> dX(X), dY(X.size()), dW(workspace_floats(s.R, s.C));
      // To the sector, give or take a few: the partials alone are 0.05-0.8% of the reads here.
      testing::check_traffic([&] { kKernels[v].second(dX.get(), dY.get(), dW.get(), s.R, s.C); },
                             io, 4.0 * double(s.R) * s.C);
    }
  }
}
