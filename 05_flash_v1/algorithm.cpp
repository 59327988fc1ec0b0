#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../02_tiled_matmul/algorithm.hpp"
#include "../03_safe_softmax/algorithm.hpp"
#include "check.hpp"

namespace attention {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

// Sectors of the floats [first, first + n) of an array that starts on a sector.
double sectors(std::size_t first, std::size_t n) {
  return n == 0 ? 0.0 : double((first + n - 1) / 8 - first / 8 + 1);
}
}  // namespace

// --- standard attention ------------------------------------------------------------------------

course::IoCount standard_counted(const Shape& s, const float* Q, const float* K, const float* V,
                                 float* O) {
  const int N = s.N, d = s.d, T = kTransposeTile;
  const std::size_t head = std::size_t(N) * d, square = std::size_t(N) * N;
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> Kt(s.elements()), S(square * s.heads()), P(S.size());
  course::IoCount total;

  {  // 1. Kt = scale·Kᵀ, tile by tile: read 32 rows of 32, write 32 rows of 32.
    course::Hbm hbm;
    const auto gK = hbm.wrap(K, s.elements());
    const auto gKt = hbm.wrap(Kt.data(), Kt.size());
    std::vector<float> tile(T * T), row(T);
    for (int h = 0; h < s.heads(); ++h)
      for (int n0 = 0; n0 < N; n0 += T)
        for (int k0 = 0; k0 < d; k0 += T) {
          const int rows = std::min(T, N - n0);
          for (int r = 0; r < rows; ++r) gK.load(h * head + std::size_t(n0 + r) * d + k0, T, &tile[r * T]);
          for (int k = 0; k < T; ++k) {
            for (int r = 0; r < rows; ++r) row[r] = scale * tile[r * T + k];
            gKt.store(h * head + std::size_t(k0 + k) * N + n0, rows, row.data());
          }
        }
    total += hbm.count();
  }
  for (int h = 0; h < s.heads(); ++h)  // 2. S = Q·Kt
    total += matmul::register_blocked_counted(Q + h * head, Kt.data() + h * head,
                                              S.data() + h * square, N, N, d);
  if (s.causal) {  // 3. the mask: aligned 32-column stretches, lanes j > i
    course::Hbm hbm;
    const auto gS = hbm.wrap(S.data(), S.size());
    const std::vector<float> minus_inf(32, -kInf);
    for (int h = 0; h < s.heads(); ++h)
      for (int i = 0; i < N; ++i)
        for (int j0 = (i + 1) / 32 * 32; j0 < N; j0 += 32) {
          const int first = std::max(j0, i + 1), last = std::min(N, j0 + 32);
          if (first < last) gS.store(h * square + std::size_t(i) * N + first, last - first, minus_inf.data());
        }
    total += hbm.count();
  }
  total += softmax::safe_counted(S.data(), P.data(), s.heads() * N, N);  // 4. P = softmax(S)
  for (int h = 0; h < s.heads(); ++h)  // 5. O = P·V
    total += matmul::register_blocked_counted(P.data() + h * square, V + h * head, O + h * head, N,
                                              d, N);
  return total;
}

double standard_model_bytes(const Shape& s) {
  const int N = s.N, d = s.d;
  const double H = s.heads();
  // 1. the transpose: K read and Kt written once.
  double bytes = 8.0 * H * N * d;
  // 2 and 5: stage 02's model for each head's two products.
  bytes += H * (matmul::tiled_model_bytes(N, N, d, matmul::kBM, matmul::kBN) +
                matmul::tiled_model_bytes(N, d, N, matmul::kBM, matmul::kBN));
  if (s.causal) {  // 3. row i writes the sectors of its columns i+1 .. N-1
    double mask = 0;
    for (int i = 0; i + 1 < N; ++i) mask += sectors(std::size_t(i) * N + i + 1, N - i - 1);
    bytes += 32.0 * H * mask;
  }
  return bytes + softmax::safe_model_bytes(s.heads() * N, N);  // 4. stage 03's model
}

double standard_device_bytes(const Shape& s) {
  const double qkvo = 5.0 * double(s.elements());  // Q, K, V, O and Kt
  const double sp = 2.0 * s.heads() * double(s.N) * s.N;
  return 4.0 * (qkvo + sp + double(softmax::workspace_floats(s.heads() * s.N, s.N)));
}

// --- FlashAttention-1 --------------------------------------------------------------------------

Blocks flash_v1_blocks(long long M, int d) {
  course::require(M >= 4LL * d, "the SRAM budget M = " + std::to_string(M) +
                                    " floats is below 4d = " + std::to_string(4 * d) +
                                    ": no block of K, V, Q and O fits");
  const long long Bc = (M + 4LL * d - 1) / (4LL * d);
  course::require(Bc <= (1 << 20), "M too large: Bc = " + std::to_string(Bc));
  return {int(Bc), int(std::min<long long>(Bc, d))};
}

const std::vector<int>& flash_v1_compiled(int d) {
  static const std::vector<int> d32 = {64, 128, 256, 512}, d64 = {16, 32, 64, 128, 256},
                                d128 = {16, 32, 64}, none;
  return d == 32 ? d32 : d == 64 ? d64 : d == 128 ? d128 : none;
}

namespace {
// The first query block that has a row seeing any key of block j (all of them unless causal).
int first_row_block(const Shape& s, Blocks b, int j) {
  return s.causal ? (j * b.Bc) / b.Br : 0;
}
}  // namespace

