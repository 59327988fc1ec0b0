// Rung 7: FlashAttention-3's tiles by d and mask. At d = 128 without the mask, query blocks of 80
// rows instead of 64 (key blocks stay 128); elsewhere rung 5's kernel and tiles (128 × 128 at
// d = 64, 64 × 128 causal at d = 128, where the diagonal's blocks favour the smaller step).
//
// What changed from rung 5 (fa3_bwd_5_one_dq.cu), at d = 128 not causal:
//  - Sᵀ and dPᵀ are 64 keys × 80 queries a warpgroup (wgmma with N = 80); dV and dK take five k
//    steps of 16 queries a step instead of four.
//  - dQ is computed transposed, dQᵀ = K_jᵀ·dSᵀ: 80 query rows do not fit wgmma's M of 64, but they
//    do fit its N. A warpgroup's half is 64 of d's columns × 80 queries; A is K_j's column block
//    read MN-major, B is dS stored [query][key] (K-major). Each warpgroup writes its dSᵀ there
//    transposed, by stmatrix.trans: its registers already hold dK's A fragments, four 8 × 8
//    matrices each, and five stmatrix a thread store them (rung 5's 4-byte stores would take twenty
//    at 80 queries; sixteen at its 64).
//  - dQᵀ's half is staged into dQacc's layout (query rows) by 4-byte stores, 40 a thread, in two
//    boxes of 80 rows × 32 floats; the writer adds them as in rung 5.
// Shared memory: K, V 64 KB; two slots of Q, dO 80 KB; two turns of dS 40 KB; staging 40 KB: 226 KB
// of the 227 a block may have. What should move: every step's fixed cost (the barrier before dQ,
// the waits for Sᵀ and dPᵀ and for dQ, the staging's fence: a third of the samples in rung 5's loop)
// is paid for 80 queries instead of 64 (dQ's bytes do not change: a key block adds N × d floats
// whatever the query block). Predicted 1.03-1.08× over rung 5 at d = 128 not causal.
#include <string>

#include "fa3_bwd_common.cuh"

