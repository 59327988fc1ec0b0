// Rung 4c: the mask only where it is needed. The third of the five steps from rung 3 to rung 4
// (tuned).
//
// What changed from rung 4b (tc4b_one_barrier.cu): mask_scores ran on every key block, a compare
// against N, a causal compare and a select for each of a lane's 32 scores. Only the blocks that
// reach past N or, causal, past the block's first row hold a masked pair (needs_mask,
// COURSE_BLOCK_NEEDS_MASK in algorithm.hpp): not causal, at most the last block (when Bc does not
// divide N); causal, the block on the diagonal (two from rung 4e on, where Br = 128). The key
// blocks are now walked from the last to the first, so those blocks come first and the rest of
// the loop skips the mask. The result is the same up to the order in which a row's blocks are
// summed.
//
// IO: rung 4b's (the same blocks, in another order). What should move: instructions, the mask's
// two or three a score on all key blocks but the diagonal or the last: at d = 64, roughly a tenth
// of rung 4b's. The time should follow where the kernel is still bound by issue, causal or not.
// One thing may stand in the way: ptxas gives this kernel 136 registers a thread at d = 64 (rung
// 4b: 127), and a block of 128 threads then takes 17 K of an SM's 64 K registers, so 3 blocks fit
// instead of 4 (12 warps instead of 16 to hide each other's waits). If the time does not fall at
// d = 64, look there first. (d = 128: 178 registers against 190, 2 blocks an SM either way.)
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_skip_mask(Params p) {
  constexpr int Br = 64, Bc = 64, NT = Bc / 8, DT = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Qs = smem;
  auto Ks = [&](int j) { return smem + Br * D + (j % 2) * 2 * Bc * D; };  // K and V of buffer j % 2
  auto Vs = [&](int j) { return Ks(j) + Bc * D; };
  const int warp = threadIdx.x / 32, i = blockIdx.x, row0 = i * Br;
  const size_t head = size_t(blockIdx.y) * p.N * D;
  auto fetch_kv = [&](int j) {  // K_j and V_j into buffer j % 2, one commit group
    const int key0 = j * Bc;
    load_tile_async<D, Bc, 128>(Ks(j), p.K + head + size_t(key0) * D, p.N - key0);
    load_tile_async<D, Bc, 128>(Vs(j), p.V + head + size_t(key0) * D, p.N - key0);
    ptx::cp_async_commit();
  };

  // Key block j needs the mask if it reaches past N or, causal, past the block's first row.
  auto needs_mask = [&](int j) { return COURSE_BLOCK_NEEDS_MASK(row0, (j + 1) * Bc, p.N, p.causal); };

  const int blocks = key_blocks(p.N, Br, Bc, p.causal, i);
  load_tile_async<D, Br, 128>(Qs, p.Q + head + size_t(row0) * D, min(Br, p.N - row0));
  fetch_kv(blocks - 1);  // Q_i and the last block in the first group

  uint32_t q[1][D / 16][4];
  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  for (int j = blocks - 1; j >= 0; --j) {
    ptx::cp_async_wait<0>();
    __syncthreads();  // block j is visible to all, and every warp is done with block j+1's buffer
    if (j > 0) fetch_kv(j - 1);  // into that buffer, while we compute block j
    if (j == blocks - 1) load_q_ldmatrix<D, 1>(q, Qs, 16 * warp);

    float S[1][NT][4] = {};
    qk_ldmatrix<T, D, 1, NT>(S, q, Ks(j));
    if (needs_mask(j)) mask_scores(S, row0 + 16 * warp, j * Bc, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    online_softmax<T, true>(S, o, m, l, p.scale, P);
    pv_ldmatrix<T, D, 1, NT>(o, P, Vs(j));
  }
  write_output<T, D, 1>(o, m, l, Qs + 16 * warp * D, p, head, row0 + 16 * warp);
}

}  // namespace tc

void launch_tc_skip_mask(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L) {
  tc::launch_cp_async_rung("skip_mask", s, t, [](auto c) { return tc::flash_v2_skip_mask<typename decltype(c)::T, decltype(c)::D>; },
                           Q, K, V, O, L);
}

}  // namespace attention
