// Rung 2: ldmatrix from a swizzled layout.
//
// What changed from rung 1 (tc1_mma.cu): the tiles are stored swizzled (ptx::swizzle: chunk c of
// row r at chunk c ^ (r % 8)), and the fragments come from ldmatrix: one instruction per four 8 × 8
// tiles, 16 bytes a lane, instead of 32- and 16-bit loads. V's B fragments come from ldmatrix
// .trans, instead of two 16-bit loads per register. Each ldmatrix tile's 8 rows now fall in 8
// different bank groups.
//
// IO: unchanged (the same tiles cross from L2). What should move: shared-memory wavefronts per
// mma. Rung 1 spends 8 conflicting 32-bit loads per K fragment pair and 8 16-bit loads per V
// fragment pair; here one conflict-free ldmatrix.x4 gives both. Bank conflicts should go to ~0
// (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld), and shared-memory instructions per mma
// fall about 8×.
#include "check.hpp"
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_ldmatrix(Params p) {
  constexpr int Br = 64, Bc = 64, NT = Bc / 8, DT = D / 8;
  __shared__ __align__(128) uint16_t Qs[Br * D], Ks[Bc * D], Vs[Bc * D];
  const int warp = threadIdx.x / 32, i = blockIdx.x, row0 = i * Br;
  const size_t head = size_t(blockIdx.y) * p.N * D;

  load_tile_sync<D, Br, 128, true>(Qs, p.Q + head + size_t(row0) * D, min(Br, p.N - row0));
  __syncthreads();
  uint32_t q[1][D / 16][4];
  load_q_ldmatrix<D, 1>(q, Qs, 16 * warp);

  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  const int blocks = key_blocks(p.N, Br, Bc, p.causal, i);
  for (int j = 0; j < blocks; ++j) {
    const int key0 = j * Bc;
    __syncthreads();  // every warp is done with K_{j-1} and V_{j-1}
    load_tile_sync<D, Bc, 128, true>(Ks, p.K + head + size_t(key0) * D, p.N - key0);
    load_tile_sync<D, Bc, 128, true>(Vs, p.V + head + size_t(key0) * D, p.N - key0);
    __syncthreads();  // K_j and V_j are in shared memory

    float S[1][NT][4] = {};
    qk_ldmatrix<T, D, 1, NT>(S, q, Ks);  // S = Q_i·K_jᵀ
    mask_scores(S, row0 + 16 * warp, key0, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    online_softmax<T, false>(S, o, m, l, p.scale, P);
    pv_ldmatrix<T, D, 1, NT>(o, P, Vs);  // O += P̃·V_j
  }
  write_output<T, D, 1>(o, m, l, Qs + 16 * warp * D, p, head, row0 + 16 * warp);
}

}  // namespace tc

void launch_tc_ldmatrix(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L) {
  tc::dispatch("ldmatrix", s, t, [&](auto config) {
    using C = decltype(config);
    const dim3 grid((s.N + 63) / 64, s.heads());
    tc::flash_v2_ldmatrix<typename C::T, C::D><<<grid, 128>>>(tc::params(Q, K, V, O, L, s.N, s.causal, C::D));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention
