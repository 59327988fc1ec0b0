// The FP8 forward pass: stage 08's last rung (fa3_6_tuned.cu) with e4m3 operands. The schedule is
// rung 6's unchanged: a persistent grid over tiles (query block i of head h; causal, a head's
// heaviest first), a producer warpgroup (one thread issues the TMA copies into a ring of slots),
// consumer warpgroups of 64 query rows each taking turns at the tensor cores (named barriers; two
// at d = 128, three at d = 64, as rung 6 has), and in each the softmax of key block j under the
// products of block j + 1. What FP8 changes:
//
//  - Both products on the e4m3 tensor cores (wgmma ...k32.f32.e4m3.e4m3, hopper.cuh): twice the
//    16-bit rate, and half the bytes of Q, K and V in every tile and every copy.
//  - V as Vᵀ. FP8 wgmma takes B only K-major, and P·V sums over keys, so the keys of V must be
//    contiguous: the quantisation kernel writes V transposed (quantize.cu), which costs nothing
//    there (the bytes are written anyway). FlashAttention-3 transposes V in shared memory instead,
//    as its inputs arrive in FP8 from elsewhere.
//  - P's bytes where the A operand wants them. The accumulator of S gives a thread, in a row, keys
//    2t, 2t+1, 8+2t, 9+2t of each 16; the e4m3 A fragment wants 4 consecutive keys in a register.
//    Each thread packs the 4 it has into one register (pack_p) and Vᵀ's keys are laid in that
//    order (fp8.hpp's key_position): no bytes move between threads.
//  - The scales. S = Qq·Kqᵀ · sq·sk (a descale for the tile's 128 rows of Q, one for each key
//    block of K), folded into the exponent's multiplier: x = S_acc · (scale·log₂e·sq·sk_j). The
//    running max m is kept in those units. V's descale sv_j enters through the rescale of o: o is
//    kept in units of the last block's sv, and the step from block j−1 to j multiplies o by
//    alpha · sv_{j−1}/sv_j, one factor more on a multiply o gets anyway (per tensor: 1).
//  - A fresh accumulator for each key block's P̃·V (issue_pv, promote): the FP8 tensor cores add
//    into their accumulator with fewer bits than fp32, and a sum over all N keys in one accumulator
//    drifts toward zero. The blocks' sums are added in fp32, one FFMA a value where the rescale
//    was one FMUL; D/2 registers more a thread.
//  - The row sum l on the tensor cores (kSumByMma, the default): eight rows of ones appended to Vᵀ
//    in shared memory make P̃·V's product 8 columns wider (n = D + 8), and each of those columns is
//    Σ P̃ over the block's keys. That takes the 64 FADDs a thread spent on the sum each key block
//    (of ~520 instructions) off the consumer warps' instruction stream, for 6 % more work on the
//    tensor cores' P̃·V; and l now sums the e4m3 values of P̃ that P̃·V used (O = Σ P̃·V / Σ P̃ with the
//    same P̃ above and below). kSumByMma = false: the sum by FADDs, as stage 08 (the ablation).
//  - P̃ through shared memory at d = 128 (kPSmem): P̃ is stored by stmatrix into a tile of the
//    warpgroup's (two, alternating by key block) and P̃·V reads it from there (an SS wgmma), so P̃'s 16
//    registers are not held while P̃·V runs. Held (P̃ in registers, the A operand), they and o_j left
//    ptxas no room for the row max without reusing P̃·V's registers, so it waited for P̃·V before the
//    max: 10 % of the consumer warps' stall samples sat on that wait. Through shared memory the wait
//    falls after the exponentials (0.05 % of the samples), and the time gain is small, +0–3 % (the
//    warps were bound by their own instruction stream, not by the wait). At d = 64 the stores and
//    their proxy fence share the MIO queue with the exponentials, which bound that kernel: 0.86×,
//    so d = 64 keeps P̃ in registers. The ablations fp8_<scheme>_preg and _psmem force either way.
//  - P̃ · 2^8. P̃ = 2^(x − m) is at most 1, and e4m3's normal range starts at 2^-6: the small
//    weights of a long row would be subnormal (fewer bits) or 0. The exponent's subtraction of m
//    becomes m − 8: P̃ in [0, 256], O = o/l unchanged (l sums the same scaled values), L less 8 ln 2.
//
//  - An experiment, not the default: O on the tensor cores (kAccTC; the ablations fp8_*_acc2, _acc3,
//    _lazy3). FlashAttention-3 keeps no o_j: P̃·V adds into o, rescaled by FMULs. That frees o_j's 64
//    registers, enough for three consumer warpgroups at d = 128 (160 registers a thread; Br = 192, 3
//    stages). Measured (H100, d = 128, against the default): two warpgroups 0.85-0.95x over three
//    runs (adding into o costs more than the promote did), three 1.00-1.07x, three with the lazy
//    rescale (kLazy) 1.04-1.10x, and in a later run 1.00-1.05x. With V as it is O drifts low on
//    inputs of mean 0.5 (its largest error 3.5 % at N = 4096, 12-13 % at 16384); with V centred by
//    the quantisation (Scheme::centre_v, which these ablations use) it does not. A gain within two
//    runs' disagreement: not the default (chapter 09).
//
// IO: stage 06's model with 1-byte Q, K and V (and Vᵀ's rows padded to 32 keys): O and L as before.
#include <algorithm>
#include <cfloat>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../08_flash_v3/fa3_common.cuh"
#include "check.hpp"
#include "gpu.hpp"
#include "hopper.cuh"
#include "kernels.cuh"

