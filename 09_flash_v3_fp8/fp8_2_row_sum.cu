// Rung 2: the row sum on the tensor cores (fp8_blocks128.cuh, kSumByMma).
//
// What changed from rung 1 (fp8_1_e4m3.cu): eight rows of ones (e4m3 1.0) follow Vᵀ in each slot,
// written once when the block starts, so P̃·V is a product of d + 8 columns (wgmma m64n136k32 at
// d = 128) and each extra column is Σ P̃ over the block's keys. The softmax's 64 FADDs a thread a
// block leave it (the d = 128 loop's SASS: 158 FADDs -> 16), and l sums exactly the e4m3 values of
// P̃ that P̃·V multiplied. The sums' four registers are added into l right after the wait for P̃·V:
// held through the next turn, they made ptxas serialise the wgmma's (its note C7511).
//
// What it should buy: −5 to −9 % time at d = 128 (the consumer warps looked bound by their
// instruction streams), −2 to +4 % at d = 64. It bought +2-4 % at d = 64 and nothing at d = 128,
// where the FADDs had filled the gaps of the dependent chain (max, exponent, ex2, pack; chapter 09).
//
// The ablation p_in_registers keeps P̃ in registers at d = 128 too (the kernel before P̃ went through
// shared memory): the wait for P̃·V moves, the time barely does (+0-3 %, chapter 09).
#include "fp8_blocks128.cuh"

namespace attention::fp8 {

void launch_row_sum(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                    const LaunchOptions& options) {
  launch_blocks128<true, POperand::by_d>("row_sum", s, out, in, O, L, options);
}

void launch_p_in_registers(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                           const LaunchOptions& options) {
  launch_blocks128<true, POperand::registers>("p_in_registers", s, out, in, O, L, options);
}

}  // namespace attention::fp8
