// The Hopper building blocks of stage 08 (and 09): each wrapper is one PTX instruction, a few
// lines, with the PTX ISA section it comes from (PTX ISA 9.0). Stage 06's ptx.cuh holds the
// Ampere-era ones (mma.sync, ldmatrix, cp.async, the swizzle); this header adds what Hopper (sm_90a)
// brings:
//   wgmma     asynchronous matrix products issued by a warpgroup (4 warps, 128 threads), operands
//             read straight from shared memory through a 64-bit "matrix descriptor"
//   TMA       the tensor memory accelerator: one thread asks the copy engine for a whole tile
//             (cp.async.bulk.tensor), described once on the host by a "tensor map"
//   mbarrier  a barrier in shared memory that also counts bytes: the copy engine "arrives" on it as
//             its bytes land, so a wait on it means "this tile is here"
//   bar       named barriers: a barrier among a subset of the block's warps (ping-pong)
//   setmaxnreg  moving registers between warpgroups at run time (producer gives, consumers take)
//   fence.proxy.async  ordering between ordinary memory accesses and the asynchronous units
//
// What CUTLASS's CuTe (or ThunderKittens) would hide here: the descriptor bit fields and their
// strides, the tensor map, the phase bits of a barrier ring, and the accumulator register lists.
// They are the lesson of this stage, so they stay visible.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hopper {

__device__ inline uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// --- wgmma: D (64 × N, fp32) += A (64 × 16) · B (16 × N) --------------------------------------------
// PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.mma_async,
// wgmma.fence, wgmma.commit_group, wgmma.wait_group).
//
// The four warps of a warpgroup issue one wgmma together. It returns at once; the tensor cores read
// A and B from shared memory (B always; A from shared memory, or from registers) and write D in the
// warpgroup's registers some time later. The rules that come with "asynchronous":
//   wgmma_fence()    before the first wgmma, and whenever registers it reads (D, or A) were written
//                    by ordinary instructions since: the tensor cores see those writes.
//   wgmma_commit()   closes a "group" of the wgmma's issued since the last commit.
//   wgmma_wait<n>()  waits until at most n groups are still running. Only then may the warpgroup
//                    read D, write D or A, or overwrite the shared memory they read.
// Between issue and wait the warps are free: they may do anything that does not touch those
// registers or that shared memory (the softmax of another block, for example: rung 5).
//
// D's layout in registers, per warp w of the warpgroup and lane (g = lane / 4, t = lane % 4): the
// warp owns rows 16w .. 16w + 15, and d[n][0..3] are, for n = 0 .. N/8 − 1, exactly an mma.sync C
// tile: rows g and g + 8, columns 8n + 2t and 8n + 2t + 1 (stage 06's ptx.cuh). A from registers
// has mma.sync's A layout for the warp's 16 rows. So stage 06's softmax code works on wgmma's
// accumulators unchanged, and P goes from S's accumulators into P·V's A operand as before.
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int n>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(n) : "memory");
}

// The compiler does not know that a wgmma writes D late: it could move a read of D above the
// wait. An empty asm that "reads and writes" each register, placed after the wait (and before
// the issue), pins the order (CUTLASS calls it warpgroup_fence_operand).
template <int R>
__device__ inline void fence_registers(float (&r)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(r[i][e])::"memory");
}
template <int R>
__device__ inline void fence_registers(uint32_t (&r)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// The shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  start address >> 4          bits 16-29  leading-dimension byte offset (LBO) >> 4
//   bits 32-45  stride-dimension byte offset (SBO) >> 4      bits 62-63  swizzle (1: 128-byte)
// Every tile of this stage uses the 128-byte swizzle: rows of 64 16-bit values (128 bytes), and
// 8 rows (1024 bytes, aligned to 1024) make one "atom" in which 16-byte chunk c of row r is stored
// at chunk c ^ r (swizzle128 below; the same XOR as stage 06's swizzle, and what TMA writes).
//   K-major operand (the 16 values of a k step contiguous: Q, K): SBO = 1024, the step from one
//     8-row atom to the next; LBO unused. The k step s of a 64-wide row is at start + 32·s bytes.
//   MN-major operand (V for P·V: its rows are keys, the k of that product): SBO = 1024, the step
//     from 8 keys to the next 8; LBO = the step from one 64-column block of V to the next.
// Stage 09's FP8 tiles at d = 64 have rows of 64 bytes: the 64-byte swizzle (swizzle = 2; its atom
// is 8 rows × 64 bytes, so SBO = 512), the rest as above.
__device__ inline uint64_t make_desc(uint32_t smem_address, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                     uint32_t swizzle = 1) {
  return uint64_t((smem_address & 0x3FFFF) >> 4) | uint64_t(lbo_bytes >> 4) << 16 |
         uint64_t(sbo_bytes >> 4) << 32 | uint64_t(swizzle) << 62;
}
// The descriptor of the same tile `bytes` further on (the start address is the low field).
__device__ inline uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Where 16-byte chunk c of row r of a tile of R rows × D 16-bit values lives, in 16-bit values from
// the tile's start: D/64 column blocks of R rows × 64 values, each row 128 bytes, chunks XOR-ed
// with the row's low three bits. This is what a TMA copy with the 128-byte swizzle writes, one
// column block per copy, and what the descriptors above describe.
template <int R>
__device__ inline int swizzle128(int r, int c) {
  return (c >> 3) * R * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3);
}

