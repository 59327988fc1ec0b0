// An experiment, not a rung: a tile's end no longer drains the tensor cores. The next tile's first
// S = Q·Kᵀ is issued together with this tile's last P̃·V, and runs under this tile's epilogue. Run
// only when named (--variants tile_overlap); chapter 08's table of tries says why it is not a rung.
//
// What changed from rung 7 at two consumer warpgroups (rung 7 at d = 128; fa3_7_three_warpgroups.cu):
//  - Rung 7's consumers, at a tile's end, wait for the last P̃·V, write O out, then start the next
//    tile with an S that nothing overlaps and its softmax, both warpgroups at about the same time.
//  - Here the last P̃·V of tile n and the first S of tile n + 1 are one turn at the tensor cores
//    (P̃·V first, so that wgmma_wait<1> returns when O is complete); tile n's epilogue runs under
//    tile n + 1's first S. So tile n + 1's Q must have landed before tile n's last P̃·V: Q has two
//    slots (kQSlots = 2), and the producer loads the next Q once this tile's K and V are issued.
//    Shared memory at d = 128: 2 Q tiles, 2 K/V slots and O's staging, 225 KB of 227.
//  - kWaitVFirst (tile_overlap_wait_v_first): a consumer waits for V_{j−1} before it takes its turn,
//    not between its two products: with two slots V_{j−1} is often still landing when the turn
//    comes, and S_j, which needs only K_j, could have been running meanwhile (chapter 08: 4-9 %).
//
// IO: rung 7's at two warpgroups. Predicted: +10-15 % at N = 1024 (a tile's drain, about a block
// and a half of work), a few % at 4096, none at 16384.
#include "check.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D, int kStages, bool kWaitVFirst>
__global__ void __launch_bounds__(384, 1)
    flash_v3_tile_overlap(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                          const __grid_constant__ CUtensorMap mapV, Params p, int heads, int* next_tile) {
  constexpr int NT = kBc / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  const Pipeline<D, kStages, true, 2> pipe{{}, align1024(smem_raw)};
  // The warp's number and the tile numbers, broadcast from lane 0 (__shfl_sync), so that ptxas knows
  // they are the same in every lane of the warp and keeps the K descriptors in uniform registers.
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  auto tile_number = [&](int n) { return __shfl_sync(0xffffffffu, pipe.tile_number(n), 0); };
  // Tiles as in rung 6: t = h·Tr + x, query block i = x (causal: Tr − 1 − x), from a global counter.
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  auto tile = [&](int t, int& i, int& h) {
    h = t / Tr;
    i = p.causal ? Tr - 1 - t % Tr : t % Tr;
  };
  if (threadIdx.x == 0) pipe.init(8);
  __syncthreads();

  if (wg == 0) {  // ---- the producer: rung 6's, with Q in slot n % 2 ----
    hopper::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      int it = 0;
      for (int n = 0, t = blockIdx.x;; ++n, t = atomicAdd(next_tile, 1) + gridDim.x) {
        pipe.wait_q_empty(n);  // tile n − 2's Q is no longer read
        *pipe.tile_slot(n) = t < tiles ? t : -1;  // published by the arrive on q_full (release)
        if (t >= tiles) {
          hopper::mbarrier_arrive(pipe.q_full(n));
          tiles_done(next_tile);
          break;
        }
        int i, h;
        tile(t, i, h);
        it = pipe.produce(&mapQ, &mapK, &mapV, i * kBr, h, key_blocks(p.N, kBr, kBc, p.causal, i), it, n);
      }
    }
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<240>();
    const int cwg = wg - 1, cwarp = warp - 4;
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (1 - cwg), 256); };
    if (cwg == 1) pass_turn();  // warpgroup 0 goes first

    float S[1][NT][4];
    uint32_t P[1][NT / 2][4];
    int it = 0;  // the load of the tile's first key block: the ring's phases
    // The first tile's first S, alone (block b's first tile is tile b: there is one).
    pipe.wait_q(0);
    int t = tile_number(0);
    pipe.wait_k(it);
    wait_turn();
    hopper::wgmma_fence();
    issue_qk<T, D>(S[0], pipe.Q(0), cwg, pipe.K(it));
    hopper::wgmma_commit();
    pass_turn();
    for (int n = 0; t >= 0; ++n) {  // tile n: its Q in slot n % 2, its first S issued
      int i, h;
      tile(t, i, h);
      const int row0 = i * kBr, warp_row0 = row0 + 16 * cwarp;
      const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);
      float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
      auto mask = [&](int b) {  // the b-th key block visited: j = blocks − 1 − b
        const int j = blocks - 1 - b;
        if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
      };

      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it);
      if (blocks == 1) pipe.release_q(n);
      mask(0);
      float alpha[2];
      softmax_scores_trees(S[0], m[0], l[0], p.scale, alpha);  // o is 0: no rescale
      tc::pack_a<T>(S[0], P[0]);
      for (int b = 1; b < blocks; ++b) {  // rung 6's step
        const int k = it + b;
        pipe.wait_k(k);
        if (kWaitVFirst) pipe.wait_v(k - 1);
        wait_turn();
        hopper::wgmma_fence();
        issue_qk<T, D>(S[0], pipe.Q(n), cwg, pipe.K(k));
        hopper::wgmma_commit();
        if (!kWaitVFirst) pipe.wait_v(k - 1);
        issue_pv<T, D>(o[0], P[0], pipe.V(k - 1));
        hopper::wgmma_commit();
        pass_turn();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(S[0]);
        pipe.release_k(k);
        if (b == blocks - 1) pipe.release_q(n);  // the tile's last S: tile n + 2's Q may land
        mask(b);
        softmax_scores_trees(S[0], m[0], l[0], p.scale, alpha);
        hopper::wgmma_wait<0>();
        hopper::fence_registers(o[0]);
        pipe.release_v(k - 1);
        rescale_o(o[0], alpha);
        tc::pack_a<T>(S[0], P[0]);
      }
      // The tile's last P̃·V and, in the same turn, the next tile's first S (its Q in the other
      // slot). After the last tile there is no next S, but one is issued anyway, on this tile's Q
      // and last K (both still in place: the producer is done) and its result dropped: a wgmma
      // under a branch makes ptxas serialise every wgmma of the kernel (its warning C7520).
      const int k = it + blocks - 1;
      pipe.wait_q(n + 1);
      t = tile_number(n + 1);
      const bool more = t >= 0;
      pipe.wait_v(k);
      if (more) pipe.wait_k(k + 1);
      wait_turn();
      hopper::wgmma_fence();
      issue_pv<T, D>(o[0], P[0], pipe.V(k));
      hopper::wgmma_commit();
      issue_qk<T, D>(S[0], pipe.Q(more ? n + 1 : n), cwg, pipe.K(more ? k + 1 : k));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<1>();  // P̃·V done; the next S still running
      hopper::fence_registers(o[0]);
      pipe.release_v(k);
      // Tile n's epilogue, under tile n + 1's first S.
      tc::write_output<T, D, 1>(o, m, l, pipe.O() + 16 * cwarp * D, p, size_t(h) * p.N * D, warp_row0);
      it = k + 1;
    }
    hopper::wgmma_wait<0>();  // the S after the last tile: no wgmma left running when the kernel ends
    if (cwg == 0) wait_turn();  // warpgroup 1's last pass: every arrival on a named barrier is matched
  }
}

}  // namespace fa3

