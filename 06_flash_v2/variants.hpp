// The variants of stage 06, in the order of the chapter: the fp32 kernel, then the tensor-core
// ladder (common/attention/variants.hpp: name, dtypes, head dimensions, one line, tiles, launcher).
#pragma once

#include "attention/variants.hpp"

namespace attention {

// flash_v2 (fp32), then the tensor-core rungs mma, ldmatrix, cp_async, exp2, one_barrier, skip_mask,
// heaviest_first, tuned, lazy_rescale (fp16, bf16). Launchers are empty in a build without CUDA.
const Registry<ForwardVariant>& v2_registry();

}  // namespace attention
