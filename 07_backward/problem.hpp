// The inputs of one backward problem as stage 07's program and tests make them: stage 06's Q, K,
// V (uniform in [lo, hi), Q times q_scale, rounded to the dtype) and the incoming gradient dO,
// uniform in the same range and rounded the same way: not small, not smooth, not zero-mean.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

#include "../06_flash_v2/problem.hpp"

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

}  // namespace attention
