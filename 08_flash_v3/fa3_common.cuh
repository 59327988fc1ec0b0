// What the rungs of stage 08 share: the tile sizes, the shared-memory layout the tensor cores read
// (hopper::swizzle128), the two products as sequences of wgmma's, the tensor maps, and the pieces
// of stage 06 they reuse unchanged: the mask, the online softmax on the accumulators, the
// epilogue (tc_common.cuh; rung 8 ends it with TMA stores, write_output_tma). Each rung's own
// file (fa3_1_wgmma.cu ... fa3_8_tuned.cu) is the loop that strings these together; the
// differences between those files are the lessons.
//
// Work split: a thread block takes Br = 128 query rows of one head (rungs 7-8 at d = 64: 192); each of
// its two (three) compute warpgroups owns 64 of them (warp w of a warpgroup: 16 rows, as a warp of
// stage 06 with MT = 1). Keys come in blocks of Bc = 128 (stage 09's wide rungs: 256 FP8 keys).
// not causal). A compute thread holds, as in stage 06:
//   S[1][Bc/8][4]  its 2 rows × 2·Bc/8 columns of S = Q·Kᵀ (64 floats)
//   o[1][D/8][4]   its 2 rows of O, unnormalised, fp32 (32 or 64 floats)
//   P[1][Bc/16][4] P̃ packed to 16 bits as P·V's A operand (32 registers)
//   m[1][2], l[1][2]  the running max and the lane's share of the row sum
#pragma once

#include <cuda.h>

#include "../06_flash_v2/tc_common.cuh"
#include "hopper.cuh"

