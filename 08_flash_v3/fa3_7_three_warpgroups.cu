// Rung 7: three consumer warpgroups at d = 64 (Br = 192), and the softmax's row reductions as trees.
//
// What changed from rung 6 (fa3_6_persistent.cu):
//  - At d = 64 a warpgroup's softmax takes about as long as its two products (the exponential unit
//    does 16 exp2 a clock per SM, the tensor cores a d = 64 score's share of Q·Kᵀ and P̃·V, 256 FLOPs,
//    at 4096 FLOPs a clock: also 16 scores a clock), so two warpgroups cannot hide each other's
//    softmax. A third gives the scheduler a third candidate and cuts the K and V bytes a query row
//    costs by a third. The turn at the tensor cores goes round (0, 1, 2, 0, ...). Registers: 65,536
//    over 512 threads leave 160 a consumer (setmaxnreg 24 / 160); S, P̃ and o take 64 + 32 + 32 at
//    d = 64. At d = 128 o alone is 64: two warpgroups, as FA-3 chooses. 3 K/V slots at d = 64.
//  - Causal, a 192-row tile reaches 1.5 key blocks past its first row: each warpgroup skips the key
//    blocks past its own rows (an empty turn, the slots given back), and the tiles are laid from the
//    last row back (Tiles::from_end), so that a short tile is a head's first, not its last.
//  - Row max and row sum in four independent chains joined by a tree (softmax_scores_trees,
//    fa3_common.cuh): about 10 dependent instructions a row for each, not rung 6's 16 fmax's and
//    32 adds in one chain.
//
// IO: K and V are read once a tile of Br rows: at d = 64 two thirds of rung 6's bytes from L2.
// Predicted: +10-20 % at d = 64; d = 128 within a few %.
#include "check.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

