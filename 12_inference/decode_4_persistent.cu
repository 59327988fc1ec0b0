// Rung 4: persistent blocks, one cp.async ring across a block's items. Rung 3 gives each (sequence,
// row tile, split) a block of its own: every block pays a ramp (its table entries, Q and first tile
// in flight, nothing to compute yet) and, when the items outnumber one wave, the last wave runs
// half empty. Here one wave of blocks walks the items, item w = blockIdx.x + k·gridDim.x, and the
// ring of key tiles runs on from one item into the next: the next item's first tiles (and its Q,
// loaded with them into the same stage) are in flight while this item's last tiles are computed
// and its end written. The work of a tile and of an item's end is rung 3's (decode_tc.cuh).
// What it should buy: the ramp paid once a block instead of once an item, and items small enough
// (more splits) that blocks end within an item of each other, where rung 3's one and a third
// waves at B = 64 leave SMs idle. Model: rung 3's, DecodePlan{S, true, 16}.
#include <cmath>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "decode_tc.cuh"

namespace inference {

namespace {

using namespace tcd;

constexpr int kStages = 2, kItemsABlock = 4;  // the ring's stages; splits for about this many items a block

// A stage: the tile's K, then V (kKeys rows each), then the rows' Q when the tile is its item's first.
template <int D>
constexpr int stage_halves() {
  return (2 * kKeys + kRows) * D;
}
template <int D>
constexpr int smem_bytes() {
  return kStages * stage_halves<D>() * 2;
}
// An item's end takes a stage: the warps' o over its K and V, their m and l in its Q.
static_assert(2 * kKeys * 2 >= kWarps * kRows * 4 && kRows * 64 * 2 >= 2 * kWarps * kRows * 4, "the end fits a stage");

// Where a block is in its list of items: item w, its tile t of `tiles`, keys [first, end).
struct Cursor {
  int w, t, tiles, first, end, b, y, split, count;
};

// The first non-empty item at or after w in the block's list (w, w + gridDim.x, ...); w = items: none.
__device__ inline Cursor seek(const DecodeArgs& a, const SplitArgs& sa, int w, int items, int ys, int slots) {
  for (; w < items; w += gridDim.x) {
    const int split = w % slots, y = w / slots % ys, b = w / slots / ys;  // b-major: the longest sequences first
    const int len = a.lengths[b];
    const Splits sp = split_cache(len, a.page, sa.splits);
    if (split >= sp.count) continue;
    const int first = split * sp.pages_each * a.page, end = min(first + sp.pages_each * a.page, len);
    return {w, 0, (end - first + kKeys - 1) / kKeys, first, end, b, y, split, sp.count};
  }
  return {items, 0, 0, 0, 0, 0, 0, 0, 0};
}

__device__ inline void advance(Cursor& c, const DecodeArgs& a, const SplitArgs& sa, int items, int ys, int slots) {
  if (++c.t == c.tiles) c = seek(a, sa, c.w + gridDim.x, items, ys, slots);
}

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_persistent(DecodeArgs a, SplitArgs sa, int slots, int heads_q,
                                                                 int heads_kv, int rows, int items, float scale) {
  constexpr int DT = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  auto stage = [&](int s) { return smem + s * stage_halves<D>(); };
  const int group_rows = (heads_q / heads_kv) * rows, ys = heads_kv * ((group_rows + kRows - 1) / kRows);

  // Issue the tile under cursor p into stage s (and, for an item's first tile, the item's Q).
  auto issue = [&](const Cursor& p, int s) {
    if (p.w >= items) return;
    const RowTile rt = row_tile(p.y, group_rows);
    uint16_t* Ks = stage(s);
    load_keys<D>(Ks, Ks + kKeys * D, a, p.b, rt.h, heads_kv, p.first + p.t * kKeys, p.end);
    if (p.t == 0)
      for (int f = threadIdx.x; f < kRows * DT; f += 32 * kWarps) {  // the rows' Q (zeros past n)
        const int i = f / DT, ch = f % DT;
        const uint16_t* src = a.Q + (i < rt.n ? q_row(p.b, rt.first_j + i, rows, heads_q, D) + 8 * ch : 0);
        ptx::cp_async_16(Ks + 2 * kKeys * D + ptx::swizzle<D>(i, ch), src, i < rt.n);
      }
  };

  Cursor c = seek(a, sa, blockIdx.x, items, ys, slots), p = c;  // the tile computed; the tile issued
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    issue(p, s);
    ptx::cp_async_commit();
    advance(p, a, sa, items, ys, slots);
  }
  uint32_t q[1][D / 16][4];
  int last[2];
  float o[1][DT][4], m[1][2], l[1][2];
  for (int g = 0; c.w < items; ++g) {
    issue(p, (g + kStages - 1) % kStages);  // into the stage computed one step ago
    ptx::cp_async_commit();
    advance(p, a, sa, items, ys, slots);
    ptx::cp_async_wait<kStages - 1>();  // tile g has landed
    __syncthreads();
    const uint16_t* Ks = stage(g % kStages);
    const RowTile rt = row_tile(c.y, group_rows);
    if (c.t == 0) {  // a new item: its Q came with this tile
      tc::load_q_ldmatrix<D, 1>(q, Ks + 2 * kKeys * D, 0);
      last_keys(last, a.lengths[c.b], rows, rt.first_j);
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][dt][e] = 0.0f;
      m[0][0] = m[0][1] = -INFINITY, l[0][0] = l[0][1] = 0.0f;
    }
    tile_step<T, D>(o, m, l, q, Ks, c.first + c.t * kKeys, c.end, last, scale);
    __syncthreads();  // every warp is done with this stage before it is refilled (or used for the end)
    if (c.t == c.tiles - 1) {  // the item's end, in this stage (free until the next issue)
      float* scratch = reinterpret_cast<float*>(stage(g % kStages));
      finish<T, D>(scratch, o, m, l, a, sa, slots, heads_q, rows, c.b, rt.first_j, rt.n, c.split, c.count, scale);
      __syncthreads();
    }
    advance(c, a, sa, items, ys, slots);
  }
}

