// Rung 5: one share of dQ a key block. The two consumers put both their dSᵀ tiles in shared memory
// and split one product dQ_i += dS·K_j over all 128 keys between them, instead of each adding its
// own 64 keys' share: half the reductions into the L2, half the staging.
//
// What changed from rung 4 (fa3_bwd_4_bulk_dq.cu):
//  - A warpgroup's half of dQ is 64 × 64 floats. At d = 128 it is 64 of the columns (K_j's column
//    block wg); at d = 64 it is 64 of the rows, so the query block grows to Br = 128 (FlashAttention-3's
//    tiles: 64 × 128 at d = 128, 128 × 128 at d = 64). Sᵀ and dPᵀ are then 64 keys × 128 queries.
//  - dQ's product reads the other warpgroup's dSᵀ too: both store it, then meet at a named barrier
//    (256 threads) every step. dSᵀ has two tiles a warpgroup, by turns: when a warpgroup passes step
//    k's barrier, both have waited for their dQ product of step k − 1, so step k + 1 may overwrite
//    the tiles of step k − 1.
//  - dQ's product is issued after dV's and dK's without waiting for them; the slot goes back when
//    those two have completed (wait_group 1), dQ's share is staged when it has (wait_group 0).
// The writer, the staging tile's barriers and the producer are rung 4's.
//
// IO: the model with one share of dQ a key block (dq_shares = 1): at d = 128, N = 16k, 34 GB of
// reductions become 17 GB. What should move: the L2's reduction traffic (half), the writer's and
// the consumers' staging time; FlashAttention-3 computes dQ so; predicted 1.05-1.10x over rung 4.
//
// Rung 6, deterministic (kDeterministic): the same kernel, with the writer adding a query block's
// dQ only in its turn. dQacc's element gets one addition from each key block j, in the order the
// blocks reach it, so its float sum changes from run to run. Here a counter for each (head, query
// block) holds how many key blocks have added theirs; block j's writer waits until it reads j
// (acquire), adds both halves, waits until the additions are done in global memory and bumps it
// (release). Two changes of order make the wait short:
//  - every block walks its query blocks from the last, so causal or not, all the blocks of a head
//    reach query block i at the same step (from the first, key block j reaches it 2j steps early at
//    d = 128 and waits for block 0: every causal block then lasts as long as block 0);
//  - the blocks start in groups of G key blocks of each head (grouped_key_block), so that only G
//    of a head run together and wait in line for one another, G − 1 turns once a walk.
// Block b starts after blocks 0 .. b − 1 (the hardware's order; FlashAttention-3 relies on it too)
// and waits only for key blocks j' < j of its head, which have lower b: no block waits for one
// that has not started. Costs: the writer's wait for the reductions' completion and the turns;
// FlashAttention-3's deterministic backward is about 17% slower; predicted 0.85-0.95x of rung 5.
#include <algorithm>
#include <string>

#include "fa3_bwd_common.cuh"

