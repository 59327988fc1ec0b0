// What stage 07's CPU and GPU tests share: the forward on the CPU (stage 06) that gives the
// backward its O and L, and the check of three gradients against float64 with doctest's messages.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../06_flash_v2/algorithm.hpp"
#include "problem.hpp"
#include "reference.hpp"

namespace attention::testing {

struct Forward {
  std::vector<float> O, L;
};
inline Forward cpu_forward(const Shape& s, course::Dtype t, const BackwardInputs& in) {
  Forward f{std::vector<float>(s.elements(), NAN), std::vector<float>(std::size_t(s.heads()) * s.N, NAN)};
  flash_v2_counted(s, t, Tiles{128, 64}, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), f.O.data(), f.L.data());
  return f;
}

inline void check_gradients(const BackwardReference& ref, const float* dQ, const float* dK, const float* dV) {
  const float* grads[3] = {dQ, dK, dV};
  for (int w = 0; w < 3; ++w) {
    const auto c = ref.check(w, grads[w]);
    INFO(std::string(kGradientNames[w]) << ": " << c.summary() << " (plain " << ref.plain_error(w) << ")\n" << c.first_mismatches);
    CHECK(c.ok());
  }
}

}  // namespace attention::testing
