// Stage 04 on the GPU: the online and on-chip kernels and attention_row against float64, their
// measured traffic against the CPU count, and bad input.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "../03_safe_softmax/test_util.hpp"
#include "../03_safe_softmax/test_util_gpu.hpp"
#include "algorithm.hpp"
#include "attention_reference.hpp"
#include "check.hpp"
#include "counters.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"

using namespace softmax;

namespace {

using testing::check_traffic;
using testing::run_on_gpu;

}  // namespace

TEST_CASE("online and on-chip kernels match the float64 reference on every shape") {
  for (const auto& s : testing::shapes()) {
    CAPTURE(s.R);
    CAPTURE(s.C);
    const auto X = testing::logits(s);
    testing::check_softmax(X, run_on_gpu(launch_online, X, s.R, s.C), s.R, s.C);
    if (s.C <= kOnChipMaxCols) {
      testing::check_softmax(X, run_on_gpu(launch_on_chip, X, s.R, s.C), s.R, s.C);
    }
  }
  // on_chip's longest rows, ragged ones, and a row for each of its kernels: a warp or a block per
  // row, 16-byte or 4-byte loads, 8, 16 or 32 values a thread.
  for (int C : {8192, 8191, 4097, 33, 128, 500, 301, 1024, 1023, 2048, 1025, 3001, 4096}) {
    CAPTURE(C);
    const auto X = testing::logits({7, C});
    testing::check_softmax(X, run_on_gpu(launch_on_chip, X, 7, C), 7, C);
  }
}

TEST_CASE("online and on-chip kernels: special rows (masked, one-hot, equal, NaN, +inf), large logits") {
  for (int C : {1000, 5000, 20000}) {  // on_chip's warp path, its block path; online, 2 segments
    const auto X = testing::special_rows(C);
    testing::check_softmax(X, run_on_gpu(launch_online, X, 5, C), 5, C);
    if (C <= kOnChipMaxCols) testing::check_softmax(X, run_on_gpu(launch_on_chip, X, 5, C), 5, C);
  }
  const auto big = testing::logits({4, 3000}, 80.0f, 120.0f);
  testing::check_softmax(big, run_on_gpu(launch_online, big, 4, 3000), 4, 3000);
  testing::check_softmax(big, run_on_gpu(launch_on_chip, big, 4, 3000), 4, 3000);
}

TEST_CASE("bad input: empty matrices, rows too long for on_chip, unsupported d") {
  course::DeviceBuffer<float> d(8);
  CHECK_THROWS_AS(launch_online(d.get(), d.get(), d.get(), 0, 4), course::UsageError);
  CHECK_THROWS_AS(launch_on_chip(d.get(), d.get(), d.get(), 1, kOnChipMaxCols + 1), course::UsageError);
  CHECK_THROWS_AS(launch_attention_row(d.get(), d.get(), d.get(), d.get(), 1, 1, 48), course::UsageError);
  CHECK_THROWS_AS(launch_attention_row(d.get(), d.get(), d.get(), d.get(), 0, 1, 64), course::UsageError);
}

TEST_CASE("attention_row matches the float64 reference") {
  for (int d : {32, 64, 128}) {
    for (auto [Nq, N] : std::vector<std::pair<int, int>>{{1, 1}, {13, 77}, {1000, 1031}}) {
      if (testing::under_sanitizer() && Nq > 100) continue;
      CAPTURE(d);
      CAPTURE(Nq);
      CAPTURE(N);
      const std::uint64_t seed = course::fresh_seed();
      CAPTURE(seed);
      const auto Q = course::random_uniform(std::size_t(Nq) * d, seed);
      const auto K = course::random_uniform(std::size_t(N) * d, seed + 1);
      const auto V = course::random_uniform(std::size_t(N) * d, seed + 2);
      course::DeviceBuffer<float> dQ(Q), dK(K), dV(V), dO(Q.size());
      dO.poison();
      launch_attention_row(dQ.get(), dK.get(), dV.get(), dO.get(), Nq, N, d);
      const auto O = dO.download();
      const auto ref = attention_reference(Q.data(), K.data(), V.data(), Nq, N, d);
      const auto cmp = course::compare(O.data(), ref.data(), ref.size(),
                                       course::fp32_sum_tolerance(std::size_t(N) + d), d);
      INFO(cmp.summary() << "\n" << cmp.first_mismatches);
      CHECK(cmp.ok());
    }
  }
}

TEST_CASE("stage 04 kernels: measured SM<->L2 traffic is the counted traffic") {
  if (testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  // online: one segment, many; on_chip: warp path (1000, 999: 4-byte), block path (4100, 4099).
  for (const testing::Shape s : {testing::Shape{256, 16384}, {8, 200003}, {1000, 1000}, {300, 999},
                                 {300, 4100}, {300, 4099}}) {
    CAPTURE(s.R);
    CAPTURE(s.C);
    const auto X = testing::logits(s);
    std::vector<float> Y(X.size());
    course::DeviceBuffer<float> dX(X), dY(X.size()), dW(workspace_floats(s.R, s.C));
    const double out = 4.0 * s.R * s.C;
    check_traffic([&] { launch_online(dX.get(), dY.get(), dW.get(), s.R, s.C); },
                  online_counted(X.data(), Y.data(), s.R, s.C), out);
    if (s.C <= kOnChipMaxCols) {
      check_traffic([&] { launch_on_chip(dX.get(), dY.get(), dW.get(), s.R, s.C); },
                    on_chip_counted(X.data(), Y.data(), s.R, s.C), out);
    }
  }
  const int Nq = 100, N = 3000, d = 64;
  const auto Q = course::random_uniform(std::size_t(Nq) * d, course::fresh_seed());
  const auto K = course::random_uniform(std::size_t(N) * d, course::fresh_seed());
  std::vector<float> O(Q.size());
  course::DeviceBuffer<float> dQ(Q), dK(K), dV(K), dO(Q.size());
  check_traffic([&] { launch_attention_row(dQ.get(), dK.get(), dV.get(), dO.get(), Nq, N, d); },
                attention_row_counted(Q.data(), K.data(), K.data(), O.data(), Nq, N, d), 4.0 * Nq * d);
}
