#include "variants.hpp"

#include <algorithm>

namespace attention::fp8 {

#if COURSE_HAS_HOPPER
#define COURSE_FP8(f) f
#else
#define COURSE_FP8(f) nullptr
#endif

bool Fp8Variant::wide(int d) const { return std::count(wide_ds.begin(), wide_ds.end(), d) > 0; }

Tiles Fp8Variant::tiles(const Shape& s) const {
  Tiles t = attention_tiles(s);
  if (wide(s.d)) t.Bc = 256;
  return t;
}

bool Fp8Variant::takes(const Scheme& scheme, int d) const {
  return std::count(ds.begin(), ds.end(), d) > 0 && (!wide(d) || scheme.granularity == Granularity::tensor);
}

Scheme Fp8Variant::quantised_by(Scheme scheme, int d) const {
  if (wide(d)) scheme.centre_v = true;
  return scheme;
}

const Registry<Fp8Variant>& fp8_registry() {
  static const std::vector<course::Dtype> half = {course::Dtype::fp16, course::Dtype::bf16};
  static const std::vector<int> both = {64, 128}, d128 = {128};
  static const Registry<Fp8Variant> registry(
      "09",
      {
          {{"e4m3", half, both, "rung 1: stage 08's last rung in e4m3: Vᵀ, the descales, a fresh accumulator a block"},
           {}, COURSE_FP8(launch_e4m3)},
          {{"row_sum", half, both, "rung 2: the row sum on the tensor cores (8 rows of ones after Vᵀ)"},
           {}, COURSE_FP8(launch_row_sum)},
          {{"wide", half, d128, "rung 3: key blocks of 256, O on the tensor cores, the optimistic max"},
           d128, COURSE_FP8(launch_wide)},
          {{"tile_overlap", half, d128, "rung 4: a tile's end under the next tile's first S"},
           d128, COURSE_FP8(launch_tile_overlap)},
          {{"tile_start", half, d128, "rung 5: a causal tile's start: the diagonal's mask, Q by halves, ..."},
           d128, COURSE_FP8(launch_tile_start)},
          {{"epilogue", half, d128, "rung 6: L by lg2.approx, O's staging by stmatrix"},
           d128, COURSE_FP8(launch_epilogue)},
          {{"lin", half, both, "rung 7: P̃ from fp16's bit pattern, no exponential unit (d = 64 on rung 2)"},
           d128, COURSE_FP8(launch_lin), true},
      },
      {
          {{"p_in_registers", half, both, "rung 2 with P̃ in registers at d = 128 too"},
           {}, COURSE_FP8(launch_p_in_registers)},
          {{"wide_exact_max", half, d128, "rung 3 with the row max of every block (no optimistic max)"},
           d128, COURSE_FP8(launch_wide_exact_max)},
      });
  return registry;
}

}  // namespace attention::fp8
