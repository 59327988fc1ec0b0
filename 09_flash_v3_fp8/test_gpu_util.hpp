// What stage 09's GPU tests share: quantise on the GPU, run a rung on poisoned O and L, and hold the
// result to the CPU's bytes and scales (exactly) and to float64 (twice plain FP8's error).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accuracy.hpp"
#include "attention/problem.hpp"
#include "device_buffer.hpp"
#include "device_fp8.hpp"
#include "fp8.hpp"
#include "kernels.cuh"
#include "testing/sanitizer.hpp"
#include "variants.hpp"

namespace attention::fp8::testing {

struct Run {
  QuantizedInputs cpu;  // the CPU's quantisation of the same inputs
  std::vector<std::uint8_t> Q, K, Vt;
  std::vector<float> q_scale, k_scale, v_scale, v_mean, O, L;
};

// What a test may change between the quantisation and the attention (the CPU's quantisation and the
// device's buffers alike), or nothing.
using BeforeAttention = std::function<void(QuantizedInputs&, Fp8Buffers&)>;

// Quantises `in` by `scheme` on the GPU, runs rung `v` on poisoned O and L, brings it all back; `cpu` is
// the CPU's quantisation of the same inputs by the same scheme.
inline Run run(const Fp8Variant& v, const Shape& s, course::Dtype t, const Inputs& in, const Scheme& scheme,
               QuantizedInputs cpu, const LaunchOptions& options = {}, const BeforeAttention& before = {}) {
  Run r;
  r.cpu = std::move(cpu);
  course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(in.Kh), V(in.Vh), O(s.elements());
  course::DeviceBuffer<float> L(std::size_t(s.heads()) * s.N);
  Fp8Buffers q(s);
  O.poison();
  L.poison();
  q.Q.poison();
  q.Vt.poison();
  launch_quantize(s, t, r.cpu.signs, Q.get(), K.get(), V.get(), q.view(scheme));
  check_quantized(s, q.view(scheme));
  if (before) before(r.cpu, q);
  REQUIRE(static_cast<bool>(v.launch));
  v.launch(s, t, q.view(scheme), O.get(), L.get(), options);
  CUDA_CHECK(cudaDeviceSynchronize());
  r.Q = q.Q.download(), r.K = q.K.download(), r.Vt = q.Vt.download();
  r.q_scale = q.q_scale.download(), r.k_scale = q.k_scale.download(), r.v_scale = q.v_scale.download();
  r.v_mean = q.v_mean.download();
  r.O = course::to_floats(t, O.download());
  r.L = L.download();
  return r;
}
inline Run run(const Fp8Variant& v, const Shape& s, course::Dtype t, const Inputs& in, const Scheme& scheme,
               std::uint64_t sign_seed, const LaunchOptions& options = {}, const BeforeAttention& before = {}) {
  return run(v, s, t, in, scheme, quantize_inputs(s, in.Q, in.K, in.V, scheme, sign_seed), options, before);
}

// The CPU's side of the checks on one problem's inputs: for each scheme, its quantisation and the float64 and
// plain-FP8 reference on those bytes, made once and shared by every rung checked on them (they cost the CPU
// far more than a rung's run costs the GPU).
class Expected {
 public:
  struct Side {
    QuantizedInputs q;
    std::unique_ptr<Fp8Reference> ref;
  };
  Expected(const Shape& shape, course::Dtype dtype, Inputs inputs, std::uint64_t sign_seed)
      : s(shape), t(dtype), in(std::move(inputs)), seed(sign_seed) {}
  const Side& of(const Scheme& scheme) {
    std::unique_ptr<Side>& side = sides_[scheme.name()];
    if (!side) {
      side = std::make_unique<Side>();
      side->q = quantize_inputs(s, in.Q, in.K, in.V, scheme, seed);
      side->ref = std::make_unique<Fp8Reference>(s, t, in.Q, in.K, in.V, side->q);
    }
    return *side;
  }
  const Shape s;
  const course::Dtype t;
  const Inputs in;
  const std::uint64_t seed;

 private:
  std::map<std::string, std::unique_ptr<Side>> sides_;
};

inline std::size_t differing(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// What a check holds a run to: the quantisation gave the CPU's bytes and scales exactly (the same float
// operations in the same order), and O and L lie within twice plain FP8's error of float64 (`ref`).
inline void expect_match(const Fp8Variant& v, const Run& r, const Fp8Reference& ref) {
  CHECK(differing(r.Q, r.cpu.Q.bytes) == 0);
  CHECK(differing(r.K, r.cpu.K.bytes) == 0);
  CHECK(differing(r.Vt, transpose_v(r.cpu.V)) == 0);
  CHECK(r.q_scale == r.cpu.Q.scale);
  CHECK(r.k_scale == r.cpu.K.scale);
  CHECK(r.v_scale == r.cpu.V.scale);
  CHECK(r.v_mean == r.cpu.v_mean);
  // P̃ by the lin rule (up to 3.1% off 2^x, 1% high on average): L may sit up to log 1.031 from plain FP8's.
  const double lin_L = v.lin ? std::log1p(kLinMaxRelError) : 0.0;
  const auto O = ref.check_O(r.O.data()), L = ref.check_L(r.L.data(), lin_L);
  INFO("O: " << O.summary() << " (plain FP8 " << ref.plain_error_O() << ")\n" << O.first_mismatches);
  INFO("L: " << L.summary() << " (plain FP8 " << ref.plain_error_L() << ")\n" << L.first_mismatches);
  CHECK(O.ok());
  CHECK(L.ok());
}

// Rung `v` on e's inputs, quantised by the scheme it runs when asked for `asked` (V centred for the wide
// rungs), held to expect_match.
inline void check(const Fp8Variant& v, Expected& e, const Scheme& asked, const LaunchOptions& options = {}) {
  const Scheme scheme = v.quantised_by(asked, e.s.d);
  const std::string rung = v.name, name = scheme.name();
  CAPTURE(rung);
  CAPTURE(name);
  const Expected::Side& side = e.of(scheme);
  expect_match(v, run(v, e.s, e.t, e.in, scheme, side.q, options), *side.ref);
}
// The same on `in` alone; `before` may change the CPU's quantisation, the device's and `in` (the float64
// reference is made from them after it).
inline void check(const Fp8Variant& v, const Shape& s, course::Dtype t, const Inputs& in, const Scheme& asked,
                  std::uint64_t seed, const LaunchOptions& options = {}, const BeforeAttention& before = {}) {
  const Scheme scheme = v.quantised_by(asked, s.d);
  const std::string rung = v.name, name = scheme.name();
  CAPTURE(rung);
  CAPTURE(name);
  const Run r = run(v, s, t, in, scheme, seed, options, before);
  expect_match(v, r, Fp8Reference(s, t, in.Q, in.K, in.V, r.cpu));
}

// Every rung and ablation of the registry that runs (dtype, d), and every scheme each takes there.
inline std::vector<const Fp8Variant*> variants_at(course::Dtype t, int d) {
  std::vector<const Fp8Variant*> out;
  for (const auto* list : {&fp8_registry().rungs(), &fp8_registry().ablations()})
    for (const Fp8Variant& v : *list)
      if (v.supports(t, d)) out.push_back(&v);
  return out;
}

}  // namespace attention::fp8::testing
