// Stage 05 on the CPU: standard attention and FlashAttention-1 through the counting view against
// the float64 reference, their counts against the models, the block sizes, and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "algorithm.hpp"
#include "check.hpp"
#include "reference.hpp"
#include "test_util.hpp"

using namespace attention;

namespace {

struct Run {
  std::vector<float> O, l, m;
  course::IoCount io;
};

Run flash(const Shape& s, Blocks b, const testing::Inputs& in) {
  Run r{std::vector<float>(s.elements(), NAN), std::vector<float>(std::size_t(s.heads()) * s.N, NAN), {}, {}};
  r.m = r.l;
  r.io = flash_v1_counted(s, b, in.Q.data(), in.K.data(), in.V.data(), r.O.data(), r.l.data(), r.m.data());
  return r;
}

void check_output(const Shape& s, const testing::Inputs& in, const std::vector<float>& O) {
  const auto cmp = check_attention(s, in.Q.data(), in.K.data(), in.V.data(), O.data());
  INFO(cmp.summary() << "\n" << cmp.first_mismatches);
  CHECK(cmp.ok());
}

}  // namespace

TEST_CASE("block sizes from the SRAM budget: Bc = ceil(M / 4d), Br = min(Bc, d)") {
  CHECK(flash_v1_blocks(65536, 64).Bc == 256);
  CHECK(flash_v1_blocks(65536, 64).Br == 64);
  CHECK(flash_v1_blocks(4096, 64).Bc == 16);
  CHECK(flash_v1_blocks(4096, 64).Br == 16);
  CHECK(flash_v1_blocks(4097, 64).Bc == 17);  // ceil
  CHECK(flash_v1_blocks(32768, 128).Bc == 64);
  CHECK_THROWS_AS(flash_v1_blocks(255, 64), course::UsageError);  // below 4d: nothing fits
  for (int d : {32, 64, 128})
    for (int Bc : flash_v1_compiled(d)) CHECK(flash_v1_blocks(sram_floats(Bc, d), d).Bc == Bc);
}

TEST_CASE("FlashAttention-1 on the CPU matches float64, causal or not, any N") {
  for (bool causal : {false, true})
    for (int N : {1, 7, 64, 1000})
      for (int Bc : {16, 64, 256}) {
        const Shape s{2, 1, N, 64, causal};
        const auto in = testing::random_inputs(s);
        CAPTURE(s.text());
        CAPTURE(Bc);
        CAPTURE(in.seed);
        const auto r = flash(s, flash_v1_blocks(sram_floats(Bc, 64), 64), in);
        check_output(s, in, r.O);
      }
}

TEST_CASE("FlashAttention-1 on the CPU, causal, Bc not a multiple of Br: rows that see no key of a block") {
  // Bc = 100, Br = 64: key block 1 starts at 100, inside query block 1 (rows 64..127), whose rows
  // 64..99 see none of its keys: their m̃ is −∞ and the block must leave them unchanged.
  for (int N : {300, 1000}) {
    const Shape s{1, 2, N, 64, true};
    const auto in = testing::random_inputs(s);
    CAPTURE(N);
    CAPTURE(in.seed);
    check_output(s, in, flash(s, flash_v1_blocks(sram_floats(100, 64), 64), in).O);
  }
}

TEST_CASE("FlashAttention-1 on the CPU: N = 4097, d = 32 and 128; l and m are the row statistics") {
  for (auto [N, d, Bc] : std::vector<std::array<int, 3>>{{4097, 32, 512}, {300, 128, 16}}) {
    const Shape s{1, 1, N, d, N == 4097};
    const auto in = testing::random_inputs(s);
    CAPTURE(s.text());
    CAPTURE(in.seed);
    const auto r = flash(s, flash_v1_blocks(sram_floats(Bc, d), d), in);
    check_output(s, in, r.O);
    // m is the row max of the scaled scores and l the sum of exp(s − m): check a few rows.
    for (int i : {0, N / 2, N - 1}) {
      double mx = -INFINITY;
      std::vector<double> sc;
      for (int j = 0; j <= (s.causal ? i : N - 1); ++j) {
        double dot = 0;
        for (int k = 0; k < d; ++k) dot += double(in.Q[std::size_t(i) * d + k]) * in.K[std::size_t(j) * d + k];
        sc.push_back(dot / std::sqrt(double(d)));
        mx = std::max(mx, sc.back());
      }
      double sum = 0;
      for (double x : sc) sum += std::exp(x - mx);
      CHECK(r.m[i] == doctest::Approx(mx).epsilon(1e-5));
      CHECK(r.l[i] == doctest::Approx(sum).epsilon(1e-4));
    }
  }
}