namespace attention::fp8 {

namespace {

// Rung 6's tiles: two consumer warpgroups at d = 128 (Br = 128), three at d = 64 (Br = 192; see
// consumer_warpgroups). Key blocks of 128 at both (the scales' blocks, fp8.hpp's kScaleRows).
constexpr int kBc = 128;
constexpr int kSched = 3;  // named barriers kSched + c: warpgroup c's turn
// The producer's registers after setmaxnreg. The block owns what it was launched with: 65536 / (128 ·
// (kWG + 1)) a thread, rounded down to 8 (168 for two consumer warpgroups, 128 for three), and
// setmaxnreg only moves registers within that pool: a consumer's increase waits until the producer
// has given enough back. Three warpgroups: 32 + 3 · 160 = 4 · 128, so the producer can keep 32 (at
// 24 ptxas spilled its tile count once the ones rows came in). Two: 24 + 2 · 240 = 3 · 168 exactly,
// so 24 (32 left the consumers waiting forever: measured, a hang) and ptxas spills the producer's
// tile count there, 8 bytes, once a tile.
template <int kWG>
constexpr int producer_registers() {
  return kWG == 3 ? 32 : 24;
}

// Three consumer warpgroups at d = 64, as rung 6 of stage 08 has (FlashAttention-3 too, for FP8):
// a warpgroup's softmax there takes longer than its two products (the products of a key block take
// 128 cycles each at the FP8 rate, its 64 × 128 exponentials 512 on the exponential unit), so two
// warpgroups cannot hide each other's softmax; three keep more warps ready to issue. The registers
// fit: 160 a consumer thread hold S, o, o_j and P̃ (64 + 32 + 32 + 16). At d = 128 o and o_j are
// 64 each, and two warpgroups (240 registers) stay.
template <int D>
constexpr int consumer_warpgroups() {
  return D == 64 ? 3 : 2;
}

struct Scales {
  const float *q, *k, *v;  // heads × blocks descales (fp8.hpp)
  int blocks;
  const float* v_mean;  // heads × D: v̄, added to O by the epilogue (V was centred)
};

// Shared memory, in bytes from a 1024-aligned base: Q (Br × D), kStages slots of K (Bc × D) and Vᵀ
// (D × Bc), O's staging (Br × D 16-bit values: written out by TMA stores), then the barriers and
// the two tile numbers. Every tile is 1024-byte aligned (the swizzle's atom).
// kOnes (the row sum by the tensor cores): each slot also holds 8 rows of Bc ones after Vᵀ's D rows.
// kP (P̃ through shared memory): after O's staging, two tiles of 64 × Bc bytes a consumer
// warpgroup, where its P̃ of alternate key blocks is written for P̃·V to read.
// Bc = 256 (the wide rung): Vᵀ's 256 key bytes a row are two tiles of D rows × 128 bytes (the
// 128-byte swizzle's rows are 128 bytes), each with its 8 rows of ones; P̃'s tile likewise two of
// 64 × 128. kStageInP: no region for O's staging (the wide rung stages O in its first P̃ tile).
// At Bc = 128 the layout is the one above.
// kVbar (the wide rung's epilogue, wide_epi and wide_ovl): two slots of v̄ (D floats each), tile n's in
// slot n % 2, copied in with its Q. kTileIH (wide_dec): two more slots of two ints after the tile
// numbers, tile n's query block and head in slot n % 2. kQHalves (wide_qh): Q's two 64-row halves,
// one a consumer warpgroup, each with barriers of its own (half c's two at 2c, the others after
// them) and its own two slots of v̄ (half c's after half 0's).
template <int D, int kStages, int kBr, bool kOnes, bool kP, int Bc = kBc, bool kStageInP = false, bool kVbar = false,
          bool kTileIH = false, bool kQHalves = false>
struct Smem {
  static constexpr int kVtHalf = (D + (kOnes ? 8 : 0)) * 128;  // one 128-key tile of Vᵀ (and its ones)
  static constexpr int kQ = 0, kKV = kBr * D, kSlot = Bc * D + (Bc / 128) * kVtHalf;
  static constexpr int kO = kKV + kStages * kSlot;
  static constexpr int kPt = kO + (kStageInP ? 0 : kBr * D * 2);
  static constexpr int kVb = kPt + (kP ? 2 * kBr * Bc : 0);
  static constexpr int kBar = kVb + (kVbar ? (kQHalves ? 4 : 2) * D * 4 : 0);
  // The barriers: Q's two (kQHalves: two a half), K's and V's four a slot, the tile numbers, [the
  // tile's block and head].
  static constexpr int kQBars = kQHalves ? 4 : 2;
  static constexpr size_t kBytes = size_t(kBar) + 8 * (kQBars + 4 * kStages + 1 + (kTileIH ? 2 : 0)) + 1024;
};

// Rung 6's pipeline (fa3_common.cuh's Pipeline, for one Q slot and its own staging) in bytes: the
// same barriers, phases and protocol; Vᵀ's copy takes the key block's columns of D rows.
// kQPrefetch (wide_pfq): the producer prefetches the first half of each tile's Q (mapQ's box: the first
// warpgroup's 64 rows) into L2 as soon as it takes the tile.
template <int D, int kStages, int kBr, bool kOnes, bool kP, int Bc = kBc, bool kStageInP = false, bool kVbar = false,
          bool kTileIH = false, bool kQHalves = false, bool kQPrefetch = false>
struct Pipeline {
  using L = Smem<D, kStages, kBr, kOnes, kP, Bc, kStageInP, kVbar, kTileIH, kQHalves>;
  uint8_t* smem;
  __device__ uint8_t* Q() const { return smem + L::kQ; }
  __device__ uint8_t* K(int it) const { return smem + L::kKV + (it % kStages) * L::kSlot; }
  __device__ uint8_t* Vt(int it) const { return K(it) + Bc * D; }
  __device__ uint16_t* O() const { return reinterpret_cast<uint16_t*>(smem + L::kO); }
  // Consumer warpgroup c's P̃ tile for key blocks of parity `it & 1` (64 rows × Bc bytes).
  __device__ uint8_t* P(int c, int it) const { return smem + L::kPt + (2 * c + (it & 1)) * 64 * Bc; }
  // Tile n's v̄ (kQHalves: warpgroup c's copy, which comes with its half of Q).
  __device__ const float* vbar(int n, int c = 0) const {
    return reinterpret_cast<const float*>(smem + L::kVb) + ((n & 1) + 2 * c) * D;
  }
  __device__ uint64_t* bar(int k) const { return reinterpret_cast<uint64_t*>(smem + L::kBar) + k; }
  // Q's barriers (kQHalves: half c's, the rows of consumer warpgroup c).
  __device__ uint64_t* q_full(int c = 0) const { return bar(2 * c); }
  __device__ uint64_t* q_empty(int c = 0) const { return bar(2 * c + 1); }
  __device__ uint64_t* k_full(int it) const { return bar(L::kQBars + it % kStages); }
  __device__ uint64_t* v_full(int it) const { return bar(L::kQBars + kStages + it % kStages); }
  __device__ uint64_t* k_empty(int it) const { return bar(L::kQBars + 2 * kStages + it % kStages); }
  __device__ uint64_t* v_empty(int it) const { return bar(L::kQBars + 3 * kStages + it % kStages); }
  __device__ static int phase(int it) { return (it / kStages) & 1; }
  __device__ volatile int* tile_slot(int n) const {
    return reinterpret_cast<volatile int*>(bar(L::kQBars + 4 * kStages)) + (n & 1);
  }
  __device__ volatile int* tile_ih(int n) const {  // kTileIH: tile n's query block and head
    return reinterpret_cast<volatile int*>(bar(L::kQBars + 4 * kStages + 1)) + 2 * (n & 1);
  }
  // The rows of ones after each slot's Vᵀ (e4m3 1.0 is 0x38), written once: the copies never touch
  // them. Every thread writes its share and makes it visible to the tensor cores (the async proxy);
  // the __syncthreads() after init orders it before any wgmma.
  __device__ void fill_ones() const {
    if constexpr (kOnes) {
      constexpr int kWords = 8 * 128 / 4, kTiles = kStages * (Bc / 128);  // a tile's ones, in 32-bit words
      for (int i = threadIdx.x; i < kTiles * kWords; i += blockDim.x)
        reinterpret_cast<uint32_t*>(Vt(i / kWords / (Bc / 128)) + (i / kWords) % (Bc / 128) * L::kVtHalf +
                                    128 * D)[i % kWords] = 0x38383838u;
      hopper::fence_proxy_async();
    }
  }
  __device__ void init(int consumer_warps) const {
    for (int c = 0; c < (kQHalves ? 2 : 1); ++c) {
      hopper::mbarrier_init(q_full(c), 1);
      hopper::mbarrier_init(q_empty(c), 32 * consumer_warps / (kQHalves ? 2 : 1));  // every consumer thread (as rung 6)
    }
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(k_full(s), 1);
      hopper::mbarrier_init(v_full(s), 1);
      hopper::mbarrier_init(k_empty(s), consumer_warps);
      hopper::mbarrier_init(v_empty(s), consumer_warps);
    }
    hopper::fence_barrier_init();
  }
  // The producer (one thread), once tile n's Q slot is free (q_empty): its Q, then its key blocks
  // from the last to the first, numbered on from `it`; returns the next number.
  // kVbar: the head's v̄ too, into slot n % 2 (the slot of tile n − 2, whose epilogue ended before
  // this tile's Q slot was released). k_loaded: the first block's K was copied already (early_k).
  __device__ int produce(const CUtensorMap* mapQ, const CUtensorMap* mapK, const CUtensorMap* mapVt, int row0, int h,
                         int blocks, int it, const float* v_mean, int n, bool k_loaded = false) const {
    if constexpr (kQHalves) {  // half 0 once its warpgroup gave it back (the caller waited), then half 1
      for (int c = 0; c < 2; ++c) {
        if (c == 1) hopper::mbarrier_wait(q_empty(1), (n & 1) ^ 1);
        hopper::mbarrier_arrive_expect_tx(q_full(c), kBr / 2 * D + D * 4);
        hopper::tma_load_3d(Q() + c * kBr / 2 * D, mapQ, q_full(c), 0, row0 + c * kBr / 2, h);
        hopper::bulk_load(const_cast<float*>(vbar(n, c)), v_mean + size_t(h) * D, D * 4, q_full(c));
      }
    } else {
      hopper::mbarrier_arrive_expect_tx(q_full(), kBr * D + (kVbar ? D * 4 : 0));
      hopper::tma_load_3d(Q(), mapQ, q_full(), 0, row0, h);
      if constexpr (kVbar) hopper::bulk_load(const_cast<float*>(vbar(n)), v_mean + size_t(h) * D, D * 4, q_full());
    }
    for (int j = blocks - 1; j >= 0; --j, ++it) {
      if (!k_loaded || j != blocks - 1) load_k(mapK, j, h, it);
      hopper::mbarrier_wait(v_empty(it), phase(it) ^ 1);
      hopper::mbarrier_arrive_expect_tx(v_full(it), Bc * D);
#pragma unroll
      for (int x = 0; x < Bc / 128; ++x)  // columns j·Bc + 128x.. of Vᵀ's D rows
        hopper::tma_load_3d(Vt(it) + x * L::kVtHalf, mapVt, v_full(it), j * Bc + 128 * x, 0, h);
    }
    return it;
  }
  __device__ void load_k(const CUtensorMap* mapK, int j, int h, int it) const {
    hopper::mbarrier_wait(k_empty(it), phase(it) ^ 1);
    hopper::mbarrier_arrive_expect_tx(k_full(it), Bc * D);
    hopper::tma_load_3d(K(it), mapK, k_full(it), 0, j * Bc, h);
  }
  // Tile t of the persistent grid: head h, query block i (causal: a head's last, heaviest, first).
  // group > 1 (causal, wide_ovl): FlashAttention-3's LPT order, the heads in groups of `group`, a
  // group's tiles heaviest first across its heads (fa3::lpt_tile, stage 08's fa3_common.cuh).
  __device__ static void tile(int t, int Tr, bool causal, int& i, int& h, int heads = 1, int group = 1) {
    if (group > 1 && causal) return fa3::lpt_tile(t, Tr, heads, group, i, h);
    h = t / Tr;
    i = causal ? Tr - 1 - t % Tr : t % Tr;
  }
  // The producer's whole loop (one thread): the block's first tile, then one from the counter each time,
  // each published in its tile slot once its Q slot is free, and produced; -1 when none is left.
  // Causal tiles are laid from N rounded up to 64 (N64, see the kernels).
  __device__ void produce_tiles(const CUtensorMap* mapQ, const CUtensorMap* mapK, const CUtensorMap* mapVt,
                                const tc::Params& p, int N64, int Tr, int tiles, int* next_tile,
                                const float* v_mean = nullptr, int group = 1, bool early_k = false) const {
    int it = 0;
    for (int n = 0, t = blockIdx.x;; ++n, t = atomicAdd(next_tile, 1) + gridDim.x) {
      if (t >= tiles) {
        hopper::mbarrier_wait(q_empty(), (n & 1) ^ 1);
        *tile_slot(n) = -1;
        hopper::mbarrier_arrive(q_full());
        if constexpr (kQHalves) {
          hopper::mbarrier_wait(q_empty(1), (n & 1) ^ 1);
          hopper::mbarrier_arrive(q_full(1));
        }
        fa3::tiles_done(next_tile);
        return;
      }
      int i, h;
      tile(t, Tr, p.causal, i, h, tiles / Tr, group);
      // kQPrefetch: the tile's first Q half into L2 now (the first warpgroup's rows, whose wait the trace
      // showed), a block or more before its slot is free: that copy then waits for L2, not device memory.
      // (The second half too was tried: 0.988-0.994, see the overlap kernel's notes.)
      if constexpr (kQPrefetch) hopper::tma_prefetch_3d(mapQ, 0, query_row0(N64, kBr, p.causal, true, i), h);
      // early_k (wide_ovl): the tile's first K block before the wait for Q's slot, which the
      // consumers release only after the last tile's last S (the trace: 0.4 µs waiting for that K).
      if (early_k) load_k(mapK, key_blocks(N64, kBr, Bc, p.causal, i, true) - 1, h, it);
      hopper::mbarrier_wait(q_empty(), (n & 1) ^ 1);
      *tile_slot(n) = t;  // published by the arrive on q_full (release)
      if constexpr (kTileIH) tile_ih(n)[0] = i, tile_ih(n)[1] = h;  // wide_dec: decoded once, here
      it = produce(mapQ, mapK, mapVt, query_row0(N64, kBr, p.causal, true, i), h,
                   key_blocks(N64, kBr, Bc, p.causal, i, true), it, v_mean, n, early_k);
    }
  }
  __device__ void wait_q(int n, int c = 0) const { hopper::mbarrier_wait(q_full(c), n & 1); }
  __device__ void wait_k(int it) const { hopper::mbarrier_wait(k_full(it), phase(it)); }
  __device__ void wait_v(int it) const { hopper::mbarrier_wait(v_full(it), phase(it)); }
  __device__ void release_q(int c = 0) const { hopper::mbarrier_arrive(q_empty(c)); }
  __device__ void release_k(int it) const {
    if (threadIdx.x % 32 == 0) hopper::mbarrier_arrive(k_empty(it));
  }
  __device__ void release_v(int it) const {
    if (threadIdx.x % 32 == 0) hopper::mbarrier_arrive(v_empty(it));
  }
  // A key block a warpgroup skips (causal: past its rows): its slots back once their loads landed.
  __device__ void skip_block(int it) const {
    wait_k(it);
    release_k(it);
    wait_v(it);
    release_v(it);
  }
};

// S = Q·K_jᵀ for warpgroup wg's 64 rows: D/32 wgmma's of 64 × Bc × 32, both operands K-major, rows
// of D bytes in the D-byte swizzle (128 bytes: mode 1, SBO 1024; 64 bytes: mode 2, SBO 512).
// Bc = 256 (the wide rung): one wgmma of 64 × 256 × 32 a step, K's 256 rows in the same swizzle.
template <int D, int Bc = kBc>
__device__ void issue_qk(float (&S)[Bc / 8][4], uint32_t Qs, int wg, uint32_t Ks) {
  constexpr uint32_t swizzle = D == 128 ? 1 : 2, sbo = 8 * D;
  const uint64_t q = hopper::make_desc(Qs + wg * 64 * D, 0, sbo, swizzle);
  const uint64_t k = hopper::make_desc(Ks, 0, sbo, swizzle);
#pragma unroll
  for (int s = 0; s < D / 32; ++s)
    hopper::wgmma_ss_e4m3<Bc>(S, hopper::desc_advance(q, 32 * s), hopper::desc_advance(k, 32 * s), s > 0);
}

// o_j = P̃·V_j, a fresh accumulator (the first step does not add): Bc/32 wgmma's of 64 × NV × 32, P̃
// from registers, Vᵀ's D rows of Bc = 128 key bytes from shared memory (K-major, the 128-byte
// swizzle); NV = D + 8 when the 8 rows of ones follow (the row sums in o_j's last 8 columns).
// Not o += P̃·V_j as in stage 08: the FP8 tensor cores add into their accumulator with fewer bits
// than fp32 (truncating what falls below them), so a long sum in one accumulator drifts toward zero:
// measured −12 % on O at N = 16384 with inputs of mean 0.5. Each block's 128 keys are summed on the
// tensor cores; the blocks are added in fp32 (promote), DeepSeek-V3's remedy.
// fresh = false (kAccTC): the first step adds too, into the accumulator o itself.
template <int NV>
__device__ void issue_pv(float (&o)[NV / 8][4], const uint32_t (&P)[kBc / 32][4], uint32_t Vts, bool fresh) {
  const uint64_t v = hopper::make_desc(Vts, 0, 1024, 1);
#pragma unroll
  for (int s = 0; s < kBc / 32; ++s)
    hopper::wgmma_rs_e4m3<NV>(o, P[s], hopper::desc_advance(v, 32 * s), s > 0 || !fresh);
}
// The same with P̃ from shared memory (kPSmem): the warpgroup's 64 rows of Bc bytes (K-major, the
// 128-byte swizzle, as Q at d = 128), written by store_p. Bc = 256: steps 4..7 read the second
// 128-key tiles of P̃ and of Vᵀ (kVtHalf bytes on: Smem's).
template <int NV, int Bc = kBc, int kVtHalf = 0>
__device__ void issue_pv(float (&o)[NV / 8][4], uint32_t Ps, uint32_t Vts, bool fresh) {
#pragma unroll
  for (int x = 0; x < Bc / 128; ++x) {
    const uint64_t a = hopper::make_desc(Ps + x * 64 * 128, 0, 1024, 1), v = hopper::make_desc(Vts + x * kVtHalf, 0, 1024, 1);
#pragma unroll
    for (int s = 0; s < 4; ++s)
      hopper::wgmma_ss_e4m3<NV>(o, hopper::desc_advance(a, 32 * s), hopper::desc_advance(v, 32 * s),
                                x > 0 || s > 0 || !fresh);
  }
}
// o = o · a + o_j, in fp32: the running sum rescaled (a: the rescale that o owed, and V's descale
// step) and the block's sum added, one FFMA a value (stage 08's rescale was one FMUL). oj may have a
// tile more (the row sums), not added here.
template <int DT, int DJ>
__device__ void promote(float (&o)[DT][4], const float (&oj)[DJ][4], const float (&a)[2]) {
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = fmaf(o[d][e], a[e / 2], oj[d][e]);
}

// kLin (wide_lin, an experiment on wide_stsm): P̃ without the exponential unit (MUFU). A float's bit pattern, read
// as an integer, is close to a linear function of its logarithm (Mitchell; Schraudolph's exponential): fp16's 16
// bits are about 1024·(log₂ v + 15). So 2^x's fp16 pattern is y = 1024·(x + 15), which two FFMAs write into a float's
// low 16 bits: y/R clamped to [0, 1] (FFMA.SAT: below 2^-15, and −∞ where masked, go to 0, and so would a NaN,
// which ex2 would carry into O; R = 0x7BFF, fp16's largest finite pattern), then t_sat·R + 1.5·2^23, where the
// float's ulp is 1, so y is rounded to an integer. A byte permutation pairs two such patterns as f16x2, and cvt
// turns each pair into two e4m3 bytes (rounded, subnormals and saturation as before). What is approximated is
// fp16's mantissa: 1 + f for 2^f, up to 6.1% high; δ = 44/1024 of a binade centres it (kLinDelta, about ±3%). A CPU
// model (N(0, 1) scores, d = 128): P̃'s relative error rms 3.3% against 2.7% for e4m3 alone, O's RMSE 7.8e-4
// against 6.6e-4.
// What it should buy: the softmax's 128 MUFU.EX2 a thread a block (the largest share of the consumers' stall
// samples, waiting on MUFU's issue) become 128 FFMAs; per 4 scores 13 instructions where there were 11.
// Measured (H200, two runs): 1.09-1.14 of wide_stsm's speed, 1.61-1.83x stage 08's fastest call at d = 128; O's
// RMSE 5% higher on N(0, 1) inputs, 0-1% on FA-3's outlier inputs (chapter 09).
// kLinR, kLinMagic, kLinDelta, lin_a and lin_b: fp8.hpp, shared with the CPU's replica (lin_e4m3) that test_cpu.cpp checks.
struct LinP {  // t_sat = S·a[half] + b[row]: the multipliers of one block's two 128-key halves and two rows
  float a[2], b[2];
  __device__ LinP(float c0, float c1, const float (&base)[2]) {
    a[0] = lin_a(c0), a[1] = lin_a(c1);
    for (int h = 0; h < 2; ++h) b[h] = lin_b(base[h]);
  }
};
__device__ inline float lin_t(float s, float a, float b) {
  float t;
  asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(t) : "f"(s), "f"(a), "f"(b));
  return fmaf(t, kLinR, kLinMagic);
}
__device__ inline uint32_t pack_lin(float t0, float t1, float t2, float t3) {
  const uint32_t h01 = __byte_perm(__float_as_uint(t0), __float_as_uint(t1), 0x5410);
  const uint32_t h23 = __byte_perm(__float_as_uint(t2), __float_as_uint(t3), 0x5410);
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(lo) : "r"(h01));
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(hi) : "r"(h23));
  return uint32_t(lo) | uint32_t(hi) << 16;
}
template <bool kLin>
__device__ inline uint32_t pack4(float x0, float x1, float x2, float x3) {
  if constexpr (kLin) return pack_lin(x0, x1, x2, x3);
  else return hopper::pack_e4m3(x0, x1, x2, x3);
}

