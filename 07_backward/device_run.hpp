// The device buffers of one backward run (CUDA builds only), allocated per run so that a run's
// peak device memory is its own: the inputs Q, K, V, dO, the forward's O and L (computed here by
// stage 06's fastest forward for the dtype), D, the gradients, and dQacc for the atomic variants.
// Standard attention instead runs its own forward, which keeps P (and needs a second N² buffer
// for dP and dS).
#pragma once
#if COURSE_HAS_CUDA

#include <cstdint>
#include <string>
#include <vector>

#include "../05_flash_v1/kernels.cuh"  // standard_workspace_floats
#include "../06_flash_v2/kernels.cuh"
#include "../06_flash_v2/variants.hpp"
#include "device_buffer.hpp"
#include "kernels.cuh"
#include "problem.hpp"
#include "variants.hpp"

namespace attention {

struct BackwardDeviceRun {
  course::Dtype t;
  course::DeviceBuffer<float> Qf, Kf, Vf, Of, dOf, dQf, dKf, dVf;                   // fp32
  course::DeviceBuffer<std::uint16_t> Qh, Kh, Vh, Oh, dOh, dQh, dKh, dVh;          // fp16, bf16
  course::DeviceBuffer<float> L, D, dQacc;
  course::DeviceBuffer<std::uint16_t> P, dS;  // standard attention, 16-bit
  course::DeviceBuffer<float> work, T;         // standard attention, fp32 (kernels.cuh)
  bool standard;

  BackwardDeviceRun(const Shape& s, course::Dtype dtype, const BackwardInputs& in, const BwdVariant& v)
      : t(dtype), standard(v.standard) {
    const bool atomic = !v.standard && !v.plan.deterministic;
    const std::size_t n = s.elements(), rows = std::size_t(s.heads()) * s.N;
    if (t == course::Dtype::fp32) {
      Qf = course::DeviceBuffer<float>(in.fwd.Q), Kf = course::DeviceBuffer<float>(in.fwd.K);
      Vf = course::DeviceBuffer<float>(in.fwd.V), dOf = course::DeviceBuffer<float>(in.dO);
      Of = course::DeviceBuffer<float>(n), dQf = course::DeviceBuffer<float>(n);
      dKf = course::DeviceBuffer<float>(n), dVf = course::DeviceBuffer<float>(n);
    } else {
      Qh = course::DeviceBuffer<std::uint16_t>(in.fwd.Qh), Kh = course::DeviceBuffer<std::uint16_t>(in.fwd.Kh);
      Vh = course::DeviceBuffer<std::uint16_t>(in.fwd.Vh), dOh = course::DeviceBuffer<std::uint16_t>(in.dOh);
      Oh = course::DeviceBuffer<std::uint16_t>(n), dQh = course::DeviceBuffer<std::uint16_t>(n);
      dKh = course::DeviceBuffer<std::uint16_t>(n), dVh = course::DeviceBuffer<std::uint16_t>(n);
    }
    L = course::DeviceBuffer<float>(rows);
    D = course::DeviceBuffer<float>(rows);
    if (atomic) dQacc = course::DeviceBuffer<float>(n);
    const std::size_t square = std::size_t(s.heads()) * s.N * s.N;
    if (standard && fp32()) {
      work = course::DeviceBuffer<float>(standard_workspace_floats(s)), T = course::DeviceBuffer<float>(square);
    } else if (standard) {
      P = course::DeviceBuffer<std::uint16_t>(square), dS = course::DeviceBuffer<std::uint16_t>(square);
    }
  }
  bool fp32() const { return t == course::Dtype::fp32; }
  // O and L: stage 06's forward (flash_v2 in fp32, tuned on the tensor cores); standard
  // attention: O and P, by its own forward.
  void forward(const Shape& s) {
    if (standard) return launch_standard_forward(s, t, args(), fp32() ? static_cast<void*>(Of.get()) : Oh.get());
    const std::string name = fp32() ? "flash_v2" : "tuned";  // named: no reference to a temporary
    const V2Variant& v = v2_variant(name);
    v.launch(s, t, args().Q, args().K, args().V, fp32() ? static_cast<void*>(Of.get()) : Oh.get(), L.get());
  }
  BackwardArgs args() {
    if (fp32())
      return {Qf.get(), Kf.get(), Vf.get(), Of.get(), dOf.get(), L.get(), D.get(), dQacc.get(), dQf.get(), dKf.get(), dVf.get(),
              nullptr, nullptr, work.get(), T.get()};
    return {Qh.get(), Kh.get(), Vh.get(), Oh.get(), dOh.get(), L.get(), D.get(), dQacc.get(), dQh.get(), dKh.get(), dVh.get(),
            P.get(), dS.get()};
  }
  // Standard attention's N² buffers poisoned (NaN in fp16 and bf16): an element of S or dP that
  // cuBLAS did not write turns its row of P or dS, and so the gradients, into NaN.
  void poison_workspace() {
    for (auto* b : {&P, &dS})
      if (b->size()) b->poison();
  }
  // Every output (and D, dQacc) poisoned: an element nobody writes fails the comparison.
  void poison() {
    for (auto* b : {&dQf, &dKf, &dVf, &D, &dQacc})
      if (b->size()) b->poison();
    for (auto* b : {&dQh, &dKh, &dVh})
      if (b->size()) b->poison();
  }
  std::vector<float> values(const course::DeviceBuffer<float>& f, const course::DeviceBuffer<std::uint16_t>& h) const {
    return fp32() ? f.download() : course::to_floats(t, h.download());
  }
  // Only the given heads (head_size elements each), one after another: what the float64 check
  // compares (BackwardReference::check_all_heads).
  std::vector<float> heads(int which, const std::vector<int>& heads, std::size_t head_size) const {
    const course::DeviceBuffer<float>* f[3] = {&dQf, &dKf, &dVf};
    const course::DeviceBuffer<std::uint16_t>* h[3] = {&dQh, &dKh, &dVh};
    std::vector<float> out;
    for (int head : heads) {
      const std::size_t first = std::size_t(head) * head_size;
      const auto x = fp32() ? f[which]->download(first, head_size)
                            : course::to_floats(t, h[which]->download(first, head_size));
      out.insert(out.end(), x.begin(), x.end());
    }
    return out;
  }
  std::vector<float> dQ() const { return values(dQf, dQh); }
  std::vector<float> dK() const { return values(dKf, dKh); }
  std::vector<float> dV() const { return values(dVf, dVh); }
  std::vector<float> O() const { return values(Of, Oh); }
};

}  // namespace attention

#endif  // COURSE_HAS_CUDA
