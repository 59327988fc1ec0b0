#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../02_tiled_matmul/algorithm.hpp"
#include "../05_flash_v1/algorithm.hpp"  // standard attention's forward: its model and transpose tile
#include "attention/counted_tensor.hpp"
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
  course::require(p.dq_shares >= 1 && p.kv.Bc % p.dq_shares == 0 && (p.dq_shares == 1 || !p.deterministic),
                  "flash backward: dQ's shares must divide the key block (atomic plans only)");
}

}  // namespace

course::IoCount flash_backward_counted(const Shape& s, course::Dtype dtype, const BackwardPlan& plan,
                                       const float* Q, const float* K, const float* V, const float* O,
                                       const float* dO, const float* L, float* dQ, float* dK, float* dV,
                                       bool O_in_float) {
  require_supported(s);
  require_plan(plan);
  const int N = s.N, d = s.d;
  const Tiles t = plan.kv;
  const int Tr = query_blocks(s, t), Tc = (N + t.Bc - 1) / t.Bc;
  const float scale = 1.0f / std::sqrt(float(d));
  auto round = [&](float x) { return dtype == course::Dtype::fp32 ? x : course::round_to(dtype, x); };
  const std::size_t n = s.elements(), rows_all = std::size_t(s.heads()) * N;
  Stored q(dtype, Q, n), k(dtype, K, n), v(dtype, V, n), o(O_in_float ? course::Dtype::fp32 : dtype, O, n),
      dout(dtype, dO, n);
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
        const int share_keys = t.Bc / plan.dq_shares;
        for (int part = 0; part < plan.dq_shares; ++part) {  // dQ_i's share of keys part·share_keys on
          std::fill(dQi.begin(), dQi.end(), 0.0f);
          for (int r = 0; r < rows; ++r)
            for (int c = part * share_keys; c < std::min(keys, (part + 1) * share_keys); ++c) {
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
        bytes += rows * (2.0 * row + (plan.deterministic ? 0.0 : plan.dq_shares * acc_row));
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
  if (dtype == course::Dtype::fp32) return standard_model_bytes(s);  // stage 05's
  const double e = double(course::bytes_of(dtype)), N = s.N, H = s.heads();
  return H * (4.0 * e * N * N + 4.0 * e * N * s.d);
}

double standard_backward_model_bytes(const Shape& s, course::Dtype dtype) {
  const double e = double(course::bytes_of(dtype)), N = s.N, H = s.heads(), d = s.d;
  if (dtype != course::Dtype::fp32) return H * (7.0 * e * N * N + 8.0 * e * N * d);
  using matmul::tiled_model_bytes;
  const int n = s.N;
  const double products = 3.0 * tiled_model_bytes(n, s.d, n, matmul::kBM, matmul::kBN) +
                          tiled_model_bytes(n, n, s.d, matmul::kBM, matmul::kBN);
  return H * (8.0 * N * N + 8.0 * N * d + 12.0 * N * N + 8.0 * N * N + products);
}

namespace {

// Y = Xᵀ for `batch` R × C matrices, as standard.cu's transpose kernel requests it: per 32 × 32
// tile, a warp's read of (what is left of) 32 floats of a row of X, and its write of a row of Y.
course::IoCount transpose_counted(const float* X, float* Y, int R, int C, int batch) {
  constexpr int T = kTransposeTile;
  course::Hbm hbm;
  const std::size_t m = std::size_t(R) * C;
  const auto gX = hbm.wrap(X, m * batch);
  const auto gY = hbm.wrap(Y, m * batch);
  std::vector<float> tile(T * T), row(T);
  for (int b = 0; b < batch; ++b)
    for (int r0 = 0; r0 < R; r0 += T)
      for (int c0 = 0; c0 < C; c0 += T) {
        const int rows = std::min(T, R - r0), cols = std::min(T, C - c0);
        for (int r = 0; r < rows; ++r) gX.load(b * m + std::size_t(r0 + r) * C + c0, cols, &tile[r * T]);
        for (int c = 0; c < cols; ++c) {
          for (int r = 0; r < rows; ++r) row[r] = tile[r * T + c];
          gY.store(b * m + std::size_t(c0 + c) * R + r0, rows, row.data());
        }
      }
  return hbm.count();
}

}  // namespace

course::IoCount standard_backward_counted(const Shape& s, const float* Q, const float* K, const float* V,
                                          const float* dO, float* dQ, float* dK, float* dV) {
  course::require(s.N > 0 && s.heads() > 0, "standard attention: empty shape " + s.text());
  const int N = s.N, d = s.d, H = s.heads();
  const std::size_t head = std::size_t(N) * d, square = std::size_t(N) * N;
  const float scale = 1.0f / std::sqrt(float(d));
  // P, the forward's output (stage 05's standard attention), computed here uncounted.
  std::vector<float> P(square * H), dS(square * H), T(square * H), Vt(s.elements());
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < N; ++i) {
      float* p = &P[h * square + std::size_t(i) * N];
      float m = -INFINITY;
      for (int j = 0; j < N; ++j) {
        float x = 0.0f;
        for (int k = 0; k < d; ++k) x += Q[h * head + std::size_t(i) * d + k] * (scale * K[h * head + std::size_t(j) * d + k]);
        p[j] = (s.causal && j > i) ? -INFINITY : x;
        m = std::max(m, p[j]);
      }
      float l = 0.0f;
      for (int j = 0; j < N; ++j) l += (p[j] = std::exp(p[j] - m));
      for (int j = 0; j < N; ++j) p[j] /= l;
    }
  course::IoCount total = transpose_counted(P.data(), T.data(), N, N, H);  // T = Pᵀ
  for (int h = 0; h < H; ++h)                                               // dV = T·dO
    total += matmul::register_blocked_counted(T.data() + h * square, dO + h * head, dV + h * head, N, d, N);
  total += transpose_counted(V, Vt.data(), N, d, H);                        // Vt = Vᵀ
  for (int h = 0; h < H; ++h)                                               // dP = dO·Vt
    total += matmul::register_blocked_counted(dO + h * head, Vt.data() + h * head, dS.data() + h * square, N, N, d);
  {  // dS = scale·P ∘ (dP − D), a row a block: P and dP read once, dS written once, by warps over
     // 32-float stretches from the row's start. Reads count each sector of the row once: when rows
     // are off the sector grid (N % 8 ≠ 0), two warps' stretches share a sector, and the block's
     // second request for it is served by the SM's L1 (measured on the H100 at N = 517: 8.67 MB
     // from L2, against 10.54 MB if every stretch's sectors crossed). Stores do not stay in L1, so
     // each stretch's store is counted on its own.
    course::Hbm hbm;
    const auto gP = hbm.wrap(P.data(), P.size());
    const auto gS = hbm.wrap(dS.data(), dS.size());
    std::vector<float> p(N), dp(N);
    for (std::size_t row = 0; row < std::size_t(H) * N; ++row) {
      const std::size_t at = row * N;
      gP.load(at, N, p.data());
      gS.load(at, N, dp.data());
      float D = 0.0f;
      for (int j = 0; j < N; ++j) D += p[j] * dp[j];
      for (int j = 0; j < N; ++j) dp[j] = scale * p[j] * (dp[j] - D);
      for (int j = 0; j < N; j += 32) gS.store(at + j, std::min(32, N - j), &dp[j]);
    }
    total += hbm.count();
  }
  for (int h = 0; h < H; ++h)                                               // dQ = dS·K
    total += matmul::register_blocked_counted(dS.data() + h * square, K + h * head, dQ + h * head, N, d, N);
  total += transpose_counted(dS.data(), T.data(), N, N, H);                 // T = dSᵀ
  for (int h = 0; h < H; ++h)                                               // dK = T·Q
    total += matmul::register_blocked_counted(T.data() + h * square, Q + h * head, dK + h * head, N, d, N);
  return total;
}

double standard_backward_device_bytes(const Shape& s, course::Dtype dtype) {
  const double e = double(course::bytes_of(dtype)), N = s.N, H = s.heads();
  if (dtype == course::Dtype::fp32)  // stage 05's forward memory, dO and the gradients, T
    return standard_device_bytes(s) + 4.0 * (4.0 * double(s.elements()) + H * N * N);
  return H * (8.0 * e * N * s.d + 2.0 * e * N * N);
}

}  // namespace attention
