// Stage 10 on the CPU: the split, the schedule, the bytes, and the ring itself against float64.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "../07_backward/problem.hpp"
#include "../07_backward/reference.hpp"
#include "check.hpp"
#include "inputs.hpp"
#include "merge.hpp"
#include "ring.hpp"

using namespace ring;
using course::Dtype;

TEST_CASE("the split: chunks cover the sequence once, sizes differ by at most one, N < chunks is refused") {
  for (bool zigzag : {false, true})
    for (int G : {1, 2, 3, 4, 8})
      for (int N : {2 * G, 2 * G + 1, 97, 1000, 4096}) {
        const Split sp(N, G, zigzag);
        CAPTURE(sp.text());
        CAPTURE(N);
        std::vector<int> owner(std::size_t(N), -1);
        std::set<int> chunks;
        for (int r = 0; r < G; ++r)
          for (int k = 0; k < sp.per_rank(); ++k) {
            const int chunk = sp.chunk_of(r, k);
            chunks.insert(chunk);
            CHECK(sp.rows(chunk) >= 1);
            CHECK(sp.rows(chunk) <= sp.c());
            CHECK(sp.rows(chunk) >= sp.c() - 1);
            for (int i = 0; i < sp.rows(chunk); ++i) {
              CHECK(owner[std::size_t(sp.start(chunk) + i)] == -1);
              owner[std::size_t(sp.start(chunk) + i)] = chunk;
            }
          }
        CHECK(int(chunks.size()) == sp.chunks());
        CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
        // Chunks in order along the sequence: causality between chunks is their order.
        for (int i = 1; i < N; ++i) CHECK(owner[std::size_t(i)] >= owner[std::size_t(i - 1)]);
      }
  CHECK_THROWS_AS(Split(3, 2, true), course::UsageError);  // 4 chunks of 3 rows
  CHECK_THROWS_AS(Split(5, 0, false), course::UsageError);
  CHECK_NOTHROW(Split(4, 2, true));
}

TEST_CASE("the schedule: each rank sees every shard once; causal pairs are exactly the visible (chunk, chunk)") {
  for (bool zigzag : {false, true})
    for (int G : {1, 2, 3, 4, 8}) {
      const Split sp(64 * G, G, zigzag);
      CAPTURE(sp.text());
      for (int r = 0; r < G; ++r) {
        std::set<int> sources;
        for (int step = 0; step < G; ++step) sources.insert(sp.source(r, step));
        CHECK(int(sources.size()) == G);
        CHECK(sp.source(r, 0) == r);
        // Every (query chunk, key chunk) pair of the rank, over all steps: all of them when not causal,
        // those with key chunk <= query chunk when causal, the diagonal ones under the mask.
        for (bool causal : {false, true}) {
          std::set<std::pair<int, int>> seen;
          for (int step = 0; step < G; ++step)
            for (const Pair& p : sp.pairs(r, step, causal)) {
              const int cq = sp.chunk_of(r, p.q), ck = sp.chunk_of(sp.source(r, step), p.kv);
              CHECK(seen.insert({cq, ck}).second);
              CHECK(p.causal == (causal && cq == ck));
              if (causal) CHECK(ck <= cq);
            }
          const int R = sp.per_rank();
          const std::size_t want = causal ? 0 : std::size_t(R) * sp.chunks();
          if (!causal) CHECK(seen.size() == want);
          else
            for (int k = 0; k < R; ++k) {  // chunk cq sees chunks 0..cq
              const int cq = sp.chunk_of(r, k);
              int n = 0;
              for (const auto& [a, b] : seen) n += a == cq;
              CHECK(n == cq + 1);
            }
        }
      }
    }
}

TEST_CASE("causal work per rank: the plain ring's last rank does about 2G - 1 times the first's; zigzag is even") {
  for (int G : {2, 4, 8}) {
    const Split ring(1024 * G, G, false), zz(1024 * G, G, true);
    CAPTURE(G);
    const double first = rank_scores(ring, 0, true), last = rank_scores(ring, G - 1, true);
    CHECK(last / first == doctest::Approx(2.0 * G - 1).epsilon(0.01));
    for (int r = 1; r < G; ++r) CHECK(rank_scores(zz, r, true) == rank_scores(zz, 0, true));
    // Not causal, both layouts give every rank N·N/G scores.
    for (int r = 0; r < G; ++r) {
      CHECK(rank_scores(ring, r, false) == doctest::Approx(1024.0 * G * 1024.0 * G / G));
      CHECK(rank_scores(zz, r, false) == doctest::Approx(1024.0 * G * 1024.0 * G / G));
    }
  }
}

TEST_CASE("the merge: (O, L) of two halves of a row give the row's (O, L); the empty part is its identity") {
  // One row of 5 keys and scalar values v: O = Σ e^s v / Σ e^s, L = log Σ e^s.
  const double s[5] = {3.0, -1.0, 40.0, 0.5, 39.0}, v[5] = {1.0, -2.0, 0.25, 4.0, -0.5};
  auto part = [&](int a, int b, double& O, double& L) {
    double m = -INFINITY, l = 0, o = 0;
    for (int i = a; i < b; ++i) m = std::max(m, s[i]);
    for (int i = a; i < b; ++i) l += std::exp(s[i] - m), o += std::exp(s[i] - m) * v[i];
    O = o / l;
    L = m + std::log(l);
  };
  double O, L, O1, L1, O2, L2;
  part(0, 5, O, L);
  part(0, 2, O1, L1);
  part(2, 5, O2, L2);
  const MergeWeights w = merge_weights(float(L1), float(L2));
  CHECK(w.L == doctest::Approx(L).epsilon(1e-6));
  CHECK(w.w1 * O1 + w.w2 * O2 == doctest::Approx(O).epsilon(1e-6));
  const MergeWeights e = merge_weights(-INFINITY, float(L2));
  CHECK(e.L == float(L2));
  CHECK(e.w1 == 0.0f);
  CHECK(e.w2 == 1.0f);
}

