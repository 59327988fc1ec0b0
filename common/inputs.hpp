// Random inputs: never zero-mean, never constant, a fresh seed every run (printed, so a failing run
// can be repeated with --seed or COURSE_SEED).
#pragma once

#include <cstdint>
#include <vector>

namespace course {

// COURSE_SEED from the environment if set, otherwise a fresh random seed.
std::uint64_t fresh_seed();

// n values uniform in [lo, hi). The default range has mean 0.5 and both signs.
std::vector<float> random_uniform(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 2.0f);

}  // namespace course
