// Stage 09 on the CPU: the e4m3 format, the Hadamard transform, the quantisation schemes, the layout
// of Vᵀ the kernels read, the accuracy of plain FP8 attention against float64 (the bound each
// kernel is held to on the GPU is twice that), the CPU count of the kernels' tiles against the model
// and the reference, and the registry.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "accuracy.hpp"
#include "algorithm.hpp"
#include "check.hpp"
#include "fp8.hpp"
#include "inputs.hpp"
#include "variants.hpp"

using namespace attention;
using namespace attention::fp8;
using course::Dtype;

TEST_CASE("e4m3: every byte decodes and encodes back; known values; ties to even; saturation; NaN") {
  for (int b = 0; b < 256; ++b) {
    const float v = from_e4m3(std::uint8_t(b));
    if ((b & 0x7F) == 0x7F) {
      CHECK(std::isnan(v));
      continue;
    }
    CAPTURE(b);
    CHECK(to_e4m3(v) == (b == 0x80 ? 0x80 : b));  // −0 stays −0
  }
  CHECK(from_e4m3(0x7E) == 448.0f);
  CHECK(from_e4m3(0x38) == 1.0f);
  CHECK(from_e4m3(0x01) == std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK(from_e4m3(0x08) == std::ldexp(1.0f, -6));  // the smallest normal
  CHECK(to_e4m3(1.0625f) == 0x38);                  // halfway between 1 and 1.125: to the even 1
  CHECK(to_e4m3(1.1875f) == 0x3A);                  // halfway between 1.125 and 1.25: to the even 1.25
  CHECK(to_e4m3(-3.0f) == 0xC4);
  CHECK(to_e4m3(464.0f) == 0x7E);  // past 448: saturates (satfinite), never NaN
  CHECK(to_e4m3(1e30f) == 0x7E);
  CHECK(to_e4m3(-INFINITY) == 0xFE);
  CHECK(to_e4m3(NAN) == 0x7F);
  CHECK(to_e4m3(std::ldexp(1.0f, -11)) == 0x00);  // a quarter of the smallest subnormal: 0
}

TEST_CASE("e4m3: the rounding error is at most u = 2^-4 relative in the normal range, 2^-10 below it") {
  const auto x = course::random_uniform(200000, course::fresh_seed(), -500.0f, 500.0f);
  for (float v : x) {
    for (float w : {v, v / 4096.0f}) {  // normals and, scaled down, subnormals
      const double q = from_e4m3(to_e4m3(w)), a = std::fabs(double(w));
      CAPTURE(w);
      if (a > 448.0) CHECK(std::fabs(q) == 448.0);
      else if (a >= std::ldexp(1.0, -6)) CHECK(std::fabs(q - w) <= kUnitRoundoff * a);
      else CHECK(std::fabs(q - w) <= std::ldexp(1.0, -10));
    }
  }
}

TEST_CASE("P̃ without the exponential unit: lin_e4m3 is 2^x within ±3.1% before e4m3, exact at integers, 0 below") {
  // x = S·c − base with c = 1, base = 0: x is S itself.
  const float a = lin_a(1.0f), b = lin_b(0.0f);
  // The linear mantissa, centred by δ: 1 + f for 2^f is 0 to 6.1% high, times 2^(−44/1024) = 0.971, so within
  // [−2.95%, +3.04%] (and the rounding of y to an integer, half of 1/1024 of a binade) while the fp16 value is normal
  // (x ≥ −14 + 44/1024; below it fp16's subnormals are linear in v, not in log v, and P̃ is 2^-22 of the row's max).
  double lo = 1.0, hi = -1.0, sum = 0.0;
  int n = 0;
  for (double x = -13.0; x <= 8.0; x += 1.0 / 4096.0, ++n) {
    const double rel = lin_fp16(float(x), a, b) / std::exp2(x) - 1.0;
    lo = std::min(lo, rel), hi = std::max(hi, rel), sum += rel;
    // Rounded to e4m3 (its own error at most u = 2^-4 in the normal range, 2^-6 up): within (1.031)(1 + u) − 1.
    if (x >= -6.0)
      REQUIRE(std::fabs(from_e4m3(lin_e4m3(float(x), a, b)) / std::exp2(x) - 1.0) <=
              (1.0 + kLinMaxRelError) * (1.0 + kUnitRoundoff) - 1.0);
  }
  CHECK(lo >= -kLinMaxRelError);
  CHECK(hi <= kLinMaxRelError);
  CHECK(lo < -0.028);  // the bound is met, not loose: the error reaches it on both sides
  CHECK(hi > 0.029);
  // Centred for the extremes, not the mean: on average a P̃ is 1% high, which O = Σ P̃·v / Σ P̃ divides away.
  CHECK(sum / n > 0.0095);
  CHECK(sum / n < 0.0107);
  // At an integer x (where the row's max puts its largest P̃: x − m + 8 = 8), 2^x exactly once in e4m3.
  for (int k = -9; k <= 8; ++k) {
    CAPTURE(k);
    CHECK(from_e4m3(lin_e4m3(float(k), a, b)) == std::ldexp(1.0f, k));
  }
  // Below 2^-15 (and the mask's −∞, and NaN, as FFMA.SAT clamps them): 0. Above fp16's range: e4m3's 448.
  CHECK(lin_e4m3(-16.0f, a, b) == 0);
  CHECK(lin_e4m3(-INFINITY, a, b) == 0);
  CHECK(lin_e4m3(NAN, a, b) == 0);
  CHECK(from_e4m3(lin_e4m3(20.0f, a, b)) == kE4m3Max);
  // The multipliers fold a block's c and the row's base: S·c − base at S = 3, c = 0.5, base = −2.5 is x = 4.
  CHECK(from_e4m3(lin_e4m3(3.0f, lin_a(0.5f), lin_b(-2.5f))) == 16.0f);
}

TEST_CASE("fwht: H·H = d·I, and incoherent processing leaves Q·Kᵀ unchanged") {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  for (int d : {64, 128}) {
    auto x = course::random_uniform(d, seed, -1.0f, 2.0f);
    auto y = x;
    fwht(y.data(), d);
    fwht(y.data(), d);
    // Each output of a transform is a sum of d terms by log₂ d rounds of float additions: each
    // round adds at most 2^-24 of the row's Σ|x| (times d after the first transform).
    double sum = 0;
    for (float v : x) sum += std::fabs(v);
    const double bound = 2.0 * std::log2(double(d)) * std::ldexp(1.0, -24) * d * sum;
    for (int c = 0; c < d; ++c) CHECK(std::fabs(y[c] - double(d) * x[c]) <= bound);
    // Q·Kᵀ of transformed rows against the original's, in float: the same to float's rounding.
    const auto signs = random_signs(d, seed + 1);
    std::set<float> values(signs.begin(), signs.end());
    CHECK(values == std::set<float>{-1.0f, 1.0f});
    const auto Q = course::random_uniform(8 * d, seed + 2), K = course::random_uniform(8 * d, seed + 3);
    const auto Qt = transform_rows(Q, d, signs), Kt = transform_rows(K, d, signs);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        double s = 0, st = 0, norm = 0;
        for (int c = 0; c < d; ++c) {
          s += double(Q[i * d + c]) * K[j * d + c];
          st += double(Qt[i * d + c]) * Kt[j * d + c];
          norm += std::fabs(double(Q[i * d + c]) * K[j * d + c]);
        }
        CHECK(std::fabs(st - s) <= 1e-6 * norm);
      }
  }
  // In exact arithmetic (float64 all through) attention on the transformed Q and K is the same.
  const Shape s{1, 2, 100, 64, true};
  const auto in = normal_inputs(s, Dtype::fp16, seed, 0.01);
  const auto signs = random_signs(s.d, seed);
  auto transform64 = [&](const std::vector<float>& x) {
    std::vector<double> y(x.size());
    for (std::size_t r = 0; r < x.size() / s.d; ++r) {
      double* v = y.data() + r * s.d;
      for (int c = 0; c < s.d; ++c) v[c] = double(x[r * s.d + c]) * signs[c] / std::sqrt(double(s.d));
      for (int h = 1; h < s.d; h *= 2)
        for (int i = 0; i < s.d; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            const double a = v[j], b = v[j + h];
            v[j] = a + b, v[j + h] = a - b;
          }
    }
    return y;
  };
  const auto O = attention_f64(s, to_double(in.Q), to_double(in.K), to_double(in.V));
  const auto Ot = attention_f64(s, transform64(in.Q), transform64(in.K), to_double(in.V));
  double worst = 0;
  for (std::size_t i = 0; i < O.size(); ++i) worst = std::max(worst, std::fabs(O[i] - Ot[i]));
  CHECK(worst < 1e-12);
}