template <class T, int D>
__global__ void __launch_bounds__(128 * (tuned_warpgroups<D>() + 1), 1)
    flash_v3_three_warpgroups(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                              const __grid_constant__ CUtensorMap mapV, Params p, int heads, int* next_tile) {
  constexpr int kWG = tuned_warpgroups<D>(), kStages = tuned_stages<D>(), Bc = kBc;
  constexpr int NT = Bc / 8, DT = D / 8, Br = 64 * kWG;
  extern __shared__ uint8_t smem_raw[];
  const Pipeline<D, kStages, true, 1, Br, Bc> pipe{{}, align1024(smem_raw)};
  // The warp's number and (below) the tile's, broadcast from lane 0: ptxas then knows them equal in
  // every lane and keeps what is computed from them (rows, block counts, descriptors) in the warp's
  // uniform registers. Without that the consumers need more than the 160 registers they have at
  // kWG = 3 (ptxas spilled 60 bytes a thread).
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  // The tiles: t = h·Tr + x, query block i = x (causal: Tr − 1 − x): rung 5's grid order, a head's
  // tiles together (for L2) and, causal, a head's heaviest first. Block b starts with tile b and
  // then takes the next tile not yet taken (*next_tile counts them, from gridDim.x on): a block
  // whose tiles were short takes more of them, as the hardware does with rung 5's grid.
  const int Tr = (p.N + Br - 1) / Br, tiles = Tr * heads;
  auto tile = [&](int t, int& i, int& h) {
    h = t / Tr;
    i = p.causal ? Tr - 1 - t % Tr : t % Tr;
  };
  if (threadIdx.x == 0) pipe.init(4 * kWG);
  __syncthreads();

  if (wg == 0) {  // ---- the producer: rung 5's, tile after tile ----
    hopper::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      int it = 0;
      for (int n = 0, t = blockIdx.x;; ++n, t = atomicAdd(next_tile, 1) + gridDim.x) {
        pipe.wait_q_empty(n);
        *pipe.tile_slot(n) = t < tiles ? t : -1;  // published by the arrive on q_full (release)
        if (t >= tiles) {
          hopper::mbarrier_arrive(pipe.q_full());
          tiles_done(next_tile);
          break;
        }
        int i, h;
        tile(t, i, h);
        it = pipe.produce(&mapQ, &mapK, &mapV, query_row0(p.N, Br, p.causal, true, i), h,
                          key_blocks(p.N, Br, Bc, p.causal, i, true), it);
      }
    }
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<consumer_registers<kWG>()>();
    const int cwg = wg - 1, cwarp = warp - 4;
    // The turn goes round: warpgroup c waits on barrier kSched + c and passes to c + 1 (mod kWG).
    // (This rung has no other named barriers: its epilogue stages O warp by warp.)
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (cwg + 1) % kWG, 256); };
    if (cwg == kWG - 1) pass_turn();  // warpgroup 0 goes first

    int it = 0;  // loads consumed: the ring's phases
    for (int n = 0;; ++n) {
      pipe.wait_q(n);
      const int t = __shfl_sync(0xffffffffu, pipe.tile_number(n), 0);
      if (t < 0) break;
      int i, h;
      tile(t, i, h);
      // Causal, the tiles are laid from the last row back (Tiles::from_end): row0 < 0 for a head's
      // first tile when Br does not divide N, its rows before 0 padding (TMA fills them with zeros).
      const int row0 = query_row0(p.N, Br, p.causal, true, i), wg_row0 = row0 + 64 * cwg,
                warp_row0 = row0 + 16 * cwarp;
      const int blocks = key_blocks(p.N, Br, Bc, p.causal, i, true);
      // The key blocks this warpgroup's 64 rows need: causal, fewer than the tile's (whose last row
      // is up to 128 further on); rows all padding, one (computed and not written: a wgmma under a
      // branch would cost more, C7520). Visits before b0 are keys past every row of the warpgroup:
      // it gives their slots back unread and lets its turn pass, so that the turns stay in order.
      const bool padding = wg_row0 + 64 <= 0 || wg_row0 >= p.N;
      const int needed = padding ? 1 : p.causal ? min(blocks, (wg_row0 + 64 + Bc - 1) / Bc) : blocks;
      const int b0 = blocks - needed;
      float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
      float S[1][NT][4];
      uint32_t P[1][NT / 2][4];
      auto mask = [&](int b) {  // the b-th key block visited: j = blocks − 1 − b
        const int j = blocks - 1 - b;
        if (needs_mask<Bc>(j, wg_row0, p.Nk, p.causal)) tc::mask_scores(S, warp_row0, j * Bc, p.Nk, p.causal);
      };

      for (int b = 0; b < b0; ++b) {  // an empty turn; the slots back once their loads landed
        wait_turn();
        pass_turn();
        pipe.wait_k(it + b);
        pipe.release_k(it + b);
        pipe.wait_v(it + b);
        pipe.release_v(it + b);
      }
      pipe.wait_k(it + b0);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<T, D, Br>(S[0], pipe.Q(), cwg, pipe.K(it + b0));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it + b0);
      if (b0 == blocks - 1) pipe.release_q();
      mask(b0);
      float alpha[2];
      softmax_scores_trees(S[0], m[0], l[0], p.scale, alpha);  // o is 0: no rescale
      tc::pack_a<T>(S[0], P[0]);
      for (int b = b0 + 1; b < blocks; ++b) {
        const int k = it + b;  // this block's load; k − 1 the previous one's
        pipe.wait_k(k);
        wait_turn();
        hopper::wgmma_fence();
        issue_qk<T, D, Br>(S[0], pipe.Q(), cwg, pipe.K(k));
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
        softmax_scores_trees(S[0], m[0], l[0], p.scale, alpha);
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

      tc::write_output<T, D, 1>(o, m, l, pipe.O() + 16 * cwarp * D, p, size_t(h) * p.N * D, warp_row0);  // rows < N
    }
    if (cwg == 0) wait_turn();  // the last warpgroup's last pass: every arrival on a named barrier is matched
  }
}

}  // namespace fa3

void launch_fa3_three_warpgroups_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                      void* O, float* L, const PersistentOptions& options) {
  const char* name = "three_warpgroups";
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper(name);
    constexpr int kWG = fa3::tuned_warpgroups<C::D>(), Br = 64 * kWG;
    constexpr size_t bytes = fa3::Smem<C::D, fa3::tuned_stages<C::D>(), true, 1, Br>::kBytes;
    const fa3::TensorMaps m = fa3::tensor_maps(s, t, C::D, Q, K, V, Br);
    fa3::launch_persistent(fa3::flash_v3_three_warpgroups<typename C::T, C::D>, bytes, 128 * (kWG + 1), s, name, Br,
                           options.grid_cap, m.Q, m.K, m.V, tc::params(Q, K, V, O, L, s.N, s.causal, C::D), s.heads(),
                           fa3::tile_counter());
  });
}
void launch_fa3_three_warpgroups(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                                 float* L) {
  launch_fa3_three_warpgroups_with(s, t, Q, K, V, O, L, {});
}

}  // namespace attention
