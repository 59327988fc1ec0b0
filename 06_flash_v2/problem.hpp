// The inputs of one problem as stage 06's program and tests make them: Q, K, V uniform in [lo, hi)
// (the course's default [-1, 2): mean 0.5, both signs), Q multiplied by q_scale (10-30 gives
// logits whose exp overflows a float), all rounded to the dtype; for 16-bit dtypes also the bits
// that go to the GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithm.hpp"
#include "dtype.hpp"
#include "inputs.hpp"

namespace attention {

struct Inputs {
  std::uint64_t seed = 0;
  std::vector<float> Q, K, V;            // the values, rounded to the dtype
  std::vector<std::uint16_t> Qh, Kh, Vh;  // their bits (16-bit dtypes only)
};

inline Inputs make_inputs(const Shape& s, course::Dtype t, std::uint64_t seed, float q_scale = 1.0f,
                          float lo = -1.0f, float hi = 2.0f) {
  Inputs in;
  in.seed = seed;
  in.Q = course::random_uniform(s.elements(), seed, lo, hi);
  in.K = course::random_uniform(s.elements(), seed + 1, lo, hi);
  in.V = course::random_uniform(s.elements(), seed + 2, lo, hi);
  for (float& q : in.Q) q *= q_scale;
  in.Qh = course::round_in_place(t, in.Q);
  in.Kh = course::round_in_place(t, in.K);
  in.Vh = course::round_in_place(t, in.V);
  return in;
}

}  // namespace attention
