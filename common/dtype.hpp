// The element types of the tensor-core stages: fp32, and the 16-bit formats the tensor cores take,
// fp16 (IEEE binary16: 5 exponent bits, 10 fraction bits) and bf16 (bfloat16: 8 exponent bits, 7
// fraction bits, the top half of a float32). On the host a 16-bit value is kept as its bits in a
// std::uint16_t, so the CPU-only build needs no CUDA header; the GPU reads the same bits as __half
// or __nv_bfloat16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace course {

enum class Dtype { fp32, fp16, bf16 };

const char* name(Dtype t);                   // "fp32", "fp16", "bf16": the CSV's dtype column
Dtype parse_dtype(const std::string& text);  // throws UsageError for anything else
std::size_t bytes_of(Dtype t);               // 4 or 2
// The unit roundoff u = 2^-p of the format (p fraction bits + 1): 2^-24, 2^-11, 2^-8.
double unit_roundoff(Dtype t);

// float -> 16 bits, rounding to nearest, ties to even (as __float2half_rn and __float2bfloat16_rn
// do): values beyond the largest finite one become ±inf, tiny ones fp16 subnormals or ±0; NaN
// stays NaN.
std::uint16_t float_to_bits(Dtype t, float x);
float bits_to_float(Dtype t, std::uint16_t bits);
// x rounded to the format (the identity for fp32).
float round_to(Dtype t, float x);

// Rounds every value of `values` to the format in place, and returns their bits (empty for fp32).
std::vector<std::uint16_t> round_in_place(Dtype t, std::vector<float>& values);
std::vector<float> to_floats(Dtype t, const std::vector<std::uint16_t>& bits);

}  // namespace course
