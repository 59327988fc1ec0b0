#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "online.hpp"

namespace softmax {

namespace {
// The state of n values as the kernels form it: each of many threads runs the recurrence over a
// short stretch (here 64 values), and the stretches' states are merged pairwise, as a tree. A
// single running state over 10^5 values would gather far more rounding error than the GPU does.
MaxSum reduce_online(const float* x, std::size_t n) {
  std::vector<MaxSum> level;
  for (std::size_t i = 0; i < n; i += 64) {
    MaxSum s = empty_piece();
    for (std::size_t j = i; j < std::min(n, i + 64); ++j) s = online_update(s, x[j]);
    level.push_back(s);
  }
  if (level.empty()) return empty_piece();
  while (level.size() > 1) {
    std::vector<MaxSum> next;
    for (std::size_t i = 0; i < level.size(); i += 2) {
      next.push_back(i + 1 < level.size() ? combine(level[i], level[i + 1]) : level[i]);
    }
    level.swap(next);
  }
  return level[0];
}
}  // namespace

course::IoCount online_counted(const float* X, float* Y, int R, int C) {
  PassMemory mem(X, Y, R, C);
  const auto& [x, y, m_part, l_part] = std::tie(mem.x, mem.y, mem.m_part, mem.l_part);
  const int S = segments(C);
  for (int r = 0; r < R; ++r)  // pass 1: (m, l) of each segment, by the recurrence
    for (int s = 0; s < S; ++s) {
      std::vector<float> values;
      read_segment(x, r, s, C, [&](float v) { values.push_back(v); });
      const MaxSum state = reduce_online(values.data(), values.size());
      write_partial(m_part, r, s, C, state.m);
      write_partial(l_part, r, s, C, state.l);
    }
  for (int r = 0; r < R; ++r)  // pass 2: merge the row's partials, normalise
    for (int s = 0; s < S; ++s) {
      const auto m = read_partials(m_part, r, C), l = read_partials(l_part, r, C);
      MaxSum row = empty_piece();
      for (int i = 0; i < S; ++i) row = combine(row, MaxSum{m[i], l[i]});
      map_segment(x, y, r, s, C, [&](float v) { return std::exp(v - row.m) / row.l; });
    }
  return mem.hbm.count();
}

course::IoCount on_chip_counted(const float* X, float* Y, int R, int C) {
  course::Hbm hbm;
  const auto x = hbm.wrap(X, std::size_t(R) * C);
  const auto y = hbm.wrap(Y, std::size_t(R) * C);
  const int width = request_floats(C);
  std::vector<float> row(C);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; c += width) x.load(std::size_t(r) * C + c, std::min(width, C - c), &row[c]);
    // On chip: as many passes over `row` as we like, for free.
    const MaxSum state = reduce_online(row.data(), row.size());
    for (float& v : row) v = std::exp(v - state.m) / state.l;
    for (int c = 0; c < C; c += width) y.store(std::size_t(r) * C + c, std::min(width, C - c), &row[c]);
  }
  return hbm.count();
}

course::IoCount attention_row_counted(const float* Q, const float* K, const float* V, float* O,
                                      int Nq, int N, int d) {
  course::Hbm hbm;
  const auto q_view = hbm.wrap(Q, std::size_t(Nq) * d);
  const auto k_view = hbm.wrap(K, std::size_t(N) * d);
  const auto v_view = hbm.wrap(V, std::size_t(N) * d);
  const auto o_view = hbm.wrap(O, std::size_t(Nq) * d);
  const int T = kTileFloats / d;  // keys per tile
  const float scale = 1.0f / std::sqrt(float(d));
  const int width = 4 * course::kWarpSize;  // the block loads tiles with 16-byte accesses
  std::vector<float> k_tile(kTileFloats), v_tile(kTileFloats), q(d), o(d);
  for (int i0 = 0; i0 < Nq; i0 += kQueriesPerBlock) {
    const int queries = std::min(kQueriesPerBlock, Nq - i0);
    std::vector<std::vector<float>> q_all(queries), o_all(queries, std::vector<float>(d, 0.0f));
    std::vector<MaxSum> state(queries, empty_piece());
    for (int w = 0; w < queries; ++w) {  // each warp loads its query, scaled
      q_all[w].resize(d);
      q_view.load(std::size_t(i0 + w) * d, d, q_all[w].data());
      for (float& e : q_all[w]) e *= scale;
    }
    for (int j0 = 0; j0 < N; j0 += T) {
      const int keys = std::min(T, N - j0), floats = keys * d;
      for (int f = 0; f < floats; f += width) {
        k_view.load(std::size_t(j0) * d + f, std::min(width, floats - f), &k_tile[f]);
        v_view.load(std::size_t(j0) * d + f, std::min(width, floats - f), &v_tile[f]);
      }
      for (int w = 0; w < queries; ++w)
        for (int t = 0; t < keys; ++t) {
          float s = 0.0f;
          for (int e = 0; e < d; ++e) s += q_all[w][e] * k_tile[t * d + e];
          const float m = nan_max(state[w].m, s);
          const float a = rescale(state[w].m, m), p = rescale(s, m);
          state[w] = {m, state[w].l * a + p};
          for (int e = 0; e < d; ++e) o_all[w][e] = o_all[w][e] * a + p * v_tile[t * d + e];
        }
    }
    for (int w = 0; w < queries; ++w) {
      for (int e = 0; e < d; ++e) o_all[w][e] /= state[w].l;
      o_view.store(std::size_t(i0 + w) * d, d, o_all[w].data());
    }
  }
  return hbm.count();
}

double attention_row_model_bytes(int Nq, int N, int d) {
  const double batches = std::ceil(double(Nq) / kQueriesPerBlock);
  return 4.0 * (2.0 * Nq * d + batches * 2.0 * N * d);
}

}  // namespace softmax
