// Stage 10 on the GPU (a Hopper; the tests skip on any other GPU): the ring's O and L against
// float64 within stage 06's tolerance, G ranks on one GPU (Transport::copies) for every layout,
// causal or not, N that does not divide into the chunks, large logits; on a machine with 2 or more
// GPUs the ring over NCCL and over peer copies, which must give the same bits as the copies (the
// same kernels on the same bytes); stage 08's kernel with hidden keys (Nk); bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "testing/sanitizer.hpp"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "../07_backward/kernels.cuh"
#include "../07_backward/problem.hpp"
#include "../07_backward/reference.hpp"
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

struct Gradients {
  std::vector<std::uint16_t> dQ, dK, dV;
};

Gradients run_ring_backward(const Split& sp, const Shape& s, Dtype t, const attention::BackwardInputs& in,
                            Transport transport) {
  Engine engine(sp, s, t, transport);
  engine.upload(in.fwd.Qh.data(), in.fwd.Kh.data(), in.fwd.Vh.data());
  engine.upload_dO(in.dOh.data());
  engine.forward();
  engine.poison_transit();  // the backward must fill kv[1], kv[2] itself, not find the forward's shards
  engine.backward();
  engine.wait(120.0);
  Gradients g{std::vector<std::uint16_t>(s.elements()), std::vector<std::uint16_t>(s.elements()),
              std::vector<std::uint16_t>(s.elements())};
  engine.download_gradients(g.dQ.data(), g.dK.data(), g.dV.data());
  return g;
}

// The ring rounds each query chunk's share of dK, dV apart: the reference's plain computation too.
void check_gradients(const Split& sp, const Shape& s, Dtype t, const attention::BackwardInputs& in,
                     const Gradients& g) {
  const attention::BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data(), 3,
                                         sp.starts());
  const auto dQ = course::to_floats(t, g.dQ), dK = course::to_floats(t, g.dK), dV = course::to_floats(t, g.dV);
  const auto c = ref.check_all(dQ.data(), dK.data(), dV.data());
  CHECK_MESSAGE(c.ok(), c.summary() << "\n" << c.first_mismatches);
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
  const bool quick = course::testing::under_sanitizer();
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

TEST_CASE("a second forward gives the same bits: every pass starts from the rank's own shard") {
  for (int G : {3, 4}) {
    const Shape s{1, 2, 301, 64, true};
    const Split sp(301, G, G == 4);
    const auto in = attention::make_inputs(s, Dtype::fp16, course::fresh_seed());
    CAPTURE(sp.text());
    CAPTURE(in.seed);
    Engine engine(sp, s, Dtype::fp16, Transport::copies);
    engine.upload(in.Qh.data(), in.Kh.data(), in.Vh.data());
    Result first{std::vector<std::uint16_t>(s.elements()), std::vector<float>(std::size_t(s.heads()) * s.N)};
    Result second = first;
    engine.forward();
    engine.wait(60.0);
    engine.download(first.O.data(), first.L.data());
    engine.poison();
    engine.poison_transit();
    engine.forward();
    engine.wait(60.0);
    engine.download(second.O.data(), second.L.data());
    CHECK(first.O == second.O);
    CHECK(first.L == second.L);
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
  for (int G = 2; G <= std::min(gpus, 4); ++G)
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

TEST_CASE("the ring's backward on one GPU (copies): dQ, dK, dV against float64, every layout, uneven N") {
  struct Case {
    int B, H, N, d, G;
  };
  const bool quick = course::testing::under_sanitizer();
  const std::vector<Case> cases = quick ? std::vector<Case>{{1, 2, 301, 64, 3}}
                                        : std::vector<Case>{{1, 2, 1, 64, 1}, {1, 2, 97, 64, 3}, {1, 2, 1000, 128, 4},
                                                            {1, 2, 2049, 128, 2}, {1, 1, 8, 128, 4}};
  for (const Case& k : cases)
    for (bool causal : {false, true})
      for (bool zigzag : {false, true}) {
        if (k.N < (zigzag ? 2 : 1) * k.G) continue;
        for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
          const Shape s{k.B, k.H, k.N, k.d, causal};
          const Split sp(k.N, k.G, zigzag);
          const auto in = attention::make_backward_inputs(s, t, course::fresh_seed());
          CAPTURE(s.text());
          CAPTURE(sp.text());
          CAPTURE(course::name(t));
          CAPTURE(in.fwd.seed);
          check_gradients(sp, s, t, in, run_ring_backward(sp, s, t, in, Transport::copies));
        }
      }
}

TEST_CASE("the ring's backward with every score far below 0 and padding keys: no NaN from hidden keys") {
  // N = 501 over 4 ranks: chunks of 126 and 125 rows, so some pairs' key chunks end in a padding
  // row (zeros). Inputs in [0.5, 1.5), Q times −20: every score near −160, so L ≈ −150, where a
  // padding key's score 0, were it not hidden, would give P = e^(0 − L) = inf, and dQ NaN.
  const Shape s{1, 2, 501, 64, false};
  for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
    const auto in = attention::make_backward_inputs(s, t, course::fresh_seed(), -20.0f, 0.5f, 1.5f);
    CAPTURE(course::name(t));
    CAPTURE(in.fwd.seed);
    const Split sp(501, 4, false);
    check_gradients(sp, s, t, in, run_ring_backward(sp, s, t, in, Transport::copies));
  }
}

