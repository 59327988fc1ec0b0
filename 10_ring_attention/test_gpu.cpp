// Stage 10 on the GPU (a Hopper; the tests skip on any other GPU): the ring's O and L against
// float64 within stage 06's tolerance, G ranks on one GPU (Transport::copies) for every layout,
// causal or not, N that does not divide into the chunks, large logits; on a machine with 2 or more
// GPUs the ring over NCCL and over peer copies, which must give the same bits as the copies (the
// same kernels on the same bytes); stage 08's kernel with hidden keys (Nk); bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../03_safe_softmax/test_util.hpp"  // under_sanitizer
#include "../06_flash_v2/problem.hpp"
#include "../06_flash_v2/reference.hpp"
#include "../08_flash_v3/kernels.cuh"
#include "check.hpp"
#include "device_buffer.hpp"
#include "engine.hpp"
#include "inputs.hpp"

using namespace ring;
using attention::Shape;
using course::Dtype;

namespace {

struct Result {
  std::vector<std::uint16_t> O;
  std::vector<float> L;
};

Result run_ring(const Split& sp, const Shape& s, Dtype t, const attention::Inputs& in, Transport transport) {
  Engine engine(sp, s, t, transport);
  engine.upload(in.Qh.data(), in.Kh.data(), in.Vh.data());
  engine.poison();
  engine.forward();
  engine.wait(120.0);
  Result r{std::vector<std::uint16_t>(s.elements()), std::vector<float>(std::size_t(s.heads()) * s.N)};
  engine.download(r.O.data(), r.L.data());
  return r;
}

void check_result(const Shape& s, Dtype t, const attention::Inputs& in, const Result& r) {
  const attention::Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
  const auto O = course::to_floats(t, r.O);
  const auto cO = ref.check_O(O.data()), cL = ref.check_L(r.L.data());
  CHECK_MESSAGE(cO.ok(), cO.summary() << "\n" << cO.first_mismatches);
  CHECK_MESSAGE(cL.ok(), cL.summary() << "\n" << cL.first_mismatches);
}

}  // namespace

TEST_CASE("stage 08's kernel with hidden keys: keys at or past Nk do not count") {
  // Q against the first Nk keys of N: the same as the problem of N = Nk keys, computed over N rows.
  for (int d : {64, 128})
    for (auto [N, Nk] : {std::pair{200, 199}, std::pair{129, 1}, std::pair{300, 256}}) {
      const Shape s{1, 2, N, d, false};
      const auto in = attention::make_inputs(s, Dtype::fp16, course::fresh_seed());
      CAPTURE(s.text());
      CAPTURE(Nk);
      CAPTURE(in.seed);
      course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(in.Kh), V(in.Vh), O(s.elements());
      course::DeviceBuffer<float> L(std::size_t(s.heads()) * N);
      O.poison();
      L.poison();
      attention::launch_fa3_tuned_keys(s, Nk, Dtype::fp16, Q.get(), K.get(), V.get(), O.get(), L.get());
      const auto Of = course::to_floats(Dtype::fp16, O.download());
      const auto Lf = L.download();
      // The reference: every query row against the first Nk keys (K and V cut to Nk rows a head).
      // Shape N' = N with keys past Nk... is not a stage 06 shape, so compare row by row in float64.
      double worst = 0;
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < N; i += 7) {
          std::vector<double> sc(static_cast<std::size_t>(Nk));
          double m = -INFINITY;
          for (int j = 0; j < Nk; ++j) {
            double dot = 0;
            for (int e = 0; e < d; ++e)
              dot += double(in.Q[(std::size_t(h) * N + i) * d + e]) * in.K[(std::size_t(h) * N + j) * d + e];
            sc[std::size_t(j)] = dot / std::sqrt(double(d));
            m = std::max(m, sc[std::size_t(j)]);
          }
          double l = 0;
          for (double x : sc) l += std::exp(x - m);
          CHECK(std::abs(Lf[std::size_t(h) * N + i] - (m + std::log(l))) < 1e-3);
          for (int e = 0; e < d; ++e) {
            double o = 0;
            for (int j = 0; j < Nk; ++j) o += std::exp(sc[std::size_t(j)] - m) * in.V[(std::size_t(h) * N + j) * d + e];
            worst = std::max(worst, std::abs(Of[(std::size_t(h) * N + i) * d + e] - o / l));
          }
        }
      CHECK(worst < 4e-3);  // fp16 O of values up to 2 (P̃ and O rounded): a wrong key count errs by ~1/N
    }
  const Shape s{1, 1, 64, 64, false};
  course::DeviceBuffer<std::uint16_t> X(s.elements()), O(s.elements());
  course::DeviceBuffer<float> L(64);
  CHECK_THROWS_AS(attention::launch_fa3_tuned_keys(s, 0, Dtype::fp16, X.get(), X.get(), X.get(), O.get(), L.get()),
                  course::UsageError);
  CHECK_THROWS_AS(attention::launch_fa3_tuned_keys(s, 65, Dtype::fp16, X.get(), X.get(), X.get(), O.get(), L.get()),
                  course::UsageError);
}

