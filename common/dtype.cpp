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
  if (a < 0x1p-14f) {
    // Subnormal (or zero): a multiple of 2^-24. nearbyint rounds to nearest, ties to even, in the
    // default rounding mode; the product is exact.
    return sign | static_cast<std::uint16_t>(std::nearbyint(a * 0x1p24f));
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
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1F, fraction = h & 0x3FF;
  if (exponent == 0) {  // zero or subnormal: fraction · 2^-24, exact in a float
    const float a = float(fraction) * 0x1p-24f;
    return sign ? -a : a;
  }
  if (exponent == 31) return float_of(sign | 0x7F800000 | (fraction << 13));  // inf, or NaN
  return float_of(sign | ((exponent - 15 + 127) << 23) | (fraction << 13));   // normal: re-biased
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
  if (t == Dtype::fp32) return x;
  return t == Dtype::fp16 ? fp16_to_float(float_to_fp16(x)) : float_of(std::uint32_t(float_to_bf16(x)) << 16);
}

// The loops below check the dtype once and call the conversions directly (require() builds its
// message string at every call: 30 ns a value, seconds for a large problem's inputs).
std::vector<std::uint16_t> round_in_place(Dtype t, std::vector<float>& values) {
  std::vector<std::uint16_t> bits;
  if (t == Dtype::fp32) return bits;
  bits.resize(values.size());
  const bool fp16 = t == Dtype::fp16;
  for (std::size_t i = 0; i < values.size(); ++i) {
    bits[i] = fp16 ? float_to_fp16(values[i]) : float_to_bf16(values[i]);
    values[i] = fp16 ? fp16_to_float(bits[i]) : float_of(std::uint32_t(bits[i]) << 16);
  }
  return bits;
}

std::vector<float> to_floats(Dtype t, const std::vector<std::uint16_t>& bits) {
  require(t != Dtype::fp32, "to_floats: fp32 has no 16-bit form");
  std::vector<float> out(bits.size());
  const bool fp16 = t == Dtype::fp16;
  for (std::size_t i = 0; i < bits.size(); ++i)
    out[i] = fp16 ? fp16_to_float(bits[i]) : float_of(std::uint32_t(bits[i]) << 16);
  return out;
}

}  // namespace course