TEST_CASE("tiles: 192 query rows at d = 64, 128 at d = 128; laid from N rounded up to 64, the same key blocks") {
  CHECK(attention_tiles(Shape{1, 1, 100, 64, true}).Br == 192);
  CHECK(attention_tiles(Shape{1, 1, 100, 128, true}).Br == 128);
  // The kernel lays causal tiles from N64 = N rounded up to 64 (so that each warpgroup's 64 rows lie in
  // one of Q's 128-row scale blocks); the model and the counts lay them from N. Same tiles' key blocks.
  for (int d : {64, 128}) {
    const Tiles t = attention_tiles(Shape{1, 1, 1, d, true});
    for (int N = 1; N <= 3000; ++N) {
      const int N64 = (N + 63) / 64 * 64, Tr = (N + t.Br - 1) / t.Br;
      CAPTURE(N);
      REQUIRE((N64 + t.Br - 1) / t.Br == Tr);
      for (int i = 0; i < Tr; ++i) {
        REQUIRE(key_blocks(N64, t.Br, t.Bc, true, i, true) == key_blocks(N, t.Br, t.Bc, true, i, true));
        for (int w = 0; w < t.Br / 64; ++w) {  // a warpgroup's rows in one scale block
          const int first = std::max(query_row0(N64, t.Br, true, true, i) + 64 * w, 0);
          CHECK(first / kScaleRows == (first + 63) / kScaleRows);
        }
      }
    }
  }
}

