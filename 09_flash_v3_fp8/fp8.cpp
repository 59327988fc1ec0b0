#include "fp8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "check.hpp"

namespace attention::fp8 {

std::uint8_t to_e4m3(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(double(x));
  if (a >= kE4m3Max) return sign | 0x7E;  // satfinite: 448 = 1.75·2^8, exponent field 15, mantissa 110
  // The spacing of e4m3 values near a: 2^-9 below 2^-6 (subnormals), else 2^(e − 3) for a in [2^e, 2^(e+1)).
  int e = 0;
  std::frexp(a, &e);  // a = f·2^e, f in [0.5, 1): a in [2^(e−1), 2^e)
  const int exponent = std::max(e - 1, -6);
  const double step = std::ldexp(1.0, exponent - 3);
  const double q = std::nearbyint(a / step) * step;  // ties to even (the default rounding mode)
  if (q >= kE4m3Max) return sign | 0x7E;
  if (q == 0.0) return sign;
  int qe = 0;
  const double qf = std::frexp(q, &qe);  // q = qf·2^qe, qf in [0.5, 1)
  if (qe - 1 < -6) return sign | std::uint8_t(std::lround(q / std::ldexp(1.0, -9)));  // subnormal: mantissa = q / 2^-9
  const int mantissa = int(std::lround((qf * 2.0 - 1.0) * 8.0));  // q = (1 + m/8)·2^(qe−1)
  return sign | std::uint8_t((qe - 1 + 7) << 3) | std::uint8_t(mantissa);
}

float from_e4m3(std::uint8_t b) {
  const bool negative = b & 0x80;
  const int exponent = (b >> 3) & 0xF, mantissa = b & 7;
  float v;
  if (exponent == 15 && mantissa == 7) v = NAN;
  else if (exponent == 0) v = std::ldexp(float(mantissa), -9);
  else v = std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
  return negative ? -v : v;
}

float lin_fp16(float s, float a, float b) {
  const float t = std::fmin(std::fmax(std::fma(s, a, b), 0.0f), 1.0f);  // fmax(NaN, 0) is 0, as FFMA.SAT gives
  const float y = std::fma(t, kLinR, kLinMagic);
  std::uint32_t bits;
  std::memcpy(&bits, &y, sizeof bits);
  const std::uint32_t h = bits & 0xFFFFu;  // fp16: 5 exponent bits (bias 15), 10 mantissa bits; h <= 0x7BFF
  const int e = int(h >> 10), m = int(h & 0x3FFu);
  return e == 0 ? std::ldexp(float(m), -24) : std::ldexp(1.0f + float(m) / 1024.0f, e - 15);
}

std::uint8_t lin_e4m3(float s, float a, float b) { return to_e4m3(lin_fp16(s, a, b)); }

std::string Scheme::name() const {
  return std::string(granularity == Granularity::tensor ? "per_tensor" : "per_block") + (incoherent ? "_hadamard" : "") +
         (centre_v ? "_centred" : "");
}

const std::vector<Scheme>& schemes() {
  static const std::vector<Scheme> all = {{Granularity::tensor, false},
                                          {Granularity::block, false},
                                          {Granularity::tensor, true},
                                          {Granularity::block, true}};
  return all;
}

Scheme centred(Scheme s) {
  s.centre_v = true;
  return s;
}

std::vector<float> random_signs(int d, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<float> signs(d);
  for (float& s : signs) s = (generator() >> 63) ? -1.0f : 1.0f;
  return signs;
}

void fwht(float* x, int d) {
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

std::vector<float> transform_rows(const std::vector<float>& x, int d, const std::vector<float>& signs) {
  if (signs.empty()) return x;
  course::require(int(signs.size()) == d && d > 0 && (d & (d - 1)) == 0,
                  "incoherent processing needs d a power of two and d signs");
  std::vector<float> y(x.size());
  const float r = 1.0f / std::sqrt(float(d));  // the same float the GPU kernels get from the host
  for (std::size_t row = 0; row < x.size() / d; ++row) {
    float* v = y.data() + row * d;
    for (int c = 0; c < d; ++c) v[c] = x[row * d + c] * signs[c];
    fwht(v, d);
    for (int c = 0; c < d; ++c) v[c] *= r;
  }
  return y;
}

namespace {
void require_finite(const std::vector<float>& x, int N, int d) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))  // (the message is built only then: once per value it cost seconds)
      course::require(false, "FP8 quantisation: the input holds NaN or inf (row " + std::to_string(i / d % N) +
                                 " of head " + std::to_string(i / d / N) + "): no scale can represent it");
}
}  // namespace

