#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/counted_tensor.hpp"  // float_sectors
#include "check.hpp"

namespace attention::fp8 {

namespace {

constexpr int kLRowsPerStore = 8;  // a warp writes L for 8 consecutive rows a store

int n64(const Shape& s) { return (s.N + 63) / 64 * 64; }
// Keys of block j that lie in the tensor (TMA reads no row from N on) and Vᵀ's columns of it that lie
// in its rows of padded_keys(N) bytes.
int keys_in(const Shape& s, Tiles t, int j) { return std::max(0, std::min(s.N, (j + 1) * t.Bc) - j * t.Bc); }
int vt_columns(const Shape& s, Tiles t, int j) {
  return std::max(0, std::min(padded_keys(s.N), (j + 1) * t.Bc) - j * t.Bc);
}

}  // namespace

int fp8_query_row0(const Shape& s, Tiles t, int i) { return query_row0(n64(s), t.Br, s.causal, true, i); }
int fp8_key_blocks(const Shape& s, Tiles t, int i) { return key_blocks(n64(s), t.Br, t.Bc, s.causal, i, true); }

course::IoCount fp8_counted(const Shape& s, course::Dtype out, Tiles t, const QuantizedInputs& q, float* O, float* L) {
  require_supported(s);
  course::require(out == course::Dtype::fp16 || out == course::Dtype::bf16, "fp8_counted: O in fp16 or bf16");
  course::require(q.Q.N == s.N && q.Q.d == s.d && q.Q.heads == s.heads(), "fp8_counted: the quantised tensors' shape");
  const int N = s.N, d = s.d, Np = padded_keys(N), Tr = (N + t.Br - 1) / t.Br;
  const float c0 = float(1.0 / std::sqrt(double(d)) * 1.4426950408889634);  // scale·log₂e, folded as the kernels do
  std::vector<std::uint8_t> Qb = q.Q.bytes, Kb = q.K.bytes, Vt = transpose_v(q.V);
  std::vector<std::uint16_t> Ob(s.elements());
  std::vector<float> Lf(std::size_t(s.heads()) * N);
  course::Hbm hbm;
  auto gQ = hbm.wrap(Qb.data(), Qb.size()), gK = hbm.wrap(Kb.data(), Kb.size()), gV = hbm.wrap(Vt.data(), Vt.size());
  auto gO = hbm.wrap(Ob.data(), Ob.size());
  auto gL = hbm.wrap(Lf.data(), Lf.size());
  std::vector<std::uint8_t> qrow(d), krows(std::size_t(t.Bc) * d), vcols(std::size_t(d) * t.Bc);
  std::vector<float> qv(std::size_t(t.Br) * d), kv(std::size_t(t.Bc) * d), vv(std::size_t(t.Bc) * d);
  std::vector<double> o(std::size_t(t.Br) * d);
  std::vector<float> m(t.Br), l(t.Br), x(t.Bc);
  std::vector<std::uint16_t> orow(d);
  for (int h = 0; h < s.heads(); ++h)
    for (int i = 0; i < Tr; ++i) {
      const int row0 = fp8_query_row0(s, t, i), blocks = fp8_key_blocks(s, t, i);
      const int r0 = std::max(0, row0), r1 = std::min(N, row0 + t.Br);  // the rows in the tensor
      for (int r = r0; r < r1; ++r) {
        gQ.load((std::size_t(h) * N + r) * d, d, qrow.data());
        for (int c = 0; c < d; ++c) qv[std::size_t(r - row0) * d + c] = from_e4m3(qrow[c]);
      }
      std::fill(o.begin(), o.end(), 0.0);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      for (int j = blocks - 1; j >= 0; --j) {
        const int k0 = j * t.Bc, keys = keys_in(s, t, j), cols = vt_columns(s, t, j);
        for (int k = 0; k < keys; ++k) gK.load((std::size_t(h) * N + k0 + k) * d, d, krows.data() + std::size_t(k) * d);
        for (int c = 0; c < d; ++c)
          if (cols > 0) gV.load((std::size_t(h) * d + c) * Np + k0, cols, vcols.data() + std::size_t(c) * t.Bc);
        // The block's keys and values as the tensor cores see them: K's e4m3 values, V's times its descale
        // (Vᵀ keeps key k0 + k at key_position(k0 + k)).
        for (int k = 0; k < keys; ++k) {
          const int pos = key_position(k0 + k) - k0;
          const float sv = q.V.descale(h, k0 + k);
          for (int c = 0; c < d; ++c) {
            kv[std::size_t(k) * d + c] = from_e4m3(krows[std::size_t(k) * d + c]);
            vv[std::size_t(k) * d + c] = from_e4m3(vcols[std::size_t(c) * t.Bc + pos]) * sv;
          }
        }
        for (int r = r0; r < r1; ++r) {
          // The warpgroup's Q descale (its 64 rows lie in one scale block), each key's K descale.
          const float cq = c0 * q.Q.descale(h, std::min(std::max(row0 + (r - row0) / 64 * 64, 0), N - 1));
          const float* qr = qv.data() + std::size_t(r - row0) * d;
          float mx = m[r - row0];
          for (int k = 0; k < keys; ++k) {
            if (s.causal && k0 + k > r) {
              x[k] = -std::numeric_limits<float>::infinity();
              continue;
            }
            double dot = 0.0;
            const float* kr = kv.data() + std::size_t(k) * d;
            for (int c = 0; c < d; ++c) dot += double(qr[c]) * kr[c];
            x[k] = float(dot) * std::max(cq * q.K.descale(h, k0 + k), std::numeric_limits<float>::min());
            mx = std::max(mx, x[k]);
          }
          const float shift = mx == -std::numeric_limits<float>::infinity() ? 0.0f : mx;
          const double alpha = std::exp2(double(m[r - row0]) - shift);
          m[r - row0] = mx;
          double sum = 0.0;
          double* acc = o.data() + std::size_t(r - row0) * d;  // o in V's own units (the descales applied)
          for (int c = 0; c < d; ++c) acc[c] *= alpha;
          for (int k = 0; k < keys; ++k) {
            const float p = from_e4m3(to_e4m3(std::exp2(x[k] - shift + 8.0f)));  // P̃ · 2^8 in e4m3
            if (p == 0.0f) continue;
            sum += p;
            const float* vr = vv.data() + std::size_t(k) * d;
            for (int c = 0; c < d; ++c) acc[c] += double(p) * vr[c];
          }
          l[r - row0] = float(double(l[r - row0]) * alpha + sum);
        }
      }
      // The epilogue: O a row at a time; L as a warp stores it, 8 rows a request.
      for (int r = r0; r < r1; ++r) {
        const double* acc = o.data() + std::size_t(r - row0) * d;
        for (int c = 0; c < d; ++c)
          orow[c] = course::float_to_bits(out, float(acc[c] / l[r - row0]) + q.v_mean[std::size_t(h) * d + c]);
        gO.store((std::size_t(h) * N + r) * d, d, orow.data());
      }
      for (int a = r0; a < r1; a = (a / kLRowsPerStore + 1) * kLRowsPerStore) {
        const int b = std::min(r1, (a / kLRowsPerStore + 1) * kLRowsPerStore);
        std::vector<float> Ls(b - a);
        for (int r = a; r < b; ++r) Ls[r - a] = float(0.6931471805599453 * (double(m[r - row0]) - 8.0) + std::log(double(l[r - row0])));
        gL.store(std::size_t(h) * N + a, b - a, Ls.data());
      }
    }
  for (std::size_t k = 0; k < Ob.size(); ++k) O[k] = course::bits_to_float(out, Ob[k]);
  std::copy(Lf.begin(), Lf.end(), L);
  return hbm.count();
}

double fp8_model_bytes(const Shape& s, course::Dtype out, Tiles t) {
  const int N = s.N, Tr = (N + t.Br - 1) / t.Br;
  double kv = 0.0, l_sectors = 0.0;  // K's rows and Vᵀ's columns a head, and L's sectors
  for (int i = 0; i < Tr; ++i)
    for (int j = 0; j < fp8_key_blocks(s, t, i); ++j) kv += keys_in(s, t, j) + vt_columns(s, t, j);
  for (int h = 0; h < s.heads(); ++h)
    for (int i = 0; i < Tr; ++i) {
      const int row0 = fp8_query_row0(s, t, i), r0 = std::max(0, row0), r1 = std::min(N, row0 + t.Br);
      for (int a = r0; a < r1; a = (a / kLRowsPerStore + 1) * kLRowsPerStore)
        l_sectors += float_sectors(std::size_t(h) * N + a, std::min(r1, (a / kLRowsPerStore + 1) * kLRowsPerStore) - a);
    }
  return double(s.heads()) * s.d * (double(N) * (1.0 + double(course::bytes_of(out))) + kv) + 32.0 * l_sectors;
}

double quantize_model_bytes(const Shape& s, const Scheme& scheme) {
  const double n = double(s.elements()), passes = scheme.granularity == Granularity::tensor ? 2.0 : 1.0;
  const double blocks = double(s.heads()) * ((s.N + kScaleRows - 1) / kScaleRows);
  const double centring = scheme.centre_v ? 2.0 * n + 4.0 * s.d * (3.0 * blocks + s.heads()) : 0.0;
  return 3.0 * 2.0 * n * passes + 2.0 * n + double(s.heads()) * s.d * padded_keys(s.N) + 3.0 * 4.0 * blocks + centring;
}

double quantize_min_bytes(const Shape& s, const Scheme& scheme) {
  const double n = double(s.elements()), passes = scheme.granularity == Granularity::tensor ? 2.0 : 1.0;
  const double blocks = double(s.heads()) * ((s.N + kScaleRows - 1) / kScaleRows);
  return 3.0 * 2.0 * n * passes + (scheme.centre_v ? 2.0 * n : 0.0) + 2.0 * n +
         double(s.heads()) * s.d * padded_keys(s.N) + 3.0 * 4.0 * blocks;
}

double fp8_device_bytes(const Shape& s, course::Dtype t) {
  const double n = double(s.elements()), scales = double(s.heads()) * ((s.N + kScaleRows - 1) / kScaleRows);
  return 4.0 * n * double(course::bytes_of(t)) + 4.0 * s.heads() * double(s.N) + 2.0 * n +
         double(s.heads()) * s.d * padded_keys(s.N) + scales * (12.0 + 4.0 * s.d) + 4.0 * s.heads() * s.d + 16.0;
}

}  // namespace attention::fp8