TEST_CASE("quantize: scales from the block's (or the tensor's) amax, bytes within u, zeros, values below 2^-119, NaN refused") {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  const int heads = 2, N = 300, d = 64;  // 300 rows: blocks of 128, 128 and 44
  auto x = course::random_uniform(std::size_t(heads) * N * d, seed, -1.0f, 2.0f);
  x[5 * d + 7] = 300.0f;  // an outlier in the first block of head 0
  for (int c = 0; c < d; ++c) x[(std::size_t(1) * N + 200) * d + c] = 0.0f;  // a zero row
  for (Granularity g : {Granularity::tensor, Granularity::block}) {
    const Quantized q = quantize(x, heads, N, d, g);
    REQUIRE(q.scale.size() == std::size_t(heads) * 3);
    for (int h = 0; h < heads; ++h)
      for (int b = 0; b < 3; ++b) {
        float amax = 0;
        for (int r = b * 128; r < std::min(N, b * 128 + 128); ++r)
          for (int c = 0; c < d; ++c) amax = std::max(amax, std::fabs(x[(std::size_t(h) * N + r) * d + c]));
        if (g == Granularity::tensor) amax = 300.0f;
        CHECK(q.scale[h * 3 + b] == amax / 448.0f);
      }
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < N; ++r)
        for (int c = 0; c < d; ++c) {
          const double v = x[(std::size_t(h) * N + r) * d + c], got = q.value(h, r, c), s = q.descale(h, r);
          CHECK(std::fabs(got - v) <= std::max(kUnitRoundoff * std::fabs(v), std::ldexp(1.0, -10) * s) * (1 + 1e-6));
        }
    CHECK(q.value(0, 5, 7) == doctest::Approx(300.0));  // the amax lands on 448 exactly
  }
  // Values all below 2^-119 (bf16 can hold them): the scale is made from 2^-119, not from their amax, whose
  // 448/amax would overflow to inf and make every 0 a NaN byte.
  auto tiny = course::random_uniform(std::size_t(128) * 64, seed + 1, -1e-37f, 2e-37f);
  for (Granularity g : {Granularity::tensor, Granularity::block}) {
    const Quantized t = quantize(tiny, 1, 128, 64, g);
    CHECK(t.scale[0] == kMinAmax / kE4m3Max);
    CHECK(std::none_of(t.bytes.begin(), t.bytes.end(), [](std::uint8_t b) { return (b & 0x7F) == 0x7F; }));
    for (int r = 0; r < 128; ++r)
      for (int c = 0; c < 64; ++c) {
        const double v = tiny[std::size_t(r) * 64 + c], got = t.value(0, r, c), s = t.descale(0, r);
        CHECK(std::fabs(got - v) <= std::max(kUnitRoundoff * std::fabs(v), std::ldexp(1.0, -10) * s) * (1 + 1e-6));
      }
  }
  const Quantized zeros = quantize(std::vector<float>(128 * 64, 0.0f), 1, 128, 64, Granularity::block);
  CHECK(zeros.scale[0] == 1.0f);
  CHECK(std::all_of(zeros.bytes.begin(), zeros.bytes.end(), [](std::uint8_t b) { return b == 0; }));
  x[17] = NAN;
  CHECK_THROWS_AS(quantize(x, heads, N, d, Granularity::block), course::UsageError);
  x[17] = INFINITY;
  CHECK_THROWS_AS(quantize(x, heads, N, d, Granularity::tensor), course::UsageError);
}

