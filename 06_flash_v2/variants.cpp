#include "variants.hpp"

#include <algorithm>

#include "check.hpp"
#if COURSE_HAS_CUDA
#include "kernels.cuh"
#endif

namespace attention {

namespace {

using course::Dtype;

// Block sizes, as the kernels are compiled (keep in step with kernels_fp32.cu and tc*.cu).
Tiles fp32_tiles(int) { return {128, 64}; }  // 256 threads, 4 rows × 8 keys of S each
Tiles rung_tiles(int) { return {64, 64}; }   // 4 warps × 16 rows
Tiles tuned_tiles(int) { return {128, 64}; }  // 4 warps × 32 rows

#if COURSE_HAS_CUDA
Launch fp32_launch() {
  return [](const Shape& s, Dtype, const void* Q, const void* K, const void* V, void* O, float* L) {
    launch_flash_v2_fp32(s, static_cast<const float*>(Q), static_cast<const float*>(K),
                         static_cast<const float*>(V), static_cast<float*>(O), L);
  };
}
#define COURSE_LAUNCH(f) Launch(f)
#else
Launch fp32_launch() { return {}; }
#define COURSE_LAUNCH(f) Launch()
#endif

}  // namespace

bool V2Variant::supports(Dtype t, int d) const {
  return std::count(dtypes.begin(), dtypes.end(), t) && std::count(ds.begin(), ds.end(), d);
}

const std::vector<V2Variant>& v2_variants() {
  static const std::vector<Dtype> half = {Dtype::fp16, Dtype::bf16};
  static const std::vector<V2Variant> variants = {
      {"flash_v2", {Dtype::fp32}, {32, 64, 128}, fp32_tiles, fp32_launch()},
      {"mma", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_mma)},
      {"ldmatrix", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_ldmatrix)},
      {"cp_async", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_cp_async)},
      {"tuned", half, {64, 128}, tuned_tiles, COURSE_LAUNCH(launch_tc_tuned)},
      {"lazy_rescale", half, {64, 128}, tuned_tiles, COURSE_LAUNCH(launch_tc_lazy_rescale)},
  };
  return variants;
}

const V2Variant& v2_variant(const std::string& name) {
  for (const auto& v : v2_variants())
    if (v.name == name) return v;
  throw course::UsageError("stage 06 has no variant '" + name + "'");
}

void require_supported(const V2Variant& v, Dtype t, int d) {
  if (v.supports(t, d)) return;
  std::string dtypes, ds;
  for (Dtype x : v.dtypes) dtypes += std::string(dtypes.empty() ? "" : ", ") + course::name(x);
  for (int x : v.ds) ds += (ds.empty() ? "" : ", ") + std::to_string(x);
  throw course::UsageError(v.name + " runs " + dtypes + " with d in {" + ds + "}, not " +
                           course::name(t) + " with d = " + std::to_string(d));
}

}  // namespace attention
