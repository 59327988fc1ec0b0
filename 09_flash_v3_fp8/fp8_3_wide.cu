// Rung 3: key blocks of 256 (d = 128; FlashAttention-3's FP8 tiles are 128 × 224), and the
// optimistic max.
//
// What changed from rung 2 (fp8_2_row_sum.cu). Its loop spends about 500 instructions a warp on a key
// block of 128: some 250 the per-key floor (the exponent's FFMA, MUFU.EX2, the max's FMNMX, the e4m3
// pack), the rest paid once a block (the promote of o_j, the row max's shuffles, the barriers, the
// wgmma issue). Blocks of 256 pay that once for twice the keys (664 instructions a warp for 256).
//  - S for 256 keys is 128 registers a thread, so the fresh accumulator o_j no longer fits beside o:
//    O accumulates on the tensor cores with the lazy rescale (rescale_wide), which drifts unless V is
//    centred (the scheme's _centred form: prepare checks it).
//  - l from the 8 columns of ones, part of o's accumulator, taken out into fp32 after each P̃·V
//    (take_row_sums: a fresh accumulator for l alone). V's descale must be one for the tensor.
//  - K's two descales a block: each half's max and exponent with its own multiplier.
//  - Two stages of 256 keys, two P̃ tiles a warpgroup (P̃ stored while the previous P̃·V reads the
//    other); O staged in the warpgroup's first P̃ tile.
//  - The optimistic max (kOptimistic): after a tile's first block P̃ is made with m as it stands, and
//    the row max taken (and P̃ again) only where some P̃ overflowed e4m3 (optimistic_p).
// What it should buy: +8-15 % at N = 16384, +5-12 % at 4096, less causal. The blocks of 256 bought
// 4-11 % over rung 2, the optimistic max 1-4 % more (chapter 09; wide_exact_max leaves it out).
#include "fp8_launch.cuh"
#include "fp8_mma.cuh"
#include "fp8_softmax.cuh"

namespace attention::fp8 {

namespace {

template <class T, bool kOptimistic>
__global__ void __launch_bounds__(128 * 3, 1)
    flash_v3_fp8_wide(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                      const __grid_constant__ CUtensorMap mapVt, const __grid_constant__ CUtensorMap mapO, tc::Params p,
                      Scales sc, int heads, int* next_tile) {
  using Pipe = Pipeline<LayoutWide<false, false>>;
  constexpr int D = Pipe::D, kWG = 2, Bc = Pipe::Bc, NT = Bc / 8, DT = D / 8, kBr = Pipe::kBr, NV = D + 8;
  static_assert(kBr == 64 * kWG, "two consumer warpgroups");
  extern __shared__ uint8_t smem_raw[];
  const Pipe pipe{reinterpret_cast<uint8_t*>(fa3::align1024(smem_raw))};
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  const int N64 = (p.N + 63) / 64 * 64;  // as the kernel above
  if (threadIdx.x == 0) pipe.init(4 * kWG);
  pipe.fill_ones();
  __syncthreads();

  if (wg == 0) {  // ---- the producer: rung 2's ----
    hopper::setmaxnreg_dec<producer_registers<kWG>()>();
    if (threadIdx.x == 0) pipe.produce_tiles(&mapQ, &mapK, &mapVt, p, N64, Tr, tiles, next_tile, sc.v_mean);
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<fa3::consumer_registers<kWG, producer_registers<kWG>()>()>();
    const int cwg = wg - 1, cwarp = warp - 4;
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (cwg + 1) % kWG, 256); };
    if (cwg == kWG - 1) pass_turn();
    const float c0 = p.scale * ptx::kLog2e;
    auto at = [](const void* x) { return hopper::smem_u32(x); };
    // The warp's 16 rows of O's staging: in the warpgroup's first P̃ tile.
    uint16_t* const stage = reinterpret_cast<uint16_t*>(pipe.P(cwg, 0)) + 16 * (cwarp % 4) * D;

