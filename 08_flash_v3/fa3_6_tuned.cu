// Rung 6: tuned. What it takes past the FA-3 paper's three ideas; the persistent grid, the slots and
// the ideas tried and left off are switchable, so that their effect is measured (the ablation
// variants of variants.cpp; chapter 08 has the table).
//
// What changed from rung 5 (fa3_5_overlap.cu):
//  - A persistent grid: one thread block per SM, each looping over tiles (query block i of head h),
//    taken in the order of rung 5's grid (a head's tiles together, for L2's sake; causal: a head's
//    heaviest first) from a counter in global memory, so that a block whose tiles were short
//    takes more (a fixed share of tiles a block left causal grids 3x out of balance: measured
//    440 TFLOP/s against rung 5's 661 at d = 128, N = 16384). The producer runs into the next tile
//    while the consumers finish this one: the next tile's Q and first K/V land during this tile's
//    last products and its epilogue, and no block has to start (or drain) on the SM. What it buys
//    is largest where tiles are short (N = 1024: 8 key blocks a tile).
//    To let the next Q land early, O is staged in shared memory of its own (not over Q), and the
//    consumers give Q back (q_empty) as soon as a tile's last S = Q·Kᵀ is done. The ablation
//    tuned_not_persistent is the same kernel on a grid of one block a tile.
//  - Row max and row sum as trees (softmax_scores_tuned, fa3_common.cuh): the softmax is on its
//    warpgroup's critical path: rung 5 has chains of 16 dependent fmax's and 32 dependent adds a
//    row, the trees about 10 of each.
//  - Three consumer warpgroups at d = 64 (kWG = 3: tiles of Br = 192 query rows, 4 warpgroups,
//    setmaxnreg 24 / 160), two at d = 128 (Br = 128, 24 / 240), as FA-3 chooses. At d = 64 a
//    warpgroup's softmax takes about as long as its two products (the exponential unit does 16
//    a clock per SM, the tensor cores 16 scores' worth of d = 64 products a clock): two
//    warpgroups cannot hide each other's softmax, three can. A third also cuts the bytes of K and
//    V that each query row costs by a third (L2 → SM). 160 registers hold S, P̃ and o at d = 64
//    (64 + 32 + 32), not at d = 128 (o is 64). The turn at the tensor cores goes round the
//    warpgroups (0, 1, 2, 0, ...). The ablation tuned_br128 is the same kernel with two.
//    Causal, a 192-row tile reaches 1.5 key blocks past its first row: each warpgroup skips the key
//    blocks past its own rows (an empty turn, the slots given back), or the tile would compute 1.5x
//    the useful scores at N = 1024 instead of 1.125x. And the tiles are laid from the last row back
//    (Tiles::from_end, stage 06's algorithm.hpp): when Br does not divide N, the short tile is a
//    head's first (rows that see one key block), not its last (rows that see all of them, where two
//    of three warpgroups would idle while the third works alone: N = 1024 = 5 · 192 + 64).
//  - O written out by the copy engine (write_output_tma, fa3_common.cuh): each warp stages its 16
//    rows as before, and one lane issues a TMA store of them instead of 32 lanes copying them out
//    with D / 8 loads from shared memory and D / 8 stores each. At a tile's end both (all three)
//    warpgroups are in their epilogue while the tensor cores wait, so the instructions saved there
//    count where tiles are short: predicted +0.5-1.5 % at N = 1024, nothing measurable at 16384;
//    measured +1-4 % at N = 1024 (most, +4 %, causal at d = 128, whose tiles average 4.5 key
//    blocks), within ±1 % elsewhere. The ablation tuned_no_tma_store keeps stage 06's epilogue.
//  - kStages = 3 at d = 64 (24 + 96 KB + 24 KB of staging), 2 at d = 128 (32 + 128 KB + 32 KB).
// Tried and measured, off here (chapter 08): the lazy rescale (kLazyLog2 = 8), a quarter or half
// of the exponentials on the FMA pipe (kPolyEvery = 4, 2), and key blocks of 160 at d = 128 when
// not causal (kBc160; FlashAttention-3 takes 176, which leaves no room for O's own staging here):
// predicted +2-4 % at N = 4096 and 16384 (a fifth fewer turns, row reductions and rescales a
// key), measured 0.99-1.01x, and 0.92x at N = 1024 (7 blocks of 160: 1120 keys computed for 1024).
//
// IO: rung 5's (the same tiles, the same loads). What should move: the time at N = 1024 (the
// prologue and epilogue of a tile hidden), a little everywhere else.
#include <type_traits>