namespace attention::fa3 {

using tc::Params;

// Block sizes of every rung (keep in step with variants.cpp).
constexpr int kBr = 128, kBc = 128;
// Named barriers: 1 + c is consumer warpgroup c's own (the epilogue); kSched + c is its turn at the
// tensor cores (rungs 4 and 5). 0 is __syncthreads'.
constexpr int kSched = 3;

// The registers a consumer thread may have after setmaxnreg, with the producer's warpgroup at
// kProducer (24; stage 09 at three warpgroups: 32, which leaves them the same): (65536 − 128 ·
// kProducer) / (128 · kWG), rounded down to a multiple of 8 (240 for two, 160 for three).
template <int kWG, int kProducer = 24>
constexpr int consumer_registers() {
  return (65536 / 128 - kProducer) / kWG / 8 * 8;
}

// Rungs 7 and 8: three consumer warpgroups and 3 K/V slots at d = 64 (Br = 192), two of each at d = 128.
template <int D>
constexpr int tuned_warpgroups() {
  return D == 64 ? 3 : 2;
}
template <int D>
constexpr int tuned_stages() {
  return D == 64 ? 3 : 2;
}

// The shared memory of a rung: Q (Br × D), then kStages slots of K and V (Bc × D each), every tile
// in the swizzle128 layout and 1024-byte aligned; then the mbarriers. Offsets in 16-bit values.
// Br: the query rows of a tile, 64 a consumer warpgroup (rungs 7-8 at d = 64: 192, three warpgroups).
// Bc: the keys of a K/V tile (128).
template <int D, int kStages, bool kOwnStaging = false, int kQSlots = 1, int Br = kBr, int Bc = kBc>
struct Smem {
  // kQSlots = 2 (tile_overlap): two Q tiles, so that the next tile's Q has landed before this tile ends.
  static constexpr int kQ = 0, kKV = kQSlots * Br * D, kSlot = 2 * Bc * D;
  // kOwnStaging (rungs 6-8, tile_overlap): O is staged in a region of its own, not over Q, so that the
  // next tile's Q can land while this tile's O is written out.
  static constexpr int kO = kKV + kStages * kSlot;
  static constexpr int kHalves = kO + (kOwnStaging ? Br * D : 0);
  // Two barriers a Q slot, 4 a K/V slot (Pipeline), then 8 bytes for the persistent rungs' two tile numbers.
  static constexpr size_t kBarrierBytes = 8 * (2 * kQSlots + 4 * kStages + 1);
  // + 1024: the dynamic shared memory is aligned to 1024 bytes by hand (align1024).
  static constexpr size_t kBytes = 2 * size_t(kHalves) + kBarrierBytes + 1024;
};

// The start of dynamic shared memory rounded up to 1024 bytes: the 128-byte swizzle's atom, which
// the descriptors (base offset 0) and TMA expect tiles to be aligned to.
__device__ inline uint16_t* align1024(void* smem) {
  const uint32_t a = hopper::smem_u32(smem);
  return reinterpret_cast<uint16_t*>(static_cast<char*>(smem) + ((1024 - (a & 1023)) & 1023));
}

// Rungs that walk the key blocks from the last to the first (stage 06's tuned): the blocks that need
// the mask (the causal diagonal, the tail past N) come first. Causal: the heaviest query blocks
// (the last ones) start first.
__device__ inline int query_block(bool causal) { return causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x; }
template <int Bc = kBc>
__device__ inline bool needs_mask(int j, int row0, int N, bool causal) {
  return (j + 1) * Bc > N || (causal && (j + 1) * Bc - 1 > row0);
}

// Where warp `wi` (0..3) of warpgroup `wg` stages its 16 rows × D of O for stage 06's epilogue
// (tc::write_output: 16·D contiguous values, its own swizzle): inside the warpgroup's own rows of
// Q's tile, which only its own wgmma's read. At D = 128, Q's tile is two column blocks of Br rows ×
// 64; the warpgroup's rows are 64 × 64 values in each, and two warps share each block.
template <int D>
__device__ inline uint16_t* staging(uint16_t* Qs, int wg, int wi) {
  static_assert(D == 64 || D == 128, "D = 64 or 128");
  if constexpr (D == 64) return Qs + (64 * wg + 16 * wi) * 64;
  else return Qs + (wi / 2) * kBr * 64 + (64 * wg + 32 * (wi % 2)) * 64;
}

// --- the producer/consumer pipeline of rungs 3-8 (and stage 09's) -----------------------------------
// A ring of kStages slots, each a K tile and a V tile. K and V have barriers of their own, so that a
// consumer can start S = Q·K_jᵀ before V_j has landed, and give K_j's slot back as soon as S is
// computed, while V_j is still needed for P̃·V_j (rungs 4 and 5 use V_j a whole step after K_j):
//   full_k, full_v    the copy engine's bytes of the tile have landed (count 1: the producer's
//                     arrive.expect_tx, plus the bytes)
//   empty_k, empty_v  every consumer warp is done with the tile (count: the consumer warps, one
//                     arrival each)
// Load number `it` (key block j = blocks − 1 − it) uses slot it % kStages, in that slot's phase
// (it / kStages) & 1. The producer waits for a slot's previous use to be released; for the first
// round it asks for the parity of the phase before the barrier's first, which returns at once.
// KeyValueRing is that protocol on 4·kStages of a pipeline's barriers, from its barrier kFirst on
// (after its Q's): Pipeline derives from KeyValueRing<Pipeline, ...> and gives it bar(k).
template <class Pipe, int kStages, int kFirst>
struct KeyValueRing {
  __device__ const Pipe& pipe() const { return static_cast<const Pipe&>(*this); }
  __device__ uint64_t* k_full(int it) const { return pipe().bar(kFirst + it % kStages); }
  __device__ uint64_t* v_full(int it) const { return pipe().bar(kFirst + kStages + it % kStages); }
  __device__ uint64_t* k_empty(int it) const { return pipe().bar(kFirst + 2 * kStages + it % kStages); }
  __device__ uint64_t* v_empty(int it) const { return pipe().bar(kFirst + 3 * kStages + it % kStages); }
  __device__ static int phase(int it) { return (it / kStages) & 1; }
  // One thread, before a __syncthreads (and fence_barrier_init).
  __device__ void init_ring(int consumer_warps) const {
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(k_full(s), 1);
      hopper::mbarrier_init(v_full(s), 1);
      hopper::mbarrier_init(k_empty(s), consumer_warps);
      hopper::mbarrier_init(v_empty(s), consumer_warps);
    }
  }
  // The consumers' side: wait for a tile; give it back (one arrival a warp, from lane 0, after the
  // warp's wgmma's that read it have completed).
  __device__ void wait_k(int it) const { hopper::mbarrier_wait(k_full(it), phase(it)); }
  __device__ void wait_v(int it) const { hopper::mbarrier_wait(v_full(it), phase(it)); }
  __device__ void release_k(int it) const {
    if (threadIdx.x % 32 == 0) hopper::mbarrier_arrive(k_empty(it));
  }
  __device__ void release_v(int it) const {
    if (threadIdx.x % 32 == 0) hopper::mbarrier_arrive(v_empty(it));
  }
};

