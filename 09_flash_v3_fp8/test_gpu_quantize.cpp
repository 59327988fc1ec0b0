// Stage 09's quantisation on the GPU (a Hopper): the CPU's bytes and scales exactly, every scheme (V
// centred or not), fp16 and bf16, d = 64 and 128, N on both sides of a block; bad input (NaN and inf,
// V's descales too far apart, dtypes, misaligned inputs) refused with a message; and bf16 inputs so
// small that their scales need the floor, through the rungs.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "check.hpp"
#include "test_gpu_util.hpp"

using namespace attention;
using namespace attention::fp8;
using namespace attention::fp8::testing;
using course::Dtype;

TEST_CASE("the quantisation: the CPU's bytes, Vᵀ, scales and v̄, exactly, for every scheme, V centred or not") {
  const std::vector<int> Ns = course::testing::under_sanitizer() ? std::vector<int>{1, 300}
                                                                   : std::vector<int>{1, 77, 128, 129, 300, 1000};
  for (Dtype t : {Dtype::fp16, Dtype::bf16})
    for (int d : {64, 128})
      for (int N : Ns)
        for (const Scheme& plain : schemes())
          for (const Scheme& scheme : {plain, centred(plain)}) {
            const Shape s{2, 3, N, d, false};
            const std::uint64_t seed = course::fresh_seed();
            const Inputs in = make_inputs(s, t, seed);
            CAPTURE(s.text());
            CAPTURE(scheme.name());
            CAPTURE(seed);
            const QuantizedInputs cpu = quantize_inputs(s, in.Q, in.K, in.V, scheme, seed);
            course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(in.Kh), V(in.Vh);
            Fp8Buffers q(s);
            q.Q.poison();
            q.Vt.poison();
            launch_quantize(s, t, cpu.signs, Q.get(), K.get(), V.get(), q.view(scheme));
            check_quantized(s, q.view(scheme));
            CHECK(differing(q.Q.download(), cpu.Q.bytes) == 0);
            CHECK(differing(q.K.download(), cpu.K.bytes) == 0);
            CHECK(differing(q.Vt.download(), transpose_v(cpu.V)) == 0);
            CHECK(q.q_scale.download() == cpu.Q.scale);
            CHECK(q.k_scale.download() == cpu.K.scale);
            CHECK(q.v_scale.download() == cpu.V.scale);
            CHECK(q.v_mean.download() == cpu.v_mean);
          }
}

TEST_CASE("bad input: NaN and inf refused by the quantisation, V's descales 2^129 apart too; dtypes and misaligned inputs refused") {
  const Shape s{1, 1, 200, 64, false};
  Inputs in = make_inputs(s, Dtype::fp16, course::fresh_seed());
  for (float bad : {NAN, INFINITY})
    for (int where : {1, 2}) {  // in K, in V (whose column means see it first)
      std::vector<float> x = where == 1 ? in.K : in.V;
      x[333] = bad;
      auto xh = course::round_in_place(Dtype::fp16, x);
      course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(where == 1 ? xh : in.Kh), V(where == 2 ? xh : in.Vh);
      Fp8Buffers q(s);
      for (const Scheme& scheme : {schemes()[0], schemes()[3], centred(schemes()[0]), centred(schemes()[3])}) {
        CAPTURE(where);
        CAPTURE(scheme.name());
        launch_quantize(s, Dtype::fp16, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view(scheme));
        CHECK_THROWS_AS(check_quantized(s, q.view(scheme)), course::UsageError);
      }
    }
  {  // V per block, bf16: its first 128 keys near 1e-37 (a scale from 2^-119, a descale of 2^-127.8), the rest up
     // to 2000 (a descale near 4.5): 2^130 apart, past kMaxVScaleSpan, refused; per tensor (one descale) taken,
     // and centred too (v̄, about 180 in each column, brings the first block's values near −180: 2^3 apart)
    Inputs b = make_inputs(s, Dtype::bf16, course::fresh_seed());
    for (int k = 0; k < s.N; ++k)
      for (int c = 0; c < s.d; ++c) b.V[std::size_t(k) * s.d + c] *= k < kScaleRows ? 1e-37f : 1000.0f;
    const auto vh = course::round_in_place(Dtype::bf16, b.V);
    course::DeviceBuffer<std::uint16_t> Q(b.Qh), K(b.Kh), V(vh);
    Fp8Buffers q(s);
    for (const Scheme& scheme : {schemes()[1], schemes()[3]}) {
      CAPTURE(scheme.name());
      launch_quantize(s, Dtype::bf16, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view(scheme));
      CHECK_THROWS_AS(check_quantized(s, q.view(scheme)), course::UsageError);
    }
    for (const Scheme& scheme : {schemes()[0], centred(schemes()[1])}) {
      CAPTURE(scheme.name());
      launch_quantize(s, Dtype::bf16, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view(scheme));
      CHECK_NOTHROW(check_quantized(s, q.view(scheme)));
    }
  }
  {  // bf16 K near its largest value (3e38) in one row: finite, but the transform's sums overflow fp32. Both the
     // CPU and the kernel check the values they quantise: refused with the transform, taken without it.
    Inputs b = make_inputs(s, Dtype::bf16, course::fresh_seed());
    for (int c = 0; c < s.d; ++c) b.K[std::size_t(7) * s.d + c] = 3e38f;
    const auto kh = course::round_in_place(Dtype::bf16, b.K);
    course::DeviceBuffer<std::uint16_t> Q(b.Qh), K(kh), V(b.Vh);
    Fp8Buffers q(s);
    CHECK_THROWS_AS(quantize_inputs(s, b.Q, b.K, b.V, schemes()[2], 1), course::UsageError);
    launch_quantize(s, Dtype::bf16, random_signs(64, 1), Q.get(), K.get(), V.get(), q.view(schemes()[2]));
    CHECK_THROWS_AS(check_quantized(s, q.view(schemes()[2])), course::UsageError);
    launch_quantize(s, Dtype::bf16, {}, Q.get(), K.get(), V.get(), q.view(schemes()[0]));
    CHECK_NOTHROW(check_quantized(s, q.view(schemes()[0])));
  }
  course::DeviceBuffer<std::uint16_t> X(s.elements());
  Fp8Buffers q(s);
  const DeviceFp8 per_tensor = q.view(schemes()[0]), hadamard = q.view(schemes()[2]);
  CHECK_THROWS_AS(launch_quantize(s, Dtype::fp32, {}, X.get(), X.get(), X.get(), per_tensor), course::UsageError);
  // The copy engine takes each block's rows from a 16-byte aligned address: an input 2 or 8 bytes off 16
  // is refused with a message rather than faulting.
  for (int off : {1, 4}) {
    CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, {}, X.get() + off, X.get(), X.get(), per_tensor), course::UsageError);
    CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, {}, X.get(), X.get() + off, X.get(), per_tensor), course::UsageError);
    CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, {}, X.get(), X.get(), X.get() + off, per_tensor), course::UsageError);
  }
  for (int which : {0, 1})
    CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, random_signs(64, 1), which == 0 ? X.get() + 4 : X.get(),
                                    which == 1 ? X.get() + 4 : X.get(), X.get(), hadamard),
                    course::UsageError);
  // The transform without its d signs, and d = 32.
  CHECK_THROWS_AS(launch_quantize(s, Dtype::fp16, {}, X.get(), X.get(), X.get(), hadamard), course::UsageError);
  const Shape s32{1, 1, 200, 32, false};
  CHECK_THROWS_AS(launch_quantize(s32, Dtype::fp16, {}, X.get(), X.get(), X.get(), per_tensor), course::UsageError);
}

