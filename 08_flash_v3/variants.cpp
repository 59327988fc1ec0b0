#include "variants.hpp"

#include <algorithm>
#include <iterator>

#include "check.hpp"
#if COURSE_HAS_HOPPER
#include "kernels.cuh"
#define COURSE_HOPPER(f) ForwardLaunch(f)
#else
#define COURSE_HOPPER(f) ForwardLaunch()
#endif

namespace attention {

namespace {
// Block sizes as the kernels are compiled (fa3_common.cuh: kBr, kBc).
Tiles fa3_tiles(const Shape&) { return {128, 128}; }
// Rungs 7 and 8 (fa3_7_three_warpgroups.cu, fa3_8_tuned.cu): three consumer warpgroups at d = 64,
// Br = 192; causal tiles laid from the last row back.
Tiles tuned_tiles(const Shape& s) { return {s.d == 64 ? 192 : 128, 128, true}; }
}  // namespace

const Registry<ForwardVariant>& v3_registry() {
  static const std::vector<course::Dtype> half = {course::Dtype::fp16, course::Dtype::bf16};
  static const Registry<ForwardVariant> registry(
      "08",
      {
          {{"wgmma", half, {64, 128}, "rung 1: the products by wgmma (warpgroups of 4 warps), loads by cp.async"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_wgmma)},
          {{"tma", half, {64, 128}, "rung 2: the tiles by TMA into a ring of slots, mbarriers"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_tma)},
          {{"warp_specialized", half, {64, 128}, "rung 3: a producer warpgroup and two consumers, setmaxnreg"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_warp_specialized)},
          {{"pingpong", half, {64, 128}, "rung 4: the consumers take turns at the tensor cores"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_pingpong)},
          {{"overlap", half, {64, 128}, "rung 5: a block's softmax under the previous block's P·V"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_overlap)},
          {{"persistent", half, {64, 128}, "rung 6: one block an SM, taking tiles from a counter"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_persistent)},
          {{"three_warpgroups", half, {64, 128}, "rung 7: three consumer warpgroups at d = 64 (Br = 192); reductions as trees"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_three_warpgroups)},
          {{"tuned", half, {64, 128}, "rung 8: O written out by TMA stores"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned)},
      },
      {
          {{"overlap_no_ws", half, {64, 128}, "rung 5 without warp specialisation (the FA-3 paper's ablation)"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_overlap_no_ws)},
          {{"tuned_lpt", half, {64, 128}, "rung 8 with causal tiles in FA-3's LPT order"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_lpt)},
          {{"tile_overlap", half, {64, 128}, "an experiment: the next tile's first S under this tile's end"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_tile_overlap)},
          {{"tile_overlap_wait_v_first", half, {64, 128}, "tile_overlap, waiting for V before the turn"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_tile_overlap_wait_v_first)},
      });
  return registry;
}

double tma_delivered_read_bytes(const Shape& s, course::Dtype t, Tiles tiles) {
  double rows = 0.0;  // per head: Q's boxes, then K's and V's
  for (int i = 0; i < query_blocks(s, tiles); ++i) rows += tiles.Br + 2.0 * key_blocks(s, tiles, i) * tiles.Bc;
  return double(s.heads()) * rows * s.d * double(course::bytes_of(t));
}

bool loads_with_tma(const std::string& variant) { return variant != "wgmma"; }

double tile_counter_bytes(const Shape& s, Tiles tiles, const std::string& variant, int blocks) {
  static const char* persistent[] = {"persistent", "three_warpgroups", "tuned", "tile_overlap"};
  if (std::none_of(std::begin(persistent), std::end(persistent),
                   [&](const char* p) { return variant.rfind(p, 0) == 0; }))
    return 0.0;
  return 32.0 * (double(query_blocks(s, tiles)) * s.heads() + blocks);
}

}  // namespace attention
