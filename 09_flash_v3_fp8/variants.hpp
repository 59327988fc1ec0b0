// The rungs of stage 09, in the order of the chapter, and its ablations (common/attention/variants.hpp:
// name, dtypes of O, head dimensions, one line). Each runs on inputs quantised by a scheme (fp8.hpp):
// a row of the program is a rung and a scheme, named "<rung>.<scheme>".
#pragma once

#include "attention/variants.hpp"
#include "fp8.hpp"
#include "kernels.cuh"  // AttentionLaunch (declarations only)

namespace attention::fp8 {

struct Fp8Variant : VariantInfo {
  std::vector<int> wide_ds;      // where it runs key blocks of 256 (V per tensor and centred)
  AttentionLaunch launch;        // null in a build without the sm_90a kernels
  bool lin = false;              // P̃ by fp16's bit pattern: L's bound widened by log(1 + kLinMaxRelError)
  bool wide(int d) const;
  Tiles tiles(const Shape& s) const;  // for the model and the CPU count
  // Whether it runs `scheme` at d (one of its ds; the wide rungs: V's descale per tensor), and the scheme it runs
  // by when asked for `scheme`: V centred where it runs key blocks of 256.
  bool takes(const Scheme& scheme, int d) const;
  Scheme quantised_by(Scheme scheme, int d) const;
};

// Rungs: e4m3, row_sum, wide, tile_overlap, tile_start, epilogue, lin. Ablations: p_in_registers
// (rung 2, P̃ in registers at every d), wide_exact_max (rung 3 without the optimistic max).
const Registry<Fp8Variant>& fp8_registry();

}  // namespace attention::fp8
