// The two products on the e4m3 tensor cores (hopper.cuh's wgmma_*_e4m3), and P̃ on its way from
// S's accumulator to P̃·V's A operand: packed into e4m3 bytes where the operand wants them, in
// registers or stored by stmatrix into a warpgroup's tile.
#pragma once

#include "fp8_pipeline.cuh"

namespace attention::fp8 {

// S = Q·K_jᵀ for warpgroup wg's 64 rows: D/32 wgmma's of 64 × Bc × 32, both operands K-major, rows
// of D bytes in the D-byte swizzle (128 bytes: mode 1, SBO 1024; 64 bytes: mode 2, SBO 512).
// Bc = 256 (rungs 3-7): one wgmma of 64 × 256 × 32 a step, K's 256 rows in the same swizzle.
template <int D, int Bc = kBc>
__device__ void issue_qk(float (&S)[Bc / 8][4], uint32_t Qs, int wg, uint32_t Ks) {
  constexpr uint32_t swizzle = D == 128 ? 1 : 2, sbo = 8 * D;
  const uint64_t q = hopper::make_desc(Qs + wg * 64 * D, 0, sbo, swizzle);
  const uint64_t k = hopper::make_desc(Ks, 0, sbo, swizzle);
#pragma unroll
  for (int s = 0; s < D / 32; ++s)
    hopper::wgmma_ss_e4m3<Bc>(S, hopper::desc_advance(q, 32 * s), hopper::desc_advance(k, 32 * s), s > 0);
}

// o_j = P̃·V_j into a fresh accumulator (the first step does not add): Bc/32 wgmma's of 64 × NV × 32,
// P̃ from registers, Vᵀ's D rows of 128 key bytes from shared memory (K-major, the 128-byte swizzle);
// NV = D + 8 when the 8 rows of ones follow (the row sums in o_j's last 8 columns).
// Not o += P̃·V_j as in stage 08: the FP8 tensor cores add into their accumulator with fewer bits
// than fp32 (truncating what falls below them), so a long sum in one accumulator drifts toward zero
// (−12 % on O at N = 16384 with inputs of mean 0.5, chapter 09). Each block's keys are summed on the
// tensor cores; the blocks are added in fp32 (promote), DeepSeek-V3's remedy.
template <int NV>
__device__ void issue_pv(float (&o)[NV / 8][4], const uint32_t (&P)[kBc / 32][4], uint32_t Vts) {
  const uint64_t v = hopper::make_desc(Vts, 0, 1024, 1);
#pragma unroll
  for (int s = 0; s < kBc / 32; ++s) hopper::wgmma_rs_e4m3<NV>(o, P[s], hopper::desc_advance(v, 32 * s), s > 0);
}
// The same with P̃ from shared memory (the warpgroup's 64 rows of Bc bytes, K-major, the 128-byte
// swizzle, as Q at d = 128; written by store_p). fresh = false: the first step adds too (rungs 3-7,
// O on the tensor cores). Bc = 256: steps 4..7 read the second 128-key tiles of P̃ and of Vᵀ
// (kVtHalf bytes on: Layout's).
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

// Rung 7: P̃'s e4m3 bytes from fp16's bit pattern, not the exponential unit. A float's bit pattern
// read as an integer is close to a linear function of its logarithm (Mitchell; Schraudolph's
// exponential): fp16's 16 bits are about 1024·(log₂ v + 15). So 2^x's fp16 pattern is
// y = 1024·(x + 15), which two FFMAs write into a float's low 16 bits: y/R clamped to [0, 1]
// (FFMA.SAT: below 2^-15, and −∞ where masked, go to 0, and so would a NaN, which ex2 would carry
// into O; R = 0x7BFF, fp16's largest finite pattern), then t_sat·R + 1.5·2^23, where the float's ulp
// is 1, so y is rounded to an integer. A byte permutation pairs two such patterns as f16x2, and cvt
// turns each pair into two e4m3 bytes (rounded, subnormals and saturation as before). fp16's mantissa
// is approximated, 1 + f for 2^f, up to 6.1% high; δ = 44/1024 of a binade centres it (kLinDelta,
// about ±3%). kLinR, kLinMagic, kLinDelta, lin_a and lin_b: fp8.hpp, shared with the CPU's replica.
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
// Four of P̃'s values into one register of e4m3 bytes: from their floats, or (kLin) from lin_t's.
template <bool kLin>
__device__ inline uint32_t pack4(float x0, float x1, float x2, float x3) {
  if constexpr (kLin) return pack_lin(x0, x1, x2, x3);
  else return hopper::pack_e4m3(x0, x1, x2, x3);
}

// P̃ (fp32, S's accumulator layout) as the e4m3 A operand of P·V: step s (keys 32s..32s+31) from
// column tiles 4s..4s+3; each register the 4 values a thread holds of one row in two tiles. Vᵀ's
// keys are laid in the same order (fp8.hpp's key_position), so no byte moves between threads.
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

}  // namespace attention::fp8
