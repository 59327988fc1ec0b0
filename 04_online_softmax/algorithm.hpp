// Stage 04 on the CPU, through the counting view: the online two-pass softmax, the on-chip
// softmax, and the single-query attention that carries the online state into attention; with the
// models of their traffic.
#pragma once

#include "io_count.hpp"
#include "../03_safe_softmax/algorithm.hpp"

namespace softmax {

// online: pass 1 reduces each segment to its (m, l) with the recurrence and writes both partials;
// pass 2 merges the row's partials with ⊕ and writes exp(x − m) / l. 2 reads + 1 write.
course::IoCount online_counted(const float* X, float* Y, int R, int C);
inline double online_model_bytes(int R, int C) { return passes_model_bytes(R, C, 2, 2, 2); }

// on_chip: the whole row in registers, 1 read + 1 write, for rows of at most kOnChipMaxCols
// columns: a warp per row up to kOnChipWarpMaxCols, a block per row beyond.
constexpr int kOnChipMaxCols = 8192;
constexpr int kOnChipWarpMaxCols = kOnChipMaxCols / 8;
course::IoCount on_chip_counted(const float* X, float* Y, int R, int C);
inline double on_chip_model_bytes(int R, int C) { return 8.0 * R * C; }

// --- the bridge to attention ------------------------------------------------------------------
// o_i = softmax(q_i · Kᵀ · scale) · V for Nq queries q_i against N keys and values of dimension d,
// in one pass over K and V with a running (m, l, o). The GPU gives each query a warp and each
// block kQueriesPerBlock queries, which share the K and V tiles the block stages in shared memory
// (kTileFloats floats of each: 4096 / d rows).
constexpr int kQueriesPerBlock = 8;
constexpr int kTileFloats = 4096;
inline bool attention_supported(int d) { return d == 32 || d == 64 || d == 128; }
course::IoCount attention_row_counted(const float* Q, const float* K, const float* V, float* O,
                                      int Nq, int N, int d);
// Q read and O written once; K and V read once per block of kQueriesPerBlock queries.
double attention_row_model_bytes(int Nq, int N, int d);

}  // namespace softmax