// Stage 08's pipeline: the K/V ring after Q's barriers (two a Q slot), in the layout of Smem.
template <int D, int kStages, bool kOwnStaging = false, int kQSlots = 1, int Br = kBr, int Bc = kBc>
struct Pipeline : KeyValueRing<Pipeline<D, kStages, kOwnStaging, kQSlots, Br, Bc>, kStages, 2 * kQSlots> {
  using L = Smem<D, kStages, kOwnStaging, kQSlots, Br, Bc>;
  using Ring = KeyValueRing<Pipeline, kStages, 2 * kQSlots>;
  using Ring::k_empty, Ring::k_full, Ring::phase, Ring::v_empty, Ring::v_full;
  uint16_t* smem;  // 1024-byte aligned (an aggregate: Pipeline<...>{{}, base})
  // Tile n's Q (rungs 6 and 7 number the tiles a block takes; the others have tile 0 only).
  __device__ uint16_t* Q(int n = 0) const { return smem + L::kQ + (n % kQSlots) * Br * D; }
  __device__ uint16_t* K(int it) const { return smem + L::kKV + (it % kStages) * L::kSlot; }
  __device__ uint16_t* V(int it) const { return K(it) + Bc * D; }
  __device__ uint16_t* O() const { return smem + L::kO; }  // kOwnStaging only
  __device__ uint64_t* bar(int k) const { return reinterpret_cast<uint64_t*>(smem + L::kHalves) + k; }
  __device__ uint64_t* q_full(int n = 0) const { return bar(2 * (n % kQSlots)); }
  __device__ uint64_t* q_empty(int n = 0) const { return bar(2 * (n % kQSlots) + 1); }  // the tile's last S is done
  __device__ static int q_phase(int n) { return (n / kQSlots) & 1; }
  // Rungs 6-8 and tile_overlap: the tile the producer loads as its n-th, for the consumers (−1: no
  // more), in slot n % 2. The producer writes slot n % 2 again for tile n + 2 only after tile n's Q
  // was given back, which the consumers do after they read it.
  __device__ volatile int* tile_slot(int n) const {
    return reinterpret_cast<volatile int*>(bar(2 * kQSlots + 4 * kStages)) + (n & 1);
  }

  // The consumers' read of tile n's number (rungs 6-8, tile_overlap), after wait_q(n), by every lane.
  // The producer writes the slot again (tile n + 2's number) once q_empty(n) completes, and an arrive
  // orders only its own thread's reads before that write: so every consumer thread arrives on q_empty
  // (release_q), not one a warp as on the K/V barriers (racecheck finds the race otherwise; chapter 08).
  __device__ int tile_number(int n) const { return *tile_slot(n); }

  // One thread, before a __syncthreads.
  __device__ void init(int consumer_warps) const {
    for (int n = 0; n < kQSlots; ++n) {
      hopper::mbarrier_init(q_full(n), 1);
      hopper::mbarrier_init(q_empty(n), 32 * consumer_warps);  // every consumer thread (tile_number)
    }
    Ring::init_ring(consumer_warps);
    hopper::fence_barrier_init();
  }
  // The producer (one thread): Q's Br rows from `row0` of head h (rows before 0 or from N on arrive
  // as zeros), then K and V of its `blocks` key blocks in the consumers' order, as fast as slots
  // free up. Loads are numbered on from `it` (rungs 6-8 and tile_overlap run several tiles through one
  // ring; n: the tile's number); returns the next load's number. Those two first wait for Q's slot
  // (wait_q_empty) before they load another tile's Q.
  __device__ int produce(const CUtensorMap* mapQ, const CUtensorMap* mapK, const CUtensorMap* mapV, int row0, int h,
                         int blocks, int it = 0, int n = 0) const {
    hopper::mbarrier_arrive_expect_tx(q_full(n), Br * D * 2);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) hopper::tma_load_3d(Q(n) + b * Br * 64, mapQ, q_full(n), 64 * b, row0, h);
    for (int j = blocks - 1; j >= 0; --j, ++it) {
      const int key0 = j * Bc;
      hopper::mbarrier_wait(k_empty(it), phase(it) ^ 1);
      hopper::mbarrier_arrive_expect_tx(k_full(it), Bc * D * 2);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) hopper::tma_load_3d(K(it) + b * Bc * 64, mapK, k_full(it), 64 * b, key0, h);
      hopper::mbarrier_wait(v_empty(it), phase(it) ^ 1);
      hopper::mbarrier_arrive_expect_tx(v_full(it), Bc * D * 2);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) hopper::tma_load_3d(V(it) + b * Bc * 64, mapV, v_full(it), 64 * b, key0, h);
    }
    return it;
  }
  // Before the n-th tile's Q: the consumers are done reading the previous one (returns at once for n = 0).
  __device__ void wait_q_empty(int n) const { hopper::mbarrier_wait(q_empty(n), q_phase(n) ^ 1); }
  // Q: wait for tile n's; give it back (every thread, see tile_number).
  __device__ void wait_q(int n = 0) const { hopper::mbarrier_wait(q_full(n), q_phase(n)); }
  __device__ void release_q(int n = 0) const { hopper::mbarrier_arrive(q_empty(n)); }
};

