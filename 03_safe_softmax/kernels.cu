// Stage 03: the row softmax in passes over memory, each pass one kernel over the whole matrix.
//
// A block handles one segment (up to kSegment columns) of one row: R·S blocks in memory order. A pass that
// reduces writes one partial per (row, segment); the next pass combines the row's partials first.
// Each pass reads X from global memory, so for a matrix larger than the L2 every pass is a trip to
// DRAM: the IO the chapter counts.
#include <climits>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "reduce.cuh"

namespace softmax {

// --- Variant 1, naive: exp, sum, divide. Two passes: 2 reads of X, 1 write of Y. ----------------
// exp(x) overflows float for x > 88.7: then the sum is inf, and y = inf / inf = NaN.

template <bool kVec>
__global__ void naive_sum_exp(const float* __restrict__ X, float* __restrict__ l_part, int C) {
  const Segment seg = my_segment(C);
  float sum = 0.0f;
  for_each<kVec>(X + size_t(seg.row) * C, seg, [&](float x) { sum += expf(x); });
  sum = block_reduce(sum, Plus{});
  if (threadIdx.x == 0) l_part[size_t(seg.row) * partial_stride(C) + seg.index] = sum;
}

template <bool kVec>
__global__ void naive_normalize(const float* __restrict__ X, float* __restrict__ Y,
                                const float* __restrict__ l_part, int C) {
  const Segment seg = my_segment(C);
  const size_t r = seg.row;
  const float l = combine_partials(l_part + r * partial_stride(C), segments(C), 0.0f, Plus{});
  const float inv_l = 1.0f / l;  // one division a row, a multiplication a value
  map<kVec>(X + r * C, Y + r * C, seg, [&](float x) { return expf(x) * inv_l; });
}

// --- Variant 2, safe: subtract the row's maximum first. Three passes: 3 reads, 1 write. ---------
// exp(x - m) <= 1, so nothing overflows, and the result is the same function: the factor exp(-m)
// cancels between numerator and denominator. What changed: one more pass over X, for m.

template <bool kVec>
__global__ void safe_max(const float* __restrict__ X, float* __restrict__ m_part, int C) {
  const Segment seg = my_segment(C);
  float m = -INFINITY;
  for_each<kVec>(X + size_t(seg.row) * C, seg, [&](float x) { m = nan_max(m, x); });
  m = block_reduce(m, Max{});
  if (threadIdx.x == 0) m_part[size_t(seg.row) * partial_stride(C) + seg.index] = m;
}

template <bool kVec>
__global__ void safe_sum_exp(const float* __restrict__ X, const float* __restrict__ m_part,
                             float* __restrict__ l_part, int C) {
  const Segment seg = my_segment(C);
  const size_t p = size_t(seg.row) * partial_stride(C);
  const float m = combine_partials(m_part + p, segments(C), -INFINITY, Max{});
  float sum = 0.0f;
  for_each<kVec>(X + size_t(seg.row) * C, seg, [&](float x) { sum += expf(x - m); });
  sum = block_reduce(sum, Plus{});
  if (threadIdx.x == 0) l_part[p + seg.index] = sum;
}

template <bool kVec>
__global__ void safe_normalize(const float* __restrict__ X, float* __restrict__ Y,
                               const float* __restrict__ m_part, const float* __restrict__ l_part,
                               int C) {
  const Segment seg = my_segment(C);
  const size_t r = seg.row, p = r * partial_stride(C);
  const float m = combine_partials(m_part + p, segments(C), -INFINITY, Max{});
  const float inv_l = 1.0f / combine_partials(l_part + p, segments(C), 0.0f, Plus{});
  map<kVec>(X + r * C, Y + r * C, seg,
            [&](float x) { return expf(x - m) * inv_l; });
}

// --- launchers ---------------------------------------------------------------------------------

int block_threads(int C) {
  const int per_segment = std::min(C, kSegment) / (vectorized(C) ? 4 : 1);
  const int rounded = (std::max(per_segment, 1) + 31) / 32 * 32;
  return std::min(rounded, kMaxThreads);
}

int segment_blocks(int R, int C) {
  course::require(R >= 1 && C >= 1, "softmax of an empty matrix (R = " + std::to_string(R) +
                                        ", C = " + std::to_string(C) + ")");
  const long long blocks = 1LL * R * segments(C);
  course::require(blocks <= INT_MAX, "matrix too large: " + std::to_string(blocks) +
                                         " segments of " + std::to_string(kSegment) +
                                         " columns, at most " + std::to_string(INT_MAX));
  return int(blocks);
}

void launch_naive(const float* X, float* Y, float* workspace, int R, int C) {
  const int grid = segment_blocks(R, C);
  const int threads = block_threads(C);
  if (vectorized(C)) {
    naive_sum_exp<true><<<grid, threads>>>(X, workspace, C);
    CUDA_CHECK_LAUNCH();
    naive_normalize<true><<<grid, threads>>>(X, Y, workspace, C);
  } else {
    naive_sum_exp<false><<<grid, threads>>>(X, workspace, C);
    CUDA_CHECK_LAUNCH();
    naive_normalize<false><<<grid, threads>>>(X, Y, workspace, C);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_safe(const float* X, float* Y, float* workspace, int R, int C) {
  const int grid = segment_blocks(R, C);
  const int threads = block_threads(C);
  float* m_part = workspace;
  float* l_part = workspace + size_t(R) * partial_stride(C);
  if (vectorized(C)) {
    safe_max<true><<<grid, threads>>>(X, m_part, C);
    CUDA_CHECK_LAUNCH();
    safe_sum_exp<true><<<grid, threads>>>(X, m_part, l_part, C);
    CUDA_CHECK_LAUNCH();
    safe_normalize<true><<<grid, threads>>>(X, Y, m_part, l_part, C);
  } else {
    safe_max<false><<<grid, threads>>>(X, m_part, C);
    CUDA_CHECK_LAUNCH();
    safe_sum_exp<false><<<grid, threads>>>(X, m_part, l_part, C);
    CUDA_CHECK_LAUNCH();
    safe_normalize<false><<<grid, threads>>>(X, Y, m_part, l_part, C);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace softmax
