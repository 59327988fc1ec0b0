// The softmax passes as the kernels run them, on the CPU, through the counting view of global
// memory; the models of their traffic; and the pieces stage 04 reuses.
//
// How the kernels split the work: a row of C columns is cut into S = ⌈C / kSegment⌉ segments and
// each (row, segment) gets one block. A pass that reduces (a max, a sum) writes one partial result
// per segment; the next pass reads the row's S partials and combines them. Short rows have S = 1.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include "hd.hpp"
#include "io_count.hpp"

namespace softmax {

constexpr int kSegment = 16384;  // columns per block
constexpr int kMaxThreads = 256;

COURSE_HD inline int segments(int C) { return (C + kSegment - 1) / kSegment; }
// A row's partials start on a sector: rows of partials are padded to 8 floats.
COURSE_HD inline int partial_stride(int C) { return (segments(C) + 7) / 8 * 8; }
// Two arrays of partials (a max and a sum, or m and l), for R rows.
inline std::size_t workspace_floats(int R, int C) { return 2 * std::size_t(R) * partial_stride(C); }
// 16-byte accesses when rows start on 16-byte boundaries; then a warp's request is 128 floats.
inline bool vectorized(int C) { return C % 4 == 0; }
inline int request_floats(int C) { return vectorized(C) ? 4 * course::kWarpSize : course::kWarpSize; }

// max that propagates NaN (fmaxf would drop it and hide a NaN input).
COURSE_HD inline float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

// --- passes through the counting view: the CPU twins of the kernels' loops ----------------------
using In = course::GlobalArray<const float>;
using Out = course::GlobalArray<float>;

// Reads segment s of row r, as a block's warps do, and calls f(x) for each element in order.
void read_segment(const In& X, int r, int s, int C, const std::function<void(float)>& f);
// Reads segment s of row r, writes y = f(x) to the same place of Y.
void map_segment(const In& X, const Out& Y, int r, int s, int C,
                 const std::function<float(float)>& f);
// Writes partial result s of row r (one float: one sector).
void write_partial(const Out& P, int r, int s, int C, float value);
// Reads the S partials of row r, as a block does (32 floats a request).
std::vector<float> read_partials(const Out& P, int r, int C);

// X, Y and two arrays of partials (m and l, or one of them) in one counting view: the memory every
// pass-based variant works on. Not copyable: the views point into `hbm`.
struct PassMemory {
  PassMemory(const float* X, float* Y, int R, int C);
  PassMemory(const PassMemory&) = delete;
  PassMemory& operator=(const PassMemory&) = delete;
  std::vector<float> partials;
  course::Hbm hbm;
  In x;
  Out y, m_part, l_part;
};

// --- the two variants of stage 03 --------------------------------------------------------------
// The CPU twins compute what the kernels compute, value by value (exp in float, the same passes),
// except that a segment's sum is accumulated in double: the kernels' block sums a segment as 256
// short sums and a tree, which keeps fp32 error small; a CPU loop of 16384 float additions would
// not.
// naive: pass 1 sums exp(x) per segment; pass 2 writes exp(x) / sum. Overflows for large x.
course::IoCount naive_counted(const float* X, float* Y, int R, int C);
// safe: pass 1 max per segment; pass 2 sums exp(x - m) per segment; pass 3 writes exp(x - m) / l.
course::IoCount safe_counted(const float* X, float* Y, int R, int C);

// The models, in bytes between the SMs and L2 (docs/03_safe_softmax.md): `reads` passes over X,
// one write of Y, and the partials: each partial written costs a sector, and each of a row's S
// blocks reads the row's ⌈S/8⌉ sectors of each partial array it needs.
double passes_model_bytes(int R, int C, int reads, int partial_arrays_written,
                          int partial_arrays_read);
inline double naive_model_bytes(int R, int C) { return passes_model_bytes(R, C, 2, 1, 1); }
inline double safe_model_bytes(int R, int C) { return passes_model_bytes(R, C, 3, 2, 3); }
// Exact when rows start on sector boundaries.
inline bool model_exact(int C) { return C % 8 == 0; }

}  // namespace softmax