// The register lists of the accumulators: N/2 floats a thread for a 64 × N product.
#define HOPPER_ACC4(d, n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
#define HOPPER_ACC32(d) HOPPER_ACC4(d, 0), HOPPER_ACC4(d, 1), HOPPER_ACC4(d, 2), HOPPER_ACC4(d, 3), \
    HOPPER_ACC4(d, 4), HOPPER_ACC4(d, 5), HOPPER_ACC4(d, 6), HOPPER_ACC4(d, 7)
#define HOPPER_ACC64(d) HOPPER_ACC4(d, 0), HOPPER_ACC4(d, 1), HOPPER_ACC4(d, 2), HOPPER_ACC4(d, 3),     \
    HOPPER_ACC4(d, 4), HOPPER_ACC4(d, 5), HOPPER_ACC4(d, 6), HOPPER_ACC4(d, 7), HOPPER_ACC4(d, 8),      \
    HOPPER_ACC4(d, 9), HOPPER_ACC4(d, 10), HOPPER_ACC4(d, 11), HOPPER_ACC4(d, 12), HOPPER_ACC4(d, 13), \
    HOPPER_ACC4(d, 14), HOPPER_ACC4(d, 15)
#define HOPPER_REGS32                                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define HOPPER_REGS64                                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
  "%62, %63}"
// N = 72 and 136 (stage 09's P̃·V with a row of ones appended to Vᵀ: d + 8 columns, the last 8 the
// row sums): 36 and 68 floats.
#define HOPPER_ACC36(d) HOPPER_ACC32(d), HOPPER_ACC4(d, 8)
// N = 256 (stage 09's wide key blocks: S = Q·Kᵀ for 256 keys): 128 floats.
#define HOPPER_ACC128(d) HOPPER_ACC64(d), HOPPER_ACC4(d, 16), HOPPER_ACC4(d, 17), HOPPER_ACC4(d, 18),        \
    HOPPER_ACC4(d, 19), HOPPER_ACC4(d, 20), HOPPER_ACC4(d, 21), HOPPER_ACC4(d, 22), HOPPER_ACC4(d, 23), \
    HOPPER_ACC4(d, 24), HOPPER_ACC4(d, 25), HOPPER_ACC4(d, 26), HOPPER_ACC4(d, 27), HOPPER_ACC4(d, 28), \
    HOPPER_ACC4(d, 29), HOPPER_ACC4(d, 30), HOPPER_ACC4(d, 31)
#define HOPPER_ACC68(d) HOPPER_ACC64(d), HOPPER_ACC4(d, 16)
#define HOPPER_REGS36                                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}"
#define HOPPER_REGS128                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, " \
  "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, " \
  "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define HOPPER_REGS68                                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
  "%62, %63, %64, %65, %66, %67}"

// N = 80 (stage 11's 80-query tiles at d = 128: Sᵀ and dPᵀ for 80 queries, dQᵀ = K_jᵀ·dSᵀ): 40 floats.
#define HOPPER_ACC40(d) HOPPER_ACC32(d), HOPPER_ACC4(d, 8), HOPPER_ACC4(d, 9)
#define HOPPER_REGS40                                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}"

