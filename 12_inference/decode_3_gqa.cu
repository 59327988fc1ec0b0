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

#include "../06_flash_v2/tc_common.cuh"
#include "algorithm.hpp"
#include "check.hpp"
#include "decode_common.cuh"
#include "kernels.cuh"

namespace inference {

namespace {

namespace tc = attention::tc;

constexpr int kWarps = 4, kRows = 16, kKeys = 64;  // a block's rows; a key tile (16 a warp)

template <int D>
constexpr int smem_bytes() {
  return (kRows + 4 * kKeys) * D * 2;  // Q, then K and V for two stages; the end's ⊕ reuses them
}

// Key tile [key0, key0 + 64) of the split (keys at or past `end` zero-filled) into Ks and Vs,
// swizzled, each key's row found through the block table.
template <int D>
__device__ void load_keys(uint16_t* Ks, uint16_t* Vs, const DecodeArgs& a, int b, int h, int heads_kv, int key0,
                          int end) {
  constexpr int kChunks = D / 8, kStep = 32 * kWarps / kChunks;  // 16-byte chunks a row; rows a pass
  const int c = threadIdx.x % kChunks;
#pragma unroll
  for (int r = threadIdx.x / kChunks; r < kKeys; r += kStep) {
    const int pos = key0 + r;
    const bool valid = pos < end;
    size_t at = 0;  // a row past the end reads nothing (src-size 0): any address will do
    if (valid) at = ((size_t(a.table[size_t(b) * a.stride + pos / a.page]) * a.page + pos % a.page) * heads_kv + h) * D;
    ptx::cp_async_16(Ks + ptx::swizzle<D>(r, c), a.K + at + 8 * c, valid);
    ptx::cp_async_16(Vs + ptx::swizzle<D>(r, c), a.V + at + 8 * c, valid);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(32 * kWarps) decode_gqa(DecodeArgs a, SplitArgs sa, int slots, int heads_q,
                                                          int heads_kv, int rows, float scale) {
  constexpr int DT = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Qs = smem;
  // Stage s's K tile at keys(s), its V tile kKeys rows after it.
  auto keys = [&](int stage) { return smem + (kRows + 2 * kKeys * stage) * D; };
  const int group_rows = (heads_q / heads_kv) * rows, tiles_a_group = (group_rows + kRows - 1) / kRows;
  const int split = blockIdx.x, h = blockIdx.y / tiles_a_group, b = blockIdx.z;
  const int first_j = h * group_rows + (blockIdx.y % tiles_a_group) * kRows;  // j = hq·R + r
  const int n = min(kRows, (h + 1) * group_rows - first_j);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int len = a.lengths[b];
  const Splits sp = split_cache(len, a.page, sa.splits);
  if (split >= sp.count) return;
  const int first = split * sp.pages_each * a.page, end = min(first + sp.pages_each * a.page, len);
  const int key_tiles = (end - first + kKeys - 1) / kKeys;

  load_keys<D>(keys(0), keys(0) + kKeys * D, a, b, h, heads_kv, first, end);
  ptx::cp_async_commit();
  for (int f = threadIdx.x; f < kRows * DT; f += 32 * kWarps) {  // the rows' Q (zeros past n)
    const int i = f / DT, c = f % DT, j = first_j + i;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < n) v = *reinterpret_cast<const uint4*>(a.Q + ((size_t(b) * rows + j % rows) * heads_q + j / rows) * D + 8 * c);
    *reinterpret_cast<uint4*>(Qs + ptx::swizzle<D>(i, c)) = v;
  }
  __syncthreads();
  uint32_t q[1][D / 16][4];
  tc::load_q_ldmatrix<D, 1>(q, Qs, 0);
  // The last key each of the lane's rows g, g + 8 sees (speculative rows are causal among themselves).
  int last[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) last[e] = len - rows + (first_j + g + 8 * e) % rows;

  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int key0 = first + kt * kKeys;
    if (kt + 1 < key_tiles)
      load_keys<D>(keys((kt + 1) % 2), keys((kt + 1) % 2) + kKeys * D, a, b, h, heads_kv, key0 + kKeys, end);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // tile kt has landed (tile kt + 1 may still be on its way)
    __syncthreads();
    const uint16_t* Kw = keys(kt % 2) + 16 * warp * D;  // the warp's 16 keys (swizzle: rows mod 8 kept)
    const uint16_t* Vw = Kw + kKeys * D;
    float S[1][2][4] = {};
    tc::qk_ldmatrix<T, D, 1, 2>(S, q, Kw);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int pos = key0 + 16 * warp + 8 * nt + 2 * t + e % 2;
        if (pos >= end || pos > last[e / 2]) S[0][nt][e] = -INFINITY;
      }
    uint32_t P[1][1][4];
    tc::online_softmax<T, true>(S, o, m, l, scale, P);
    tc::pv_ldmatrix<T, D, 1, 2>(o, P, Vw);
    __syncthreads();  // every warp is done with this buffer before the next pass refills it
  }

