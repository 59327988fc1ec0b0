// What stage 11's rungs share: the block shape (a key block of Bc = 128, two warpgroups of 64 keys
// each, query blocks of Br = 64) and the two pieces every rung's step has beyond stage 07's and 08's
// helpers: dSᵀ into the warpgroup's tile, and dQ's share from it.
#pragma once

#include "../07_backward/tc_bwd.cuh"
#include "../08_flash_v3/fa3_common.cuh"

namespace attention::fa3_bwd {

constexpr int kBc = 128, kBr = 64, kThreads = 256;

// The warpgroup's dSᵀ (its 64 keys × Br queries, accumulator layout: warp w's rows 16w .. 16w + 15)
// into its tile, packed to 16 bits, one 64-wide column block in the 128-byte swizzle.
template <class T, int NT>
__device__ void store_ds_t(uint16_t* dSt, const float (&dSt_acc)[NT][4], int warp_in_wg, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < NT; ++n)
      *reinterpret_cast<uint32_t*>(dSt + hopper::swizzle128<64>(16 * warp_in_wg + g + 8 * h, n) + 2 * t) =
          ptx::pack<T>(dSt_acc[n][2 * h], dSt_acc[n][2 * h + 1]);
}

// dQ's share of the warpgroup's 64 keys for the Br queries: dS (Br × 64, from dSᵀ stored [key][query]
// as one 64-wide column block, MN-major) times K_w (64 keys × D of K's tile, Bc rows a column block,
// MN-major). Four k steps of 16 keys.
template <class T, int D>
__device__ void issue_dq(float (&dq)[D / 8][4], const uint16_t* dSt, const uint16_t* Ks, int wg) {
  const uint64_t a = hopper::make_desc(hopper::smem_u32(dSt), 64 * 128, 1024);
  const uint64_t b = hopper::make_desc(hopper::smem_u32(Ks) + wg * 64 * 128, kBc * 128, 1024);
#pragma unroll
  for (int s = 0; s < 4; ++s)
    hopper::wgmma_ss<T, D, true>(dq, hopper::desc_advance(a, s * 16 * 128), hopper::desc_advance(b, s * 16 * 128),
                                 s > 0);
}

}  // namespace attention::fa3_bwd
