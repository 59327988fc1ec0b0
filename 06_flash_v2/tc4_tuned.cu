// Rung 4e, tuned: 32 query rows a warp. The last of the five steps from rung 3 to rung 4, each one
// idea (4a exp2, 4b one barrier, 4c masks only where needed, 4d heaviest causal blocks first: the
// files tc4a_exp2.cu ... tc4d_heaviest_first.cu); with it the kernel does all that FlashAttention-2
// does, and reaches its speed.
//
// What changed from rung 4d (tc4d_heaviest_first.cu): each warp owns two m-tiles (MT = 2, 32 rows),
// so Br = 128. Every K and V fragment an ldmatrix brings is used by two mma's instead of one, so
// shared-memory traffic per FLOP halves (rung 3 spends about as many cycles moving fragments as the
// tensor cores spend on them), and each K_j, V_j crosses from L2 half as often (the model's K/V
// term halves). What it takes to fit the registers, twice the accumulators o and S: d = 64 keeps
// Q's fragments in registers (32 of them); d = 128 reloads them from shared memory at each k step
// (64 registers would not fit beside O's 128 and S's 64). Even so d = 128 is four registers short:
// ptxas spilled the lane's four row-sum shares l to local memory, which L1 writes through to L2
// (measured: L2 writes 1.7× the count at N = 1000). They live in shared memory instead, 16 bytes a
// thread, read and written once a key block.
//
// IO: Q once, K and V once per 128 query rows, O and L once: flash_v2_model_bytes with Tiles
// {128, 64}. What should move: tensor-pipe utilisation (sm__pipe_tensor_op_hmma_cycles_active)
// up, shared-memory wavefronts per mma down by half, issue slots per score down; of the five
// steps, the largest (chapter 06's ladder).
#include "check.hpp"
#include "gpu.hpp"
#include "kernels.cuh"
#include "tc_common.cuh"

