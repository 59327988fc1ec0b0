// The variants of stage 07, in the order of the chapter: what each is called, which dtypes and
// head dimensions it takes, its plan (block sizes, atomic or deterministic dQ: for the model and
// the CPU count), and its launcher (the whole backward pass: preprocess, main pass(es), convert).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "dtype.hpp"
#include "kernels.cuh"  // BackwardArgs (a plain struct: no CUDA needed to include it)

namespace attention {

using BackwardLaunch = std::function<void(const Shape&, course::Dtype, const BackwardArgs&)>;

struct BwdVariant {
  std::string name;
  std::vector<course::Dtype> dtypes;
  std::vector<int> ds;  // head dimensions
  BackwardPlan plan;
  BackwardLaunch launch;  // empty in a CPU-only build
  bool standard = false;  // standard attention: P kept from its own forward; `plan` unused
  bool supports(course::Dtype t, int d) const;
};

// flash_bwd (fp32, CUDA cores), then on the tensor cores tc (atomic dQ) and tc_deterministic,
// and tuned (Bc = 128, 8 warps) with its deterministic form; and standard attention's backward
// (fp16/bf16 through cuBLAS, P kept), the baseline.
const std::vector<BwdVariant>& bwd_variants();
const BwdVariant& bwd_variant(const std::string& name);  // throws UsageError for an unknown name

}  // namespace attention
