// What the GPU tests of the forward stages share (doctest): run a forward variant on poisoned outputs
// and compare O and L with the float64 reference by stage 06's rule.
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "attention/device_run.hpp"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "attention/variants.hpp"

namespace attention::testing {

struct Result {
  std::vector<float> O, L;
};

inline Result run_gpu(const ForwardVariant& v, const Shape& s, course::Dtype t, const Inputs& in) {
  DeviceRun dev(s, t, in);
  dev.poison();  // an element nobody writes fails the comparison
  v.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get());
  return {dev.O_values(t), dev.L.download()};
}

inline void check_result(const Shape& s, course::Dtype t, const Inputs& in, const Result& r) {
  const Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
  const auto O = ref.check_O(r.O.data()), L = ref.check_L(r.L.data());
  INFO("O: " << O.summary() << "\n" << O.first_mismatches);
  INFO("L: " << L.summary() << "\n" << L.first_mismatches);
  CHECK(O.ok());
  CHECK(L.ok());
}

}  // namespace attention::testing