    int it = 0;
    for (int n = 0;; ++n) {
      pipe.wait_q(n);
      const int t = __shfl_sync(0xffffffffu, *pipe.tile_slot(n), 0);
      if (t < 0) break;
      int i, h;
      Pipe::tile(t, Tr, p.causal, i, h);
      // The previous tile's O, staged over the P̃ tiles: read by the copy engine before any warp of
      // the warpgroup stores P̃ (the turn barrier below orders the four warps' waits before that).
      if (threadIdx.x % 32 == 0) hopper::bulk_wait_read<0>();
      __syncwarp();
      const int row0 = query_row0(N64, kBr, p.causal, true, i), wg_row0 = row0 + 64 * cwg,
                warp_row0 = row0 + 16 * cwarp;
      const int blocks = key_blocks(N64, kBr, Bc, p.causal, i, true);
      const bool padding = wg_row0 + 64 <= 0 || wg_row0 >= p.N;
      const int needed = padding ? 1 : p.causal ? min(blocks, (wg_row0 + 64 + Bc - 1) / Bc) : blocks;
      const int b0 = blocks - needed;
      // K's descales: 128 keys each, two a block (the second past N for a short last block: the first's).
      const int hb = h * sc.blocks;
      auto k_scale = [&](int j, int x) { return sc.k[hb + min(2 * j + x, sc.blocks - 1)]; };
      const float cq = c0 * sc.q[size_t(h) * sc.blocks + min(max(wg_row0, 0), p.N - 1) / kScaleRows];
      // o: P̃·V's accumulator across the key blocks, its tile DT the row sums (row g's in [DT][0], g + 8's in [2]).
      // alpha: the factor the last softmax set, which o (and l) owe before the next P̃·V (after the
      // first block 0: o is still empty). One copy: the consumer's 240 registers are all but taken
      // (two more made ptxas serialise the wgmma's, its C7511).
      float o[1][NV / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
      float S[1][NT][4];
      uint32_t P[Bc / 32][4];
      auto mask = [&](int b) {
        const int j = blocks - 1 - b;
        if (fa3::needs_mask<Bc>(j, wg_row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * Bc, p.N, p.causal);
      };
      // The softmax of block b and its P̃ in the tile of k_'s parity (its last reader, P̃·V of k_ − 2, has
      // completed). kOptimistic, after the tile's first block: P̃ with m as it stands, and only if some
      // P̃ overflowed (any lane of the warp: the branch is the warp's) the row max and P̃ again.
      auto softmax_p = [&](int b, int k_) {
        const int j = blocks - 1 - b;
        softmax_p_wide<NT, kOptimistic>(S[0], P, m, alpha, score_unit(cq, k_scale(j, 0)), score_unit(cq, k_scale(j, 1)), b > b0,
                                                    [&] { return at(pipe.P(cwg, k_)); }, cwarp % 4);
      };
      auto rescale = [&] { rescale_wide(o[0], l, alpha); };
      auto take_row_sums = [&] { fp8::take_row_sums(o[0], l); };
#pragma unroll
      for (int d = 0; d < NV / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][d][e] = 0.0f;

      for (int b = 0; b < b0; ++b) {  // causal: the blocks past the warpgroup's rows, an empty turn
        wait_turn();
        pass_turn();
        pipe.skip_block(it + b);
      }
      pipe.wait_k(it + b0);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<D, Bc>(S[0], at(pipe.Q()), cwg, at(pipe.K(it + b0)));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it + b0);
      if (b0 == blocks - 1) pipe.release_q();
      mask(b0);
      softmax_p(b0, it + b0);
      for (int b = b0 + 1; b < blocks; ++b) {
        const int k = it + b;
        pipe.wait_k(k);
        wait_turn();
        hopper::wgmma_fence();
        issue_qk<D, Bc>(S[0], at(pipe.Q()), cwg, at(pipe.K(k)));
        hopper::wgmma_commit();
        rescale();
        pipe.wait_v(k - 1);
        issue_pv<NV, Bc, Pipe::L::kVtHalf>(o[0], at(pipe.P(cwg, k - 1)), at(pipe.Vt(k - 1)), false);
        hopper::wgmma_commit();
        pass_turn();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(S[0]);
        pipe.release_k(k);
        if (b == blocks - 1) pipe.release_q();
        mask(b);
        softmax_p(b, k);
        hopper::wgmma_wait<0>();
        hopper::fence_registers(o[0]);
        take_row_sums();
        pipe.release_v(k - 1);
      }
      const int k = it + blocks - 1;
      pipe.wait_v(k);
      wait_turn();
      rescale();
      issue_pv<NV, Bc, Pipe::L::kVtHalf>(o[0], at(pipe.P(cwg, k)), at(pipe.Vt(k)), false);
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o[0]);
      take_row_sums();
      pipe.release_v(k);
      it += blocks;

      constexpr float kLn2 = 0.69314718f;
      // l from the ones columns: every lane of a quad holds the whole sum, each passes a quarter.
      float mm[1][2] = {{m[0], m[1]}}, ll[1][2] = {{l[0] * 0.25f, l[1] * 0.25f}};
      fa3::write_output_tma<T, D>(reinterpret_cast<const float(&)[1][DT][4]>(o), mm, ll, stage, &mapO, p, h,
                                  warp_row0, {sc.v[hb], kLn2, -8.0f * kLn2, sc.v_mean + size_t(h) * D});
    }
    if (threadIdx.x % 32 == 0) hopper::bulk_wait<0>();
    if (cwg == 0) wait_turn();
  }
}

template <bool kOptimistic>
void launch(const char* rung, const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
            const LaunchOptions& options) {
  using Lay = LayoutWide<false, false>;
  const Launch l = prepare(rung, s, out, in, O, L, options, Lay::kBr, Lay::Bc, Lay::kBr);
  with_type(out, [&](auto type) {
    run(flash_v3_fp8_wide<decltype(type), kOptimistic>, Lay::kBytes, 128 * 3,
        std::string("fp8 ") + rung + " (key blocks of 256) at d = 128", l);
  });
}

}  // namespace

void launch_wide(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L, const LaunchOptions& options) {
  launch<true>("wide", s, out, in, O, L, options);
}

void launch_wide_exact_max(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                           const LaunchOptions& options) {
  launch<false>("wide_exact_max", s, out, in, O, L, options);
}

}  // namespace attention::fp8