template <class T, int D>
void prepare() {  // dynamic shared memory past 48 KB must be asked for
  CUDA_CHECK(cudaFuncSetAttribute(decode_persistent<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D>()));
}

template <int D>
int resident_blocks_d() {  // an SM's blocks at once times the SMs
  int per_sm = 0, sms = 0, device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  prepare<__half, D>();
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_persistent<__half, D>, 32 * kWarps,
                                                           smem_bytes<D>()));
  return std::max(1, per_sm) * sms;
}
int resident_blocks(int d) { return d == 64 ? resident_blocks_d<64>() : resident_blocks_d<128>(); }

}  // namespace

int auto_splits_persistent(const DecodeShape& s) {
  const int ys = s.heads_kv * ((s.group() * s.rows + kRows - 1) / kRows);
  return choose_splits(s, ys, kItemsABlock * resident_blocks(s.d));
}

void launch_decode_persistent(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split) {
  const Launch l = check_launch("persistent", s, t, a, split, auto_splits_persistent);
  const SplitArgs& sa = l.sa;
  const int slots = l.slots, ys = l.row_tiles;
  const long long items = (long long)slots * ys * s.batch();
  course::require(items < (1LL << 31), "persistent (stage 12): too many items for one launch");
  const int grid = int(std::min<long long>(items, resident_blocks(s.d)));
  const float scale = 1.0f / std::sqrt(float(s.d));
  const bool half = t == course::Dtype::fp16;
  const int n = int(items);
  if (s.d == 64) {
    if (half) prepare<__half, 64>(), decode_persistent<__half, 64><<<grid, 32 * kWarps, smem_bytes<64>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, n, scale);
    else prepare<__nv_bfloat16, 64>(), decode_persistent<__nv_bfloat16, 64><<<grid, 32 * kWarps, smem_bytes<64>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, n, scale);
  } else {
    if (half) prepare<__half, 128>(), decode_persistent<__half, 128><<<grid, 32 * kWarps, smem_bytes<128>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, n, scale);
    else prepare<__nv_bfloat16, 128>(), decode_persistent<__nv_bfloat16, 128><<<grid, 32 * kWarps, smem_bytes<128>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, n, scale);
  }
  CUDA_CHECK_LAUNCH();
  if (slots > 1) launch_decode_merge(s, t, a, sa);
}

}  // namespace inference
