#include "ring.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "check.hpp"
#include "merge.hpp"

namespace ring {

Split::Split(int N, int G, bool zigzag) : N_(N), G_(G), zigzag_(zigzag), c_(0) {
  course::require(G >= 1, "the ring needs at least one rank (G = " + std::to_string(G) + ")");
  course::require(N >= chunks(), "N = " + std::to_string(N) + " does not split into " + std::to_string(chunks()) +
                                     " chunks of at least one row (" + text() + ": " +
                                     std::to_string(per_rank()) + " a rank)");
  c_ = (N + chunks() - 1) / chunks();
}

int Split::rows(int chunk) const { return N_ / chunks() + (chunk < N_ % chunks() ? 1 : 0); }
int Split::start(int chunk) const { return chunk * (N_ / chunks()) + std::min(chunk, N_ % chunks()); }
int Split::chunk_of(int rank, int k) const { return k == 0 ? rank : 2 * G_ - 1 - rank; }

std::vector<Pair> Split::pairs(int rank, int step, bool causal) const {
  const int src = source(rank, step);
  std::vector<Pair> out;
  for (int q = 0; q < per_rank(); ++q)
    for (int kv = 0; kv < per_rank(); ++kv) {
      const int cq = chunk_of(rank, q), ck = chunk_of(src, kv);
      if (!causal || cq > ck) out.push_back({q, kv, false});
      else if (cq == ck) out.push_back({q, kv, true});
    }
  return out;
}

std::string Split::text() const { return "G=" + std::to_string(G_) + (zigzag_ ? " zigzag" : " ring"); }

std::vector<int> Split::starts() const {
  std::vector<int> first;
  for (int chunk = 0; chunk < chunks(); ++chunk) first.push_back(start(chunk));
  return first;
}

std::uint64_t shard_bytes(const Split& split, const Shape& s, course::Dtype t) {
  return 2ull * split.per_rank() * std::uint64_t(split.c()) * std::uint64_t(s.heads()) * std::uint64_t(s.d) *
         course::bytes_of(t);
}

std::uint64_t forward_bytes_sent(const Split& split, const Shape& s, course::Dtype t) {
  return std::uint64_t(split.G() - 1) * shard_bytes(split, s, t);
}

std::uint64_t gradient_shard_bytes(const Split& split, const Shape& s) {
  return 2ull * split.per_rank() * std::uint64_t(split.c()) * std::uint64_t(s.heads()) * std::uint64_t(s.d) * 4;
}

std::uint64_t backward_bytes_sent(const Split& split, const Shape& s, course::Dtype t) {
  if (split.G() == 1) return 0;
  return forward_bytes_sent(split, s, t) + std::uint64_t(split.G()) * gradient_shard_bytes(split, s);
}

double rank_scores(const Split& split, int rank, bool causal) {
  const double c = split.c();
  double n = 0;
  for (int step = 0; step < split.G(); ++step)
    for (const Pair& p : split.pairs(rank, step, causal)) n += p.causal ? c * (c + 1) / 2 : c * c;
  return n;
}

namespace {

// Rank-local storage on the CPU: `per_rank` chunks of B·H heads × c rows × d, as on the GPU.
struct Chunks {
  int heads, c, d;
  std::vector<float> x;
  float* at(int k, int h, int row) { return x.data() + ((std::size_t(k) * heads + h) * c + row) * d; }
  const float* at(int k, int h, int row) const {
    return x.data() + ((std::size_t(k) * heads + h) * c + row) * d;
  }
};

// One pair on the CPU as the kernels compute it: queries `q` (rows of the chunk), keys and values of
// chunk `kv` with `keys` real rows (the rest hidden), causal on the diagonal. Writes the pair's O
// (rounded to the dtype) and L for the real rows of the query chunk (n_q of them).
void pair_forward(const Shape& s, course::Dtype t, const float* Q, int n_q, const float* K, const float* V,
                  int keys, int c, bool causal, std::vector<float>& O, std::vector<float>& L) {
  const float scale = 1.0f / std::sqrt(float(s.d));
  std::vector<float> S(c), P(c);
  for (int h = 0; h < s.heads(); ++h)
    for (int i = 0; i < n_q; ++i) {
      const float* q = Q + (std::size_t(h) * c + i) * s.d;
      const int visible = causal ? std::min(i + 1, keys) : keys;
      float m = -INFINITY;
      for (int j = 0; j < visible; ++j) {
        const float* k = K + (std::size_t(h) * c + j) * s.d;
        float dot = 0.0f;
        for (int e = 0; e < s.d; ++e) dot += q[e] * k[e];
        S[j] = scale * dot;
        m = softmax::nan_max(m, S[j]);
      }
      float l = 0.0f;
      for (int j = 0; j < visible; ++j) {
        P[j] = std::exp(S[j] - m);
        l += P[j];
        P[j] = course::round_to(t, P[j]);  // the tensor cores take P̃ in the dtype
      }
      float* o = O.data() + (std::size_t(h) * c + i) * s.d;
      for (int e = 0; e < s.d; ++e) {
        float acc = 0.0f;
        for (int j = 0; j < visible; ++j) acc += P[j] * V[(std::size_t(h) * c + j) * s.d + e];
        o[e] = course::round_to(t, acc / l);
      }
      L[std::size_t(h) * c + i] = m + std::log(l);
    }
}

}  // namespace

Traffic ring_traffic(const Split& split, const Shape& s, course::Dtype t) {
  const int G = split.G();
  Traffic traffic{std::vector<std::uint64_t>(G, 0), std::vector<std::uint64_t>(G, 0)};
  for (int step = 0; step + 1 < G; ++step)
    for (int r = 0; r < G; ++r) {
      traffic.sent[r] += shard_bytes(split, s, t);
      traffic.received[(r + 1) % G] += shard_bytes(split, s, t);
    }
  return traffic;
}

Traffic ring_forward_cpu(const Split& split, const Shape& s, course::Dtype t, const float* Q, const float* K,
                         const float* V, float* O, float* L) {
  const int G = split.G(), R = split.per_rank(), c = split.c(), heads = s.heads(), d = s.d;
  course::require(s.N == split.N(), "ring_forward_cpu: the split is for another N");
  // Scatter: rank r's chunks of Q, and its K/V shard (K then V), padding rows zero.
  auto scatter = [&](const float* X, int rank) {
    Chunks out{heads, c, d, std::vector<float>(std::size_t(R) * heads * c * d, 0.0f)};
    for (int k = 0; k < R; ++k) {
      const int chunk = split.chunk_of(rank, k);
      for (int h = 0; h < heads; ++h)
        std::copy_n(X + (std::size_t(h) * s.N + split.start(chunk)) * d, std::size_t(split.rows(chunk)) * d,
                    out.at(k, h, 0));
    }
    return out;
  };
  std::vector<Chunks> q, k, v;
  for (int r = 0; r < G; ++r) {
    q.push_back(scatter(Q, r));
    k.push_back(scatter(K, r));
    v.push_back(scatter(V, r));
  }
  std::vector<Chunks> o_acc(G, Chunks{heads, c, d, std::vector<float>(std::size_t(R) * heads * c * d, 0.0f)});
  std::vector<std::vector<float>> L_acc(G, std::vector<float>(std::size_t(R) * heads * c, -INFINITY));
  Traffic traffic{std::vector<std::uint64_t>(G, 0), std::vector<std::uint64_t>(G, 0)};
  const std::uint64_t shard = shard_bytes(split, s, t);

  std::vector<float> Op(std::size_t(heads) * c * d), Lp(std::size_t(heads) * c);
  for (int step = 0; step < G; ++step) {
    // Rank r holds the shard that started at source(r, step): k[r], v[r] after `step` passes.
    for (int r = 0; r < G; ++r) {
      const int src = split.source(r, step);
      for (const Pair& p : split.pairs(r, step, s.causal)) {
        const int cq = split.chunk_of(r, p.q), ck = split.chunk_of(src, p.kv);
        pair_forward(s, t, q[r].at(p.q, 0, 0), split.rows(cq), k[r].at(p.kv, 0, 0), v[r].at(p.kv, 0, 0),
                     split.rows(ck), c, p.causal, Op, Lp);
        for (int h = 0; h < heads; ++h)  // ⊕ into the rank's running (O, L)
          for (int i = 0; i < split.rows(cq); ++i) {
            float& La = L_acc[r][(std::size_t(p.q) * heads + h) * c + i];
            const MergeWeights w = merge_weights(La, Lp[std::size_t(h) * c + i]);
            float* oa = o_acc[r].at(p.q, h, i);
            const float* ob = Op.data() + (std::size_t(h) * c + i) * d;
            for (int e = 0; e < d; ++e) oa[e] = w.w1 * oa[e] + w.w2 * ob[e];
            La = w.L;
          }
      }
    }
    if (step + 1 == G) break;
    // Pass the shards one rank on: r sends to r + 1, receives from r − 1.
    std::vector<Chunks> k_next(k), v_next(v);
    for (int r = 0; r < G; ++r) {
      k_next[(r + 1) % G] = k[r];
      v_next[(r + 1) % G] = v[r];
      traffic.sent[r] += shard;
      traffic.received[(r + 1) % G] += shard;
    }
    k.swap(k_next);
    v.swap(v_next);
  }
  // Gather: the real rows of every chunk back into the sequence; O rounded to the dtype.
  for (int r = 0; r < G; ++r)
    for (int kk = 0; kk < R; ++kk) {
      const int chunk = split.chunk_of(r, kk);
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < split.rows(chunk); ++i) {
          const std::size_t row = std::size_t(h) * s.N + split.start(chunk) + i;
          const float* oa = o_acc[r].at(kk, h, i);
          for (int e = 0; e < d; ++e) O[row * d + e] = course::round_to(t, oa[e]);
          L[row] = L_acc[r][(std::size_t(kk) * heads + h) * c + i];
        }
    }
  return traffic;
}

