// The wide rungs' epilogue (rungs 4-7): O = (o / l) · o_times + v̄ into the warp's staging, written
// out by the copy engine (stage 08's store_staged_output), and L = ln 2 · (m + log₂ l − 8). Rungs 1-3
// take stage 08's write_output_tma with fa3::Epilogue's factors.
#pragma once

#include "fp8_pipeline.cuh"

namespace attention::fp8 {

// Rung 4: v̄ from shared memory (the producer copies it in with the tile's Q, Layout's kVbar) where
// write_output_tma loads it from global memory; there, ptxas issues the loads after the wait for the
// last P̃·V, 16 for row g and again 16 for row g + 8 (they may alias the staging's stores): two trips
// to L2 on the way out of every tile. And l as the tensor cores summed it: every lane of a quad holds
// the whole sum, so no shuffles; 1/l approximate (2 ulp, where an exact division calls a slow path,
// and ptxas saves registers around the call).
template <class T, int D, int J>
__device__ void write_output_wide(const float (&o)[J][4], const float (&m)[2], const float (&l)[2], uint16_t* stage,
                                  const float* vbar, const CUtensorMap* mapO, const tc::Params& p, int h, int row0,
                                  float o_times) {
  constexpr float kLn2 = 0.69314718f;
  const int lane = tc::lane_id(), g = lane / 4, t = lane % 4;
  // The lane's columns of v̄ (8d + 2t and 8d + 2t + 1), all loaded before the first store to the
  // staging: ptxas keeps a load after a store that may alias it.
  float2 add[D / 8];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) add[d] = *reinterpret_cast<const float2*>(vbar + 8 * d + 2 * t);
  if (lane == 0) hopper::bulk_wait_read<0>();
  __syncwarp();
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {  // rows g and g + 8
    // 1/l by MUFU.RCP; O = (o / l) · o_times in that order, as write_output_tma
    const float inv = __fdividef(1.0f, l[hh]);
    const int r = g + 8 * hh;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<uint32_t*>(stage + hopper::swizzle128<16>(r, d) + 2 * t) =
          ptx::pack<T>(o[d][2 * hh] * inv * o_times + add[d].x, o[d][2 * hh + 1] * inv * o_times + add[d].y);
    if (t == 0 && unsigned(row0 + r) < unsigned(p.N)) p.L[size_t(h) * p.N + row0 + r] = kLn2 * m[hh] + logf(l[hh]) - 8.0f * kLn2;
  }
  fa3::store_staged_output<D>(stage, mapO, p, h, row0);
}

// Rung 6: write_output_wide with L by lg2.approx (MUFU.LG2 and a fix-up for denormal inputs; 2 ulp,
// l ≥ 2⁸) where logf is a software log of about 25 instructions that one lane in four runs in a
// branch while the warp waits, and L stored after the TMA store is issued; and the staging by
// stmatrix: the accumulator's layout is stmatrix's (row lane / 4, columns 2·(lane % 4) and + 1 of an
// 8 × 8 matrix), so one x4 writes two 8-column chunks of the warp's 16 rows: 8 STSM a lane where
// there were 32 STS and their 32 addresses (each lane gives one row's address: matrix lane / 8, row
// lane % 8).
template <class T, int D, int J>
__device__ void write_output_stsm(const float (&o)[J][4], const float (&m)[2], const float (&l)[2], uint16_t* stage,
                                  const float* vbar, const CUtensorMap* mapO, const tc::Params& p, int h, int row0,
                                  float o_times) {
  static_assert(D % 16 == 0, "stmatrix.x4 writes the staging 16 columns at a time");
  const int lane = tc::lane_id(), t = lane % 4;
  float2 add[D / 8];  // as write_output_wide: all of v̄'s loads before the first store to the staging
#pragma unroll
  for (int d = 0; d < D / 8; ++d) add[d] = *reinterpret_cast<const float2*>(vbar + 8 * d + 2 * t);
  if (lane == 0) hopper::bulk_wait_read<0>();
  __syncwarp();
  // O = (o / l) · o_times, as write_output_wide
  const float inv[2] = {__fdividef(1.0f, l[0]), __fdividef(1.0f, l[1])};
  const int r = lane % 8 + 8 * (lane / 8 % 2), c = lane / 16;  // the row this lane addresses: chunk 2s + c
#pragma unroll
  for (int s = 0; s < D / 16; ++s) {
    uint32_t w[4];  // the matrices: rows 0-7 and 8-15 of chunk 2s, then of chunk 2s + 1
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int d = 2 * s + x / 2, hh = x % 2;
      w[x] = ptx::pack<T>(o[d][2 * hh] * inv[hh] * o_times + add[d].x, o[d][2 * hh + 1] * inv[hh] * o_times + add[d].y);
    }
    hopper::stmatrix_x4(hopper::smem_u32(stage + hopper::swizzle128<16>(r, 2 * s + c)), w);
  }
  fa3::store_staged_output<D>(stage, mapO, p, h, row0);
  const int g = lane / 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)  // L = ln 2 · (m + log₂ l − 8): m and the shift of 8 are in log₂ units
    if (t == 0 && unsigned(row0 + g + 8 * hh) < unsigned(p.N))
      p.L[size_t(h) * p.N + row0 + g + 8 * hh] = 0.69314718f * (m[hh] + __log2f(l[hh]) - 8.0f);
}

}  // namespace attention::fp8
