// Rung 3: GQA packing on the tensor cores. A block takes one split of one K/V head for up to 16 of
// its group's G·R query rows (rows j = hq·R + r in L's order, all reading the same K/V head), so
// each K/V row is loaded once for them instead of G times. 16 rows are the M of an mma.m16n8k16:
// every warp holds the 16 rows' Q fragments and takes 16 of each 64-key tile, S = Q·Kᵀ and
// O += P̃·V as stage 06's warp step (06_flash_v2/tc_common.cuh: ldmatrix, online softmax on the
// accumulators, P̃ rounded to 16 bits for P̃·V). Key tiles arrive by cp.async into two swizzled
// buffers, a tile in flight while the last is used; each key's page comes from the block table.
// The four warps' (m, l, o) merge by ⊕ in shared memory at the end, as rung 2's.
// What it should buy: the cache's bytes fall G-fold (⌈G·R / 16⌉ reads of each K/V head instead of
// G), and the arithmetic stays off the CUDA cores. Model: DecodePlan{S, true, 16}.
#include <cmath>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "decode_tc.cuh"

namespace inference {

namespace {

using namespace tcd;

template <int D>
constexpr int smem_bytes() {
  return (kRows + 4 * kKeys) * D * 2;  // Q, then K and V for two stages; the end's ⊕ reuses them
}

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_gqa(DecodeArgs a, SplitArgs sa, int slots, int heads_q,
                                                          int heads_kv, int rows, float scale) {
  constexpr int DT = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Qs = smem;
  // Stage s's K tile at keys(s), its V tile kKeys rows after it.
  auto keys = [&](int stage) { return smem + (kRows + 2 * kKeys * stage) * D; };
  const int split = blockIdx.x, b = blockIdx.z;
  const RowTile rt = row_tile(blockIdx.y, (heads_q / heads_kv) * rows);
  const int len = a.lengths[b];
  const Splits sp = split_cache(len, a.page, sa.splits);
  if (split >= sp.count) return;
  const int first = split * sp.pages_each * a.page, end = min(first + sp.pages_each * a.page, len);
  const int key_tiles = (end - first + kKeys - 1) / kKeys;

  load_keys<D>(keys(0), keys(0) + kKeys * D, a, b, rt.h, heads_kv, first, end);
  ptx::cp_async_commit();
  for (int f = threadIdx.x; f < kRows * DT; f += 32 * kWarps) {  // the rows' Q (zeros past n)
    const int i = f / DT, c = f % DT;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < rt.n) v = *reinterpret_cast<const uint4*>(a.Q + q_row(b, rt.first_j + i, rows, heads_q, D) + 8 * c);
    *reinterpret_cast<uint4*>(Qs + ptx::swizzle<D>(i, c)) = v;
  }
  __syncthreads();
  uint32_t q[1][D / 16][4];
  tc::load_q_ldmatrix<D, 1>(q, Qs, 0);
  int last[2];
  last_keys(last, len, rows, rt.first_j);

  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int key0 = first + kt * kKeys;
    if (kt + 1 < key_tiles)
      load_keys<D>(keys((kt + 1) % 2), keys((kt + 1) % 2) + kKeys * D, a, b, rt.h, heads_kv, key0 + kKeys, end);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // tile kt has landed (tile kt + 1 may still be on its way)
    __syncthreads();
    tile_step<T, D>(o, m, l, q, keys(kt % 2), key0, end, last, scale);
    __syncthreads();  // every warp is done with this buffer before the next pass refills it
  }
  // The four warps' (m, l, o) by ⊕ in shared memory (the key buffers are free now).
  finish<T, D>(reinterpret_cast<float*>(keys(0)), o, m, l, a, sa, slots, heads_q, rows, b, rt.first_j, rt.n, split,
               sp.count, scale);
}

template <class T, int D>
void prepare() {  // dynamic shared memory past 48 KB must be asked for
  CUDA_CHECK(cudaFuncSetAttribute(decode_gqa<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D>()));
}

}  // namespace

int auto_splits_gqa(const DecodeShape& s) {
  int per_sm = 0, sms = 0, device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  prepare<__half, 128>();
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_gqa<__half, 128>, 32 * kWarps,
                                                           smem_bytes<128>()));
  const int tiles_a_group = (s.group() * s.rows + kRows - 1) / kRows;
  return choose_splits(s, s.heads_kv * tiles_a_group, std::max(1, per_sm) * sms);
}

void launch_decode_gqa(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split) {
  const Launch l = check_launch("gqa", s, t, a, split, auto_splits_gqa);
  const SplitArgs& sa = l.sa;
  const int slots = l.slots;
  const dim3 grid(slots, l.row_tiles, s.batch());
  const float scale = 1.0f / std::sqrt(float(s.d));
  const bool half = t == course::Dtype::fp16;
  if (s.d == 64) {
    if (half) prepare<__half, 64>(), decode_gqa<__half, 64><<<grid, 32 * kWarps, smem_bytes<64>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale);
    else prepare<__nv_bfloat16, 64>(), decode_gqa<__nv_bfloat16, 64><<<grid, 32 * kWarps, smem_bytes<64>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale);
  } else {
    if (half) prepare<__half, 128>(), decode_gqa<__half, 128><<<grid, 32 * kWarps, smem_bytes<128>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale);
    else prepare<__nv_bfloat16, 128>(), decode_gqa<__nv_bfloat16, 128><<<grid, 32 * kWarps, smem_bytes<128>()>>>(a, sa, slots, s.heads_q, s.heads_kv, s.rows, scale);
  }
  CUDA_CHECK_LAUNCH();
  if (slots > 1) launch_decode_merge(s, t, a, sa);
}

}  // namespace inference