TEST_CASE("standard attention on the CPU matches float64, causal or not") {
  for (bool causal : {false, true})
    for (int N : {1, 7, 64, 130}) {
      const Shape s{1, 2, N, 32, causal};
      const auto in = testing::random_inputs(s);
      CAPTURE(s.text());
      CAPTURE(in.seed);
      std::vector<float> O(s.elements(), NAN);
      standard_counted(s, in.Q.data(), in.K.data(), in.V.data(), O.data());
      check_output(s, in, O);
    }
}

TEST_CASE("scores that are all very negative: both algorithms stay exact") {
  const Shape s{1, 1, 200, 64, false};
  const auto in = testing::very_negative_scores(s);
  CAPTURE(in.seed);
  for (int j = 0; j < s.N; ++j) {  // every score of row 0 is below float exp's range
    double dot = 0.0;
    for (int k = 0; k < s.d; ++k) dot += double(in.Q[k]) * in.K[std::size_t(j) * s.d + k];
    CHECK(std::exp(float(dot / 8.0)) == 0.0f);
  }
  check_output(s, in, flash(s, flash_v1_blocks(sram_floats(64, 64), 64), in).O);
  std::vector<float> O(s.elements(), NAN);
  standard_counted(s, in.Q.data(), in.K.data(), in.V.data(), O.data());
  check_output(s, in, O);
}

TEST_CASE("counted IO equals the model exactly when N % 8 == 0") {
  for (bool causal : {false, true}) {
    for (auto [N, d, Bc] : std::vector<std::array<int, 3>>{{64, 64, 16}, {256, 64, 64}, {1024, 64, 256},
                                                            {200, 32, 512}, {136, 128, 32}}) {
      const Shape s{1, 2, N, d, causal};
      const Blocks b = flash_v1_blocks(sram_floats(Bc, d), d);
      CAPTURE(s.text());
      CAPTURE(Bc);
      const auto in = testing::random_inputs(s);
      CHECK(double(flash(s, b, in).io.total()) == flash_v1_model_bytes(s, b));
      if (N <= 256) {
        std::vector<float> O(s.elements());
        const auto io = standard_counted(s, in.Q.data(), in.K.data(), in.V.data(), O.data());
        CHECK(double(io.total()) == standard_model_bytes(s));
      }
    }
  }
}

TEST_CASE("the models: FA-1's traffic falls as 1/Bc, standard's grows as N²") {
  const Shape s{4, 8, 4096, 64, false};
  double previous = INFINITY;
  for (int Bc : {16, 32, 64, 128, 256}) {
    const double bytes = flash_v1_model_bytes(s, flash_v1_blocks(sram_floats(Bc, 64), 64));
    CHECK(bytes < previous);
    previous = bytes;
  }
  // At Bc = 256 (Tc = 16): K and V once, Q 16 times, O with l and m read 15 times and written 16.
  const double Nd = 4.0 * s.heads() * s.N * s.d;
  CHECK(previous == doctest::Approx(Nd * (2 + 16 + 15 * (1 + 2.0 / 64) + 16 * (1 + 2.0 / 64))));
  Shape big = s;
  big.N = 2 * s.N;
  CHECK(standard_model_bytes(big) / standard_model_bytes(s) == doctest::Approx(4.0).epsilon(0.02));
  CHECK(standard_device_bytes(big) > 3.9 * standard_device_bytes(s));
  CHECK(flash_v1_device_bytes(big) == doctest::Approx(2 * flash_v1_device_bytes(s)));
}

TEST_CASE("bad input: unsupported d, empty shapes") {
  CHECK_THROWS_AS(require_supported(Shape{1, 1, 64, 48, false}), course::UsageError);
  CHECK_THROWS_AS(require_supported(Shape{1, 1, 0, 64, false}), course::UsageError);
  CHECK_THROWS_AS(require_supported(Shape{0, 1, 64, 64, false}), course::UsageError);
  CHECK_NOTHROW(require_supported(Shape{1, 1, 1, 32, true}));
}
