// Stage 04 on the CPU: the merge operator ⊕, the online and on-chip softmax and the single-query
// attention through the counting view.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "../03_safe_softmax/test_util.hpp"
#include "algorithm.hpp"
#include "attention_reference.hpp"
#include "online.hpp"

using namespace softmax;

namespace {

// The exact (m, l) of values, in double.
std::pair<double, double> exact_state(const std::vector<float>& x, std::size_t begin, std::size_t end) {
  double m = -INFINITY, l = 0.0;
  for (std::size_t i = begin; i < end; ++i) m = std::max(m, double(x[i]));
  for (std::size_t i = begin; i < end; ++i) l += std::exp(double(x[i]) - m);
  return {m, l};
}

MaxSum piece_of(const std::vector<float>& x, std::size_t begin, std::size_t end) {
  MaxSum s = empty_piece();
  for (std::size_t i = begin; i < end; ++i) s = online_update(s, x[i]);
  return s;
}

void check_state(MaxSum s, std::pair<double, double> exact, double tolerance) {
  CHECK(double(s.m) == exact.first);  // the max is exact: no arithmetic
  CHECK(double(s.l) == doctest::Approx(exact.second).epsilon(tolerance));
}

}  // namespace

TEST_CASE("merge: any split of a row, merged in any order, gives the row's (m, l)") {
  std::mt19937_64 rng(course::fresh_seed());
  const auto x = course::random_uniform(5000, rng(), -20.0f, 30.0f);
  const auto exact = exact_state(x, 0, x.size());
  for (int trial = 0; trial < 50; ++trial) {
    // cut the row at random points into pieces
    std::vector<std::size_t> cuts = {0, x.size()};
    for (int c = 0; c < 1 + int(rng() % 20); ++c) cuts.push_back(rng() % x.size());
    std::sort(cuts.begin(), cuts.end());
    std::vector<MaxSum> pieces;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back(piece_of(x, cuts[i], cuts[i + 1]));
    std::shuffle(pieces.begin(), pieces.end(), rng);  // ⊕ is commutative: any order
    MaxSum left = empty_piece();
    for (const auto& p : pieces) left = combine(left, p);
    MaxSum right = empty_piece();  // ... and associative: fold from the other side
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) right = combine(*it, right);
    check_state(left, exact, 1e-5);
    check_state(right, exact, 1e-5);
  }
}

TEST_CASE("merge: associative and commutative on random states, up to rounding") {
  std::mt19937_64 rng(course::fresh_seed());
  std::uniform_real_distribution<float> m(-50.0f, 50.0f), l(0.5f, 1000.0f);
  for (int trial = 0; trial < 1000; ++trial) {
    const MaxSum a{m(rng), l(rng)}, b{m(rng), l(rng)}, c{m(rng), l(rng)};
    const MaxSum ab_c = combine(combine(a, b), c), a_bc = combine(a, combine(b, c));
    CHECK(ab_c.m == a_bc.m);
    CHECK(ab_c.l == doctest::Approx(a_bc.l).epsilon(1e-6));
    const MaxSum ab = combine(a, b), ba = combine(b, a);
    CHECK(ab.m == ba.m);
    CHECK(ab.l == doctest::Approx(ba.l).epsilon(1e-6));
  }
}

TEST_CASE("merge: identity, -inf stretches, and NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  const MaxSum a{3.0f, 2.0f};
  CHECK(combine(empty_piece(), a).m == 3.0f);
  CHECK(combine(empty_piece(), a).l == 2.0f);
  CHECK(combine(a, empty_piece()).l == 2.0f);
  // A masked (-inf) start, then real values: no NaN from -inf - (-inf).
  MaxSum s = empty_piece();
  for (float x : {-inf, -inf, 1.0f, 2.0f}) s = online_update(s, x);
  CHECK(s.m == 2.0f);
  CHECK(s.l == doctest::Approx(1.0 + std::exp(-1.0)));
  // A NaN makes the sum NaN, whatever comes after, and a merge keeps it so.
  MaxSum n = empty_piece();
  for (float x : {1.0f, NAN, 5.0f}) n = online_update(n, x);
  CHECK(std::isnan(n.l));
  CHECK(std::isnan(combine(MaxSum{9.0f, 1.0f}, n).l));
  CHECK(std::isnan(combine(n, MaxSum{-9.0f, 1.0f}).l));
  // Four at a time is four one at a time.
  const MaxSum four = online_update4(MaxSum{1.0f, 2.0f}, 0.5f, 3.0f, -1.0f, 2.5f);
  MaxSum one = MaxSum{1.0f, 2.0f};
  for (float x : {0.5f, 3.0f, -1.0f, 2.5f}) one = online_update(one, x);
  CHECK(four.m == one.m);
  CHECK(four.l == doctest::Approx(one.l));
  CHECK(std::isnan(online_update4(empty_piece(), 1.0f, NAN, 2.0f, 3.0f).l));
  // +inf: the row is NaN (inf - inf), as in the reference; -inf stretches are not.
  CHECK(std::isnan(online_update(online_update(empty_piece(), 1.0f), inf).l));
  CHECK(std::isnan(online_update4(empty_piece(), 1.0f, inf, 2.0f, 3.0f).l));
  // The recurrence is ⊕ with (x, 1).
  const MaxSum r = online_update(MaxSum{2.0f, 3.0f}, 4.0f), c = combine(MaxSum{2.0f, 3.0f}, MaxSum{4.0f, 1.0f});
  CHECK(r.m == c.m);
  CHECK(r.l == doctest::Approx(c.l));
}

