// Rung 1: e4m3. Stage 08's last rung (fa3_8_tuned.cu: a persistent grid, a producer warpgroup, two
// consumer warpgroups at d = 128 and three at d = 64 taking turns, each block's softmax under the
// next block's products) with FlashAttention-3's FP8 changes (fp8_blocks128.cuh, kSumByMma off):
//  - Both products on the e4m3 tensor cores (wgmma ...k32.e4m3): twice the 16-bit rate, half the
//    bytes of every tile and copy.
//  - V as Vᵀ: FP8 wgmma takes B only K-major and P·V sums over keys, so the quantisation writes V
//    transposed, its keys in the order P̃ leaves S's accumulator (fp8.hpp's key_position): P̃'s bytes
//    are packed where the A operand wants them, none moves between threads.
//  - The descales in the exponent: x = S_acc · scale·log₂e·sq·sk_j, m in those units; V's descale
//    in o's rescale (o kept in units of the last block's sv). P̃ · 2^8, inside e4m3's normal range.
//  - A fresh accumulator for each key block's P̃·V, added to o in fp32 (promote): the FP8 tensor
//    cores' short accumulator drifts low over a long sum.
//  - P̃ through shared memory at d = 128 (stmatrix, then an SS wgmma): held in registers, P̃ and o_j
//    left ptxas no room for the row max, and it waited for P̃·V before it (10 % of the stall samples).
// The row sum l by FADDs in the softmax, as stage 08. What it should buy: up to 2× stage 08 (the
// tensor rate and the bytes); the exponential unit caps it (chapter 09: at d = 128 a score's
// products take as long as its exponential).
#include "fp8_blocks128.cuh"

namespace attention::fp8 {

void launch_e4m3(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L, const LaunchOptions& options) {
  launch_blocks128<false, POperand::by_d>("e4m3", s, out, in, O, L, options);
}

}  // namespace attention::fp8
