// Rung 4: a tile's end under the next tile's products (fp8_tile_overlap.cuh, its switches off).
//
// What changed from rung 3 (fp8_3_wide.cu): at a tile's end a warpgroup waited for its last P̃·V,
// wrote O out, then issued the next tile's first S and waited for it with nothing else to do (a
// trace timed 1.0-1.3 µs of epilogue and 0.3-0.6 µs of that S a tile, the exponentials stopped all
// the while). Now the last P̃·V and the next tile's first S are one turn at the tensor cores, and the
// epilogue runs under that S. With it, what a tile's end waited on: v̄ from shared memory (copied in
// with Q; the epilogue's loads of it from L2 sat after the wait for the last P̃·V), the tile's
// descales loaded a tile ahead, the next tile's first K before the wait for Q's slot, and causal
// tiles in FlashAttention-3's LPT order (heaviest first across a group of heads).
//
// What it should buy: the S wait and most of the epilogue off each tile's end, +1-2 % at N = 4096
// and 16384, +2-4 % causal. It bought 5-12 % over rung 3 (chapter 09), more than predicted: this
// kernel's consumers also spill nothing where rung 3's spill 128 bytes.
#include "fp8_overlap_launch.cuh"

namespace attention::fp8 {

void launch_tile_overlap(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                         const LaunchOptions& options) {
  launch_overlap<false, false, false>("tile_overlap", s, out, in, O, L, options);
}

}  // namespace attention::fp8
