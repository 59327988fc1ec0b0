// The device buffers of one backward run (CUDA builds only), allocated per run so that a run's
// peak device memory is its own: the inputs Q, K, V, dO, the forward's O and L (computed here by
// stage 06's fastest forward for the dtype), D, the gradients, and dQacc for the atomic variants.
// Standard attention instead runs its own forward, which keeps P (and needs a second N² buffer
// for dP and dS). With `tail` > 0 (a test's), every buffer but standard attention's N² ones is
// `tail` elements longer than its tensor, and those elements hold garbage: all bits set, a NaN
// in fp32, fp16 and bf16 alike (kGarbage16, kGarbage32); tail_untouched() checks them afterwards.
#pragma once
#if COURSE_HAS_CUDA

#include <cstdint>
#include <cstring>
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

constexpr std::uint16_t kGarbage16 = 0xFFFF;
constexpr std::uint32_t kGarbage32 = 0xFFFFFFFFu;

struct BackwardDeviceRun {
  course::Dtype t;
  course::DeviceBuffer<float> Qf, Kf, Vf, Of, dOf, dQf, dKf, dVf;                   // fp32
  course::DeviceBuffer<std::uint16_t> Qh, Kh, Vh, Oh, dOh, dQh, dKh, dVh;          // fp16, bf16
  course::DeviceBuffer<float> L, D, dQacc;
  course::DeviceBuffer<std::uint16_t> P, dS;  // standard attention, 16-bit
  course::DeviceBuffer<float> work, T;         // standard attention, fp32 (kernels.cuh)
  course::DeviceBuffer<float> O32;             // use_unrounded_o: O before its rounding, fp32
  bool standard;
  std::size_t n = 0, rows = 0, tail = 0;  // elements of a tensor, rows of L and D, garbage past each