// A and B both from shared memory, both K-major by default (S = Q·Kᵀ: Q's rows and K's rows are
// d-contiguous). kTransA, kTransB = true take that operand MN-major (imm-trans-a, imm-trans-b = 1):
// stage 11's dQ = dS·K (dS stored as dSᵀ, K key-major: both) and dQᵀ = K_jᵀ·dSᵀ (K_jᵀ only).
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}  d, a-desc, b-desc, scale-d, 1, 1, tA, tB
// accumulate = false: D = A·B (scale-d 0: the old D is ignored, so it need not be zeroed).
#define HOPPER_WGMMA_SS(N, AB, REGS, ACC, A, B, S, TA, TB)                                   \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " S ", 0;\n"                             \
               " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32" AB AB " " REGS ", " A ", " B \
               ", p, 1, 1, " TA ", " TB ";\n}\n"                                             \
               : ACC                                                                          \
               : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(kTransA)), "n"(int(kTransB)))
template <class T, int N, bool kTransA = false, bool kTransB = kTransA>
__device__ inline void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 80 || N == 128, "wgmma_ss: N = 64, 80 or 128");
  constexpr bool half = std::is_same_v<T, __half>;
  if constexpr (N == 64 && half) HOPPER_WGMMA_SS(64, ".f16", HOPPER_REGS32, HOPPER_ACC32(d), "%32", "%33", "%34", "%35", "%36");
  else if constexpr (N == 64) HOPPER_WGMMA_SS(64, ".bf16", HOPPER_REGS32, HOPPER_ACC32(d), "%32", "%33", "%34", "%35", "%36");
  else if constexpr (N == 80 && half) HOPPER_WGMMA_SS(80, ".f16", HOPPER_REGS40, HOPPER_ACC40(d), "%40", "%41", "%42", "%43", "%44");
  else if constexpr (N == 80) HOPPER_WGMMA_SS(80, ".bf16", HOPPER_REGS40, HOPPER_ACC40(d), "%40", "%41", "%42", "%43", "%44");
  else if constexpr (half) HOPPER_WGMMA_SS(128, ".f16", HOPPER_REGS64, HOPPER_ACC64(d), "%64", "%65", "%66", "%67", "%68");
  else HOPPER_WGMMA_SS(128, ".bf16", HOPPER_REGS64, HOPPER_ACC64(d), "%64", "%65", "%66", "%67", "%68");
}

// A from registers (four 32-bit registers of two 16-bit values: mma.sync's A fragment for the
// warp's 16 rows), B from shared memory MN-major ("transposed": imm-trans-b = 1), for O += P·V
// with V stored key-major as it is in memory.
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}  d, {a0..a3}, b-desc, scale-d, 1, 1, 1
#define HOPPER_WGMMA_RS(N, AB, REGS, ACC, A, B, S)                                           \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " S ", 0;\n"                             \
               " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32" AB AB " " REGS ", " A ", " B \
               ", p, 1, 1, 1;\n}\n"                                                          \
               : ACC                                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)))
template <class T, int N>
__device__ inline void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_rs: N = 64 or 128");
  constexpr bool half = std::is_same_v<T, __half>;
  if constexpr (N == 64) {
    if constexpr (half) HOPPER_WGMMA_RS(64, ".f16", HOPPER_REGS32, HOPPER_ACC32(d), "{%32, %33, %34, %35}", "%36", "%37");
    else HOPPER_WGMMA_RS(64, ".bf16", HOPPER_REGS32, HOPPER_ACC32(d), "{%32, %33, %34, %35}", "%36", "%37");
  } else {
    if constexpr (half) HOPPER_WGMMA_RS(128, ".f16", HOPPER_REGS64, HOPPER_ACC64(d), "{%64, %65, %66, %67}", "%68", "%69");
    else HOPPER_WGMMA_RS(128, ".bf16", HOPPER_REGS64, HOPPER_ACC64(d), "{%64, %65, %66, %67}", "%68", "%69");
  }
}

// --- FP8: wgmma on e4m3 operands (stage 09) ------------------------------------------------------------
// The same instruction with .e4m3 inputs: k = 32 a step (32 bytes, as 16 16-bit values are), twice
// the 16-bit rate. Differences that shape stage 09: both operands must be K-major (no transpose
// immediates for 8-bit types), so P·V needs V stored transposed (keys contiguous); and the A
// operand from registers holds, per thread, 4 registers of 4 bytes: rows g and g + 8, keys
// 4t..4t+3 and 16 + 4t..16 + 4t + 3 of the 32-key step (mma.sync's m16n8k32 A fragment).
//   wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3  d, a-desc | {a0..a3}, b-desc, scale-d, 1, 1
#define HOPPER_WGMMA_E4M3(N, REGS, ACC, A, B, S, ...)                                                \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " S ", 0;\n"                                       \
               " wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 " REGS ", " A ", " B ", p, 1, 1;\n}\n" \
               : ACC                                                                                    \
               : __VA_ARGS__, "l"(desc_b), "r"(int(accumulate)))
