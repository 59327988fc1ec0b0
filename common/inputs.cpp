#include "inputs.hpp"

#include <cstdlib>
#include <random>
#include <string>

#include "check.hpp"

namespace course {

std::uint64_t fresh_seed() {
  if (const char* text = std::getenv("COURSE_SEED")) {
    const std::string value(text);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
        value.size() > 19) {
      throw UsageError("COURSE_SEED must be a non-negative integer, got '" + value + "'");
    }
    return std::stoull(value);
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
