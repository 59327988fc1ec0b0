// The inputs of one attention problem as the programs and tests of stages 06 onward make them: Q,
// K, V uniform in [lo, hi) (the course's default [-1, 2): mean 0.5, both signs), Q multiplied by
// q_scale (10-30 gives logits whose exp overflows a float), all rounded to the dtype; for 16-bit
// dtypes also the bits that go to the GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <vector>

#include "attention/shape.hpp"
#include "dtype.hpp"
#include "inputs.hpp"

namespace attention {

struct Inputs {
  std::uint64_t seed = 0;
  std::vector<float> Q, K, V;            // the values, rounded to the dtype
  std::vector<std::uint16_t> Qh, Kh, Vh;  // their bits (16-bit dtypes only)
};

// Q, K and V are made on three threads: at the main job's largest shapes (600 M values) that
// takes seconds apiece.
inline Inputs make_inputs(const Shape& s, course::Dtype t, std::uint64_t seed, float q_scale = 1.0f,
                          float lo = -1.0f, float hi = 2.0f) {
  Inputs in;
  in.seed = seed;
  auto make = [&](std::vector<float>& x, std::vector<std::uint16_t>& bits, std::uint64_t stream, float times) {
    x = course::random_uniform(s.elements(), seed + stream, lo, hi);
    if (times != 1.0f)
      for (float& v : x) v *= times;
    bits = course::round_in_place(t, x);
  };
  auto q = std::async(std::launch::async, make, std::ref(in.Q), std::ref(in.Qh), 0, q_scale);
  auto k = std::async(std::launch::async, make, std::ref(in.K), std::ref(in.Kh), 1, 1.0f);
  make(in.V, in.Vh, 2, 1.0f);
  q.get();
  k.get();
  return in;
}

}  // namespace attention
