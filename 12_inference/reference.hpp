// The float64 reference of a decode step (Eigen): for every sequence, query head and row, the
// softmax of its scores against the cache positions it sees, times V, and its logsumexp L, with
// scores scale·q·k (scale = 1/√d). Read from the cache's values (already rounded to its dtype) and
// Q's (rounded likewise).
#pragma once

#include <vector>

#include "decode.hpp"
#include "paged_cache.hpp"

namespace inference {

struct DecodeResult {
  std::vector<double> O;  // [B][rows][H_q][d]
  std::vector<double> L;  // [B][H_q][rows], natural log
};

// `only`, if given: the sequences to compute (a program's check of a large problem); the others' O
// and L are left NaN.
DecodeResult decode_reference(const DecodeShape& s, const std::vector<float>& Q, const PagedCache& cache,
                              const std::vector<int>* only = nullptr);

}  // namespace inference