#include "check.hpp"
#include "fa3_common.cuh"
#include "gpu.hpp"
#include "kernels.cuh"

namespace attention {
namespace fa3 {

// kLpt (the experiment tuned_lpt): causal tiles in FlashAttention-3's LPT order (lpt_tile), the heads
// in groups of `group`, where rung 6 takes them a head at a time. What it should buy: the grid's last
// tiles the lightest, not some head's heaviest (a simulation of N = 4096, 64 heads: 6 % over the ideal
// finish a head at a time, 1-2 % in groups); it bought 4 % at causal N = 4096 (chapter 08). An
// experiment, kept as the yardstick of kernels that take this order.
template <class T, int D, int kWG, int kStages, int kPolyEvery, int kLazyLog2, bool kTmaStore, int Bc,
          bool kLpt = false>
__global__ void __launch_bounds__(128 * (kWG + 1), 1)
    flash_v3_tuned(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                   const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapO, Params p,
                   int heads, int* next_tile, int group) {
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
      softmax_scores_tuned<kPolyEvery, kLazyLog2>(S[0], m[0], l[0], p.scale, alpha);  // o is 0: no rescale
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
        const bool moved = softmax_scores_tuned<kPolyEvery, kLazyLog2>(S[0], m[0], l[0], p.scale, alpha);
        hopper::wgmma_wait<0>();
        hopper::fence_registers(o[0]);
        pipe.release_v(k - 1);
        if (moved) rescale_o(o[0], alpha);
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

      if constexpr (kTmaStore) write_output_tma<T, D>(o, m, l, pipe.O() + 16 * cwarp * D, &mapO, p, h, warp_row0,
                                                            {1.0f, p.scale, 0.0f});
      else tc::write_output<T, D, 1>(o, m, l, pipe.O() + 16 * cwarp * D, p, size_t(h) * p.N * D, warp_row0);  // rows < N
    }
    if constexpr (kTmaStore)  // the last tile's stores, done before the block (and its shared memory) ends
      if (threadIdx.x % 32 == 0) hopper::bulk_wait<0>();
    if (cwg == 0) wait_turn();  // the last warpgroup's last pass: every arrival on a named barrier is matched
  }
}

}  // namespace fa3

namespace {

// The persistent rungs' tile counter: two ints of device memory for the process (not part of any
// problem's memory), 0 from here on: each launch leaves them at 0 (tiles_done, fa3_common.cuh).
int* tile_counter_once() {
  int* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, 2 * sizeof(int)));
  CUDA_CHECK(cudaMemset(p, 0, 2 * sizeof(int)));
  return p;
}

}  // namespace

namespace fa3 {
int* tile_counter() {  // one a GPU: stage 10 drives several from one process
  static int* counters[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  course::require(device < 64, "tile_counter: more than 64 GPUs");
  if (!counters[device]) counters[device] = tile_counter_once();
  return counters[device];
}
}  // namespace fa3

namespace {

// The tuned rung at compile-time settings; kStagesOr0 = 0: 3 at d = 64, 2 at d = 128; kWG64: the
// consumer warpgroups at d = 64 (two at d = 128); kTmaStore: O written out by TMA stores;
// kBc160: key blocks of 160 at d = 128 when not causal (else 128); kLpt: causal tiles in the LPT
// order. Nk: keys at or past it are hidden (s.N but for stage 10's chunks, whose last rows may be
// padding).
template <int kStagesOr0, int kPolyEvery64, int kLazyLog2, bool kPersistent, int kWG64 = 3, bool kTmaStore = true,
          bool kBc160 = false, bool kLpt = false>
void launch_tuned(const char* name, const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                  void* O, float* L, int Nk = -1, const PersistentOptions& options = {}) {
  if (Nk < 0) Nk = s.N;
  course::require(Nk >= 1 && Nk <= s.N, std::string(name) + ": the visible keys Nk must be 1..N");
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper(name);
    constexpr int kStages = kStagesOr0 > 0 ? kStagesOr0 : (C::D == 64 ? 3 : 2);
    constexpr int kPoly = C::D == 64 ? kPolyEvery64 : 0;
    constexpr int kWG = C::D == 64 ? kWG64 : 2, Br = 64 * kWG;
    auto run = [&](auto key_block) {
      constexpr int Bc = decltype(key_block)::value;
      constexpr size_t bytes = fa3::Smem<C::D, kStages, true, 1, Br, Bc>::kBytes;
      static_assert(bytes <= 227 * 1024, "rung 6's shared memory: at most 227 KB a block");
      const fa3::TensorMaps m = fa3::tensor_maps(s, t, C::D, Q, K, V, Br, Bc);
      // O's map (boxes of one warp's 16 rows), for the TMA store; the other epilogue does not read it.
      const CUtensorMap mapO =
          kTmaStore ? fa3::make_tensor_map(O, t == course::Dtype::bf16, s.heads(), s.N, C::D, 16) : m.Q;
      const auto kernel = fa3::flash_v3_tuned<typename C::T, C::D, kWG, kStages, kPoly, kLazyLog2, kTmaStore, Bc, kLpt>;
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
      const unsigned persistent = fa3::persistent_grid(s, name, Br, options.grid_cap);  // checks the number of tiles too
      const unsigned grid = kPersistent ? persistent : unsigned((s.N + Br - 1) / Br) * unsigned(s.heads());
      int* next_tile = fa3::tile_counter();  // 0: the last launch reset it
      tc::Params p = tc::params(Q, K, V, O, L, s.N, s.causal, C::D);
      p.Nk = Nk;
      const int group = kLpt ? fa3::lpt_head_group(s, 2, options.head_group) : 1;
      kernel<<<grid, 128 * (kWG + 1), bytes>>>(m.Q, m.K, m.V, mapO, p, s.heads(), next_tile, group);
      CUDA_CHECK_LAUNCH();
    };
    if constexpr (C::D == 128 && kBc160) {
      if (!s.causal) return run(std::integral_constant<int, 160>{});
    }
    run(std::integral_constant<int, fa3::kBc>{});
  });
}

}  // namespace