// P̃ (fp32, S's accumulator layout) as the e4m3 A operand of P·V: step s (keys 32s..32s+31) from
// column tiles 4s..4s+3; each register the 4 values a thread holds of one row in two tiles.
template <int Bc = kBc, bool kLin = false>
__device__ inline void pack_p(const float (&S)[Bc / 8][4], uint32_t (&P)[Bc / 32][4]) {
#pragma unroll
  for (int s = 0; s < Bc / 32; ++s) {
    const float(&a)[4] = S[4 * s], (&b)[4] = S[4 * s + 1], (&c)[4] = S[4 * s + 2], (&d)[4] = S[4 * s + 3];
    P[s][0] = pack4<kLin>(a[0], a[1], b[0], b[1]);  // row g,     keys 2t, 2t+1, 8+2t, 9+2t
    P[s][1] = pack4<kLin>(a[2], a[3], b[2], b[3]);  // row g + 8
    P[s][2] = pack4<kLin>(c[0], c[1], d[0], d[1]);  // row g,     keys 16 + the same
    P[s][3] = pack4<kLin>(c[2], c[3], d[2], d[3]);  // row g + 8
  }
}

// P̃'s registers (pack_p) to the warpgroup's tile in shared memory: per 32-key step one stmatrix of
// four 8 × 16-byte matrices (rows g and g + 8 of the warp, the step's two 16-byte halves), each lane
// naming one row of one matrix in the swizzled tile. Then fence.proxy.async: the wgmma that reads
// the tile is the async proxy, and it is issued after the warpgroup's next barrier (wait_turn).
// Bc = 256: steps 4..7 go to the second 64 × 128-byte tile.
__device__ inline uint32_t p_step_address(uint32_t Ps, int s, int warp_in_wg) {
  const int lane = threadIdx.x % 32, r = lane % 8, row = 16 * warp_in_wg + r + 8 * ((lane / 8) % 2), half = lane / 16;
  return Ps + (s / 4) * 64 * 128 + row * 128 + (((2 * (s % 4) + half) ^ r) << 4);
}
template <int Bc = kBc>
__device__ inline void store_p(const uint32_t (&P)[Bc / 32][4], uint32_t Ps, int warp_in_wg) {
#pragma unroll
  for (int s = 0; s < Bc / 32; ++s) hopper::stmatrix_x4(p_step_address(Ps, s, warp_in_wg), P[s]);
  hopper::fence_proxy_async();
}

// A block's multiplier c·sq·sk (its scores' unit), never 0. Below 2^-149 it rounds to 0 in fp32, and a masked score
// (−inf) times 0 is NaN. Only bf16 inputs get there, Q's and K's amax multiplying to below about 2^-128 (an amax
// below 2^-119 is floored there, a descale of 2^-127.8: two multiply to 2^-255.6). Every score is then below
// 448²·d·2^-149 < 2^-100 in size, which no exponential tells from 0; floored at FLT_MIN (2^-126), still below
// 2^-100. One FMNMX a block.
__device__ inline float score_unit(float cq, float sk) { return fmaxf(cq * sk, FLT_MIN); }

// Rung 6's softmax_scores_tuned with the block's multiplier cj = scale·log₂e·sq·sk_j: m is in units
// of x = S_acc·cj; P̃ = 2^(x − m + 8). kPolyEvery > 0: every kPolyEvery-th 8-key tile's exponentials
// by stage 08's exp2_poly on the FMA pipe (an experiment: at d = 128 the exponential unit's 16 a
// clock per SM take as long as the FP8 products of a block, 512 cycles each for a warpgroup).
// kSum = false: l is not summed here (the tensor cores sum it with P̃·V).
// kLazy (an experiment, FlashAttention-4's lazy rescale): m moves only when the block's max passes it
// by more than kLazyTau (log₂ units); otherwise alpha is exactly 1 and o needs no rescale. P̃ is then at
// most 2^(8 + kLazyTau), inside e4m3's 448 = 2^8.8.
// kLin (fp8_*_lin, the experiment of wide_lin on this kernel): S left as lin_t's floats, which pack_p<kBc, true>
// turns into P̃'s bytes; l must then come from the tensor cores (kSum false). What it should buy: at d = 64 the
// exponentials take twice the products' time on MUFU (its pipe 71% busy in Nsight Compute), so 1.25-1.6x was
// predicted there, 1.00-1.10x at d = 128. Measured (H200): 1.12-1.15x at d = 64, 1.04-1.06x at d = 128. At d = 64 the
// issue slots are then its busiest resource (54 -> 67% busy): a score costs 4 instructions (FMNMX, two FFMAs, half a
// PRMT, half an F2FP) where it cost 3.75 with one on MUFU. With P̃ through shared memory at d = 64 (fp8_*_lin_psmem:
// no spill, where this one spills 44 bytes) it was 0.95-0.97x of this: 3.6% more instructions (about 17 a warp a block
// more: the stores, the fence and their addresses, less the spill's 5 reloads) and longer scoreboard waits.
constexpr float kLazyTau = 0.8f;
template <int kPolyEvery, bool kSum, int NT, bool kLazy = false, bool kLin = false>
__device__ void softmax_scores(float (&S)[NT][4], float (&m)[2], float (&l)[2], float cj, float (&alpha)[2]) {
  static_assert(!(kLin && (kSum || kPolyEvery > 0)), "P̃ by fp16's bit pattern: l on the tensor cores, no polynomial");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[4] = {S[0][2 * h], S[0][2 * h + 1], S[1][2 * h], S[1][2 * h + 1]};
#pragma unroll
    for (int n = 2; n < NT; n += 2)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = fmaxf(v[e], S[n + e / 2][2 * h + e % 2]);
    fa3::tree_reduce(v, [](float a, float b) { return fmaxf(a, b); });
    float m_new = tc::quad_max(fmaxf(m[h], v[0] * cj));
    if constexpr (kLazy) m_new = m_new > m[h] + kLazyTau ? m_new : m[h];
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::exp2_approx(m[h] - shift);
    m[h] = m_new;
    const float base = shift - 8.0f;  // P̃ · 2^8
    if constexpr (kLin) {  // one multiplier a block (cj) and one offset a row: lin_t's FFMA.SAT operands
      const float a = lin_a(cj), b = lin_b(base);
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) S[n][e] = lin_t(S[n][e], a, b);
      continue;
    }
    float sum[4] = {};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        const float x = fmaf(S[n][e], cj, -base);
        bool poly = false;
        if constexpr (kPolyEvery > 0) poly = n % kPolyEvery == kPolyEvery - 1;
        S[n][e] = poly ? fa3::exp2_poly(x) : ptx::exp2_approx(x);
        if constexpr (kSum) sum[(n % 2) * 2 + e % 2] += S[n][e];
      }
    if constexpr (kSum) {
      fa3::tree_reduce(sum, [](float a, float b) { return a + b; });
      l[h] = l[h] * alpha[h] + sum[0];
    }
  }
}

