// Stage 06 on the CPU: FlashAttention-2's forward pass (Algorithm 1 of the FA-2 paper) through the
// counting view of global memory, for fp32, fp16 and bf16 storage, and the model of its traffic.
// The tiling (Br, Bc, the key blocks a query block visits, the mask) is attention/tiles.hpp.
//
// Layout (attention/shape.hpp): Q, K, V and O are B·H heads of N × d values of the dtype; L is B·H
// rows of N floats, the logsumexp of each row's scaled scores in natural log:
// L_r = log Σ_j exp(scale·q_r·k_j), so that P = exp(scale·S − L) (stage 07 needs it).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "attention/shape.hpp"
#include "attention/tiles.hpp"
#include "dtype.hpp"
#include "io_count.hpp"

namespace attention {

// FlashAttention-2, forward (the paper's Algorithm 1), for each head, as the kernels run it:
//   for i in 0..Tr-1 (one thread block each):
//     load Q_i;  O = 0, l = 0, m = −∞                        (on chip for the whole loop)
//     for j in the key blocks of i:
//       load K_j, V_j
//       S = Q_i·K_jᵀ (masked: keys past N, and keys after the row when causal)
//       m_new = max(m, rowmax S);  P̃ = exp(scale·(S − m_new))
//       l = e^(scale·(m − m_new))·l + rowsum P̃;  O = e^(scale·(m − m_new))·O + P̃·V_j;  m = m_new
//     write O_i = O / l   (normalised once, at the end)   and   L_i = scale·m + log l
// Q, K, V hold values of `dtype` (already rounded to it); the sums run in float. For the 16-bit
// dtypes P̃ is rounded to the dtype before P̃·V (the tensor cores take it so) and O is rounded on
// the way out, as the kernels do. Requests: whole rows of Q, K, V and O (rows past N are not
// read: the kernels zero-fill them), and L in stretches of 8 rows, as a warp writes it.
// O_unrounded, if not null: O as the float sums give it (o / l), before it is rounded to the dtype
// (chapter 07's precision of D); not part of the count.
course::IoCount flash_v2_counted(const Shape& s, course::Dtype dtype, Tiles t, const float* Q,
                                 const float* K, const float* V, float* O, float* L,
                                 float* O_unrounded = nullptr);

// The model, exact for every N (a row of d values is a whole number of 32-byte sectors):
//   Q read once, O written once, K and V read once per query block (causal: only the key blocks
//   it visits), L written once;  per head  e·d·(2·N + 2·Σ_i keys(i)) + 4·N  bytes (e = element
//   size, keys(i) = the keys query block i reads), ≈ 2·e·N²·d / Br when N ≫ Br.
double flash_v2_model_bytes(const Shape& s, course::Dtype dtype, Tiles t);
// Device memory: Q, K, V and O, and L.
double flash_v2_device_bytes(const Shape& s, course::Dtype dtype);

}  // namespace attention