TEST_CASE("Vᵀ: key_position permutes each group of 32 keys; transpose_v puts every byte there, zeros past N") {
  std::set<int> seen;
  for (int k = 0; k < 64; ++k) seen.insert(key_position(k));
  CHECK(seen.size() == 64);
  CHECK(*seen.rbegin() == 63);
  CHECK(key_position(0) == 0);
  CHECK(key_position(8) == 2);   // thread 0's third byte: key 8
  CHECK(key_position(2) == 4);   // thread 1's first byte: key 2
  CHECK(key_position(16) == 16);
  CHECK(key_position(41) == 32 + 3);
  const int N = 45, d = 64;
  auto x = course::random_uniform(std::size_t(2) * N * d, course::fresh_seed());
  const Quantized V = quantize(x, 2, N, d, Granularity::block);
  const auto t = transpose_v(V);
  REQUIRE(padded_keys(N) == 64);
  REQUIRE(t.size() == std::size_t(2) * d * 64);
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < d; ++c) {
      std::set<int> filled;
      for (int k = 0; k < N; ++k) {
        CHECK(t[(std::size_t(h) * d + c) * 64 + key_position(k)] == V.bytes[(std::size_t(h) * N + k) * d + c]);
        filled.insert(key_position(k));
      }
      for (int p = 0; p < 64; ++p)
        if (!filled.count(p)) CHECK(t[(std::size_t(h) * d + c) * 64 + p] == 0);
    }
}

TEST_CASE("plain FP8 attention: near float64; on outlier inputs per-block scales and the Hadamard help") {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  const Shape s{1, 2, 512, 128, false};
  for (double outliers : {0.0, 0.001}) {
    CAPTURE(outliers);
    const auto in = normal_inputs(s, Dtype::fp16, seed, outliers, 10.0);
    const auto ref = attention_f64(s, to_double(in.Q), to_double(in.K), to_double(in.V));
    const auto e16 = errors(plain_16bit(s, in.Q, in.K, in.V, Dtype::fp16), ref);
    std::vector<double> rmse;
    for (const Scheme& scheme : schemes()) {
      const auto q = quantize_inputs(s, in.Q, in.K, in.V, scheme, seed);
      const auto e = errors(plain_fp8(s, q, Dtype::fp16), ref);
      INFO(scheme.name() << ": rmse " << e.rmse << ", max " << e.max_abs << " (fp16 rmse " << e16.rmse << ")");
      CHECK(e.rmse > e16.rmse);         // FP8 loses more than fp16 ...
      CHECK(e.rmse < 0.05);             // ... but stays an approximation of attention
      rmse.push_back(e.rmse);
    }
    if (outliers > 0) {  // the direction of the FA-3 paper's table: per tensor worst, both remedies best
      CHECK(rmse[3] < rmse[0]);
      CHECK(rmse[2] < rmse[0]);
    }
  }
}