template <class T, int D, int kStages, int kPolyEvery, bool kSumByMma, bool kPSmem,
          int kWG = consumer_warpgroups<D>(), bool kAccTC = false, bool kLazy = false, bool kLin = false>
__global__ void __launch_bounds__(128 * (kWG + 1), 1)
    flash_v3_fp8(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                 const __grid_constant__ CUtensorMap mapVt, const __grid_constant__ CUtensorMap mapO, tc::Params p,
                 Scales sc, int heads, int* next_tile) {
  constexpr int NT = kBc / 8, DT = D / 8, kBr = 64 * kWG, NV = D + (kSumByMma ? 8 : 0);
  extern __shared__ uint8_t smem_raw[];
  using Pipe = Pipeline<D, kStages, kBr, kSumByMma, kPSmem>;
  const Pipe pipe{reinterpret_cast<uint8_t*>(fa3::align1024(smem_raw))};
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  // Causal tiles are laid from the last row back, as in rung 6 (a head's first tile may start before
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
      // As rung 6: causal, a warpgroup skips the key blocks past its own rows (an empty turn);
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
      // kAccTC (the experiment, FlashAttention-3's way): no oj; P̃·V adds into o itself on the tensor
      // cores, o is rescaled by FMULs before it, and l is summed by FADDs (kSumByMma off).
      static_assert(!(kAccTC && kSumByMma), "O on the tensor cores sums l by FADDs");
      constexpr int JT = kAccTC ? 1 : NV / 8;
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
      // the next P̃·V is issued (promote_held, under Q·Kᵀ). Done right after the wait for P̃·V (the
      // first version), it sat between the softmax and the next turn, and ptxas hoisted that wait to
      // the row max to mix the promote's FFMAs (which do not need this block's softmax) into it:
      // Nsight Compute found the wait the second-hottest instruction, the tensor cores 37 % busy.
      // Moved: 733 -> 895 TFLOP/s at d = 128, N = 16384. (The wait still stands before the
      // exponentials in the SASS: ptxas may always wait earlier than asked.)
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
        auto& acc = [&]() -> float(&)[NV / 8][4] {
          if constexpr (kAccTC) return o[0];
          else return oj[0];
        }();
        if constexpr (kPSmem) issue_pv<NV>(acc, at(pipe.P(cwg, k_)), at(pipe.Vt(k_)), !kAccTC);
        else issue_pv<NV>(acc, P, at(pipe.Vt(k_)), !kAccTC);
      };
      auto make_p = [&](int k_) {
        pack_p<kBc, kLin>(S[0], P);
        if constexpr (kPSmem) store_p(P, at(pipe.P(cwg, k_)), cwarp % 4);
      };
      softmax_scores<kPolyEvery, !kSumByMma, NT, kLazy, kLin>(S[0], m, l, score_unit(cq, k_scale(blocks - 1 - b0)), alpha);
      make_p(it + b0);
      // kSumByMma: l = l·(f·u) + the block's row sum, as soon as P̃·V is complete, so that the row
      // sums' registers are free again before the next turn (at the turn, S, o, oj and P̃ are all
      // held, the row sums' four more would make ptxas serialise the wgmma's: its warning C7511).
      auto add_row_sum = [&] {
        if constexpr (kSumByMma && !kAccTC)
          l[0] = fmaf(l[0], f_held[0] * u_held, oj[0][DT][0]), l[1] = fmaf(l[1], f_held[1] * u_held, oj[0][DT][2]);
      };
      auto promote_held = [&] {  // o = o·f + oj under the products just issued; oj then free for P̃·V
        if constexpr (kAccTC) {
          // o = o·f before the P̃·V of the block whose softmax set f_next adds into it (not f_held, the
          // fresh accumulator's factor, a block older: the first version used it, and its error was
          // this bug's, not the tensor cores'). kLazy: skipped while the thread's factors are 1.
          if (!kLazy || f_next[0] != 1.0f || f_next[1] != 1.0f)
#pragma unroll
            for (int d = 0; d < DT; ++d)
#pragma unroll
              for (int e = 0; e < 4; ++e) o[0][d][e] *= f_next[e / 2];
        } else {
          promote(o[0], oj[0], f_held);
        }
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
        pipe.wait_v(k - 1);  // here, not before the turn: checked there too, measured 0.86-0.89x at d = 128
        issue_pv_of(k - 1);
        hopper::wgmma_commit();
        pass_turn();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(S[0]);
        pipe.release_k(k);
        if (b == blocks - 1) pipe.release_q();
        mask(b);
        softmax_scores<kPolyEvery, !kSumByMma, NT, kLazy, kLin>(S[0], m, l, cj, alpha);
        const float units = sv / sv_j;  // o owes alpha and the step to units of sv_j (1 per tensor)
        if constexpr (kSumByMma) u_next = sv_j / sv;
        sv = sv_j;
        f_next[0] = alpha[0] * units, f_next[1] = alpha[1] * units;
        // kPSmem: P̃ goes to the other tile while P̃·V reads this one, so nothing in the softmax
        // needs P̃·V to be complete (nor its registers: P̃ no longer held through it).
        if constexpr (kPSmem) make_p(k);
        hopper::wgmma_wait<0>();
        if constexpr (kAccTC) hopper::fence_registers(o[0]);
        else hopper::fence_registers(oj[0]);
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
      if constexpr (kAccTC) hopper::fence_registers(o[0]);
      else hopper::fence_registers(oj[0]);
      pipe.release_v(k);
      if constexpr (!kAccTC) {
        add_row_sum();
        promote(o[0], oj[0], f_held);
      }
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

// ---- the wide rung: key blocks of 256 (FlashAttention-3's FP8 tiles at d = 128 are 128 × 224) ----
// What changed from the kernel above (d = 128), and what it should buy. Its loop spends about 500
// instructions a warp on a key block of 128: some 250 the per-key floor (the exponent's FFMA,
// MUFU.EX2, the max's FMNMX, the e4m3 pack), the rest paid once a block (the promote of o_j, the
// row max's shuffles, the barriers, the wgmma issue). Blocks of 256 pay that once for twice the
// keys: about 0.6 of the instructions a key (measured: 664 a warp for 256 keys).
//  - S for 256 keys is 128 registers a thread, so the fresh accumulator o_j (68) no longer fits
//    beside o: O is accumulated on the tensor cores with the lazy rescale (the experiment kAccTC;
//    it drifts unless V is centred, which the program does for this rung).
//  - l from the 8 columns of ones, part of o's accumulator, but not summed there over all N keys:
//    its terms are all positive and it drifted low like O on uncentred V (L 0.034 too small at
//    N = 2049), so after each P̃·V the ones' registers are added into an fp32 l and zeroed (a fresh
//    accumulator for l alone), and l is rescaled beside o. V's descale must be one for the tensor
//    (a per-block step of o's unit would not apply to l): launch_attention requires it.
//  - K's descales, one per 128 keys, differ between a block's halves: two multipliers in the softmax.
//  - Shared memory: two stages of 256 keys (the bytes of four of 128) and two P̃ tiles a warpgroup,
//    so that P̃ is stored while the previous P̃·V still reads the other tile (with one tile, stored
//    after that P̃·V, ptxas moved the wait for it above the whole softmax). O's staging has no
//    region of its own (227 KB): each warpgroup stages O in its first P̃ tile, free once the tile's
//    last P̃·V has completed; the next tile's first P̃ store waits until the copy engine has read it.
constexpr int kBcWide = 256;

// softmax_scores (kLazy, l on the tensor cores) for 256 keys: tiles 0..15 with K's descale c0,
// 16..31 with c1 (each half's max scaled by its own, positive, multiplier).
// kOptimistic (the experiment below): m = max(m, the block's max + kHeadroom) for every row, so that
// the next blocks' scores mostly stay below m (P̃ at most 2^(8 − kHeadroom) right after a move).
constexpr float kHeadroom = 3.0f;
// kLin (wide_lin): S left as lin_t's floats, which pack_p<Bc, true> turns into P̃'s bytes.
template <int NT, bool kOptimistic = false, bool kLin = false>
__device__ void softmax_scores_wide(float (&S)[NT][4], float (&m)[2], float c0, float c1, float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v[2][4];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int n0 = x * NT / 2;
#pragma unroll
      for (int e = 0; e < 4; ++e) v[x][e] = S[n0 + e / 2][2 * h + e % 2];
#pragma unroll
      for (int n = n0 + 2; n < n0 + NT / 2; n += 2)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[x][e] = fmaxf(v[x][e], S[n + e / 2][2 * h + e % 2]);
      fa3::tree_reduce(v[x], [](float a, float b) { return fmaxf(a, b); });
    }
    const float block_max = fmaxf(v[0][0] * c0, v[1][0] * c1);
    float m_new;
    if constexpr (kOptimistic) {  // the block's own max + kHeadroom: a row whose m is higher keeps it
      m_new = fmaxf(m[h], tc::quad_max(block_max) + kHeadroom);
    } else {
      m_new = tc::quad_max(fmaxf(m[h], block_max));
      m_new = m_new > m[h] + kLazyTau ? m_new : m[h];
    }
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::exp2_approx(m[h] - shift);
    m[h] = m_new;
    const float base = shift - 8.0f;  // P̃ · 2^8
    if constexpr (kLin) {
      const float base2[2] = {base, base};
      const LinP lp(c0, c1, base2);
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) S[n][e] = lin_t(S[n][e], lp.a[n < NT / 2 ? 0 : 1], lp.b[0]);
    } else {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) S[n][e] = ptx::exp2_approx(fmaf(S[n][e], n < NT / 2 ? c0 : c1, -base));
    }
  }
}

