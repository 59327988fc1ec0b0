// Stage 04: the online softmax, and the online state carried into attention.
#include <string>
#include <type_traits>

#include "../03_safe_softmax/kernels.cuh"  // block_threads
#include "../03_safe_softmax/reduce.cuh"
#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "online.hpp"

namespace softmax {

// ⊕ over all the threads of a block (kWarp: of a warp). Folding ⊕ up a tree of shuffles would
// cost an exp at every step; but ⊕ of n pieces is (max mᵢ, Σ lᵢ·exp(mᵢ − max)), so we take the
// max with one reduction, rescale each thread's l once, and add with a second reduction: one exp a
// thread, the same result.
template <bool kWarp = false>
__device__ MaxSum reduce_state(MaxSum s) {
  const float m = kWarp ? warp_reduce(s.m, Max{}) : block_reduce(s.m, Max{});
  const float l = s.l * rescale(s.m, m);
  return {m, kWarp ? warp_reduce(l, Plus{}) : block_reduce(l, Plus{})};
}

// --- Variant 1, online: two passes instead of three. ------------------------------------------
// Pass 1 finds max and sum together: each thread runs the recurrence over its values, then the
// block merges the threads' states with ⊕ (reduce_state: warp shuffles, then across warps) and
// writes the segment's (m, l). Pass 2 merges the row's segment states and normalises.
// What changed from 03's safe softmax: the max pass is gone. IO: 2 reads + 1 write of X.

// Runs the recurrence over what for_each hands it: a value, or a 16-byte load's four.
struct Accumulate {
  MaxSum& state;
  __device__ void operator()(float x) { state = online_update(state, x); }
  __device__ void operator()(float4 v) { state = online_update4(state, v.x, v.y, v.z, v.w); }
};

template <bool kVec>
__global__ void online_max_sum(const float* __restrict__ X, float* __restrict__ m_part,
                               float* __restrict__ l_part, int C) {
  const Segment seg = my_segment(C);
  MaxSum state = empty_piece();
  for_each<kVec>(X + size_t(seg.row) * C, seg, Accumulate{state});
  state = reduce_state(state);
  if (threadIdx.x == 0) {
    const size_t p = size_t(seg.row) * partial_stride(C) + seg.index;
    m_part[p] = state.m;
    l_part[p] = state.l;
  }
}

template <bool kVec>
__global__ void online_normalize(const float* __restrict__ X, float* __restrict__ Y,
                                 const float* __restrict__ m_part, const float* __restrict__ l_part,
                                 int C) {
  const Segment seg = my_segment(C);
  const size_t r = seg.row, p = r * partial_stride(C);
  MaxSum row = empty_piece();
  for (int i = threadIdx.x; i < segments(C); i += blockDim.x) {
    row = combine(row, MaxSum{__ldcg(m_part + p + i), __ldcg(l_part + p + i)});
  }
  row = reduce_state(row);
  const float inv_l = 1.0f / row.l;
  map<kVec>(X + r * C, Y + r * C, seg, [&](float x) { return expf(x - row.m) * inv_l; });
}

// --- Variant 2, on chip: a row short enough to stay in registers is read once. -----------------
// A group of kLanes threads holds a row in registers (up to 32 floats a thread), runs the
// recurrence, merges, and writes the result from the registers. Rows of up to 1024 columns get a
// warp each (8 rows a block, merged with shuffles alone); longer ones, up to 8192, a block each.
// IO: 1 read + 1 write: the least possible.

// kPerThread: the values a thread holds, 8, 16 or 32, the fewest that cover the row: registers are
// sized for it, so short rows leave room for more warps per SM (with 32 for every row, a kernel of
// 48 registers ran 5 blocks per SM, 62% of the warps it could hold).
template <bool kVec, int kLanes, int kPerThread>
__global__ void __launch_bounds__(kMaxThreads) on_chip(const float* __restrict__ X,
                                                       float* __restrict__ Y, int R, int C) {
  static_assert(kLanes == 32 || kLanes == kMaxThreads, "a warp or a block per row");
  static_assert(kPerThread * kLanes <= kOnChipMaxCols, "at most kOnChipMaxCols columns");
  const int t = threadIdx.x % kLanes;
  const int r = blockIdx.x * (kMaxThreads / kLanes) + threadIdx.x / kLanes;
  if (kLanes == 32 && r >= R) return;  // a warp with no row (a block-wide group always has one)
  const float* row = X + size_t(r) * C;
  float* out = Y + size_t(r) * C;
  float v[kPerThread];
  MaxSum state = empty_piece();
  // Value k of this thread is column col(k): with kVec, element k % 4 of float4 number k / 4.
  auto col = [&](int k) { return kVec ? 4 * (t + (k / 4) * kLanes) + k % 4 : t + k * kLanes; };
#pragma unroll
  for (int k = 0; k < kPerThread; k += (kVec ? 4 : 1)) {
    const int c = col(k);
    if (c >= C) continue;
    if (kVec) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(row + c));
      v[k] = x.x, v[k + 1] = x.y, v[k + 2] = x.z, v[k + 3] = x.w;
      state = online_update4(state, x.x, x.y, x.z, x.w);
    } else {
      v[k] = __ldcg(row + c);
      state = online_update(state, v[k]);
    }
  }
  state = reduce_state<kLanes == 32>(state);
  const float inv_l = 1.0f / state.l;
