// The tiling of FlashAttention-2's loops, as every tiled attention stage (06 onward) runs them:
// query blocks of Br rows, key blocks of Bc keys, which key blocks a query block visits when
// causal, and the mask. Shared by the CPU versions and the kernels (COURSE_HD).
#pragma once

#include "attention/shape.hpp"
#include "hd.hpp"

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

}  // namespace attention
