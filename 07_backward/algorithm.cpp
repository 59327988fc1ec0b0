#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../06_flash_v2/counted_tensor.hpp"
#include "check.hpp"

namespace attention {

namespace {

// Sectors of rows [row0, row0 + rows) of a float vector (L, D) in the warp requests a block makes.
double stat_sectors(std::size_t head_first, int row0, int rows, int stretch = kStatsRowsPerRequest) {
  double sectors = 0.0;
  for (int r = 0; r < rows; r += stretch) sectors += float_sectors(head_first + row0 + r, std::min(stretch, rows - r));
  return sectors;
}

void require_plan(const BackwardPlan& p) {
  course::require(p.kv.Br >= 1 && p.kv.Bc >= 1, "flash backward: block sizes must be positive");
  course::require(!p.deterministic || (p.dq.Br >= 1 && p.dq.Bc >= 1),
                  "flash backward: the deterministic dQ pass needs block sizes");
}

}  // namespace

course::IoCount flash_backward_counted(const Shape& s, course::Dtype dtype, const BackwardPlan& plan,
                                       const float* Q, const float* K, const float* V, const float* O,
                                       const float* dO, const float* L, float* dQ, float* dK, float* dV) {
  require_supported(s);
  require_plan(plan);
  const int N = s.N, d = s.d;
  const Tiles t = plan.kv;
  const int Tr = query_blocks(s, t), Tc = (N + t.Bc - 1) / t.Bc;
  const float scale = 1.0f / std::sqrt(float(d));
  auto round = [&](float x) { return dtype == course::Dtype::fp32 ? x : course::round_to(dtype, x); };
  const std::size_t n = s.elements(), rows_all = std::size_t(s.heads()) * N;
  Stored q(dtype, Q, n), k(dtype, K, n), v(dtype, V, n), o(dtype, O, n), dout(dtype, dO, n);
  Stored dq(dtype, Q, n), dk(dtype, K, n), dv(dtype, V, n);
  std::vector<float> l_in(L, L + rows_all), D(rows_all), acc(plan.deterministic ? 0 : n);
  course::Hbm hbm;
  Tensor gQ(hbm, q), gK(hbm, k), gV(hbm, v), gO(hbm, o), gdO(hbm, dout), gdQ(hbm, dq), gdK(hbm, dk), gdV(hbm, dv);
  const auto gL = hbm.wrap(l_in.data(), l_in.size());
  const auto gD = hbm.wrap(D.data(), D.size());
  const auto gAcc = hbm.wrap(acc.data(), acc.size());

  std::vector<float> a(d), b(d), zeros(d, 0.0f);
  for (int h = 0; h < s.heads(); ++h) {
    const std::size_t head = std::size_t(h) * N * d, first = std::size_t(h) * N;
    auto row = [&](int r) { return head + std::size_t(r) * d; };
    // --- preprocess: D = rowsum(dO ∘ O), and dQacc = 0 ---
    for (int row0 = 0; row0 < N; row0 += kPreprocessRows) {
      const int rows = std::min(kPreprocessRows, N - row0);
      std::vector<float> Di(rows);
      for (int r = 0; r < rows; ++r) {
        gO.load(row(row0 + r), d, a.data());
        gdO.load(row(row0 + r), d, b.data());
        float sum = 0.0f;
        for (int x = 0; x < d; ++x) sum += a[x] * b[x];
        Di[r] = sum;
        if (!plan.deterministic) gAcc.store(row(row0 + r), d, zeros.data());
      }
      for (int r = 0; r < rows; r += kStatsRowsPerRequest)
        gD.store(first + row0 + r, std::min(kStatsRowsPerRequest, rows - r), &Di[r]);
    }
    // --- key-outer: dK_j, dV_j on chip; dQ's shares into dQacc ---
    std::vector<float> Kj(std::size_t(t.Bc) * d), Vj(Kj.size()), dKj(Kj.size()), dVj(Kj.size());
    std::vector<float> Qi(std::size_t(t.Br) * d), dOi(Qi.size()), Li(t.Br), Di(t.Br), dQi(Qi.size());
    auto load_rows = [&](Tensor& g, int row0, int rows, float* out) {
      for (int r = 0; r < rows; ++r) g.load(row(row0 + r), d, out + std::size_t(r) * d);
    };
    auto load_stats = [&](int row0, int rows, int stretch) {
      for (int r = 0; r < rows; r += stretch) {
        const int m = std::min(stretch, rows - r);
        gL.load(first + row0 + r, m, &Li[r]);
        gD.load(first + row0 + r, m, &Di[r]);
      }
    };
    // S, P, dP and dS of one (row, key) pair, as the kernels compute them.
    struct Pair {
      float P, dS;
    };
    auto pair = [&](const float* q_row, const float* do_row, float Lr, float Dr, const float* k_row,
                    const float* v_row) {
      float S = 0.0f, dP = 0.0f;
      for (int x = 0; x < d; ++x) S += q_row[x] * k_row[x];
      for (int x = 0; x < d; ++x) dP += do_row[x] * v_row[x];
      const float P = std::exp(scale * S - Lr);
      return Pair{P, P * (dP - Dr)};
    };
    for (int j = 0; j < Tc; ++j) {
      const int key0 = j * t.Bc, keys = std::min(t.Bc, N - key0);
      load_rows(gK, key0, keys, Kj.data());
      load_rows(gV, key0, keys, Vj.data());
      std::fill(dKj.begin(), dKj.end(), 0.0f);
      std::fill(dVj.begin(), dVj.end(), 0.0f);
      for (int i = first_query_block(t.Br, t.Bc, s.causal, j); i < Tr; ++i) {
        const int row0 = i * t.Br, rows = std::min(t.Br, N - row0);
        load_rows(gQ, row0, rows, Qi.data());
        load_rows(gdO, row0, rows, dOi.data());
        load_stats(row0, rows, kStatsRowsPerRequest);
        std::fill(dQi.begin(), dQi.end(), 0.0f);
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < keys; ++c) {
            if (!visible(s, row0 + r, key0 + c)) continue;
            const float* q_row = &Qi[std::size_t(r) * d];
            const float* do_row = &dOi[std::size_t(r) * d];
            const float* k_row = &Kj[std::size_t(c) * d];
            const Pair p = pair(q_row, do_row, Li[r], Di[r], k_row, &Vj[std::size_t(c) * d]);
            const float P = round(p.P), dS = round(p.dS);
            for (int x = 0; x < d; ++x) {
              dVj[std::size_t(c) * d + x] += P * do_row[x];
              dKj[std::size_t(c) * d + x] += dS * q_row[x];
              dQi[std::size_t(r) * d + x] += dS * k_row[x];
            }
          }
        if (!plan.deterministic)
          for (int r = 0; r < rows; ++r) {  // an atomic add: the values go to L2, which adds them
            float* target = &acc[row(row0 + r)];
            for (int x = 0; x < d; ++x) a[x] = target[x] + dQi[std::size_t(r) * d + x];
            gAcc.store(row(row0 + r), d, a.data());
          }
      }
      for (std::size_t x = 0; x < std::size_t(keys) * d; ++x) dKj[x] *= scale;
      for (int c = 0; c < keys; ++c) {
        gdK.store(row(key0 + c), d, &dKj[std::size_t(c) * d]);
        gdV.store(row(key0 + c), d, &dVj[std::size_t(c) * d]);
      }
    }
    if (!plan.deterministic) {  // --- dQ = scale·dQacc ---
      for (int r = 0; r < N; ++r) {
        gAcc.load(row(r), d, a.data());
        for (int x = 0; x < d; ++x) a[x] *= scale;
        gdQ.store(row(r), d, a.data());
      }
      continue;
    }
    // --- deterministic: the query-outer dQ pass, as stage 06's forward walks the blocks ---
    const Tiles u = plan.dq;
    Kj.resize(std::size_t(u.Bc) * d);
    Vj.resize(Kj.size());
    Qi.resize(std::size_t(u.Br) * d), dOi.resize(Qi.size()), dQi.resize(Qi.size());
    Li.resize(u.Br), Di.resize(u.Br);
    for (int i = 0; i < query_blocks(s, u); ++i) {
      const int row0 = i * u.Br, rows = std::min(u.Br, N - row0);
      load_rows(gQ, row0, rows, Qi.data());
      load_rows(gdO, row0, rows, dOi.data());
      load_stats(row0, rows, kDqStatsRowsPerRequest);
      std::fill(dQi.begin(), dQi.end(), 0.0f);
      for (int jj = 0; jj < key_blocks(s, u, i); ++jj) {
        const int key0 = jj * u.Bc, keys = std::min(u.Bc, N - key0);
        load_rows(gK, key0, keys, Kj.data());
        load_rows(gV, key0, keys, Vj.data());
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < keys; ++c) {
            if (!visible(s, row0 + r, key0 + c)) continue;
            const float* k_row = &Kj[std::size_t(c) * d];
            const Pair p = pair(&Qi[std::size_t(r) * d], &dOi[std::size_t(r) * d], Li[r], Di[r], k_row,
                                &Vj[std::size_t(c) * d]);
            const float dS = round(p.dS);
            for (int x = 0; x < d; ++x) dQi[std::size_t(r) * d + x] += dS * k_row[x];
          }
      }
      for (int r = 0; r < rows; ++r) {
        for (int x = 0; x < d; ++x) a[x] = scale * dQi[std::size_t(r) * d + x];
        gdQ.store(row(row0 + r), d, a.data());
      }
    }
  }
  dq.copy_to(dQ);
  dk.copy_to(dK);
  dv.copy_to(dV);
  return hbm.count();
}

