// The kernel of rungs 4-7 (d = 128; fp8_4_tile_overlap.cu ... fp8_7_lin.cu): rung 3's key blocks of
// 256 with a tile's end under the next tile's products (rung 4), then what a causal tile's start
// costs (rung 5, kTileStart), the epilogue's L and staging (rung 6, kEpilogue) and P̃ without the
// exponential unit (rung 7, kLin). Each rung's file says what its switch changes and what it bought.
//
// Rung 4 (all switches off), against rung 3's kernel (fp8_3_wide.cu):
//  - The tile's last P̃·V and the next tile's first S are one turn at the tensor cores (P̃·V first,
//    so that wgmma_wait<1> returns when o is complete), and the epilogue runs while S is computed.
//  - Q keeps one slot: a warpgroup releases Q after its last S, a block before the tile's end, and
//    the next tile's Q lands within that block.
//  - O's staging: the warpgroup's P̃ tile that the next tile's first block does not write (the last
//    P̃·V's, or the one before it: both read to the end). Each warp waits for its copy to have read
//    the staging before its next tile's first softmax; the next turn (a barrier of all four warps)
//    orders those waits before any write into that tile.
//  - At most one key block past a warpgroup's rows is skipped (causal, N not a multiple of 128): a
//    second would wait for a slot that this tile's last P̃·V still reads. A warpgroup whose rows are
//    all padding computes its key blocks instead of skipping them (it writes nothing).
//  - After the last tile the S issued is on that tile's Q and last K (in place: the producer is
//    done), its result dropped: a wgmma under a branch serialises them all (ptxas' C7520).
//  - v̄ from shared memory (write_output_wide), the descales a tile ahead (Tile), the next tile's
//    first K before the wait for Q's slot (early_k), and causal tiles in FA-3's LPT order (`group`).
#pragma once

#include "fp8_epilogue.cuh"
#include "fp8_mma.cuh"
#include "fp8_softmax.cuh"

