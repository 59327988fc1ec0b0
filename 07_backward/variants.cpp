#include "variants.hpp"

#include <algorithm>

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

bool BwdVariant::supports(Dtype t, int d) const {
  return std::count(dtypes.begin(), dtypes.end(), t) && std::count(ds.begin(), ds.end(), d);
}

const std::vector<BwdVariant>& bwd_variants() {
  static const std::vector<Dtype> half = {Dtype::fp16, Dtype::bf16};
  static const std::vector<BwdVariant> variants = {
      {"standard", {Dtype::fp32, Dtype::fp16, Dtype::bf16}, {32, 64, 128}, {}, COURSE_LAUNCH(launch_standard_backward), true},
      {"flash_bwd", {Dtype::fp32}, {32, 64, 128}, {kFp32Tiles}, COURSE_LAUNCH(atomic(fp32_pass))},
      {"tc", half, {64, 128}, {kTcTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_tc))},
      {"tc_deterministic", half, {64, 128}, {kTcTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_tc))},
      {"tuned", half, {64, 128}, {kTunedTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_tuned))},
      {"tuned_deterministic", half, {64, 128}, {kTunedTiles, true, kDqTiles},
       COURSE_LAUNCH(deterministic(launch_flash_backward_tuned))},
      {"wide", half, {64}, {kWideTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_wide))},
      {"wide_deterministic", half, {64}, {kWideTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_wide))},
      {"split", half, {128}, {kTunedTiles}, COURSE_LAUNCH(atomic(launch_flash_backward_split))},
      {"split_deterministic", half, {128}, {kTunedTiles, true, kDqTiles}, COURSE_LAUNCH(deterministic(launch_flash_backward_split))},
  };
  return variants;
}

const BwdVariant& bwd_variant(const std::string& name) {
  for (const auto& v : bwd_variants())
    if (v.name == name) return v;
  throw course::UsageError("stage 07 has no variant '" + name + "'");
}

}  // namespace attention
