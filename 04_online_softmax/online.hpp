// The online softmax state of a piece of a row, and its merge.
//
// For the values x_1..x_n of a piece, (m, l) = (max x_i, Σ exp(x_i − m)). Two pieces merge as
//   (m₁, l₁) ⊕ (m₂, l₂) = (m, l₁·exp(m₁ − m) + l₂·exp(m₂ − m)),   m = max(m₁, m₂),
// which gives the state of the joined piece exactly (up to rounding): each sum is rescaled from its
// own maximum to the common one. ⊕ is associative and commutative with identity (−∞, 0), so a row
// can be split anywhere, the pieces reduced in any order, on any thread. Adding one value x is
// merging the piece (x, 1).
#pragma once

#include <cmath>

#include "algorithm.hpp"  // nan_max
#include "hd.hpp"

namespace softmax {

struct MaxSum {
  float m;  // the maximum of the piece
  float l;  // Σ exp(x − m) over the piece
};

COURSE_HD inline MaxSum empty_piece() { return {-INFINITY, 0.0f}; }

// exp(from − to), but exactly 1 when from == to is finite or −∞, so that −∞ − (−∞) never makes a
// NaN: a stretch of −∞ only (a masked stretch) becomes (−∞, n), which the first finite value wipes
// out (n · exp(−∞) = 0); a row of −∞ only still ends as NaN, as the formula says. +∞ − (+∞) stays
// NaN: a row holding +∞ is NaN, as in the float64 reference.
COURSE_HD inline float rescale(float from, float to) {
  return (from == to && from != INFINITY) ? 1.0f : expf(from - to);
}

COURSE_HD inline MaxSum combine(MaxSum a, MaxSum b) {
  const float m = nan_max(a.m, b.m);  // a NaN anywhere makes the row NaN
  return {m, a.l * rescale(a.m, m) + b.l * rescale(b.m, m)};
}

// The recurrence of the online softmax, one value at a time: s ⊕ (x, 1), written the cheap way.
// A new maximum rescales the sum (rare after the first few values); then exp(x − m) is added. One
// exp per value. A NaN x makes l NaN (x > m is false for NaN), and with it the row.
COURSE_HD inline MaxSum online_update(MaxSum s, float x) {
  if (x > s.m) {
    s.l *= rescale(s.m, x);
    s.m = x;
  }
  s.l += rescale(x, s.m);
  return s;
}

// Four values at once, as a 16-byte load brings them: one comparison with the running maximum, then
// four exps that do not wait on each other (the one-value form chains every exp behind a compare).
COURSE_HD inline MaxSum online_update4(MaxSum s, float x0, float x1, float x2, float x3) {
  const float m4 = nan_max(nan_max(x0, x1), nan_max(x2, x3));
  if (m4 > s.m) {
    s.l *= rescale(s.m, m4);
    s.m = m4;
  }
  s.l += (rescale(x0, s.m) + rescale(x1, s.m)) + (rescale(x2, s.m) + rescale(x3, s.m));
  return s;
}

// The ⊕ on (O, L) pairs: two partial results of the same query row, each normalised over its own
// keys (O_i = Σ e^(s−L_i)·v, L_i = log Σ e^s over the keys of part i), merge into the result over
// all the keys:
//   L = log(e^L₁ + e^L₂) = m + log(e^(L₁−m) + e^(L₂−m)),  m = max(L₁, L₂)
//   O = e^(L₁ − L)·O₁ + e^(L₂ − L)·O₂
// It is combine of the pieces (L₁, 1) and (L₂, 1): a logsumexp is a piece whose sum was rescaled to
// 1. (−∞, anything) is the empty part: L₁ = −∞ gives L = L₂ and weights (0, 1). Stage 10 merges a
// ring's partials with it, stage 12 split-KV's.
struct MergeWeights {
  float L, w1, w2;  // the merged L and the weights of O₁ and O₂
};

COURSE_HD inline MergeWeights merge_weights(float L1, float L2) {
  const MaxSum piece = combine({L1, 1.0f}, {L2, 1.0f});
  const float L = piece.m + logf(piece.l);
  return {L, rescale(L1, L), rescale(L2, L)};
}

}  // namespace softmax