// ---- an experiment on the wide rung: the optimistic max (fp8_*_wide_opt; chapter 09) ----
// What changed: after a tile's first block, no row max. P̃ is computed with the running max m as it
// stands, and the block's max is taken (and P̃ computed again) only when some P̃ came out too large,
// which the packed e4m3 bytes tell without a float compare (FlashDecoding++'s "unified max" with its
// recomputation on overflow). In the fallback and the first block m goes kHeadroom = 3 log₂ units
// above the block's max (a row whose max is already that high keeps it), so that later blocks
// rarely pass it (P̃ then tops at 2^5, inside e4m3's normal range down to 2^-6: only weights below
// 2^-11 of the row's largest lose bits to the subnormals).
// What it should buy: the 128 FMNMX, the shuffles and the wait for the max off every block (18 % of
// the loop's instructions); predicted +8-14 %. Measured (H100, d = 128, ABBA against the wide rung):
// the instructions fell 18 % and the time 1-4 %: the warps were not bound by their own count; while
// the exponentials run they wait on MUFU's issue (31 % of the loop's stall samples), and the unit
// idles through the rest of the block.
// A first version (headroom 2, m moved only past a threshold) fell back in most causal tiles'
// second blocks, where the diagonal block had left short rows a low max: 0.92-0.93 there.
// kPolyEvery (--exp2-poly-every 4, 8): the polynomial as in the default kernel; measured 0.93 at
// N = 4096 and 16384 with a quarter, as it was there.
//
// The optimistic step (kOptimistic): P̃ = 2^(x − m + 8) for the block's 256 keys with m as it stands,
// no row max taken; packed as pack_p and stored as store_p, 32 keys at a time, S left as it was.
// Returns true if some P̃ reached e4m3's largest value, 448 (it rounds there from 432 = 2^8.755 up:
// x passed m by 0.755 or more): then m must move and the block be done again. The test is on the
// packed bytes: e4m3's codes are ordered as its values, P̃ ≥ 0 and saturates at 0x7E, so adding 2 to
// every byte carries into its top bit only from 0x7E.
// kPolyEvery > 0: every kPolyEvery-th 8-key tile's exponentials by exp2_poly (stage 08's) on the FMA
// pipe, x first clamped to 16 (2^16 saturates to 448 as ex2 would; unclamped, the polynomial's
// exponent would overflow into the sign and hide the overflow from the test).
template <int NT, int kPolyEvery = 0, bool kLin = false>
__device__ bool optimistic_p(const float (&S)[NT][4], const float (&m)[2], float c0, float c1, uint32_t Ps,
                             int warp_in_wg) {
  const float base[2] = {(m[0] == -INFINITY ? 0.0f : m[0]) - 8.0f, (m[1] == -INFINITY ? 0.0f : m[1]) - 8.0f};
  [[maybe_unused]] const LinP lp(c0, c1, base);
  uint32_t hit = 0;
#pragma unroll
  for (int s = 0; s < NT / 4; ++s) {
    const float c = s < NT / 8 ? c0 : c1;
    float e[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if constexpr (kLin) {
          e[q][x] = lin_t(S[4 * s + q][x], lp.a[s < NT / 8 ? 0 : 1], lp.b[x / 2]);
        } else {
          const float arg = fmaf(S[4 * s + q][x], c, -base[x / 2]);
          constexpr int kEvery = kPolyEvery > 0 ? kPolyEvery : 1;  // no % 0, even where it is not reached
          if (kPolyEvery > 0 && (4 * s + q) % kEvery == kEvery - 1) e[q][x] = fa3::exp2_poly(fminf(arg, 16.0f));
          else e[q][x] = ptx::exp2_approx(arg);
        }
      }
    const uint32_t w[4] = {pack4<kLin>(e[0][0], e[0][1], e[1][0], e[1][1]), pack4<kLin>(e[0][2], e[0][3], e[1][2], e[1][3]),
                           pack4<kLin>(e[2][0], e[2][1], e[3][0], e[3][1]), pack4<kLin>(e[2][2], e[2][3], e[3][2], e[3][3])};
    hit |= (w[0] + 0x02020202u) | (w[1] + 0x02020202u) | (w[2] + 0x02020202u) | (w[3] + 0x02020202u);
    hopper::stmatrix_x4(p_step_address(Ps, s, warp_in_wg), w);
  }
  hopper::fence_proxy_async();
  return (hit & 0x80808080u) != 0;
}

// The wide rung's epilogue from wide_epi on: stage 08's write_output_tma, with v̄ from shared memory
// (the producer copies it in with the tile's Q, Pipeline's kVbar) where write_output_tma loads it
// from global memory. There, ptxas issues the loads after the wait for the last P̃·V, 16 for row g
// and again 16 for row g + 8 (they may alias the staging's stores): two trips to L2 on the way out
// of every tile, whose epilogue the trace timed at 1.0-1.3 µs (a block is 2.4). And l as the tensor
// cores summed it: every lane of a quad holds the whole sum, so no shuffles; 1/l approximate (2 ulp,
// where an exact division calls a slow path, and ptxas saves registers around the call).
// What it should buy: most of those two trips, 0.5-0.8 µs a tile: +1-2 % at N = 4096, +2-3 % causal.
// Measured (H100, d = 128, ABBA against wide_opt): 1.020 at N = 4096, 0.992 at 16384, 1.025 and
// 1.015 causal (chapter 09).
template <class T, int D, int J>
__device__ void write_output_wide(const float (&o)[J][4], const float (&m)[2], const float (&l)[2], uint16_t* stage,
                                  const float* vbar, const CUtensorMap* mapO, const tc::Params& p, int h, int row0,
                                  float o_times) {
  constexpr float kLn2 = 0.69314718f;
  const int lane = tc::lane_id(), g = lane / 4, t = lane % 4;
  // The lane's columns of v̄ (8d + 2t and 8d + 2t + 1), all loaded before the first store to the
  // staging: ptxas keeps a load after a store that may alias it (one load's latency a column, read
  // one after another, in a first version).
  float2 add[D / 8];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) add[d] = *reinterpret_cast<const float2*>(vbar + 8 * d + 2 * t);
  if (lane == 0) hopper::bulk_wait_read<0>();
  __syncwarp();
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {  // rows g and g + 8
    // 1/l by MUFU.RCP (2 ulp, no call to a slow path); O = (o / l) · o_times in that order, as write_output_tma
    const float inv = __fdividef(1.0f, l[hh]);
    const int r = g + 8 * hh;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<uint32_t*>(stage + hopper::swizzle128<16>(r, d) + 2 * t) =
          ptx::pack<T>(o[d][2 * hh] * inv * o_times + add[d].x, o[d][2 * hh + 1] * inv * o_times + add[d].y);
    if (t == 0 && unsigned(row0 + r) < unsigned(p.N)) p.L[size_t(h) * p.N + row0 + r] = kLn2 * m[hh] + logf(l[hh]) - 8.0f * kLn2;
  }
  fa3::store_staged_output<D>(stage, mapO, p, h, row0);
}

// The epilogues of wide_lg2 and wide_stsm: write_output_wide with changes where the trace timed the
// staging's stores and L at 0.45-0.79 µs of a tile's 0.8-1.3 µs epilogue.
// kLog2L (wide_lg2): L by lg2.approx (MUFU.LG2 and a fix-up for denormal inputs; 2 ulp, l ≥ 2⁸)
// where logf is a software log of about 25 instructions (a chain of a dozen FFMAs) that one lane in
// four runs in a branch while the warp waits, twice, among the staging's stores; its store after the
// TMA store is issued, so that computing L no longer delays that store. What it should buy: those
// 50 instructions' latency, about 0.1 µs a tile: +0.3-0.5 % causal at N = 4096 (a tile 18.7 µs
// there). Measured (H100, against _wide_pfq in the same processes):
// 1.002-1.014 causal at N = 4096, 1.010-1.017 at 4096, 0.978-1.026 at 16384. ptxas scheduled the
// loop afresh, so these are the epilogue and a new loop together (chapter 09).
// kStsm (wide_stsm, on wide_lg2): the staging by stmatrix. The accumulator's layout is stmatrix's
// (row lane / 4, columns 2·(lane % 4) and + 1 of an 8 × 8 matrix), so one x4 writes two 8-column
// chunks of the warp's 16 rows: 8 STSM a lane where there were 32 STS and their 32 addresses (each
// lane gives one row's address: matrix lane / 8, row lane % 8). What it should buy: about half the
// stores' time, 0.2-0.4 µs a tile: +1-2 % causal at N = 4096, +0.5-1 % at N = 4096. Measured against
// _wide_lg2 in the same processes: 1.002-1.004 causal at N = 4096, 0.992-0.994 at 4096, 0.970-1.009 at
// 16384; against _wide_pfq 1.004-1.017 causal at 4096 in four runs: the loop was scheduled afresh
// again (its softmax's constants in vector registers, not uniform ones).
template <class T, int D, int J, bool kStsm>
__device__ void write_output_lg2(const float (&o)[J][4], const float (&m)[2], const float (&l)[2], uint16_t* stage,
                                 const float* vbar, const CUtensorMap* mapO, const tc::Params& p, int h, int row0,
                                 float o_times) {
  static_assert(D % 16 == 0, "stmatrix.x4 writes the staging 16 columns at a time");
  const int lane = tc::lane_id(), t = lane % 4;
  float2 add[D / 8];  // as write_output_wide: all of v̄'s loads before the first store to the staging
#pragma unroll
  for (int d = 0; d < D / 8; ++d) add[d] = *reinterpret_cast<const float2*>(vbar + 8 * d + 2 * t);
  if (lane == 0) hopper::bulk_wait_read<0>();
  __syncwarp();
  // O = (o / l) · o_times, as write_output_wide
  const float inv[2] = {__fdividef(1.0f, l[0]), __fdividef(1.0f, l[1])};
  if constexpr (kStsm) {
    const int r = lane % 8 + 8 * (lane / 8 % 2), c = lane / 16;  // the row this lane addresses: chunk 2s + c
#pragma unroll
    for (int s = 0; s < D / 16; ++s) {
      uint32_t w[4];  // the matrices: rows 0-7 and 8-15 of chunk 2s, then of chunk 2s + 1
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int d = 2 * s + x / 2, hh = x % 2;
        w[x] = ptx::pack<T>(o[d][2 * hh] * inv[hh] * o_times + add[d].x, o[d][2 * hh + 1] * inv[hh] * o_times + add[d].y);
      }
      hopper::stmatrix_x4(hopper::smem_u32(stage + hopper::swizzle128<16>(r, 2 * s + c)), w);
    }
  } else {  // write_output_wide's stores
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
        *reinterpret_cast<uint32_t*>(stage + hopper::swizzle128<16>(lane / 4 + 8 * hh, d) + 2 * t) =
            ptx::pack<T>(o[d][2 * hh] * inv[hh] * o_times + add[d].x, o[d][2 * hh + 1] * inv[hh] * o_times + add[d].y);
  }
  fa3::store_staged_output<D>(stage, mapO, p, h, row0);
  const int g = lane / 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)  // L = ln 2 · (m + log₂ l − 8): m and the shift of 8 are in log₂ units
    if (t == 0 && unsigned(row0 + g + 8 * hh) < unsigned(p.N))
      p.L[size_t(h) * p.N + row0 + g + 8 * hh] = 0.69314718f * (m[hh] + __log2f(l[hh]) - 8.0f);
}

