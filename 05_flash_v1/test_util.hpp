// Test helpers for the attention stages: random Q, K, V for a shape, with a fresh seed each run.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithm.hpp"
#include "inputs.hpp"

namespace attention::testing {

struct Inputs {
  std::uint64_t seed;
  std::vector<float> Q, K, V;
};

// Q, K, V uniform in [lo, hi) (default: the course's [-1, 2), mean 0.5, both signs).
inline Inputs random_inputs(const Shape& s, float lo = -1.0f, float hi = 2.0f) {
  const std::uint64_t seed = course::fresh_seed();
  return {seed, course::random_uniform(s.elements(), seed, lo, hi),
          course::random_uniform(s.elements(), seed + 1, lo, hi),
          course::random_uniform(s.elements(), seed + 2, lo, hi)};
}

// Scores all very negative, for d ≥ 28 below −103.97 whatever the seed (float exp of any of them is
// 0, not even a subnormal, so a softmax without the max subtracted divides 0 by 0): Q points against K. Every
// product q·k is at most −40 · 0.5 = −20, so a score (the sum over d, times 1/√d) is at most −20·√d:
// −160 at d = 64. (Q in −16·[0.5, 1.5) put the scores near −128 with a spread of 6.7, and about one
// run in 75 had a score above −103.97 in row 0, which the test asserts against: it failed that often.)
inline Inputs very_negative_scores(const Shape& s) {
  Inputs in = random_inputs(s, 0.5f, 1.5f);
  for (float& q : in.Q) q = -(32.0f + 16.0f * q);
  return in;
}

}  // namespace attention::testing