// The warp's 16 staged rows of O out (the end of write_output_tma; stage 09's wide epilogue too): the
// fence orders the staging's ordinary stores before the copy engine reads them; lane 0 issues the
// TMA stores. Rows before 0 (a head's first causal tile laid from the end): the lanes copy the rows
// from 0 on themselves.
template <int D>
__device__ void store_staged_output(const uint16_t* stage, const CUtensorMap* mapO, const Params& p, int h, int row0) {
  const int lane = tc::lane_id();
  hopper::fence_proxy_async();
  __syncwarp();
  if (row0 >= 0) {
    if (lane == 0) {
#pragma unroll
      for (int b = 0; b < D / 64; ++b) hopper::tma_store_3d(mapO, stage + b * 16 * 64, 64 * b, row0, h);
      hopper::bulk_commit();
    }
  } else {
    constexpr int kChunks = D / 8;
#pragma unroll
    for (int f = lane; f < 16 * kChunks; f += 32) {
      const int r = f / kChunks, c = f % kChunks;
      if (row0 + r >= 0 && row0 + r < p.N)
        __stcg(reinterpret_cast<uint4*>(p.O + (size_t(h) * p.N + row0 + r) * D) + c,
               *reinterpret_cast<const uint4*>(stage + hopper::swizzle128<16>(r, c)));
    }
  }
}

// --- rung 8's epilogue: O written out by the copy engine -------------------------------------------
// Stage 06's epilogue (tc::write_output) for one warp's 16 rows, up to the staging: O = o / l into
// `stage`, L = scale·m + log l. Then, instead of 32 lanes copying the staging out in 16-byte pieces
// (D / 8 loads from shared memory and as many stores to global memory a lane, each store waiting
// for its load), lane 0 hands the staging to the copy engine, one TMA store a 64-column block, and
// the warp goes on to the next tile. The copy engine leaves out rows from N on itself. A box that
// starts before row 0 it does not take: the store faults (cudaErrorIllegalInstruction, measured),
// where a load from there fills zeros. So a warp whose rows start before 0 (causal tiles laid from
// the end) copies its rows out itself, as stage 06 does: one tile a head, at most. The
// staging is in the layout mapO's boxes (64 columns × 16 rows, the 128-byte swizzle) describe:
// swizzle128, 1024-byte aligned, where stage 06's has rows of D values. Before the warp writes
// its staging again (the next tile), the previous store must have read it: wait_group.read.
// What the epilogue computes from o, m and l: O = o · o_times / l (+ o_add), L = m_times · m + log l + L_add.
// Stage 08: {1, scale, 0} (m in units of scores). Stage 09: m is already in units of
// scale·log₂e·score (m_times = ln 2), l sums P̃·2^8 (L_add = −8 ln 2), o is in units of V's
// last descale (o_times), and o_add is the head's v̄ (D floats: V was centred). O = (o / l) · o_times in that
// order: a descale can be tiny (bf16 inputs near 2^-127), and o_times / l would then be a subnormal factor of few
// bits (stage 08's o_times, the constant 1, is folded away).
struct Epilogue {
  float o_times, m_times, L_add;
  const float* o_add = nullptr;  // D values added to every row of O, or none
};
template <class T, int D>
__device__ void write_output_tma(const float (&o)[1][D / 8][4], const float (&m)[1][2], float (&l)[1][2],
                                 uint16_t* stage, const CUtensorMap* mapO, const Params& p, int h, int row0,
                                 Epilogue e) {
  const int lane = tc::lane_id(), g = lane / 4, t = lane % 4;
  if (lane == 0) hopper::bulk_wait_read<0>();
  __syncwarp();
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {  // rows g and g + 8
    l[0][hh] = tc::quad_sum(l[0][hh]);
    const float inv = 1.0f / l[0][hh];
    const int r = g + 8 * hh;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      float x0 = o[0][d][2 * hh] * inv * e.o_times, x1 = o[0][d][2 * hh + 1] * inv * e.o_times;
      if (e.o_add) {  // columns 8d + 2t and 8d + 2t + 1
        const float2 add = __ldg(reinterpret_cast<const float2*>(e.o_add + 8 * d + 2 * t));
        x0 += add.x, x1 += add.y;
      }
      *reinterpret_cast<uint32_t*>(stage + hopper::swizzle128<16>(r, d) + 2 * t) = ptx::pack<T>(x0, x1);
    }
    if (t == 0 && unsigned(row0 + r) < unsigned(p.N)) p.L[size_t(h) * p.N + row0 + r] = e.m_times * m[0][hh] + logf(l[0][hh]) + e.L_add;
  }
  store_staged_output<D>(stage, mapO, p, h, row0);
}