// The wide kernels' steps on a block, shared by flash_v3_fp8_wide and flash_v3_fp8_wide_overlap.
// The softmax of a block and its P̃ in the tile at Ps() (a callable, the address formed where it is
// used; the tile's last reader, the P̃·V two blocks back, has completed), with the block's
// multipliers c0, c1 (K's two descales folded in). kOptimistic, after
// the tile's first block (optimistic): P̃ with m as it stands, and only if some P̃ overflowed (any
// lane of the warp: the branch is the warp's) the row max and P̃ again.
template <int NT, bool kOptimistic, int kPolyEvery = 0, bool kLin = false, class Address>
__device__ void softmax_p_wide(float (&S)[NT][4], uint32_t (&P)[NT / 4][4], float (&m)[2], float (&alpha)[2],
                               float c0, float c1, bool optimistic, const Address& Ps, int warp_in_wg) {
  if (kOptimistic && optimistic) {
    alpha[0] = alpha[1] = 1.0f;
    if (!__any_sync(0xffffffffu, optimistic_p<NT, kPolyEvery, kLin>(S, m, c0, c1, Ps(), warp_in_wg))) return;
  }
  softmax_scores_wide<NT, kOptimistic, kLin>(S, m, c0, c1, alpha);
  pack_p<NT * 8, kLin>(S, P);
  store_p<NT * 8>(P, Ps(), warp_in_wg);
}
// The causal diagonal's block, a tile's first (wide_diag): softmax_p_wide's first step (the row max, m
// with kHeadroom, P̃ stored) for a warp whose rows, dw to dw + 15 counted from the block's first key,
// see only the keys up to dw + 15. A 32-key step past them (s ≥ live) holds only masked scores: no
// mask, no max, no exponentials there, its P̃ stored as zeros. A step that reaches past the first row
// (32s + 31 > dw) gets mask_causal's compares; the steps before it none. On every score it keeps,
// the same instructions as softmax_scores_wide and pack_p, so P̃ and m come out bit for bit the same.
template <int NT, bool kLin = false, class Address>
__device__ void softmax_p_diag(float (&S)[NT][4], float (&m)[2], float (&alpha)[2], float c0, float c1,
                               const Address& Ps, int warp_in_wg, int dw) {
  constexpr int kSteps = NT / 4;
  const int lane = tc::lane_id(), dl = dw + lane / 4 - 2 * (lane % 4);  // mask_causal's d
  const int live = dw + 15 < 0 ? 0 : min(kSteps, (dw + 15) / 32 + 1);
  float v[2][2][2];  // the row max: [row g, g + 8][the block's half: c0, c1][column parity]
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int x = 0; x < 2; ++x) v[h][x][0] = v[h][x][1] = -INFINITY;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s >= live) continue;
    const bool edge = 32 * s + 31 > dw;
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = 4 * s + q;
        if (edge && 8 * n + e % 2 - 8 * (e / 2) > dl) S[n][e] = -INFINITY;
        float& a = v[e / 2][s / (kSteps / 2)][e % 2];
        a = fmaxf(a, S[n][e]);
      }
  }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // softmax_scores_wide's, kOptimistic
    const float block_max = fmaxf(fmaxf(v[h][0][0], v[h][0][1]) * c0, fmaxf(v[h][1][0], v[h][1][1]) * c1);
    const float m_new = fmaxf(m[h], tc::quad_max(block_max) + kHeadroom);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::exp2_approx(m[h] - shift);
    m[h] = m_new;
    base[h] = shift - 8.0f;
  }
  [[maybe_unused]] const LinP lp(c0, c1, base);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (s < live) {
      const float c = s < kSteps / 2 ? c0 : c1;
      float e[4][4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int x = 0; x < 4; ++x)
          e[q][x] = kLin ? lin_t(S[4 * s + q][x], lp.a[s < kSteps / 2 ? 0 : 1], lp.b[x / 2])
                         : ptx::exp2_approx(fmaf(S[4 * s + q][x], c, -base[x / 2]));
      w[0] = pack4<kLin>(e[0][0], e[0][1], e[1][0], e[1][1]);
      w[1] = pack4<kLin>(e[0][2], e[0][3], e[1][2], e[1][3]);
      w[2] = pack4<kLin>(e[2][0], e[2][1], e[3][0], e[3][1]);
      w[3] = pack4<kLin>(e[2][2], e[2][3], e[3][2], e[3][3]);
    }
    hopper::stmatrix_x4(p_step_address(Ps(), s, warp_in_wg), w);
  }
  hopper::fence_proxy_async();
}

// o = o·alpha (and l) before the P̃·V that adds the block whose softmax set alpha (lazy: skipped while
// alpha is 1); then the fence: o was written, the wgmma that adds into it comes after.
template <int J>
__device__ void rescale_wide(float (&o)[J][4], float (&l)[2], const float (&alpha)[2]) {
  if (alpha[0] != 1.0f || alpha[1] != 1.0f) {
#pragma unroll
    for (int d = 0; d < J - 1; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[d][e] *= alpha[e / 2];
    l[0] *= alpha[0], l[1] *= alpha[1];
  }
  hopper::wgmma_fence();
}
// The block's row sums out of the accumulator's last tile (the ones' columns) into l (fp32), and that
// tile zeroed. Under a condition (a no-op when it fails: the tile's four values are two sums, each
// twice): written unconditionally, ptxas serialised every wgmma (its C7511, "insufficient register
// resources").
template <int J>
__device__ void take_row_sums(float (&o)[J][4], float (&l)[2]) {
  l[0] += o[J - 1][0], l[1] += o[J - 1][2];
  if (o[J - 1][0] != 0.0f || o[J - 1][2] != 0.0f)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[J - 1][e] = 0.0f;
}

// kSoftmaxTurns (fp8_*_wide_turns, with the optimistic max; an experiment that failed): the two
// warpgroups' softmaxes take turns too (named barriers kSoftTurn + c), as their products do. The
// trace found each softmax about three quarters of a block's time, so the two overlap and share the
// exponential unit; in turns, each would run alone, under the other's products. Predicted +10-30 %
// if sharing the unit was what slowed them, −5 to −15 % if a softmax alone is as slow (its own
// latencies). Measured 0.85-0.88 of wide_opt: the second; the overlap was hiding latency.
constexpr int kSoftTurn = 6;
// kVbarSmem (fp8_*_wide_epi, with the optimistic max): the epilogue write_output_wide, v̄ from shared memory.
template <class T, bool kOptimistic, int kPolyEvery = 0, bool kSoftmaxTurns = false, bool kVbarSmem = false>
__global__ void __launch_bounds__(128 * 3, 1)
    flash_v3_fp8_wide(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                      const __grid_constant__ CUtensorMap mapVt, const __grid_constant__ CUtensorMap mapO, tc::Params p,
                      Scales sc, int heads, int* next_tile) {
  constexpr int D = 128, kWG = 2, kStages = 2, Bc = kBcWide, NT = Bc / 8, DT = D / 8, kBr = 64 * kWG, NV = D + 8;
  using Pipe = Pipeline<D, kStages, kBr, true, true, Bc, true, kVbarSmem>;
  extern __shared__ uint8_t smem_raw[];
  const Pipe pipe{reinterpret_cast<uint8_t*>(fa3::align1024(smem_raw))};
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0), wg = warp / 4;
  const int Tr = (p.N + kBr - 1) / kBr, tiles = Tr * heads;
  const int N64 = (p.N + 63) / 64 * 64;  // as the kernel above
  if (threadIdx.x == 0) pipe.init(4 * kWG);
  pipe.fill_ones();
  __syncthreads();

  if (wg == 0) {  // ---- the producer: the kernel above's ----
    hopper::setmaxnreg_dec<producer_registers<kWG>()>();
    if (threadIdx.x == 0) pipe.produce_tiles(&mapQ, &mapK, &mapVt, p, N64, Tr, tiles, next_tile, sc.v_mean);
  } else {  // ---- the consumers ----
    hopper::setmaxnreg_inc<fa3::consumer_registers<kWG, producer_registers<kWG>()>()>();
    const int cwg = wg - 1, cwarp = warp - 4;
    auto wait_turn = [&] { hopper::named_barrier_sync(kSched + cwg, 256); };
    auto pass_turn = [&] { hopper::named_barrier_arrive(kSched + (cwg + 1) % kWG, 256); };
    auto wait_soft = [&] {
      if constexpr (kSoftmaxTurns) hopper::named_barrier_sync(kSoftTurn + cwg, 256);
    };
    auto pass_soft = [&] {
      if constexpr (kSoftmaxTurns) hopper::named_barrier_arrive(kSoftTurn + (cwg + 1) % kWG, 256);
    };
    if (cwg == kWG - 1) pass_turn(), pass_soft();
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
        softmax_p_wide<NT, kOptimistic, kPolyEvery>(S[0], P, m, alpha, score_unit(cq, k_scale(j, 0)), score_unit(cq, k_scale(j, 1)), b > b0,
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
        wait_soft();
        pass_soft();
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
      wait_soft();
      softmax_p(b0, it + b0);
      pass_soft();
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
        wait_soft();
        softmax_p(b, k);
        pass_soft();
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

      if constexpr (kVbarSmem) {
        write_output_wide<T, D>(o[0], m, l, stage, pipe.vbar(n), &mapO, p, h, warp_row0, sc.v[hb]);
      } else {
        constexpr float kLn2 = 0.69314718f;
        // l from the ones columns: every lane of a quad holds the whole sum, each passes a quarter.
        float mm[1][2] = {{m[0], m[1]}}, ll[1][2] = {{l[0] * 0.25f, l[1] * 0.25f}};
        fa3::write_output_tma<T, D>(reinterpret_cast<const float(&)[1][DT][4]>(o), mm, ll, stage, &mapO, p, h,
                                    warp_row0, {sc.v[hb], kLn2, -8.0f * kLn2, sc.v_mean + size_t(h) * D});
      }
    }
    if (threadIdx.x % 32 == 0) hopper::bulk_wait<0>();
    if (cwg == 0) wait_turn(), wait_soft();
  }
}

// The causal mask of a key block that ends at or before N (needs_mask's other reason): the scores of
// keys after their query become −∞, N never checked. Score S[n][e] of lane (g, t) is query row0 + g +
// 8·(e / 2) against key col0 + 8n + 2t + e % 2, so with the lane's constant d = row0 + g − col0 − 2t
// it is masked when 8n + e % 2 − 8·(e / 2) > d: a compile-time number against one register, one
// compare and one select a score (tc::mask_scores: a key, two compares and the select).
template <int NT>
__device__ void mask_causal(float (&S)[NT][4], int row0, int col0) {
  const int d = row0 + tc::lane_id() / 4 - col0 - 2 * (tc::lane_id() % 4);
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (8 * n + e % 2 - 8 * (e / 2) > d) S[n][e] = -INFINITY;
}

