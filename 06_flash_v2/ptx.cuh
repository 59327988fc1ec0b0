// The tensor-core building blocks of stages 06 and 07: each wrapper is one PTX instruction (or a
// pair), a few lines, with the PTX ISA section it comes from (PTX ISA 9.0, "Instruction Set").
// Everything is per warp: the 32 lanes call it together, each with its own registers.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): a lane is
// g = lane / 4 (its "group", a row) and t = lane % 4 (its place in the group, a column pair).
//   A, 16 × 16, four 32-bit registers of two 16-bit values:
//     a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
//   B, 16 × 8 (k × n), two registers:   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, 16 × 8, four floats:  c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// So a lane holds two rows (g and g + 8) of every C tile, and the C tiles of two neighbouring
// 8-column blocks are, once packed to 16 bits, exactly an A fragment: P = softmax(S) goes from the
// accumulators of S = Q·Kᵀ straight into the A operand of P·V, never through shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ptx {

// --- mma: D = A·B + C on the tensor cores ---------------------------------------------------------
// PTX ISA, "Warp-level matrix multiply-accumulate instructions" › "mma":
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32
// A is 16 × 16 (row-major: its rows are the k-contiguous ones), B is 16 × 8 stored "col" (each
// column k-contiguous), C and D are 16 × 8 in fp32. 4096 FLOPs per instruction.
template <class T>
__device__ inline void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ inline void mma_m16n8k16<__half>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ inline void mma_m16n8k16<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                   const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats into one register of two 16-bit values, rounded to nearest (lo in the low half):
// PTX ISA, "Data movement and conversion instructions" › "cvt" (cvt.rn.f16x2.f32, .bf16x2.f32).
template <class T>
__device__ inline uint32_t pack(float lo, float hi);
template <>
__device__ inline uint32_t pack<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ inline uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// log₂ e: e^x = 2^(x·log₂ e). The kernels fold it into the softmax scale (c = scale·log₂ e) so that
// each exponential is one ex2 (stages 06, 07 and 08).
constexpr float kLog2e = 1.4426950408889634f;

// 2^x in one instruction of the special-function unit (MUFU.EX2): PTX ISA, "Floating point
// instructions" › "ex2" (ex2.approx.ftz.f32; relative error about 2^-22, ex2(−∞) = +0).
__device__ inline float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// --- ldmatrix: four 8 × 8 tiles of 16-bit values from shared memory into fragments ---------------
// PTX ISA, "Warp-level matrix load instruction: ldmatrix":
//   ldmatrix.sync.aligned.m8n8.x4.shared.b16 (and .trans)
// Lanes 8q .. 8q+7 give the addresses of the 8 rows (16 bytes each) of tile q; afterwards r[q]
// holds, in lane (g, t), row g, columns 2t and 2t+1 of tile q: the layout of a fragment. With
// .trans each tile arrives transposed (row 2t and 2t+1 of column g): how V, stored key-major,
// becomes the "col" B operand of P·V. One instruction moves 512 bytes; a warp's 8 row addresses
// of one tile should fall in 8 different 16-byte bank groups (see swizzle below).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The same from a 32-bit shared-memory byte address (stage 07's split rung keeps one such address
// a lane per operand and reaches every fragment from it by an XOR and an immediate offset).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// A 32-bit store to shared memory at a byte address (PTX ISA, "st": st.shared.b32).
__device__ inline void st_shared_b32(uint32_t address, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
}
// The 32-bit shared-memory byte address of a pointer into shared memory.
__device__ inline uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// --- cp.async: global -> shared without passing through registers ------------------------------
// PTX ISA, "Data movement and conversion instructions" › "cp.async":
//   cp.async.cg.shared.global [dst], [src], 16, src-size
// Copies 16 bytes (.cg: cached in L2 only, not in L1). With src-size = 0 nothing is read and the
// 16 bytes are zero-filled: rows past the end of a sequence arrive as zeros. The copy runs in the
// background; commit() closes a group of copies, wait<n>() waits until at most n groups are
// still in flight ("cp.async.commit_group", "cp.async.wait_group"). A __syncthreads() after the
// wait makes every thread's copies visible to the whole block.
__device__ inline void cp_async_16(void* smem, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 16 : 0));
}
// The 4-byte form (.ca: sizes 4 and 8 must be cached in L1 too) for arrays of floats whose rows
// need not start on 16 bytes, such as stage 07's L and D.
__device__ inline void cp_async_4(void* smem, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 4 : 0));
}
// The same where `valid`, and where not a store of `fill` instead of the zero fill: one predicated
// instruction each, no branch (stage 07's L of the query rows past N: +∞).
__device__ inline void cp_async_4_or(void* smem, const void* global, bool valid, float fill) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.ca.shared.global [%0], [%1], 4;\n"
      " @!p st.shared.f32 [%0], %3;\n}\n" ::"r"(address),
      "l"(global), "r"(int(valid)), "f"(fill));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int n>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}

