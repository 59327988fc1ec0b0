// Rung 1 of the tensor-core ladder: FlashAttention-2 with mma.sync, fed by plain loads.
//
// What changed from the fp32 kernel (kernels_fp32.cu): Q, K, V and O are 16-bit (fp16 or bf16),
// and the two products run on the tensor cores, mma.sync m16n8k16 with fp32 sums. The block's
// 4 warps split Q_i: warp w owns rows 16w .. 16w+15 (FA-2's "split Q", so no warp needs another's
// results: no shared-memory reduction, one barrier pair per key block). A warp keeps its Q
// fragments, S, P̃, O, m and l in registers for the whole loop; P̃ goes from S's accumulators
// into P̃·V's A operand without touching shared memory (tc_common.cuh, online_softmax).
// Shared memory holds Q_i, K_j and V_j as plain row-major tiles, filled through registers.
//
// IO: Q read once, K and V once per query block (Br = 64), O and L written once: model
// flash_v2_model_bytes with Tiles {64, 64}. What should limit it: shared memory. The fragment
// loads are 32-bit (K) and 16-bit (V) and hit the same banks from 8 rows at once (see qk_plain and
// pv_plain): Nsight Compute's shared-memory bank conflicts
// (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld) are the metric to watch.
#include "check.hpp"
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <class T, int D>
__global__ void __launch_bounds__(128) flash_v2_mma(Params p) {
  constexpr int Br = 64, Bc = 64, NT = Bc / 8, DT = D / 8;
  __shared__ __align__(16) uint16_t Qs[Br * D], Ks[Bc * D], Vs[Bc * D];
  const int warp = threadIdx.x / 32, i = blockIdx.x, row0 = i * Br;
  const size_t head = size_t(blockIdx.y) * p.N * D;

  load_tile_sync<D, Br, 128, false>(Qs, p.Q + head + size_t(row0) * D, min(Br, p.N - row0));
  __syncthreads();
  uint32_t q[D / 16][4];
  load_q_plain<D>(q, Qs, 16 * warp);

  float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  const int blocks = key_blocks(p.N, Br, Bc, p.causal, i);
  for (int j = 0; j < blocks; ++j) {
    const int key0 = j * Bc;
    __syncthreads();  // every warp is done with K_{j-1} and V_{j-1}
    load_tile_sync<D, Bc, 128, false>(Ks, p.K + head + size_t(key0) * D, p.N - key0);
    load_tile_sync<D, Bc, 128, false>(Vs, p.V + head + size_t(key0) * D, p.N - key0);
    __syncthreads();  // K_j and V_j are in shared memory

    float S[1][NT][4] = {};
    qk_plain<T, D, NT>(S[0], q, Ks);  // S = Q_i·K_jᵀ, 16 rows × 64 keys per warp
    mask_scores(S, row0 + 16 * warp, key0, p.N, p.causal);
    uint32_t P[1][NT / 2][4];
    online_softmax<T, false>(S, o, m, l, p.scale, P);
    pv_plain<T, D, NT>(o[0], P[0], Vs);  // O += P̃·V_j
  }
  // Qs as the staging area: warp w only ever read its own 16 rows of it.
  write_output<T, D, 1>(o, m, l, Qs + 16 * warp * D, p, head, row0 + 16 * warp);
}

}  // namespace tc

void launch_tc_mma(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                   void* O, float* L) {
  tc::dispatch("mma", s, t, [&](auto config) {
    using C = decltype(config);
    const dim3 grid((s.N + 63) / 64, s.heads());
    tc::flash_v2_mma<typename C::T, C::D><<<grid, 128>>>(tc::params(Q, K, V, O, L, s.N, s.causal, C::D));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention
