// The ⊕ of chapter 04 on (O, L) pairs (softmax::merge_weights, 04_online_softmax/online.hpp), by
// which a ring's partial results merge: the same function on the CPU (ring.cpp) and on the GPU
// (kernels.cu).
#pragma once

#include "../04_online_softmax/online.hpp"

namespace ring {

using softmax::merge_weights;
using softmax::MergeWeights;

}  // namespace ring
