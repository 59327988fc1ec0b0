// The launch of the overlap kernel (fp8_tile_overlap.cuh) for rungs 4-7: Q's box by halves from rung 5
// on, causal tiles in groups of heads whose K and V (1 byte a value) take at most 16 MB of L2.
#pragma once

#include "fp8_launch.cuh"
#include "fp8_tile_overlap.cuh"

namespace attention::fp8 {

template <bool kTileStart, bool kEpilogue, bool kLin>
void launch_overlap(const char* rung, const Shape& s, course::Dtype out, const DeviceFp8& in, void* O, float* L,
                    const LaunchOptions& options) {
  using Lay = LayoutWide<true, kTileStart>;
  // Q's box: a warpgroup's half from rung 5 on (Q by halves), else the tile; the producer expects that.
  const Launch l = prepare(rung, s, out, in, O, L, options, Lay::kBr, Lay::Bc, Lay::kQHalves ? Lay::kBr / 2 : Lay::kBr);
  const int group = fa3::lpt_head_group(s, 1, options.head_group);
  with_type(out, [&](auto type) {
    run(flash_v3_fp8_overlap<decltype(type), kTileStart, kEpilogue, kLin>, Lay::kBytes,
        128 * 3, std::string("fp8 ") + rung + " (key blocks of 256) at d = 128", l, group);
  });
}

}  // namespace attention::fp8