// --- the persistent rungs' tile counter -----------------------------------------------------------------
// counter[0]: tiles taken past the first wave (atomicAdd), counter[1]: blocks that ran out of tiles.
// The last block to run out sets both back to 0 for the next launch, so that no memset runs between
// launches (one GPU operation a call, as the peers). The fences order each block's last take before
// its count, and the count before the reset (the "last block" pattern of CUDA's
// threadFenceReduction sample). One thread a block (the producer), once.
__device__ inline void tiles_done(int* counter) {
  __threadfence();
  if (atomicAdd(counter + 1, 1) == int(gridDim.x) - 1) {
    __threadfence();
    counter[0] = 0;
    counter[1] = 0;
  }
}

// --- FlashAttention-3's LPT order (longest processing time first), for causal persistent grids ------
// Taken a head at a time, heaviest first, the grid's last tiles include the heaviest of the last
// heads, started when the other blocks are nearly done. Here the heads go in groups of `group` (the
// last group smaller), a group's tiles heaviest first across its heads, so that the grid ends on the
// lightest tiles of its last group; the launch picks the group so that its K and V stay in L2
// (lpt_head_group). Tile t: head h, query block i (i = Tr − 1 the heaviest).
__device__ inline void lpt_tile(int t, int Tr, int heads, int group, int& i, int& h) {
  const int g0 = t / (group * Tr) * group, n = min(group, heads - g0), r = t - g0 * Tr;
  h = g0 + r % n;
  i = Tr - 1 - r / n;
}

// --- rung 1's loads: cp.async into the swizzle128 layout ------------------------------------------
// R rows of D 16-bit values from `src` (rows of D) into a tile at `smem`; rows >= `rows` are
// zero-filled and not read. Consecutive threads take consecutive 16-byte chunks of a row.
template <int D, int R, int kThreads>
__device__ void load_tile_cp_async(uint16_t* smem, const uint16_t* src, int rows, int thread) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int f = thread; f < R * kChunks; f += kThreads) {
    const int r = f / kChunks, c = f % kChunks;
    ptx::cp_async_16(smem + hopper::swizzle128<R>(r, c), src + size_t(r) * D + 8 * c, r < rows);
  }
}

// --- the two products, as the tensor cores take them ------------------------------------------------
// S = Q·K_jᵀ for the warpgroup `wg`'s 64 rows of Q: D/16 wgmma's of 64 × Bc × 16, each reading a
// 16-wide k step of Q's rows and of K's rows (both K-major). Issued only: the caller fences
// before and commits and waits after.
// Br: the rows of Q's tile (its 64-column blocks are Br rows apart); Bc = 8·NT, from S's size.
template <class T, int D, int Br = kBr, int NT>
__device__ void issue_qk(float (&S)[NT][4], const uint16_t* Qs, int wg, const uint16_t* Ks) {
  constexpr int Bc = 8 * NT;
  const uint64_t q = hopper::make_desc(hopper::smem_u32(Qs) + wg * 64 * 128, 0, 1024);
  const uint64_t k = hopper::make_desc(hopper::smem_u32(Ks), 0, 1024);
#pragma unroll
  for (int s = 0; s < D / 16; ++s) {  // column block s / 4, 32 bytes a step inside its 128-byte rows
    const uint32_t within = (s % 4) * 32;
    hopper::wgmma_ss<T, Bc>(S, hopper::desc_advance(q, (s / 4) * Br * 128 + within),
                            hopper::desc_advance(k, (s / 4) * Bc * 128 + within), s > 0);
  }
}

