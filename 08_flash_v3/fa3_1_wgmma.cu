// Rung 1: wgmma. The products on Hopper's asynchronous warpgroup tensor-core instructions; all
// else as close to stage 06 as it can stay.
//
// What changed from stage 06's tuned rung (tc4_tuned.cu):
//  - A warpgroup of 4 warps, not a warp, issues each product: wgmma m64nNk16 computes a 64 × N
//    tile, so S = Q·K_jᵀ for the warpgroup's 64 rows is D/16 instructions (stage 06: a warp's 32
//    rows took 2·(D/16)·(Bc/8) mma.sync's plus the ldmatrix's that fed them).
//  - The operands come straight from shared memory: Q and K through descriptors, nothing passes
//    through registers. Only P̃ (the A of P·V) is in registers, as before.
//  - The tiles sit in shared memory in the layout the tensor cores read (hopper::swizzle128:
//    column blocks of 64 values, 128-byte rows, the XOR swizzle), loaded still by cp.async.
//  - Br = 128 (two warpgroups, 256 threads), Bc = 128.
//  - "Asynchronous" made explicit: wgmma_fence, the wgmma's, wgmma_commit, then wgmma_wait<0>
//    before the accumulators are read. Here the warpgroup waits at once after each product, so
//    nothing overlaps yet: the tensor cores idle during the softmax, and the warps idle during the
//    products. The later rungs fill those gaps.
// The mask, the online softmax and the epilogue are stage 06's, unchanged (MT = 1).
//
// IO: Q once, K and V once per 128 query rows, O and L once: flash_v2_model_bytes with Tiles
// {128, 128}. What should move against stage 06: the instructions issued per FLOP (far fewer:
// no ldmatrix, one wgmma for 64 × N × 16), the tensor pipe's utilisation up; the time still
// bounded by the exposed softmax and the exposed loads.
#include "check.hpp"
#include "fa3_common.cuh"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D>
__global__ void __launch_bounds__(256, 1) flash_v3_wgmma(Params p) {
  using L = Smem<D, 2>;
  constexpr int NT = kBc / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const smem = align1024(smem_raw);
  uint16_t* const Qs = smem + L::kQ;
  auto Ks = [&](int buf) { return smem + L::kKV + buf * L::kSlot; };
  auto Vs = [&](int buf) { return Ks(buf) + kBc * D; };
  const int warp = threadIdx.x / 32, wg = warp / 4;
  const int i = query_block(p.causal), row0 = i * kBr, warp_row0 = row0 + 16 * warp;
  const size_t head = size_t(blockIdx.y) * p.N * D;
  auto fetch_kv = [&](int j, int buf) {
    const int key0 = j * kBc;
    load_tile_cp_async<D, kBc, 256>(Ks(buf), p.K + head + size_t(key0) * D, p.N - key0, threadIdx.x);
    load_tile_cp_async<D, kBc, 256>(Vs(buf), p.V + head + size_t(key0) * D, p.N - key0, threadIdx.x);
    ptx::cp_async_commit();
  };

  const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);
  load_tile_cp_async<D, kBr, 256>(Qs, p.Q + head + size_t(row0) * D, min(kBr, p.N - row0), threadIdx.x);
  fetch_kv(blocks - 1, 0);

  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  for (int it = 0; it < blocks; ++it) {
    const int j = blocks - 1 - it, buf = it & 1;
    ptx::cp_async_wait<0>();
    hopper::fence_proxy_async();  // cp.async wrote the tiles (generic proxy); wgmma reads them (async)
    __syncthreads();              // block j is visible to all, and all are done with the other buffer
    if (j > 0) fetch_kv(j - 1, buf ^ 1);

    float S[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D>(S[0], Qs, wg, Ks(buf));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();  // the warpgroup waits for its product: nothing else to do yet
    hopper::fence_registers(S[0]);

    if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    tc::online_softmax<T, true>(S, o, m, l, p.scale, P);

    hopper::wgmma_fence();  // o (rescaled) and P were written by ordinary instructions
    issue_pv<T, D>(o[0], P[0], Vs(buf));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(o[0]);
  }
  // Q's rows of this warpgroup as the staging area of O: every wgmma that read them has completed
  // in all four warps of the warpgroup (a barrier among its 128 threads says so).
  hopper::named_barrier_sync(1 + wg, 128);
  tc::write_output<T, D, 1>(o, m, l, staging<D>(Qs, wg, warp % 4), p, head, warp_row0);
}

}  // namespace fa3

void launch_fa3_wgmma(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                      float* L) {
  tc::dispatch("wgmma", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("wgmma");
    constexpr size_t bytes = fa3::Smem<C::D, 2>::kBytes;
    const auto kernel = fa3::flash_v3_wgmma<typename C::T, C::D>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const dim3 grid((s.N + fa3::kBr - 1) / fa3::kBr, s.heads());
    kernel<<<grid, 256, bytes>>>(tc::params(Q, K, V, O, L, s.N, s.causal, C::D));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention
