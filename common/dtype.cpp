#include "dtype.hpp"

#include <cmath>
#include <cstring>

#include "check.hpp"

namespace course {

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// bf16 is the top half of a float32: add half an ulp of the kept part (plus one if the kept part
// is odd, for ties to even) and truncate.
std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stays a (quiet) NaN
  const std::uint32_t rounded = u + 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(rounded >> 16);
}

std::uint16_t float_to_fp16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(x);
  if (std::isnan(x)) return sign | 0x7E00;
  if (a >= 65520.0f) return sign | 0x7C00;  // 65504 + half an ulp (32) and beyond: ±inf
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal (or zero): a multiple of 2^-24. nearbyint rounds to nearest, ties to even, in the
    // default rounding mode; the product is exact.
    return sign | static_cast<std::uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  // Normal: keep 10 of float's 23 fraction bits, rounding to nearest even; a carry out of the
  // fraction moves the exponent up, which is the right result (up to 0x7C00 = inf, excluded above).
  const std::uint32_t magnitude = u & 0x7FFFFFFF;
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;  // 1..30
  std::uint32_t half = (exponent << 10) | ((magnitude >> 13) & 0x3FF);
  const std::uint32_t rest = magnitude & 0x1FFF;  // the 13 bits dropped
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<std::uint16_t>(half);
}

float fp16_to_float(std::uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1F, fraction = h & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(float(fraction), -24);
  if (exponent == 31) return fraction ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(float(1024 + fraction), exponent - 25);
}

}  // namespace

const char* name(Dtype t) {
  switch (t) {
    case Dtype::fp32: return "fp32";
    case Dtype::fp16: return "fp16";
    case Dtype::bf16: return "bf16";
  }
  return "?";
}

Dtype parse_dtype(const std::string& text) {
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    if (text == name(t)) return t;
  throw UsageError("unknown dtype '" + text + "': expected fp32, fp16 or bf16");
}

std::size_t bytes_of(Dtype t) { return t == Dtype::fp32 ? 4 : 2; }

double unit_roundoff(Dtype t) {
  return std::ldexp(1.0, t == Dtype::fp32 ? -24 : t == Dtype::fp16 ? -11 : -8);
}

std::uint16_t float_to_bits(Dtype t, float x) {
  require(t != Dtype::fp32, "float_to_bits: fp32 has no 16-bit form");
  return t == Dtype::fp16 ? float_to_fp16(x) : float_to_bf16(x);
}

float bits_to_float(Dtype t, std::uint16_t bits) {
  require(t != Dtype::fp32, "bits_to_float: fp32 has no 16-bit form");
  return t == Dtype::fp16 ? fp16_to_float(bits) : float_of(std::uint32_t(bits) << 16);
}

float round_to(Dtype t, float x) {
  return t == Dtype::fp32 ? x : bits_to_float(t, float_to_bits(t, x));
}

std::vector<std::uint16_t> round_in_place(Dtype t, std::vector<float>& values) {
  std::vector<std::uint16_t> bits;
  if (t == Dtype::fp32) return bits;
  bits.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    bits[i] = float_to_bits(t, values[i]);
    values[i] = bits_to_float(t, bits[i]);
  }
  return bits;
}

std::vector<float> to_floats(Dtype t, const std::vector<std::uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bits_to_float(t, bits[i]);
  return out;
}

}  // namespace course
