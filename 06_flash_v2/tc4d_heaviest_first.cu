// Rung 4d: causal, the heaviest query blocks first. The fourth of the five steps from rung 3 to
// rung 4 (tuned).
//
// What changed from rung 4c (tc4c_skip_mask.cu): which query block a thread block takes. Causal,
// query block i visits i + 1 key blocks, so the blocks of a head range from one key block's work
// to N/64 blocks'. The GPU starts thread blocks roughly in the order of blockIdx, so with
// i = blockIdx.x the longest blocks of each head start last and can run on alone while other SMs
// are idle. Here block x takes query block Tr − 1 − x: the longest start first, and the short ones
// fill the gaps at the end. Not causal, every block does the same work and nothing changes.
//
// IO: rung 4c's. What should move: causal only, the time, by the idle tail at the end of the
// grid: a few percent, most where a head has many query blocks of very different lengths and the
// grid is a few waves (N = 16384, few heads); nothing when not causal.
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_heaviest_first(Params p) {
  constexpr int Br = 64, Bc = 64, NT = Bc / 8, DT = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Qs = smem;
  auto Ks = [&](int j) { return smem + Br * D + (j % 2) * 2 * Bc * D; };  // K and V of buffer j % 2
  auto Vs = [&](int j) { return Ks(j) + Bc * D; };
  const int warp = threadIdx.x / 32;
  const int i = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest first when causal
  const int row0 = i * Br;
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

void launch_tc_heaviest_first(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L) {
  tc::launch_cp_async_rung("heaviest_first", s, t, [](auto c) { return tc::flash_v2_heaviest_first<typename decltype(c)::T, decltype(c)::D>; },
                           Q, K, V, O, L);
}

}  // namespace attention
