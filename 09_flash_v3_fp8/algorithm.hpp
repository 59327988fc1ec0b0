// Stage 09 on the CPU, through the counting view of global memory: the FP8 forward pass on the tiles
// the kernels run (fp8_tiles: query blocks laid from N rounded up to 64, causal from the last row
// back; key blocks of 128, or 256 for rungs 3-7), on the quantised tensors as the kernels read them
// (Q and K rows of e4m3 bytes, Vᵀ's rows of padded_keys(N) bytes); and the models of its traffic and
// of the quantisation's.
#pragma once

#include "accuracy.hpp"  // QuantizedInputs
#include "attention/tiles.hpp"
#include "dtype.hpp"
#include "fp8.hpp"
#include "io_count.hpp"

namespace attention::fp8 {

// Query block i's first row as the kernels lay it: from N64 = N rounded up to 64 (so that every
// warpgroup's 64 rows lie in one of Q's 128-row scale blocks), causal from the end; its key blocks.
int fp8_query_row0(const Shape& s, Tiles t, int i);
int fp8_key_blocks(const Shape& s, Tiles t, int i);

// FP8 attention on the kernels' tiles, with the requests the kernels make, and rung 2's numerics
// (the exact max, ex2, l summing the rounded P̃; rungs 1 and 3-7 differ in those, not in the bytes):
//   load Q_i's rows (bytes); m = −∞, l = 0, o = 0
//   for each key block j, the last first: load K_j's rows and Vᵀ's columns of block j (padded to 32 keys)
//     x = S·scale·log₂e·sq·sk_j (S of e4m3 values, masked as stage 06); m_new = max(m, rowmax x)
//     P̃ = e4m3(2^(x − m_new + 8)); l = 2^(m − m_new)·l + Σ P̃; o = 2^(m − m_new)·(sv_prev / sv_j)·o + P̃·V_j
//   write O_i = o / l · sv + v̄ (rounded to `out`), L_i = ln 2·(m − 8) + ln l
// Requests: whole rows of Q, K and O, one segment a row of Vᵀ a block; L in stretches of 8 rows, as a
// warp writes it. The descales and v̄ (a few floats a tile) are not counted.
course::IoCount fp8_counted(const Shape& s, course::Dtype out, Tiles t, const QuantizedInputs& q, float* O, float* L);

// The model, exact for every N (a row of d bytes, and Vᵀ's rows of padded_keys(N) bytes, are whole
// sectors): per head Q read once, O written once (2 bytes a value), K's rows and Vᵀ's columns of every
// visited key block read once per query block, L once in stretches of 8 rows.
double fp8_model_bytes(const Shape& s, course::Dtype out, Tiles t);

// The quantisation's bytes: each 16-bit input read once (per tensor: twice, for its amax), the bytes
// written (V as Vᵀ, rows padded to 32 keys), 4 bytes a scale; centring V: V read once more, its
// blocks' column sums written and read, v̄ written and read by every block of V (quantize.cu). The
// least a scheme must move: quantize_min_bytes (Q, K, V read once, or twice per tensor; e4m3 written).
double quantize_model_bytes(const Shape& s, const Scheme& scheme);
double quantize_min_bytes(const Shape& s, const Scheme& scheme);

// Device memory of a row: the 16-bit Q, K, V and O, and L (stage 06's), and the quantised tensors.
double fp8_device_bytes(const Shape& s, course::Dtype t);

}  // namespace attention::fp8
