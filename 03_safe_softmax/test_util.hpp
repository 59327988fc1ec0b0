// Test helpers shared by the softmax stages' doctest cases.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "compare.hpp"
#include "inputs.hpp"
#include "reference.hpp"
#include "softmax_bench.hpp"

namespace softmax::testing {

struct Shape {
  int R, C;
};

inline bool under_sanitizer() { return std::getenv("COURSE_SANITIZER") != nullptr; }

// Row lengths that are not multiples of anything (1, 7, 1000), cross a segment boundary
// (16387: two segments, the second of 3 columns) or span several (40000), plus aligned ones.
inline std::vector<Shape> shapes() {
  std::vector<Shape> all = {{1, 1}, {3, 7}, {5, 1000}, {2, 16387}, {64, 1024}, {3, 40000}};
  if (!under_sanitizer()) all.push_back({33, 100003});
  return all;
}

// The seed of the last logits() call, printed with a failing check_softmax.
inline std::uint64_t& last_seed() {
  static std::uint64_t seed = 0;
  return seed;
}

// Checks `Y` against the float64 reference of X, with the fp32 tolerance for rows of C terms.
inline void check_softmax(const std::vector<float>& X, const std::vector<float>& Y, int R, int C) {
  INFO("inputs from seed " << last_seed() << " (if random)");
  const auto ref = reference(X.data(), R, C);
  const auto cmp = course::compare(Y.data(), ref.data(), ref.size(),
                                   course::fp32_sum_tolerance(std::size_t(C)), C);
  INFO(cmp.summary() << "\n" << cmp.first_mismatches);
  CHECK(cmp.ok());
}

// Random logits in [lo, hi), a fresh seed each time (printed on failure).
inline std::vector<float> logits(const Shape& s, float lo = -4.0f, float hi = 8.0f) {
  last_seed() = course::fresh_seed();
  return course::random_uniform(std::size_t(s.R) * s.C, last_seed(), lo, hi);
}

// Rows an attention mask and bad data produce, C = 5000 columns each: a −∞ prefix then values,
// one-hot (all −∞ but one), all equal, a NaN at the end, a +∞ in the middle.
inline std::vector<float> special_rows(int C = 5000) {
  const float inf = INFINITY;
  std::vector<float> X(std::size_t(5) * C);
  for (int c = 0; c < C; ++c) {
    X[c] = c < C - 100 ? -inf : float(c % 7);
    X[C + c] = c == C / 3 ? 3.0f : -inf;
    X[2 * C + c] = 1.5f;
    X[3 * C + c] = c == C - 1 ? NAN : float(c % 5);
    X[4 * C + c] = c == C / 2 ? inf : float(c % 3);
  }
  return X;
}

}  // namespace softmax::testing
