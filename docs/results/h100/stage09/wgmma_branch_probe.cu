// A compile-only probe (not built by CMake): how ptxas treats FP8 wgmma's whose issue depends on a
// run-time value. S = Q·Kᵀ for one warpgroup, 64 rows × 256 keys, issued as four chunks of 64 keys
// (m64n64k32, four k-steps each), each chunk writing its own 32 registers of S in place.
//
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I08_flash_v3 -Icommon -I06_flash_v2 \
//        -Xptxas -v -c docs/results/h100/stage09/wgmma_branch_probe.cu -o probe.o [-DFORM=1|2|3]
//   cuobjdump -sass probe.o | grep -E "QGMMA|DEPBAR|ARRIVE|BRA"
//
// FORM 1: every chunk issued. The four chunks' results sit in four register ranges (R24, R56, R88,
//         R120 with nvcc 13.0) and one WARPGROUP.DEPBAR follows the last: the wgmma's stay in flight.
// FORM 2: chunk c issued only `if (64 * c < keys)`. ptxas copies each chunk's results out of one spare
//         range and waits (DEPBAR) after every chunk; it reports C7519 (arrives injected). In stage 09's
//         overlap kernel the same made ptxas serialise every wgmma of the kernel (C7511).
// FORM 3: the same chunks under a guard predicate (@g wgmma), so that to the compiler every chunk
//         writes S: in place again, an ARRIVE before each and one DEPBAR at the end. In the overlap
//         kernel this form still drew C7515.
#include <cstdint>
#include "hopper.cuh"
#ifndef FORM
#define FORM 1
#endif

// m64n64k32 e4m3 into d[kAt .. kAt + 7] of a wider accumulator, issued where `issue` holds.
#define PROBE_ACC(d, o) HOPPER_ACC4(d, o), HOPPER_ACC4(d, o + 1), HOPPER_ACC4(d, o + 2), HOPPER_ACC4(d, o + 3), \
    HOPPER_ACC4(d, o + 4), HOPPER_ACC4(d, o + 5), HOPPER_ACC4(d, o + 6), HOPPER_ACC4(d, o + 7)
template <int kAt>
__device__ inline void wgmma_n64_at(float (&d)[32][4], uint64_t desc_a, uint64_t desc_b, bool accumulate, bool issue) {
  asm volatile("{\n .reg .pred p, g;\n setp.ne.b32 p, %34, 0;\n setp.ne.b32 g, %35, 0;\n"
               " @g wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " HOPPER_REGS32 ", %32, %33, p, 1, 1;\n}\n"
               : PROBE_ACC(d, kAt)
               : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "r"(int(issue)));
}

__global__ void __launch_bounds__(128) probe(float* out, uint32_t Qs, uint32_t Ks, int keys) {
  float S[32][4];
  const uint64_t q = hopper::make_desc(Qs, 0, 1024, 1), k = hopper::make_desc(Ks, 0, 1024, 1);
  hopper::wgmma_fence();
  auto chunk = [&](auto c) {
    constexpr int C = decltype(c)::value;
    const bool live = 64 * C < keys;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint64_t a = hopper::desc_advance(q, 32 * s), b = hopper::desc_advance(k, 64 * C * 128 + 32 * s);
      if constexpr (FORM == 1) wgmma_n64_at<8 * C>(S, a, b, s > 0, true);
      else if constexpr (FORM == 2) {
        if (live) wgmma_n64_at<8 * C>(S, a, b, s > 0, true);
      } else {
        wgmma_n64_at<8 * C>(S, a, b, s > 0, live);
      }
    }
  };
  chunk(std::integral_constant<int, 0>{});
  chunk(std::integral_constant<int, 1>{});
  chunk(std::integral_constant<int, 2>{});
  chunk(std::integral_constant<int, 3>{});
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  float a = 0.0f;  // every register of S read, so that none is dead
#pragma unroll
  for (int n = 0; n < 32; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) a += S[n][e] * float(n + e);
  out[threadIdx.x] = a;
}
