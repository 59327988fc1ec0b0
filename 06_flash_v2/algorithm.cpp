#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "check.hpp"
#include "attention/counted_tensor.hpp"

namespace attention {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kLRowsPerStore = 8;  // a warp writes L for 8 consecutive rows per store instruction

// Keys that query block i reads: whole key blocks, but not past N.
int keys_read(const Shape& s, Tiles t, int i) { return std::min(s.N, key_blocks(s, t, i) * t.Bc); }

}  // namespace

course::IoCount flash_v2_counted(const Shape& s, course::Dtype dtype, Tiles t, const float* Q,
                                 const float* K, const float* V, float* O, float* L, float* O_unrounded) {
  require_supported(s);
  course::require(t.Br >= 1 && t.Bc >= 1, "flash_v2: block sizes must be positive");
  const int N = s.N, d = s.d, Tr = query_blocks(s, t);
  const bool rounds = dtype != course::Dtype::fp32;
  const float scale = 1.0f / std::sqrt(float(d));
  Stored q(dtype, Q, s.elements()), k(dtype, K, s.elements()), v(dtype, V, s.elements()),
      o(dtype, Q, s.elements());
  std::vector<float> l_out(std::size_t(s.heads()) * N);
  course::Hbm hbm;
  Tensor gQ(hbm, q), gK(hbm, k), gV(hbm, v), gO(hbm, o);
  const auto gL = hbm.wrap(l_out.data(), l_out.size());

  std::vector<float> Qi(std::size_t(t.Br) * d), Kj(std::size_t(t.Bc) * d), Vj(Kj.size());
  std::vector<float> Oi(Qi.size()), l(t.Br), m(t.Br), S(t.Bc), Li(t.Br);
  for (int h = 0; h < s.heads(); ++h) {
    const std::size_t head = std::size_t(h) * N * d;
    for (int i = 0; i < Tr; ++i) {
      // The block's rows row0 + r for r in [r0, rows): r0 > 0 only for a first block laid from the
      // end (Tiles::from_end), whose rows before 0 are padding.
      const int row0 = query_row0(s, t, i), r0 = std::max(0, -row0), rows = std::min(t.Br, N - row0);
      for (int r = r0; r < rows; ++r) gQ.load(head + std::size_t(row0 + r) * d, d, &Qi[std::size_t(r) * d]);
      std::fill(Oi.begin(), Oi.end(), 0.0f);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(m.begin(), m.end(), -kInf);
      for (int j = 0; j < key_blocks(s, t, i); ++j) {
        const int key0 = j * t.Bc, keys = std::min(t.Bc, N - key0);
        for (int c = 0; c < keys; ++c) {
          gK.load(head + std::size_t(key0 + c) * d, d, &Kj[std::size_t(c) * d]);
          gV.load(head + std::size_t(key0 + c) * d, d, &Vj[std::size_t(c) * d]);
        }
        for (int r = r0; r < rows; ++r) {
          float row_max = -kInf;
          for (int c = 0; c < keys; ++c) {
            S[c] = -kInf;
            if (!visible(s, row0 + r, key0 + c)) continue;
            float dot = 0.0f;
            for (int x = 0; x < d; ++x) dot += Qi[std::size_t(r) * d + x] * Kj[std::size_t(c) * d + x];
            S[c] = dot;
            row_max = std::max(row_max, dot);
          }
          const float m_new = std::max(m[r], row_max);
          if (m_new == -kInf) continue;  // nothing visible yet: the state stays (0, 0, −∞)
          const float alpha = std::exp(scale * (m[r] - m_new));  // 0 when m was −∞
          float* o_row = &Oi[std::size_t(r) * d];
          for (int x = 0; x < d; ++x) o_row[x] *= alpha;
          l[r] *= alpha;
          for (int c = 0; c < keys; ++c) {
            if (S[c] == -kInf) continue;
            const float p = std::exp(scale * (S[c] - m_new));
            l[r] += p;  // the sum takes P̃ as computed, the product P̃ as the tensor cores see it
            const float p_mma = rounds ? course::round_to(dtype, p) : p;
            for (int x = 0; x < d; ++x) o_row[x] += p_mma * Vj[std::size_t(c) * d + x];
          }
          m[r] = m_new;
        }
      }
      for (int r = r0; r < rows; ++r) {  // deferred normalisation: one division per row, at the end
        for (int x = 0; x < d; ++x) Oi[std::size_t(r) * d + x] /= l[r];
        gO.store(head + std::size_t(row0 + r) * d, d, &Oi[std::size_t(r) * d]);
        if (O_unrounded)
          std::copy_n(&Oi[std::size_t(r) * d], d, O_unrounded + head + std::size_t(row0 + r) * d);
        Li[r] = scale * m[r] + std::log(l[r]);
      }
      // L in stores of 8 rows from the block's first (padding rows left out).
      const std::size_t stats = std::size_t(h) * N;
      for (int r = 0; r < rows; r += kLRowsPerStore) {
        const int a = std::max(r, r0), b = std::min(r + kLRowsPerStore, rows);
        if (a < b) gL.store(stats + std::size_t(row0 + a), b - a, &Li[a]);
      }
    }
  }
  o.copy_to(O);
  std::copy(l_out.begin(), l_out.end(), L);
  return hbm.count();
}

double flash_v2_model_bytes(const Shape& s, course::Dtype dtype, Tiles t) {
  const int N = s.N, Tr = query_blocks(s, t);
  const double row = double(course::bytes_of(dtype)) * s.d;  // bytes of one row of Q, K, V or O
  double keys = 0.0, l_sectors = 0.0;
  for (int i = 0; i < Tr; ++i) keys += keys_read(s, t, i);
  for (int h = 0; h < s.heads(); ++h)  // L: per block, stretches of 8 rows
    for (int i = 0; i < Tr; ++i) {
      const int row0 = query_row0(s, t, i), r0 = std::max(0, -row0), rows = std::min(t.Br, N - row0);
      for (int r = 0; r < rows; r += kLRowsPerStore) {
        const int a = std::max(r, r0), b = std::min(r + kLRowsPerStore, rows);
        if (a < b) l_sectors += float_sectors(std::size_t(h) * N + row0 + a, b - a);
      }
    }
  return s.heads() * row * (2.0 * N + 2.0 * keys) + 32.0 * l_sectors;
}

double flash_v2_device_bytes(const Shape& s, course::Dtype dtype) {
  return 4.0 * double(s.elements()) * double(course::bytes_of(dtype)) + 4.0 * s.heads() * double(s.N);
}

}  // namespace attention