namespace attention::fp8 {

template <class T, bool kTileStart, bool kEpilogue, bool kLin>
__global__ void __launch_bounds__(128 * 3, 1)
    flash_v3_fp8_overlap(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                              const __grid_constant__ CUtensorMap mapVt, const __grid_constant__ CUtensorMap mapO,
                              tc::Params p, Scales sc, int heads, int* next_tile, int group) {
  using Pipe = Pipeline<LayoutWide<true, kTileStart>>;
  constexpr int D = Pipe::D, kWG = 2, Bc = Pipe::Bc, NT = Bc / 8, kBr = Pipe::kBr, NV = D + 8;
  static_assert(kBr == 64 * kWG, "two consumer warpgroups");
  static_assert(!kEpilogue || kTileStart, "rung 6 builds on rung 5");
  static_assert(!kLin || kEpilogue, "rung 7 builds on rung 6");
  // Rung 5's pieces (kTileStart): the diagonal's mask without N, each tile's numbers from the
  // producer, Q by halves, the diagonal's dead steps skipped, the first Q half prefetched.
  constexpr bool kDiagonalMask = kTileStart, kDecoded = kTileStart, kQHalves = kTileStart, kDiagSkip = kTileStart;
  extern __shared__ uint8_t smem_raw[];
  const Pipe pipe{reinterpret_cast<uint8_t*>(fa3::align1024(smem_raw))};
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  const int N64 = (p.N + 63) / 64 * 64;
  if (threadIdx.x == 0) pipe.init(4 * kWG);
  pipe.fill_ones();
  __syncthreads();

  if (wg == 0) {  // ---- the producer: the rung's ----
    hopper::setmaxnreg_dec<producer_registers<kWG>()>();
    if (threadIdx.x == 0)
      pipe.produce_tiles(&mapQ, &mapK, &mapVt, p, N64, Tr, tiles, next_tile, sc.v_mean, group, /*early_k=*/true);
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<fa3::consumer_registers<kWG, producer_registers<kWG>()>()>();
    const int cwg = wg - 1, cwarp = warp - 4;
    const int qc = kQHalves ? cwg : 0;  // the warpgroup's Q barriers and v̄ (kQHalves: its own half's)
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (cwg + 1) % kWG, 256); };
    if (cwg == kWG - 1) pass_turn();
    const float c0 = p.scale * ptx::kLog2e;
    auto at = [](const void* x) { return hopper::smem_u32(x); };
    // A tile as the warpgroup sees it: its head, rows, key blocks and the ones it skips (b0, 0 or 1).
    // Its descales loaded here, a tile ahead (for the next tile, before this one's last turn): V's and
    // the first block's K (k0, k1) and Q's folded into cq. In the loop each block's K descales are
    // loaded a block ahead. Loaded where they were used (in the epilogue, at the softmax's start),
    // each was a trip to L2 or L1 on the warpgroup's critical path (the trace: the epilogue 0.8-1.25 µs).
    struct Tile {
      int h, wg_row0, warp_row0, blocks, b0, hb;
      float cq, sv, k0, k1;
    };
    // kDecoded: tile t, the block's tile n, decoded by the producer (tile_ih(n)).
    auto tile_of = [&](int t, int n) {
      Tile x;
      int i;
      if constexpr (kDecoded) {
        i = __shfl_sync(0xffffffffu, pipe.tile_ih(n)[0], 0);
        x.h = __shfl_sync(0xffffffffu, pipe.tile_ih(n)[1], 0);
      } else {
        Pipe::tile(t, Tr, p.causal, i, x.h, heads, group);
      }
      const int row0 = query_row0(N64, kBr, p.causal, true, i);
      x.wg_row0 = row0 + 64 * cwg, x.warp_row0 = row0 + 16 * cwarp;
      x.blocks = key_blocks(N64, kBr, Bc, p.causal, i, true);
      const bool padding = x.wg_row0 + 64 <= 0 || x.wg_row0 >= p.N;
      x.b0 = padding || !p.causal ? 0 : x.blocks - min(x.blocks, (x.wg_row0 + 64 + Bc - 1) / Bc);
      x.hb = x.h * sc.blocks;
      x.cq = c0 * sc.q[x.hb + min(max(x.wg_row0, 0), p.N - 1) / kScaleRows];
      x.sv = sc.v[x.hb];
      const int j0 = x.blocks - 1 - x.b0;
      x.k0 = sc.k[x.hb + min(2 * j0, sc.blocks - 1)], x.k1 = sc.k[x.hb + min(2 * j0 + 1, sc.blocks - 1)];
      return x;
    };
    float o[1][NV / 8][4], m[2], l[2], alpha[2];
    float S[1][NT][4];
    uint32_t P[Bc / 32][4];
    // As the rung's lambdas, for the tile `cur`.
    Tile cur{};
    // K's descales of block b (two: 128 keys each); past the tile's last block, that block's.
    auto k_scale = [&](int b, int x) { return sc.k[cur.hb + min(2 * max(cur.blocks - 1 - b, 0) + x, sc.blocks - 1)]; };
    auto mask = [&](int b) {
      const int j = cur.blocks - 1 - b;
      if (fa3::needs_mask<Bc>(j, cur.wg_row0, p.N, p.causal)) {
        if (kDiagonalMask && (j + 1) * Bc <= p.N) mask_causal(S[0], cur.warp_row0, j * Bc);
        else tc::mask_scores(S, cur.warp_row0, j * Bc, p.N, p.causal);
      }
    };
    auto softmax_p = [&](int b, int k_, float k0, float k1) {
      softmax_p_wide<NT, true, kLin>(S[0], P, m, alpha, score_unit(cur.cq, k0), score_unit(cur.cq, k1), b > cur.b0,
                               [&] { return at(pipe.P(cwg, k_)); }, cwarp % 4);
    };
    auto rescale = [&] { rescale_wide(o[0], l, alpha); };
    auto take_row_sums = [&] { fp8::take_row_sums(o[0], l); };
    auto skip_blocks = [&](int it0, int count) {  // causal: the blocks past the warpgroup's rows, an empty turn
      for (int b = 0; b < count; ++b) {
        wait_turn();
        pass_turn();
        pipe.skip_block(it0 + b);
      }
    };

