#include "attention/reference.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attention {

namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

Sample sample_rows(const Shape& s) {
  Sample sample;
  sample.heads = {0, s.heads() / 2, s.heads() - 1};
  sample.heads.erase(std::unique(sample.heads.begin(), sample.heads.end()), sample.heads.end());
  if (double(s.heads()) * s.N <= 16384) {
    sample.heads.clear();
    for (int h = 0; h < s.heads(); ++h) sample.heads.push_back(h);
  }
  if (s.N <= 2048) {
    for (int i = 0; i < s.N; ++i) sample.rows.push_back(i);
  } else {
    for (int r = 0; r < 512; ++r) sample.rows.push_back(int(std::int64_t(r) * s.N / 512));
    sample.rows.push_back(s.N - 1);
  }
  return sample;
}

Reference::Reference(const Shape& s, course::Dtype dtype, const float* Q, const float* K,
                     const float* V)
    : s_(s) {
  const Sample sample = sample_rows(s);
  const int N = s.N, d = s.d, n = int(sample.rows.size());
  const double scale = 1.0 / std::sqrt(double(d));
  const bool plain = dtype != course::Dtype::fp32;
  auto round = [&](double x) { return double(course::round_to(dtype, float(x))); };
  std::vector<double> plain_O, plain_L;
  double max_score = 0.0;
  for (int h : sample.heads) {
    const std::size_t head = std::size_t(h) * N * d;
    RowMajorD q(n, d);
    for (int r = 0; r < n; ++r)
      q.row(r) = Eigen::Map<const RowMajorF>(Q + head + std::size_t(sample.rows[r]) * d, 1, d).cast<double>();
    const RowMajorD k = Eigen::Map<const RowMajorF>(K + head, N, d).cast<double>();
    const RowMajorD v = Eigen::Map<const RowMajorF>(V + head, N, d).cast<double>();
    const RowMajorD S = (q * k.transpose()) * scale;
    RowMajorD P = RowMajorD::Zero(n, N), P_plain = RowMajorD::Zero(n, plain ? N : 0);
    std::vector<double> row(plain ? N : 0);
    for (int r = 0; r < n; ++r) {
      const int visible = s.causal ? sample.rows[r] + 1 : N;
      const double m = S.row(r).head(visible).maxCoeff();
      max_score = std::max(max_score, S.row(r).head(visible).cwiseAbs().maxCoeff());
      P.row(r).head(visible) = (S.row(r).head(visible).array() - m).exp().matrix();
      const double l = P.row(r).sum();
      P.row(r) /= l;
      L_.push_back(m + std::log(l));
      where_L_.push_back(std::size_t(h) * N + sample.rows[r]);
      if (plain) {  // S rounded, the softmax of the rounded scores, P rounded
        double mp = -std::numeric_limits<double>::infinity(), lp = 0.0;
        for (int j = 0; j < visible; ++j) mp = std::max(mp, row[j] = round(S(r, j)));
        for (int j = 0; j < visible; ++j) lp += row[j] = std::exp(row[j] - mp);
        for (int j = 0; j < visible; ++j) P_plain(r, j) = round(row[j] / lp);
        plain_L.push_back(mp + std::log(lp));
      }
    }
    const RowMajorD o = P * v;
    const RowMajorD o_plain = plain ? RowMajorD(P_plain * v) : RowMajorD();
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < d; ++c) {
        O_.push_back(o(r, c));
        where_O_.push_back((std::size_t(h) * N + sample.rows[r]) * d + c);
        if (plain) plain_O.push_back(round(o_plain(r, c)));
      }
  }
  if (plain) {
    plain_O_ = course::max_rel_error(plain_O, O_);
    plain_L_ = course::max_rel_error(plain_L, L_);
    tol_O_ = std::max(2.0 * plain_O_, course::unit_roundoff(dtype));
    tol_L_ = std::max(2.0 * plain_L_, course::unit_roundoff(dtype));
  } else {
    tol_O_ = course::fp32_sum_tolerance(std::size_t(N) + d) + 8.0 * std::ldexp(1.0, -24) * max_score;
    tol_L_ = tol_O_;
  }
}

course::Comparison Reference::check_O(const float* O) const {
  std::vector<float> out(where_O_.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = O[where_O_[i]];
  return course::compare(out.data(), O_.data(), O_.size(), tol_O_, s_.d, &where_O_);
}

course::Comparison Reference::check_L(const float* L) const {
  std::vector<float> out(where_L_.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = L[where_L_[i]];
  return course::compare(out.data(), L_.data(), L_.size(), tol_L_, s_.N, &where_L_);
}

course::Comparison with_L(course::Comparison O, const course::Comparison& L) {
  if (!L.ok()) {
    O.bad += L.bad + (L.checked ? 0 : 1);
    O.first_mismatches += "  L: " + L.summary() + "\n" + L.first_mismatches;
  }
  return O;
}

}  // namespace attention
