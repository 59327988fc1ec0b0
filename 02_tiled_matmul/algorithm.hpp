// Stage 02's tiled algorithms on the CPU, block by block and warp instruction by warp instruction
// as the kernels run them, through the counting view of global memory. The tile sizes here are the
// kernels' (kernels.cu uses them).
#pragma once

#include "io_count.hpp"

namespace matmul {

// Shared-memory tiling: a block of T×T threads computes a T×T tile of C, stepping through K in
// T-wide tiles of A and B staged in shared memory.
constexpr int kTile = 32;

// Register blocking: a block of 256 threads computes a BM×BN tile of C; each thread an TM×TN
// sub-tile held in registers. K is walked BK at a time.
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;

// register_blocked moves 16 bytes per load and store when rows of A and B (and C) start on
// 16-byte boundaries; otherwise it falls back to 4-byte accesses.
inline bool register_blocked_vectorized(int N, int K) { return K % 4 == 0 && N % 4 == 0; }

course::IoCount tiled_counted(const float* A, const float* B, float* C, int M, int N, int K);
course::IoCount register_blocked_counted(const float* A, const float* B, float* C, int M, int N,
                                         int K);

// The model: every block reads its row-panel of A and column-panel of B once, so A is read once
// per block column and B once per block row (docs/02_tiled_matmul.md):
//   bytes = 4·(M·K·⌈N/BN⌉ + K·N·⌈M/BM⌉) read + 4·M·N written,
// with BM = BN = T for shared-memory tiling. For square n: 8n³/T + 4n², i.e. the naive kernel's
// 8n³ logical reads divided by the tile size.
double tiled_model_bytes(int M, int N, int K, int BM, int BN);
// Exact when every row segment starts and ends on a sector boundary: K % 8 == 0 and N % 8 == 0.
bool tiled_model_exact(int M, int N, int K);

}  // namespace matmul
