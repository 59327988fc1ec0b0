// What every decode rung's kernel uses: 16-bit values to and from float, a lane's share of a row,
// chapter 04's rescale, and where a row's split-KV partial record lies. Device code of stage 12.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace inference {

template <class T>
__device__ inline float to_float(std::uint16_t bits) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(__ushort_as_half(bits));
  else return __bfloat162float(__ushort_as_bfloat16(bits));
}
template <class T>
__device__ inline std::uint16_t to_bits(float x) {
  if constexpr (std::is_same_v<T, __half>) return __half_as_ushort(__float2half_rn(x));
  else return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// A lane's E consecutive 16-bit values (E = 2 or 4: one 4- or 8-byte load) as floats.
template <class T, int E>
__device__ inline void load_values(const std::uint16_t* p, float (&x)[E]) {
  static_assert(E == 2 || E == 4, "a lane's share of a row: 2 or 4 values");
  std::uint16_t v[E];
  if constexpr (E == 4) *reinterpret_cast<uint2*>(v) = *reinterpret_cast<const uint2*>(p);
  else *reinterpret_cast<unsigned*>(v) = *reinterpret_cast<const unsigned*>(p);
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = to_float<T>(v[e]);
}

// 2^(from − to), 1 when from == to (so that −∞ − (−∞) is never taken), as chapter 04's rescale.
__device__ inline float rescale2(float from, float to) { return from == to ? 1.0f : exp2f(from - to); }

// Row l's (its index in L) partial record of `split`: d values of o, then L and 7 floats of padding.
__device__ inline std::size_t record_at(std::size_t l, int slots, int split, int d) {
  return (l * std::size_t(slots) + std::size_t(split)) * std::size_t(d + 8);
}

constexpr float kLn2 = 0.69314718f;  // L in natural log: log₂ terms times ln 2

}  // namespace inference
