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
  Tiles (*tiles)(const Shape& s);  // the block sizes a problem runs with
  Launch launch;  // empty in a CPU-only build
  bool supports(course::Dtype t, int d) const;
};

// flash_v2 (fp32), then the tensor-core rungs mma, ldmatrix, cp_async, exp2, one_barrier, skip_mask,
// heaviest_first, tuned, lazy_rescale (fp16, bf16).
const std::vector<V2Variant>& v2_variants();
const V2Variant& v2_variant(const std::string& name);  // throws UsageError for an unknown name

// Throws UsageError, naming what is supported, unless `v` runs (dtype, d).
void require_supported(const V2Variant& v, course::Dtype t, int d);

// What one variant takes, for checking a program's options before any work (stages 06 and 07).
struct Takes {
  std::string name;
  std::vector<course::Dtype> dtypes;
  std::vector<int> ds;
};
template <class Variant>
std::vector<Takes> takes_of(const std::vector<Variant>& variants) {
  std::vector<Takes> out;
  for (const auto& v : variants) out.push_back({v.name, v.dtypes, v.ds});
  return out;
}

// The dtypes of `wanted` that some variant runs with head dimension d; only the variants named in
// `selected` count, unless it is empty (no --variants). Throws UsageError, saying what runs with
// which d, when nothing would run, when a dtype the user asked for (`dtypes_given`: --dtype was
// given) runs with no variant, or when a variant the user named runs none of the dtypes.
std::vector<course::Dtype> dtypes_to_run(const std::vector<Takes>& variants,
                                         const std::vector<std::string>& selected,
                                         const std::vector<course::Dtype>& wanted, bool dtypes_given,
                                         int d);

}  // namespace attention
