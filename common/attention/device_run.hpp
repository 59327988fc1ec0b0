// The device buffers of one forward run (CUDA builds only), allocated per run so that a run's peak
// device memory is its own: Q, K, V and O in the run's dtype, L, and (stage 05's flash_v1) m.
#pragma once
#if COURSE_HAS_CUDA

#include <cstdint>
#include <vector>

#include "attention/problem.hpp"
#include "attention/shape.hpp"
#include "device_buffer.hpp"
#include "dtype.hpp"

namespace attention {

// Device buffers of one run, allocated per row so that the row's peak memory is its own.
struct DeviceRun {
  course::DeviceBuffer<float> Qf, Kf, Vf, Of, L, m;  // fp32 (m: flash_v1's row maxima)
  course::DeviceBuffer<std::uint16_t> Qh, Kh, Vh, Oh;
  DeviceRun(const Shape& s, course::Dtype t, const Inputs& in, bool flash_v1 = false) {
    const std::size_t rows = std::size_t(s.heads()) * s.N;
    if (t == course::Dtype::fp32) {
      Qf = course::DeviceBuffer<float>(in.Q);
      Kf = course::DeviceBuffer<float>(in.K);
      Vf = course::DeviceBuffer<float>(in.V);
      Of = course::DeviceBuffer<float>(s.elements());
    } else {
      Qh = course::DeviceBuffer<std::uint16_t>(in.Qh);
      Kh = course::DeviceBuffer<std::uint16_t>(in.Kh);
      Vh = course::DeviceBuffer<std::uint16_t>(in.Vh);
      Oh = course::DeviceBuffer<std::uint16_t>(s.elements());
    }
    L = course::DeviceBuffer<float>(rows);
    if (flash_v1) m = course::DeviceBuffer<float>(rows);
  }
  const void* q() const { return Qh.size() ? static_cast<const void*>(Qh.get()) : Qf.get(); }
  const void* k() const { return Kh.size() ? static_cast<const void*>(Kh.get()) : Kf.get(); }
  const void* v() const { return Vh.size() ? static_cast<const void*>(Vh.get()) : Vf.get(); }
  void* o() { return Oh.size() ? static_cast<void*>(Oh.get()) : Of.get(); }
  void poison() {
    if (Oh.size()) Oh.poison();
    if (Of.size()) Of.poison();
    L.poison();
  }
  std::vector<float> O_values(course::Dtype t) const { return Oh.size() ? course::to_floats(t, Oh.download()) : Of.download(); }
};

}  // namespace attention

#endif  // COURSE_HAS_CUDA