#pragma unroll
  for (int k = 0; k < kPerThread; k += (kVec ? 4 : 1)) {
    const int c = col(k);
    if (c >= C) continue;
    if (kVec) {
      *reinterpret_cast<float4*>(out + c) =
          make_float4(expf(v[k] - state.m) * inv_l, expf(v[k + 1] - state.m) * inv_l,
                      expf(v[k + 2] - state.m) * inv_l, expf(v[k + 3] - state.m) * inv_l);
    } else {
      out[c] = expf(v[k] - state.m) * inv_l;
    }
  }
}

// --- The bridge to attention: one query per warp, K and V in one pass. --------------------------
// A block of 8 warps takes 8 queries and streams K and V through shared memory in tiles of T keys.
// For each key a warp computes the score s = q·k (each lane holds d/32 elements; a warp reduction
// adds them) and updates its running state: m' = max(m, s), l' = l·e^(m−m') + e^(s−m'),
// o' = o·e^(m−m') + e^(s−m')·v. At the end o / l is the output: softmax and the weighted sum of V
// in one pass, and no score is ever written to memory.
// IO: Q read once, O written once, K and V read once per block of 8 queries.

template <int D>
__global__ void attention_row(const float* __restrict__ Q, const float* __restrict__ K,
                              const float* __restrict__ V, float* __restrict__ O, int Nq, int N,
                              float scale) {
  constexpr int kPerLane = D / 32, T = kTileFloats / D;
  __shared__ __align__(16) float Ks[kTileFloats];
  __shared__ __align__(16) float Vs[kTileFloats];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int i = blockIdx.x * kQueriesPerBlock + warp;  // this warp's query
  const bool active = i < Nq;
  float q[kPerLane], o[kPerLane];
  MaxSum state = empty_piece();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    q[j] = active ? __ldcg(Q + size_t(i) * D + lane + 32 * j) * scale : 0.0f;
    o[j] = 0.0f;
  }
  for (int j0 = 0; j0 < N; j0 += T) {
    const int floats = min(T, N - j0) * D;
    __syncthreads();  // everyone is done with the previous tile
    for (int f = 4 * threadIdx.x; f < floats; f += 4 * blockDim.x) {
      *reinterpret_cast<float4*>(Ks + f) = __ldcg(reinterpret_cast<const float4*>(K + size_t(j0) * D + f));
      *reinterpret_cast<float4*>(Vs + f) = __ldcg(reinterpret_cast<const float4*>(V + size_t(j0) * D + f));
    }
    __syncthreads();  // the tile is complete
    if (!active) continue;
    for (int t = 0; t < floats / D; ++t) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) s += q[j] * Ks[t * D + lane + 32 * j];
      s = warp_reduce(s, Plus{});
      const float m = nan_max(state.m, s);
      const float a = rescale(state.m, m), p = rescale(s, m);
      state = {m, state.l * a + p};
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) o[j] = o[j] * a + p * Vs[t * D + lane + 32 * j];
    }
  }
  if (!active) return;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) O[size_t(i) * D + lane + 32 * j] = o[j] / state.l;
}

