// GPU test helpers shared by the matmul stages.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "counters.hpp"
#include "device_buffer.hpp"
#include "test_util.hpp"

namespace matmul::testing {

// Runs `launch` on device copies of A and B, with C poisoned (NaN) first so that an element the
// kernel does not write fails the comparison.
inline std::vector<float> run_on_gpu(const Launcher& launch, const Shape& s,
                                     const std::vector<float>& A, const std::vector<float>& B) {
  course::DeviceBuffer<float> dA(A), dB(B), dC(std::size_t(s.M) * s.N);
  dC.poison();
  launch(dA.get(), dB.get(), dC.get(), s.M, s.N, s.K);
  return dC.download();
}

// The kernel's measured SM<->L2 traffic against the CPU run of the same algorithm through the
// counting view. Reads must agree within 1%. Writes must lie between the bytes of C and the
// counted sectors: an SM may combine stores from several instructions into one sector before
// sending it (seen when warps store to the same sectors close together), never the reverse.
inline void check_measured_traffic(const Launcher& launch, const Counted& counted, const Shape& s) {
  CAPTURE(s.M);
  CAPTURE(s.N);
  CAPTURE(s.K);
  const auto A = course::random_uniform(std::size_t(s.M) * s.K, course::fresh_seed());
  const auto B = course::random_uniform(std::size_t(s.K) * s.N, course::fresh_seed());
  std::vector<float> C(std::size_t(s.M) * s.N);
  const course::IoCount io = counted(A.data(), B.data(), C.data(), s.M, s.N, s.K);
  course::DeviceBuffer<float> dA(A), dB(B), dC(C.size());
  const auto r = course::measure_traffic([&] { launch(dA.get(), dB.get(), dC.get(), s.M, s.N, s.K); });
  if (!r.traffic) {
    // Only the machine (no permission, or the profiler busy elsewhere) may stop the counters on a
    // GPU machine; anything else is a bug.
    MESSAGE("counters unavailable: " << r.why_not);
    CHECK_MESSAGE(r.excused, r.why_not);
    return;
  }
  MESSAGE("measured / counted: reads " << r.traffic->l2_read_bytes / double(io.read_bytes)
                                       << ", writes "
                                       << r.traffic->l2_write_bytes / double(io.write_bytes));
  CHECK(r.traffic->l2_read_bytes == doctest::Approx(double(io.read_bytes)).epsilon(0.01));
  CHECK(r.traffic->l2_write_bytes <= 1.01 * double(io.write_bytes));
  CHECK(r.traffic->l2_write_bytes >= 4.0 * double(s.M) * s.N);
}

}  // namespace matmul::testing
