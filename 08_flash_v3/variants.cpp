#include "variants.hpp"

#include "check.hpp"
#if COURSE_HAS_HOPPER
#include "kernels.cuh"
#define COURSE_HOPPER(f) Launch(f)
#else
#define COURSE_HOPPER(f) Launch()
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

const std::vector<V2Variant>& v3_variants() {
  static const std::vector<course::Dtype> half = {course::Dtype::fp16, course::Dtype::bf16};
  static const std::vector<V2Variant> variants = {
      {"wgmma", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_wgmma)},
      {"tma", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_tma)},
      {"warp_specialized", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_warp_specialized)},
      {"pingpong", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_pingpong)},
      {"overlap", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_overlap)},
      {"tuned", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned)},
  };
  return variants;
}

const std::vector<V2Variant>& v3_ablations() {
  static const std::vector<course::Dtype> half = {course::Dtype::fp16, course::Dtype::bf16};
  static const std::vector<V2Variant> variants = {
      {"tuned_not_persistent", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_not_persistent)},
      {"tuned_lazy", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_lazy)},
      {"tuned_poly", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_poly)},
      {"tuned_2_stages", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_2_stages)},
      // Rung 6 with two consumer warpgroups at d = 64 (Br = 128), as at d = 128.
      {"tuned_br128", half, {64}, tuned_br128_tiles, COURSE_HOPPER(launch_fa3_tuned_br128)},
      // Rung 6 with stage 06's epilogue: the lanes copy O out of the staging (tc::write_output).
      {"tuned_no_tma_store", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_no_tma_store)},
      // Rung 6 with key blocks of 160 at d = 128 when not causal (FlashAttention-3 takes 176).
      {"tuned_bc160", half, {128}, tuned_bc160_tiles, COURSE_HOPPER(launch_fa3_tuned_bc160)},
      {"overlap_no_ws", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_overlap_no_ws)},  // rung 5, no producer
      // Experiments on rung 6: causal tiles in FlashAttention-3's LPT order (fa3_6_tuned.cu), and
      // (fa3_7_tile_overlap.cu) the next tile's first S under this tile's end.
      {"tuned_lpt", half, {64, 128}, tuned_tiles, COURSE_HOPPER(launch_fa3_tuned_lpt)},
      {"tile_overlap", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_tile_overlap)},
      {"tile_overlap_wait_v_first", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_tile_overlap_wait_v_first)},
  };
  return variants;
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

const V2Variant& v3_variant(const std::string& name) {
  for (const auto* list : {&v3_variants(), &v3_ablations()})
    for (const auto& v : *list)
      if (v.name == name) return v;
  throw course::UsageError("stage 08 has no variant '" + name + "'");
}

}  // namespace attention
