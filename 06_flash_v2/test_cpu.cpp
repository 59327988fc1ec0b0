// Stage 06 on the CPU: FlashAttention-2 through the counting view against float64 (O and L), in
// fp32, fp16 and bf16, causal or not, any N; its count against the model; the tolerance rule; the
// variant table and bad input.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "check.hpp"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "variants.hpp"

using namespace attention;
using course::Dtype;

namespace {

struct Run {
  std::vector<float> O, L;
  course::IoCount io;
};

Run run_counted(const Shape& s, Dtype t, Tiles tiles, const Inputs& in) {
  Run r{std::vector<float>(s.elements(), NAN), std::vector<float>(std::size_t(s.heads()) * s.N, NAN), {}};
  r.io = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), r.O.data(), r.L.data());
  return r;
}

void check_run(const Shape& s, Dtype t, const Inputs& in, const Run& r) {
  const Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
  const auto O = ref.check_O(r.O.data()), L = ref.check_L(r.L.data());
  INFO("O: " << O.summary() << "\n" << O.first_mismatches);
  INFO("L: " << L.summary() << "\n" << L.first_mismatches);
  CHECK(O.ok());
  CHECK(L.ok());
}

const Dtype kAll[] = {Dtype::fp32, Dtype::fp16, Dtype::bf16};

}  // namespace

TEST_CASE("FlashAttention-2 on the CPU matches float64 (O and L), every dtype, causal or not, any N") {
  for (Dtype t : kAll)
    for (bool causal : {false, true})
      for (int N : {1, 7, 64, 200, 1000})
        for (Tiles tiles : {Tiles{64, 64}, Tiles{128, 64}}) {
          const Shape s{1, 2, N, 64, causal};
          const auto in = make_inputs(s, t, course::fresh_seed());
          CAPTURE(s.text());
          const std::string dtype = course::name(t);
          CAPTURE(dtype);
          CAPTURE(tiles.Br);
          CAPTURE(in.seed);
          check_run(s, t, in, run_counted(s, t, tiles, in));
        }
}

TEST_CASE("FlashAttention-2 on the CPU: d = 32 and 128, and blocks where Bc does not divide Br") {
  for (auto [d, Br, Bc] : std::vector<std::array<int, 3>>{{32, 128, 64}, {128, 64, 64}, {128, 48, 80}})
    for (Dtype t : {Dtype::fp32, Dtype::bf16}) {
      if (d == 32 && t != Dtype::fp32) continue;
      const Shape s{2, 1, 333, d, true};
      const auto in = make_inputs(s, t, course::fresh_seed());
      CAPTURE(s.text());
      const std::string dtype = course::name(t);
          CAPTURE(dtype);
      CAPTURE(Bc);
      CAPTURE(in.seed);
      check_run(s, t, in, run_counted(s, t, Tiles{Br, Bc}, in));
    }
}

TEST_CASE("causal blocks laid from the last row back (stage 08's Tiles::from_end): the same O and L") {
  // N = 333 = 1·192 + 141 and 2·128 + 77: the first block starts before row 0, its padding rows
  // neither read nor written.
  for (auto [d, Br, Bc] : std::vector<std::array<int, 3>>{{64, 192, 128}, {128, 128, 128}, {64, 48, 80}})
    for (Dtype t : {Dtype::fp32, Dtype::fp16}) {
      const Shape s{2, 1, 333, d, true};
      const auto in = make_inputs(s, t, course::fresh_seed());
      CAPTURE(s.text());
      CAPTURE(Br);
      CAPTURE(in.seed);
      check_run(s, t, in, run_counted(s, t, Tiles{Br, Bc, true}, in));
    }
}

TEST_CASE("large logits: Q times 30 overflows a naive exp, FlashAttention-2 stays within tolerance") {
  for (Dtype t : kAll) {
    const Shape s{1, 1, 300, 64, false};
    const auto in = make_inputs(s, t, course::fresh_seed(), 30.0f);
    const std::string dtype = course::name(t);
          CAPTURE(dtype);
    CAPTURE(in.seed);
    double max_score = 0.0;  // the largest scaled score of any row: its exp overflows a float
    for (int i = 0; i < s.N; ++i)  // (one row's alone need not: a row with a small q can stay below)
      for (int j = 0; j < s.N; ++j) {
        double dot = 0.0;
        for (int k = 0; k < s.d; ++k) dot += double(in.Q[std::size_t(i) * s.d + k]) * in.K[std::size_t(j) * s.d + k];
        max_score = std::max(max_score, dot / 8.0);
      }
    CHECK(std::isinf(std::exp(float(max_score))));
    check_run(s, t, in, run_counted(s, t, Tiles{128, 64}, in));
  }
}

