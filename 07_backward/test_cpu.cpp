// Stage 07 on the CPU: the float64 formula against finite differences; FlashAttention's backward
// (Algorithm 2) through the counting view against float64 (dQ, dK, dV), in fp32, fp16 and bf16,
// causal or not, any N, atomic and deterministic; its count against the model; the tolerance rule;
// the variant table and bad input.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "check.hpp"
#include "inputs.hpp"
#include "problem.hpp"
#include "reference.hpp"
#include "test_util.hpp"
#include "variants.hpp"

using namespace attention;
using attention::testing::check_gradients;
using attention::testing::cpu_forward;
using course::Dtype;

namespace {

struct Grads {
  std::vector<float> dQ, dK, dV;
  course::IoCount io;
};

Grads run_counted(const Shape& s, Dtype t, const BackwardPlan& plan, const BackwardInputs& in) {
  const auto f = cpu_forward(s, t, in);
  Grads g{std::vector<float>(s.elements(), NAN), std::vector<float>(s.elements(), NAN),
          std::vector<float>(s.elements(), NAN), {}};
  g.io = flash_backward_counted(s, t, plan, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), f.O.data(),
                                in.dO.data(), f.L.data(), g.dQ.data(), g.dK.data(), g.dV.data());
  return g;
}

const Dtype kAll[] = {Dtype::fp32, Dtype::fp16, Dtype::bf16};
const BackwardPlan kAtomic{{64, 64}}, kDeterministic{{64, 64}, true, {64, 64}};

}  // namespace

TEST_CASE("the float64 formula is the gradient: central finite differences of Σ dO ∘ O") {
  for (bool causal : {false, true}) {
    const Shape s{1, 2, 9, 32, causal};
    std::vector<double> x[4];
    for (int k = 0; k < 4; ++k) {
      const auto r = course::random_uniform(s.elements(), course::fresh_seed() + k, -1.0f, 2.0f);
      x[k].assign(r.begin(), r.end());
    }
    CAPTURE(causal);
    // Every input (Q, K, V), both heads, rows at both ends and inside, columns spread over d.
    for (int which = 0; which < 3; ++which)
      for (std::size_t index : {std::size_t(0), std::size_t(5 * 32 + 7), std::size_t(9 * 32 + 31), std::size_t(2 * 9 * 32 - 1)}) {
        const double fd = finite_difference(s, x[0].data(), x[1].data(), x[2].data(), x[3].data(), which, index, 1e-5);
        const double formula = formula_gradient(s, x[0].data(), x[1].data(), x[2].data(), x[3].data(), which, index);
        CAPTURE(which);
        CAPTURE(index);
        CHECK(std::abs(formula - fd) <= 1e-7 * std::max(1.0, std::abs(fd)));
      }
  }
  // Causal: row 0 sees key 0 alone, so P[0][0] = 1 whatever Q is, and dQ's row 0 is zero (the
  // formula: dS = P ∘ (dP − D) = dP[0][0] − dP[0][0]); key 5 of 6 is seen by row 5 alone and its
  // dK is not zero.
  const Shape s{1, 1, 6, 32, true};
  std::vector<double> x[4];
  for (int k = 0; k < 4; ++k) {
    const auto r = course::random_uniform(s.elements(), 99 + k);
    x[k].assign(r.begin(), r.end());
  }
  for (std::size_t c = 0; c < 32; c += 5) {
    CHECK(std::abs(formula_gradient(s, x[0].data(), x[1].data(), x[2].data(), x[3].data(), 0, c)) < 1e-12);
    CHECK(std::abs(finite_difference(s, x[0].data(), x[1].data(), x[2].data(), x[3].data(), 0, c, 1e-5)) < 1e-9);
  }
  CHECK(std::abs(formula_gradient(s, x[0].data(), x[1].data(), x[2].data(), x[3].data(), 1, 5 * 32 + 3)) > 1e-6);
}

TEST_CASE("FlashAttention backward on the CPU matches float64 (dQ, dK, dV), every dtype, causal or not, any N") {
  for (Dtype t : kAll)
    for (bool causal : {false, true})
      for (int N : {1, 7, 64, 130, 333})
        for (const BackwardPlan& plan : {kAtomic, kDeterministic, bwd_variant("tuned").plan,
                                         bwd_variant("tuned_deterministic").plan, bwd_variant("wide").plan}) {
          const Shape s{1, 2, N, 64, causal};
          const auto in = make_backward_inputs(s, t, course::fresh_seed());
          CAPTURE(s.text());
          const std::string dtype = course::name(t);
          CAPTURE(dtype);
          CAPTURE(plan.deterministic);
          CAPTURE(in.fwd.seed);
          const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
          const auto g = run_counted(s, t, plan, in);
          check_gradients(ref, g.dQ.data(), g.dK.data(), g.dV.data());
        }
}

