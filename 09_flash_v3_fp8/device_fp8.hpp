// The device buffers of one FP8 problem (kernels.cuh's DeviceFp8), owned: the quantised Q, K and Vᵀ,
// their descales, the per-tensor amax and the count of scale blocks holding NaN or inf.
#pragma once
#if COURSE_HAS_CUDA

#include <cstdint>

#include "device_buffer.hpp"
#include "fp8.hpp"
#include "kernels.cuh"

namespace attention::fp8 {

struct Fp8Buffers {
  course::DeviceBuffer<std::uint8_t> Q, K, Vt;
  course::DeviceBuffer<float> q_scale, k_scale, v_scale, amax;
  course::DeviceBuffer<int> bad;
  course::DeviceBuffer<float> v_mean, v_sums;
  explicit Fp8Buffers(const Shape& s)
      : Q(s.elements()), K(s.elements()), Vt(std::size_t(s.heads()) * s.d * padded_keys(s.N)),
        q_scale(scales(s)), k_scale(scales(s)), v_scale(scales(s)), amax(3), bad(1),
        v_mean(std::size_t(s.heads()) * s.d), v_sums(scales(s) * s.d) {
    CUDA_CHECK(cudaMemset(bad.get(), 0, sizeof(int)));
  }
  static std::size_t scales(const Shape& s) { return std::size_t(s.heads()) * ((s.N + kScaleRows - 1) / kScaleRows); }
  // The buffers as the kernels take them, for tensors quantised (or to be) by `scheme`.
  DeviceFp8 view(const Scheme& scheme) {
    return {Q.get(),       K.get(),    Vt.get(),  q_scale.get(), k_scale.get(), v_scale.get(),
            amax.get(),    bad.get(),  v_mean.get(), v_sums.get(), scheme};
  }
  // Device memory a problem needs besides stage 06's (the quantised tensors, scales and v̄).
  static double bytes(const Shape& s) {
    return 2.0 * double(s.elements()) + double(s.heads()) * s.d * padded_keys(s.N) +
           double(scales(s)) * (12.0 + 4.0 * s.d) + 4.0 * s.heads() * s.d + 16.0;
  }
};

}  // namespace attention::fp8

#endif  // COURSE_HAS_CUDA
