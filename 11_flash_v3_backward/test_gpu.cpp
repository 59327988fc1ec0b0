// Stage 11 on the GPU (a Hopper; the tests skip on any other GPU): every rung, fp16 and bf16, d = 64
// and 128, causal or not, N = 1 and N on both sides of a block (64 queries, 128 keys), against
// float64 (dQ, dK, dV) with stage 07's rule; large logits; query rows past N with garbage past the
// buffers' ends; bad input.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../07_backward/device_run.hpp"
#include "../07_backward/problem.hpp"
#include "../07_backward/reference.hpp"
#include "../07_backward/test_util.hpp"
#include "check.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"
#include "testing/sanitizer.hpp"
#include "variants.hpp"

using namespace attention;
using attention::testing::check_gradients;
using course::Dtype;

namespace {

// The run of one variant on one problem: stage 06's forward for O and L, outputs poisoned, the
// backward; the gradients against float64. tail: elements of garbage past every buffer's end,
// which must survive.
void check_run(const BwdVariant& v, const Shape& s, Dtype t, const BackwardInputs& in, std::size_t tail = 0) {
  BackwardDeviceRun dev(s, t, in, v, tail);
  dev.forward(s);
  dev.poison();  // an element nobody writes fails the comparison
  v.launch(s, t, dev.args());
  const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
  check_gradients(ref, dev.dQ().data(), dev.dK().data(), dev.dV().data());
  if (tail) {
    std::string changed;
    INFO("written past the end of: " << changed);
    CHECK(dev.tail_untouched(changed));
  }
}

}  // namespace

TEST_CASE("every rung matches float64 (dQ, dK, dV): fp16 and bf16, d = 64 and 128, causal or not, any N") {
  const bool sanitizer = course::testing::under_sanitizer();
  const std::vector<int> sizes =
      sanitizer ? std::vector<int>{1, 77, 200} : std::vector<int>{1, 7, 63, 64, 65, 80, 128, 129, 161, 300, 640, 1000};
  for (const auto& v : v3_bwd_registry().rungs())
    for (Dtype t : v.dtypes)
      for (int d : v.ds)
        for (bool causal : {false, true})
          for (int N : sizes) {
            const Shape s{2, 3, N, d, causal};
            const auto in = make_backward_inputs(s, t, course::fresh_seed());
            CAPTURE(v.name);
            const std::string dtype = course::name(t);
            CAPTURE(dtype);
            CAPTURE(s.text());
            CAPTURE(in.fwd.seed);
            check_run(v, s, t, in);
          }
}

TEST_CASE("every rung: large logits (Q times 30), N = 2049 with many heads, rows past N with garbage beyond (causal or not)") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (const auto& v : v3_bwd_registry().rungs())
    for (Dtype t : v.dtypes)
      for (int d : v.ds) {
        const Shape big{1, sanitizer ? 2 : 6, sanitizer ? 513 : 2049, d, true};
        const Shape loud{1, 2, 700, d, false};
        const Shape ragged{1, 3, 77, d, true};
        const Shape ragged_full{1, 3, sanitizer ? 161 : 641, d, false};  // rung 7's 80-row tiles take these
        for (const auto& [s, q_scale, tail] : {std::make_tuple(big, 1.0f, std::size_t(0)),
                                               std::make_tuple(loud, 30.0f, std::size_t(0)),
                                               std::make_tuple(ragged, 1.0f, std::size_t(64 * 128)),
                                               std::make_tuple(ragged_full, 1.0f, std::size_t(64 * 128))}) {
          const auto in = make_backward_inputs(s, t, course::fresh_seed(), q_scale);
          CAPTURE(v.name);
          const std::string dtype = course::name(t);
          CAPTURE(dtype);
          CAPTURE(s.text());
          CAPTURE(q_scale);
          CAPTURE(in.fwd.seed);
          check_run(v, s, t, in, tail);
        }
      }
}