template <int N>
__device__ inline void wgmma_ss_e4m3(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 72 || N == 128 || N == 136 || N == 256, "wgmma_ss_e4m3: N = 64, 72, 128, 136 or 256");
  if constexpr (N == 64) HOPPER_WGMMA_E4M3(64, HOPPER_REGS32, HOPPER_ACC32(d), "%32", "%33", "%34", "l"(desc_a));
  else if constexpr (N == 256) HOPPER_WGMMA_E4M3(256, HOPPER_REGS128, HOPPER_ACC128(d), "%128", "%129", "%130", "l"(desc_a));
  else if constexpr (N == 72) HOPPER_WGMMA_E4M3(72, HOPPER_REGS36, HOPPER_ACC36(d), "%36", "%37", "%38", "l"(desc_a));
  else if constexpr (N == 136) HOPPER_WGMMA_E4M3(136, HOPPER_REGS68, HOPPER_ACC68(d), "%68", "%69", "%70", "l"(desc_a));
  else HOPPER_WGMMA_E4M3(128, HOPPER_REGS64, HOPPER_ACC64(d), "%64", "%65", "%66", "l"(desc_a));
}
template <int N>
__device__ inline void wgmma_rs_e4m3(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 72 || N == 128 || N == 136, "wgmma_rs_e4m3: N = 64, 72, 128 or 136");
  if constexpr (N == 64)
    HOPPER_WGMMA_E4M3(64, HOPPER_REGS32, HOPPER_ACC32(d), "{%32, %33, %34, %35}", "%36", "%37",
                      "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));
  else if constexpr (N == 72)
    HOPPER_WGMMA_E4M3(72, HOPPER_REGS36, HOPPER_ACC36(d), "{%36, %37, %38, %39}", "%40", "%41",
                      "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));
  else if constexpr (N == 136)
    HOPPER_WGMMA_E4M3(136, HOPPER_REGS68, HOPPER_ACC68(d), "{%68, %69, %70, %71}", "%72", "%73",
                      "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));
  else
    HOPPER_WGMMA_E4M3(128, HOPPER_REGS64, HOPPER_ACC64(d), "{%64, %65, %66, %67}", "%68", "%69",
                      "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));
}
// Four floats to four e4m3 bytes, x0 in the lowest (PTX ISA, "cvt": cvt.rn.satfinite.e4m3x2.f32 d, a, b
// puts a in the upper byte of d and b in the lower; round to nearest even, saturating at ±448).
__device__ inline uint32_t pack_e4m3(float x0, float x1, float x2, float x3) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(x1), "f"(x0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(x3), "f"(x2));
  return uint32_t(lo) | uint32_t(hi) << 16;
}

// stmatrix (PTX ISA, "stmatrix"): the warp stores four 8 × 8 matrices of 16-bit values (8 rows of 16
// bytes each) from registers to shared memory. Register j of lane (g = lane / 4, t = lane % 4) holds
// row g, bytes 4t..4t+3 of matrix j: the layout of mma.sync's fragments, so an A fragment goes to
// shared memory without moving between threads. Lane i gives the address of row i % 8 of matrix
// i / 8 (any 16-byte aligned place: a swizzled tile's row). The bytes need not be 16-bit values.
__device__ inline void stmatrix_x4(uint32_t smem_address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// The same, each matrix stored transposed (.trans): lane i gives the address of row i % 8 of the
// stored matrix i / 8, which holds column i % 8 of the registers' matrix (16-bit values only).
__device__ inline void stmatrix_x4_trans(uint32_t smem_address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// --- mbarrier: a barrier in shared memory that counts arrivals and bytes --------------------------
// PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier". A barrier has a
// phase (0, 1, 0, ...). It completes a phase when `count` arrivals have been made and every byte
// announced by expect_tx has landed; then the next phase begins. A waiter names the parity of the
// phase it waits for; waiting for the parity of the phase before the current one returns at once.
__device__ inline void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine (the async proxy) and the other threads
// of the block; a __syncthreads() follows. ("fence.mbarrier_init")
__device__ inline void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival, and `bytes` more to wait for (the TMA copies that will land on it). ("mbarrier.arrive", .expect_tx)
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ inline void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// The barrier's arrival from this thread, once every cp.async it issued before has landed (the
// pending count is not raised: the barrier's count includes these arrivals). Stage 11: L and D
// by cp.async into a slot whose Q and dO come by TMA, one barrier for all four.
__device__ inline void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed ("mbarrier.try_wait.parity": try_wait
// suspends the thread for a while in hardware before it returns false; the loop retries).
__device__ inline void mbarrier_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// --- TMA: the copy engine moves a whole tile ---------------------------------------------------------
// PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk.tensor". One thread issues
// it; the tensor map (made on the host: make_tensor_map in stage 08's fa3_host.cu) says where the
// tensor is, its sizes and strides, the box (tile) to copy and the swizzle to write it with.
// Coordinates are in elements, innermost first; a box that reaches past the tensor's end is
// filled with zeros there (and reads nothing there). The bytes land on `bar` (complete_tx).
__device__ inline void tma_load_3d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_u32(smem_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
}

// The same box into L2 only (PTX ISA, "cp.async.bulk.prefetch.tensor"): no shared memory, no barrier;
// a later tma_load_3d of it then reads L2 instead of device memory.
__device__ inline void tma_prefetch_3d(const CUtensorMap* map, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(map), "r"(c0), "r"(c1),
               "r"(c2)
               : "memory");
}

// The same engine without a tensor map (PTX ISA, "cp.async.bulk"): `bytes` contiguous bytes (a
// multiple of 16, both addresses 16-byte aligned) from global to shared memory, landing on `bar`.
__device__ inline void bulk_load(void* smem_dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(smem_dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// The other direction (PTX ISA, the same section, and "cp.async.bulk.commit_group /
// cp.async.bulk.wait_group"): the copy engine reads a box from shared memory and writes it to the
// tensor; the parts of the box outside the tensor (rows before 0 or from N on) are not written.
// No mbarrier: the stores a thread issued are closed into a "bulk group" by commit, and the thread
// waits on its own groups. wait_group.read<n> returns once at most n groups still have to *read*
// shared memory (the source may be written again); wait_group<n> once their writes are done too.
// The source was written by ordinary stores: every writer runs fence_proxy_async (below) before
// the barrier after which one thread issues the copy.
__device__ inline void tma_store_3d(const CUtensorMap* map, const void* smem_src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(smem_src))
               : "memory");
}
// The same engine adding instead of writing (PTX ISA, "cp.reduce.async.bulk.tensor"): the box at
// the coordinates is added into the tensor, element by element, atomically, in the L2; the parts of
// the box outside the tensor are not added. A bulk group as tma_store_3d's. Stage 11's dQ (f32).
__device__ inline void tma_reduce_add_3d(const CUtensorMap* map, const void* smem_src, int c0, int c1, int c2) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   map),
               "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(smem_src))
               : "memory");
}
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int n>
__device__ inline void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(n) : "memory");
}
template <int n>
__device__ inline void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(n) : "memory");
}

