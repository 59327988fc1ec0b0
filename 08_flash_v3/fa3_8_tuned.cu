// Rung 8: O written out by the copy engine, the last rung (`tuned`).
//
// What changed from rung 7 (fa3_7_three_warpgroups.cu): each warp still stages its 16 rows of O in
// shared memory, but in the layout of O's tensor map (boxes of 16 rows × 64 columns, the 128-byte
// swizzle), and one lane hands them to the copy engine: a TMA store a 64-column block
// (write_output_tma, fa3_common.cuh) instead of 32 lanes copying them out with D / 8 loads from shared
// memory and D / 8 stores each, every store waiting for its load. A store has no mbarrier: the lane
// closes its stores into a bulk group, waits for the group to have read the staging before the warp
// writes it again (the next tile), and for it to have written before the block ends. A box that
// starts before row 0 faults where a load would fill zeros, so a warp whose rows start there (a
// head's first causal tile, laid from the end) copies its rows out itself.
// At a tile's end every consumer warpgroup is in its epilogue while the tensor cores wait, so the
// instructions saved count where tiles are short. Predicted: +0.5-1.5 % at N = 1024, nothing
// measurable at 16384 (chapter 08 has what it bought).
//
// kLpt (the ablation tuned_lpt): causal tiles in FlashAttention-3's LPT order (lpt_tile), the heads in
// groups of `group`, where the rung takes them a head at a time; the yardstick of stage 09's kernels,
// which take that order.
//
// IO: rung 7's (the same tiles and loads; O's bytes are the same, written by the copy engine).
#include "check.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

// Three consumer warpgroups at d = 64 (Br = 192, 3 slots), two at d = 128 (Br = 128, 2 slots), as rung 7.
template <class T, int D, bool kLpt>
__global__ void __launch_bounds__(128 * (tuned_warpgroups<D>() + 1), 1)
    flash_v3_tuned(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                   const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapO, Params p,
                   int heads, int* next_tile, int group) {
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
    if (kLpt && p.causal) return lpt_tile(t, Tr, heads, group, i, h);
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

      write_output_tma<T, D>(o, m, l, pipe.O() + 16 * cwarp * D, &mapO, p, h, warp_row0, {1.0f, p.scale, 0.0f});
    }
    if (threadIdx.x % 32 == 0) hopper::bulk_wait<0>();  // the last tile's stores, before the shared memory goes
    if (cwg == 0) wait_turn();  // the last warpgroup's last pass: every arrival on a named barrier is matched
  }
}

}  // namespace fa3

namespace {

// Nk: keys at or past it are hidden (s.N but for stage 10's chunks, whose last rows may be padding).
template <bool kLpt>
void launch_tuned(const char* name, const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                  void* O, float* L, int Nk = -1, const PersistentOptions& options = {}) {
  if (Nk < 0) Nk = s.N;
  course::require(Nk >= 1 && Nk <= s.N, std::string(name) + ": the visible keys Nk must be 1..N");
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper(name);
    constexpr int kWG = fa3::tuned_warpgroups<C::D>(), Br = 64 * kWG;
    constexpr size_t bytes = fa3::Smem<C::D, fa3::tuned_stages<C::D>(), true, 1, Br>::kBytes;
    static_assert(bytes <= 227 * 1024, "rung 8's shared memory: at most 227 KB a block");
    const fa3::TensorMaps m = fa3::tensor_maps(s, t, C::D, Q, K, V, Br);
    // O's map (boxes of one warp's 16 rows), for the TMA stores.
    const CUtensorMap mapO = fa3::make_tensor_map(O, t == course::Dtype::bf16, s.heads(), s.N, C::D, 16);
    tc::Params p = tc::params(Q, K, V, O, L, s.N, s.causal, C::D);
    p.Nk = Nk;
    const int group = kLpt ? fa3::lpt_head_group(s, 2, options.head_group) : 1;
    fa3::launch_persistent(fa3::flash_v3_tuned<typename C::T, C::D, kLpt>, bytes, 128 * (kWG + 1), s, name, Br,
                           options.grid_cap, m.Q, m.K, m.V, mapO, p, s.heads(), fa3::tile_counter(), group);
  });
}

}  // namespace

void launch_fa3_tuned(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                      float* L) {
  launch_tuned<false>("tuned", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_keys(const Shape& s, int Nk, course::Dtype t, const void* Q, const void* K, const void* V,
                           void* O, float* L) {
  launch_tuned<false>("tuned", s, t, Q, K, V, O, L, Nk);
}
void launch_fa3_tuned_lpt(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                          float* L) {
  launch_tuned<true>("tuned_lpt", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                           float* L, const PersistentOptions& o) {
  launch_tuned<false>("tuned", s, t, Q, K, V, O, L, -1, o);
}
void launch_fa3_tuned_lpt_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                               float* L, const PersistentOptions& o) {
  launch_tuned<true>("tuned_lpt", s, t, Q, K, V, O, L, -1, o);
}

}  // namespace attention