TEST_CASE("the tolerance: twice plain attention's error in the dtype, never below its unit roundoff") {
  const Shape s{1, 1, 512, 64, false};
  for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
    const auto in = make_inputs(s, t, course::fresh_seed());
    const std::string dtype = course::name(t);
          CAPTURE(dtype);
    CAPTURE(in.seed);
    const Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
    CHECK(ref.plain_error_O() > 0.0);
    CHECK(ref.plain_error_O() < 0.05);
    CHECK(ref.tolerance_O() == doctest::Approx(std::max(2 * ref.plain_error_O(), course::unit_roundoff(t))));
    CHECK(ref.tolerance_L() >= course::unit_roundoff(t));
    // The run's own result passes; the same with one value off by 3 tolerances, or NaN, fails.
    auto r = run_counted(s, t, Tiles{128, 64}, in);
    CHECK(ref.check_O(r.O.data()).ok());
    const float saved = r.O[777];
    r.O[777] += float(3.0 * ref.tolerance_O() * std::max(1.0f, std::abs(saved)));
    CHECK_FALSE(ref.check_O(r.O.data()).ok());
    r.O[777] = NAN;
    CHECK_FALSE(ref.check_O(r.O.data()).ok());
    r.O[777] = saved;
    r.L[100] = NAN;
    CHECK_FALSE(ref.check_L(r.L.data()).ok());
  }
  // bf16 keeps 8 bits, fp16 11: plain bf16 attention is the less accurate.
  const auto in16 = make_inputs(s, Dtype::fp16, 5), inbf = make_inputs(s, Dtype::bf16, 5);
  CHECK(Reference(s, Dtype::bf16, inbf.Q.data(), inbf.K.data(), inbf.V.data()).plain_error_O() >
        Reference(s, Dtype::fp16, in16.Q.data(), in16.K.data(), in16.V.data()).plain_error_O());
}

TEST_CASE("counted IO equals the model exactly, any N, every dtype, causal or not") {
  for (Dtype t : kAll)
    for (bool causal : {false, true})
      for (auto [N, d, Br, Bc] : std::vector<std::array<int, 4>>{
               {64, 64, 64, 64}, {1000, 64, 128, 64}, {517, 128, 64, 64}, {300, 32, 128, 64}, {129, 64, 128, 64}}) {
        if (d == 32 && t != Dtype::fp32) continue;
        const Shape s{2, 2, N, d, causal};
        CAPTURE(s.text());
        const std::string dtype = course::name(t);
          CAPTURE(dtype);
        CAPTURE(Br);
        const auto in = make_inputs(s, t, course::fresh_seed());
        for (bool from_end : {false, true}) {
          CAPTURE(from_end);
          const Tiles tiles{Br, Bc, from_end};
          CHECK(double(run_counted(s, t, tiles, in).io.total()) == flash_v2_model_bytes(s, t, tiles));
        }
      }
}

TEST_CASE("the model: K and V once per query block, so twice the rows per block halves that term") {
  const Shape s{4, 8, 4096, 64, false};
  const double e = 2.0, Nd = double(s.heads()) * s.N * s.d;
  const double small = flash_v2_model_bytes(s, Dtype::fp16, {64, 64});
  const double large = flash_v2_model_bytes(s, Dtype::fp16, {128, 64});
  // Q and O once (2·N·d), K and V Tr times (2·Tr·N·d), L once (4 bytes a row).
  CHECK(small == doctest::Approx(e * Nd * (2 + 2 * 64) + 4.0 * s.heads() * s.N));
  CHECK(large == doctest::Approx(e * Nd * (2 + 2 * 32) + 4.0 * s.heads() * s.N));
  CHECK(flash_v2_model_bytes(s, Dtype::fp32, {64, 64}) == doctest::Approx(2 * small - 4.0 * s.heads() * s.N));
  Shape causal = s;
  causal.causal = true;  // about half the key blocks
  const double ratio = flash_v2_model_bytes(causal, Dtype::fp16, {128, 64}) / large;
  CHECK(ratio > 0.5);
  CHECK(ratio < 0.54);  // (2 + 2·32·(33/64)) / 66 = 0.530
  CHECK(flash_v2_device_bytes(s, Dtype::fp16) == doctest::Approx(4 * e * Nd + 4.0 * s.heads() * s.N));
}

