// Split-KV decode (Flash-Decoding) on the CPU, through the counting view of global memory: the
// exact bytes of each plan, and the model that predicts them. Arithmetic in float, P kept in float
// (a kernel rounds P to 16 bits for its P·V, which its tests will allow for).
//
// The work is cut as a kernel's blocks would take it. Sequence b's cache of P_b = ⌈len_b / page⌉
// pages is cut into S_b splits of whole pages (at most `splits`, none empty). A block takes one
// split of one K/V head for the heads that read it: all G of its query heads when packed (GQA
// packing: each K/V row loaded once for G heads), or one query head when not (one block a query
// head, each loading the rows itself). It reads the sequence's length (cache_seqlens[b]), its
// block-table entries, its tokens' K and V rows and its query rows; for each row it runs the
// softmax over the keys the row sees (chapter 04's online recurrence) and writes the partial
// (o = Σ p·v / Σ p, L = log Σ e^s): straight into O and L when S_b = 1, else into a partial record of
// d + 8 floats (o, then L in the first of 8 more, so that a record is whole sectors). A merge block a
// group then reads the length, its rows' S_b records, and combines them by chapter 04's ⊕ on (o, L)
// (softmax::merge_weights), writing O and L.
// The block table is FlashAttention's: [B][max P_b] int32, padded; the lengths are [B] int32.
#pragma once

#include <cstdint>
#include <vector>

#include "decode.hpp"
#include "io_count.hpp"
#include "paged_cache.hpp"

namespace inference {

struct DecodePlan {
  int splits = 1;          // the most parts a sequence's cache is cut into (Flash-Decoding's split-KV)
  bool gqa_packed = true;  // a block takes a group's G query heads, loading each K/V row once; false: one head
};

// Sequence b's splits: how many (S_b) and the pages each covers (the last may have fewer).
struct Splits {
  int count, pages_each;
};
Splits splits_of(int length, int page, int splits);

struct DecodeOutput {
  std::vector<std::uint16_t> O;  // [B][rows][H_q][d], the cache's dtype
  std::vector<float> L;          // [B][H_q][rows]
  course::IoCount io;
};

DecodeOutput decode_counted(const DecodeShape& s, const DecodePlan& plan, const std::vector<std::uint16_t>& Q_bits,
                            const PagedCache& cache);

// The bytes decode_counted reads and writes, from the problem alone: the cache's K and V rows (once,
// or G times unpacked), Q's rows (once a split), O, L, the partial records written and read back
// (S_b > 1), the lengths and each block's block-table entries (in whole 32-byte sectors, as L's
// writes are).
course::IoCount decode_model(const DecodeShape& s, const DecodePlan& plan, int page);
inline double decode_model_bytes(const DecodeShape& s, const DecodePlan& plan, int page) {
  return double(decode_model(s, plan, page).total());
}

}  // namespace inference
