// The kernel of rungs 1 and 2 (key blocks of 128; fp8_1_e4m3.cu, fp8_2_row_sum.cu) and of rung 7 at
// d = 64 (fp8_7_lin.cu): stage 08's last rung with e4m3 operands. Its schedule is that rung's: a
// persistent grid over tiles (query block i of head h; causal, a head's heaviest first), a producer
// warpgroup, consumer warpgroups of 64 query rows each taking turns at the tensor cores (two at
// d = 128, three at d = 64), and in each the softmax of key block j under the products of block j + 1.
//   kSumByMma   rung 2: l from P̃·V's 8 extra columns of ones (rung 1: FADDs in the softmax)
//   kPSmem      P̃ as P̃·V's A operand through shared memory (the rungs: at d = 128), else in registers
//   kLin        rung 7 at d = 64: P̃'s bytes from fp16's bit pattern (needs kSumByMma)
#pragma once

#include "fp8_epilogue.cuh"
#include "fp8_launch.cuh"
#include "fp8_mma.cuh"
#include "fp8_softmax.cuh"

namespace attention::fp8 {

template <class T, int D, bool kSumByMma, bool kPSmem, bool kLin = false, int kWG = consumer_warpgroups<D>()>
__global__ void __launch_bounds__(128 * (kWG + 1), 1)
    flash_v3_fp8_128(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                     const __grid_constant__ CUtensorMap mapVt, const __grid_constant__ CUtensorMap mapO, tc::Params p,
                     Scales sc, int heads, int* next_tile) {
  constexpr int NT = kBc / 8, DT = D / 8, kBr = 64 * kWG, NV = D + (kSumByMma ? 8 : 0);
  static_assert(!kLin || kSumByMma, "P̃ by fp16's bit pattern sums l on the tensor cores");
  extern __shared__ uint8_t smem_raw[];
  using Pipe = Pipeline<Layout128<D, kBr, kSumByMma, kPSmem>>;
  const Pipe pipe{reinterpret_cast<uint8_t*>(fa3::align1024(smem_raw))};
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  // Causal tiles are laid from the last row back, as in stage 08 (a head's first tile may start before
  // row 0, its rows there padding), but from N rounded up to 64: every warpgroup's 64 rows then start
  // on a multiple of 64 and lie in one of Q's 128-row scale blocks (one descale a warpgroup). For Br
  // and Bc multiples of 64 the tiles' count and key blocks are the same as from N.
  const int N64 = (p.N + 63) / 64 * 64;
  if (threadIdx.x == 0) pipe.init(4 * kWG);
  pipe.fill_ones();
  __syncthreads();

  if (wg == 0) {  // ---- the producer ----
    constexpr int kLaunch = 65536 / (128 * (kWG + 1)) / 8 * 8;
    static_assert(producer_registers<kWG>() + kWG * fa3::consumer_registers<kWG, producer_registers<kWG>()>() <=
                      (kWG + 1) * kLaunch,
                  "setmaxnreg: the warpgroups' registers exceed what the block was launched with");
    hopper::setmaxnreg_dec<producer_registers<kWG>()>();
    if (threadIdx.x == 0) pipe.produce_tiles(&mapQ, &mapK, &mapVt, p, N64, Tr, tiles, next_tile);
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<fa3::consumer_registers<kWG, producer_registers<kWG>()>()>();
    const int cwg = wg - 1, cwarp = warp - 4;
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (cwg + 1) % kWG, 256); };
    if (cwg == kWG - 1) pass_turn();
    const float c0 = p.scale * ptx::kLog2e;
    auto at = [](const void* x) { return hopper::smem_u32(x); };  // shared-memory addresses for descriptors

