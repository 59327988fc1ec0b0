// GPU test helpers shared by the softmax stages.
#pragma once

#include <vector>

#include "algorithm.hpp"
#include "device_buffer.hpp"
#include "softmax_bench.hpp"

namespace softmax::testing {

// Runs `launch` on a device copy of X, with Y and the workspace poisoned (NaN) first, so that an
// element or a partial nobody wrote fails the comparison.
inline std::vector<float> run_on_gpu(const Launcher& launch, const std::vector<float>& X, int R,
                                     int C) {
  course::DeviceBuffer<float> dX(X), dY(X.size()), dW(workspace_floats(R, C));
  dY.poison();
  dW.poison();
  launch(dX.get(), dY.get(), dW.get(), R, C);
  return dY.download();
}

}  // namespace softmax::testing