// Ordering across blocks (stage 11's deterministic dQ): a counter read with acquire, bumped with
// release, both at the GPU's scope; fence_proxy_async_global orders the copy engine's accesses to
// global memory (async proxy) with the thread's ordinary ones on either side of it.
__device__ inline int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void red_release_gpu_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ inline void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// --- named barriers ------------------------------------------------------------------------------------
// PTX ISA, "bar.sync / bar.arrive": barrier `id` (1..15; 0 is __syncthreads) completes when
// `threads` threads (a multiple of 32) have reached it; sync waits for that, arrive does not.
__device__ inline void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ inline void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// --- setmaxnreg: registers from one warpgroup to another -----------------------------------------------
// PTX ISA, "setmaxnreg". All warps of a warpgroup execute it together; dec releases registers
// down to `n` per thread, inc waits until enough are free and takes them up to `n`. The kernel
// must start with a register cap (__launch_bounds__(threads, 1)).
template <int n>
__device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(n));
}
template <int n>
__device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(n));
}

// --- fence.proxy.async -------------------------------------------------------------------------------
// PTX ISA, "membar / fence": ordinary loads and stores (the "generic proxy", cp.async included)
// and the asynchronous units (wgmma's operand reads, TMA: the "async proxy") do not see each
// other's shared-memory accesses in order. A thread that wrote shared memory that wgmma or TMA
// reads next runs this fence before the barrier that publishes the data.
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace hopper
