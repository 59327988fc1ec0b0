// The ⊕ of chapter 04 on (O, L) pairs: two partial results of the same query row, each normalised
// over its own keys (O_i = Σ e^(s−L_i)·v, L_i = log Σ e^s over the keys of part i), merge into the
// result over all the keys:
//   L = log(e^L₁ + e^L₂) = m + log(e^(L₁−m) + e^(L₂−m)),  m = max(L₁, L₂)
//   O = e^(L₁ − L)·O₁ + e^(L₂ − L)·O₂
// It is stage 04's combine of the pieces (L₁, 1) and (L₂, 1): a logsumexp is a piece whose sum was
// rescaled to 1. (−∞, anything) is the empty part: L₁ = −∞ gives L = L₂ and weights (0, 1). The
// same function on the CPU (ring.cpp) and on the GPU (kernels.cu).
#pragma once

#include "../04_online_softmax/online.hpp"
#include "hd.hpp"

namespace ring {

struct MergeWeights {
  float L, w1, w2;  // the merged L and the weights of O₁ and O₂
};

COURSE_HD inline MergeWeights merge_weights(float L1, float L2) {
  const softmax::MaxSum piece = softmax::combine({L1, 1.0f}, {L2, 1.0f});
  const float L = piece.m + logf(piece.l);
  return {L, softmax::rescale(L1, L), softmax::rescale(L2, L)};
}

}  // namespace ring
