// Device-side building blocks of the softmax kernels, shared by stages 03 and 04: reductions over a
// warp and a block with any associative operator, and loops over a block's segment of a row.
#pragma once

#include <type_traits>

#include "algorithm.hpp"

namespace softmax {

struct Plus {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return nan_max(a, b); }
};

__device__ inline float shfl_xor(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

// A butterfly over the 32 lanes: after it, every lane holds op over the whole warp.
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int mask = 16; mask > 0; mask /= 2) v = op(v, shfl_xor(v, mask));
  return v;
}

// Within each warp, then across the block's warps; every thread gets the result.
template <class T, class Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T per_warp[kMaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  v = per_warp[0];
  for (int w = 1; w < warps; ++w) v = op(v, per_warp[w]);
  __syncthreads();  // before per_warp is written again
  return v;
}

// This block's segment of its row. Block b takes segment b % S of row b / S, so consecutive blocks
// read consecutive memory: in the order the matrix lies in DRAM. (A grid of (row, segment) with
// the row fastest ran 1-3% slower on rows of 2^20 columns, whose segments lie 4 MB apart.)
struct Segment {
  int row, index, begin, end;
};
__device__ inline Segment my_segment(int C) {
  const int S = segments(C);
  const int r = blockIdx.x / S, s = blockIdx.x % S;
  const int begin = s * kSegment;
  return {r, s, begin, min(C, begin + kSegment)};
}

// f(x) for every x of the segment. A warp reads 128 consecutive floats at a time with 16-byte
// loads (kVec: C % 4 == 0), 32 otherwise. __ldcg: through L2, not L1, as everywhere in the course.
// An f that also takes a float4 gets the four values of a load at once.
template <bool kVec, class F>
__device__ void for_each(const float* __restrict__ row, Segment seg, F&& f) {
  if (kVec) {
    for (int c = seg.begin + 4 * threadIdx.x; c < seg.end; c += 4 * blockDim.x) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(row + c));
      if constexpr (std::is_invocable_v<F&, float4>) {
        f(v);
      } else {
        f(v.x), f(v.y), f(v.z), f(v.w);
      }
    }
  } else {
    for (int c = seg.begin + threadIdx.x; c < seg.end; c += blockDim.x) f(__ldcg(row + c));
  }
}

// out = f(in) over the segment, with the same accesses as for_each.
template <bool kVec, class F>
__device__ void map(const float* __restrict__ in, float* __restrict__ out, Segment seg, F&& f) {
  if (kVec) {
    for (int c = seg.begin + 4 * threadIdx.x; c < seg.end; c += 4 * blockDim.x) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(in + c));
      *reinterpret_cast<float4*>(out + c) = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
    }
  } else {
    for (int c = seg.begin + threadIdx.x; c < seg.end; c += blockDim.x) out[c] = f(__ldcg(in + c));
  }
}

// The row's S partials combined with op: thread i loads partial i (coalesced), then the block
// reduces. Every thread gets the result.
template <class Op>
__device__ float combine_partials(const float* __restrict__ row_partials, int S, float identity,
                                  Op op) {
  float v = identity;
  for (int i = threadIdx.x; i < S; i += blockDim.x) v = op(v, __ldcg(row_partials + i));
  return block_reduce(v, op);
}

}  // namespace softmax