TEST_CASE("centring V: the column means as summed in blocks, exact in attention, finer quantisation of an offset V") {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  for (int N : {1, 77, 128, 300}) {
    const Shape s{1, 2, N, 64, N % 2 == 0};
    CAPTURE(N);
    const auto in = attention::make_inputs(s, Dtype::fp16, seed);  // uniform in [−1, 2): mean 0.5
    const auto mean = column_means(in.V, s.heads(), N, s.d);
    // The means: within float's rounding of the float64 mean (N additions of values below 2).
    for (int h = 0; h < s.heads(); ++h)
      for (int c = 0; c < s.d; ++c) {
        double exact = 0;
        for (int r = 0; r < N; ++r) exact += in.V[(std::size_t(h) * N + r) * s.d + c];
        exact /= N;
        CHECK(std::fabs(mean[std::size_t(h) * s.d + c] - exact) <= 2.0 * N * 0x1p-24);
      }
    // Exact in attention: softmax(S)·(V − v̄) + v̄ is softmax(S)·V, every row (causal rows too).
    // (In float64: centre_columns' float subtraction rounds, by up to 2^-24 of a value, which is the
    // quantisation's business, not the identity's.)
    const auto centred = centre_columns(in.V, mean, s.heads(), N, s.d);
    std::vector<double> Vc(in.V.size());
    for (std::size_t i = 0; i < Vc.size(); ++i) {
      Vc[i] = double(in.V[i]) - double(mean[i / (std::size_t(N) * s.d) * s.d + i % s.d]);
      CHECK(std::fabs(centred[i] - Vc[i]) <= std::fabs(Vc[i]) * 0x1p-24);
    }
    const auto ref = attention_f64(s, to_double(in.Q), to_double(in.K), to_double(in.V));
    const auto shifted = attention_f64(s, to_double(in.Q), to_double(in.K), Vc);
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, std::fabs(shifted[i] + mean[i / (std::size_t(N) * s.d) * s.d + i % s.d] - ref[i]));
    CHECK(worst < 1e-12);
  }
  // Finer: V of mean 0.5 per tensor, plain FP8 with V centred has a smaller error than without (the
  // offset no longer takes e4m3's range), and both schemes quantise Q and K alike.
  const Shape s{1, 2, 512, 128, false};
  const auto in = attention::make_inputs(s, Dtype::fp16, seed);
  const auto ref = attention_f64(s, to_double(in.Q), to_double(in.K), to_double(in.V));
  CHECK(centred(schemes().front()).name() == "per_tensor_centred");
  const auto qc = quantize_inputs(s, in.Q, in.K, in.V, centred(schemes().front()), seed);
  const auto qu = quantize_inputs(s, in.Q, in.K, in.V, schemes().front(), seed);
  CHECK(qc.Q.bytes == qu.Q.bytes);
  CHECK(std::all_of(qu.v_mean.begin(), qu.v_mean.end(), [](float m) { return m == 0.0f; }));
  const auto ec = errors(plain_fp8(s, qc, Dtype::fp16), ref), eu = errors(plain_fp8(s, qu, Dtype::fp16), ref);
  INFO("rmse centred " << ec.rmse << ", uncentred " << eu.rmse);
  CHECK(ec.rmse < eu.rmse);
  // NaN or inf in V: refused with the quantisation's message.
  auto bad = in.V;
  bad[5] = NAN;
  CHECK_THROWS_AS(column_means(bad, s.heads(), s.N, s.d), course::UsageError);
}

// The GPU checks the values it quantises (after the transform) through their amax, as the CPU's quantize does:
// bf16 inputs near their largest value are finite, but the transform's sums overflow fp32, and both refuse them.
TEST_CASE("finite bf16 inputs whose transform overflows fp32: refused with the transform, taken without it") {
  const Shape s{1, 1, 200, 64, false};
  Inputs in = make_inputs(s, Dtype::bf16, 7);
  for (int c = 0; c < s.d; ++c) in.K[std::size_t(7) * s.d + c] = course::round_to(Dtype::bf16, 3e38f);
  CHECK_THROWS_AS(quantize_inputs(s, in.Q, in.K, in.V, schemes()[2], 1), course::UsageError);
  CHECK_THROWS_AS(quantize_inputs(s, in.Q, in.K, in.V, schemes()[3], 1), course::UsageError);
  CHECK_NOTHROW(quantize_inputs(s, in.Q, in.K, in.V, schemes()[0], 1));
  CHECK_NOTHROW(quantize_inputs(s, in.Q, in.K, in.V, schemes()[1], 1));
}