  // The four warps' (m, l, o) by ⊕ in shared memory (the key buffers are free now).
  float* o_s = reinterpret_cast<float*>(keys(0));  // [warp][row][D]
  float* m_s = o_s + kWarps * kRows * D;         // [warp][row]
  float* l_s = m_s + kWarps * kRows;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int row = g + 8 * e;
    const float lsum = tc::quad_sum(l[0][e]);
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o_s[(warp * kRows + row) * D + 8 * dt + 2 * t] = o[0][dt][2 * e];
      o_s[(warp * kRows + row) * D + 8 * dt + 2 * t + 1] = o[0][dt][2 * e + 1];
    }
    if (t == 0) m_s[warp * kRows + row] = m[0][e], l_s[warp * kRows + row] = lsum;
  }
  __syncthreads();
  const float c = scale * ptx::kLog2e;
  for (int f = threadIdx.x; f < n * D; f += 32 * kWarps) {
    const int i = f / D, e = f % D, j = first_j + i;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w * kRows + i]);
    float sum_l = 0.0f, sum_o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float mw = m_s[w * kRows + i], fw = mw == -INFINITY ? 0.0f : exp2f((mw - M) * c);
      sum_l += fw * l_s[w * kRows + i];
      sum_o += fw * o_s[(w * kRows + i) * D + e];
    }
    const size_t l_at = size_t(b) * heads_q * rows + j;
    const float L = sum_l == 0.0f ? -INFINITY : M * scale + logf(sum_l);  // raw scores' max: L = scale·M + ln l
    if (sp.count == 1) {
      a.O[((size_t(b) * rows + j % rows) * heads_q + j / rows) * D + e] = to_bits<T>(sum_o / sum_l);
      if (e == 0) a.L[l_at] = L;
    } else {
      float* rec = sa.partial + record_at(l_at, slots, split, D);
      rec[e] = sum_l == 0.0f ? 0.0f : sum_o / sum_l;
      if (e < 8) rec[D + e] = e > 0 ? 0.0f : L;
    }
  }
}

int slots_of(const DecodeShape& s, int page, int splits) {
  int most = 1;
  for (int len : s.lengths) most = std::max(most, split_cache(len, page, splits).count);
  return most;
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
  s.validate();
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  std::string("gqa (stage 12) runs fp16 or bf16, not ") + course::name(t));
  course::require(s.d == 64 || s.d == 128, "gqa (stage 12) runs d = 64 or 128, not d = " + std::to_string(s.d));
  course::require(a.page >= 1 && a.stride >= 1, "gqa (stage 12): a page of at least one token, a table row of one page");
  course::require(split.splits >= 0, "gqa (stage 12): splits must be >= 0 (0: auto), not " + std::to_string(split.splits));
  SplitArgs sa = split;
  if (sa.splits == 0) sa.splits = auto_splits_gqa(s);
  const int slots = slots_of(s, a.page, sa.splits);
  course::require(slots == 1 || sa.partial != nullptr,
                  "gqa (stage 12): " + std::to_string(slots) + " splits need the partial records' buffer");
  const int tiles_a_group = (s.group() * s.rows + kRows - 1) / kRows;
  const dim3 grid(slots, s.heads_kv * tiles_a_group, s.batch());
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
  if (slots > 1) launch_decode_merge(s, t, a, sa, std::min(kRows, s.group() * s.rows));
}

}  // namespace inference