  BackwardDeviceRun(const Shape& s, course::Dtype dtype, const BackwardInputs& in, const BwdVariant& v,
                    std::size_t tail_ = 0)
      : t(dtype), standard(v.standard), n(s.elements()), rows(std::size_t(s.heads()) * s.N), tail(tail_) {
    const bool atomic = !v.standard && !v.plan.deterministic;
    if (t == course::Dtype::fp32) {
      Qf = input(in.fwd.Q), Kf = input(in.fwd.K), Vf = input(in.fwd.V), dOf = input(in.dO);
      Of = output<float>(n), dQf = output<float>(n), dKf = output<float>(n), dVf = output<float>(n);
    } else {
      Qh = input(in.fwd.Qh), Kh = input(in.fwd.Kh), Vh = input(in.fwd.Vh), dOh = input(in.dOh);
      Oh = output<std::uint16_t>(n), dQh = output<std::uint16_t>(n);
      dKh = output<std::uint16_t>(n), dVh = output<std::uint16_t>(n);
    }
    L = output<float>(rows);
    D = output<float>(rows);
    if (atomic) dQacc = output<float>(n);
    const std::size_t square = std::size_t(s.heads()) * s.N * s.N;
    if (standard && fp32()) {
      work = course::DeviceBuffer<float>(standard_workspace_floats(s)), T = course::DeviceBuffer<float>(square);
    } else if (standard) {
      P = course::DeviceBuffer<std::uint16_t>(square), dS = course::DeviceBuffer<std::uint16_t>(square);
    }
  }
  // An input on the device, followed by `tail` elements of garbage (a copy of the host values
  // only then: the program's inputs reach gigabytes).
  template <class T>
  course::DeviceBuffer<T> input(const std::vector<T>& host) const {
    if (!tail) return course::DeviceBuffer<T>(host);
    T garbage;
    if constexpr (sizeof(T) == 2) garbage = kGarbage16;
    else std::memcpy(&garbage, &kGarbage32, sizeof garbage);
    std::vector<T> padded(host);
    padded.resize(host.size() + tail, garbage);
    return course::DeviceBuffer<T>(padded);
  }
  // An output (or D, L, dQacc) of `count` elements, and its tail, all garbage until written.
  template <class T>
  course::DeviceBuffer<T> output(std::size_t count) const {
    course::DeviceBuffer<T> b(count + tail);
    if (tail) b.poison();  // all bits set
    return b;
  }
  // Whether every element past every tensor's end still holds its garbage (nothing was written
  // there); the names of the buffers whose tail changed go to `which`.
  bool tail_untouched(std::string& which) const {
    auto check16 = [&](const char* name, const course::DeviceBuffer<std::uint16_t>& b, std::size_t count) {
      if (!b.size()) return;
      for (std::uint16_t x : b.download(count, tail))
        if (x != kGarbage16) return void(which += std::string(which.empty() ? "" : ", ") + name);
    };
    auto check32 = [&](const char* name, const course::DeviceBuffer<float>& b, std::size_t count) {
      if (!b.size()) return;
      for (float x : b.download(count, tail)) {
        std::uint32_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        if (bits != kGarbage32) return void(which += std::string(which.empty() ? "" : ", ") + name);
      }
    };
    which.clear();
    check32("Q", Qf, n), check32("K", Kf, n), check32("V", Vf, n), check32("dO", dOf, n), check32("O", Of, n);
    check32("dQ", dQf, n), check32("dK", dKf, n), check32("dV", dVf, n);
    check16("Q", Qh, n), check16("K", Kh, n), check16("V", Vh, n), check16("dO", dOh, n), check16("O", Oh, n);
    check16("dQ", dQh, n), check16("dK", dKh, n), check16("dV", dVh, n);
    check32("L", L, rows), check32("D", D, rows), check32("dQacc", dQacc, n), check32("O32", O32, n);
    return which.empty();
  }
  bool fp32() const { return t == course::Dtype::fp32; }
  // Chapter 07's "precision of D": the forward also writes O before its rounding (fp32), and D is
  // taken from that. FlashAttention's 16-bit runs only (fp32 has no rounding to undo; standard
  // attention has its own forward): elsewhere a no-op.
  void use_unrounded_o() {
    if (!fp32() && !standard) O32 = output<float>(n);
  }
  // O and L: `with` (stage 11: stage 08's forward) when given, else stage 06's (flash_v2 in fp32,
  // tuned on the tensor cores); standard attention: O and P, by its own forward.
  void forward(const Shape& s, const ForwardVariant* with = nullptr) {
    if (standard) return launch_standard_forward(s, t, args(), fp32() ? static_cast<void*>(Of.get()) : Oh.get());
    if (O32.size()) return launch_tc_tuned_unrounded(s, t, Qh.get(), Kh.get(), Vh.get(), Oh.get(), L.get(), O32.get());
    const std::string name = fp32() ? "flash_v2" : "tuned";  // named: no reference to a temporary
    const ForwardVariant& v = with ? *with : v2_registry().find(name);
    v.launch(s, t, args().Q, args().K, args().V, fp32() ? static_cast<void*>(Of.get()) : Oh.get(), L.get());
  }
  BackwardArgs args() {
    if (fp32())
      return {Qf.get(), Kf.get(), Vf.get(), Of.get(), dOf.get(), L.get(), D.get(), dQacc.get(), dQf.get(), dKf.get(), dVf.get(),
              nullptr, nullptr, work.get(), T.get()};
    BackwardArgs a{Qh.get(), Kh.get(), Vh.get(), Oh.get(), dOh.get(), L.get(), D.get(), dQacc.get(), dQh.get(), dKh.get(),
                   dVh.get(), P.get(), dS.get()};
    a.O32 = O32.size() ? O32.get() : nullptr;
    return a;
  }
  // Standard attention's N² buffers poisoned (NaN in fp16 and bf16): an element of S or dP that
  // cuBLAS did not write turns its row of P or dS, and so the gradients, into NaN.
  void poison_workspace() {
    for (auto* b : {&P, &dS})
      if (b->size()) b->poison();
  }
  // Every output (and D, dQacc) poisoned: an element nobody writes fails the comparison. (All bits
  // set, the tails' garbage too.)
  void poison() {
    for (auto* b : {&dQf, &dKf, &dVf, &D, &dQacc})
      if (b->size()) b->poison();
    for (auto* b : {&dQh, &dKh, &dVh})
      if (b->size()) b->poison();
  }
  std::vector<float> values(const course::DeviceBuffer<float>& f, const course::DeviceBuffer<std::uint16_t>& h) const {
    return fp32() ? f.download(0, n) : course::to_floats(t, h.download(0, n));
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
