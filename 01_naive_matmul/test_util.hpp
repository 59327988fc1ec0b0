// Test helpers shared by the matmul stages' doctest cases.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "compare.hpp"
#include "inputs.hpp"
#include "matmul_bench.hpp"
#include "reference.hpp"

namespace matmul::testing {

struct Shape {
  int M, N, K;
};

// Shapes that are not multiples of any tile or warp (1x1x1, odd, primes, 1000+), plus aligned ones.
// Under compute-sanitizer (COURSE_SANITIZER=1) only the small ones, which exercise every edge.
inline bool under_sanitizer() { return std::getenv("COURSE_SANITIZER") != nullptr; }

inline std::vector<Shape> shapes() {
  std::vector<Shape> all = {{1, 1, 1}, {17, 33, 65}, {2, 129, 7}, {130, 129, 132}, {128, 96, 64}};
  if (!under_sanitizer()) {
    all.push_back({1031, 1000, 1017});
    all.push_back({256, 384, 512});
  }
  return all;
}

// Runs `run` on fresh random A, B (C starts poisoned with NaN where the caller poisons it) and
// checks every entry of C against the float64 reference.
template <class Run>
void check_against_reference(const Shape& s, Run&& run) {
  const std::uint64_t seed = course::fresh_seed();
  CAPTURE(seed);
  CAPTURE(s.M);
  CAPTURE(s.N);
  CAPTURE(s.K);
  const auto A = course::random_uniform(std::size_t(s.M) * s.K, seed);
  const auto B = course::random_uniform(std::size_t(s.K) * s.N, seed + 1);
  const std::vector<float> C = run(A, B);
  REQUIRE(C.size() == std::size_t(s.M) * s.N);
  const auto ref = reference(A.data(), B.data(), s.M, s.N, s.K);
  const auto cmp = course::compare(C.data(), ref.data(), ref.size(),
                                   course::fp32_sum_tolerance(std::size_t(s.K)), s.N);
  INFO(cmp.summary() << "\n" << cmp.first_mismatches);
  CHECK(cmp.ok());
}

}  // namespace matmul::testing