namespace attention::fa3_bwd {

using fa3::issue_pv;
using fa3::issue_qk;

namespace {

constexpr int kStages = 2, kWsThreads = 384;

// Shared memory (in 16-bit values from a 1024-aligned base): K_j, V_j (Bc × D each); kStages slots
// of Q_i and dO_i (Br × D each); two turns of both warpgroups' dSᵀ tiles (64 keys × Br queries
// each); a dQ staging tile a consumer warpgroup (two boxes of 64 rows × 32 floats, in the 128-byte
// swizzle); kStages slots of L_i and D_i (Br floats each); the barriers (K and V's; a slot's full and
// empty; a staging tile's full and empty).
template <int D>
struct Smem {
  static constexpr int Br = one_dq_query_rows(D);  // a warpgroup's half of dQ: 64 × 64 either way
  static constexpr int kK = 0, kV = kBc * D, kQ = 2 * kBc * D, kSlot = 2 * Br * D;  // Q, then dO
  static constexpr int kDs = kQ + kStages * kSlot, kDq = kDs + 2 * 2 * 64 * Br;
  static constexpr int kStats = kDq + 2 * 64 * 64 * 2;
  static constexpr int kBars = kStats + kStages * 2 * Br * 2;  // after the floats (2 halves each)
  static constexpr size_t kBytes = 2 * size_t(kBars) + 8 * (1 + 2 * kStages + 4) + 1024;
};

// Warpgroup wg's half of dQ_i += dS·K_j over the key block's 128 keys: eight k steps of 16 keys,
// the first four from warpgroup 0's dSᵀ tile, the last four from warpgroup 1's (dSt: both, 64 keys ×
// Br queries each, [key][query], MN-major), and K_j's rows (MN-major). At Br = 128 the half is dS's
// query block wg of 64 (a column block of the dSᵀ tiles) times all of K_j; at Br = 64 it is all of
// dS times K_j's column block wg.
template <class T, int Br>
__device__ void issue_dq_half(float (&dq)[8][4], const uint16_t* dSt, const uint16_t* Ks, int wg) {
  constexpr bool rows = Br == 128;
  const uint64_t a = hopper::make_desc(hopper::smem_u32(dSt) + (rows ? wg * 64 * 128 : 0), 64 * 128, 1024);
  const uint64_t b = hopper::make_desc(hopper::smem_u32(Ks) + (rows ? 0 : wg * kBc * 128), kBc * 128, 1024);
#pragma unroll
  for (int s = 0; s < 8; ++s)
    hopper::wgmma_ss<T, 64, true>(dq, hopper::desc_advance(a, (s / 4) * 128 * Br + (s % 4) * 16 * 128),
                                  hopper::desc_advance(b, s * 16 * 128), s > 0);
}

template <class T, int D, bool kDeterministic>
__global__ void __launch_bounds__(kWsThreads, 1)
    flash_v3_bwd_one_dq(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                        const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapdO,
                        const __grid_constant__ CUtensorMap mapdQ, int* __restrict__ dq_turn, int key_group,
                        tc::Params p,
                        const float* __restrict__ L,
                        const float* __restrict__ Dv, float* __restrict__ dQacc, uint16_t* __restrict__ dK,
                        uint16_t* __restrict__ dV) {
  using Sm = Smem<D>;
  constexpr int Br = Sm::Br, NT = Br / 8, DT = D / 8;
  constexpr bool kRowHalves = Br == 128;  // a warpgroup's half of dQ: 64 rows (d = 64) or 64 columns
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const smem = fa3::align1024(smem_raw);
  uint16_t* const Ks = smem + Sm::kK;
  uint16_t* const Vs = smem + Sm::kV;
  auto Qs = [&](int slot) { return smem + Sm::kQ + slot * Sm::kSlot; };
  auto dOs = [&](int slot) { return Qs(slot) + Br * D; };
  auto dSt = [&](int turn) { return smem + Sm::kDs + turn * 2 * 64 * Br; };  // both warpgroups' tiles
  float* const stats = reinterpret_cast<float*>(smem + Sm::kStats);
  auto Ls = [&](int slot) { return stats + slot * 2 * Br; };
  auto Ds = [&](int slot) { return Ls(slot) + Br; };
  uint64_t* const bar_kv = reinterpret_cast<uint64_t*>(smem + Sm::kBars);
  uint64_t* const full = bar_kv + 1;          // full[s]: slot s's Q, dO (bytes) and L, D (the warp's 32 arrivals) are in
  uint64_t* const empty = full + kStages;     // empty[s]: the 256 consumer threads are done with slot s
  uint64_t* const dq_full = empty + kStages;  // dq_full[c]: consumer warpgroup c's 4 warps staged their half
  uint64_t* const dq_empty = dq_full + 2;     // dq_empty[c]: the writer's reductions have read the tile
  auto dQs = [&](int cwg) { return reinterpret_cast<float*>(smem + Sm::kDq) + cwg * 64 * 64; };
  const int warp = threadIdx.x / 32, wg = warp / 4, lane = tc::lane_id();
  // Rung 6: the blocks in groups of key_group key blocks a head (grouped_key_block), rung 5 head by head.
  const int2 jh = kDeterministic ? grouped_key_block(blockIdx.x + gridDim.x * blockIdx.y, gridDim.x, gridDim.y, key_group)
                                 : make_int2(blockIdx.x, blockIdx.y);
  const int j = jh.x, h = jh.y, key0 = j * kBc;
  // Computed after setmaxnreg in each role (what is live across the producer's setmaxnreg.dec
  // must fit in its 24 registers).
  auto geometry = [&] {
    return make_int2(first_query_block(Br, kBc, p.causal, j), (p.N + Br - 1) / Br);  // first, Tr
  };
  // Step k's query block: from the first the block reaches; rung 6 walks from the last, so that
  // causal or not, every key block of a head reaches query block i at the same step.
  auto query_block = [](int k, int first, int Tr) { return kDeterministic ? Tr - 1 - k : first + k; };
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(&full[s], 1 + 32);  // lane 0's expect_tx, and every lane's after its L, D stores
      hopper::mbarrier_init(&empty[s], 256);
    }
    for (int c = 0; c < 2; ++c) {
      hopper::mbarrier_init(&dq_full[c], 4);
      hopper::mbarrier_init(&dq_empty[c], 1);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- the producer: its first warp loads, its second writes dQ ----
    hopper::setmaxnreg_dec<24>();
    const int first = geometry().x, Tr = geometry().y;
    if (warp == 1) {
      // Step k's two halves of dQ (query block i), each in its staging tile: lane 0 adds the tile's
      // two boxes into dQacc by TMA reductions (rows past N are not added), waits until the engine
      // has read them, and gives the tile back. All writes done before exit.
      auto add_half = [&](int c, int i) {
        const int col0 = kRowHalves ? 0 : 64 * c, row0 = i * Br + (kRowHalves ? 64 * c : 0);
        hopper::tma_reduce_add_3d(&mapdQ, dQs(c), col0, row0, h);
        hopper::tma_reduce_add_3d(&mapdQ, dQs(c) + 64 * 32, col0 + 32, row0, h);
      };
      for (int k = 0; first + k < Tr; ++k) {
        const int i = query_block(k, first, Tr);
        if constexpr (kDeterministic) {
          // Both halves staged: in key block j's turn at query block i (the counter reads j), add
          // them, give the tiles back once read, wait until the additions are done in dQacc, bump
          // the counter. The turn is polled only once the halves are in: a writer polling through
          // the whole step loads the L2 (0.87-1.00x, H200).
          hopper::mbarrier_wait(&dq_full[0], k & 1);
          hopper::mbarrier_wait(&dq_full[1], k & 1);
          if (lane == 0) {
            int* const turn = dq_turn + size_t(h) * Tr + i;
            while (hopper::ld_acquire_gpu(turn) != j) {
            }
            hopper::fence_proxy_async_global();  // the reductions after the read that allowed them
            add_half(0, i);
            add_half(1, i);
            hopper::bulk_commit();
            hopper::bulk_wait_read<0>();
            hopper::mbarrier_arrive(&dq_empty[0]);
            hopper::mbarrier_arrive(&dq_empty[1]);
            hopper::bulk_wait<0>();
            hopper::fence_proxy_async_global();
            hopper::red_release_gpu_add(turn, 1);  // key block j + 1's turn
          }
        } else {
          for (int c = 0; c < 2; ++c) {
            hopper::mbarrier_wait(&dq_full[c], k & 1);
            if (lane == 0) {
              add_half(c, i);
              hopper::bulk_commit();
              hopper::bulk_wait_read<0>();
              hopper::mbarrier_arrive(&dq_empty[c]);
            }
          }
        }
        __syncwarp();
      }
      hopper::bulk_wait<0>();
      return;
    }
    if (warp != 0) return;
    if (lane == 0) {
      hopper::mbarrier_arrive_expect_tx(bar_kv, 2 * kBc * D * 2);
#pragma unroll
      for (int b = 0; b < D / 64; ++b) {
        hopper::tma_load_3d(Ks + b * kBc * 64, &mapK, bar_kv, 64 * b, key0, h);
        hopper::tma_load_3d(Vs + b * kBc * 64, &mapV, bar_kv, 64 * b, key0, h);
      }
    }
    // Rung 4's ring: step k into slot k % kStages once its use k − kStages is given back.
    for (int k = 0; first + k < Tr; ++k) {
      const int slot = k % kStages, row0 = query_block(k, first, Tr) * Br;
      if (k >= kStages) hopper::mbarrier_wait(&empty[slot], (k / kStages - 1) & 1);
      if (lane == 0) {
        hopper::mbarrier_arrive_expect_tx(&full[slot], 2 * Br * D * 2);
#pragma unroll
        for (int b = 0; b < D / 64; ++b) {
          hopper::tma_load_3d(Qs(slot) + b * Br * 64, &mapQ, &full[slot], 64 * b, row0, h);
          hopper::tma_load_3d(dOs(slot) + b * Br * 64, &mapdO, &full[slot], 64 * b, row0, h);
        }
      }
#pragma unroll
      for (int r = lane; r < Br; r += 32) {
        const bool in = row0 + r < p.N;
        Ls(slot)[r] = in ? (L + size_t(h) * p.N)[row0 + r] : 0.0f;
        Ds(slot)[r] = in ? (Dv + size_t(h) * p.N)[row0 + r] : 0.0f;
      }
      hopper::mbarrier_arrive(&full[slot]);  // release: the stores above are seen by its waiters
    }
    return;
  }