// o += P̃·V_j: Bc/16 wgmma's of 64 × D × 16, P̃'s k step s (16 keys) from registers, V's rows
// 16s .. 16s + 15 from shared memory (MN-major: the descriptor's LBO steps over V's 64-column
// blocks, Bc rows × 128 bytes apart; its SBO over groups of 8 keys). Bc = 16·KT, from P's size.
template <class T, int D, int KT>
__device__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&P)[KT][4], const uint16_t* Vs) {
  const uint64_t v = hopper::make_desc(hopper::smem_u32(Vs), 16 * KT * 128, 1024);
#pragma unroll
  for (int s = 0; s < KT; ++s) hopper::wgmma_rs<T, D>(o, P[s], hopper::desc_advance(v, s * 16 * 128), true);
}

// --- the online softmax in two halves (rung 5) -------------------------------------------------------
// Stage 06's online_softmax rescales o in the middle. While P·V of the previous block is still
// running on the tensor cores, o belongs to them: rung 5 splits the step into what needs only S
// (the new max, P̃ = 2^(S·c − m·c) in place, l) and, after the wait, o's rescale by alpha.
template <int NT>
__device__ void softmax_scores(float (&S)[NT][4], float (&m)[2], float (&l)[2], float scale, float (&alpha)[2]) {
  const float c = scale * ptx::kLog2e;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows g and g + 8
    float mx = m[h];
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(S[n][2 * h], S[n][2 * h + 1]));
    const float m_new = tc::quad_max(mx);
    const float shift_c = (m_new == -INFINITY ? 0.0f : m_new) * c;
    alpha[h] = ptx::exp2_approx(m[h] * c - shift_c);
    m[h] = m_new;
    l[h] *= alpha[h];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        S[n][e] = ptx::exp2_approx(fmaf(S[n][e], c, -shift_c));
        l[h] += S[n][e];
      }
  }
}
template <int DT>
__device__ void rescale_o(float (&o)[DT][4], const float (&alpha)[2]) {
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] *= alpha[0], o[d][1] *= alpha[0], o[d][2] *= alpha[1], o[d][3] *= alpha[1];
}

// --- rung 7: the row reductions as trees -----------------------------------------------------------
// x[0] = x[0] + x[1] + ... (or the max), as a tree of log₂ NT levels: level W combines x[n] and
// x[n + W]. A template per level, so that every index is a constant and x stays in registers.
template <int W, int NT, class F>
__device__ inline void tree_reduce(float (&x)[NT], F op) {
#pragma unroll
  for (int n = 0; n < W; ++n) x[n] = op(x[n], x[n + W]);
  if constexpr (W > 1) tree_reduce<W / 2>(x, op);
}
template <int NT, class F>
__device__ inline void tree_reduce(float (&x)[NT], F op) {
  static_assert(NT >= 2 && (NT & (NT - 1)) == 0, "NT a power of two");
  tree_reduce<NT / 2>(x, op);
}

// softmax_scores with the row max and the row sum in four independent chains joined by a tree,
// instead of one chain of dependent instructions (32 fmax's a row at Bc = 128: 8 deep plus 2).
template <int NT>
__device__ void softmax_scores_trees(float (&S)[NT][4], float (&m)[2], float (&l)[2], float scale, float (&alpha)[2]) {
  const float c = scale * ptx::kLog2e;
  float m_new[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[4] = {S[0][2 * h], S[0][2 * h + 1], S[1][2 * h], S[1][2 * h + 1]};  // 4 chains, then a tree
#pragma unroll
    for (int n = 2; n < NT; n += 2)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = fmaxf(v[e], S[n + e / 2][2 * h + e % 2]);
    tree_reduce(v, [](float a, float b) { return fmaxf(a, b); });
    m_new[h] = tc::quad_max(fmaxf(m[h], v[0]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float shift = m_new[h] == -INFINITY ? 0.0f : m_new[h];
    alpha[h] = ptx::exp2_approx(m[h] * c - shift * c);
    m[h] = m_new[h];
    const float shift_c = (m[h] == -INFINITY ? 0.0f : m[h]) * c;
    float sum[4] = {};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        S[n][e] = ptx::exp2_approx(fmaf(S[n][e], c, -shift_c));
        sum[(n % 2) * 2 + e % 2] += S[n][e];
      }
    tree_reduce(sum, [](float a, float b) { return a + b; });
    l[h] = l[h] * alpha[h] + sum[0];
  }
}

}  // namespace attention::fa3

