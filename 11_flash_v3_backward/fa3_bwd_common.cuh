// What stage 11's rungs share: the block shape (a key block of Bc = 128, two warpgroups of 64 keys
// each, query blocks of Br = 64; rungs 5 to 7 take 128 at d = 64, rung 7 80 at d = 128 not causal),
// the two pieces every rung's step has beyond stage 07's and 08's
// helpers (dSᵀ into the warpgroup's tile, dQ's share from it), and the launch.
#pragma once

#include "../07_backward/tc_bwd.cuh"
#include "../08_flash_v3/fa3_common.cuh"
#include "check.hpp"
#include "kernels.cuh"

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

// Block b's key block and head (x, y) when the blocks, which start in the order of b, take the key
// blocks of every head in groups of G: G key blocks of head 0, of head 1, ..., then the next G of
// head 0, ...; a last group of Tc mod G. G = Tc is the plain order (head by head); a block's
// predecessors within its head keep lower b either way.
__device__ inline int2 grouped_key_block(int b, int Tc, int heads, int G) {
  const int whole = Tc / G * G;  // the key blocks in whole groups
  if (b < whole * heads) return make_int2(b / (G * heads) * G + b % G, b / G % heads);
  b -= whole * heads;
  const int rest = Tc - whole;
  return make_int2(whole + b % rest, b / rest);
}

// --- the launch (host) -------------------------------------------------------------------------------
// The TMA rungs' tensor maps: Q and dO in boxes of Br rows, K and V of Bc rows (128-byte swizzle,
// 64 columns a box); dQacc's, for the rungs that add dQ by the copy engine, in boxes of 32 floats ×
// dq_rows rows, the same swizzle.
struct TensorMaps {
  CUtensorMap Q, K, V, dO;
};
inline TensorMaps tensor_maps(const Shape& s, course::Dtype t, int d, const BackwardArgs& a, int Br) {
  const bool bf16 = t == course::Dtype::bf16;
  return {fa3::make_tensor_map(a.Q, bf16, s.heads(), s.N, d, Br), fa3::make_tensor_map(a.K, bf16, s.heads(), s.N, d, kBc),
          fa3::make_tensor_map(a.V, bf16, s.heads(), s.N, d, kBc), fa3::make_tensor_map(a.dO, bf16, s.heads(), s.N, d, Br)};
}
inline CUtensorMap dq_tensor_map(const Shape& s, int d, const BackwardArgs& a, int dq_rows) {
  return fa3::make_tensor_map({a.dQacc, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, d, s.N, s.heads(), 32, dq_rows,
                               CU_TENSOR_MAP_SWIZZLE_128B});
}

// One block a key block of each head (blockIdx.x, blockIdx.y), `threads` a block, `smem_bytes` of
// dynamic shared memory; the kernel takes `first` (its tensor maps, or dO), then the problem's
// parameters, L, D, dQacc, dK and dV.
template <class Kernel, class... First>
void launch_per_key_block(Kernel kernel, size_t smem_bytes, int threads, const Shape& s, int d, const BackwardArgs& a,
                          const First&... first) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  const dim3 grid((s.N + kBc - 1) / kBc, s.heads());
  kernel<<<grid, threads, smem_bytes>>>(first..., bwd::with_keys(tc::params(a.Q, a.K, a.V, nullptr, nullptr, s.N, s.causal, d), a),
                                        a.L, a.D, a.dQacc, static_cast<uint16_t*>(a.dK), static_cast<uint16_t*>(a.dV));
  CUDA_CHECK_LAUNCH();
}

}  // namespace attention::fa3_bwd
