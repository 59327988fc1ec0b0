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
Tiles fp32_tiles(const Shape&) { return {128, 64}; }  // 256 threads, 4 rows × 8 keys of S each
Tiles rung_tiles(const Shape&) { return {64, 64}; }   // 4 warps × 16 rows (rungs 1 to 4d)
Tiles tuned_tiles(const Shape&) { return {128, 64}; }  // 4 warps × 32 rows

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
      {"exp2", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_exp2)},
      {"one_barrier", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_one_barrier)},
      {"skip_mask", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_skip_mask)},
      {"heaviest_first", half, {64, 128}, rung_tiles, COURSE_LAUNCH(launch_tc_heaviest_first)},
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

namespace {

// "a, b or c" (join(parts, ", ", " or ")).
std::string join(const std::vector<std::string>& parts, const std::string& between, const std::string& last) {
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? last : between) + parts[i];
  return text;
}

bool takes(const Takes& v, Dtype t, int d) {
  return std::count(v.dtypes.begin(), v.dtypes.end(), t) && std::count(v.ds.begin(), v.ds.end(), d);
}

// "fp32 with d = 32, 64 or 128; fp16 with d = 64 or 128; ...": what the variants run, by dtype.
std::string what_runs(const std::vector<const Takes*>& variants) {
  std::vector<std::string> parts;
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    std::vector<std::string> ds;
    for (int d : {32, 64, 128}) {
      bool any = false;
      for (const Takes* v : variants) any = any || takes(*v, t, d);
      if (any) ds.push_back(std::to_string(d));
    }
    if (!ds.empty()) parts.push_back(std::string(course::name(t)) + " with d = " + join(ds, ", ", " or "));
  }
  return join(parts, "; ", "; ");
}

}  // namespace

std::vector<Dtype> dtypes_to_run(const std::vector<Takes>& variants, const std::vector<std::string>& selected,
                                 const std::vector<Dtype>& wanted, bool dtypes_given, int d) {
  std::vector<const Takes*> chosen;
  for (const Takes& v : variants)
    if (selected.empty() || std::count(selected.begin(), selected.end(), v.name)) chosen.push_back(&v);
  const std::string which = selected.empty() ? "this stage's variants run " : "the variants chosen run ";
  std::vector<Dtype> runs;
  for (Dtype t : wanted) {
    bool any = false;
    for (const Takes* v : chosen) any = any || takes(*v, t, d);
    if (any) {
      runs.push_back(t);
    } else if (dtypes_given) {
      throw course::UsageError(std::string("--dtype ") + course::name(t) + " with --d " + std::to_string(d) +
                               ": nothing runs it; " + which + what_runs(chosen));
    }
  }
  if (runs.empty()) {
    std::vector<std::string> names;
    for (Dtype t : wanted) names.push_back(course::name(t));
    throw course::UsageError("nothing runs " + join(names, ", ", " or ") + " with --d " + std::to_string(d) + "; " +
                             which + what_runs(chosen));
  }
  if (!selected.empty()) {
    for (const Takes* v : chosen) {
      bool any = false;
      for (Dtype t : runs) any = any || takes(*v, t, d);
      if (!any) {
        std::vector<std::string> names;
        for (Dtype t : wanted) names.push_back(course::name(t));
        throw course::UsageError("--variants " + v->name + " runs " + what_runs({v}) + ", not " +
                                 join(names, ", ", " or ") + " with --d " + std::to_string(d));
      }
    }
  }
  return runs;
}

}  // namespace attention