// --- host side -------------------------------------------------------------------------------------------
namespace attention::fa3 {

// A tensor map over Q, K or V (B·H heads of N rows × d 16-bit values): 3-D, (d, N, heads), the box
// 64 columns × `box_rows` rows of one head, written with the 128-byte swizzle. Rows past N belong
// to no head as far as the copy engine is concerned: they are out of bounds and arrive as zeros.
// Made through the driver's cuTensorMapEncodeTiled, found with cudaGetDriverEntryPointByVersion
// (no link against libcuda). Throws on failure.
CUtensorMap make_tensor_map(const void* base, bool bf16, int heads, int N, int d, int box_rows);
// Any 3-D tensor of `heads` × `rows` rows of `inner` elements (stage 09's FP8 tiles and Vᵀ); the
// box `box_inner` × `box_rows`. Both cache their maps by everything the encoding reads.
struct TensorMapSpec {
  const void* base;
  CUtensorMapDataType type;
  int elem_bytes, inner, rows, heads, box_inner, box_rows;
  CUtensorMapSwizzle swizzle;
};
CUtensorMap make_tensor_map(const TensorMapSpec& spec);

// The persistent rungs' tile counter (fa3_host.cu): two ints of device memory, allocated and set
// to 0 on first use, then reset by the kernels themselves (tiles_done).
int* tile_counter();

// The grid of a persistent rung (6-8, tile_overlap): one block a SM, or fewer when there are fewer tiles (or
// than `cap` when it is positive: the tests make one block take many tiles). Throws UsageError past
// 2^31 tiles.
unsigned persistent_grid(const Shape& s, const char* variant, int Br = kBr, int cap = 0);

// The LPT order's heads a group (lpt_tile): as many as keep their K and V, `value_bytes` a value,
// within 16 MB of L2 (1 to heads), or `requested` when it is positive (at most heads).
int lpt_head_group(const Shape& s, int value_bytes, int requested = 0);

// Throws UsageError unless the GPU is a Hopper (sm_90): wgmma and setmaxnreg exist only there.
void require_hopper(const char* variant);

// The launch of a persistent rung: `bytes` of dynamic shared memory, `threads` a block, one block an SM
// (persistent_grid, tiles of Br rows, at most `cap` blocks when positive), the kernel's arguments.
template <class Kernel, class... Args>
void launch_persistent(Kernel kernel, size_t bytes, int threads, const Shape& s, const char* name, int Br, int cap,
                       const Args&... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<persistent_grid(s, name, Br, cap), threads, bytes>>>(args...);
  CUDA_CHECK_LAUNCH();
}

// The tensor maps of Q (boxes of Br rows), K and V (Bc rows) of a problem.
struct TensorMaps {
  CUtensorMap Q, K, V;
};
inline TensorMaps tensor_maps(const Shape& s, course::Dtype t, int d, const void* Q, const void* K, const void* V,
                              int Br = kBr, int Bc = kBc) {
  const bool bf16 = t == course::Dtype::bf16;
  return {make_tensor_map(Q, bf16, s.heads(), s.N, d, Br), make_tensor_map(K, bf16, s.heads(), s.N, d, Bc),
          make_tensor_map(V, bf16, s.heads(), s.N, d, Bc)};
}

// The launch of a TMA rung (2-5): its tensor maps, `smem_bytes` of dynamic shared memory, `threads`
// a block, one block a tile (query block i of head h = blockIdx.x, blockIdx.y).
template <class Kernel>
void launch_per_tile(Kernel kernel, size_t smem_bytes, int threads, const Shape& s, course::Dtype t, int d,
                     const void* Q, const void* K, const void* V, void* O, float* L) {
  const TensorMaps m = tensor_maps(s, t, d, Q, K, V);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  const dim3 grid((s.N + kBr - 1) / kBr, s.heads());
  kernel<<<grid, threads, smem_bytes>>>(m.Q, m.K, m.V, tc::params(Q, K, V, O, L, s.N, s.causal, d));
  CUDA_CHECK_LAUNCH();
}

}  // namespace attention::fa3
