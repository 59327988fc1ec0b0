// Stage 08 on the CPU: the algorithm is stage 06's (FlashAttention-2), run at stage 08's block sizes
// (Br = Bc = 128) through the counting view: against float64 (O and L), its count against the model,
// for fp16 and bf16, d = 64 and 128, causal or not, N on both sides of a block; the variant table.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../06_flash_v2/algorithm.hpp"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "check.hpp"
#include "variants.hpp"

using namespace attention;
using course::Dtype;

TEST_CASE("FA-2 at stage 08's blocks (128 x 128): float64's O and L, and the count equals the model") {
  for (Dtype t : {Dtype::fp16, Dtype::bf16})
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int N : {1, 7, 127, 128, 129, 300}) {
          const Shape s{1, 2, N, d, causal};
          const Tiles tiles = v3_registry().find("overlap").tiles(s);
          const auto in = make_inputs(s, t, course::fresh_seed());
          CAPTURE(s.text());
          const std::string dtype = course::name(t);
          CAPTURE(dtype);
          CAPTURE(in.seed);
          std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * N, NAN);
          const auto io = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
          const Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
          const auto cO = ref.check_O(O.data()), cL = ref.check_L(L.data());
          INFO("O: " << cO.summary() << "\n" << cO.first_mismatches);
          INFO("L: " << cL.summary() << "\n" << cL.first_mismatches);
          CHECK(cO.ok());
          CHECK(cL.ok());
          CHECK(double(io.total()) == flash_v2_model_bytes(s, t, tiles));
        }
}

TEST_CASE("the ladder: eight rungs in the chapter's order, fp16 and bf16, d = 64 and 128, 128 x 128 blocks "
          "(the last two rungs 192 x 128 at d = 64)") {
  const std::vector<std::string> names = {"wgmma",   "tma",        "warp_specialized", "pingpong",
                                          "overlap", "persistent", "three_warpgroups", "tuned"};
  REQUIRE(v3_registry().rungs().size() == names.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto& v = v3_registry().rungs()[k];
    CHECK(v.name == names[k]);
    CHECK(v.supports(Dtype::fp16, 64));
    CHECK(v.supports(Dtype::bf16, 128));
    CHECK_FALSE(v.supports(Dtype::fp32, 64));
    CHECK_FALSE(v.supports(Dtype::fp16, 32));
    const bool tuned = v.name == "tuned" || v.name == "three_warpgroups";
    for (bool causal : {false, true}) {
      CHECK(v.tiles(Shape{1, 1, 4096, 64, causal}).Br == (tuned ? 192 : 128));  // three consumer warpgroups at d = 64
      CHECK(v.tiles(Shape{1, 1, 4096, 128, causal}).Br == 128);
      CHECK(v.tiles(Shape{1, 1, 4096, 64, causal}).Bc == 128);
      CHECK(v.tiles(Shape{1, 1, 4096, 128, causal}).Bc == 128);
    }
    CHECK(bool(v.launch) == bool(COURSE_HAS_HOPPER));  // launchers exist exactly in an sm_90a build
  }
  CHECK(v3_registry().find("tuned_lpt").name == "tuned_lpt");  // an ablation, found by name
  CHECK(v3_registry().find("tuned_lpt").tiles(Shape{1, 1, 4096, 64}).Br == 192);  // rung 8's tiles
  CHECK(v3_registry().find("persistent").tiles(Shape{1, 1, 4096, 64}).Br == 128);  // rung 6: two consumer warpgroups
  CHECK_THROWS_AS(v3_registry().find("tuned_fast"), course::UsageError);
}
