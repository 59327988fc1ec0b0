// Rung 6: the epilogue's L and staging (fp8_tile_overlap.cuh, kEpilogue: write_output_stsm).
//
// What changed from rung 5 (fp8_5_tile_start.cu), where a trace timed the staging's stores and L at
// 0.45-0.79 µs of a tile's 0.8-1.3 µs epilogue:
//  - L by lg2.approx (MUFU.LG2 and a fix-up for denormal inputs; 2 ulp, l ≥ 2⁸) where logf is a
//    software log of about 25 instructions that one lane in four ran in a branch while the warp
//    waited, twice; and L stored after O's TMA store is issued.
//  - The staging by stmatrix: the accumulator's layout is stmatrix's, so one x4 writes two 8-column
//    chunks of the warp's 16 rows: 8 STSM a lane where there were 32 STS and their 32 addresses.
//
// What it should buy: those instructions' latency, +0.5-2 % causal at N = 4096, +0.5-1 % at 4096.
// It bought up to 1.7 % causal at N = 4096 (chapter 09).
#include "fp8_overlap_launch.cuh"

namespace attention::fp8 {

void launch_epilogue(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                     const LaunchOptions& options) {
  launch_overlap<true, true, false>("epilogue", s, out, in, O, L, options);
}

}  // namespace attention::fp8