TEST_CASE("FlashAttention backward on the CPU: d = 32 and 128, blocks where Bc does not divide Br, large logits") {
  for (auto [d, Br, Bc] : std::vector<std::array<int, 3>>{{32, 64, 64}, {128, 64, 64}, {128, 48, 80}})
    for (Dtype t : {Dtype::fp32, Dtype::bf16}) {
      if (d == 32 && t != Dtype::fp32) continue;
      const Shape s{2, 1, 201, d, true};
      const auto in = make_backward_inputs(s, t, course::fresh_seed());
      CAPTURE(s.text());
      const std::string dtype = course::name(t);
      CAPTURE(dtype);
      CAPTURE(Bc);
      CAPTURE(in.fwd.seed);
      const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
      const auto g = run_counted(s, t, BackwardPlan{{Br, Bc}, true, {Bc, Br}}, in);
      check_gradients(ref, g.dQ.data(), g.dK.data(), g.dV.data());
    }
  for (Dtype t : kAll) {  // Q times 30: exp(S) overflows a float; P = exp(S − L) does not
    const Shape s{1, 1, 300, 64, false};
    const auto in = make_backward_inputs(s, t, course::fresh_seed(), 30.0f);
    const std::string dtype = course::name(t);
    CAPTURE(dtype);
    CAPTURE(in.fwd.seed);
    const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
    const auto g = run_counted(s, t, kAtomic, in);
    check_gradients(ref, g.dQ.data(), g.dK.data(), g.dV.data());
  }
}

TEST_CASE("the tolerance: twice plain backward's error in the dtype; a wrong value or NaN fails") {
  const Shape s{1, 1, 256, 64, false};
  for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
    const auto in = make_backward_inputs(s, t, course::fresh_seed());
    const std::string dtype = course::name(t);
    CAPTURE(dtype);
    CAPTURE(in.fwd.seed);
    const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
    auto g = run_counted(s, t, kAtomic, in);
    for (int w = 0; w < 3; ++w) {
      CAPTURE(w);
      CHECK(ref.plain_error(w) > 0.0);
      CHECK(ref.plain_error(w) < 0.1);
      CHECK(ref.tolerance(w) == doctest::Approx(std::max(2 * ref.plain_error(w), course::unit_roundoff(t))));
    }
    CHECK(ref.check_all(g.dQ.data(), g.dK.data(), g.dV.data()).ok());
    std::vector<float>* grads[3] = {&g.dQ, &g.dK, &g.dV};
    for (int w = 0; w < 3; ++w) {
      std::vector<float>& x = *grads[w];
      const float saved = x[777];
      x[777] += float(3.0 * ref.tolerance(w) * std::max(1.0f, std::abs(saved)) * 10.0);
      CHECK_FALSE(ref.check(w, x.data()).ok());
      x[777] = NAN;
      CHECK_FALSE(ref.check(w, x.data()).ok());
      CHECK_FALSE(ref.check_all(g.dQ.data(), g.dK.data(), g.dV.data()).ok());
      x[777] = saved;
    }
  }
}

