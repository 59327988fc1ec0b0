// Stage 06 on the CPU: FlashAttention-2's forward pass (Algorithm 1 of the FA-2 paper) through the
// counting view of global memory, for fp32, fp16 and bf16 storage; the model of its traffic; and
// the block sizes every variant of this stage runs with.
//
// Layout (as stage 05): Q, K, V and O are B·H heads of N × d values of the dtype, row-major, one
// head after another; L is B·H rows of N floats, the logsumexp of each row's scaled scores in
// natural log: L_r = log Σ_j exp(scale·q_r·k_j), so that P = exp(scale·S − L) (stage 07 needs it).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "../05_flash_v1/algorithm.hpp"  // Shape, require_supported, visible
#include "dtype.hpp"
#include "hd.hpp"
#include "io_count.hpp"

namespace attention {

// Query rows per thread block (Br) and keys per step of the inner loop (Bc). from_end (stage 08's
// last rung): causal query blocks are laid from the last row back, so that when Br does not divide
// N the short block is the first (the rows that see fewest keys), not the last (the rows that see
// all of them); see query_row0.
struct Tiles {
  int Br, Bc;
  bool from_end = false;
};

// Tr = ⌈N/Br⌉ query blocks. Block i's first row: i·Br; or, causal with from_end, N − (Tr − i)·Br,
// which is negative for the first block when Br does not divide N (its rows before 0 are padding:
// no keys are visible to them, nothing of them is read or written).
inline int query_blocks(const Shape& s, Tiles t) { return (s.N + t.Br - 1) / t.Br; }
COURSE_HD inline int query_row0(int N, int Br, bool causal, bool from_end, int i) {
  return causal && from_end ? N - ((N + Br - 1) / Br - i) * Br : i * Br;
}
inline int query_row0(const Shape& s, Tiles t, int i) { return query_row0(s.N, t.Br, s.causal, t.from_end, i); }
// The key blocks query block i visits: all ⌈N/Bc⌉, or when causal only those holding a key some row
// of the block may see (keys up to its last row, row0 + Br − 1).
COURSE_HD inline int key_blocks(int N, int Br, int Bc, bool causal, int i, bool from_end = false) {
  const int all = (N + Bc - 1) / Bc;
  if (!causal) return all;
  const long long end = (long long)query_row0(N, Br, causal, from_end, i) + Br;
  const long long last_row = end - 1 < N ? end - 1 : N - 1;
  const int visited = int(last_row / Bc) + 1;
  return visited < all ? visited : all;
}
inline int key_blocks(const Shape& s, Tiles t, int i) { return key_blocks(s.N, t.Br, t.Bc, s.causal, i, t.from_end); }

// The mask, in one place for every kernel of stages 06 and 07. COURSE_MASKED: key `key` is hidden
// from query `query` when it lies past N or, causal, after the query (its score becomes −∞, its P
// 0). COURSE_BLOCK_NEEDS_MASK: whether a block of queries from row0 on and of keys up to key_end − 1 holds a
// masked pair: its keys reach past N or, causal, its last key lies after its first query. Not
// causal, only the last key block can (when Bc does not divide N); causal, the diagonal's too.
// Macros, not functions: as an inline function the predicate's || and && reach the optimiser
// already turned into predicate logic, and ptxas then emits different code for the same test
// (the cubins of tuned, of the fp32 kernels and of stage 07 changed); as macros the kernels
// compile to the same instructions as when each wrote the test out.
#define COURSE_MASKED(query, key, N, causal) ((key) >= (N) || ((causal) && (key) > (query)))
#define COURSE_BLOCK_NEEDS_MASK(row0, key_end, N, causal) ((key_end) > (N) || ((causal) && (key_end) - 1 > (row0)))

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