// bf16 inputs below 2^-119 (amax 2e-37): the scales come from 2^-119 (else 448/amax is inf and a 0 a NaN
// byte). Q's and K's descales then multiply to below fp32's smallest value, which the kernels floor
// (score_unit): N = 300 masks the last block's keys, causal the diagonal, and a masked score −inf times 0
// would be NaN (rung 7's FFMA.SAT saturates it away). And V's descale is 2^-127.8, so O = o · sv / l
// must take o / l first: sv / l is a subnormal of few bits (at N = 4096, 2 of them), O off by percents
// with V not centred (rungs 1, 2 and 7 at d = 64 at N = 4096; the wide rungs centre V).
TEST_CASE("bf16 inputs below 2^-119: the scale from 2^-119, no NaN byte, O and L within the bound in every rung") {
  const bool sanitizer = course::testing::under_sanitizer();
  for (int d : {64, 128})
    for (int N : sanitizer ? std::vector<int>{300} : std::vector<int>{300, 4096})
      for (bool causal : {false, true}) {
        if (N == 4096 && causal) continue;
        const Shape s{1, 2, N, d, causal};
        const std::uint64_t seed = course::fresh_seed();
        CAPTURE(s.text());
        CAPTURE(seed);
        Expected e(s, Dtype::bf16, make_inputs(s, Dtype::bf16, seed, 1.0f, -1e-37f, 2e-37f), seed);
        for (const Fp8Variant* v : variants_at(Dtype::bf16, d)) {
          if (v->wide(d) && N != 300) continue;
          for (const Scheme& scheme : {schemes()[0], schemes()[1]}) {  // per tensor, per block
            if (!v->takes(scheme, d)) continue;
            CAPTURE(v->name);
            CAPTURE(scheme.name());
            const Scheme by = v->quantised_by(scheme, d);
            const Run r = run(*v, s, Dtype::bf16, e.in, by, e.of(by).q);
            for (const auto* scales : {&r.q_scale, &r.k_scale, &r.v_scale})
              CHECK(std::all_of(scales->begin(), scales->end(), [](float x) { return x == kMinAmax / kE4m3Max; }));
            for (const auto* bytes : {&r.Q, &r.K, &r.Vt})
              CHECK(std::none_of(bytes->begin(), bytes->end(), [](std::uint8_t b) { return (b & 0x7F) == 0x7F; }));
            expect_match(*v, r, *e.of(by).ref);  // the CPU's bytes and scales; O and L against float64
          }
        }
      }
}
