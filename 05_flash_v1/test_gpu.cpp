// Stage 05 on the GPU: standard attention and FlashAttention-1 against float64 for every compiled
// block size, causal or not, ragged N; their measured SM<->L2 traffic against the CPU count; and
// bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "testing/sanitizer.hpp"
#include "algorithm.hpp"
#include "check.hpp"
#include "counters.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"
#include "reference.hpp"
#include "test_util.hpp"

using namespace attention;

namespace {

struct Device {
  course::DeviceBuffer<float> Q, K, V, O, l, m, work;
  Device(const Shape& s, const testing::Inputs& in)
      : Q(in.Q), K(in.K), V(in.V), O(s.elements()), l(std::size_t(s.heads()) * s.N),
        m(l.size()), work(standard_workspace_floats(s)) {
    O.poison();  // an element nobody writes fails the comparison
    l.poison();
    m.poison();
    work.poison();
  }
};

void check_output(const Shape& s, const testing::Inputs& in, const std::vector<float>& O) {
  const auto cmp = check_attention(s, in.Q.data(), in.K.data(), in.V.data(), O.data());
  INFO(cmp.summary() << "\n" << cmp.first_mismatches);
  CHECK(cmp.ok());
}

std::vector<float> run_flash(const Shape& s, Blocks b, const testing::Inputs& in) {
  Device dev(s, in);
  launch_flash_v1(s, b, dev.Q.get(), dev.K.get(), dev.V.get(), dev.O.get(), dev.l.get(), dev.m.get());
  return dev.O.download();
}

std::vector<float> run_standard(const Shape& s, const testing::Inputs& in) {
  Device dev(s, in);
  launch_standard(s, dev.Q.get(), dev.K.get(), dev.V.get(), dev.O.get(), dev.work.get());
  return dev.O.download();
}

}  // namespace

TEST_CASE("flash_v1 matches float64 for every compiled block size, causal or not, ragged N") {
  // Under compute-sanitizer (slow): the ragged sizes only.
  const std::vector<int> sizes = course::testing::under_sanitizer() ? std::vector<int>{7, 200}
                                                                     : std::vector<int>{1, 7, 64, 1000};
  for (int d : {32, 64, 128})
    for (int Bc : flash_v1_compiled(d))
      for (bool causal : {false, true})
        for (int N : sizes) {
          const Shape s{2, 2, N, d, causal};
          const auto in = testing::random_inputs(s);
          CAPTURE(s.text());
          CAPTURE(Bc);
          CAPTURE(in.seed);
          check_output(s, in, run_flash(s, flash_v1_blocks(sram_floats(Bc, d), d), in));
        }
}

