// Rung 7: P̃ without the exponential unit (kLin: lin_t and pack_lin, fp8_mma.cuh): at d = 128 on
// rung 6's kernel (fp8_tile_overlap.cuh), at d = 64 on rung 2's (fp8_blocks128.cuh).
//
// What changed: P̃ is rounded to e4m3, three bits of mantissa, so its exponentials need not be exact.
// fp16's bit pattern is nearly the logarithm of its value: two FFMAs (one saturating, which also
// turns −∞ and NaN into 0) write 2^x's fp16 pattern into a float's low bits, a byte permutation pairs
// two, and cvt makes the e4m3 bytes. The softmax's 128 MUFU.EX2 a thread a block (the largest share
// of the consumers' stall samples, waiting on MUFU's issue) become 128 FFMAs: per 4 scores 13
// instructions where there were 11, none on the exponential unit. P̃ is then up to 3.1 % off 2^x
// (fp8.hpp's kLinMaxRelError; l sums the same P̃, so O divides it away, L keeps 1 % of it).
//
// What it should buy: at d = 64, where the exponentials take twice the products' time on MUFU (its
// pipe 71 % busy), 1.25-1.6×; at d = 128 1.00-1.10×. It bought 1.12-1.15× at d = 64 and 1.09-1.14×
// at d = 128, for 5 % more RMSE of O on N(0, 1) inputs (chapter 09).
#include "fp8_blocks128.cuh"
#include "fp8_overlap_launch.cuh"

namespace attention::fp8 {

void launch_lin(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L, const LaunchOptions& options) {
  if (s.d == 128) launch_overlap<true, true, true>("lin", s, out, in, O, L, options);
  else launch_blocks128<true, POperand::by_d, true>("lin", s, out, in, O, L, options);
}

}  // namespace attention::fp8