// Chapter 07, "The precision of D". An error ε in D_i is common to the whole row i of
// dS = P ∘ (dP − D) and reaches dQ_i as −ε·scale·Σ_j P_ij·K_j, which nothing cancels; D's error
// from O rounded to 16 bits grows with |O| and |dO|. Three inputs, each with D taken from O as the
// forward stores it (rounded) and from O before that rounding (the forward's float o / l):
//   zero-mean       Q, K, V, dO uniform in [−1, 1): O ≈ 0, so D's error is small
//   the course's    uniform in [−1, 2) (problem.hpp): not zero-mean, so O and Σ_j P_ij·K_j are not
//                   small, and D's error already dominates dQ's
//   keys almost     the course's inputs with K_j = k̄ + δ_j, δ uniform in ±0.1 (rounded): every
//   equal           attention row nearly uniform, and the k̄ parts of the true dQ_i =
//                   scale·Σ_j P_ij·(dP_ij − D_i)·K_j cancel exactly, so the true dQ is small while
//                   D's error reaches it as −ε·scale·k̄, as large as ever
// Measured on this stage's own algorithm (the CPU twin of the kernels, O from stage 06's counted
// forward, rounded or not) and printed beside the backward computed plainly in the dtype
// (d_precision: float64 with every kept tensor rounded, D three ways). With COURSE_SEED set the
// printed numbers repeat (chapter 07 quotes COURSE_SEED=1).
TEST_CASE("the precision of D: with keys almost equal, D from the rounded O makes dQ's error many times larger") {
  const Shape s{1, 2, 1024, 64, false};
  const char* names[3] = {"zero-mean inputs", "the course's inputs", "keys almost equal"};
  for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
    const std::uint64_t seed = course::fresh_seed();
    BackwardInputs inputs[3] = {make_backward_inputs(s, t, seed, 1.0f, -1.0f, 1.0f), make_backward_inputs(s, t, seed),
                                make_backward_inputs(s, t, seed)};
    const auto delta = course::random_uniform(s.elements(), seed + 7, -0.1f, 0.1f);
    std::vector<float>& K = inputs[2].fwd.K;
    for (std::size_t x = 0; x < s.elements(); ++x) {  // k̄: the head's first key
      const std::size_t first = x / (std::size_t(s.N) * s.d) * s.N * s.d + x % s.d;
      K[x] = inputs[1].fwd.K[first] + delta[x];
    }
    inputs[2].fwd.Kh = course::round_in_place(t, K);
    const std::string dtype = course::name(t);
    CAPTURE(dtype);
    CAPTURE(seed);
    double ratio[3];  // ours: dQ's error with D from the rounded O / from the unrounded O
    for (int which = 0; which < 3; ++which) {
      const BackwardInputs& in = inputs[which];
      const DPrecision plain = d_precision(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
      std::vector<float> O(s.elements()), O_unrounded(s.elements()), L(std::size_t(s.heads()) * s.N);
      flash_v2_counted(s, t, Tiles{128, 64}, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), O.data(), L.data(),
                       O_unrounded.data());
      const BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
      double ours[2];  // [0]: D from the unrounded O, [1]: from the rounded O
      for (int rounded = 0; rounded < 2; ++rounded) {
        std::vector<float> dQ(s.elements()), dK(s.elements()), dV(s.elements());
        flash_backward_counted(s, t, kAtomic, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(),
                               (rounded ? O : O_unrounded).data(), in.dO.data(), L.data(), dQ.data(), dK.data(),
                               dV.data(), !rounded);
        ours[rounded] = ref.check(0, dQ.data()).max_rel_err;
      }
      ratio[which] = ours[1] / ours[0];
      MESSAGE(dtype << ", " << std::string(names[which]) << ": dQ's error, max |x − ref| / rms(ref), with D from"
                    << " the rounded O " << ours[1] << ", the unrounded O " << ours[0] << " (" << ratio[which]
                    << "x); plain in " << dtype << ": D from the rounded O " << plain.O_rounded << ", the unrounded O "
                    << plain.O_exact << ", rowsum(P ∘ dP) " << plain.P_dP);
    }
    // Seen over seeds at this shape, both dtypes: zero-mean 0.97-1.14x, the course's inputs
    // 2.7-4.9x, keys almost equal 6.7-10.5x.
    CHECK(ratio[0] < 1.5);
    CHECK(ratio[1] > 1.5);
    CHECK(ratio[2] > 5.0);
    CHECK(ratio[2] > ratio[1]);
  }
}

