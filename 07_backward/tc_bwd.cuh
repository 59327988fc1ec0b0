// What stage 07's tensor-core key-outer kernels share beyond stage 06's building blocks
// (tc_common.cuh): the per-row statistics L and D of a query block, the mask and the softmax
// gradient on transposed scores, the reduction of a warp's share of dQ into dQacc, and the staged
// epilogue of dK and dV.
#pragma once

#include "../06_flash_v2/tc_common.cuh"
#include "kernels.cuh"

namespace attention::bwd {

using namespace attention::tc;

// The kernel's parameters with the key count of the call (BackwardArgs::Nk; 0 leaves N).
inline Params with_keys(Params p, const BackwardArgs& a) {
  course::require(a.Nk >= 0 && a.Nk <= p.N, "the backward's key count Nk must be 0 (all) to N");
  if (a.Nk > 0) p.Nk = a.Nk;
  return p;
}

// Br floats of L and D from row0 into shared memory, 4 bytes a thread (their rows need not start
// on 16 bytes). Query rows past N (rows >= `rows`) are masked, as the dQ pass and the fp32 kernel
// mask them: L = +∞ and D = 0 (zero-filled), so that P = exp(scale·S − ∞) = 0 and
// dS = P ∘ (dP − D) = 0 for any finite S and dP: those rows add nothing to dK or dV, whatever the
// tiles hold past N (L = 0 would give P = 1 there). L's copy or store is one
// predicated instruction each (ptx::cp_async_4_or), not a branch: with `if (in) copy; else
// Ls[x] = +∞;` ptxas spilled 4 bytes in tuned_deterministic's key-outer kernel at d = 128.
template <int Br>
__device__ void load_stats_async(float* Ls, float* Ds, const float* L, const float* Dv, int rows) {
  if (threadIdx.x < Br) {
    const bool in = int(threadIdx.x) < rows;
    ptx::cp_async_4_or(Ls + threadIdx.x, L + threadIdx.x, in, INFINITY);
    ptx::cp_async_4(Ds + threadIdx.x, Dv + threadIdx.x, in);
  }
}

// In place, St becomes Pᵀ = exp(scale·Sᵀ − L) (the forward's P, recomputed from the logsumexp L)
// and dPt becomes dSᵀ = Pᵀ ∘ (dPᵀ − D). Ls, Ds: L and D in shared memory from the warp's first
// query (columns as in mask_scores<true>, stage 06's mask with keys in rows); c = scale·log₂e.
template <int MT, int NT>
__device__ void softmax_backward_t(float (&St)[MT][NT][4], float (&dPt)[MT][NT][4], const float* Ls, const float* Ds,
                                   float c) {
  const int t = lane_id() % 4;
  const float log2e = ptx::kLog2e;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const float2 Lq = *reinterpret_cast<const float2*>(Ls + 8 * n + 2 * t);
    const float2 Dq = *reinterpret_cast<const float2*>(Ds + 8 * n + 2 * t);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float Le = (e % 2 ? Lq.y : Lq.x) * log2e, De = e % 2 ? Dq.y : Dq.x;
        const float P = ptx::exp2_approx(fmaf(St[mt][n][e], c, -Le));
        St[mt][n][e] = P;
        dPt[mt][n][e] = P * (dPt[mt][n][e] - De);
      }
  }
}

