// Rung 5: what a causal tile's start costs (fp8_tile_overlap.cuh, kTileStart).
//
// What changed from rung 4 (fp8_4_tile_overlap.cu), five pieces on the path between one tile's last
// turn and the next tile's first softmax, which traces of the causal tile found:
//  - The diagonal's mask without N (mask_causal): a block that ends before N needs only "key after
//    query", a compile-time number against one register a lane: 194 instructions where there were 373.
//  - Each tile's head and query block from the producer (Pipeline::tile_ih), which decodes them
//    anyway: no integer division left in the consumers.
//  - Q by halves, one a consumer warpgroup, each with barriers of its own: the first half is copied
//    again as soon as the first warpgroup is done with it, not once both are.
//  - The diagonal's dead steps (softmax_p_diag): a warp's 32-key steps past its rows get no mask, max
//    or exponentials, and P̃ zeros; P̃ and m bit for bit as before.
//  - The first Q half prefetched into L2 when the producer takes the tile.
//
// What it should buy: the segment's 0.6 µs and the first softmax's mask, +4-8 % at causal N = 4096,
// about nothing elsewhere. Each piece bought about 1 % at causal N = 4096 (chapter 09).
#include "fp8_overlap_launch.cuh"

namespace attention::fp8 {

void launch_tile_start(const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                       const LaunchOptions& options) {
  launch_overlap<true, false, false>("tile_start", s, out, in, O, L, options);
}

}  // namespace attention::fp8