TEST_CASE("flash_v1 writes the final l and m of every row, as the CPU twin does") {
  for (auto [d, Bc, causal] : std::vector<std::array<int, 3>>{{64, 256, 0}, {32, 64, 1}, {128, 32, 1}}) {
    const Shape s{1, 3, 777, d, causal != 0};
    const Blocks b = flash_v1_blocks(sram_floats(Bc, d), d);
    const auto in = testing::random_inputs(s);
    CAPTURE(s.text());
    CAPTURE(Bc);
    CAPTURE(in.seed);
    Device dev(s, in);
    launch_flash_v1(s, b, dev.Q.get(), dev.K.get(), dev.V.get(), dev.O.get(), dev.l.get(), dev.m.get());
    std::vector<float> O(s.elements()), l(dev.l.size()), m(l.size());
    flash_v1_counted(s, b, in.Q.data(), in.K.data(), in.V.data(), O.data(), l.data(), m.data());
    const auto gl = dev.l.download(), gm = dev.m.download();
    int bad = 0;
    for (std::size_t r = 0; r < l.size(); ++r) {
      const bool ok = std::abs(gm[r] - m[r]) <= 1e-5 * std::max(1.0f, std::abs(m[r])) &&
                      std::abs(gl[r] - l[r]) <= 1e-5 * l[r];
      if (!ok && bad++ < 3) MESSAGE("row " << r << ": l " << gl[r] << " vs " << l[r] << ", m " << gm[r] << " vs " << m[r]);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("standard and flash_v1 at N = 4097, and with all scores very negative") {
  for (bool causal : {false, true}) {
    const Shape s{1, 2, course::testing::under_sanitizer() ? 513 : 4097, 64, causal};
    const auto in = testing::random_inputs(s);
    CAPTURE(s.text());
    CAPTURE(in.seed);
    check_output(s, in, run_standard(s, in));
    check_output(s, in, run_flash(s, flash_v1_blocks(sram_floats(256, 64), 64), in));
  }
  const Shape s{1, 1, 300, 64, false};
  const auto in = testing::very_negative_scores(s);
  CAPTURE(in.seed);
  check_output(s, in, run_standard(s, in));
  check_output(s, in, run_flash(s, flash_v1_blocks(sram_floats(64, 64), 64), in));
}

TEST_CASE("standard attention matches float64, causal or not, ragged N, every d") {
  for (int d : {32, 64, 128})
    for (bool causal : {false, true})
      for (int N : {1, 7, 64, 1000}) {
        const Shape s{1, 3, N, d, causal};
        const auto in = testing::random_inputs(s);
        CAPTURE(s.text());
        CAPTURE(in.seed);
        check_output(s, in, run_standard(s, in));
      }
}

TEST_CASE("bad input: unsupported d, block sizes that are not compiled") {
  course::DeviceBuffer<float> b(64);
  float* p = b.get();
  CHECK_THROWS_AS(launch_flash_v1(Shape{1, 1, 4, 48, false}, {16, 16}, p, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_flash_v1(Shape{1, 1, 4, 64, false}, {17, 17}, p, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_flash_v1(Shape{1, 1, 4, 128, false}, {128, 128}, p, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_standard(Shape{1, 1, 0, 64, false}, p, p, p, p, p), course::UsageError);
}

TEST_CASE("stage 05 kernels: measured SM<->L2 traffic is the counted traffic") {
  if (course::testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  for (auto [N, d, Bc, causal] : std::vector<std::array<int, 4>>{
           {1024, 64, 256, 0}, {1000, 64, 64, 1}, {517, 32, 512, 0}, {640, 128, 64, 1}}) {
    const Shape s{2, 2, N, d, causal != 0};
    const Blocks b = flash_v1_blocks(sram_floats(Bc, d), d);
    CAPTURE(s.text());
    CAPTURE(Bc);
    const auto in = testing::random_inputs(s);
    Device dev(s, in);
    std::vector<float> O(s.elements()), l(dev.l.size()), m(l.size());
    const auto flash = flash_v1_counted(s, b, in.Q.data(), in.K.data(), in.V.data(), O.data(), l.data(), m.data());
    const auto standard = standard_counted(s, in.Q.data(), in.K.data(), in.V.data(), O.data());
    const std::function<void()> launches[] = {
        [&] { launch_flash_v1(s, b, dev.Q.get(), dev.K.get(), dev.V.get(), dev.O.get(), dev.l.get(), dev.m.get()); },
        [&] { launch_standard(s, dev.Q.get(), dev.K.get(), dev.V.get(), dev.O.get(), dev.work.get()); }};
    const course::IoCount counts[] = {flash, standard};
    for (int v = 0; v < 2; ++v) {
      CAPTURE(v);
      const auto r = course::measure_traffic(launches[v]);
      if (!r.traffic) {
        MESSAGE("counters unavailable: " << r.why_not);
        return;
      }
      CHECK(r.traffic->l2_read_bytes == doctest::Approx(double(counts[v].read_bytes)).epsilon(1e-3));
      const double writes = r.traffic->l2_write_bytes, counted = double(counts[v].write_bytes);
      if (v == 1 && N % 4 != 0) {
        // Stage 02's 4-byte path stores each sector of S and O four times, one instruction each;
        // the hardware merges some of those partial writes before they cross to L2.
        CHECK(writes <= 1.01 * counted);
        CHECK(writes >= 4.0 * (2.0 * s.heads() * N * double(N) + double(s.elements())));  // S, P, O
      } else {
        CHECK(writes == doctest::Approx(counted).epsilon(1e-2));
      }
    }
  }
}