TEST_CASE("online and on-chip (CPU, counting view) compute the softmax on every shape") {
  for (const auto& s : testing::shapes()) {
    CAPTURE(s.R);
    CAPTURE(s.C);
    const auto X = testing::logits(s);
    std::vector<float> Y(X.size(), NAN);
    online_counted(X.data(), Y.data(), s.R, s.C);
    testing::check_softmax(X, Y, s.R, s.C);
    std::fill(Y.begin(), Y.end(), NAN);
    on_chip_counted(X.data(), Y.data(), s.R, s.C);
    testing::check_softmax(X, Y, s.R, s.C);
  }
}

TEST_CASE("online and on-chip (CPU): special rows (masked, one-hot, equal, NaN, +inf)") {
  for (int C : {1000, 20000}) {
    const auto X = testing::special_rows(C);
    std::vector<float> Y(X.size());
    online_counted(X.data(), Y.data(), 5, C);
    testing::check_softmax(X, Y, 5, C);
    on_chip_counted(X.data(), Y.data(), 5, C);
    testing::check_softmax(X, Y, 5, C);
  }
}

TEST_CASE("online and on-chip: counted bytes equal the model wherever it is exact") {
  for (const testing::Shape s : {testing::Shape{16, 1024}, {3, 32768}, {2, 50000}, {5, 8}}) {
    const auto X = testing::logits(s);
    std::vector<float> Y(X.size());
    CAPTURE(s.C);
    CHECK(double(online_counted(X.data(), Y.data(), s.R, s.C).total()) == online_model_bytes(s.R, s.C));
    CHECK(double(on_chip_counted(X.data(), Y.data(), s.R, s.C).total()) == on_chip_model_bytes(s.R, s.C));
  }
  // 2 reads + 1 write against 3 + 1; 1 + 1 on chip.
  CHECK(online_model_bytes(4096, 4096) / safe_model_bytes(4096, 4096) == doctest::Approx(0.75).epsilon(0.01));
  CHECK(on_chip_model_bytes(4096, 4096) == 2.0 * 4 * 4096 * 4096);
}

TEST_CASE("attention_row (CPU, counting view) against float64, and its IO") {
  for (int d : {32, 64, 128}) {
    for (auto [Nq, N] : std::vector<std::pair<int, int>>{{1, 1}, {13, 77}, {9, 1031}}) {
      CAPTURE(d);
      CAPTURE(Nq);
      CAPTURE(N);
      const std::uint64_t seed = course::fresh_seed();
      CAPTURE(seed);
      const auto Q = course::random_uniform(std::size_t(Nq) * d, seed);
      const auto K = course::random_uniform(std::size_t(N) * d, seed + 1);
      const auto V = course::random_uniform(std::size_t(N) * d, seed + 2);
      std::vector<float> O(Q.size(), NAN);
      const auto io = attention_row_counted(Q.data(), K.data(), V.data(), O.data(), Nq, N, d);
      const auto ref = attention_reference(Q.data(), K.data(), V.data(), Nq, N, d);
      const auto cmp = course::compare(O.data(), ref.data(), ref.size(),
                                       course::fp32_sum_tolerance(std::size_t(N) + d), d);
      INFO(cmp.summary() << "\n" << cmp.first_mismatches);
      CHECK(cmp.ok());
      CHECK(double(io.total()) == attention_row_model_bytes(Nq, N, d));
    }
  }
}