template <bool kWaitVFirst>
void launch_tile_overlap(const char* name, const Shape& s, course::Dtype t, const void* Q, const void* K,
                         const void* V, void* O, float* L, const PersistentOptions& options = {}) {
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper(name);
    constexpr int kStages = C::D == 64 ? 3 : 2;
    constexpr size_t bytes = fa3::Smem<C::D, kStages, true, 2>::kBytes;
    const fa3::TensorMaps m = fa3::tensor_maps(s, t, C::D, Q, K, V);
    const auto kernel = fa3::flash_v3_tile_overlap<typename C::T, C::D, kStages, kWaitVFirst>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    const unsigned grid = fa3::persistent_grid(s, name, fa3::kBr, options.grid_cap);
    int* next_tile = fa3::tile_counter();  // 0: the last launch reset it
    kernel<<<grid, 384, bytes>>>(m.Q, m.K, m.V, tc::params(Q, K, V, O, L, s.N, s.causal, C::D), s.heads(), next_tile);
    CUDA_CHECK_LAUNCH();
  });
}

void launch_fa3_tile_overlap(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                             float* L) {
  launch_tile_overlap<false>("tile_overlap", s, t, Q, K, V, O, L);
}
void launch_fa3_tile_overlap_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                  void* O, float* L, const PersistentOptions& options) {
  launch_tile_overlap<false>("tile_overlap", s, t, Q, K, V, O, L, options);
}
void launch_fa3_tile_overlap_wait_v_first(const Shape& s, course::Dtype t, const void* Q, const void* K,
                                          const void* V, void* O, float* L) {
  launch_tile_overlap<true>("tile_overlap_wait_v_first", s, t, Q, K, V, O, L);
}
}  // namespace attention