double flash_backward_model_bytes(const Shape& s, course::Dtype dtype, const BackwardPlan& plan) {
  require_plan(plan);
  const int N = s.N, d = s.d;
  const Tiles t = plan.kv;
  const double e = double(course::bytes_of(dtype)), row = e * d, acc_row = 4.0 * d;
  const int Tr = query_blocks(s, t), Tc = (N + t.Bc - 1) / t.Bc;
  double bytes = 0.0;
  for (int h = 0; h < s.heads(); ++h) {
    const std::size_t first = std::size_t(h) * N;
    // preprocess: O and dO in, D out (and dQacc = 0)
    bytes += 2.0 * row * N + (plan.deterministic ? 0.0 : acc_row * N);
    for (int row0 = 0; row0 < N; row0 += kPreprocessRows)
      bytes += 32.0 * stat_sectors(first, row0, std::min(kPreprocessRows, N - row0));
    // key-outer: K, V in and dK, dV out once; per pair Q_i, dO_i, L_i, D_i (and dQacc_i's adds)
    bytes += 4.0 * row * N;
    for (int j = 0; j < Tc; ++j)
      for (int i = first_query_block(t.Br, t.Bc, s.causal, j); i < Tr; ++i) {
        const int rows = std::min(t.Br, N - i * t.Br);
        bytes += rows * (2.0 * row + (plan.deterministic ? 0.0 : acc_row));
        bytes += 2.0 * 32.0 * stat_sectors(first, i * t.Br, rows);
      }
    if (!plan.deterministic) {
      bytes += (acc_row + row) * N;  // dQacc in, dQ out
      continue;
    }
    const Tiles u = plan.dq;  // query-outer: Q, dO, L, D in and dQ out once; K and V per block
    for (int i = 0; i < query_blocks(s, u); ++i) {
      const int rows = std::min(u.Br, N - i * u.Br);
      bytes += rows * 3.0 * row + 2.0 * 32.0 * stat_sectors(first, i * u.Br, rows, kDqStatsRowsPerRequest);
      bytes += 2.0 * row * std::min(N, key_blocks(s, u, i) * u.Bc);
    }
  }
  return bytes;
}

double flash_backward_device_bytes(const Shape& s, course::Dtype dtype, bool deterministic) {
  const double n = double(s.elements()), rows = double(s.heads()) * s.N;
  return 8.0 * n * double(course::bytes_of(dtype)) + 8.0 * rows + (deterministic ? 0.0 : 4.0 * n);
}

double standard_forward_model_bytes(const Shape& s, course::Dtype dtype) {
  const double e = double(course::bytes_of(dtype)), N = s.N, H = s.heads();
  return H * (4.0 * e * N * N + 4.0 * e * N * s.d);
}

double standard_backward_model_bytes(const Shape& s, course::Dtype dtype) {
  const double e = double(course::bytes_of(dtype)), N = s.N, H = s.heads();
  return H * (7.0 * e * N * N + 8.0 * e * N * s.d);
}

double standard_backward_device_bytes(const Shape& s, course::Dtype dtype) {
  const double e = double(course::bytes_of(dtype)), N = s.N, H = s.heads();
  return H * (8.0 * e * N * s.d + 2.0 * e * N * N);
}

}  // namespace attention
