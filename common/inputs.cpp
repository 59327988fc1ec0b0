#include "inputs.hpp"

#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

#include "check.hpp"

namespace course {

std::uint64_t fresh_seed() {
  if (const char* text = std::getenv("COURSE_SEED")) {
    // Any seed fresh_seed prints: every 64-bit value, up to 20 digits (a limit of 19 refused half of them).
    const std::string value(text);
    const std::string message = "COURSE_SEED must be an integer from 0 to 2^64 - 1, got '" + value + "'";
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 20) {
      throw UsageError(message);
    }
    try {
      return std::stoull(value);
    } catch (const std::out_of_range&) {
      throw UsageError(message);
    }
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

std::vector<float> random_uniform(std::size_t n, std::uint64_t seed, float lo, float hi) {
  require(lo < hi, "random_uniform: empty range");
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> distribution(lo, hi);
  std::vector<float> values(n);
  for (float& v : values) v = distribution(generator);
  return values;
}

}  // namespace course
