// The rungs of stage 11, in the order of the chapter (stage 07's BwdVariant: name, dtypes, head
// dimensions, one line, the plan the model and the CPU count take, the launcher), and stage 07's
// fastest, run beside them on the same inputs as the yardstick.
#pragma once

#include <vector>

#include "../07_backward/variants.hpp"

namespace attention {

// Rungs: wgmma, tma (fp16 and bf16, d = 64 or 128). Launchers are empty unless the build has the sm_90a
// kernels (COURSE_HAS_HOPPER).
const Registry<BwdVariant>& v3_bwd_registry();

// Stage 07's fastest rungs (wide at d = 64, split at d = 128), named 07_wide and 07_split.
std::vector<BwdVariant> stage07_beside();

}  // namespace attention