TEST_CASE("a second backward gives the same dK and dV bits, and a forward after it the same O") {
  const Shape s{1, 2, 301, 64, true};
  const Split sp(301, 3, false);
  const auto in = attention::make_backward_inputs(s, Dtype::bf16, course::fresh_seed());
  CAPTURE(in.fwd.seed);
  Engine engine(sp, s, Dtype::bf16, Transport::copies);
  engine.upload(in.fwd.Qh.data(), in.fwd.Kh.data(), in.fwd.Vh.data());
  engine.upload_dO(in.dOh.data());
  std::vector<std::uint16_t> O1(s.elements()), O2(s.elements());
  std::vector<float> L1(std::size_t(s.heads()) * s.N), L2(L1.size());
  Gradients g1{std::vector<std::uint16_t>(s.elements()), std::vector<std::uint16_t>(s.elements()),
               std::vector<std::uint16_t>(s.elements())}, g2 = g1;
  engine.forward();
  engine.wait(60.0);
  engine.download(O1.data(), L1.data());
  for (Gradients* g : {&g1, &g2}) {
    engine.poison_transit();
    engine.backward();
    engine.wait(60.0);
    engine.download_gradients(g->dQ.data(), g->dK.data(), g->dV.data());
  }
  CHECK(g1.dK == g2.dK);
  CHECK(g1.dV == g2.dV);
  engine.poison();
  engine.poison_transit();
  engine.forward();
  engine.wait(60.0);
  engine.download(O2.data(), L2.data());
  CHECK(O1 == O2);
  CHECK(L1 == L2);
}

TEST_CASE("the backward's timeline: the sums' passes timed, inside the span; none after a forward") {
  const Shape s{1, 2, 600, 128, true};
  const auto in = attention::make_backward_inputs(s, Dtype::fp16, course::fresh_seed());
  for (int G : {1, 3}) {
    CAPTURE(G);
    Engine engine(Split(600, G, true), s, Dtype::fp16, Transport::copies);
    engine.upload(in.fwd.Qh.data(), in.fwd.Kh.data(), in.fwd.Vh.data());
    engine.upload_dO(in.dOh.data());
    engine.forward();
    for (const Engine::Timeline& t : engine.timeline()) {
      CHECK(t.span_ms > 0);
      CHECK(t.sums_ms == 0);
      CHECK(t.home_ms == 0);
    }
    engine.backward();
    engine.wait(60.0);
    for (const Engine::Timeline& t : engine.timeline()) {
      CHECK(t.span_ms > 0);
      CHECK(t.waited_ms <= t.transfers_ms + 1e-3f);
      CHECK(t.home_ms <= t.span_ms);
      CHECK(t.sums_waited_ms <= t.span_ms);
      if (G == 1) CHECK(t.sums_ms == 0);  // nothing travels
      else CHECK(t.sums_ms > 0);
    }
  }
}