namespace attention::fa3_bwd {

using fa3::issue_pv;
using fa3::issue_qk;

namespace {

constexpr int kStages = 2, kWsThreads = 384, kD = 128, kBr80 = tiles_query_rows(kD, false);
static_assert(kBr80 == 80, "rung 7's wide tiles: 80 query rows");

// Shared memory (in 16-bit values from a 1024-aligned base), as rung 5's: K_j, V_j; kStages slots of
// Q_i and dO_i (80 rows each); two turns of dS (80 queries × 128 keys: two 64-key column blocks, one
// a warpgroup); a dQ staging tile a consumer warpgroup (two boxes of 80 rows × 32 floats); kStages
// slots of L_i and D_i; the barriers. Every tile starts on 1024 bytes (80 rows of 128 bytes: 10 KB).
struct Smem80 {
  static constexpr int Br = kBr80, D = kD;
  static constexpr int kK = 0, kV = kBc * D, kQ = 2 * kBc * D, kSlot = 2 * Br * D;  // Q, then dO
  static constexpr int kDs = kQ + kStages * kSlot, kDq = kDs + 2 * Br * kBc;
  static constexpr int kStats = kDq + 2 * 64 * Br * 2;
  static constexpr int kBars = kStats + kStages * 2 * Br * 2;
  static constexpr size_t kBytes = 2 * size_t(kBars) + 8 * (1 + 2 * kStages + 4) + 1024;
};
static_assert(Smem80::kBytes <= 227 * 1024, "rung 7's shared memory: at most 227 KB a block");

// The warpgroup's dSᵀ (its 64 keys × 80 queries, already packed as dK's A fragments: k step kk holds
// queries 16kk .. 16kk + 15) into dS's tile, transposed: [query][key], its column block wg. Fragment
// register r of step kk is the 8 × 8 matrix of keys +8(r % 2) and queries +8(r / 2) of the warp's
// 16 keys; stmatrix.trans stores it as 8 query rows of 8 keys (16 bytes), lane i naming row i % 8 of
// matrix i / 8.
template <int KT>
__device__ void store_ds(uint16_t* ds, const uint32_t (&dSa)[KT][4], int wg, int warp_in_wg, int lane) {
  const int m = lane / 8, chunk = 8 * wg + 2 * warp_in_wg + m % 2;  // the 16-byte chunk of the row
#pragma unroll
  for (int kk = 0; kk < KT; ++kk)
    hopper::stmatrix_x4_trans(hopper::smem_u32(ds + hopper::swizzle128<16 * KT>(16 * kk + 8 * (m / 2) + lane % 8, chunk)),
                              dSa[kk]);
}

// Warpgroup wg's half of dQ_iᵀ (d's columns 64wg .. 64wg + 63 × 80 queries) = K_jᵀ·dSᵀ over the
// key block's 128 keys: eight k steps of 16 keys. A: K_j's column block wg, MN-major (its rows are
// keys, the k of this product); B: dS [query][key], K-major, the step's 32 bytes in column block
// s / 4.
template <class T>
__device__ void issue_dq_t(float (&dqt)[kBr80 / 8][4], const uint16_t* ds, const uint16_t* Ks, int wg) {
  const uint64_t a = hopper::make_desc(hopper::smem_u32(Ks) + wg * kBc * 128, kBc * 128, 1024);
  const uint64_t b = hopper::make_desc(hopper::smem_u32(ds), 0, 1024);
#pragma unroll
  for (int s = 0; s < 8; ++s)
    hopper::wgmma_ss<T, kBr80, true, false>(dqt, hopper::desc_advance(a, s * 16 * 128),
                                            hopper::desc_advance(b, (s / 4) * kBr80 * 128 + (s % 4) * 32), s > 0);
}

template <class T>
__global__ void __launch_bounds__(kWsThreads, 1)
    flash_v3_bwd_tiles80(const __grid_constant__ CUtensorMap mapQ, const __grid_constant__ CUtensorMap mapK,
                         const __grid_constant__ CUtensorMap mapV, const __grid_constant__ CUtensorMap mapdO,
                         const __grid_constant__ CUtensorMap mapdQ, tc::Params p, const float* __restrict__ L,
                         const float* __restrict__ Dv, float* __restrict__ dQacc, uint16_t* __restrict__ dK,
                         uint16_t* __restrict__ dV) {
  using Sm = Smem80;
  constexpr int Br = Sm::Br, D = Sm::D, NT = Br / 8, DT = D / 8;
  extern __shared__ uint8_t smem_raw[];
  uint16_t* const smem = fa3::align1024(smem_raw);
  uint16_t* const Ks = smem + Sm::kK;
  uint16_t* const Vs = smem + Sm::kV;
  auto Qs = [&](int slot) { return smem + Sm::kQ + slot * Sm::kSlot; };
  auto dOs = [&](int slot) { return Qs(slot) + Br * D; };
  auto dSt = [&](int turn) { return smem + Sm::kDs + turn * Br * kBc; };  // [query][key], both warpgroups'
  float* const stats = reinterpret_cast<float*>(smem + Sm::kStats);
  auto Ls = [&](int slot) { return stats + slot * 2 * Br; };
  auto Ds = [&](int slot) { return Ls(slot) + Br; };
  uint64_t* const bar_kv = reinterpret_cast<uint64_t*>(smem + Sm::kBars);
  uint64_t* const full = bar_kv + 1;
  uint64_t* const empty = full + kStages;
  uint64_t* const dq_full = empty + kStages;
  uint64_t* const dq_empty = dq_full + 2;
  auto dQs = [&](int cwg) { return reinterpret_cast<float*>(smem + Sm::kDq) + cwg * 64 * Br; };
  const int warp = threadIdx.x / 32, wg = warp / 4, lane = tc::lane_id();
  const int j = blockIdx.x, h = blockIdx.y, key0 = j * kBc;
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(bar_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(&full[s], 1 + 32);
      hopper::mbarrier_init(&empty[s], 256);
    }
    for (int c = 0; c < 2; ++c) {
      hopper::mbarrier_init(&dq_full[c], 4);
      hopper::mbarrier_init(&dq_empty[c], 1);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- the producer: its first warp loads, its second writes dQ (rung 5's) ----
    hopper::setmaxnreg_dec<24>();
    const int Tr = (p.N + Br - 1) / Br;
    if (warp == 1) {
      for (int k = 0; k < Tr; ++k)
        for (int c = 0; c < 2; ++c) {
          hopper::mbarrier_wait(&dq_full[c], k & 1);
          if (lane == 0) {
            hopper::tma_reduce_add_3d(&mapdQ, dQs(c), 64 * c, k * Br, h);
            hopper::tma_reduce_add_3d(&mapdQ, dQs(c) + Br * 32, 64 * c + 32, k * Br, h);
            hopper::bulk_commit();
            hopper::bulk_wait_read<0>();
            hopper::mbarrier_arrive(&dq_empty[c]);
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
    for (int k = 0; k < Tr; ++k) {
      const int slot = k % kStages, row0 = k * Br;
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
      hopper::mbarrier_arrive(&full[slot]);
    }
    return;
  }

  // ---- the consumers: warpgroups 1 and 2, 64 keys each ----
  hopper::setmaxnreg_inc<240>();
  const int Tr = (p.N + Br - 1) / Br;
  const size_t head = size_t(h) * p.N * D;
  const int cwg = wg - 1, g = lane / 4, t = lane % 4, key_w = 64 * cwg + 16 * (warp % 4);
  const float c = p.scale * ptx::kLog2e;
  // Where the thread's element e of dQᵀ's n-tile (d column 16w + g + 8(e / 2) of the half, query
  // 8n + 2t + e % 2) lies in the staging tile: box col / 32 of 80 rows × 32 floats, its 16-byte
  // chunks XOR-ed with the row as TMA's 128-byte swizzle reads them. A warp's 32 stores of one
  // (n, e) fall in 32 different banks.
  auto dq_at = [&](int n, int e) {
    const int q = 8 * n + 2 * t + e % 2, col = 16 * (warp % 4) + g + 8 * (e / 2);
    return dQs(cwg) + (col / 32) * Br * 32 + q * 32 + ((((col % 32) / 4) ^ (q % 8)) * 4) + col % 4;
  };
  hopper::mbarrier_wait(bar_kv, 0);

  float dk[1][DT][4] = {}, dv[1][DT][4] = {};
  for (int k = 0; k < Tr; ++k) {
    const int slot = k % kStages, row0 = k * Br;
    uint16_t* const ds = dSt(k % 2);
    hopper::mbarrier_wait(&full[slot], (k / kStages) & 1);

    // Sᵀ and dPᵀ: the warpgroup's 64 keys × 80 queries each.
    float St[1][NT][4], dPt[1][NT][4];
    hopper::wgmma_fence();
    issue_qk<T, D, kBc>(St[0], Ks, cwg, Qs(slot));
    issue_qk<T, D, kBc>(dPt[0], Vs, cwg, dOs(slot));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(St[0]);
    hopper::fence_registers(dPt[0]);
    if (COURSE_BLOCK_NEEDS_MASK(row0, key0 + kBc, p.Nk, false))
      tc::mask_scores<true>(St, key0 + key_w, row0, p.Nk, false);  // keys from Nk on
    bwd::softmax_backward_t(St, dPt, Ls(slot), Ds(slot), c);

    uint32_t Pa[1][NT / 2][4], dSa[1][NT / 2][4];
    tc::pack_a<T>(St[0], Pa[0]);
    tc::pack_a<T>(dPt[0], dSa[0]);
    store_ds(ds, dSa[0], cwg, warp % 4, lane);
    hopper::fence_proxy_async();

    hopper::wgmma_fence();
    issue_pv<T, D>(dv[0], Pa[0], dOs(slot));
    issue_pv<T, D>(dk[0], dSa[0], Qs(slot));
    hopper::wgmma_commit();
    hopper::named_barrier_sync(1, 256);  // both warpgroups' dSᵀ of step k are in the tile
    float dqt[NT][4];
    hopper::wgmma_fence();
    issue_dq_t<T>(dqt, ds, Ks, cwg);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    hopper::fence_registers(dv[0]);
    hopper::fence_registers(dk[0]);
    hopper::mbarrier_arrive(&empty[slot]);

    hopper::wgmma_wait<0>();
    hopper::fence_registers(dqt);
    if (k > 0) hopper::mbarrier_wait(&dq_empty[cwg], (k - 1) & 1);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) *dq_at(n, e) = dqt[n][e];
    hopper::fence_proxy_async();
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(&dq_full[cwg]);
  }

  hopper::named_barrier_sync(2, 256);
  bwd::stage_dk_dv<T, D>(Ks, Vs, dk, dv, p.scale, key_w, 0, g, t);
  __syncwarp();
  bwd::store_dk_dv<D, 16, D / 8>(dK, dV, Ks, Vs, head, key0, key_w, 0, p.N, lane);
}

}  // namespace

}  // namespace attention::fa3_bwd

namespace attention {

void launch_fa3_bwd_tiles(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(a.dQacc != nullptr, "tiles (stage 11): its dQ goes through dQacc");
  tc::dispatch("tiles", s, t, [&](auto config) {
    using C = decltype(config);
    fa3::require_hopper("tiles (stage 11)");
    if constexpr (C::D == fa3_bwd::kD) {
      if (!s.causal) {
        using Sm = fa3_bwd::Smem80;
        const auto m = fa3_bwd::tensor_maps(s, t, C::D, a, Sm::Br);
        fa3_bwd::launch_per_key_block(fa3_bwd::flash_v3_bwd_tiles80<typename C::T>, Sm::kBytes, fa3_bwd::kWsThreads, s,
                                      C::D, a, m.Q, m.K, m.V, m.dO, fa3_bwd::dq_tensor_map(s, C::D, a, Sm::Br));
        return;
      }
    }
    launch_fa3_bwd_one_dq(s, t, a);  // rung 5's tiles
  });
}

}  // namespace attention
