// Rung 4a: exp2 with the scale folded in. The first of the five steps from rung 3 to rung 4
// (tuned), each one idea: 4a exp2, 4b one barrier, 4c masks only where needed, 4d heaviest causal
// blocks first, 4e 32 rows a warp (tc4_tuned.cu).
//
// What changed from rung 3 (tc3_cp_async.cu): online_softmax<T, true> instead of <T, false>.
// P̃ = exp(scale·(S − m)) was a subtraction, a multiplication by scale and __expf, which is a
// multiplication by log₂e and a non-ftz ex2.approx (ptxas wraps its MUFU.EX2 in a compare and two
// predicated multiplications, so that results below 2^-126 keep their precision). Now
// P̃ = 2^(S·c − m·c) with c = scale·log₂e computed once: one FFMA and one MUFU.EX2 (ex2.approx.ftz)
// per score. A P̃ below 2^-126 flushed to 0 is negligible beside the row's largest, 1.
//
// IO: rung 3's. What should move: instructions, by up to five a score (the subtraction, two
// multiplications and the range handling become one FFMA), 32 scores a lane and key
// block (rung 3 issues about 700 instructions a warp and key block at d = 64: 1.48 G for 2.1 M
// such steps at B = 4, H = 32, N = 4096); fma-pipe instructions most. Rung 3 is bound by issue
// (67 % of issue slots busy), so the time should fall with them, by up to a fifth at d = 64 and
// less at d = 128, where the mma's and fragment loads per score double.
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_exp2(Params p) {
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
    online_softmax<T, true>(S, o, m, l, p.scale, P);
    pv_ldmatrix<T, D, 1, NT>(o, P, Vs(j));
    __syncthreads();  // every warp is done with buffer j % 2: block j+2 may overwrite it
  }
  write_output<T, D, 1>(o, m, l, Qs + 16 * warp * D, p, head, row0 + 16 * warp);
}

}  // namespace tc

void launch_tc_exp2(const Shape& s, course::Dtype t, const void* Q, const void* K,
                        const void* V, void* O, float* L) {
  tc::launch_cp_async_rung("exp2", s, t, [](auto c) { return tc::flash_v2_exp2<typename decltype(c)::T, decltype(c)::D>; },
                           Q, K, V, O, L);
}

}  // namespace attention