TEST_CASE("key blocks: all of them, or causal only up to the block's last row") {
  const Shape s{1, 1, 1000, 64, true};
  CHECK(key_blocks(s, {128, 64}, 0) == 2);   // rows 0..127: keys 0..127
  CHECK(key_blocks(s, {128, 64}, 7) == 16);  // rows 896..999: keys up to 999, in 16 blocks of 64
  CHECK(key_blocks(s, {64, 64}, 3) == 4);
  CHECK(key_blocks(s, {48, 80}, 1) == 2);  // rows 48..95: keys up to 95, blocks 0 and 1
  Shape full = s;
  full.causal = false;
  CHECK(key_blocks(full, {128, 64}, 0) == 16);
  // Laid from the end: N = 1000 = 7·128 + 104, so block 0 is rows −24..103 and block 7 rows 872..999.
  CHECK(query_row0(s, {128, 64, true}, 0) == -24);
  CHECK(query_row0(s, {128, 64, true}, 7) == 872);
  CHECK(key_blocks(s, {128, 64, true}, 0) == 2);   // keys up to 103
  CHECK(key_blocks(s, {128, 64, true}, 7) == 16);  // keys up to 999
  CHECK(key_blocks(s, {192, 128, true}, 0) == 1);  // rows −152..39: keys up to 39
  CHECK(query_row0(full, {128, 64, true}, 0) == 0);  // not causal: laid from the start as always
  // The short block first costs fewer key blocks in all: 1 + 3 + ... against 2 + 4 + ...
  int standard = 0, from_end = 0;
  for (int i = 0; i < query_blocks(s, {192, 128}); ++i)
    standard += key_blocks(s, {192, 128}, i), from_end += key_blocks(s, {192, 128, true}, i);
  CHECK(from_end < standard);
}

TEST_CASE("the variants: names, dtypes, head dimensions; bad input is refused with a message") {
  CHECK(v2_registry().rungs().size() == 10);
  CHECK(v2_registry().find("skip_mask").tiles(Shape{1, 1, 1024, 64}).Br == 64);  // rung 4's steps keep rung 3's tiles until 4e
  CHECK(v2_registry().find("tuned").tiles(Shape{1, 1, 1024, 128}).Br == 128);
  CHECK(v2_registry().find("tuned").supports(Dtype::bf16, 128));
  CHECK(v2_registry().find("lazy_rescale").supports(Dtype::fp16, 64));
  CHECK_FALSE(v2_registry().find("tuned").supports(Dtype::fp32, 64));
  CHECK_FALSE(v2_registry().find("mma").supports(Dtype::fp16, 32));
  CHECK(v2_registry().find("flash_v2").supports(Dtype::fp32, 32));
  CHECK_THROWS_AS(v2_registry().find("fa3"), course::UsageError);
  CHECK_THROWS_AS(require_supported(v2_registry().find("tuned"), Dtype::fp16, 32), course::UsageError);
  CHECK_THROWS_AS(require_supported(Shape{1, 1, 0, 64, false}), course::UsageError);
  CHECK_THROWS_AS(course::parse_dtype("fp8"), course::UsageError);
  const Shape s{1, 1, 8, 64, false};
  std::vector<float> x(s.elements(), 1.0f), L(8);
  CHECK_THROWS_AS(flash_v2_counted(s, Dtype::fp16, Tiles{0, 64}, x.data(), x.data(), x.data(), x.data(), L.data()),
                  course::UsageError);
}

TEST_CASE("the dtypes that run with d: what the user asked for must run, or the options are refused") {
  std::vector<Takes> takes = {{"flash_v1", {Dtype::fp32}, {32, 64, 128}}};
  for (const Takes& v : takes_of(v2_registry().rungs())) takes.push_back(v);
  const std::vector<Dtype> all = {Dtype::fp32, Dtype::fp16, Dtype::bf16};
  // The default dtypes: those that run at d.
  CHECK(dtypes_to_run(takes, {}, all, false, 64) == all);
  CHECK(dtypes_to_run(takes, {}, all, false, 32) == std::vector<Dtype>{Dtype::fp32});
  CHECK(dtypes_to_run(takes, {"tuned"}, all, false, 64) == std::vector<Dtype>{Dtype::fp16, Dtype::bf16});
  // --dtype fp16 --d 32: nothing runs it; the message says what runs.
  try {
    dtypes_to_run(takes, {}, {Dtype::fp16}, true, 32);
    FAIL("no error");
  } catch (const course::UsageError& e) {
    const std::string text = e.what();
    CHECK(text.find("--dtype fp16 with --d 32") != std::string::npos);
    CHECK(text.find("fp16 with d = 64 or 128") != std::string::npos);
    CHECK(text.find("fp32 with d = 32, 64 or 128") != std::string::npos);
  }
  CHECK_THROWS_AS(dtypes_to_run(takes, {}, {Dtype::fp32, Dtype::fp16}, true, 32), course::UsageError);
  // A variant named with --variants that runs none of the dtypes; a selection that runs nothing.
  CHECK_THROWS_AS(dtypes_to_run(takes, {"flash_v2", "tuned"}, {Dtype::fp32}, true, 64), course::UsageError);
  CHECK_THROWS_AS(dtypes_to_run(takes, {"tuned"}, all, false, 32), course::UsageError);
}
