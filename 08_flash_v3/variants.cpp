#include "variants.hpp"

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
// Rung 6 and its ablations (fa3_6_tuned.cu): three consumer warpgroups at d = 64, Br = 192; causal
// tiles laid from the last row back.
Tiles tuned_tiles(const Shape& s) { return {s.d == 64 ? 192 : 128, 128, true}; }
Tiles tuned_br128_tiles(const Shape&) { return {128, 128, true}; }
Tiles tuned_bc160_tiles(const Shape& s) { return {128, s.causal ? 128 : 160, true}; }
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
          {{"tuned", half, {64, 128}, "rung 6: persistent grid, three consumers at d = 64, O by TMA store"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned)},
      },
      {
          {{"tuned_not_persistent", half, {64, 128}, "rung 6 on a grid of one block a tile"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_not_persistent)},
          {{"tuned_lazy", half, {64, 128}, "rung 6 with the lazy rescale"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_lazy)},
          {{"tuned_poly", half, {64, 128}, "rung 6 with part of the exponentials by a polynomial on the FMA pipe"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_poly)},
          {{"tuned_2_stages", half, {64, 128}, "rung 6 with two slots of K and V"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_2_stages)},
          {{"tuned_br128", half, {64}, "rung 6 with two consumer warpgroups at d = 64 (Br = 128)"},
           tuned_br128_tiles, COURSE_HOPPER(launch_fa3_tuned_br128)},
          {{"tuned_no_tma_store", half, {64, 128}, "rung 6 with stage 06's epilogue (lanes copy O out)"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_no_tma_store)},
          {{"tuned_bc160", half, {128}, "rung 6 with key blocks of 160 at d = 128, not causal"},
           tuned_bc160_tiles, COURSE_HOPPER(launch_fa3_tuned_bc160)},
          {{"overlap_no_ws", half, {64, 128}, "rung 5 without warp specialisation (the FA-3 paper's ablation)"},
           fa3_tiles, COURSE_HOPPER(launch_fa3_overlap_no_ws)},
          {{"tuned_lpt", half, {64, 128}, "rung 6 with causal tiles in FA-3's LPT order"},
           tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_lpt)},
          {{"tile_overlap", half, {64, 128}, "rung 6 with the next tile's first S under this tile's end"},
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
  if (variant.rfind("tuned", 0) != 0 && variant.rfind("tile_overlap", 0) != 0) return 0.0;  // persistent ones
  return 32.0 * (double(query_blocks(s, tiles)) * s.heads() + blocks);
}

}  // namespace attention
