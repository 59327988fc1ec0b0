// Stage 06 on the GPU: every variant, every dtype and d it takes, causal or not, ragged N and
// N = 1, against float64 (O and L); large logits; measured SM<->L2 traffic against the CPU count;
// bad input.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "testing/sanitizer.hpp"
#include "algorithm.hpp"
#include "check.hpp"
#include "counters.hpp"
#include "attention/device_run.hpp"
#include "kernels.cuh"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "testing/attention_gpu.hpp"
#include "variants.hpp"

using namespace attention;
using course::Dtype;
using attention::testing::check_result;
using attention::testing::run_gpu;

TEST_CASE("every variant matches float64 (O and L), every dtype and d it takes, causal or not, ragged N") {
  // Under compute-sanitizer (slow): fewer sizes, still ragged ones and N = 1.
  const bool sanitizer = course::testing::under_sanitizer();
  const std::vector<int> sizes = sanitizer ? std::vector<int>{1, 77, 200} : std::vector<int>{1, 7, 64, 130, 1000};
  for (const auto& v : v2_registry().rungs())
    for (Dtype t : v.dtypes)
      for (int d : v.ds)
        for (bool causal : {false, true})
          for (int N : sizes) {
            const Shape s{2, 3, N, d, causal};
            const auto in = make_inputs(s, t, course::fresh_seed());
            CAPTURE(v.name);
            const std::string dtype = course::name(t);
            CAPTURE(dtype);
            CAPTURE(s.text());
            CAPTURE(in.seed);
            check_result(s, t, in, run_gpu(v, s, t, in));
          }
}

TEST_CASE("large logits (Q times 30), and N = 4097 with many heads") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (const auto& v : v2_registry().rungs())
    for (Dtype t : v.dtypes) {
      const Shape big{1, sanitizer ? 2 : 5, sanitizer ? 513 : 4097, v.ds.back(), true};
      // Large logits at the smallest and the largest d: row maxima jump by far more than 2^8 between
      // key blocks, so lazy_rescale's skipped and taken rescales both happen.
      const Shape loud{1, 2, 700, v.ds.front(), false}, loud_wide{1, 2, 700, v.ds.back(), false};
      for (const auto& [s, q_scale] : {std::make_pair(big, 1.0f), std::make_pair(loud, 30.0f),
                                       std::make_pair(loud_wide, 30.0f)}) {
        const auto in = make_inputs(s, t, course::fresh_seed(), q_scale);
        CAPTURE(v.name);
        const std::string dtype = course::name(t);
            CAPTURE(dtype);
        CAPTURE(s.text());
        CAPTURE(q_scale);
        CAPTURE(in.seed);
        check_result(s, t, in, run_gpu(v, s, t, in));
      }
    }
}

TEST_CASE("bad input: dtypes and head dimensions a kernel does not take, empty shapes") {
  course::DeviceBuffer<float> b(1024);
  float* p = b.get();
  CHECK_THROWS_AS(launch_tc_tuned(Shape{1, 1, 4, 64, false}, Dtype::fp32, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_tc_mma(Shape{1, 1, 4, 32, false}, Dtype::fp16, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_tc_cp_async(Shape{1, 1, 0, 64, false}, Dtype::bf16, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_tc_exp2(Shape{1, 1, 4, 64, false}, Dtype::fp32, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_tc_heaviest_first(Shape{1, 1, 4, 32, true}, Dtype::fp16, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_flash_v2_fp32(Shape{1, 1, 4, 48, false}, p, p, p, p, p), course::UsageError);
  CHECK_THROWS_AS(launch_flash_v2_fp32(Shape{0, 1, 4, 64, false}, p, p, p, p, p), course::UsageError);
}

TEST_CASE("stage 06 kernels: measured SM<->L2 traffic is the counted traffic") {
  if (course::testing::under_sanitizer()) return;  // the profiler and the sanitizer exclude each other
  for (const auto& v : v2_registry().rungs())
    for (auto [N, d, causal] : std::vector<std::array<int, 3>>{{1024, 64, 0}, {1000, 128, 1}, {517, 64, 1}}) {
      const Dtype t = v.dtypes.front();
      if (!v.supports(t, d)) continue;
      const Shape s{2, 2, N, d, causal != 0};
      const Tiles tiles = v.tiles(s);
      CAPTURE(v.name);
      CAPTURE(s.text());
      const auto in = make_inputs(s, t, course::fresh_seed());
      std::vector<float> O(s.elements()), L(std::size_t(s.heads()) * N);
      const auto counted = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
      DeviceRun dev(s, t, in);
      const auto r = course::measure_traffic([&] { v.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get()); });
      if (!r.traffic) {
        MESSAGE("counters unavailable: " << r.why_not);
        return;
      }
      MESSAGE(v.name << " " << s.text() << ": measured / counted SM<->L2 reads "
                     << r.traffic->l2_read_bytes / double(counted.read_bytes) << ", writes "
                     << r.traffic->l2_write_bytes / double(counted.write_bytes));
      // L's stretches straddle sectors differently when N % 8 != 0 (a few bytes a head).
      const double eps = N % 8 == 0 ? 1e-3 : 1e-2;
      CHECK(r.traffic->l2_read_bytes == doctest::Approx(double(counted.read_bytes)).epsilon(eps));
      CHECK(r.traffic->l2_write_bytes == doctest::Approx(double(counted.write_bytes)).epsilon(eps));
    }
}