TEST_CASE("v_scale_span: the largest ratio of a head's V descales, and the limit the attention needs") {
  const std::vector<float> even = {0.5f, 0.5f, 0.5f}, spread = {1.0f, 0x1p-10f, 0x1p20f}, one = {3.0f};
  CHECK(v_scale_span(even.data(), 3) == 1.0);
  CHECK(v_scale_span(spread.data(), 3) == 0x1p30);
  CHECK(v_scale_span(one.data(), 1) == 1.0);
  // The tiny-bf16 floor beside an ordinary block: 2^-119/448 and 1000/448 are 2^129 apart, past the limit (the
  // first a subnormal float, 2^-149 its step: a relative error near 2^-21).
  const std::vector<float> tiny = {kMinAmax / kE4m3Max, 1000.0f / kE4m3Max};
  CHECK(v_scale_span(tiny.data(), 2) > kMaxVScaleSpan);
  CHECK(std::log2(v_scale_span(tiny.data(), 2)) == doctest::Approx(119.0 + std::log2(1000.0)).epsilon(1e-7));
}


TEST_CASE("the CPU count of the kernels' tiles: counted bytes equal the model for every N; O and L within the bound") {
  // Ragged N (a single row, a block and one, not a multiple of 32 or 64), causal or not, both d, the
  // tiles of rungs 1-2 (key blocks of 128) and 3-7 (256), fp16 and bf16; every scheme at 128, the
  // per-tensor ones at 256 (as the program runs them, V centred).
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (int N : {1, 77, 129, 300, 513}) {
        const Shape s{1, 2, N, d, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        const Inputs in = make_inputs(s, Dtype::fp16, seed);
        for (const char* rung : {"row_sum", "wide"}) {
          const Fp8Variant& v = fp8_registry().find(rung);
          if (!v.supports(Dtype::fp16, d)) continue;
          const Tiles t = v.tiles(s);
          for (const Scheme& asked : schemes()) {
            if (!v.takes(asked, d)) continue;
            const Scheme scheme = v.quantised_by(asked, d);
            CAPTURE(scheme.name());
            const QuantizedInputs q = quantize_inputs(s, in.Q, in.K, in.V, scheme, seed);
            for (Dtype out : {Dtype::fp16, Dtype::bf16}) {
              std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * N, NAN);
              const course::IoCount io = fp8_counted(s, out, t, q, O.data(), L.data());
              CHECK(double(io.total()) == fp8_model_bytes(s, out, t));
              const Fp8Reference ref(s, out, in.Q, in.K, in.V, q);
              const auto cO = ref.check_O(O.data()), cL = ref.check_L(L.data());
              INFO("O: " << cO.summary() << "\n" << cO.first_mismatches);
              INFO("L: " << cL.summary() << "\n" << cL.first_mismatches);
              CHECK(cO.ok());
              CHECK(cL.ok());
            }
          }
        }
      }
}