std::vector<float> column_means(const std::vector<float>& V, int heads, int N, int d) {
  course::require(V.size() == std::size_t(heads) * N * d && N >= 1, "column_means: heads × N × d values expected");
  require_finite(V, N, d);
  constexpr int kGroup = 16, kGroups = kScaleRows / kGroup;  // a warp's rows, the block's warps
  std::vector<float> mean(std::size_t(heads) * d);
  for (int h = 0; h < heads; ++h)
    for (int c = 0; c < d; ++c) {
      float total = 0.0f;
      for (int b = 0; b * kScaleRows < N; ++b) {
        float block = 0.0f;
        for (int g = 0; g < kGroups; ++g) {
          float group = 0.0f;
          for (int i = 0; i < kGroup; ++i) {
            const int r = b * kScaleRows + g * kGroup + i;
            group += r < N ? V[(std::size_t(h) * N + r) * d + c] : 0.0f;
          }
          block += group;
        }
        total += block;
      }
      mean[std::size_t(h) * d + c] = total / float(N);
    }
  return mean;
}

std::vector<float> centre_columns(const std::vector<float>& V, const std::vector<float>& mean, int heads, int N,
                                  int d) {
  course::require(V.size() == std::size_t(heads) * N * d && mean.size() == std::size_t(heads) * d,
                  "centre_columns: heads × N × d values and heads × d means expected");
  std::vector<float> y(V.size());
  for (std::size_t i = 0; i < V.size(); ++i) y[i] = V[i] - mean[i / (std::size_t(N) * d) * d + i % d];
  return y;
}

Quantized quantize(const std::vector<float>& x, int heads, int N, int d, Granularity g) {
  course::require(x.size() == std::size_t(heads) * N * d, "quantize: heads × N × d values expected");
  Quantized q;
  q.heads = heads, q.N = N, q.d = d;
  q.bytes.resize(x.size());
  q.scale.assign(std::size_t(heads) * q.blocks(), 1.0f);
  // amax of each block of rows (then of all, per tensor)
  std::vector<float> amax(q.scale.size(), 0.0f);
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < N; ++r)
      for (int c = 0; c < d; ++c) {
        const float v = x[(std::size_t(h) * N + r) * d + c];
        if (!std::isfinite(v))  // (the message is built only then: once per value it cost seconds)
          course::require(false, "FP8 quantisation: the input holds NaN or inf (row " + std::to_string(r) + " of head " +
                                     std::to_string(h) + "): no scale can represent it");
        float& a = amax[std::size_t(h) * q.blocks() + r / kScaleRows];
        a = std::max(a, std::fabs(v));
      }
  if (g == Granularity::tensor) std::fill(amax.begin(), amax.end(), *std::max_element(amax.begin(), amax.end()));
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < N; ++r) {
      const float a = scale_amax(amax[std::size_t(h) * q.blocks() + r / kScaleRows]);
      const float inv = a > 0.0f ? kE4m3Max / a : 1.0f;  // float division, as on the GPU
      q.scale[std::size_t(h) * q.blocks() + r / kScaleRows] = a > 0.0f ? a / kE4m3Max : 1.0f;
      for (int c = 0; c < d; ++c) {
        const std::size_t i = (std::size_t(h) * N + r) * d + c;
        q.bytes[i] = to_e4m3(x[i] * inv);
      }
    }
  return q;
}

std::vector<std::uint8_t> transpose_v(const Quantized& V) {
  const int Np = padded_keys(V.N);
  std::vector<std::uint8_t> t(std::size_t(V.heads) * V.d * Np, 0);
  for (int h = 0; h < V.heads; ++h)
    for (int k = 0; k < V.N; ++k)
      for (int c = 0; c < V.d; ++c)
        t[(std::size_t(h) * V.d + c) * Np + key_position(k)] = V.bytes[(std::size_t(h) * V.N + k) * V.d + c];
  return t;
}

double v_scale_span(const float* v_scale, int blocks) {
  double lo = INFINITY, hi = 0.0;
  for (int b = 0; b < blocks; ++b) lo = std::min(lo, double(v_scale[b])), hi = std::max(hi, double(v_scale[b]));
  return blocks > 0 ? hi / lo : 1.0;
}

}  // namespace attention::fp8
