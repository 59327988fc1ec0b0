// Rung 6: a persistent grid. One thread block an SM, each taking tile after tile (query block i of
// head h), so that a tile's start and end run under the previous tile's work.
//
// What changed from rung 5 (fa3_5_overlap.cu):
//  - The grid: one block an SM (persistent_grid), not one a tile. Block b starts with tile b and then
//    takes the next tile not yet taken from a counter in global memory (atomicAdd), so that a block
//    whose tiles were short takes more, as the hardware does with rung 5's grid. The tiles come in
//    rung 5's order: a head's together (for L2) and, causal, its heaviest first. A fixed share of
//    tiles a block (tiles b, b + 132, ...) would leave causal grids out of balance: their tiles
//    differ in length up to N / 128 times. The last block to run out resets the counter
//    (tiles_done), so a call is one kernel, no memset.
//  - The producer runs into the next tile while the consumers finish this one: the next tile's Q
//    and first K and V land during this tile's last products and epilogue. For that, O is staged in
//    shared memory of its own (not over Q), the consumers give Q back (q_empty) as soon as a tile's
//    last S = Q·Kᵀ is done, and the producer tells them the tile's number through a slot in shared
//    memory (tile_slot; −1: no more tiles). The K/V ring runs on across tiles: its load count `it`
//    is not reset.
//
// IO: rung 5's tiles and loads, and 32 bytes of the counter a tile. What should move: the time
// where tiles are short (N = 1024: 8 key blocks a tile), little at N = 16384.
#include "check.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D>
__global__ void __launch_bounds__(384, 1)
    flash_v3_persistent(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                        const __grid_constant__ CUtensorMap mapV, Params p, int heads, int* next_tile) {
  constexpr int NT = kBc / 8, DT = D / 8, kStages = 2;
  extern __shared__ uint8_t smem_raw[];
  const Pipeline<D, kStages, true> pipe{{}, align1024(smem_raw)};
  // The warp's number and (below) the tile's, broadcast from lane 0: ptxas then knows them equal in
  // every lane and keeps what is computed from them (rows, block counts, descriptors) in the warp's
  // uniform registers, which wgmma takes its descriptors from.
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  auto tile = [&](int t, int& i, int& h) {  // t = h·Tr + x: query block x (causal: Tr − 1 − x) of head h
    h = t / Tr;
    i = p.causal ? Tr - 1 - t % Tr : t % Tr;
  };
  if (threadIdx.x == 0) pipe.init(8);
  __syncthreads();

  if (wg == 0) {  // ---- the producer: rung 5's, tile after tile ----
    hopper::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      int it = 0;
      for (int n = 0, t = blockIdx.x;; ++n, t = atomicAdd(next_tile, 1) + gridDim.x) {
        pipe.wait_q_empty(n);  // the consumers are done with the previous tile's Q
        *pipe.tile_slot(n) = t < tiles ? t : -1;  // published by the arrive on q_full (release)
        if (t >= tiles) {
          hopper::mbarrier_arrive(pipe.q_full());
          tiles_done(next_tile);
          break;
        }
        int i, h;
        tile(t, i, h);
        it = pipe.produce(&mapQ, &mapK, &mapV, i * kBr, h, key_blocks(p.N, kBr, kBc, p.causal, i), it);
      }
    }
  } else {  // ---- the consumers: rung 5's loop, tile after tile ----
    hopper::setmaxnreg_inc<240>();
    const int cwg = wg - 1, cwarp = warp - 4;
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (1 - cwg), 256); };
    if (cwg == 1) pass_turn();  // warpgroup 0 goes first

    int it = 0;  // loads consumed: the ring's phases
    for (int n = 0;; ++n) {
      pipe.wait_q(n);
      const int t = __shfl_sync(0xffffffffu, pipe.tile_number(n), 0);
      if (t < 0) break;
      int i, h;
      tile(t, i, h);
      const int row0 = i * kBr, warp_row0 = row0 + 16 * cwarp;
      const int blocks = key_blocks(p.N, kBr, kBc, p.causal, i);
      float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
      float S[1][NT][4];
      uint32_t P[1][NT / 2][4];
      auto mask = [&](int b) {  // the b-th key block visited: j = blocks − 1 − b
        const int j = blocks - 1 - b;
        if (needs_mask(j, row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
      };

      pipe.wait_k(it);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<T, D>(S[0], pipe.Q(), cwg, pipe.K(it));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it);
      if (blocks == 1) pipe.release_q();
      mask(0);
      float alpha[2];
      softmax_scores(S[0], m[0], l[0], p.scale, alpha);  // o is 0: no rescale
      tc::pack_a<T>(S[0], P[0]);
      for (int b = 1; b < blocks; ++b) {
        const int k = it + b;  // this block's load; k − 1 the previous one's
        pipe.wait_k(k);
        wait_turn();
        hopper::wgmma_fence();
        issue_qk<T, D>(S[0], pipe.Q(), cwg, pipe.K(k));
        hopper::wgmma_commit();
        pipe.wait_v(k - 1);
        issue_pv<T, D>(o[0], P[0], pipe.V(k - 1));
        hopper::wgmma_commit();
        pass_turn();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(S[0]);
        pipe.release_k(k);
        if (b == blocks - 1) pipe.release_q();  // the tile's last S: the next Q may land
        mask(b);
        softmax_scores(S[0], m[0], l[0], p.scale, alpha);
        hopper::wgmma_wait<0>();
        hopper::fence_registers(o[0]);
        pipe.release_v(k - 1);
        rescale_o(o[0], alpha);
        tc::pack_a<T>(S[0], P[0]);
      }
      const int k = it + blocks - 1;
      pipe.wait_v(k);
      wait_turn();
      hopper::wgmma_fence();
      issue_pv<T, D>(o[0], P[0], pipe.V(k));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o[0]);
      pipe.release_v(k);
      it += blocks;

      // O staged apart (the next tile's Q may be landing over this one's), stage 06's epilogue.
      tc::write_output<T, D, 1>(o, m, l, pipe.O() + 16 * cwarp * D, p, size_t(h) * p.N * D, warp_row0);
    }
    if (cwg == 0) wait_turn();  // warpgroup 1's last pass: every arrival on a named barrier is matched
  }
}

}  // namespace fa3

void launch_fa3_persistent_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                                float* L, const PersistentOptions& options) {
  const char* name = "persistent";
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper(name);
    constexpr size_t bytes = fa3::Smem<C::D, 2, true>::kBytes;
    const fa3::TensorMaps m = fa3::tensor_maps(s, t, C::D, Q, K, V);
    fa3::launch_persistent(fa3::flash_v3_persistent<typename C::T, C::D>, bytes, 384, s, name, fa3::kBr,
                           options.grid_cap, m.Q, m.K, m.V, tc::params(Q, K, V, O, L, s.N, s.causal, C::D), s.heads(),
                           fa3::tile_counter());
  });
}
void launch_fa3_persistent(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                           float* L) {
  launch_fa3_persistent_with(s, t, Q, K, V, O, L, {});
}

}  // namespace attention