TEST_CASE("the model by hand: Q read once, K and Vᵀ once a query block, O in the dtype, L in 8-row stretches") {
  // N = 300, d = 128, not causal, key blocks of 128, query blocks of 128: 3 query blocks, each reading
  // keys 0..299 of K (300 rows of 128 bytes) and Vᵀ's columns 0..319 (padded to 32: 320 a row).
  const Shape s{1, 1, 300, 128, false};
  const double q = 300.0 * 128, kv = 3.0 * (300 + 320) * 128, o = 300.0 * 128 * 2, l = 32.0 * ((300 + 7) / 8);
  CHECK(fp8_model_bytes(s, Dtype::fp16, {128, 128, true}) == q + kv + o + l);
  // Causal: query block i (laid from N64 = 320: rows -64..63, 64..191, 192..319) visits 1, 2, 3 key blocks.
  const Shape c{1, 1, 300, 128, true};
  const double kv_c = (128 + 128) * 128.0 + (256 + 256) * 128.0 + (300 + 320) * 128.0;
  CHECK(fp8_model_bytes(c, Dtype::fp16, {128, 128, true}) == q + kv_c + o + l);
  // Key blocks of 256, causal, N = 300 (N64 = 320: query blocks from rows -64, 64, 192 visit 1, 1 and 2
  // blocks): K's rows 256, 256, 256 + 44; Vᵀ's columns 256, 256, 256 + 64 (padded to 320).
  const double kv_w = 128.0 * (256 + 256 + 256 + 256 + 300 + 320);
  CHECK(fp8_model_bytes(c, Dtype::fp16, {128, 256, true}) == q + kv_w + o + l);
  {  // and the count's reads and writes apart: Q, K, Vᵀ read; O and L written
    const Inputs in = make_inputs(c, Dtype::fp16, 7);
    const QuantizedInputs qi = quantize_inputs(c, in.Q, in.K, in.V, centred(schemes()[0]), 7);
    std::vector<float> O(c.elements()), L(c.N);
    const course::IoCount io = fp8_counted(c, Dtype::fp16, {128, 256, true}, qi, O.data(), L.data());
    CHECK(double(io.read_bytes) == q + kv_w);
    CHECK(double(io.write_bytes) == o + l);
  }
  // d = 64, query blocks of 192 (rows 0 and 192), three key blocks of 128 each: K 300 rows, Vᵀ 320 columns.
  const Shape s64{1, 1, 300, 64, false};
  CHECK(fp8_model_bytes(s64, Dtype::bf16, {192, 128, true}) == 64.0 * (300 + 600 + 2 * 620) + 32.0 * 38);
  // Two heads of N = 77: head 1's L starts 77 floats in, so each of its 10 stretches of 8 rows straddles
  // two sectors (head 0's: one each).
  const Shape h2{1, 2, 77, 128, false};
  CHECK(fp8_model_bytes(h2, Dtype::fp16, {128, 128, true}) == 2 * 128.0 * (77 + 154 + 77 + 96) + 32.0 * 30);
}

TEST_CASE("the registry: rungs in order, ablations apart, what each takes, and bad names refused") {
  const auto& r = fp8_registry();
  const std::vector<std::string> rungs = {"e4m3", "row_sum", "wide", "tile_overlap", "tile_start", "epilogue", "lin"};
  CHECK(r.names(false) == rungs);
  CHECK(r.is_ablation("p_in_registers"));
  CHECK(r.is_ablation("wide_exact_max"));
  CHECK_THROWS_AS(r.find("fp8_per_tensor_wide_stsm"), course::UsageError);
  const Scheme per_block = schemes()[1], per_tensor = schemes()[0];
  CHECK(r.find("row_sum").takes(per_block, 128));
  CHECK_FALSE(r.find("epilogue").takes(per_block, 128));
  CHECK_FALSE(r.find("epilogue").supports(Dtype::fp16, 64));
  CHECK(r.find("lin").takes(per_block, 64));  // at d = 64 it is rung 2's kernel: any scheme
  CHECK_FALSE(r.find("epilogue").takes(per_tensor, 64));  // not at a d it does not run
  for (const char* name : {"e4m3", "row_sum", "lin", "p_in_registers"}) CHECK(r.find(name).ds == std::vector<int>{64, 128});
  for (const char* name : {"wide", "tile_overlap", "tile_start", "epilogue", "wide_exact_max"}) {
    CHECK(r.find(name).ds == std::vector<int>{128});
    CHECK(r.find(name).wide(128));
  }
  CHECK(r.find("lin").wide(128));
  CHECK_FALSE(r.find("lin").wide(64));
  CHECK(r.find("lin").lin);
  CHECK(r.find("lin").tiles(Shape{1, 1, 100, 64, false}).Bc == 128);
  CHECK(r.find("lin").tiles(Shape{1, 1, 100, 128, false}).Bc == 256);
  CHECK_FALSE(r.find("lin").takes(per_block, 128));
  CHECK(r.find("lin").quantised_by(per_tensor, 128).centre_v);
  CHECK_FALSE(r.find("lin").quantised_by(per_tensor, 64).centre_v);
  CHECK(r.find("wide").tiles(Shape{1, 1, 100, 128, false}).Bc == 256);
  CHECK(r.find("row_sum").tiles(Shape{1, 1, 100, 64, false}).Br == 192);
}
