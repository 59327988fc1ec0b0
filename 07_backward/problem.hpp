// The inputs of one backward problem as stage 07's program and tests make them: stage 06's Q, K,
// V (uniform in [lo, hi), Q times q_scale, rounded to the dtype) and the incoming gradient dO,
// uniform in the same range and rounded the same way: not small, not smooth, not zero-mean.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

#include "attention/problem.hpp"

namespace attention {

struct BackwardInputs {
  Inputs fwd;                    // Q, K, V (and their bits)
  std::vector<float> dO;         // rounded to the dtype
  std::vector<std::uint16_t> dOh;  // its bits (16-bit dtypes only)
};

inline BackwardInputs make_backward_inputs(const Shape& s, course::Dtype t, std::uint64_t seed,
                                           float q_scale = 1.0f, float lo = -1.0f, float hi = 2.0f) {
  BackwardInputs in;
  auto dO = std::async(std::launch::async, [&] {  // beside Q, K and V, each drawn on its own thread
    in.dO = course::random_uniform(s.elements(), seed + 3, lo, hi);
    in.dOh = course::round_in_place(t, in.dO);
  });
  in.fwd = make_inputs(s, t, seed, q_scale, lo, hi);
  dO.get();
  return in;
}

// Chapter 07's "keys almost equal" (the precision of D): K_j = k̄ + δ_j, k̄ the head's first key and
// δ uniform in ±0.1 (stream seed + 7), rounded to the dtype. Every attention row is then nearly
// uniform and the true dQ small, while D's error reaches dQ undiminished.
inline void make_keys_almost_equal(const Shape& s, course::Dtype t, Inputs& in) {
  const auto delta = course::random_uniform(s.elements(), in.seed + 7, -0.1f, 0.1f);
  const std::vector<float> K = in.K;
  for (std::size_t x = 0; x < s.elements(); ++x) {
    const std::size_t first = x / (std::size_t(s.N) * s.d) * s.N * s.d + x % s.d;
    in.K[x] = K[first] + delta[x];
  }
  in.Kh = course::round_in_place(t, in.K);
}

}  // namespace attention
