#include "reference.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

#include "check.hpp"

namespace attention {

namespace {

// The float64 results for one head (row-major N × d each), and O and L of the forward.
struct HeadGradients {
  std::vector<double> O, L, dQ, dK, dV;
  double D_effect = 0.0;  // max over rows of scale·|D_i|·max |Σ_j P_ij·K_j|
};

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Column = Eigen::VectorXd;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kChunkRows = 64;  // rows of S a thread works on at a time


template <class T>
Matrix head_matrix(const Shape& s, int h, const T* x) {
  Matrix m(s.N, s.d);
  const T* p = x + std::size_t(h) * s.N * s.d;
  for (int r = 0; r < s.N; ++r)
    for (int c = 0; c < s.d; ++c) m(r, c) = double(p[std::size_t(r) * s.d + c]);
  return m;
}

std::vector<double> flat(const Matrix& m) { return std::vector<double>(m.data(), m.data() + m.size()); }

// The softmax of each row of S in place (rows with −∞ entries: those are 0); the row's logsumexp.
// The −∞ entries are set to 0 apart: Eigen 3.4's vectorised exp clamps its argument at −709.4 and
// gives 5.6e-309 for −∞, a subnormal, not 0, which costs an Intel CPU a microcode assist in every
// operation that touches it (a causal check of stage 10 took 158 s instead of 14 on one).
void softmax_rows(Matrix& S, Eigen::Ref<Column> L) {
  for (Eigen::Index r = 0; r < S.rows(); ++r) {
    const double m = S.row(r).maxCoeff();
    S.row(r) = (S.row(r).array() == -kInf).select(0.0, (S.row(r).array() - m).exp()).matrix();
    const double l = S.row(r).sum();
    S.row(r) /= l;
    L(r) = m + std::log(l);
  }
}

// The formula of reference.hpp for one head, in float64, rows in chunks on several threads (each
// keeps its own dK and dV sums); with `plain`, also the same computation with every kept tensor
// rounded to `dtype`. `groups` (sorted query-row starts, the first 0), when not empty, are the
// chunks instead, and the plain computation rounds each one's share of dK and dV to the dtype
// before adding it to the others (reference.hpp, "Partial sums").
void head_gradients(const Shape& s, const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& dout,
                    HeadGradients& out, HeadGradients* plain, course::Dtype dtype,
                    const std::vector<int>& groups = {}) {
  const int N = s.N, d = s.d;
  const double scale = 1.0 / std::sqrt(double(d));
  auto round = [dtype](double x) { return double(course::round_to(dtype, float(x))); };
  Matrix O(N, d), dQ(N, d), dK = Matrix::Zero(N, d), dV = Matrix::Zero(N, d);
  Matrix pdQ(plain ? N : 0, d), pdK = Matrix::Zero(plain ? N : 0, d), pdV = Matrix::Zero(plain ? N : 0, d);
  Column L(N), D_effect(N);
  const bool partials = !groups.empty();
  const int chunks = partials ? int(groups.size()) : (N + kChunkRows - 1) / kChunkRows;
  const int threads = int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 16u));
  std::atomic<int> next{0};
  std::mutex merge;
  auto work = [&] {
    Matrix dK_t = Matrix::Zero(N, d), dV_t = Matrix::Zero(N, d);
    Matrix pdK_t = Matrix::Zero(plain ? N : 0, d), pdV_t = Matrix::Zero(plain ? N : 0, d);
    for (int c = next++; c < chunks; c = next++) {
      const int r0 = partials ? groups[std::size_t(c)] : c * kChunkRows;
      const int n = partials ? (c + 1 < chunks ? groups[std::size_t(c) + 1] : N) - r0 : std::min(kChunkRows, N - r0);
      const auto q_c = q.middleRows(r0, n);
      const auto do_c = dout.middleRows(r0, n);
      // Causal: the chunk's rows see keys up to r0 + n − 1 only; the rest of S is −∞ and of P 0.
      const int keys = s.causal ? r0 + n : N;
      const auto k_c = k.topRows(keys), v_c = v.topRows(keys);
      Matrix S = (q_c * k_c.transpose()) * scale;
      if (s.causal)
        for (int r = 0; r < n; ++r)
          for (int j = r0 + r + 1; j < keys; ++j) S(r, j) = -kInf;
      Matrix P = S;
      softmax_rows(P, L.segment(r0, n));
      O.middleRows(r0, n) = P * v_c;
      const Column D = do_c.cwiseProduct(O.middleRows(r0, n)).rowwise().sum();
      const Matrix dP = do_c * v_c.transpose();
      const Matrix dS = P.cwiseProduct(dP.colwise() - D);
      dQ.middleRows(r0, n) = (dS * k_c) * scale;
      // How much an error ε·|D_i| in D_i moves row i of dQ: ε·scale·|D_i|·max |Σ_j P_ij·K_j|.
      const Matrix PK = P * k_c;
      for (int r = 0; r < n; ++r)
        D_effect(r0 + r) = scale * std::abs(D(r)) * PK.row(r).cwiseAbs().maxCoeff();
      dK_t.topRows(keys).noalias() += dS.transpose() * q_c;
      dV_t.topRows(keys).noalias() += P.transpose() * do_c;
      if (plain) {
        Matrix Pp = S.unaryExpr(round);
        Column unused(n);
        softmax_rows(Pp, unused);
        Pp = Pp.unaryExpr(round);
        const Matrix dPp = dP.unaryExpr(round);
        const Matrix Op = (Pp * v_c).unaryExpr(round);  // the forward's output, as stored
        const Column Dp = do_c.cwiseProduct(Op).rowwise().sum();
        const Matrix dSp = Pp.cwiseProduct(dPp.colwise() - Dp).unaryExpr(round);
        pdQ.middleRows(r0, n) = ((dSp * k_c) * scale).unaryExpr(round);
        if (partials) {  // this group's share, as a kernel stores it (scale applied; undone below)
          pdK_t.topRows(keys) += ((dSp.transpose() * q_c) * scale).unaryExpr(round) / scale;
          pdV_t.topRows(keys) += (Pp.transpose() * do_c).unaryExpr(round);
        } else {
          pdK_t.topRows(keys).noalias() += dSp.transpose() * q_c;
          pdV_t.topRows(keys).noalias() += Pp.transpose() * do_c;
        }
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    dK += dK_t;
    dV += dV_t;
    if (plain) pdK += pdK_t, pdV += pdV_t;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min(threads, chunks); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  out.O = flat(O);
  out.L.assign(L.data(), L.data() + N);
  out.dQ = flat(dQ);
  out.dK = flat(dK * scale);
  out.dV = flat(dV);
  out.D_effect = D_effect.maxCoeff();
  if (plain) {
    plain->dQ = flat(pdQ);
    plain->dK = flat((pdK * scale).unaryExpr(round));
    plain->dV = flat(pdV.unaryExpr(round));
  }
}

// Head, row and column of an index of the layout.
struct Place {
  int h;
  std::size_t offset;  // within the head
};
Place place(const Shape& s, std::size_t index) {
  const std::size_t head = std::size_t(s.N) * s.d;
  return {int(index / head), index % head};
}

// The loss Σ dO ∘ O of head h, in float64.
double loss(const Shape& s, const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& dout) {
  Matrix S = (q * k.transpose()) / std::sqrt(double(s.d));
  if (s.causal)
    for (int r = 0; r < s.N; ++r)
      for (int j = r + 1; j < s.N; ++j) S(r, j) = -kInf;
  Column L(s.N);
  softmax_rows(S, L);
  return (S * v).cwiseProduct(dout).sum();
}

}  // namespace

double finite_difference(const Shape& s, const double* Q, const double* K, const double* V,
                         const double* dO, int which, std::size_t index, double step) {
  const Place p = place(s, index);
  Matrix m[3] = {head_matrix(s, p.h, Q), head_matrix(s, p.h, K), head_matrix(s, p.h, V)};
  const Matrix dout = head_matrix(s, p.h, dO);
  double* x = m[which].data() + p.offset;
  const double x0 = *x;
  *x = x0 + step;
  const double up = loss(s, m[0], m[1], m[2], dout);
  *x = x0 - step;
  const double down = loss(s, m[0], m[1], m[2], dout);
  return (up - down) / (2.0 * step);
}

double formula_gradient(const Shape& s, const double* Q, const double* K, const double* V,
                        const double* dO, int which, std::size_t index) {
  const Place p = place(s, index);
  HeadGradients g;
  head_gradients(s, head_matrix(s, p.h, Q), head_matrix(s, p.h, K), head_matrix(s, p.h, V),
                 head_matrix(s, p.h, dO), g, nullptr, course::Dtype::fp32);
  const std::vector<double>* grads[3] = {&g.dQ, &g.dK, &g.dV};
  return (*grads[which])[p.offset];
}

DPrecision d_precision(const Shape& s, course::Dtype dtype, const float* Q, const float* K, const float* V,
                       const float* dO) {
  const double scale = 1.0 / std::sqrt(double(s.d));
  auto round = [dtype](double x) { return double(course::round_to(dtype, float(x))); };
  std::vector<double> ref, plain[3];
  for (int h = 0; h < s.heads(); ++h) {
    const Matrix q = head_matrix(s, h, Q), k = head_matrix(s, h, K), v = head_matrix(s, h, V),
                 dout = head_matrix(s, h, dO);
    Matrix S = (q * k.transpose()) * scale;
    if (s.causal)
      for (int r = 0; r < s.N; ++r)
        for (int j = r + 1; j < s.N; ++j) S(r, j) = -kInf;
    Column L(s.N);
    Matrix P = S;
    softmax_rows(P, L);
    const Matrix dP = dout * v.transpose();
    const Column D = dout.cwiseProduct(P * v).rowwise().sum();
    const Matrix dQ = (P.cwiseProduct(dP.colwise() - D) * k) * scale;
    ref.insert(ref.end(), dQ.data(), dQ.data() + dQ.size());
    // Plainly in the dtype: S, P and dP rounded; O = P·V before and after its rounding.
    Matrix Pp = S.unaryExpr(round);
    softmax_rows(Pp, L);
    Pp = Pp.unaryExpr(round);
    const Matrix dPp = dP.unaryExpr(round), O_exact = Pp * v, O_rounded = O_exact.unaryExpr(round);
    const Column Ds[3] = {dout.cwiseProduct(O_rounded).rowwise().sum(), dout.cwiseProduct(O_exact).rowwise().sum(),
                          Pp.cwiseProduct(dPp).rowwise().sum()};
    for (int w = 0; w < 3; ++w) {
      const Matrix dSp = Pp.cwiseProduct(dPp.colwise() - Ds[w]).unaryExpr(round);
      const Matrix dQp = ((dSp * k) * scale).unaryExpr(round);
      plain[w].insert(plain[w].end(), dQp.data(), dQp.data() + dQp.size());
    }
  }
  const auto rms = course::Scale::rms;
  return {course::max_rel_error(plain[0], ref, rms), course::max_rel_error(plain[1], ref, rms),
          course::max_rel_error(plain[2], ref, rms)};
}

BackwardReference::BackwardReference(const Shape& s, course::Dtype dtype, const float* Q,
                                     const float* K, const float* V, const float* dO, int max_heads,
                                     const std::vector<int>& partial_groups)
    : s_(s) {
  course::require(partial_groups.empty() ||
                      (partial_groups.front() == 0 && partial_groups.back() < s.N &&
                       std::adjacent_find(partial_groups.begin(), partial_groups.end(), std::greater_equal<int>()) ==
                           partial_groups.end()),
                  "BackwardReference: partial groups must start at 0 and be increasing row starts below N");
  const int H = s.heads();
  if (double(H) * s.N <= 16384) {
    for (int h = 0; h < H; ++h) heads_.push_back(h);
  } else {
    for (int h : {0, H / 2, H - 1})
      if (int(heads_.size()) < max_heads && std::find(heads_.begin(), heads_.end(), h) == heads_.end())
        heads_.push_back(h);
  }
  const bool rounded = dtype != course::Dtype::fp32;
  std::vector<double> plain[3];
  double max_score = 0.0, D_effect = 0.0;
  for (int h : heads_) {
    const Matrix q = head_matrix(s, h, Q), k = head_matrix(s, h, K), v = head_matrix(s, h, V),
                 dout = head_matrix(s, h, dO);
    HeadGradients g, p;
    head_gradients(s, q, k, v, dout, g, rounded ? &p : nullptr, dtype, partial_groups);
    if (!rounded)  // fp32's bound: the largest |scaled score|, 1024 rows at a time
      for (int r0 = 0; r0 < s.N; r0 += 1024) {
        const Matrix S = q.middleRows(r0, std::min(1024, s.N - r0)) * k.transpose();
        max_score = std::max(max_score, S.cwiseAbs().maxCoeff() / std::sqrt(double(s.d)));
      }
    D_effect = std::max(D_effect, g.D_effect);
    const std::vector<double>* exact[3] = {&g.dQ, &g.dK, &g.dV};
    const std::vector<double>* rounded_grads[3] = {&p.dQ, &p.dK, &p.dV};
    for (int w = 0; w < 3; ++w) {
      ref_[w].insert(ref_[w].end(), exact[w]->begin(), exact[w]->end());
      if (rounded) plain[w].insert(plain[w].end(), rounded_grads[w]->begin(), rounded_grads[w]->end());
    }
    const std::size_t head = std::size_t(h) * s.N * s.d;
    for (std::size_t x = 0; x < std::size_t(s.N) * s.d; ++x) where_.push_back(head + x);
  }
  if (rounded) scale_ = course::Scale::rms;  // FlashAttention's measure: max |x − ref| (reference.hpp)
  for (int w = 0; w < 3; ++w) {
    if (rounded) {
      plain_[w] = course::max_rel_error(plain[w], ref_[w], scale_);
      tol_[w] = std::max(2.0 * plain_[w], course::unit_roundoff(dtype));
    } else {
      // The forward's bound on O (stage 06) with a larger share for the scores, four times. P =
      // exp(S − L) is recomputed from two dot products of d terms (the forward's, inside L, and the
      // backward's S), each off by about √d·u·|S| (d roundings, at random): its relative error is
      // their difference, which grows with the largest |score| (Q times 30 in the tests). dQ also
      // takes D's share of O's error (D = rowsum(dO ∘ O)), amplified by D_effect / rms(dQ): a D
      // error is common to a whole row of dS, while dQ = scale·dS·K mostly cancels (each row of dS
      // sums to 0).
      const double base = course::fp32_sum_tolerance(std::size_t(s.N) + s.d) +
                          2.0 * std::sqrt(double(s.d)) * std::ldexp(1.0, -24) * max_score;
      double rms = 0.0;
      for (double x : ref_[0]) rms += x * x;
      rms = std::sqrt(rms / double(std::max<std::size_t>(1, ref_[0].size())));
      tol_[w] = 4.0 * base * (w == 0 && rms > 0 ? 1.0 + D_effect / rms : 1.0);
    }
  }
}

course::Comparison BackwardReference::compare_heads(int which, const float* heads) const {
  return course::compare(heads, ref_[which].data(), ref_[which].size(), tol_[which], s_.d, &where_, scale_);
}

course::Comparison BackwardReference::check(int which, const float* grad) const {
  std::vector<float> out(where_.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = grad[where_[i]];
  return compare_heads(which, out.data());
}

course::Comparison BackwardReference::combine(const course::Comparison (&each)[3]) const {
  course::Comparison all;
  for (int w = 0; w < 3; ++w) {
    const course::Comparison& c = each[w];
    if (w == 0 || c.max_rel_err / c.tolerance > all.max_rel_err / all.tolerance) {
      all.max_rel_err = c.max_rel_err;
      all.tolerance = c.tolerance;
    }
    all.checked += c.checked;
    all.bad += c.bad + (c.checked ? 0 : 1);
    if (!c.ok()) all.first_mismatches += std::string("  ") + kGradientNames[w] + ": " + c.summary() + "\n" + c.first_mismatches;
  }
  return all;
}

course::Comparison BackwardReference::check_all(const float* dQ, const float* dK, const float* dV) const {
  return combine({check(0, dQ), check(1, dK), check(2, dV)});
}

course::Comparison BackwardReference::check_all_heads(const float* dQ, const float* dK, const float* dV) const {
  return combine({compare_heads(0, dQ), compare_heads(1, dK), compare_heads(2, dV)});
}

}  // namespace attention