    // The first tile's first S, alone.
    int it = 0;
    pipe.wait_q(0, qc);
    int t = __shfl_sync(0xffffffffu, *pipe.tile_slot(0), 0);
    if (t >= 0) {
      cur = tile_of(t, 0);
      skip_blocks(it, cur.b0);
      pipe.wait_k(it + cur.b0);
      wait_turn();
      hopper::wgmma_fence();
      issue_qk<D, Bc>(S[0], at(pipe.Q()), cwg, at(pipe.K(it + cur.b0)));
      hopper::wgmma_commit();
      pass_turn();
    }
    for (int n = 0; t >= 0; ++n) {  // tile n, its first S issued
      const int b0 = cur.b0, blocks = cur.blocks;
#pragma unroll
      for (int d = 0; d < NV / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][d][e] = 0.0f;
      m[0] = m[1] = -INFINITY, l[0] = l[1] = 0.0f;
      hopper::wgmma_wait<0>();
      hopper::fence_registers(S[0]);
      pipe.release_k(it + b0);
      if (b0 == blocks - 1) pipe.release_q(qc);
      // kDiagSkip: the causal diagonal's block (it ends before N) by softmax_p_diag, its mask included.
      const int j_first = blocks - 1 - b0;
      const bool diagonal = kDiagSkip && p.causal && (j_first + 1) * Bc <= p.N;
      if (!diagonal) mask(b0);
      // The last tile's O, staged in a P̃ tile: read by the copy engine before the next turn lets
      // any warp write that tile again.
      if (threadIdx.x % 32 == 0) hopper::bulk_wait_read<0>();
      __syncwarp();
      if (diagonal)
        softmax_p_diag<NT, kLin>(S[0], m, alpha, score_unit(cur.cq, cur.k0), score_unit(cur.cq, cur.k1), [&] { return at(pipe.P(cwg, it + b0)); },
                           cwarp % 4, cur.warp_row0 - j_first * Bc);
      else
        softmax_p(b0, it + b0, cur.k0, cur.k1);
      float k0 = k_scale(b0 + 1, 0), k1 = k_scale(b0 + 1, 1);  // the next block's, a block ahead
      for (int b = b0 + 1; b < blocks; ++b) {  // the rung's step
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
        if (b == blocks - 1) pipe.release_q(qc);
        mask(b);
        softmax_p(b, k, k0, k1);
        k0 = k_scale(b + 1, 0), k1 = k_scale(b + 1, 1);
        hopper::wgmma_wait<0>();
        hopper::fence_registers(o[0]);
        take_row_sums();
        pipe.release_v(k - 1);
      }
      // The tile's last P̃·V and the next tile's first S, one turn (after the last tile: a dropped S).
      const int k = it + blocks - 1;
      pipe.wait_q(n + 1, qc);
      const int t_next = __shfl_sync(0xffffffffu, *pipe.tile_slot(n + 1), 0);
      const bool more = t_next >= 0;
      const Tile next = tile_of(more ? t_next : t, more ? n + 1 : n);
      if (more) skip_blocks(k + 1, next.b0);
      const int kS = more ? k + 1 + next.b0 : k;
      pipe.wait_v(k);
      if (more) pipe.wait_k(kS);
      wait_turn();
      rescale();
      issue_pv<NV, Bc, Pipe::L::kVtHalf>(o[0], at(pipe.P(cwg, k)), at(pipe.Vt(k)), false);
      hopper::wgmma_commit();
      issue_qk<D, Bc>(S[0], at(pipe.Q()), cwg, at(pipe.K(kS)));
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<1>();
      hopper::fence_registers(o[0]);
      take_row_sums();
      pipe.release_v(k);
      // Tile n's epilogue under that S, staged in the P̃ tile the next first block (kS) does not write.
      uint16_t* const stage = reinterpret_cast<uint16_t*>(pipe.P(cwg, kS + 1)) + 16 * (cwarp % 4) * D;
      if constexpr (kEpilogue)
        write_output_stsm<T, D, NV / 8>(o[0], m, l, stage, pipe.vbar(n, qc), &mapO, p, cur.h, cur.warp_row0, cur.sv);
      else
        write_output_wide<T, D>(o[0], m, l, stage, pipe.vbar(n, qc), &mapO, p, cur.h, cur.warp_row0, cur.sv);
      it = k + 1;
      t = t_next;
      cur = next;
    }
    hopper::wgmma_wait<0>();  // the dropped S
    if (threadIdx.x % 32 == 0) hopper::bulk_wait<0>();
    if (cwg == 0) wait_turn();
  }
}

}  // namespace attention::fp8
