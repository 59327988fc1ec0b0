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

// Checks `Y` against the float64 reference of X, with the fp32 tolerance for rows of C terms.
inline void check_softmax(const std::vector<float>& X, const std::vector<float>& Y, int R, int C) {
  const auto ref = reference(X.data(), R, C);
  const auto cmp = course::compare(Y.data(), ref.data(), ref.size(),
                                   course::fp32_sum_tolerance(std::size_t(C)), C);
  INFO(cmp.summary() << "\n" << cmp.first_mismatches);
  CHECK(cmp.ok());
}

// Random logits in [lo, hi), a fresh seed each time (printed on failure).
inline std::vector<float> logits(const Shape& s, float lo = -4.0f, float hi = 8.0f) {
  const std::uint64_t seed = course::fresh_seed();
  INFO("seed " << seed);
  return course::random_uniform(std::size_t(s.R) * s.C, seed, lo, hi);
}

}  // namespace softmax::testing
