#include "variants.hpp"

#include "check.hpp"

namespace attention {

namespace {

using course::Dtype;

#if COURSE_HAS_CUDA
// Atomic dQ: preprocess (D, dQacc = 0), the key-outer pass, dQ = scale·dQacc.
BackwardLaunch atomic(void (*pass)(const Shape&, Dtype, const BackwardArgs&)) {
  return [pass](const Shape& s, Dtype t, const BackwardArgs& a) {
    course::require(a.dQacc != nullptr, "an atomic backward needs dQacc");
    launch_backward_preprocess(s, t, a);
    pass(s, t, a);
    launch_dq_convert(s, t, a);
  };
}
void fp32_pass(const Shape& s, Dtype, const BackwardArgs& a) { launch_flash_backward_fp32(s, a); }
// Deterministic: preprocess (D), the key-outer pass without dQ, the query-outer dQ pass.
BackwardLaunch deterministic(void (*pass)(const Shape&, Dtype, const BackwardArgs&)) {
  return [pass](const Shape& s, Dtype t, const BackwardArgs& a) {
    BackwardArgs b = a;
    b.dQacc = nullptr;
    launch_backward_preprocess(s, t, b);
    pass(s, t, b);
    launch_flash_backward_dq(s, t, b);
  };
}
#define COURSE_LAUNCH(f) BackwardLaunch(f)
#else
#define COURSE_LAUNCH(f) BackwardLaunch()
#endif

}  // namespace

const Registry<BwdVariant>& bwd_registry() {
  static const std::vector<Dtype> half = {Dtype::fp16, Dtype::bf16};
  static const Registry<BwdVariant> registry("07", {
      {{"standard", {Dtype::fp32, Dtype::fp16, Dtype::bf16}, {32, 64, 128}, "the baseline: standard attention, P kept from its forward"},
       {}, COURSE_LAUNCH(launch_standard_backward), true},
      {{"flash_bwd", {Dtype::fp32}, {32, 64, 128}, "FA-2's Algorithm 2 in fp32: recompute P from L, dQ by atomics"},
       {kFp32Tiles}, COURSE_LAUNCH(atomic(fp32_pass))},
      {{"tc", half, {64, 128}, "the five products by mma.sync, S and dP transposed so that Pᵀ, dSᵀ stay in registers"},
       {kTcTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_tc))},
      {{"tc_deterministic", half, {64, 128}, "tc with dQ in a pass of its own (query-outer): no atomics"},
       {kTcTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_tc))},
      {{"tuned", half, {64, 128}, "key blocks of 128, 8 warps"},
       {kTunedTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_tuned))},
      {{"tuned_deterministic", half, {64, 128}, "tuned with the deterministic dQ pass"},
       {kTunedTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_tuned))},
      {{"wide", half, {64}, "d = 64: 32 keys a warp, query blocks of 32"},
       {kWideTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_wide))},
      {{"wide_deterministic", half, {64}, "wide with the deterministic dQ pass"},
       {kWideTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_wide))},
      {{"split", half, {128}, "d = 128: FA-2's division of work between warps, P and dS through shared memory"},
       {kTunedTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_split))},
      {{"split_deterministic", half, {128}, "split with the deterministic dQ pass"},
       {kTunedTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_split))},
  });
  return registry;
}

}  // namespace attention
