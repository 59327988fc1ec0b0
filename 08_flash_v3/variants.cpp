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
Tiles fa3_tiles(int) { return {128, 128}; }
}  // namespace

const std::vector<V2Variant>& v3_variants() {
  static const std::vector<course::Dtype> half = {course::Dtype::fp16, course::Dtype::bf16};
  static const std::vector<V2Variant> variants = {
      {"wgmma", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_wgmma)},
      {"tma", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_tma)},
      {"warp_specialized", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_warp_specialized)},
      {"pingpong", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_pingpong)},
      {"overlap", half, {64, 128}, fa3_tiles, COURSE_HOPPER(launch_fa3_overlap)},
  };
  return variants;
}

double tma_delivered_read_bytes(const Shape& s, course::Dtype t, Tiles tiles) {
  double rows = 0.0;  // per head: Q's boxes, then K's and V's
  for (int i = 0; i < query_blocks(s, tiles); ++i) rows += tiles.Br + 2.0 * key_blocks(s, tiles, i) * tiles.Bc;
  return double(s.heads()) * rows * s.d * double(course::bytes_of(t));
}

bool loads_with_tma(const std::string& variant) { return variant != "wgmma"; }

const V2Variant& v3_variant(const std::string& name) {
  for (const auto& v : v3_variants())
    if (v.name == name) return v;
  throw course::UsageError("stage 08 has no variant '" + name + "'");
}

}  // namespace attention