    int it = 0;
    for (int n = 0;; ++n) {
      pipe.wait_q(n);
      const int t = __shfl_sync(0xffffffffu, *pipe.tile_slot(n), 0);
      if (t < 0) break;
      int i, h;
      Pipe::tile(t, Tr, p.causal, i, h);
      const int row0 = query_row0(N64, kBr, p.causal, true, i), wg_row0 = row0 + 64 * cwg,
                warp_row0 = row0 + 16 * cwarp;
      const int blocks = key_blocks(N64, kBr, kBc, p.causal, i, true);
      // As stage 08: causal, a warpgroup skips the key blocks past its own rows (an empty turn);
      // rows all padding (before 0 or past N) need one block (computed, not written).
      const bool padding = wg_row0 + 64 <= 0 || wg_row0 >= p.N;
      const int needed = padding ? 1 : p.causal ? min(blocks, (wg_row0 + 64 + kBc - 1) / kBc) : blocks;
      const int b0 = blocks - needed;
      // The head's K and V descales, indexed from the kernel's parameters (one register, not two
      // pointers: the consumer's registers are all but taken at d = 128).
      const int hb = h * sc.blocks;
      auto k_scale = [&](int j) { return sc.k[hb + j]; };
      auto v_scale = [&](int j) { return sc.v[hb + j]; };
      // The Q descale of the warpgroup's 64 rows, folded in (they lie in one 128-row scale block; rows
      // all padding take the nearest block's, unused).
      const float cq = c0 * sc.q[size_t(h) * sc.blocks + min(max(wg_row0, 0), p.N - 1) / kScaleRows];
      // oj: the block's P̃·V (and, kSumByMma, its row sums in tile DT: row g's in [DT][0] and [1], row
      // g + 8's in [2] and [3], the same sum in every lane of a quad).
      constexpr int JT = NV / 8;
      float o[1][DT][4] = {}, oj[1][JT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {};
      float S[1][NT][4];
      uint32_t P[kBc / 32][4];
      auto mask = [&](int b) {
        const int j = blocks - 1 - b;
        if (fa3::needs_mask(j, wg_row0, p.N, p.causal)) tc::mask_scores(S, warp_row0, j * kBc, p.N, p.causal);
      };

      for (int b = 0; b < b0; ++b) {
        wait_turn();
        pass_turn();
        pipe.skip_block(it + b);
      }
      pipe.wait_k(it + b0);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<D>(S[0], at(pipe.Q()), cwg, at(pipe.K(it + b0)));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it + b0);
      if (b0 == blocks - 1) pipe.release_q();
      mask(b0);
      float alpha[2];
      // o's unit: the descale of the last V block added. The promote of a block's P̃·V waits until
      // the next P̃·V is issued (promote_held, under Q·Kᵀ): done right after the wait for P̃·V, it sat
      // between the softmax and the next turn, and ptxas hoisted that wait to the row max to mix the
      // promote's FFMAs into it (chapter 09: 733 -> 895 TFLOP/s at d = 128, N = 16384, once moved).
      // f_held: the factor of the sum held in oj (o to its max and V's unit; 0 while o is empty);
      // f_next: that of the block whose P̃ is in P. u_held, u_next: V's descale step in those factors,
      // inverted: l's factor is f·u (the max only; the ones are not scaled by V's descale). One
      // register each, not two: at d = 128 the consumer's 240 are all but taken.
      float sv = v_scale(blocks - 1 - b0), f_held[2] = {0.0f, 0.0f}, f_next[2] = {0.0f, 0.0f};
      float u_held = 1.0f, u_next = 1.0f;
#pragma unroll
      for (int d = 0; d < JT; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) oj[0][d][e] = 0.0f;
      // P̃·V of key block number k_ (P̃ from P, or kPSmem: from its tile), and P̃ of block k_ made.
      auto issue_pv_of = [&](int k_) {
        if constexpr (kPSmem) issue_pv<NV>(oj[0], at(pipe.P(cwg, k_)), at(pipe.Vt(k_)), true);
        else issue_pv<NV>(oj[0], P, at(pipe.Vt(k_)));
      };
      auto make_p = [&](int k_) {
        pack_p<kBc, kLin>(S[0], P);
        if constexpr (kPSmem) store_p(P, at(pipe.P(cwg, k_)), cwarp % 4);
      };
      softmax_scores<!kSumByMma, NT, kLin>(S[0], m, l, score_unit(cq, k_scale(blocks - 1 - b0)), alpha);
      make_p(it + b0);
      // kSumByMma: l = l·(f·u) + the block's row sum, as soon as P̃·V is complete, so that the row
      // sums' registers are free again before the next turn (at the turn, S, o, oj and P̃ are all
      // held, the row sums' four more would make ptxas serialise the wgmma's: its warning C7511).
      auto add_row_sum = [&] {
        if constexpr (kSumByMma)
          l[0] = fmaf(l[0], f_held[0] * u_held, oj[0][DT][0]), l[1] = fmaf(l[1], f_held[1] * u_held, oj[0][DT][2]);
      };
      auto promote_held = [&] {  // o = o·f + oj under the products just issued; oj then free for P̃·V
        promote(o[0], oj[0], f_held);
        f_held[0] = f_next[0], f_held[1] = f_next[1];
        u_held = u_next;
        hopper::wgmma_fence();  // oj was read: the wgmma that writes it comes after
      };
      for (int b = b0 + 1; b < blocks; ++b) {
        const int k = it + b, j = blocks - 1 - b;
        const float cj = score_unit(cq, k_scale(j)), sv_j = v_scale(j);
        pipe.wait_k(k);
        wait_turn();
        hopper::wgmma_fence();
        issue_qk<D>(S[0], at(pipe.Q()), cwg, at(pipe.K(k)));
        hopper::wgmma_commit();
        promote_held();
        pipe.wait_v(k - 1);  // here, not before the turn (there: 0.86-0.89x at d = 128)
        issue_pv_of(k - 1);
        hopper::wgmma_commit();
        pass_turn();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(S[0]);
        pipe.release_k(k);
        if (b == blocks - 1) pipe.release_q();
        mask(b);
        softmax_scores<!kSumByMma, NT, kLin>(S[0], m, l, cj, alpha);
        const float units = sv / sv_j;  // o owes alpha and the step to units of sv_j (1 per tensor)
        if constexpr (kSumByMma) u_next = sv_j / sv;
        sv = sv_j;
        f_next[0] = alpha[0] * units, f_next[1] = alpha[1] * units;
        // kPSmem: P̃ goes to the other tile while P̃·V reads this one, so nothing in the softmax
        // needs P̃·V to be complete (nor its registers: P̃ no longer held through it).
        if constexpr (kPSmem) make_p(k);
        hopper::wgmma_wait<0>();
        hopper::fence_registers(oj[0]);
        add_row_sum();
        pipe.release_v(k - 1);
        if constexpr (!kPSmem) make_p(k);
      }
      const int k = it + blocks - 1;
      pipe.wait_v(k);
      wait_turn();
      promote_held();
      issue_pv_of(k);
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(oj[0]);
      pipe.release_v(k);
      add_row_sum();
      promote(o[0], oj[0], f_held);
      it += blocks;

      constexpr float kLn2 = 0.69314718f;
      // The epilogue adds the four lanes' shares of l (quad_sum); from the tensor cores every lane
      // holds the whole sum, so each passes a quarter (exact: a power of two).
      constexpr float share = kSumByMma ? 0.25f : 1.0f;
      float mm[1][2] = {{m[0], m[1]}}, ll[1][2] = {{l[0] * share, l[1] * share}};
      fa3::write_output_tma<T, D>(o, mm, ll, pipe.O() + 16 * cwarp * D, &mapO, p, h, warp_row0,
                                  {sv, kLn2, -8.0f * kLn2, sc.v_mean + size_t(h) * D});
    }
    if (threadIdx.x % 32 == 0) hopper::bulk_wait<0>();
    if (cwg == 0) wait_turn();
  }
}