TEST_CASE("the ring on one GPU (copies): O and L against float64, every layout, causal or not, uneven N") {
  struct Case {
    int B, H, N, d, G;
  };
  const bool quick = softmax::testing::under_sanitizer();
  const std::vector<Case> cases = quick ? std::vector<Case>{{1, 2, 301, 64, 3}}
                                        : std::vector<Case>{{1, 2, 1, 64, 1},    {1, 2, 97, 64, 3},   {2, 2, 1000, 128, 4},
                                                            {1, 4, 4097, 128, 2}, {1, 2, 777, 64, 4}, {1, 1, 8, 128, 4}};
  for (const Case& k : cases)
    for (bool causal : {false, true})
      for (bool zigzag : {false, true}) {
        if (k.N < (zigzag ? 2 : 1) * k.G) continue;
        for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
          const Shape s{k.B, k.H, k.N, k.d, causal};
          const Split sp(k.N, k.G, zigzag);
          const auto in = attention::make_inputs(s, t, course::fresh_seed());
          CAPTURE(s.text());
          CAPTURE(sp.text());
          CAPTURE(course::name(t));
          CAPTURE(in.seed);
          check_result(s, t, in, run_ring(sp, s, t, in, Transport::copies));
        }
      }
}

TEST_CASE("the ring with large logits (Q times 20): the merge through L stays finite and exact") {
  const Shape s{1, 2, 500, 64, true};
  for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
    const auto in = attention::make_inputs(s, t, course::fresh_seed(), 20.0f);
    CAPTURE(course::name(t));
    CAPTURE(in.seed);
    check_result(s, t, in, run_ring(Split(500, 4, true), s, t, in, Transport::copies));
  }
}

TEST_CASE("one rank is stage 08's kernel: the same bits") {
  const Shape s{1, 2, 333, 128, true};
  const auto in = attention::make_inputs(s, Dtype::bf16, course::fresh_seed());
  CAPTURE(in.seed);
  const Result r = run_ring(Split(333, 1, false), s, Dtype::bf16, in, Transport::copies);
  course::DeviceBuffer<std::uint16_t> Q(in.Qh), K(in.Kh), V(in.Vh), O(s.elements());
  course::DeviceBuffer<float> L(std::size_t(s.heads()) * s.N);
  attention::launch_fa3_tuned(s, Dtype::bf16, Q.get(), K.get(), V.get(), O.get(), L.get());
  CHECK(O.download() == r.O);
  CHECK(L.download() == r.L);
}

TEST_CASE("the ring over NCCL and over peer copies (2 or more GPUs): the same bits as the copies on one GPU") {
  const int gpus = gpu_count();
  if (gpus < 2) {
    MESSAGE("not run: this machine has " << gpus << " GPU");
    return;
  }
  const int G = std::min(gpus, 4);
  for (bool causal : {false, true})
    for (bool zigzag : {false, true}) {
      const Shape s{1, 2, 1001, 128, causal};
      const Split sp(1001, G, zigzag);
      const auto in = attention::make_inputs(s, Dtype::fp16, course::fresh_seed());
      CAPTURE(s.text());
      CAPTURE(sp.text());
      CAPTURE(in.seed);
      const Result copies = run_ring(sp, s, Dtype::fp16, in, Transport::copies);
      check_result(s, Dtype::fp16, in, copies);
      const Result peer = run_ring(sp, s, Dtype::fp16, in, Transport::peer);
      CHECK(peer.O == copies.O);
      CHECK(peer.L == copies.L);
      if (!built_with_nccl()) {
        MESSAGE("NCCL not run: built without NCCL");
        continue;
      }
      const Result nccl = run_ring(sp, s, Dtype::fp16, in, Transport::nccl);
      CHECK(nccl.O == copies.O);
      CHECK(nccl.L == copies.L);
    }
}

TEST_CASE("bad input: fp32, more NCCL ranks than GPUs, a sequence that does not split") {
  const Shape s{1, 1, 64, 64, false};
  CHECK_THROWS_AS(Engine(Split(64, 2, false), s, Dtype::fp32, Transport::copies), course::UsageError);
  CHECK_THROWS_AS(Engine(Split(64, gpu_count() + 1, false), s, Dtype::fp16, Transport::nccl), course::UsageError);
  CHECK_THROWS_AS(Split(3, 2, true), course::UsageError);
}