// --- red: add to global memory, in L2 -------------------------------------------------------------
// PTX ISA, "Parallel synchronization and communication instructions" › "red":
//   red.global.add.f32 [a], b;   and on sm_90 the vector form  red.global.v2.f32.add [a], {b0, b1};
// The SM sends the values and L2 performs the add; nothing returns, so no register waits for it.
// Stage 07 adds each thread block's share of dQ so. A lane's two accumulators of an mma C tile
// are neighbours (columns 2t, 2t+1): the vector form sends both in one request, and a warp's
// request covers 8 rows × 8 floats, whole 32-byte sectors (the scalar form covers each sector
// twice, in two requests of half of it).
__device__ inline void red_add_f32x2(float* global, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.v2.f32.add [%0], {%1, %2};\n" ::"l"(global), "f"(a), "f"(b) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(global), "f"(a) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(global + 1), "f"(b) : "memory");
#endif
}
// Four neighbours (16 bytes, aligned): red.global.v4.f32.add on sm_90.
__device__ inline void red_add_f32x4(float* global, float4 v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.v4.f32.add [%0], {%1, %2, %3, %4};\n" ::"l"(global), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
#else
  red_add_f32x2(global, v.x, v.y);
  red_add_f32x2(global + 2, v.z, v.w);
#endif
}

// The same where `pred` holds, as one predicated instruction (@p red): no branch, so the caller's
// address arithmetic stays outside any conditional code.
__device__ inline void red_add_f32x4(float* global, float4 v, bool pred) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p red.global.v4.f32.add [%0], {%1, %2, %3, %4};\n}\n" ::"l"(global),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(int(pred))
      : "memory");
#else
  if (pred) red_add_f32x4(global, v);
#endif
}

// --- the swizzle: where 16-byte chunk c of row r of a tile lives in shared memory ---------------
// Shared memory has 32 banks of 4 bytes: 128 bytes, 8 chunks of 16 bytes, per "wavefront". A tile
// whose rows are a multiple of 128 bytes (64 or 128 halves) puts chunk c of every row in the same
// banks, so the 8 row addresses of one ldmatrix tile (same c, 8 rows) would all hit one bank
// group: an 8-way conflict. XOR-ing the chunk index with the row's low three bits spreads those 8
// rows over 8 different bank groups, while a row's own chunks stay a permutation of themselves
// (16-byte copies into a row never conflict either). Nothing is padded; the map is its own inverse.
// Element offset (in 16-bit values) of chunk c of row r, for rows of kRowHalves halves.
template <int kRowHalves>
__device__ inline int swizzle(int r, int c) {
  static_assert(kRowHalves % 64 == 0, "rows of a multiple of 128 bytes");
  return r * kRowHalves + ((c ^ (r & 7)) << 3);
}

}  // namespace ptx
