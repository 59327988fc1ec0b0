// Stage 11 on the CPU: the ladder's table; each rung's plan through stage 07's counting view against
// float64 (dQ, dK, dV), fp16 and bf16, causal or not, N on both sides of a block, and its count
// against the model; stage 07's fastest listed beside.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../07_backward/algorithm.hpp"
#include "../07_backward/problem.hpp"
#include "../07_backward/reference.hpp"
#include "../07_backward/test_util.hpp"
#include "check.hpp"
#include "variants.hpp"

using namespace attention;
using course::Dtype;

TEST_CASE("the ladder: rungs in the chapter's order, fp16 and bf16, d = 64 and 128; stage 07's fastest beside") {
  const std::vector<std::string> names = {"wgmma", "tma", "warp_specialized", "bulk_dq", "one_dq", "deterministic", "tiles"};
  REQUIRE(v3_bwd_registry().rungs().size() == names.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto& v = v3_bwd_registry().rungs()[k];
    CHECK(v.name == names[k]);
    CHECK(v.supports(Dtype::fp16, 64));
    CHECK(v.supports(Dtype::bf16, 128));
    CHECK_FALSE(v.supports(Dtype::fp32, 64));
    CHECK_FALSE(v.supports(Dtype::fp16, 32));
    CHECK_FALSE(v.standard);
    CHECK_FALSE(v.plan.deterministic);
    CHECK(bool(v.launch) == bool(COURSE_HAS_HOPPER));  // launchers exist exactly in an sm_90a build
  }
  CHECK(v3_bwd_registry().find("wgmma").plan.kv.Br == 64);
  CHECK(v3_bwd_registry().find("wgmma").plan.kv.Bc == 128);
  CHECK(v3_bwd_registry().find("wgmma").plan.dq_shares == 2);  // one a warpgroup
  const auto& one_dq = v3_bwd_registry().find("one_dq");  // Br by d, one share of dQ
  CHECK(one_dq.plan_for({1, 1, 256, 64, false}).kv.Br == 128);
  CHECK(one_dq.plan_for({1, 1, 256, 128, true}).kv.Br == 64);
  CHECK(one_dq.plan_for({1, 1, 256, 128, true}).dq_shares == 1);
  const auto& tiles = v3_bwd_registry().find("tiles");  // 80 query rows at d = 128 not causal only
  CHECK(tiles.plan_for({1, 1, 256, 128, false}).kv.Br == 80);
  CHECK(tiles.plan_for({1, 1, 256, 128, true}).kv.Br == 64);
  CHECK(tiles.plan_for({1, 1, 256, 64, false}).kv.Br == 128);
  CHECK(tiles.plan_for({1, 1, 256, 128, false}).dq_shares == 1);
  const auto beside = stage07_beside();
  REQUIRE(beside.size() == 2);
  CHECK(beside[0].name == "07_wide");
  CHECK(beside[1].name == "07_split");
  CHECK(beside[0].supports(Dtype::fp16, 64));
  CHECK_FALSE(beside[0].supports(Dtype::fp16, 128));
  CHECK(beside[1].supports(Dtype::bf16, 128));
  CHECK_THROWS_AS(v3_bwd_registry().find("wgmma_fast"), course::UsageError);
}

TEST_CASE("each rung's plan, counted on the CPU: dQ, dK, dV against float64, and the count equals the model") {
  for (const auto& v : v3_bwd_registry().rungs())
    for (Dtype t : v.dtypes)
      for (int d : v.ds)
        for (bool causal : {false, true})
          for (int N : {1, 63, 65, 129, 300}) {
            const Shape s{1, 2, N, d, causal};
            const auto in = make_backward_inputs(s, t, course::fresh_seed());
            CAPTURE(v.name);
            const std::string dtype = course::name(t);
            CAPTURE(dtype);
            CAPTURE(s.text());
            CAPTURE(in.fwd.seed);
            const auto f = attention::testing::cpu_forward(s, t, in);
            std::vector<float> dQ(s.elements(), NAN), dK(s.elements(), NAN), dV(s.elements(), NAN);
            const auto io = flash_backward_counted(s, t, v.plan_for(s), in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(),
                                                   f.O.data(), in.dO.data(), f.L.data(), dQ.data(), dK.data(), dV.data());
            const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
            attention::testing::check_gradients(ref, dQ.data(), dK.data(), dV.data());
            CHECK(double(io.total()) == flash_backward_model_bytes(s, t, v.plan_for(s)));
          }
}
