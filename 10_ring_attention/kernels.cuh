// Stage 10's own kernels (kernels.cu): the ⊕ of a pair's (O, L) into a rank's running result, and
// the result's conversion to the dtype. The attention of each pair is stage 08's last rung.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dtype.hpp"

namespace ring {

// For `rows` rows of d values (rows = B·H·c, one chunk): (O_acc, L_acc) ⊕= (Op, Lp), O_acc in float,
// Op in the dtype (what the attention kernel wrote). first: the chunk's first pair, whose result is
// copied (O_acc and L_acc hold nothing yet, not even −∞ and 0: no pass to fill them).
void launch_merge(course::Dtype t, int rows, int d, float* O_acc, float* L_acc, const void* Op, const float* Lp,
                  bool first, cudaStream_t stream);
// acc += part (n values; part in the dtype): a pair's dK or dV added to the shard's running sum.
void launch_accumulate(course::Dtype t, std::size_t n, float* acc, const void* part, cudaStream_t stream);
// O = O_acc rounded to the dtype (`n` values).
void launch_round(course::Dtype t, std::size_t n, const float* O_acc, void* O, cudaStream_t stream);

}  // namespace ring
