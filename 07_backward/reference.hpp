// The float64 reference of stage 07 (Eigen): the gradients dQ, dK and dV of attention, on the
// inputs as they are stored (already rounded to the dtype), and the tolerance each dtype is held to.
//
// The formula, for one head, with scale = 1/√d (docs/07_backward.md derives it):
//   S = scale·Q·Kᵀ (causal: −∞ above the diagonal)   P = softmax(S) by rows   O = P·V
//   dV = Pᵀ·dO    dP = dO·Vᵀ    D = rowsum(dO ∘ O)    dS = P ∘ (dP − D)
//   dQ = scale·dS·K    dK = scale·dSᵀ·Q
// BackwardReference computes it for whole heads; finite_difference() checks it (test_cpu.cpp) against
// central differences of the loss Σ dO ∘ O, so that every later check rests on a verified formula.
//
// Tolerance. fp16 and bf16: FlashAttention-2's own rule, in its own measure: the same formula
// computed plainly in the dtype, every tensor a framework keeps rounded to it (S, P, O, dP, dS,
// and dQ, dK, dV; D from the rounded O, as FlashAttention takes O from its forward), has some
// error against float64; a kernel passes when its largest absolute error on each gradient, max
// |x − ref| over the checked heads, is at most twice that of the plain computation, and never
// below the dtype's unit roundoff (both in units of the gradient's rms: course::Scale::rms).
// Stage 06 holds O to the same rule in the course's per-element measure; for the gradients at
// N = 16384 that measure puts FlashAttention-2 itself near the factor 2 (dK 1.83x the plain
// error on the H100, same inputs), and our kernels, whose errors equal its own, 1.02-1.18x over
// it on one checked head; in FlashAttention's measure both are at 1.04-1.12x (docs/07_backward.md).
// Partial sums. A kernel that stores a group of query rows' share of dK and dV in the dtype and
// adds those shares afterwards (the ring of stage 10: one share per query chunk a key shard
// meets) rounds each key's gradient once per group and once more at the end; its plain
// computation does the same (`partial_groups`: the groups' first rows), so that the factor 2
// compares like with like. Without groups, the plain dK and dV are rounded once.
// fp32: stage 06's bound on O (the sums' rounding and 8 ulps of the largest score), four times:
// dP − D cancels most of dP's common part, and the gradients are two more sums of N terms; for dQ also D's share of O's error, which is
// common to a row of dS while dQ = scale·dS·K cancels (docs/07_backward.md derives both).
#pragma once

#include <cstddef>
#include <vector>

#include "algorithm.hpp"
#include "compare.hpp"
#include "dtype.hpp"

namespace attention {

// Central finite differences of the loss f = Σ dO ∘ O with respect to one input element, in
// float64 (which: 0 = Q, 1 = K, 2 = V; `index` within the layout).
double finite_difference(const Shape& s, const double* Q, const double* K, const double* V,
                         const double* dO, int which, std::size_t index, double step);
// The same gradient element from the formula above, on float64 inputs.
double formula_gradient(const Shape& s, const double* Q, const double* K, const double* V,
                        const double* dO, int which, std::size_t index);

// The reference of one problem, computed once and used for every variant run on it: every head
// when B·H·N <= 16384, else `max_heads` of them (first, middle, last).
class BackwardReference {
 public:
  BackwardReference(const Shape& s, course::Dtype dtype, const float* Q, const float* K,
                    const float* V, const float* dO, int max_heads = 3,
                    const std::vector<int>& partial_groups = {});

  // A run's gradient (all B·H·N·d values, as floats) against the reference. which: 0 dQ, 1 dK, 2 dV.
  course::Comparison check(int which, const float* grad) const;
  // All three: fails if any fails, with the failing gradients' mismatches.
  course::Comparison check_all(const float* dQ, const float* dK, const float* dV) const;
  // The same from the checked heads' values alone, heads() in order, N·d each: what a GPU run
  // downloads (a few MB instead of every head).
  course::Comparison check_all_heads(const float* dQ, const float* dK, const float* dV) const;

  double tolerance(int which) const { return tol_[which]; }
  double plain_error(int which) const { return plain_[which]; }  // 0 for fp32
  const std::vector<int>& heads() const { return heads_; }

 private:
  course::Comparison compare_heads(int which, const float* heads) const;
  course::Comparison combine(const course::Comparison (&each)[3]) const;
  Shape s_;
  std::vector<int> heads_;
  std::vector<double> ref_[3];
  std::vector<std::size_t> where_;
  double tol_[3] = {0, 0, 0}, plain_[3] = {0, 0, 0};
  course::Scale scale_ = course::Scale::element;  // rms for fp16/bf16 (FlashAttention's measure)
};

constexpr const char* kGradientNames[3] = {"dQ", "dK", "dV"};

// The precision of D (docs/07_backward.md, "The precision of D"): dQ's error in a 16-bit dtype,
// in FlashAttention's measure (max |x − ref| / rms(ref) over every head, against the float64
// formula), of the backward computed plainly in the dtype (every tensor a framework keeps rounded
// to it: S, P, dP, dS, dQ), with D = rowsum(dO ∘ O) taken three ways:
//   O_rounded  from O as the forward stores it, rounded to the dtype (FlashAttention-2 and this
//              stage's kernels)
//   O_exact    from O before that rounding (P·V of the rounded P, in float64)
//   P_dP       as rowsum(P ∘ dP) of the rounded P and dP, as an unfused softmax backward
//              (PyTorch's) forms it, which never sees O
// An error ε in D_i is common to the whole row i of dS = P ∘ (dP − D), and reaches dQ_i as
// −ε·scale·Σ_j P_ij·K_j, which no cancellation shrinks; where the true dQ is small against that
// (keys almost equal: K_j = k̄ + δ_j makes the k̄ parts of dQ cancel to 0), O's rounding dominates.
struct DPrecision {
  double O_rounded = 0.0, O_exact = 0.0, P_dP = 0.0;
};
DPrecision d_precision(const Shape& s, course::Dtype dtype, const float* Q, const float* K, const float* V,
                       const float* dO);

}  // namespace attention
