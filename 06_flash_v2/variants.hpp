// The variants of stage 06, in the order of the chapter: what each is called, which dtypes and
// head dimensions it takes, its block sizes (for the model and the CPU count), and its launcher.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "dtype.hpp"

namespace attention {

// A launch on device pointers: Q, K, V, O hold values of the run's dtype; L is floats.
using Launch = std::function<void(const Shape&, course::Dtype, const void* Q, const void* K,
                                  const void* V, void* O, float* L)>;

struct V2Variant {
  std::string name;
  std::vector<course::Dtype> dtypes;
  std::vector<int> ds;  // head dimensions
  Tiles (*tiles)(int d);
  Launch launch;  // empty in a CPU-only build
  bool supports(course::Dtype t, int d) const;
};

// flash_v2 (fp32), then the tensor-core rungs mma, ldmatrix, cp_async, tuned, lazy_rescale (fp16, bf16).
const std::vector<V2Variant>& v2_variants();
const V2Variant& v2_variant(const std::string& name);  // throws UsageError for an unknown name

// Throws UsageError, naming what is supported, unless `v` runs (dtype, d).
void require_supported(const V2Variant& v, course::Dtype t, int d);

}  // namespace attention