TEST_CASE("bad input: dtypes and head dimensions a rung does not take, empty shapes, no dQacc") {
  course::DeviceBuffer<float> b(1024);
  float* p = b.get();
  const BackwardArgs a{p, p, p, p, p, p, p, p, p, p, p};
  BackwardArgs no_acc = a;
  no_acc.dQacc = nullptr;
  CHECK_THROWS_AS(launch_fa3_bwd_wgmma(Shape{1, 1, 4, 64, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_wgmma(Shape{1, 1, 4, 32, false}, Dtype::fp16, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_wgmma(Shape{1, 1, 0, 64, false}, Dtype::bf16, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_wgmma(Shape{1, 1, 4, 64, false}, Dtype::fp16, no_acc), course::UsageError);
  CHECK_THROWS_AS(v3_bwd_registry().find("wgmma").launch(Shape{1, 1, 4, 64, false}, Dtype::fp16, no_acc),
                  course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_tma(Shape{1, 1, 4, 64, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_tma(Shape{1, 1, 4, 32, false}, Dtype::fp16, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_tma(Shape{1, 1, 4, 64, false}, Dtype::fp16, no_acc), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_warp_specialized(Shape{1, 1, 4, 64, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_warp_specialized(Shape{1, 1, 4, 128, false}, Dtype::fp16, no_acc), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_warp_specialized(Shape{1, 1, 4, 96, false}, Dtype::bf16, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_bulk_dq(Shape{1, 1, 4, 64, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_bulk_dq(Shape{1, 1, 4, 64, false}, Dtype::bf16, no_acc), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_one_dq(Shape{1, 1, 4, 64, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_one_dq(Shape{1, 1, 4, 128, false}, Dtype::fp16, no_acc), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_deterministic(Shape{1, 1, 4, 64, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_deterministic(Shape{1, 1, 4, 64, false}, Dtype::bf16, no_acc), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_tiles(Shape{1, 1, 4, 128, false}, Dtype::fp32, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_tiles(Shape{1, 1, 4, 96, false}, Dtype::fp16, a), course::UsageError);
  CHECK_THROWS_AS(launch_fa3_bwd_tiles(Shape{1, 1, 4, 128, false}, Dtype::bf16, no_acc), course::UsageError);
}

TEST_CASE("deterministic: dQ, dK, dV bit for bit the same in repeated runs (and how often one_dq's dQ differs)") {
  const bool sanitizer = course::testing::under_sanitizer();
  const BwdVariant& v = v3_bwd_registry().find("deterministic");
  for (Dtype t : v.dtypes)
    for (int d : v.ds)
      for (bool causal : {false, true}) {
        // Many key blocks add into each query block of dQ: the order matters to its float sum.
        const Shape s{1, sanitizer ? 2 : 4, sanitizer ? 700 : 3000, d, causal};
        const auto in = make_backward_inputs(s, t, course::fresh_seed());
        CAPTURE(s.text());
        CAPTURE(in.fwd.seed);
        BackwardDeviceRun dev(s, t, in, v);
        dev.forward(s);
        std::vector<std::uint16_t> first[3];
        for (int run = 0; run < (sanitizer ? 2 : 4); ++run) {
          dev.poison();
          v.launch(s, t, dev.args());
          const std::vector<std::uint16_t> now[3] = {dev.dQh.download(), dev.dKh.download(), dev.dVh.download()};
          for (int g = 0; g < 3; ++g) {
            if (run == 0) first[g] = now[g];
            CHECK(now[g] == first[g]);
          }
        }
        const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
        check_gradients(ref, dev.dQ().data(), dev.dK().data(), dev.dV().data());
        // The same runs of one_dq, whose additions come in the order the blocks reach them: the
        // count of runs whose dQ differs from its first (not asserted: it may happen to be 0).
        const BwdVariant& racing = v3_bwd_registry().find("one_dq");
        std::vector<std::uint16_t> racing_first;
        int differ = 0;
        for (int run = 0; run < (sanitizer ? 2 : 4); ++run) {
          racing.launch(s, t, dev.args());
          const auto now = dev.dQh.download();
          if (run == 0) racing_first = now;
          differ += now != racing_first;
        }
        MESSAGE(s.text() << " " << std::string(course::name(t)) << ": one_dq's dQ differed from its first run in " << differ << " of "
                         << (sanitizer ? 1 : 3) << " runs");
      }
}
