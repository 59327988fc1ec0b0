// GPU test helpers shared by the softmax stages.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "counters.hpp"
#include "device_buffer.hpp"
#include "softmax_bench.hpp"

namespace softmax::testing {

// Runs `launch` on a device copy of X, with Y and the workspace poisoned (NaN) first, so that an
// element or a partial nobody wrote fails the comparison.
inline std::vector<float> run_on_gpu(const Launcher& launch, const std::vector<float>& X, int R,
                                     int C) {
  course::DeviceBuffer<float> dX(X), dY(X.size()), dW(workspace_floats(R, C));
  dY.poison();
  dW.poison();
  launch(dX.get(), dY.get(), dW.get(), R, C);
  return dY.download();
}

// Measured SM<->L2 reads equal to the count (to 1e-4); writes between the output and the count.
// Without counters (no permission to profile) it says why and checks nothing else.
inline void check_traffic(const std::function<void()>& launch, const course::IoCount& io,
                          double output_bytes) {
  const auto r = course::measure_traffic(launch);
  if (!r.traffic) {
    MESSAGE("counters unavailable: " << r.why_not);
    CHECK_MESSAGE(r.excused, r.why_not);
    return;
  }
  CHECK(r.traffic->l2_read_bytes == doctest::Approx(double(io.read_bytes)).epsilon(1e-4));
  CHECK(r.traffic->l2_write_bytes <= 1.01 * double(io.write_bytes));
  CHECK(r.traffic->l2_write_bytes >= output_bytes);
}

}  // namespace softmax::testing