// --- launchers ---------------------------------------------------------------------------------

namespace {
void require_matrix(int R, int C) {
  course::require(R >= 1 && C >= 1, "softmax of an empty matrix (R = " + std::to_string(R) +
                                        ", C = " + std::to_string(C) + ")");
}
}  // namespace

void launch_online(const float* X, float* Y, float* workspace, int R, int C) {
  const int grid = segment_blocks(R, C);
  const int threads = block_threads(C);
  float* m_part = workspace;
  float* l_part = workspace + size_t(R) * partial_stride(C);
  if (vectorized(C)) {
    online_max_sum<true><<<grid, threads>>>(X, m_part, l_part, C);
    CUDA_CHECK_LAUNCH();
    online_normalize<true><<<grid, threads>>>(X, Y, m_part, l_part, C);
  } else {
    online_max_sum<false><<<grid, threads>>>(X, m_part, l_part, C);
    CUDA_CHECK_LAUNCH();
    online_normalize<false><<<grid, threads>>>(X, Y, m_part, l_part, C);
  }
  CUDA_CHECK_LAUNCH();
}

namespace {
// The kernel for rows of C columns with kLanes threads each: kPerThread = 8, 16 or 32 values.
template <int kLanes>
void launch_on_chip_rows(const float* X, float* Y, int R, int C, int blocks) {
  const int per_thread = (C + kLanes - 1) / kLanes;
  const bool vec = vectorized(C);
  auto go = [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    if (vec) {
      on_chip<true, kLanes, kPer><<<blocks, kMaxThreads>>>(X, Y, R, C);
    } else {
      on_chip<false, kLanes, kPer><<<blocks, kMaxThreads>>>(X, Y, R, C);
    }
  };
  if (per_thread <= 8) {
    go(std::integral_constant<int, 8>{});
  } else if (per_thread <= 16) {
    go(std::integral_constant<int, 16>{});
  } else {
    go(std::integral_constant<int, 32>{});
  }
}
}  // namespace

void launch_on_chip(const float* X, float* Y, float*, int R, int C) {
  require_matrix(R, C);
  course::require(C <= kOnChipMaxCols, "on_chip handles rows of at most " +
                                           std::to_string(kOnChipMaxCols) + " columns, not " +
                                           std::to_string(C));
  constexpr int kRowsPerBlock = kMaxThreads / 32;
  if (C <= kOnChipWarpMaxCols) {  // a warp per row
    launch_on_chip_rows<32>(X, Y, R, C, (R + kRowsPerBlock - 1) / kRowsPerBlock);
  } else {  // a block per row
    launch_on_chip_rows<kMaxThreads>(X, Y, R, C, R);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_attention_row(const float* Q, const float* K, const float* V, float* O, int Nq, int N,
                          int d) {
  course::require(Nq >= 1 && N >= 1, "attention needs at least one query and one key");
  course::require(attention_supported(d), "attention_row supports d = 32, 64 or 128, not " +
                                              std::to_string(d));
  const int blocks = (Nq + kQueriesPerBlock - 1) / kQueriesPerBlock;
  const float scale = 1.0f / sqrtf(float(d));
  const int threads = 32 * kQueriesPerBlock;
  if (d == 32) attention_row<32><<<blocks, threads>>>(Q, K, V, O, Nq, N, scale);
  if (d == 64) attention_row<64><<<blocks, threads>>>(Q, K, V, O, Nq, N, scale);
  if (d == 128) attention_row<128><<<blocks, threads>>>(Q, K, V, O, Nq, N, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace softmax
