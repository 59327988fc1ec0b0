#include "variants.hpp"

#include "check.hpp"
#include "kernels.cuh"  // declarations only (and rung 5's Br): no CUDA needed

namespace attention {

namespace {

using course::Dtype;

// Rungs 1-4's blocks (fa3_bwd_common.cuh): key blocks of 128 (two warpgroups of 64), query blocks of 64;
// dQ's share added by each warpgroup apart (two a pair).
constexpr Tiles kWgmmaTiles{64, 128};
// Rungs 5 and 6: one share of dQ a key block, with query blocks of 128 at d = 64 (one_dq_query_rows).
// Rung 6 moves the same bytes as rung 5, so its plan is rung 5's: BackwardPlan::deterministic names
// stage 07's other form (a query-outer dQ pass of its own), not an order of the same reductions.
BackwardPlan one_dq_plan(const Shape& s) { return {{one_dq_query_rows(s.d), 128}, false, {0, 0}, 1}; }
// Rung 7: rung 5's, with query blocks of 80 at d = 128 not causal.
BackwardPlan tiles_plan(const Shape& s) { return {{tiles_query_rows(s.d, s.causal), 128}, false, {0, 0}, 1}; }

#if COURSE_HAS_HOPPER
// The whole backward of an atomic rung: stage 07's preprocess (D, dQacc = 0), the key-outer pass,
// dQ = scale·dQacc.
BackwardLaunch atomic(void (*pass)(const Shape&, Dtype, const BackwardArgs&)) {
  return [pass](const Shape& s, Dtype t, const BackwardArgs& a) {
    course::require(a.dQacc != nullptr, "an atomic backward needs dQacc");
    launch_backward_preprocess(s, t, a);
    pass(s, t, a);
    launch_dq_convert(s, t, a);
  };
}
#define COURSE_HOPPER(f) BackwardLaunch(atomic(f))
#else
#define COURSE_HOPPER(f) BackwardLaunch()
#endif

}  // namespace

const Registry<BwdVariant>& v3_bwd_registry() {
  static const std::vector<Dtype> half = {Dtype::fp16, Dtype::bf16};
  static const Registry<BwdVariant> registry(
      "11", {
                {{"wgmma", half, {64, 128}, "rung 1: the five products by wgmma (S and dP transposed), loads by cp.async"},
                 {kWgmmaTiles, false, {0, 0}, 2}, COURSE_HOPPER(launch_fa3_bwd_wgmma)},
                {{"tma", half, {64, 128}, "rung 2: K, V, Q, dO by TMA into a ring of slots, completion on mbarriers"},
                 {kWgmmaTiles, false, {0, 0}, 2}, COURSE_HOPPER(launch_fa3_bwd_tma)},
                {{"warp_specialized", half, {64, 128},
                  "rung 3: a producer warpgroup loads, two consumers compute; setmaxnreg moves the registers"},
                 {kWgmmaTiles, false, {0, 0}, 2}, COURSE_HOPPER(launch_fa3_bwd_warp_specialized)},
                {{"bulk_dq", half, {64, 128},
                  "rung 4: dQ's shares staged in shared memory, added into global memory by the bulk reduction"},
                 {kWgmmaTiles, false, {0, 0}, 2}, COURSE_HOPPER(launch_fa3_bwd_bulk_dq)},
                {{"one_dq", half, {64, 128},
                  "rung 5: one share of dQ a key block, split by the consumers (query blocks of 128 at d = 64)"},
                 one_dq_plan({1, 1, 1, 128, false}), COURSE_HOPPER(launch_fa3_bwd_one_dq), false, one_dq_plan},
                {{"deterministic", half, {64, 128},
                  "rung 6: rung 5 with dQ's additions in key-block order (a counter each): bit-for-bit repeatable"},
                 one_dq_plan({1, 1, 1, 128, false}), COURSE_HOPPER(launch_fa3_bwd_deterministic), false, one_dq_plan},
                {{"tiles", half, {64, 128},
                  "rung 7: FlashAttention-3's tiles, 80 x 128 at d = 128 not causal (dQ transposed); rung 5's elsewhere"},
                 tiles_plan({1, 1, 1, 128, false}), COURSE_HOPPER(launch_fa3_bwd_tiles), false, tiles_plan},
            });
  return registry;
}

std::vector<BwdVariant> stage07_beside() {
  std::vector<BwdVariant> beside;
  for (const char* name : {"wide", "split"}) {
    BwdVariant v = bwd_registry().find(name);
    v.name = std::string("07_") + name;
    v.summary = "stage 07's fastest at d = " + std::to_string(v.ds.front()) + " (mma.sync), the yardstick";
    beside.push_back(v);
  }
  return beside;
}

}  // namespace attention