  // ---- the consumers: warpgroups 1 and 2, 64 keys each ----
  hopper::setmaxnreg_inc<240>();
  const int first = geometry().x, Tr = geometry().y;
  const size_t head = size_t(h) * p.N * D;
  const int cwg = wg - 1, g = lane / 4, t = lane % 4, key_w = 64 * cwg + 16 * (warp % 4);
  const float c = p.scale * ptx::kLog2e;
  // Where the thread's element of its half of dQ (row r, column 8n + 2t) lies in the staging tile:
  // rung 4's addressing, boxes of 64 rows.
  auto dq_at = [&](int n, int half) {
    return dQs(cwg) + (n / 4) * 64 * 32 + (16 * (warp % 4) + g + 8 * half) * 32 + (((2 * (n % 4) + t / 2) ^ g) * 4) +
           2 * (t % 2);
  };
  hopper::mbarrier_wait(bar_kv, 0);

  float dk[1][DT][4] = {}, dv[1][DT][4] = {};
  for (int k = 0; first + k < Tr; ++k) {
    const int slot = k % kStages, row0 = query_block(k, first, Tr) * Br;
    uint16_t* const ds = dSt(k % 2);
    hopper::mbarrier_wait(&full[slot], (k / kStages) & 1);

    // Sᵀ and dPᵀ: the warpgroup's 64 keys × Br queries each.
    float St[1][NT][4], dPt[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D, kBc>(St[0], Ks, cwg, Qs(slot));
    issue_qk<T, D, kBc>(dPt[0], Vs, cwg, dOs(slot));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(St[0]);
    hopper::fence_registers(dPt[0]);
    if (COURSE_BLOCK_NEEDS_MASK(row0, key0 + kBc, p.Nk, p.causal))
      tc::mask_scores<true>(St, key0 + key_w, row0, p.Nk, p.causal);  // Sᵀ: keys in rows
    bwd::softmax_backward_t(St, dPt, Ls(slot), Ds(slot), c);           // Pᵀ in St, dSᵀ in dPt

    uint32_t Pa[1][NT / 2][4], dSa[1][NT / 2][4];
    tc::pack_a<T>(St[0], Pa[0]);
    tc::pack_a<T>(dPt[0], dSa[0]);
    store_ds_t<T>(ds + cwg * 64 * Br, dPt[0], warp % 4, g, t);
    hopper::fence_proxy_async();  // the stores (generic proxy) before the wgmma that reads them

    hopper::wgmma_fence();
    issue_pv<T, D>(dv[0], Pa[0], dOs(slot));
    issue_pv<T, D>(dk[0], dSa[0], Qs(slot));
    hopper::wgmma_commit();
    hopper::named_barrier_sync(1, 256);  // both warpgroups' dSᵀ of step k are in their tiles
    float dq[8][4];
    hopper::wgmma_fence();
    issue_dq_half<T, Br>(dq, ds, Ks, cwg);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // dV's and dK's products: Q_i, dO_i, L_i, D_i no longer read
    hopper::fence_registers(dv[0]);
    hopper::fence_registers(dk[0]);
    hopper::mbarrier_arrive(&empty[slot]);  // each thread's, for its reads of L_i and D_i (rung 3)

    hopper::wgmma_wait<0>();
    hopper::fence_registers(dq);
    // The half into the staging tile, once the writer has read step k − 1's; then to the writer.
    if (k > 0) hopper::mbarrier_wait(&dq_empty[cwg], (k - 1) & 1);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      *reinterpret_cast<float2*>(dq_at(n, 0)) = make_float2(dq[n][0], dq[n][1]);
      *reinterpret_cast<float2*>(dq_at(n, 1)) = make_float2(dq[n][2], dq[n][3]);
    }
    hopper::fence_proxy_async();
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(&dq_full[cwg]);
  }

