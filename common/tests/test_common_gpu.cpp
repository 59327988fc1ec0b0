// GPU tests of common/: the copy kernel, the timer, and the measured IO (CUPTI counters) checked
// against a kernel whose traffic is known exactly.
#include <doctest/doctest.h>

#include <cmath>

#include "compare.hpp"
#include "copy.cuh"
#include "counters.hpp"
#include "device_buffer.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "timer.hpp"

using namespace course;

TEST_CASE("copy kernel copies every element, any length") {
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(4), std::size_t(1000003)}) {
    const auto host = random_uniform(n, fresh_seed());
    DeviceBuffer<float> src(host), dst(n);
    dst.poison();
    launch_copy(src.get(), dst.get(), n);
    const auto out = dst.download();
    CHECK(out == host);
  }
}

TEST_CASE("device buffers are tracked, and a too-large one is a clear resource error") {
  reset_device_peak();
  const std::size_t before = device_bytes_in_use();
  {
    DeviceBuffer<float> a(1 << 20);
    CHECK(device_bytes_in_use() == before + (4u << 20));
  }
  CHECK(device_bytes_in_use() == before);
  CHECK(device_bytes_peak() >= before + (4u << 20));
  const std::size_t too_many = gpu().global_bytes;  // floats: 4x the GPU's memory
  CHECK_THROWS_AS(DeviceBuffer<float>{too_many}, ResourceError);
}

TEST_CASE("timer: the median of a copy is positive and below the slowest run") {
  const std::size_t n = std::size_t(64) << 20;
  DeviceBuffer<float> src(n), dst(n);
  CUDA_CHECK(cudaMemset(src.get(), 0, src.bytes()));
  const Timing t = time_gpu([&] { launch_copy(src.get(), dst.get(), n); }, {1, 9});
  CHECK(t.reps == 9);
  CHECK(t.median_ms > 0.0);
  CHECK(t.min_ms <= t.median_ms);
  CHECK(t.median_ms <= t.max_ms);
}

// The copy of a buffer many times the L2 moves exactly the buffer's size from DRAM, and back.
// (The last <= L2-size of dirty lines may still be in the L2 when the range ends; a buffer of 20x
// the L2 keeps that under 5%.)
TEST_CASE("measured IO: a large copy reads and writes the buffer's size, within 5%") {
  const std::size_t bytes = std::max<std::size_t>(std::size_t(1) << 30, 20 * gpu().l2_bytes);
  const std::size_t n = bytes / sizeof(float);
  DeviceBuffer<float> src(n), dst(n);
  CUDA_CHECK(cudaMemset(src.get(), 0, src.bytes()));
  const CounterResult r = measure_traffic([&] { launch_copy(src.get(), dst.get(), n); });
  if (!r.traffic) {
    // Only the machine (no permission, or the profiler busy elsewhere) may stop the counters on a
    // GPU machine; anything else is a bug.
    MESSAGE("counters unavailable: " << r.why_not);
    CHECK_MESSAGE(r.excused, r.why_not);
    return;
  }
  const Traffic& t = *r.traffic;
  const double b = double(bytes);
  MESSAGE("copy of " << b / 1e9 << " GB: DRAM read " << t.dram_read_bytes / b << "x, write "
                     << t.dram_write_bytes / b << "x; L2 read " << t.l2_read_bytes / b
                     << "x, write " << t.l2_write_bytes / b << "x");
  CHECK(t.dram_read_bytes == doctest::Approx(b).epsilon(0.05));
  CHECK(t.dram_write_bytes == doctest::Approx(b).epsilon(0.05));
  CHECK(t.l2_read_bytes == doctest::Approx(b).epsilon(0.05));
  CHECK(t.l2_write_bytes == doctest::Approx(b).epsilon(0.05));
}

// The L2 flush before the range works: a buffer that would fit in the L2 is still read from DRAM.
TEST_CASE("measured IO: after the flush, even a small copy reads its input from DRAM") {
  const std::size_t bytes = gpu().l2_bytes / 4;
  const std::size_t n = bytes / sizeof(float);
  DeviceBuffer<float> src(n), dst(n);
  CUDA_CHECK(cudaMemset(src.get(), 0, src.bytes()));
  launch_copy(src.get(), dst.get(), n);  // src is now in the L2, unless the flush evicts it
  const CounterResult r = measure_traffic([&] { launch_copy(src.get(), dst.get(), n); });
  if (!r.traffic) return;  // reported by the test above
  CHECK(r.traffic->dram_read_bytes == doctest::Approx(double(bytes)).epsilon(0.10));
  CHECK(r.traffic->l2_read_bytes == doctest::Approx(double(bytes)).epsilon(0.05));
}
