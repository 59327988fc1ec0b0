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

// Scores all very negative, about -100 to -150 for d = 64 (exp of any of them is 0 in float, so
// a softmax without the max subtracted divides 0 by 0): Q points against K.
inline Inputs very_negative_scores(const Shape& s) {
  Inputs in = random_inputs(s, 0.5f, 1.5f);
  for (float& q : in.Q) q = -16.0f * q;
  return in;
}

}  // namespace attention::testing
