// The variants of stage 07, in the order of the chapter: what each is called, which dtypes and
// head dimensions it takes, its plan (block sizes, atomic or deterministic dQ: for the model and
// the CPU count), and its launcher (the whole backward pass: preprocess, main pass(es), convert).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "attention/variants.hpp"
#include "dtype.hpp"
#include "kernels.cuh"  // BackwardArgs (a plain struct: no CUDA needed to include it)

namespace attention {

using BackwardLaunch = std::function<void(const Shape&, course::Dtype, const BackwardArgs&)>;

struct BwdVariant : VariantInfo {
  BackwardPlan plan;
  BackwardLaunch launch;  // empty in a CPU-only build
  bool standard = false;  // standard attention: P kept from its own forward; `plan` unused
  // For a variant whose blocks depend on the problem (stage 11's rung 5: Br by d), its plan there;
  // otherwise `plan` holds for every problem.
  BackwardPlan (*plan_of)(const Shape&) = nullptr;
  BackwardPlan plan_for(const Shape& s) const { return plan_of ? plan_of(s) : plan; }
};

// Standard attention's backward (fp32 from the course's kernels, fp16/bf16 through cuBLAS, P kept),
// the baseline; flash_bwd (fp32, CUDA cores); then on the tensor cores tc (atomic dQ) and
// tc_deterministic, tuned (Bc = 128, 8 warps), wide (d = 64) and split (d = 128), each with its
// deterministic form. All run by default.
const Registry<BwdVariant>& bwd_registry();

}  // namespace attention
