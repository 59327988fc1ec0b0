// Stage 12's kernels (device pointers; the layouts of decode.hpp and paged_cache.hpp). Each launcher
// checks the problem and throws course::UsageError before launching. One launcher a rung:
//   per_head  (decode_1_per_head.cu)  one block a (sequence, query head), a loop over its cache
#pragma once

#include <cstdint>

#include "decode.hpp"
#include "dtype.hpp"

namespace inference {

// A decode step's buffers on the GPU: the cache's pools (pages × page × H_kv × d, 16-bit), the
// block table ([B][stride] int32, FlashAttention's padded form), the lengths ([B] int32), Q and O
// ([B][rows][H_q][d], 16-bit) and L ([B][H_q][rows] float).
struct DecodeArgs {
  const std::uint16_t* K;
  const std::uint16_t* V;
  const int* table;
  int stride;
  const int* lengths;
  int page;
  const std::uint16_t* Q;
  std::uint16_t* O;
  float* L;
};

void launch_decode_per_head(const DecodeShape& s, course::Dtype t, const DecodeArgs& a);

}  // namespace inference