void launch_fa3_tuned(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                      float* L) {
  launch_tuned<0, 0, 0, true>("tuned", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_keys(const Shape& s, int Nk, course::Dtype t, const void* Q, const void* K, const void* V,
                           void* O, float* L) {
  launch_tuned<0, 0, 0, true>("tuned", s, t, Q, K, V, O, L, Nk);
}

// Ablations of rung 6, each with one setting changed (chapter 08's table).
void launch_fa3_tuned_not_persistent(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                     void* O, float* L) {
  launch_tuned<0, 0, 0, false>("tuned_not_persistent", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_lazy(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                           float* L) {
  launch_tuned<0, 0, 8, true>("tuned_lazy", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_poly(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                           float* L) {
  launch_tuned<0, 4, 0, true>("tuned_poly", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_2_stages(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                               void* O, float* L) {
  launch_tuned<2, 0, 0, true>("tuned_2_stages", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_br128(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                            float* L) {
  launch_tuned<0, 0, 0, true, 2>("tuned_br128", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_no_tma_store(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                   void* O, float* L) {
  launch_tuned<0, 0, 0, true, 3, false>("tuned_no_tma_store", s, t, Q, K, V, O, L);
}
void launch_fa3_tuned_bc160(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                            float* L) {
  launch_tuned<0, 0, 0, true, 3, true, true>("tuned_bc160", s, t, Q, K, V, O, L);
}

// The experiment on rung 6: causal tiles in FlashAttention-3's LPT order (its group: PersistentOptions).
void launch_fa3_tuned_lpt(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V, void* O,
                          float* L) {
  launch_tuned<0, 0, 0, true, 3, true, false, true>("tuned_lpt", s, t, Q, K, V, O, L);
}

void launch_fa3_tile_overlap_with(const Shape& s, course::Dtype t, const void* Q, const void* K, const void* V,
                                  void* O, float* L, const PersistentOptions& options);

void launch_fa3_persistent(const std::string& rung, const Shape& s, course::Dtype t, const void* Q, const void* K,
                           const void* V, void* O, float* L, const PersistentOptions& o) {
  if (rung == "tuned") return launch_tuned<0, 0, 0, true>("tuned", s, t, Q, K, V, O, L, -1, o);
  if (rung == "tuned_bc160") return launch_tuned<0, 0, 0, true, 3, true, true>("tuned_bc160", s, t, Q, K, V, O, L, -1, o);
  if (rung == "tuned_lpt")
    return launch_tuned<0, 0, 0, true, 3, true, false, true>("tuned_lpt", s, t, Q, K, V, O, L, -1, o);
  if (rung == "tile_overlap") return launch_fa3_tile_overlap_with(s, t, Q, K, V, O, L, o);
  throw course::UsageError("launch_fa3_persistent: '" + rung + "' is not one of tuned, tuned_bc160, tuned_lpt, tile_overlap");
}

}  // namespace attention
