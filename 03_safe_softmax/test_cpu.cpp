// Stage 03 on the CPU: the reference, the pass algorithms through the counting view, and why the
// safe softmax exists.
#include <doctest/doctest.h>

#include <limits>

#include "algorithm.hpp"
#include "test_util.hpp"

using namespace softmax;

namespace {
const float kInf = std::numeric_limits<float>::infinity();
const std::pair<const char*, Counted> kAlgorithms[] = {{"naive", naive_counted}, {"safe", safe_counted}};
}  // namespace

TEST_CASE("reference: a row worked by hand, and rows that sum to one") {
  const std::vector<float> X = {1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f};
  const auto y = reference(X.data(), 2, 3);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(y[0] == doctest::Approx(std::exp(1.0) / z).epsilon(1e-15));
  CHECK(y[2] == doctest::Approx(std::exp(3.0) / z).epsilon(1e-15));
  CHECK(y[3] == doctest::Approx(1.0 / 3.0).epsilon(1e-15));
}

TEST_CASE("reference: special rows") {
  // -inf except one -> one-hot; equal values -> uniform; length 1 -> 1; a NaN -> a row of NaN.
  const std::vector<float> X = {-kInf, 5.0f, -kInf, 2.0f, 2.0f, 2.0f, NAN, 1.0f, 2.0f};
  const auto y = reference(X.data(), 3, 3);
  CHECK(y[0] == 0.0);
  CHECK(y[1] == 1.0);
  CHECK(y[2] == 0.0);
  CHECK(y[4] == doctest::Approx(1.0 / 3.0));
  CHECK(std::isnan(y[6]));
  CHECK(std::isnan(y[7]));
  const std::vector<float> one = {-3.5f};
  CHECK(reference(one.data(), 1, 1)[0] == 1.0);
}

TEST_CASE("pass algorithms (CPU, counting view) compute the softmax on every shape") {
  for (const auto& [name, algorithm] : kAlgorithms) {
    for (const auto& s : testing::shapes()) {
      CAPTURE(name);
      CAPTURE(s.R);
      CAPTURE(s.C);
      const auto X = testing::logits(s);
      std::vector<float> Y(X.size(), NAN);
      algorithm(X.data(), Y.data(), s.R, s.C);
      testing::check_softmax(X, Y, s.R, s.C);
    }
  }
}

TEST_CASE("pass algorithms: counted bytes equal the model wherever it is exact") {
  for (const testing::Shape s : {testing::Shape{16, 1024}, {3, 32768}, {2, 50000}, {5, 8}}) {
    REQUIRE(model_exact(s.C));
    const auto X = testing::logits(s);
    std::vector<float> Y(X.size());
    CAPTURE(s.R);
    CAPTURE(s.C);
    CHECK(double(naive_counted(X.data(), Y.data(), s.R, s.C).total()) == naive_model_bytes(s.R, s.C));
    CHECK(double(safe_counted(X.data(), Y.data(), s.R, s.C).total()) == safe_model_bytes(s.R, s.C));
  }
}

TEST_CASE("models: the safe softmax reads X three times, the naive one twice; both write it once") {
  const int R = 4096, C = 4096;  // one segment: the partials cost a sector or two per row and pass
  const double matrix = 4.0 * R * C;
  CHECK(safe_model_bytes(R, C) == doctest::Approx(4 * matrix).epsilon(0.01));
  CHECK(naive_model_bytes(R, C) == doctest::Approx(3 * matrix).epsilon(0.01));
  CHECK(segments(16384) == 1);
  CHECK(segments(16385) == 2);
  CHECK(partial_stride(16385) == 8);
}

TEST_CASE("why safe: logits near 100 overflow the naive softmax, not the safe one") {
  const testing::Shape s{4, 300};
  const auto X = testing::logits(s, 80.0f, 120.0f);  // exp(89) already overflows float
  const auto ref = reference(X.data(), s.R, s.C);
  std::vector<float> naive(X.size()), safe(X.size());
  naive_counted(X.data(), naive.data(), s.R, s.C);
  safe_counted(X.data(), safe.data(), s.R, s.C);
  const auto tolerance = course::fp32_sum_tolerance(std::size_t(s.C));
  CHECK_FALSE(course::compare(naive.data(), ref.data(), ref.size(), tolerance).ok());
  CHECK(std::count_if(naive.begin(), naive.end(), [](float y) { return !std::isfinite(y); }) > 0);
  CHECK(course::compare(safe.data(), ref.data(), ref.size(), tolerance).ok());
}

TEST_CASE("special rows give what the formula gives: masked, one-hot, equal, NaN, +inf") {
  for (int C : {5000, 20000}) {  // one segment, two segments
    const auto X = testing::special_rows(C);
    std::vector<float> Y(X.size());
    safe_counted(X.data(), Y.data(), 5, C);
    testing::check_softmax(X, Y, 5, C);
    CHECK(Y[C + C / 3] == 1.0f);
    CHECK(std::isnan(Y[3 * C]));
    CHECK(std::isnan(Y[4 * C]));
    // naive survives the first four rows (no large logits); its exp(+inf) = inf makes the fifth
    // 0 and inf/inf = NaN, not the reference's all-NaN row.
    const std::vector<float> four(X.begin(), X.begin() + 4 * std::size_t(C));
    std::vector<float> Yn(four.size());
    naive_counted(four.data(), Yn.data(), 4, C);
    testing::check_softmax(four, Yn, 4, C);
  }
}