// The launch of flash_v3_fp8_128 for rung `rung`. kP: P̃ through shared memory where the rungs put it
// (by d: at d = 128), or always in registers (the ablation p_in_registers).
enum class POperand { by_d, registers };
template <bool kSumByMma, POperand kP, bool kLin = false>
void launch_blocks128(const char* rung, const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                      const LaunchOptions& options) {
  require_problem(s, out);
  auto go = [&](auto type, auto d) {
    using T = decltype(type);
    constexpr int D = decltype(d)::value, kWG = consumer_warpgroups<D>(), kBr = 64 * kWG;
    constexpr bool kPSmem = kP == POperand::by_d && D == 128;
    // Q's box is the kernel's tile; the model and the count take attention_tiles (fp8.hpp): they agree.
    course::require(attention_tiles(s).Br == kBr, "fp8: attention_tiles and the kernel's warpgroups disagree");
    const Launch l = prepare(rung, s, out, in, O, L, options, kBr, kBc, kBr);
    const size_t bytes = Layout128<D, kBr, kSumByMma, kPSmem>::kBytes;
    run(flash_v3_fp8_128<T, D, kSumByMma, kPSmem, kLin>, bytes, 128 * (kWG + 1),
        std::string("fp8 ") + rung + " at d = " + std::to_string(D), l);
  };
  with_type(out, [&](auto type) {
    if (s.d == 64) go(type, std::integral_constant<int, 64>{});
    else if constexpr (!kLin) go(type, std::integral_constant<int, 128>{});  // rung 7 at d = 128: the overlap kernel
    else course::require(false, std::string("fp8 ") + rung + ": this kernel runs P̃ by fp16's bit pattern at d = 64 only");
  });
}

}  // namespace attention::fp8
