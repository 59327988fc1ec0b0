// Rung 4b: one barrier per key block. The second of the five steps from rung 3 to rung 4 (tuned).
//
// What changed from rung 4a (tc4a_exp2.cu): the loop's order. Rung 4a waits for block j, passes a
// barrier, computes, and passes a second barrier at the end of the block so that no warp is still
// reading the buffer that block j+2 will be copied into. Here a block starts with the wait for its
// own copies and one barrier, and only then starts the copy of block j+1: that barrier says both
// that block j is visible to every warp and that every warp is done with block j−1, whose buffer
// block j+1 takes. The copy of block j+1 still runs under block j's mma's.
//
// IO: rung 4a's. What should move: one barrier fewer per key block (Nsight Compute's "Stall
// Barrier" share falls), since the 4 warps of a block no longer wait for the slowest one twice a
// block; little else. A small gain, largest where few blocks share an SM to hide each other's
// waits (d = 128, N = 1024).
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_one_barrier(Params p) {
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

  load_tile_async<D, Br, 128>(Qs, p.Q + head + size_t(row0) * D, min(Br, p.N - row0));
  fetch_kv(0);  // Q_i and block 0 in the first group

  uint32_t q[1][D / 16][4];
  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  const int blocks = key_blocks(p.N, Br, Bc, p.causal, i);
  for (int j = 0; j < blocks; ++j) {
    ptx::cp_async_wait<0>();
    __syncthreads();  // block j is visible to all, and every warp is done with block j−1's buffer
    if (j + 1 < blocks) fetch_kv(j + 1);  // into that buffer, while we compute block j
    if (j == 0) load_q_ldmatrix<D, 1>(q, Qs, 16 * warp);

    float S[1][NT][4] = {};
    qk_ldmatrix<T, D, 1, NT>(S, q, Ks(j));
    mask_scores(S, row0 + 16 * warp, j * Bc, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    online_softmax<T, true>(S, o, m, l, p.scale, P);
    pv_ldmatrix<T, D, 1, NT>(o, P, Vs(j));
  }
  write_output<T, D, 1>(o, m, l, Qs + 16 * warp * D, p, head, row0 + 16 * warp);
}

}  // namespace tc

void launch_tc_one_barrier(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L) {
  tc::launch_cp_async_rung("one_barrier", s, t, [](auto c) { return tc::flash_v2_one_barrier<typename decltype(c)::T, decltype(c)::D>; },
                           Q, K, V, O, L);
}

}  // namespace attention