  // dK_w·scale and dV_w through the tiles K_j and V_j held (stage 07's epilogue), once both
  // warpgroups' last dQ products have read K_j.
  hopper::named_barrier_sync(2, 256);
  bwd::stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, key_w, 0, g, t);
  __syncwarp();
  bwd::store_dk_dv<D, 16, D / 8>(dK, dV, Ks, Vs, head, key0, key_w, 0, p.N, lane);
}

}  // namespace

}  // namespace attention::fa3_bwd

namespace attention {

namespace {

// The deterministic rung's counters, heads × ⌈N/Br⌉ ints, zeroed before each launch (stream 0,
// as the launch); one buffer a GPU for the process, grown when a problem needs more.
int* dq_turns(std::size_t count) {
  static int* turns[64] = {};
  static std::size_t held[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  course::require(device < 64, "deterministic (stage 11): more than 64 GPUs");
  if (held[device] < count) {
    if (turns[device]) CUDA_CHECK(cudaFree(turns[device]));
    CUDA_CHECK(cudaMalloc(&turns[device], count * sizeof(int)));
    held[device] = count;
  }
  CUDA_CHECK(cudaMemsetAsync(turns[device], 0, count * sizeof(int)));
  return turns[device];
}

template <bool kDeterministic>
void launch_one_dq(const char* name, const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(a.dQacc != nullptr, std::string(name) + " (stage 11): its dQ goes through dQacc");
  tc::dispatch(name, s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper((std::string(name) + " (stage 11)").c_str());
    using Sm = fa3_bwd::Smem<C::D>;
    static_assert(Sm::kBytes <= 227 * 1024, "rung 5's shared memory: at most 227 KB a block");
    const auto m = fa3_bwd::tensor_maps(s, t, C::D, a, Sm::Br);
    int* const turns = kDeterministic ? dq_turns(std::size_t(s.heads()) * ((s.N + Sm::Br - 1) / Sm::Br)) : nullptr;
    // Rung 6's groups: G key blocks of a head run together and take their turns in line, (G − 1)
    // turns' wait once a walk of Tr steps; fewer share the head's Q and dO in the L2. G = Tr / 4
    // within [2, 8] balances the two (chapter 11).
    const int Tr = (s.N + Sm::Br - 1) / Sm::Br, group = std::clamp(Tr / 4, 2, 8);
    fa3_bwd::launch_per_key_block(fa3_bwd::flash_v3_bwd_one_dq<typename C::T, C::D, kDeterministic>, Sm::kBytes,
                                  fa3_bwd::kWsThreads, s, C::D, a, m.Q, m.K, m.V, m.dO,
                                  fa3_bwd::dq_tensor_map(s, C::D, a, 64), turns, group);
  });
}

}  // namespace

void launch_fa3_bwd_one_dq(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  launch_one_dq<false>("one_dq", s, t, a);
}
void launch_fa3_bwd_deterministic(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  launch_one_dq<true>("deterministic", s, t, a);
}

}  // namespace attention
