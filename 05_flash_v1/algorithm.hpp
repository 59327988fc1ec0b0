// Stage 05 on the CPU, through the counting view of global memory: standard attention as the GPU
// runs it (five kernels, S and P in global memory) and FlashAttention-1 (Algorithm 1 of the paper:
// K/V blocks outside, Q blocks inside, O, l and m kept in global memory); with the models of their
// traffic and of the device memory they need.
//
// Layout (attention/shape.hpp): Q, K, V and O are B·H heads of N × d floats; l and m are B·H rows
// of N floats.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "attention/shape.hpp"
#include "io_count.hpp"

namespace attention {

// --- standard attention ------------------------------------------------------------------------
// 1. Kt = scale·Kᵀ per head (scale = 1/√d)  read K, write Kt         (stage 05, a transpose)
// 2. S = Q·Kt per head                      stage 02's register_blocked, batched over heads
// 3. (causal) S[i][j] = −∞ for j > i        write the upper triangle (stage 05)
// 4. P = softmax(S) row by row              stage 03's safe softmax: 3 reads of S, 1 write of P
// 5. O = P·V per head                       stage 02's register_blocked
// Transpose tiles are 32 × 32: a warp reads 32 consecutive floats of a row of K, and writes 32 of a
// row of Kt. The mask is written by warps over 32-column stretches of a row, lanes j > i only.
constexpr int kTransposeTile = 32;
// (Each head's Kt, S and P is its own 256-byte aligned array here; on the GPU they follow one
// another, so where N % 8 != 0 a few sectors per head straddle differently.)
course::IoCount standard_counted(const Shape& s, const float* Q, const float* K, const float* V,
                                 float* O);
double standard_model_bytes(const Shape& s);
// Device memory: Q, K, V, O, Kt, S and P, and the softmax's partials.
double standard_device_bytes(const Shape& s);

// --- FlashAttention-1 --------------------------------------------------------------------------
// Block sizes from an SRAM budget of M floats (the paper's M): Bc = ⌈M / 4d⌉, Br = min(Bc, d),
// so that K_j, V_j (Bc × d each), Q_i and O_i (Br × d each) fit in M.
struct Blocks {
  int Bc, Br;
};
Blocks flash_v1_blocks(long long M, int d);
// The Bc the GPU kernel is compiled for, per d: a choice of multiples of 16 whose blocks fit in
// 227 KiB of shared memory (an H100's limit per block), up to the largest that fits, the default.
const std::vector<int>& flash_v1_compiled(int d);
inline long long sram_floats(int Bc, int d) { return 4LL * Bc * d; }  // the M that gives Bc

// Algorithm 1, as the kernel runs it (one thread block per head):
//   for j in 0..Tc-1:   load K_j, V_j                              (Bc rows of K and V)
//     for i in 0..Tr-1 (causal: only the i whose last row sees key j·Bc):
//       load Q_i, and O_i, l_i, m_i unless j = 0 (then O = 0, l = 0, m = −∞ as the paper
//       initialises them; we start from those values instead of writing and reading them)
//       S_ij = scale·Q_i·K_jᵀ; m̃ = rowmax S_ij; P̃ = exp(S_ij − m̃); l̃ = rowsum P̃
//       m_new = max(m_i, m̃); l_new = e^(m_i − m_new)·l_i + e^(m̃ − m_new)·l̃
//       O_i ← (l_i·e^(m_i − m_new)·O_i + e^(m̃ − m_new)·P̃·V_j) / l_new
//       write O_i, l_new, m_new
// Every request is a whole row (of K, V, Q, O) or a block's stretch of l or m.
course::IoCount flash_v1_counted(const Shape& s, Blocks blocks, const float* Q, const float* K,
                                 const float* V, float* O, float* l, float* m);
// The model: K and V read once; Q read once per (i, j) pair; O, l and m read at every pair with
// j > 0 and written at every pair (docs/05_flash_v1.md). Exact when N % 8 == 0 and Br % 8 == 0.
double flash_v1_model_bytes(const Shape& s, Blocks blocks);
// Device memory: Q, K, V, O, l and m.
double flash_v1_device_bytes(const Shape& s);

}  // namespace attention
