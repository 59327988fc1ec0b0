// Stage 12's kernels (device pointers; the layouts of decode.hpp and paged_cache.hpp). Each launcher
// checks the problem and throws course::UsageError before launching. One launcher a rung:
//   per_head    (decode_1_per_head.cu)    one block a (sequence, query head), a loop over its cache
//   split_kv    (decode_2_split_kv.cu)    the same block a split of the cache, then a merge by ⊕
//   gqa         (decode_3_gqa.cu)         a block a split and up to 16 rows of a group, on the tensor cores
//   persistent  (decode_4_persistent.cu)  one wave of blocks walking rung 3's items, one ring across them
// and the merge of split-KV's partials (decode_merge.cu), which rungs 2–4 launch after theirs.
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

// Split-KV's part: the most splits a sequence's cache is cut into (0: auto_splits picks), and the
// partial records, partial_floats(s, page, splits) floats (algorithm.hpp); null when that is 0.
struct SplitArgs {
  int splits;
  float* partial;
};
void launch_decode_split_kv(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split);
void launch_decode_gqa(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split);
void launch_decode_persistent(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split);

// The splits a rung takes for `splits` = 0 on this GPU: choose_splits (algorithm.hpp) with the
// rung's blocks a split and how many of its blocks an SM holds at once.
int auto_splits_split_kv(const DecodeShape& s);
int auto_splits_gqa(const DecodeShape& s);
int auto_splits_persistent(const DecodeShape& s);  // about 4 items a block

// Rungs 2–4's second kernel: for each sequence whose cache was split, each row's partial
// records merged by ⊕ into O and L.
void launch_decode_merge(const DecodeShape& s, course::Dtype t, const DecodeArgs& a, const SplitArgs& split);

}  // namespace inference