// ---- an experiment on wide_epi: a tile's end under the next tile's first S (fp8_*_wide_ovl) ----
// What changed from wide_epi (the optimistic max, v̄ from shared memory): stage 08's tile_overlap for
// this rung. At a tile's end a warpgroup waited for its last P̃·V, wrote O out, then issued the next
// tile's first S = Q·Kᵀ and waited for it with nothing else to do: the trace timed 1.0-1.3 µs of
// epilogue and 0.3-0.6 µs of that S a tile, the warpgroup's exponentials stopped all the while.
// Here the last P̃·V and the next tile's first S are one turn at the tensor cores (P̃·V first, so
// that wgmma_wait<1> returns when o is complete), and the epilogue runs while S is computed.
//  - Q keeps one slot: a warpgroup releases Q after its last S, a block before the tile's end, and
//    the next tile's Q lands within that block (the trace's wait for Q was 0.04 µs).
//  - O's staging: the warpgroup's P̃ tile that the next tile's first block does not write (the last
//    P̃·V's, or the one before it: both read to the end). Each warp waits for its copy to have read
//    the staging before its next tile's first softmax; the next turn (a barrier of all four warps)
//    orders those waits before any write into that tile.
//  - At most one key block past a warpgroup's rows is skipped (causal, N not a multiple of 128, as
//    the rung): a second would wait for a slot that this tile's last P̃·V still reads. A warpgroup
//    whose rows are all padding (past N, or before 0) computes its key blocks instead of skipping
//    them (it writes nothing): once a head, at most.
//  - After the last tile the S issued is on that tile's Q and last K (in place: the producer is
//    done), its result dropped: a wgmma under a branch serialises them all (ptxas' C7520).
// What it should buy: the S wait and the epilogue off each tile's end, about 1 µs of the 2.5-3 µs a
// tile costs beyond its blocks: +1-2 % at N = 4096 and 16384, +2-4 % causal. Measured (H100, d = 128,
// ABBA), with the LPT order and the descales loaded ahead (Tile): 1.084, 1.049, 1.120 and 1.068 of
// wide_opt (N = 4096, 16384, causal 4096, causal 16384); 1.55, 1.68, 1.45 and 1.59 of stage 08.
// kDiagonalMask (fp8_*_wide_mask, an experiment): the mask of a causal block that ends at or before N
// compares keys with the row only (mask_causal), not also with N: in the SASS 124 of the mask's 373
// instructions were that check. What it should buy: a third of the diagonal block's mask, about 0.2
// µs of a causal tile's first softmax (2.1 µs in the trace, 1.5 without a mask): +0.5-1 % at causal
// N = 4096, less at 16384. The SASS: about half (66 compares, shared by rows g and g + 8, and 128
// selects, against 373). Measured (H100, against _wide_ovl in the same processes): 1.012 at causal
// 4096, 1.000 at causal 16384, 1.006 at N = 4096 (no mask there: the same code).
// kDecoded (fp8_*_wide_dec, an experiment on _wide_mask): the producer publishes each tile's query
// block and head beside its number (tile_ih), which it decoded anyway, and the consumers read them
// instead of decoding the number again (Pipe::tile: in the LPT order two integer divisions by
// run-time numbers, each a conversion to float, a reciprocal and a conversion back, with round trips
// to the uniform registers). The trace put 0.6 µs a causal tile (0.4-0.5 not causal) between the
// wait for the next tile's Q and the last turn, spent decoding the tile and loading its descales;
// prefetching the descales into L1 (wide_pf) left it unchanged. What it should buy: the decoding's
// share of that, up to +1.5-2.5 % at causal N = 4096 if it is most of it, nothing if it is not.
// The SASS: the consumers' code 216 instructions shorter, every exponential where it was. Measured
// (H100, against _wide_mask in the same processes): 1.014 at causal N = 4096 (1.011-1.018 in four
// processes), 1.001 at N = 4096, 0.995 and 1.003 at 16384 (within the power cap's spread); the
// trace's segment 0.60 -> 0.41 µs causal, so the decoding was a third of it.
// kQHalves (fp8_*_wide_qh, an experiment on _wide_dec): Q in two halves of 64 rows, warpgroup c's
// rows in half c, each half with its own barriers (given back by its warpgroup's 128 threads alone)
// and its own copy of v̄. With one Q, the producer copied the next tile's Q only once both
// warpgroups had given it back, and the second gives it back half a block after the first: the
// trace found the first warpgroup waiting 0.44 µs a causal tile for that Q before its last turn.
// Now the first half is copied as soon as the first warpgroup is done with it, a softmax (1.5-1.9
// µs) before it is needed. The tile number and v̄ are published with each half, so each warpgroup
// waits for its own only. What it should buy: that wait, +1-2 % at causal N = 4096 if it was on the
// tensor cores' path, +0.5-1.5 % at N = 4096, under 0.5 % at 16384. Measured (H100, against
// _wide_dec in the same processes): 1.012-1.021 at causal N = 4096 (eight processes, two runs),
// 1.007-1.015 at N = 4096, 1.010 at causal 16384. A trace still finds the first warpgroup waiting
// 0.4 µs for Q: the copy now starts earlier but comes from device memory (kQPrefetch).
// kDiagSkip (fp8_*_wide_diag, an experiment on _wide_qh): the causal diagonal's block (a tile's first,
// where it ends before N) by softmax_p_diag: a warp skips the mask, the max and the exponentials of
// the 32-key steps past its rows (56 % of the block's exponentials are left, on average over the
// warps), and masks only the steps that reach past its first row. What it should buy: most of the
// mask's 0.4-0.5 µs and about half of the first softmax, 0.5-1 µs of a causal tile: +2-4 % at
// causal N = 4096. Measured (H100, against _wide_qh, two runs): 1.009-1.014 at causal N = 4096,
// 1.005-1.013 at causal 16384, 0.989-0.994 at N = 4096. The trace: the mask 0.40 -> 0.06 µs and
// the first softmax 1.51 -> 1.17 µs (first warpgroup), but the loop's steady block 1.874 -> 1.902
// µs: with the second first-block path ptxas no longer keeps the thread index in a register and
// reads it again (S2R, four a block) in the loop. A version that chose the exponentials by a select (s < live ? ex2 :
// 0) ran every exponential and lost 2 % (0.979).
// kQPrefetch (fp8_*_wide_pfq, an experiment on _wide_diag): the producer prefetches the first half
// of each tile's Q (the first warpgroup's rows: its wait is the one the trace found) into L2
// (cp.async.bulk.prefetch.tensor) when it takes the tile, a block or more before that half's slot
// is free; the consumers' SASS is _wide_diag's. The second half is not prefetched. What it should
// buy: the first warpgroup's 0.4-0.47 µs wait for Q, +1-2 % at causal N = 4096, +1 % at N = 4096.
// Measured (H100, against _wide_diag):
// 1.007-1.019 at causal N = 4096, 1.003-1.011 at N = 4096, 0.991-1.003 at causal 16384. Stage 08's
// faster kernel over it, same processes: 1.468-1.486 at causal N = 4096, still short of 1.5.
// Tried on _wide_pfq and dropped (the runs are in the lab record):
// - The second half of Q prefetched too (the second warpgroup's rows, whose wait the trace found at
//   0.17-0.19 µs a tile), predicted +0.3-1 %: 0.988-0.994 of _wide_pfq at causal N = 4096.
// - P̃'s stmatrix addresses from one register a lane (the lane's part, row·128 + ((half ^ r) << 4),
//   computed once; a step's address that XOR a constant, plus the base), not from the thread index
//   at every step. _wide_diag's second first-block path had left ptxas a register short in the
//   loop, and it read the thread index again there (S2R, four a block); with this the loop had none
//   and two instructions fewer than _wide_qh's. Predicted +1-2 % at causal N = 4096 (the loop's 1.874 µs a
//   block back from diag's 1.902); measured 0.993-1.000 of _wide_pfq there: the S2R's were not what
//   made diag's loop slower (docs/results/h100/stage09/wide_lane.patch).
// - The causal diagonal's block multiplied only as far as the warpgroup's keys: its 64 rows see the
//   block's keys up to their last row, 64, 128, 192 or 256 of the 256 (37.5 % of that block's tensor
//   work on average, about 0.6 µs of a causal tile's 18.7 µs at N = 4096, where the loop keeps the
//   tensor cores busy about 90 % of its time: 17.3 MFLOP a block, 1.70 µs at the 1,346 TFLOP/s
//   ceiling, against 1.87-1.90 µs; predicted +1.5-3 %). wgmma's N is part of the instruction, so the
//   width is chosen at run time among instructions, and every form tried made ptxas serialise all of
//   the kernel's wgmma's (a wait after each): S by one of four widths under an `if`, or in 64-key
//   chunks under `if`s (C7511: S came out of the branch as the wgmma's or as it was), the four
//   widths under guard predicates (@p wgmma, C7515), and only P̃·V's steps past the keys left out,
//   under an `if` or a guard (C7515). A width fixed at compile time builds with the wgmma's in
//   flight (N = 128 at both sites of a tile's first S, S's other registers zeroed first), and a
//   probe of that (every first S at N = 128 for both warpgroups, wrong O, timing only:
//   docs/results/h100/stage09/narrow_probe.patch) measured 0.999-1.009 of _wide_pfq at causal
//   N = 4096: a tile's start is not waiting for the tensor cores, so the narrowing is not worth
//   specialising the consumers for.
template <class T, bool kDiagonalMask = false, bool kDecoded = false, bool kQHalves = false, bool kDiagSkip = false,
          bool kQPrefetch = false, bool kLog2L = false, bool kEpilogueStsm = false, bool kLin = false>