TEST_CASE("one rank's backward is stage 07's: the same dK and dV bits") {
  for (int d : {64, 128}) {
    const Shape s{1, 2, 333, d, true};
    const auto in = attention::make_backward_inputs(s, Dtype::fp16, course::fresh_seed());
    CAPTURE(d);
    CAPTURE(in.fwd.seed);
    const Gradients g = run_ring_backward(Split(333, 1, false), s, Dtype::fp16, in, Transport::copies);
    course::DeviceBuffer<std::uint16_t> Q(in.fwd.Qh), K(in.fwd.Kh), V(in.fwd.Vh), dO(in.dOh), O(s.elements()),
        dQ(s.elements()), dK(s.elements()), dV(s.elements());
    course::DeviceBuffer<float> L(std::size_t(s.heads()) * s.N), D(std::size_t(s.heads()) * s.N), dQacc(s.elements());
    attention::launch_fa3_tuned(s, Dtype::fp16, Q.get(), K.get(), V.get(), O.get(), L.get());
    attention::BackwardArgs a{};
    a.Q = Q.get(), a.K = K.get(), a.V = V.get(), a.O = O.get(), a.dO = dO.get(), a.L = L.get(), a.D = D.get();
    a.dQacc = dQacc.get(), a.dQ = dQ.get(), a.dK = dK.get(), a.dV = dV.get();
    attention::launch_backward_preprocess(s, Dtype::fp16, a);
    if (d == 128) attention::launch_flash_backward_split(s, Dtype::fp16, a);
    else attention::launch_flash_backward_wide(s, Dtype::fp16, a);
    attention::launch_dq_convert(s, Dtype::fp16, a);
    CHECK(dK.download() == g.dK);
    CHECK(dV.download() == g.dV);  // dQ's atomics add in any order: its bits may differ
  }
}

TEST_CASE("the backward over NCCL and peer copies (2 or more GPUs): the same dK, dV as the copies") {
  const int gpus = gpu_count();
  if (gpus < 2) {
    MESSAGE("not run: this machine has " << gpus << " GPU");
    return;
  }
  for (int G = 2; G <= std::min(gpus, 4); ++G)
  for (bool zigzag : {false, true})
  for (bool causal : {false, true}) {
    const Shape s{1, 2, 1001, 128, causal};
    const Split sp(1001, G, zigzag);
    const auto in = attention::make_backward_inputs(s, Dtype::bf16, course::fresh_seed());
    CAPTURE(s.text());
    CAPTURE(sp.text());
    CAPTURE(in.fwd.seed);
    const Gradients copies = run_ring_backward(sp, s, Dtype::bf16, in, Transport::copies);
    check_gradients(sp, s, Dtype::bf16, in, copies);
    for (Transport transport : {Transport::peer, Transport::nccl}) {
      if (transport == Transport::nccl && !built_with_nccl()) continue;
      const Gradients g = run_ring_backward(sp, s, Dtype::bf16, in, transport);
      check_gradients(sp, s, Dtype::bf16, in, g);
      CHECK(g.dK == copies.dK);  // the same sums in the same order (dQ: atomics, any order)
      CHECK(g.dV == copies.dV);
    }
  }
}

TEST_CASE("bad input: fp32, more NCCL ranks than GPUs, a sequence that does not split") {
  const Shape s{1, 1, 64, 64, false};
  CHECK_THROWS_AS(Engine(Split(64, 2, false), s, Dtype::fp32, Transport::copies), course::UsageError);
  if (built_with_nccl())  // else the same call fails for want of NCCL, not of GPUs
    CHECK_THROWS_AS(Engine(Split(64, gpu_count() + 1, false), s, Dtype::fp16, Transport::nccl), course::UsageError);
  CHECK_THROWS_AS(Engine(Split(64, gpu_count() + 1, false), s, Dtype::fp16, Transport::peer), course::UsageError);
  Engine engine(Split(64, 1, false), s, Dtype::fp16, Transport::copies);  // a backward needs dO and a forward
  CHECK_THROWS_AS(engine.backward(), course::UsageError);
  CHECK_THROWS_AS(Split(3, 2, true), course::UsageError);
}
