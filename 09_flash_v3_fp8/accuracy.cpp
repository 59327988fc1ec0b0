#include "accuracy.hpp"

#include <Eigen/Dense>

#include <cmath>
#include <limits>
#include <random>

#include "check.hpp"

namespace attention::fp8 {

namespace {
using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<const RowMajorD>;
constexpr int kRowBlock = 256;  // rows of S at a time: N × 256 doubles, not N × N

// softmax(S)·V for the rows [r0, r0 + rows) of one head, S = Q·Kᵀ/√d masked; `finish` sees each
// block of scores and returns O's rows (the plain variants round P̃ and O there).
template <class Finish>
void by_row_blocks(const Shape& s, const double* Q, const double* K, const double* V, Finish finish) {
  const Map k(K, s.N, s.d), v(V, s.N, s.d);
  const double scale = 1.0 / std::sqrt(double(s.d));
  for (int r0 = 0; r0 < s.N; r0 += kRowBlock) {
    const int rows = std::min(kRowBlock, s.N - r0);
    RowMajorD S = Map(Q + std::size_t(r0) * s.d, rows, s.d) * k.transpose() * scale;
    if (s.causal)
      for (int i = 0; i < rows; ++i)
        for (int j = r0 + i + 1; j < s.N; ++j) S(i, j) = -std::numeric_limits<double>::infinity();
    finish(r0, rows, S, v);
  }
}
// exp(S − m) row by row, a masked entry (−∞) exactly 0: Eigen 3.4's vectorised exp gives the
// subnormal 5.6e-309 for −∞ (its argument clamped at −709.4), not 0, and subnormals cost an Intel
// CPU a microcode assist in every operation that touches them.
void exp_rows(RowMajorD& S, const Eigen::VectorXd& m) {
  const double minus_inf = -std::numeric_limits<double>::infinity();
  S = (S.array() == minus_inf).select(0.0, (S.colwise() - m).array().exp()).matrix();
}
}  // namespace

NormalInputs normal_inputs(const Shape& s, course::Dtype t, std::uint64_t seed, double outlier_fraction,
                           double outlier_sigma) {
  auto make = [&](std::uint64_t stream) {
    std::mt19937_64 generator(seed * 3 + stream);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> pick(0.0, 1.0);
    std::vector<float> x(s.elements());
    for (float& v : x) {
      const double z = normal(generator);
      v = float(pick(generator) < outlier_fraction ? outlier_sigma * z : z);
    }
    course::round_in_place(t, x);
    return x;
  };
  return {make(0), make(1), make(2)};
}

Inputs to_inputs(const NormalInputs& n, course::Dtype t, std::uint64_t seed) {
  Inputs in;
  in.seed = seed;
  in.Q = n.Q, in.K = n.K, in.V = n.V;  // already rounded to t: round_in_place leaves them and gives the bits
  in.Qh = course::round_in_place(t, in.Q);
  in.Kh = course::round_in_place(t, in.K);
  in.Vh = course::round_in_place(t, in.V);
  return in;
}

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::vector<double> attention_f64(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                                  const std::vector<double>& V, std::vector<double>* L) {
  std::vector<double> O(s.elements());
  if (L) L->assign(std::size_t(s.heads()) * s.N, 0.0);
  for (int h = 0; h < s.heads(); ++h) {
    const std::size_t at = std::size_t(h) * s.N * s.d;
    by_row_blocks(s, Q.data() + at, K.data() + at, V.data() + at, [&](int r0, int rows, RowMajorD& S, const Map& v) {
      const Eigen::VectorXd m = S.rowwise().maxCoeff();
      exp_rows(S, m);
      const Eigen::VectorXd l = S.rowwise().sum();
      Eigen::Map<RowMajorD>(O.data() + at + std::size_t(r0) * s.d, rows, s.d) = (S * v).array().colwise() / l.array();
      if (L)
        for (int i = 0; i < rows; ++i) (*L)[std::size_t(h) * s.N + r0 + i] = m(i) + std::log(l(i));
    });
  }
  return O;
}

std::vector<double> dequantize(const Quantized& q) {
  std::vector<double> x(q.bytes.size());
  for (int h = 0; h < q.heads; ++h)
    for (int r = 0; r < q.N; ++r)
      for (int c = 0; c < q.d; ++c) x[(std::size_t(h) * q.N + r) * q.d + c] = q.value(h, r, c);
  return x;
}

QuantizedInputs quantize_inputs(const Shape& s, const std::vector<float>& Q, const std::vector<float>& K,
                                const std::vector<float>& V, Scheme scheme, std::uint64_t sign_seed) {
  QuantizedInputs in;
  in.scheme = scheme;
  if (scheme.incoherent) in.signs = random_signs(s.d, sign_seed);
  in.Q = quantize(transform_rows(Q, s.d, in.signs), s.heads(), s.N, s.d, scheme.granularity);
  in.K = quantize(transform_rows(K, s.d, in.signs), s.heads(), s.N, s.d, scheme.granularity);
  // V is not transformed (P·V needs V itself), but centred (fp8.hpp).
  in.v_mean = scheme.centre_v ? column_means(V, s.heads(), s.N, s.d) : std::vector<float>(std::size_t(s.heads()) * s.d);
  in.V = quantize(scheme.centre_v ? centre_columns(V, in.v_mean, s.heads(), s.N, s.d) : V, s.heads(), s.N, s.d,
                  scheme.granularity);
  return in;
}

namespace {
// Attention with P̃ = exp(S − rowmax) rounded by `round_p` before P̃·V, l from the unrounded P̃
// (as the kernels sum it), `add` (heads × d, or empty) added to each row, O rounded to `out`.
template <class RoundP>
std::vector<float> plain(const Shape& s, const std::vector<double>& Q, const std::vector<double>& K,
                         const std::vector<double>& V, course::Dtype out, RoundP round_p,
                         const std::vector<float>& add = {}) {
  std::vector<float> O(s.elements());
  for (int h = 0; h < s.heads(); ++h) {
    const std::size_t at = std::size_t(h) * s.N * s.d;
    by_row_blocks(s, Q.data() + at, K.data() + at, V.data() + at, [&](int r0, int rows, RowMajorD& S, const Map& v) {
      const Eigen::VectorXd m = S.rowwise().maxCoeff();
      exp_rows(S, m);
      const Eigen::VectorXd l = S.rowwise().sum();
      S = S.unaryExpr(round_p);
      const RowMajorD o = (S * v).array().colwise() / l.array();
      for (int i = 0; i < rows; ++i)
        for (int c = 0; c < s.d; ++c)
          O[at + std::size_t(r0 + i) * s.d + c] =
              course::round_to(out, float(o(i, c) + (add.empty() ? 0.0 : double(add[std::size_t(h) * s.d + c]))));
    });
  }
  return O;
}
}  // namespace

std::vector<float> plain_fp8(const Shape& s, const QuantizedInputs& in, course::Dtype out) {
  return plain(s, dequantize(in.Q), dequantize(in.K), dequantize(in.V), out,
               [](double p) { return double(from_e4m3(to_e4m3(float(p * 256.0)))) / 256.0; }, in.v_mean);
}

std::vector<float> plain_16bit(const Shape& s, const std::vector<float>& Q, const std::vector<float>& K,
                               const std::vector<float>& V, course::Dtype t) {
  return plain(s, to_double(Q), to_double(K), to_double(V), t,
               [t](double p) { return double(course::round_to(t, float(p))); });
}

Errors errors(const std::vector<float>& out, const std::vector<double>& ref) {
  course::require(out.size() == ref.size() && !out.empty(), "errors: sizes differ");
  Errors e;
  double sum = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = std::fabs(double(out[i]) - ref[i]);
    if (!std::isfinite(d)) return {INFINITY, INFINITY};
    sum += d * d;
    e.max_abs = std::max(e.max_abs, d);
  }
  e.rmse = std::sqrt(sum / double(out.size()));
  return e;
}