TEST_CASE("a run checked from its checked heads alone gets the verdict of its whole gradients") {
  const Shape s{2, 9, 1000, 64, false};  // B·H·N > 16384: heads 0, 9 and 17 only
  const auto in = make_backward_inputs(s, Dtype::bf16, course::fresh_seed());
  CAPTURE(in.fwd.seed);
  const BackwardReference ref(s, Dtype::bf16, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
  REQUIRE(ref.heads() == std::vector<int>{0, 9, 17});
  const std::size_t head = std::size_t(s.N) * s.d;
  std::vector<float> g[3], heads[3];
  for (int w = 0; w < 3; ++w) {
    g[w] = course::random_uniform(s.elements(), in.fwd.seed + 10 + w, -0.01f, 0.01f);
    for (int h : ref.heads()) heads[w].insert(heads[w].end(), g[w].begin() + h * head, g[w].begin() + (h + 1) * head);
  }
  g[1][9 * head + 5] = NAN;
  heads[1][head + 5] = NAN;
  const auto all = ref.check_all(g[0].data(), g[1].data(), g[2].data());
  const auto some = ref.check_all_heads(heads[0].data(), heads[1].data(), heads[2].data());
  CHECK_FALSE(all.ok());
  CHECK(some.checked == all.checked);
  CHECK(some.checked == 3 * 3 * head);
  CHECK(some.bad == all.bad);
  CHECK(some.max_rel_err == all.max_rel_err);
  CHECK(some.first_mismatches == all.first_mismatches);
}

TEST_CASE("counted IO equals the model exactly, any N, every dtype, causal or not, atomic or deterministic") {
  for (Dtype t : kAll)
    for (bool causal : {false, true})
      for (auto [N, d] : std::vector<std::array<int, 2>>{{64, 64}, {517, 128}, {300, 32}, {129, 64}}) {
        if (d == 32 && t != Dtype::fp32) continue;
        for (const BackwardPlan& plan : {kAtomic, kDeterministic, bwd_variant("tuned").plan,
                                         bwd_variant("tuned_deterministic").plan, bwd_variant("wide").plan}) {
          const Shape s{2, 2, N, d, causal};
          CAPTURE(s.text());
          const std::string dtype = course::name(t);
          CAPTURE(dtype);
          CAPTURE(plan.deterministic);
          CAPTURE(plan.kv.Bc);
          const auto in = make_backward_inputs(s, t, course::fresh_seed());
          CHECK(double(run_counted(s, t, plan, in).io.total()) == flash_backward_model_bytes(s, t, plan));
        }
      }
}

TEST_CASE("the model: (2e + 4)·N²·d/Bc for the atomic pass; the deterministic one adds K, V per query block") {
  const Shape s{4, 8, 4096, 64, false};
  const double e = 2.0, Nd = double(s.heads()) * s.N * s.d, rows = double(s.heads()) * s.N, Tc = 64;
  // preprocess 2e·Nd + 4N (D) + 4Nd (dQacc = 0); key-outer 4e·Nd + Tc·(2e + 4)·Nd + Tc·8N (L, D);
  // convert 4Nd + e·Nd
  const double atomic = 2 * e * Nd + 4 * rows + 4 * Nd + 4 * e * Nd + Tc * ((2 * e + 4) * Nd + 8 * rows) + 4 * Nd + e * Nd;
  CHECK(flash_backward_model_bytes(s, Dtype::fp16, kAtomic) == doctest::Approx(atomic));
  // deterministic: no dQacc; the dQ pass reads Q, dO, L, D once, K and V Tr times, writes dQ.
  const double det = 2 * e * Nd + 4 * rows + 4 * e * Nd + Tc * (2 * e * Nd + 8 * rows) + 3 * e * Nd + 8 * rows + 64 * 2 * e * Nd;
  CHECK(flash_backward_model_bytes(s, Dtype::fp16, kDeterministic) == doctest::Approx(det));
  Shape causal = s;
  causal.causal = true;  // key block j meets Tr − j query blocks: 64·65/2 pairs instead of 64·64
  const double pairs = 64.0 * 65.0 / 2.0 / 64.0;
  const double atomic_causal = atomic + (pairs - Tc) * ((2 * e + 4) * Nd + 8 * rows);
  CHECK(flash_backward_model_bytes(causal, Dtype::fp16, kAtomic) == doctest::Approx(atomic_causal));
  CHECK(flash_backward_device_bytes(s, Dtype::fp16, false) == doctest::Approx(8 * e * Nd + 8 * rows + 4 * Nd));
  CHECK(backward_flops(s) == doctest::Approx(2.5 * 4 * s.heads() * double(s.N) * s.N * s.d));
}

TEST_CASE("standard attention's model: the N² tensors P, dP and dS dominate; its memory grows as N²") {
  Shape s{1, 2, 16384, 64, false};  // long enough for the N² terms to dominate
  const double square = 2.0 * s.heads() * double(s.N) * s.N;  // one N² tensor of fp16 or bf16
  // The 16-bit dtypes move the same bytes; causal changes nothing (the products cover the square).
  CHECK(standard_backward_model_bytes(s, Dtype::fp16) == standard_backward_model_bytes(s, Dtype::bf16));
  Shape causal = s;
  causal.causal = true;
  CHECK(standard_backward_model_bytes(causal, Dtype::fp16) == standard_backward_model_bytes(s, Dtype::fp16));
  // The backward passes 7 N² tensors (P twice, dP twice, dS three times), the forward 4 (S twice,
  // P twice), plus the N·d ones; memory holds two N² tensors.
  CHECK(standard_backward_model_bytes(s, Dtype::fp16) / square == doctest::Approx(7.0).epsilon(0.02));
  CHECK(standard_forward_model_bytes(s, Dtype::fp16) / square == doctest::Approx(4.0).epsilon(0.02));
  CHECK(standard_backward_device_bytes(s, Dtype::fp16) / square == doctest::Approx(2.0).epsilon(0.05));
  // fp32 (stage 02's products read their operands once per 128-wide block): more than twice fp16's
  CHECK(standard_backward_model_bytes(s, Dtype::fp32) > 2.0 * standard_backward_model_bytes(s, Dtype::fp16));
  // Twice N (N = 1000): the standard backward's bytes grow almost 4×. Between the SMs and L2 FlashAttention's
  // backward (Bc = 128) moves ≈ (2e + 4)·N²·d/Bc = 4·N² bytes a head at d = 64, standard 7e·N² =
  // 14·N²: only 3.5× fewer, as Q_i, dO_i and the dQ additions return for every key block.
  s = Shape{2, 3, 1000, 64, false};
  Shape twice = s;
  twice.N *= 2;
  CHECK(standard_backward_model_bytes(twice, Dtype::fp16) / standard_backward_model_bytes(s, Dtype::fp16) > 3.8);
  const double ratio = standard_backward_model_bytes(s, Dtype::fp16) / flash_backward_model_bytes(s, Dtype::fp16, bwd_variant("tuned").plan);
  CHECK(ratio > 2.5);
  CHECK(ratio < 3.5);
}

TEST_CASE("standard attention in fp32 (stages 02, 03, 05): counted = model when N % 8 == 0, and the gradients") {
  for (bool causal : {false, true})
    for (auto [N, d] : std::vector<std::array<int, 2>>{{64, 64}, {136, 32}, {96, 128}, {77, 64}}) {
      const Shape s{1, 2, N, d, causal};
      CAPTURE(s.text());
      const auto in = make_backward_inputs(s, Dtype::fp32, course::fresh_seed());
      CAPTURE(in.fwd.seed);
      std::vector<float> dQ(s.elements(), NAN), dK(s.elements(), NAN), dV(s.elements(), NAN);
      const auto io = standard_backward_counted(s, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data(),
                                                dQ.data(), dK.data(), dV.data());
      if (N % 8 == 0) CHECK(double(io.total()) == standard_backward_model_bytes(s, Dtype::fp32));
      else  // rows off the sectors, and stage 02's unvectorized path (matmul::tiled_model_exact): more
        CHECK(double(io.total()) > standard_backward_model_bytes(s, Dtype::fp32));
      const BackwardReference ref(s, Dtype::fp32, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data());
      check_gradients(ref, dQ.data(), dK.data(), dV.data());
    }
}

TEST_CASE("causal: key block j meets the query blocks from the one holding its first key") {
  CHECK(first_query_block(64, 64, true, 3) == 3);
  CHECK(first_query_block(64, 64, false, 3) == 0);
  CHECK(first_query_block(48, 80, true, 2) == 3);  // keys from 160: rows 144..191 see key 160
  CHECK(first_query_block(128, 64, true, 3) == 1);  // keys from 192: rows 128..255
}

TEST_CASE("the variants: names, dtypes, head dimensions; bad input is refused with a message") {
  CHECK(bwd_variants().size() == 10);
  CHECK(bwd_variant("wide").plan.kv.Br == 32);
  CHECK(bwd_variant("split").supports(Dtype::fp16, 128));
  CHECK_FALSE(bwd_variant("split").supports(Dtype::fp16, 64));
  CHECK(bwd_variant("standard").standard);
  CHECK(bwd_variant("standard").supports(Dtype::fp32, 32));
  CHECK(bwd_variant("tuned").plan.kv.Bc == 128);
  CHECK(bwd_variant("tuned_deterministic").plan.deterministic);
  CHECK(bwd_variant("flash_bwd").supports(Dtype::fp32, 32));
  CHECK(bwd_variant("tc").supports(Dtype::bf16, 128));
  CHECK_FALSE(bwd_variant("tc").supports(Dtype::fp32, 64));
  CHECK(bwd_variant("tc_deterministic").plan.deterministic);
  CHECK_THROWS_AS(bwd_variant("fa3"), course::UsageError);
  const Shape s{1, 1, 8, 64, false};
  std::vector<float> x(s.elements(), 1.0f), L(8);
  CHECK_THROWS_AS(flash_backward_counted(s, Dtype::fp16, BackwardPlan{{0, 64}}, x.data(), x.data(), x.data(), x.data(),
                                         x.data(), L.data(), x.data(), x.data(), x.data()),
                  course::UsageError);
  CHECK_THROWS_AS(flash_backward_model_bytes(s, Dtype::fp16, BackwardPlan{{64, 64}, true}), course::UsageError);
  CHECK_THROWS_AS(flash_backward_counted(Shape{1, 1, 0, 64, false}, Dtype::fp32, kAtomic, x.data(), x.data(), x.data(),
                                         x.data(), x.data(), L.data(), x.data(), x.data(), x.data()),
                  course::UsageError);
}