Traffic ring_backward_cpu(const Split& split, const Shape& s, course::Dtype t, const float* Q, const float* K,
                          const float* V, const float* dO, float* dQ, float* dK, float* dV) {
  const int G = split.G(), R = split.per_rank(), c = split.c(), heads = s.heads(), d = s.d;
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> O(s.elements()), L(std::size_t(heads) * s.N);
  Traffic traffic = ring_forward_cpu(split, s, t, Q, K, V, O.data(), L.data());
  // Per rank: its chunks' rows of the sequence, c slots each (padding rows stay zero / unused).
  auto row_of = [&](int chunk, int i) { return split.start(chunk) + i; };
  auto at = [&](const float* X, int h, int row) { return X + (std::size_t(h) * s.N + row) * d; };
  std::vector<float> D(std::size_t(heads) * s.N);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < s.N; ++i) {
      float acc = 0;
      for (int e = 0; e < d; ++e) acc += at(dO, h, i)[e] * at(O.data(), h, i)[e];
      D[std::size_t(h) * s.N + i] = acc;
    }
  std::vector<float> dQacc(s.elements(), 0.0f);
  // The sums of each shard (by its owner): dK then dV of its R chunks, c rows each.
  const std::size_t shard = std::size_t(R) * heads * c * d;
  std::vector<std::vector<float>> dkv(G, std::vector<float>(2 * shard, 0.0f));
  std::vector<float> dKp(std::size_t(c) * d), dVp(std::size_t(c) * d);
  const std::uint64_t kv_bytes = shard_bytes(split, s, t), dkv_bytes = gradient_shard_bytes(split, s);
  for (int step = 0; step < G; ++step) {
    for (int r = 0; r < G; ++r) {
      const int src = split.source(r, step);
      for (const Pair& p : split.pairs(r, step, s.causal)) {
        const int cq = split.chunk_of(r, p.q), ck = split.chunk_of(src, p.kv);
        const int nq = split.rows(cq), keys = split.rows(ck);
        for (int h = 0; h < heads; ++h) {
          std::fill(dKp.begin(), dKp.end(), 0.0f);
          std::fill(dVp.begin(), dVp.end(), 0.0f);
          for (int i = 0; i < nq; ++i) {
            const int qi = row_of(cq, i);
            const float Li = L[std::size_t(h) * s.N + qi], Di = D[std::size_t(h) * s.N + qi];
            const int visible = p.causal ? std::min(i + 1, keys) : keys;
            for (int j = 0; j < visible; ++j) {
              const int kj = row_of(ck, j);
              float dot = 0, dP = 0;
              for (int e = 0; e < d; ++e) dot += at(Q, h, qi)[e] * at(K, h, kj)[e], dP += at(dO, h, qi)[e] * at(V, h, kj)[e];
              const float P = std::exp(scale * dot - Li), dS = P * (dP - Di);
              for (int e = 0; e < d; ++e) {
                dVp[std::size_t(j) * d + e] += P * at(dO, h, qi)[e];
                dKp[std::size_t(j) * d + e] += scale * dS * at(Q, h, qi)[e];
                dQacc[(std::size_t(h) * s.N + qi) * d + e] += scale * dS * at(K, h, kj)[e];
              }
            }
          }
          // The pair's dK, dV in the dtype, added to the sums of src's shard.
          for (int j = 0; j < keys; ++j)
            for (int e = 0; e < d; ++e) {
              const std::size_t x = ((std::size_t(p.kv) * heads + h) * c + j) * d + e;
              dkv[src][x] += course::round_to(t, dKp[std::size_t(j) * d + e]);
              dkv[src][shard + x] += course::round_to(t, dVp[std::size_t(j) * d + e]);
            }
        }
      }
    }
    // The passes of this step: K, V on to the next rank (not after the last step), the sums one
    // behind them, and after the last step the sums home.
    for (int r = 0; r < G && G > 1; ++r) {
      const std::uint64_t bytes = (step + 1 < G ? kv_bytes : 0) + dkv_bytes;
      traffic.sent[r] += bytes;
      traffic.received[(r + 1) % G] += bytes;
    }
  }
  for (int owner = 0; owner < G; ++owner)
    for (int k = 0; k < R; ++k) {
      const int chunk = split.chunk_of(owner, k);
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < split.rows(chunk); ++i)
          for (int e = 0; e < d; ++e) {
            const std::size_t x = ((std::size_t(k) * heads + h) * c + i) * d + e;
            const std::size_t y = (std::size_t(h) * s.N + row_of(chunk, i)) * d + e;
            dK[y] = course::round_to(t, dkv[owner][x]);
            dV[y] = course::round_to(t, dkv[owner][shard + x]);
          }
    }
  for (std::size_t x = 0; x < dQacc.size(); ++x) dQ[x] = course::round_to(t, dQacc[x]);
  return traffic;
}

}  // namespace ring
