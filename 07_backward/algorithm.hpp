// Stage 07 on the CPU: FlashAttention's backward pass (Algorithm 2 of the FA-2 paper) through the
// counting view of global memory, for fp32, fp16 and bf16 storage; the model of its traffic; and
// the device memory it needs.
//
// Layout (as stages 05 and 06): Q, K, V, O, dO, dQ, dK and dV are B·H heads of N × d values of
// the dtype, row-major, one head after another; L (the forward's logsumexp, stage 06) and
// D = rowsum(dO ∘ O) are B·H rows of N floats; dQacc, the atomic variant's float accumulator of
// dQ, has the layout of Q in floats. With scale = 1/√d and P = exp(scale·Q·Kᵀ − L) (masked: 0):
//   dV = Pᵀ·dO    dP = dO·Vᵀ    dS = P ∘ (dP − D)    dQ = scale·dS·K    dK = scale·dSᵀ·Q
#pragma once

#include <cstddef>

#include "../06_flash_v2/algorithm.hpp"  // Shape, Tiles, key_blocks, query_blocks
#include "dtype.hpp"
#include "hd.hpp"
#include "io_count.hpp"

namespace attention {

// The backward pass of one variant: the key-outer pass takes Bc keys a thread block and Br query
// rows a step (`kv`); the atomic variants add each step's share of dQ into dQacc there, the
// deterministic ones leave dQ to a query-outer pass of their own (`dq`: Br rows a block, Bc keys a
// step, as stage 06's forward walks them).
struct BackwardPlan {
  Tiles kv;
  bool deterministic = false;
  Tiles dq = {0, 0};  // deterministic only
  // Atomic: the key-outer pass adds dQ_i's share of a key block in this many parts, one for each
  // Bc / dq_shares keys (stage 11's rung 1: one a warpgroup of 64 keys); each part adds all of the
  // query block's rows.
  int dq_shares = 1;
};

// The rows and the float vectors (L, D) move in requests of one warp: 32 floats from a block's
// first row.
constexpr int kStatsRowsPerRequest = 32;
// ... except in the deterministic variant's dQ pass, where each lane reads its own rows' L and D
// (a warp's request: the 8 rows of its groups g).
constexpr int kDqStatsRowsPerRequest = 8;
// The preprocessing pass takes 64 rows a thread block.
constexpr int kPreprocessRows = 64;

// Causal: key block j meets only the query blocks whose last row reaches its first key.
COURSE_HD inline int first_query_block(int Br, int Bc, bool causal, int j) {
  return causal ? int((long long)(j)*Bc / Br) : 0;
}

// FlashAttention backward, as the kernels run it (per head):
//   preprocess (one pass over the rows):  D = rowsum(dO ∘ O);  atomic variants: dQacc = 0
//   for j in 0..Tc-1 (one thread block each):
//     load K_j, V_j;  dK_j = 0, dV_j = 0                         (on chip for the whole loop)
//     for i in the query blocks that see key block j:
//       load Q_i, dO_i, L_i, D_i
//       S = scale·Q_i·K_jᵀ (masked);  P = exp(S − L_i)           (the forward's P, recomputed)
//       dV_j += Pᵀ·dO_i;  dP = dO_i·V_jᵀ;  dS = P ∘ (dP − D_i)
//       dK_j += dSᵀ·Q_i;  atomic variants: dQacc_i += dS·K_j     (adds done in L2)
//     write dK_j·scale, dV_j
//   atomic:         dQ = scale·dQacc  (read floats, write the dtype)
//   deterministic:  for i (one thread block each): load Q_i, dO_i, L_i, D_i; for j: load K_j,
//                   V_j, recompute S, P, dP, dS; dQ_i += dS·K_j;  write dQ_i·scale
// Sums run in float. For the 16-bit dtypes P and dS are rounded to the dtype before they enter
// a product (the tensor cores take them so) and the gradients on the way out, as the kernels do.
// O and L are the forward's outputs (stage 06), O as stored in the dtype; with O_in_float, O holds
// the forward's float values before that rounding, read as floats (4 bytes each), and D is taken
// from them (chapter 07's precision of D: not what the kernels do).
// Requests: whole rows of Q, K, V, O, dO, dQ, dK, dV and dQacc (an atomic add counts as a write
// of its row: the SM sends the values, L2 adds them, nothing comes back); L and D in stretches of
// kStatsRowsPerRequest rows from a block's first row (kDqStatsRowsPerRequest in the dQ pass).
course::IoCount flash_backward_counted(const Shape& s, course::Dtype dtype, const BackwardPlan& plan,
                                       const float* Q, const float* K, const float* V, const float* O,
                                       const float* dO, const float* L, float* dQ, float* dK, float* dV,
                                       bool O_in_float = false);

// The model, exact for every N:
//   per head, with e the element size and pairs = Σ_j Σ_{i meets j} rows(i):
//   preprocess  2·e·N·d (O, dO) + D  (+ 4·N·d: dQacc = 0)
//   key-outer   4·e·N·d (K, V in; dK, dV out) + pairs·(2·e·d + dq_shares·4·d if atomic) + L and D per pair
//   atomic      + 4·N·d + e·N·d  (dQacc read, dQ written)
//   determin.   + the query-outer pass: Q, dO, L, D and dQ once, K and V once per query block
// so ≈ (2·e + 4)·N²·d/Bc (atomic) against the forward's 4·e·N²·d/Br.
double flash_backward_model_bytes(const Shape& s, course::Dtype dtype, const BackwardPlan& plan);
// Device memory: the inputs Q, K, V, O, dO and L; D; the outputs dQ, dK, dV; dQacc if atomic.
double flash_backward_device_bytes(const Shape& s, course::Dtype dtype, bool deterministic);

// Standard attention (standard.cu: cuBLAS products, P kept between the passes), per head with
// e the element size, if every step reads its inputs and writes its output once (a lower bound:
// cuBLAS may read its operands more than once; the measured bytes say how much):
//   forward   S = scale·Q·Kᵀ  2e·N·d + e·N²    softmax in place  2e·N²    O = P·V  e·N² + 2e·N·d
//   backward  dV = Pᵀ·dO  e·N² + 2e·N·d    dP = dO·Vᵀ  2e·N·d + e·N²    dS  3e·N² (P, dP in)
//             dQ = scale·dS·K, dK = scale·dSᵀ·Q  2·(e·N² + 2e·N·d)
// Causal changes nothing: the products run over the whole square and the softmax writes zeros.
// fp32 is built from the course's kernels instead (standard.cu), and its model is exact (to the
// sector, when N % 8 == 0) like stage 05's:
//   forward   stage 05's standard attention (standard_model_bytes)
//   backward  T = Pᵀ  8N²    dV = T·dO  stage 02    Vt = Vᵀ  8N·d    dP = dO·Vt  stage 02
//             dS = scale·P ∘ (dP − rowsum(P ∘ dP)) over dP, a row a block  12N²
//             T = dSᵀ  8N²    dQ = dS·K, dK = T·Q  stage 02
// with stage 02's model 4·(M·K·⌈N/128⌉ + K·N·⌈M/128⌉) + 4·M·N for each product.
double standard_forward_model_bytes(const Shape& s, course::Dtype dtype);   // 16-bit: 4e·N² + 4e·N·d
double standard_backward_model_bytes(const Shape& s, course::Dtype dtype);  // 16-bit: 7e·N² + 8e·N·d
// fp32 only: the backward through the counting view, as the kernels run it (P computed first, on
// the CPU, uncounted: it is the forward's output). Transposes by 32 × 32 tiles as stage 05's.
course::IoCount standard_backward_counted(const Shape& s, const float* Q, const float* K, const float* V,
                                          const float* dO, float* dQ, float* dK, float* dV);
// Device memory: Q, K, V, O, dO, dQ, dK, dV, and the N² workspaces: 16-bit P and dP/dS; fp32
// stage 05's workspace (Kt, S, P, partials) and T.
double standard_backward_device_bytes(const Shape& s, course::Dtype dtype);

// The block sizes the kernels are compiled with (kernels_fp32.cu, tc_backward.cu): key-outer
// passes Br × Bc (the tuned rung: twice the keys a block), and the deterministic variants'
// query-outer dQ pass.
constexpr Tiles kFp32Tiles{64, 64}, kTcTiles{64, 64}, kTunedTiles{64, 128}, kWideTiles{32, 128}, kDqTiles{64, 64};

// Backward FLOPs: five products the size of the forward's two: 2.5 × 4·B·H·N²·d (docs/DESIGN.md),
// halved when causal.
inline double backward_flops(const Shape& s) { return 2.5 * s.flops(); }

}  // namespace attention
