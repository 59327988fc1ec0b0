// What every rung of stage 09 shares on the way in: the tiles, the consumer warpgroups, the
// descales, the shared-memory layout and the producer, on stage 08's K/V ring (fa3::KeyValueRing:
// the same barriers, phases and protocol). In bytes: Q, K and V are e4m3 (1 byte a value), and V
// arrives as Vᵀ (fp8.hpp), D rows of key bytes.
#pragma once

#include "../08_flash_v3/fa3_common.cuh"
#include "fp8.hpp"
#include "hopper.cuh"

namespace attention::fp8 {

// Key blocks of 128 (the scales' blocks, fp8.hpp's kScaleRows); rungs 3-7: 256 (kBcWide).
constexpr int kBc = 128, kBcWide = 256;
constexpr int kSched = 3;  // named barriers kSched + c: warpgroup c's turn at the tensor cores

// The producer's registers after setmaxnreg. The block owns what it was launched with: 65536 / (128 ·
// (kWG + 1)) a thread, rounded down to 8 (168 for two consumer warpgroups, 128 for three), and
// setmaxnreg only moves registers within that pool: a consumer's increase waits until the producer
// has given enough back. Three warpgroups: 32 + 3 · 160 = 4 · 128, so the producer can keep 32 (at 24
// ptxas spilled its tile count). Two: 24 + 2 · 240 = 3 · 168 exactly, so 24 (32 left the consumers
// waiting forever: a hang) and ptxas spills the producer's tile count, 8 bytes, once a tile.
template <int kWG>
constexpr int producer_registers() {
  return kWG == 3 ? 32 : 24;
}

// Three consumer warpgroups at d = 64, as stage 08's last rung: there a warpgroup's softmax takes
// longer than its two products (128 cycles each at the FP8 rate for a key block, its 64 × 128
// exponentials 512 on the exponential unit), so two cannot hide each other's. 160 registers a thread
// hold S, o, o_j and P̃ (64 + 32 + 32 + 16). At d = 128 o and o_j are 64 each: two warpgroups (240).
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
// (D × Bc), O's staging (Br × D 16-bit values, written out by TMA stores), then the barriers and
// the two tile numbers. Every tile is 1024-byte aligned (the swizzle's atom).
//   kOnes (rung 2 on: the row sum by the tensor cores): each slot also holds 8 rows of Bc ones
//     after Vᵀ's D rows.
//   kP (P̃ through shared memory): after O's staging, two tiles of 64 × Bc bytes a consumer
//     warpgroup, where its P̃ of alternate key blocks is written for P̃·V to read.
//   Bc = 256 (rungs 3-7): Vᵀ's 256 key bytes a row are two tiles of D rows × 128 bytes (the 128-byte
//     swizzle's rows), each with its 8 rows of ones; P̃'s tile likewise two of 64 × 128.
//   kStageInP: no region for O's staging (the wide rungs stage O in a P̃ tile).
//   kVbar (rung 4 on): two slots of v̄ (D floats each), tile n's in slot n % 2, copied in with its Q.
//   kTileStart (rung 5 on): each tile's query block and head published beside its number (two more
//     slots of two ints); Q's two 64-row halves, one a consumer warpgroup, each with barriers and
//     v̄'s slots of its own (half c's barriers at 2c); the first half prefetched into L2.
template <int D_, int kStages_, int kBr_, bool kOnes_, bool kP_, int Bc_ = kBc, bool kStageInP_ = false,
          bool kVbar_ = false, bool kTileStart_ = false>
struct Layout {
  static constexpr int D = D_, kStages = kStages_, kBr = kBr_, Bc = Bc_;
  static constexpr bool kOnes = kOnes_, kP = kP_, kStageInP = kStageInP_, kVbar = kVbar_;
  static constexpr bool kTileIH = kTileStart_, kQHalves = kTileStart_, kQPrefetch = kTileStart_;
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
// Rungs 1 and 2: key blocks of 128.
template <int D, int kBr, bool kOnes, bool kP>
using Layout128 = Layout<D, 4, kBr, kOnes, kP>;
// Rungs 3-7 (d = 128): key blocks of 256, two stages, O staged in P̃, the row sums' ones.
template <bool kVbar, bool kTileStart>
using LayoutWide = Layout<128, 2, 128, true, true, kBcWide, true, kVbar, kTileStart>;

template <class Lay>
struct Pipeline : fa3::KeyValueRing<Pipeline<Lay>, Lay::kStages, Lay::kQBars> {
  using L = Lay;
  static constexpr int D = L::D, kStages = L::kStages, kBr = L::kBr, Bc = L::Bc;
  using Ring = fa3::KeyValueRing<Pipeline, kStages, L::kQBars>;
  using Ring::k_empty, Ring::k_full, Ring::phase, Ring::v_empty, Ring::v_full;
  uint8_t* smem;
  __device__ explicit Pipeline(uint8_t* base) : smem(base) {}
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
    if constexpr (L::kOnes) {
      constexpr int kWords = 8 * 128 / 4, kTiles = kStages * (Bc / 128);  // a tile's ones, in 32-bit words
      for (int i = threadIdx.x; i < kTiles * kWords; i += blockDim.x)
        reinterpret_cast<uint32_t*>(Vt(i / kWords / (Bc / 128)) + (i / kWords) % (Bc / 128) * L::kVtHalf +
                                    128 * D)[i % kWords] = 0x38383838u;
      hopper::fence_proxy_async();
    }
  }
  __device__ void init(int consumer_warps) const {
    for (int c = 0; c < (L::kQHalves ? 2 : 1); ++c) {
      hopper::mbarrier_init(q_full(c), 1);
      hopper::mbarrier_init(q_empty(c), 32 * consumer_warps / (L::kQHalves ? 2 : 1));  // every consumer thread
    }
    Ring::init_ring(consumer_warps);
    hopper::fence_barrier_init();
  }
  // The producer (one thread), once tile n's Q slot is free (q_empty): its Q, then its key blocks
  // from the last to the first, numbered on from `it`; returns the next number.
  // kVbar: the head's v̄ too, into slot n % 2 (the slot of tile n − 2, whose epilogue ended before
  // this tile's Q slot was released). k_loaded: the first block's K was copied already (early_k).
  __device__ int produce(const CUtensorMap* mapQ, const CUtensorMap* mapK, const CUtensorMap* mapVt, int row0, int h,
                         int blocks, int it, const float* v_mean, int n, bool k_loaded = false) const {
    if constexpr (L::kQHalves) {  // half 0 once its warpgroup gave it back (the caller waited), then half 1
      for (int c = 0; c < 2; ++c) {
        if (c == 1) hopper::mbarrier_wait(q_empty(1), (n & 1) ^ 1);
        hopper::mbarrier_arrive_expect_tx(q_full(c), kBr / 2 * D + D * 4);
        hopper::tma_load_3d(Q() + c * kBr / 2 * D, mapQ, q_full(c), 0, row0 + c * kBr / 2, h);
        hopper::bulk_load(const_cast<float*>(vbar(n, c)), v_mean + size_t(h) * D, D * 4, q_full(c));
      }
    } else {
      hopper::mbarrier_arrive_expect_tx(q_full(), kBr * D + (L::kVbar ? D * 4 : 0));
      hopper::tma_load_3d(Q(), mapQ, q_full(), 0, row0, h);
      if constexpr (L::kVbar) hopper::bulk_load(const_cast<float*>(vbar(n)), v_mean + size_t(h) * D, D * 4, q_full());
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
  // group > 1 (causal, rung 4 on): FlashAttention-3's LPT order, the heads in groups of `group`, a
  // group's tiles heaviest first across its heads (fa3::lpt_tile).
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
        if constexpr (L::kQHalves) {
          hopper::mbarrier_wait(q_empty(1), (n & 1) ^ 1);
          hopper::mbarrier_arrive(q_full(1));
        }
        fa3::tiles_done(next_tile);
        return;
      }
      int i, h;
      tile(t, Tr, p.causal, i, h, tiles / Tr, group);
      // kQPrefetch: the tile's first Q half into L2 now (the first warpgroup's rows), a block or more
      // before its slot is free: that copy then waits for L2, not device memory.
      if constexpr (L::kQPrefetch) hopper::tma_prefetch_3d(mapQ, 0, query_row0(N64, kBr, p.causal, true, i), h);
      // early_k (rung 4 on): the tile's first K block before the wait for Q's slot, which the
      // consumers release only after the last tile's last S.
      if (early_k) load_k(mapK, key_blocks(N64, kBr, Bc, p.causal, i, true) - 1, h, it);
      hopper::mbarrier_wait(q_empty(), (n & 1) ^ 1);
      *tile_slot(n) = t;  // published by the arrive on q_full (release)
      if constexpr (L::kTileIH) tile_ih(n)[0] = i, tile_ih(n)[1] = h;  // decoded once, here
      it = produce(mapQ, mapK, mapVt, query_row0(N64, kBr, p.causal, true, i), h,
                   key_blocks(N64, kBr, Bc, p.causal, i, true), it, v_mean, n, early_k);
    }
  }
  __device__ void wait_q(int n, int c = 0) const { hopper::mbarrier_wait(q_full(c), n & 1); }
  __device__ void release_q(int c = 0) const { hopper::mbarrier_arrive(q_empty(c)); }
  // A key block a warpgroup skips (causal: past its rows): its slots back once their loads landed.
  __device__ void skip_block(int it) const {
    this->wait_k(it);
    this->release_k(it);
    this->wait_v(it);
    this->release_v(it);
  }
};

}  // namespace attention::fp8