__global__ void __launch_bounds__(128 * 3, 1)
    flash_v3_fp8_wide_overlap(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                              const __grid_constant__ CUtensorMap mapVt, const __grid_constant__ CUtensorMap mapO,
                              tc::Params p, Scales sc, int heads, int* next_tile, int group) {
  constexpr int D = 128, kWG = 2, kStages = 2, Bc = kBcWide, NT = Bc / 8, kBr = 64 * kWG, NV = D + 8;
  using Pipe = Pipeline<D, kStages, kBr, true, true, Bc, true, true, kDecoded, kQHalves, kQPrefetch>;
  static_assert(!kQHalves || kDecoded, "Q by halves (wide_qh) builds on wide_dec");
  static_assert(!kDiagSkip || kQHalves, "the diagonal's dead steps skipped (wide_diag) build on wide_qh");
  static_assert(!kQPrefetch || kDiagSkip, "Q prefetched into L2 (wide_pfq) builds on wide_diag");
  static_assert(!kLog2L || kQPrefetch, "L by lg2.approx (wide_lg2) builds on wide_pfq");
  static_assert(!kEpilogueStsm || kLog2L, "the staging by stmatrix (wide_stsm) builds on wide_lg2");
  static_assert(!kLin || kEpilogueStsm, "P̃ without MUFU (wide_lin) builds on wide_stsm");
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
    Tile cur;
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
      softmax_p_wide<NT, true, 0, kLin>(S[0], P, m, alpha, score_unit(cur.cq, k0), score_unit(cur.cq, k1), b > cur.b0,
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
      if constexpr (kLog2L)
        write_output_lg2<T, D, NV / 8, kEpilogueStsm>(o[0], m, l, stage, pipe.vbar(n, qc), &mapO, p, cur.h,
                                                      cur.warp_row0, cur.sv);
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

int poly_every = 0;          // set_exp2_poly_every
bool row_sum_by_mma = true;  // set_row_sum_by_mma
POperand p_operand = POperand::by_d;  // set_p_operand
int acc_tc_warpgroups = 0;            // set_o_on_tensor_cores
bool acc_tc_lazy = false;
Wide wide = Wide::off;                // set_wide_key_blocks
int head_group = 0;                   // set_head_group
bool lin_p = false;                   // set_lin_p

}  // namespace

void set_exp2_poly_every(int k) {
  course::require(k == 0 || k == 4 || k == 8, "the exponentials by polynomial: every 4th or 8th tile, or none (0)");
  poly_every = k;
}

void set_row_sum_by_mma(bool by_mma) { row_sum_by_mma = by_mma; }

void set_p_operand(POperand where) { p_operand = where; }

void set_o_on_tensor_cores(int warpgroups, bool lazy) {
  course::require(warpgroups == 0 || warpgroups == 2 || warpgroups == 3,
                  "O on the tensor cores: 2 or 3 consumer warpgroups, or 0 (off)");
  course::require(!lazy || warpgroups == 3, "the lazy rescale runs with O on the tensor cores, 3 warpgroups");
  acc_tc_warpgroups = warpgroups;
  acc_tc_lazy = lazy;
}

void set_wide_key_blocks(Wide kernel, Granularity v_scales) {
  course::require(kernel == Wide::off || v_scales == Granularity::tensor,
                  "fp8: key blocks of 256 need V's descale per tensor (l sums on the tensor cores with o)");
  wide = kernel;
}

void set_lin_p(bool on) { lin_p = on; }
bool p_by_lin() { return lin_p || wide == Wide::overlap_lin; }

void set_head_group(int heads) {
  course::require(heads >= 0, "fp8: the head group of the tile order is a count of heads (0: chosen by size)");
  head_group = heads;
}

void launch_attention(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L) {
  require_supported(s);
  course::require(out == course::Dtype::fp16 || out == course::Dtype::bf16,
                  std::string("FP8 attention writes O in fp16 or bf16, not ") + course::name(out));
  course::require(s.d == 64 || s.d == 128, "stage 09 runs d = 64 or 128, not d = " + std::to_string(s.d));
  fa3::require_hopper("fp8");
  const int Np = padded_keys(s.N);
  const CUtensorMapSwizzle qk_swizzle = s.d == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const int Br = acc_tc_warpgroups != 0 ? 64 * acc_tc_warpgroups : attention_tiles(s).Br;
  const bool q_halves =  // wide_qh and the experiments on it: Q by halves, a warpgroup's rows
      wide == Wide::overlap_qhalves || wide == Wide::overlap_diagonal || wide == Wide::overlap_q_prefetch ||
      wide == Wide::overlap_log2 || wide == Wide::overlap_stsm || wide == Wide::overlap_lin;
  const int q_box = q_halves ? 64 : Br;
  const CUtensorMap mapQ = fa3::make_tensor_map({in.Q, u8, 1, s.d, s.N, s.heads(), s.d, q_box, qk_swizzle});
  const bool wide_blocks = wide != Wide::off;
  const bool poly_ok = poly_every == 0 || wide == Wide::optimistic;  // the polynomial: _wide_opt only
  course::require(!wide_blocks || (s.d == 128 && acc_tc_warpgroups == 0 && poly_ok && row_sum_by_mma &&
                                   p_operand == POperand::by_d && !lin_p),
                  "fp8: key blocks of 256 run at d = 128, on their own (no other experiment or ablation; "
                  "the optimistic max takes --exp2-poly-every)");
  const int Bc = wide_blocks ? kBcWide : kBc;
  const CUtensorMap mapK = fa3::make_tensor_map({in.K, u8, 1, s.d, s.N, s.heads(), s.d, Bc, qk_swizzle});
  const CUtensorMap mapVt = fa3::make_tensor_map({in.Vt, u8, 1, Np, s.d, s.heads(), kBc, s.d, CU_TENSOR_MAP_SWIZZLE_128B});
  const CUtensorMap mapO = fa3::make_tensor_map(O, out == course::Dtype::bf16, s.heads(), s.N, s.d, 16);
  course::require(in.v_mean != nullptr, "fp8 attention: v_mean (the quantisation's v̄) is needed");
  const Scales sc{in.q_scale, in.k_scale, in.v_scale, (s.N + kScaleRows - 1) / kScaleRows, in.v_mean};
  const tc::Params p = tc::params(nullptr, nullptr, nullptr, O, L, s.N, s.causal, s.d);
  const unsigned grid = fa3::persistent_grid(s, "fp8", Br);
  int* next_tile = fa3::tile_counter();
  // The experiment kAccTC: the default kernel (P̃ by d) with o accumulated on the tensor cores, at 2
  // or 3 consumer warpgroups (3 stages at d = 128 with 3: the shared memory), and the row sum by
  // FADDs (l exact, as FlashAttention-3); lazy: with the lazy rescale.
  auto run_acc = [&](auto type, auto d, auto wg, auto lazy) {
    using T = decltype(type);
    constexpr int D = decltype(d)::value, kWG = decltype(wg)::value, kStages = D == 128 && kWG == 3 ? 3 : 4;
    constexpr bool kP = D == 128, kLz = decltype(lazy)::value;
    const size_t bytes = Smem<D, kStages, 64 * kWG, false, kP>::kBytes;
    const auto kernel = flash_v3_fp8<T, D, kStages, 0, false, kP, kWG, true, kLz>;
    course::require(row_sum_by_mma && poly_every == 0 && p_operand == POperand::by_d && !lin_p,
                    "fp8: O on the tensor cores runs with the default kernel only");
    course::require_shared_memory(bytes, "fp8 (O on the tensor cores) at d = " + std::to_string(D));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    kernel<<<grid, 128 * (kWG + 1), bytes>>>(mapQ, mapK, mapVt, mapO, p, sc, s.heads(), next_tile);
    CUDA_CHECK_LAUNCH();
  };
  // The wide rung: key blocks of 256, O and l on the tensor cores, the lazy rescale (d = 128).
  auto run_wide = [&](auto type) {
    using T = decltype(type);
    const bool overlap_kernel =
        wide == Wide::overlap || wide == Wide::overlap_mask || wide == Wide::overlap_decoded || q_halves;
    const bool vbar = wide == Wide::vbar_smem || overlap_kernel;
    // Smem's flags after Bc: O staged in P̃, v̄'s slots, the tiles' numbers, Q's halves.
    constexpr bool on = true;
    const size_t bytes = q_halves                        ? Smem<128, 2, 128, on, on, kBcWide, on, on, on, on>::kBytes
                         : wide == Wide::overlap_decoded ? Smem<128, 2, 128, on, on, kBcWide, on, on, on>::kBytes
                         : vbar                          ? Smem<128, 2, 128, on, on, kBcWide, on, on>::kBytes
                                                         : Smem<128, 2, 128, on, on, kBcWide, on>::kBytes;
    const auto kernel = wide == Wide::rung        ? flash_v3_fp8_wide<T, false>
                        : wide == Wide::turns     ? flash_v3_fp8_wide<T, true, 0, true>
                        : wide == Wide::vbar_smem ? flash_v3_fp8_wide<T, true, 0, false, true>
                        : poly_every == 4         ? flash_v3_fp8_wide<T, true, 4>
                        : poly_every == 8         ? flash_v3_fp8_wide<T, true, 8>
                                                  : flash_v3_fp8_wide<T, true>;
    course::require(Br == 128, "fp8: attention_tiles and the wide kernel's warpgroups disagree");
    course::require_shared_memory(bytes, "fp8 (key blocks of 256) at d = 128");
    if (overlap_kernel) {  // causal: heads in groups whose K and V (1 byte a value) take at most 16 MB
      // Each experiment's flags: the diagonal's mask, decoded tiles, Q by halves, the dead steps, Q from L2.
      const auto overlap = wide == Wide::overlap_lin        ? flash_v3_fp8_wide_overlap<T, on, on, on, on, on, on, on, on>
                           : wide == Wide::overlap_stsm       ? flash_v3_fp8_wide_overlap<T, on, on, on, on, on, on, on>
                           : wide == Wide::overlap_log2       ? flash_v3_fp8_wide_overlap<T, on, on, on, on, on, on>
                           : wide == Wide::overlap_q_prefetch ? flash_v3_fp8_wide_overlap<T, on, on, on, on, on>
                           : wide == Wide::overlap_diagonal ? flash_v3_fp8_wide_overlap<T, on, on, on, on>
                           : wide == Wide::overlap_qhalves  ? flash_v3_fp8_wide_overlap<T, on, on, on>
                           : wide == Wide::overlap_decoded  ? flash_v3_fp8_wide_overlap<T, on, on>
                           : wide == Wide::overlap_mask     ? flash_v3_fp8_wide_overlap<T, on>
                                                            : flash_v3_fp8_wide_overlap<T>;
      const int group = fa3::lpt_head_group(s, 1, head_group);
      CUDA_CHECK(cudaFuncSetAttribute(overlap, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
      overlap<<<grid, 128 * 3, bytes>>>(mapQ, mapK, mapVt, mapO, p, sc, s.heads(), next_tile, group);
    } else {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
      kernel<<<grid, 128 * 3, bytes>>>(mapQ, mapK, mapVt, mapO, p, sc, s.heads(), next_tile);
    }
    CUDA_CHECK_LAUNCH();
  };
  auto run = [&](auto type, auto d) {
    using T = decltype(type);
    constexpr int D = decltype(d)::value, kStages = 4, kWG = consumer_warpgroups<D>();
    if (wide_blocks) {
      if constexpr (D == 128) return run_wide(type);
    }
    using Three = std::integral_constant<int, 3>;
    if (acc_tc_warpgroups == 2) {
      if constexpr (D == 128) return run_acc(type, d, std::integral_constant<int, 2>{}, std::false_type{});
      course::require(false, "fp8: O on the tensor cores with 2 warpgroups at d = 128 only");
    }
    if (acc_tc_warpgroups == 3)
      return acc_tc_lazy ? run_acc(type, d, Three{}, std::true_type{}) : run_acc(type, d, Three{}, std::false_type{});
    // P̃ through shared memory at d = 128 (by_d), or as an ablation names it.
    constexpr bool kPByD = D == 128;
    const bool p_smem = p_operand == POperand::shared || (p_operand == POperand::by_d && kPByD);
    const size_t bytes = !row_sum_by_mma ? Smem<D, kStages, 64 * kWG, false, kPByD>::kBytes
                         : p_smem        ? Smem<D, kStages, 64 * kWG, true, true>::kBytes
                                         : Smem<D, kStages, 64 * kWG, true, false>::kBytes;
    course::require(Br == 64 * kWG, "fp8: attention_tiles and the kernel's warpgroups disagree");
    course::require(row_sum_by_mma || poly_every == 0, "fp8: the polynomial runs with the row sum on the tensor cores only");
    course::require(p_operand == POperand::by_d || (row_sum_by_mma && poly_every == 0),
                    "fp8: P in registers or in shared memory at every d (the ablations) run with the default kernel only");
    course::require(!lin_p || (row_sum_by_mma && poly_every == 0),
                    "fp8: P̃ by fp16's bit pattern (fp8_*_lin) runs with the default kernel only (the row sum on the "
                    "tensor cores, no polynomial; P̃'s operand by d, in registers or through shared memory)");
    const auto kernel = lin_p && p_smem   ? flash_v3_fp8<T, D, kStages, 0, true, true, kWG, false, false, true>
                        : lin_p           ? flash_v3_fp8<T, D, kStages, 0, true, false, kWG, false, false, true>
                        : !row_sum_by_mma ? flash_v3_fp8<T, D, kStages, 0, false, kPByD>
                        : poly_every == 4 ? flash_v3_fp8<T, D, kStages, 4, true, kPByD>
                        : poly_every == 8 ? flash_v3_fp8<T, D, kStages, 8, true, kPByD>
                        : p_smem          ? flash_v3_fp8<T, D, kStages, 0, true, true>
                                          : flash_v3_fp8<T, D, kStages, 0, true, false>;
    course::require_shared_memory(bytes, "fp8 at d = " + std::to_string(D));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    kernel<<<grid, 128 * (kWG + 1), bytes>>>(mapQ, mapK, mapVt, mapO, p, sc, s.heads(), next_tile);
    CUDA_CHECK_LAUNCH();
  };
  const bool half = out == course::Dtype::fp16;
  if (s.d == 64) half ? run(__half{}, std::integral_constant<int, 64>{}) : run(__nv_bfloat16{}, std::integral_constant<int, 64>{});
  else half ? run(__half{}, std::integral_constant<int, 128>{}) : run(__nv_bfloat16{}, std::integral_constant<int, 128>{});
}

}  // namespace attention::fp8
