// Rung 3: cp.async and double-buffered K/V.
//
// What changed from rung 2 (tc2_ldmatrix.cu): K_j and V_j are copied with cp.async, straight from
// L2 into shared memory, into one of two buffers; while the warps compute block j from one
// buffer, block j+1 is already on its way into the other. In rungs 1-2 every thread waited for
// its global loads (hundreds of cycles from L2) before it could store them and reach the barrier,
// once per key block; here that wait overlaps the previous block's mma's. Shared memory doubles
// for K and V (dynamic shared memory, CpAsyncSmem in tc_common.cuh: 80 KB at d = 128).
//
// IO: the same requests as rung 2. What should move: the warps' stall on global loads (Nsight
// Compute's smsp__pcsamp / warp-state "Stall Long Scoreboard" share falls, "Stall Barrier" too),
// and with it the time, most at small B·H·N where few blocks share an SM to hide each other's waits.
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_cp_async(Params p) {
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
    if (j + 1 < blocks) {
      fetch_kv(j + 1);             // into the other buffer, freed by the barrier at the end of j-1
      ptx::cp_async_wait<1>();     // block j has arrived (j+1 may still be in flight)
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();  // everyone's copies of block j are visible
    if (j == 0) load_q_ldmatrix<D, 1>(q, Qs, 16 * warp);

    float S[1][NT][4] = {};
    qk_ldmatrix<T, D, 1, NT>(S, q, Ks(j));
    mask_scores(S, row0 + 16 * warp, j * Bc, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    online_softmax<T, false>(S, o, m, l, p.scale, P);
    pv_ldmatrix<T, D, 1, NT>(o, P, Vs(j));
    __syncthreads();  // every warp is done with buffer j % 2: block j+2 may overwrite it
  }
  write_output<T, D, 1>(o, m, l, Qs + 16 * warp * D, p, head, row0 + 16 * warp);
}

}  // namespace tc

void launch_tc_cp_async(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L) {
  tc::launch_cp_async_rung("cp_async", s, t, [](auto c) { return tc::flash_v2_cp_async<typename decltype(c)::T, decltype(c)::D>; },
                           Q, K, V, O, L);
}

}  // namespace attention