Fp8Reference::Fp8Reference(const Shape& s, course::Dtype out, const std::vector<float>& Q, const std::vector<float>& K,
                           const std::vector<float>& V, const QuantizedInputs& q)
    : s_(s) {
  const Sample sample = sample_rows(s);
  const int N = s.N, d = s.d, n = int(sample.rows.size());
  const double scale = 1.0 / std::sqrt(double(d));
  // One head of a quantised tensor, decoded (the sampled heads only: at the main job's shapes the
  // whole tensors in float64 would be gigabytes).
  auto head_of = [&](const Quantized& x, int h) {
    std::vector<double> v(std::size_t(N) * d);
    for (int r = 0; r < N; ++r)
      for (int c = 0; c < d; ++c) v[std::size_t(r) * d + c] = x.value(h, r, c);
    return v;
  };
  std::vector<double> plain_O, plain_L;
  // Rows r of one head: softmax(S)·V and the logsumexp, with P̃ rounded by round_p.
  auto attend = [&](const double* Qh, const double* Kh, const double* Vh, const float* add, auto round_p,
                    std::vector<double>& O, std::vector<double>& L, std::vector<std::size_t>* whereO,
                    std::vector<std::size_t>* whereL, std::size_t head) {
    RowMajorD qs(n, d);
    for (int r = 0; r < n; ++r) qs.row(r) = Map(Qh + std::size_t(sample.rows[r]) * d, 1, d);
    RowMajorD P = qs * Map(Kh, N, d).transpose() * scale;  // S, then P̃ in place (0 past what a row sees)
    std::vector<double> l(n);
    for (int r = 0; r < n; ++r) {
      const int visible = s.causal ? sample.rows[r] + 1 : N;
      auto p = P.row(r).head(visible);
      const double m = p.maxCoeff();
      p = (p.array() - m).exp().matrix();
      l[r] = p.sum();
      p = p.unaryExpr(round_p);
      P.row(r).tail(N - visible).setZero();
      L.push_back(m + std::log(l[r]));
      if (whereL) whereL->push_back(head + std::size_t(sample.rows[r]));
    }
    const RowMajorD PV = P * Map(Vh, N, d);  // one product for all the rows (row by row took seconds)
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < d; ++c) {
        O.push_back(PV(r, c) / l[r] + (add ? double(add[c]) : 0.0));
        if (whereO) whereO->push_back((head + std::size_t(sample.rows[r])) * d + c);
      }
  };
  for (int h : sample.heads) {
    const std::size_t at = std::size_t(h) * N * d;
    const std::vector<double> Qo(Q.begin() + at, Q.begin() + at + std::size_t(N) * d),
        Ko(K.begin() + at, K.begin() + at + std::size_t(N) * d), Vo(V.begin() + at, V.begin() + at + std::size_t(N) * d);
    attend(Qo.data(), Ko.data(), Vo.data(), nullptr, [](double p) { return p; }, O_, L_, &where_O_, &where_L_,
           std::size_t(h) * N);
    const std::vector<double> Qd = head_of(q.Q, h), Kd = head_of(q.K, h), Vd = head_of(q.V, h);
    attend(Qd.data(), Kd.data(), Vd.data(), q.v_mean.data() + std::size_t(h) * d,
           [](double p) { return double(from_e4m3(to_e4m3(float(p * 256.0)))) / 256.0; }, plain_O, plain_L, nullptr,
           nullptr, std::size_t(h) * N);
  }
  for (double& o : plain_O) o = double(course::round_to(out, float(o)));
  plain_O_ = course::max_rel_error(plain_O, O_);
  plain_L_ = course::max_rel_error(plain_L, L_);
  tol_O_ = std::max(2.0 * plain_O_, course::unit_roundoff(out));
  tol_L_ = std::max(2.0 * plain_L_, 1e-5);
  double squares = 0.0;
  for (double x : L_) squares += x * x;
  rms_L_ = L_.empty() ? 0.0 : std::sqrt(squares / double(L_.size()));
}

course::Comparison Fp8Reference::check_O(const float* O) const {
  std::vector<float> got(where_O_.size());
  for (std::size_t i = 0; i < got.size(); ++i) got[i] = O[where_O_[i]];
  return course::compare(got.data(), O_.data(), got.size(), tol_O_, std::size_t(s_.d), &where_O_);
}

course::Comparison Fp8Reference::check_L(const float* L, double extra) const {
  std::vector<float> got(where_L_.size());
  for (std::size_t i = 0; i < got.size(); ++i) got[i] = L[where_L_[i]];
  // An element's error is |out − ref| / max(|ref|, rms) (compare.hpp): an absolute allowance a is at most a / rms.
  const double tol = tol_L_ + (extra > 0.0 && rms_L_ > 0.0 ? extra / rms_L_ : 0.0);
  return course::compare(got.data(), L_.data(), got.size(), tol, 0, &where_L_);
}

}  // namespace attention::fp8