course::IoCount flash_v1_counted(const Shape& s, Blocks b, const float* Q, const float* K,
                                 const float* V, float* O, float* l, float* m) {
  const int N = s.N, d = s.d, Bc = b.Bc, Br = b.Br;
  const int Tc = (N + Bc - 1) / Bc, Tr = (N + Br - 1) / Br;
  const float scale = 1.0f / std::sqrt(float(d));
  course::Hbm hbm;
  const auto gQ = hbm.wrap(Q, s.elements()), gK = hbm.wrap(K, s.elements()),
             gV = hbm.wrap(V, s.elements());
  const auto gO = hbm.wrap(O, s.elements());
  const auto gl = hbm.wrap(l, std::size_t(s.heads()) * N), gm = hbm.wrap(m, std::size_t(s.heads()) * N);
  std::vector<float> Kj(std::size_t(Bc) * d), Vj(Kj.size()), Qi(std::size_t(Br) * d), Oi(Qi.size());
  std::vector<float> li(Br), mi(Br), Sij(std::size_t(Br) * Bc), acc(d);
  for (int h = 0; h < s.heads(); ++h) {
    const std::size_t head = std::size_t(h) * N * d, stats = std::size_t(h) * N;
    for (int j = 0; j < Tc; ++j) {
      const int kv_rows = std::min(Bc, N - j * Bc);
      for (int c = 0; c < kv_rows; ++c) {  // load K_j, V_j
        gK.load(head + std::size_t(j * Bc + c) * d, d, &Kj[std::size_t(c) * d]);
        gV.load(head + std::size_t(j * Bc + c) * d, d, &Vj[std::size_t(c) * d]);
      }
      for (int i = first_row_block(s, b, j); i < Tr; ++i) {
        const int rows = std::min(Br, N - i * Br), row0 = i * Br;
        for (int r = 0; r < rows; ++r) gQ.load(head + std::size_t(row0 + r) * d, d, &Qi[std::size_t(r) * d]);
        if (j == 0) {  // the paper's initial O = 0, l = 0, m = −∞
          std::fill(Oi.begin(), Oi.end(), 0.0f);
          std::fill(li.begin(), li.end(), 0.0f);
          std::fill(mi.begin(), mi.end(), -kInf);
        } else {
          for (int r = 0; r < rows; ++r) gO.load(head + std::size_t(row0 + r) * d, d, &Oi[std::size_t(r) * d]);
          gl.load(stats + row0, rows, li.data());
          gm.load(stats + row0, rows, mi.data());
        }
        for (int r = 0; r < rows; ++r) {
          const int qi = row0 + r;
          float m_tilde = -kInf;  // S_ij row r, its max
          for (int c = 0; c < Bc; ++c) {
            float x = -kInf;
            if (c < kv_rows && visible(s, qi, j * Bc + c)) {
              float dot = 0.0f;
              for (int k = 0; k < d; ++k) dot += Qi[std::size_t(r) * d + k] * Kj[std::size_t(c) * d + k];
              x = dot * scale;
            }
            Sij[std::size_t(r) * Bc + c] = x;
            m_tilde = std::max(m_tilde, x);
          }
          float l_tilde = 0.0f;  // P̃ = exp(S − m̃) in place, and its row sum
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int c = 0; c < Bc; ++c) {
            const float x = Sij[std::size_t(r) * Bc + c];
            const float p = x == -kInf ? 0.0f : std::exp(x - m_tilde);
            l_tilde += p;
            for (int k = 0; k < d; ++k) acc[k] += p * (c < kv_rows ? Vj[std::size_t(c) * d + k] : 0.0f);
          }
          const float m_new = std::max(mi[r], m_tilde);
          const float alpha = mi[r] == -kInf ? 0.0f : std::exp(mi[r] - m_new);
          const float beta = m_tilde == -kInf ? 0.0f : std::exp(m_tilde - m_new);
          const float l_new = alpha * li[r] + beta * l_tilde;
          for (int k = 0; k < d; ++k) {
            float& o = Oi[std::size_t(r) * d + k];
            o = (li[r] * alpha * o + beta * acc[k]) / l_new;
          }
          li[r] = l_new;
          mi[r] = m_new;
        }
        for (int r = 0; r < rows; ++r) gO.store(head + std::size_t(row0 + r) * d, d, &Oi[std::size_t(r) * d]);
        gl.store(stats + row0, rows, li.data());
        gm.store(stats + row0, rows, mi.data());
      }
    }
  }
  return hbm.count();
}

double flash_v1_model_bytes(const Shape& s, Blocks b) {
  const int N = s.N, d = s.d;
  const int Tc = (N + b.Bc - 1) / b.Bc, Tr = (N + b.Br - 1) / b.Br;
  double q_rows = 0, o_rows_read = 0, o_rows_written = 0;  // rows of Q and O moved, per head
  for (int j = 0; j < Tc; ++j)
    for (int i = first_row_block(s, b, j); i < Tr; ++i) {
      const int rows = std::min(b.Br, N - i * b.Br);
      q_rows += rows;
      o_rows_written += rows;
      if (j > 0) o_rows_read += rows;
    }
  // A row of Q or O is d floats; with it go one float of l and one of m.
  const double per_head = 4.0 * (2.0 * N * d + q_rows * d + (o_rows_read + o_rows_written) * (d + 2));
  return s.heads() * per_head;
}

double flash_v1_device_bytes(const Shape& s) {
  return 4.0 * (4.0 * double(s.elements()) + 2.0 * s.heads() * double(s.N));
}

}  // namespace attention