TEST_CASE("the ring on the CPU: O and L within stage 06's tolerance of float64, bytes as the model") {
  struct Case {
    int B, H, N, d, G;
    bool causal, zigzag;
  };
  for (const Case k : {Case{1, 2, 97, 64, 3, false, false}, Case{1, 2, 97, 64, 3, true, true},
                       Case{2, 1, 130, 128, 2, true, false}, Case{1, 1, 8, 64, 4, true, true},
                       Case{1, 1, 1, 64, 1, true, false}, Case{1, 2, 301, 64, 4, false, true}})
    for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
      const attention::Shape s{k.B, k.H, k.N, k.d, k.causal};
      const Split sp(k.N, k.G, k.zigzag);
      const auto in = attention::make_inputs(s, t, course::fresh_seed(), k.causal ? 8.0f : 1.0f);
      CAPTURE(s.text());
      CAPTURE(sp.text());
      CAPTURE(course::name(t));
      CAPTURE(in.seed);
      std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * k.N, NAN);
      const Traffic traffic = ring_forward_cpu(sp, s, t, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
      const attention::Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
      const auto cO = ref.check_O(O.data()), cL = ref.check_L(L.data());
      CHECK_MESSAGE(cO.ok(), cO.summary());
      CHECK_MESSAGE(cL.ok(), cL.summary());
      const Traffic model = ring_traffic(sp, s, t);
      for (int r = 0; r < k.G; ++r) {
        CHECK(traffic.sent[std::size_t(r)] == forward_bytes_sent(sp, s, t));
        CHECK(traffic.received[std::size_t(r)] == forward_bytes_sent(sp, s, t));
        CHECK(model.sent[std::size_t(r)] == traffic.sent[std::size_t(r)]);
      }
    }
}

TEST_CASE("the ring's result does not depend on G or the layout beyond rounding") {
  // The same inputs on 1 rank (plain attention of stage 10's pair function) and on 4 in zigzag:
  // the merge reorders float sums and rounds each pair's O to the dtype, nothing more.
  const attention::Shape s{1, 2, 200, 64, true};
  const auto in = attention::make_inputs(s, Dtype::fp16, course::fresh_seed());
  CAPTURE(in.seed);
  std::vector<float> O1(s.elements()), L1(400), O4(s.elements()), L4(400);
  ring_forward_cpu(Split(200, 1, false), s, Dtype::fp16, in.Q.data(), in.K.data(), in.V.data(), O1.data(), L1.data());
  ring_forward_cpu(Split(200, 4, true), s, Dtype::fp16, in.Q.data(), in.K.data(), in.V.data(), O4.data(), L4.data());
  double worst = 0, worst_L = 0;
  for (std::size_t i = 0; i < O1.size(); ++i) worst = std::max(worst, double(std::abs(O1[i] - O4[i])));
  for (std::size_t i = 0; i < L1.size(); ++i) worst_L = std::max(worst_L, double(std::abs(L1[i] - L4[i])));
  CHECK(worst > 0.0);              // the pairs' own rounding shows
  CHECK(worst < 8 * 0x1p-11 * 2);  // but stays within a few fp16 roundings of |O| <= 2
  CHECK(worst_L < 1e-4);
}

TEST_CASE("the ring's backward on the CPU: dQ, dK, dV within stage 07's tolerance of float64, bytes as the model") {
  struct Case {
    int N, d, G;
    bool causal, zigzag;
  };
  for (const Case k : {Case{97, 64, 3, false, false}, Case{97, 64, 3, true, true}, Case{130, 64, 2, true, false},
                       Case{8, 64, 4, true, true}, Case{1, 64, 1, false, false}, Case{101, 64, 4, false, true}})
    for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
      const attention::Shape s{1, 2, k.N, k.d, k.causal};
      const Split sp(k.N, k.G, k.zigzag);
      const auto in = attention::make_backward_inputs(s, t, course::fresh_seed());
      CAPTURE(s.text());
      CAPTURE(sp.text());
      CAPTURE(course::name(t));
      CAPTURE(in.fwd.seed);
      std::vector<float> dQ(s.elements(), NAN), dK(s.elements(), NAN), dV(s.elements(), NAN);
      const Traffic traffic = ring_backward_cpu(sp, s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(),
                                                in.dO.data(), dQ.data(), dK.data(), dV.data());
      // Each query chunk's share of dK, dV is rounded apart: the plain computation does the same.
      const attention::BackwardReference ref(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data(),
                                             3, sp.starts());
      const auto c = ref.check_all(dQ.data(), dK.data(), dV.data());
      CHECK_MESSAGE(c.ok(), c.summary() << "\n" << c.first_mismatches);
      for (int r = 0; r < k.G; ++r) {
        CHECK(traffic.sent[std::size_t(r)] == forward_bytes_sent(sp, s, t) + backward_bytes_sent(sp, s, t));
        CHECK(traffic.received[std::size_t(r)] == traffic.sent[std::size_t(r)]);
      }
    }
}