namespace attention {
namespace tc {

template <int D>
struct Tuned {
  static constexpr int Br = 128, Bc = 64, MT = 2, NT = Bc / 8, DT = D / 8;
  static constexpr bool kQInRegisters = D == 64;
  static constexpr bool kLInShared = D == 128;
  static constexpr int kHalves = Br * D + 4 * Bc * D;  // Q, then K[2] and V[2], then (d = 128) l
  static constexpr size_t kBytes = 2 * size_t(kHalves) + (kLInShared ? 128 * 4 * sizeof(float) : 0);
};

// kLazyLog2 = 0: rung 4e as described above; 8: rung 5 (launch_tc_lazy_rescale, below).
template <class T, int D, int kLazyLog2>
__global__ void __launch_bounds__(128, 2) flash_v2_tuned(Params p) {
  using F = Tuned<D>;
  constexpr int Br = F::Br, Bc = F::Bc, MT = F::MT, NT = F::NT, DT = F::DT;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* Qs = smem;
  auto Ks = [&](int j) { return smem + Br * D + (j & 1) * 2 * Bc * D; };  // K and V of buffer j % 2
  auto Vs = [&](int j) { return Ks(j) + Bc * D; };
  const int warp = threadIdx.x / 32;
  const int i = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest first when causal
  const int row0 = i * Br, warp_row0 = row0 + 32 * warp;
  const size_t head = size_t(blockIdx.y) * p.N * D;
  auto fetch_kv = [&](int j) {
    const int key0 = j * Bc;
    load_tile_async<D, Bc, 128>(Ks(j), p.K + head + size_t(key0) * D, p.N - key0);
    load_tile_async<D, Bc, 128>(Vs(j), p.V + head + size_t(key0) * D, p.N - key0);
    ptx::cp_async_commit();
  };
  // Key block j needs the mask if it reaches past N or, causal, past the block's first row.
  auto needs_mask = [&](int j) { return COURSE_BLOCK_NEEDS_MASK(row0, (j + 1) * Bc, p.N, p.causal); };

  const int blocks = key_blocks(p.N, Br, Bc, p.causal, i);
  load_tile_async<D, Br, 128>(Qs, p.Q + head + size_t(row0) * D, min(Br, p.N - row0));
  fetch_kv(blocks - 1);

  uint32_t q[MT][F::kQInRegisters ? D / 16 : 1][4];
  float o[MT][DT][4] = {}, m[MT][2], l[MT][2] = {};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY;
  float* l_shared = reinterpret_cast<float*>(smem + F::kHalves) + 4 * threadIdx.x;  // this lane's own
  auto swap_l = [&](bool to_shared) {
    if constexpr (F::kLInShared)
#pragma unroll
      for (int e = 0; e < 4; ++e) to_shared ? l_shared[e] = l[e / 2][e % 2] : l[e / 2][e % 2] = l_shared[e];
  };
  swap_l(true);
  for (int j = blocks - 1; j >= 0; --j) {
    ptx::cp_async_wait<0>();
    __syncthreads();  // block j is visible to all, and every warp is done with block j+1's buffer
    if (j > 0) fetch_kv(j - 1);  // into that buffer, while we compute block j
    if constexpr (F::kQInRegisters) {
      if (j == blocks - 1) load_q_ldmatrix<D, MT>(q, Qs, 32 * warp);
    }

    float S[MT][NT][4] = {};
    if constexpr (F::kQInRegisters) {
      qk_ldmatrix<T, D, MT, NT>(S, q, Ks(j));
    } else {
      qk_smem_q<T, D, MT, NT>(S, Qs, 32 * warp, Ks(j));
    }
    if (needs_mask(j)) mask_scores(S, warp_row0, j * Bc, p.N, p.causal);
    uint32_t P[MT][NT / 2][4];
    swap_l(false);
    if constexpr (kLazyLog2 > 0) {
      online_softmax_lazy<T, kLazyLog2>(S, o, m, l, p.scale, P);
    } else {
      online_softmax<T, true>(S, o, m, l, p.scale, P);
    }
    swap_l(true);
    pv_ldmatrix<T, D, MT, NT>(o, P, Vs(j));
  }
  swap_l(false);
  // Qs as the staging area: each warp only ever read its own 32 rows of it.
  write_output<T, D, MT, true>(o, m, l, Qs + 32 * warp * D, p, head, warp_row0);
}

}  // namespace tc

namespace {
// O32: not null, O before its rounding too, in fp32 (stage 07's D from the unrounded O).
template <int kLazyLog2>
void launch_tuned(const char* name, const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                  void* O, float* L, float* O32 = nullptr) {
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    constexpr size_t bytes = tc::Tuned<C::D>::kBytes;
    const auto kernel = tc::flash_v2_tuned<typename C::T, C::D, kLazyLog2>;
    course::require_shared_memory(bytes, std::string(name) + " at d = " + std::to_string(C::D));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const dim3 grid((s.N + 127) / 128, s.heads());
    tc::Params p = tc::params(Q, K, V, O, L, s.N, s.causal, C::D);
    p.O32 = O32;
    kernel<<<grid, 128, bytes>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void launch_tc_tuned(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                     void* O, float* L) {
  launch_tuned<0>("tuned", s, t, Q, K, V, O, L);
}
void launch_tc_tuned_unrounded(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                               void* O, float* L, float* O32) {
  launch_tuned<0>("tuned", s, t, Q, K, V, O, L, O32);
}

// Rung 5: the same kernel with one idea from FlashAttention-4 (kLazyLog2 = 8), past what FA-2 does.
//
// What changed from rung 4: online_softmax_lazy instead of online_softmax (tc_common.cuh). Rung 4
// rescales o and l at every key block, D/8·4 multiplications a row pair (128 a thread at d = 128):
// as many FP32 instructions as the block's exponentials and sums together. Here a row keeps its
// max until a new one exceeds it by more than 2^8 in P̃'s scale, and the warp rescales only when
// one of its rows must (a vote): after the first few key blocks of a row, almost never. P̃ is then
// at most 2^8 instead of 1, which fp16, bf16 and the fp32 sums hold with the same relative error.
//
// IO: as rung 4's. What should move: fma-pipe instructions (sm__inst_executed_pipe_fma) down by
// up to 128 a warp and key block at d = 128 (a third of them at N = 4096), 64 at d = 64; time down
// where o is large (d = 128) and little at d = 64, where the exponentials weigh twice as much.
void launch_tc_lazy_rescale(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                            void* O, float* L) {
  launch_tuned<8>("lazy_rescale", s, t, Q, K, V, O, L);
}

}  // namespace attention
