#include "variants.hpp"

#include "check.hpp"
#if COURSE_HAS_CUDA
#include "kernels.cuh"
#endif

namespace attention {

namespace {

using course::Dtype;

// Block sizes, as the kernels are compiled (keep in step with kernels_fp32.cu and tc*.cu).
Tiles fp32_tiles(const Shape&) { return {128, 64}; }  // 256 threads, 4 rows × 8 keys of S each
Tiles rung_tiles(const Shape&) { return {64, 64}; }   // 4 warps × 16 rows (rungs 1 to 4d)
Tiles tuned_tiles(const Shape&) { return {128, 64}; }  // 4 warps × 32 rows

#if COURSE_HAS_CUDA
ForwardLaunch fp32_launch() {
  return [](const Shape& s, Dtype, const void* Q, const void* K, const void* V, void* O, float* L) {
    launch_flash_v2_fp32(s, static_cast<const float*>(Q), static_cast<const float*>(K),
                         static_cast<const float*>(V), static_cast<float*>(O), L);
  };
}
#define COURSE_LAUNCH(f) ForwardLaunch(f)
#else
ForwardLaunch fp32_launch() { return {}; }
#define COURSE_LAUNCH(f) ForwardLaunch()
#endif

}  // namespace

const Registry<ForwardVariant>& v2_registry() {
  static const std::vector<Dtype> half = {Dtype::fp16, Dtype::bf16};
  static const Registry<ForwardVariant> registry("06", {
      {{"flash_v2", {Dtype::fp32}, {32, 64, 128}, "FA-2 in fp32 on the CUDA cores: Q outer loop, deferred normalisation, L"},
       fp32_tiles, fp32_launch()},
      {{"mma", half, {64, 128}, "rung 1: both products by mma.sync m16n8k16, fragments by plain loads"},
       rung_tiles, COURSE_LAUNCH(launch_tc_mma)},
      {{"ldmatrix", half, {64, 128}, "rung 2: swizzled tiles, fragments by ldmatrix"},
       rung_tiles, COURSE_LAUNCH(launch_tc_ldmatrix)},
      {{"cp_async", half, {64, 128}, "rung 3: K and V by cp.async into two buffers"},
       rung_tiles, COURSE_LAUNCH(launch_tc_cp_async)},
      {{"exp2", half, {64, 128}, "rung 4a: exp2 with the scale folded in"},
       rung_tiles, COURSE_LAUNCH(launch_tc_exp2)},
      {{"one_barrier", half, {64, 128}, "rung 4b: one barrier a key block"},
       rung_tiles, COURSE_LAUNCH(launch_tc_one_barrier)},
      {{"skip_mask", half, {64, 128}, "rung 4c: the mask only on the blocks that need it"},
       rung_tiles, COURSE_LAUNCH(launch_tc_skip_mask)},
      {{"heaviest_first", half, {64, 128}, "rung 4d: causal, the heaviest query blocks first"},
       rung_tiles, COURSE_LAUNCH(launch_tc_heaviest_first)},
      {{"tuned", half, {64, 128}, "rung 4e: 32 query rows a warp (Br = 128): FA-2's kernel"},
       tuned_tiles, COURSE_LAUNCH(launch_tc_tuned)},
      {{"lazy_rescale", half, {64, 128}, "rung 5: o rescaled only when the max moves by more than a threshold (FA-4)"},
       tuned_tiles, COURSE_LAUNCH(launch_tc_lazy_rescale)},
  });
  return registry;
}

}  // namespace attention