// A warp's share of dQ, dq[mt][n] (rows 16·mt + g and + 8, columns 8n + 2t, + 1 of a tile whose
// first element is `tile`, rows of D floats), added into dQacc with red.global.add. Lanes t and
// t^1 swap halves (one shuffle of two floats) so that each holds 4 neighbours of one row: the even
// lane row g, the odd one row g + 8, columns 8n + 4·(t/2) .. +3; one 16-byte reduction each, and a
// warp's request covers 16 rows × 32 bytes, whole sectors. Rows from `rows` on are not added: the
// reduction is predicated (ptx.cuh), not branched around. With `if (r < rows)` around it the
// compiler computed the row's address anew inside each of the 8 branches, ≈ 80 instructions a
// warp a step; measured in split (H100, d = 128, N = 16384): 4.59 → 4.24 G instructions, 1% time.
template <int D, int MT, int NC>
__device__ void red_add_dq(const float (&dq)[MT][NC][4], float* tile, int rows) {
  const int lane = lane_id(), g = lane / 4, t = lane % 4;
  const bool odd = t & 1;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r = 16 * mt + g + 8 * odd;
    float* row = tile + size_t(r) * D + 4 * (t / 2);
#pragma unroll
    for (int n = 0; n < NC; ++n) {
      const float give0 = odd ? dq[mt][n][0] : dq[mt][n][2], give1 = odd ? dq[mt][n][1] : dq[mt][n][3];
      const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
      const float4 v = odd ? make_float4(got0, got1, dq[mt][n][2], dq[mt][n][3])
                           : make_float4(dq[mt][n][0], dq[mt][n][1], got0, got1);
      ptx::red_add_f32x4(row + 8 * n, v, r < rows);
    }
  }
}

// The staged epilogue of the key-outer kernels (tc, tuned, wide; split), as stage 06's
// write_output does it for O: a warp's dK·scale and dV, packed to 16 bits, go into the swizzled
// tiles Ks and Vs (rows of D halves) that K_j and V_j held (stage_dk_dv), and from there to global
// memory in whole 16-byte chunks, consecutive lanes taking consecutive chunks of a row, so that
// each row goes out in whole 32-byte sectors (store_dk_dv). The warp's keys are the tile rows
// key_w .. key_w + kRows − 1 (MT m-tiles of 16), its columns the chunks chunk0 .. chunk0 + kChunks
// − 1 (NC n-tiles of 8); tile row r is key key0 + r of the head from `head`, not written past N.
// (write_output and the dQ pass's epilogue, flash_backward_dq, keep their own loops: written
// through a shared helper, their compiled code changed, the cubins of stage 06's rung 1 and of
// the dQ pass, which the committed measurements were taken with. These two leave it unchanged.)
template <class T, int D, int MT, int NC>
__device__ void stage_dk_dv(uint16_t* Ks, uint16_t* Vs, const float (&dk)[MT][NC][4], const float (&dv)[MT][NC][4],
                            float scale, int key_w, int chunk0, int g, int t) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < NC; ++n) {
        const int r = key_w + 16 * mt + g + 8 * h;
        *reinterpret_cast<uint32_t*>(Ks + ptx::swizzle<D>(r, chunk0 + n) + 2 * t) =
            ptx::pack<T>(dk[mt][n][2 * h] * scale, dk[mt][n][2 * h + 1] * scale);
        *reinterpret_cast<uint32_t*>(Vs + ptx::swizzle<D>(r, chunk0 + n) + 2 * t) =
            ptx::pack<T>(dv[mt][n][2 * h], dv[mt][n][2 * h + 1]);
      }
}
template <int D, int kRows, int kChunks>
__device__ void store_dk_dv(uint16_t* dK, uint16_t* dV, const uint16_t* Ks, const uint16_t* Vs, size_t head,
                            int key0, int key_w, int chunk0, int N, int lane) {
  for (int f = lane; f < kRows * kChunks; f += 32) {
    const int r = key_w + f / kChunks, ch = chunk0 + f % kChunks;
    if (key0 + r >= N) continue;
    const size_t at = head + size_t(key0 + r) * D;
    __stcg(reinterpret_cast<uint4*>(dK + at) + ch, *reinterpret_cast<const uint4*>(Ks + ptx::swizzle<D>(r, ch)));
    __stcg(reinterpret_cast<uint4*>(dV + at) + ch, *reinterpret_cast<const uint4*>(Vs + ptx::swizzle<D>(r, ch)));
  }
}

}  // namespace attention::bwd
