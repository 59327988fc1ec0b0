// Split-KV decode (Flash-Decoding) on the CPU, through the counting view of global memory, with the
// kernels' arithmetic (float): the exact bytes of every rung's plan, and the model that predicts them.
//
// Sequence b's cache of P_b = ⌈len_b / page⌉ pages is cut into S_b splits of whole pages (at most
// `splits`, none empty). A split of one K/V head reads its block-table entries, its tokens' K and V
// rows, and the query rows of the heads that read that K/V head; it computes, for each of those
// rows, the softmax over its keys (the online recurrence of chapter 04) and writes the partial
// (o = Σ p·v / Σ p, L = log Σ e^s): straight into O and L when S_b = 1, else into a partial record
// of d + 8 floats (o, then L in the first of 8 more, so that a record is whole sectors). A merge
// pass then reads a row's S_b records and combines them by chapter 04's ⊕ on (o, L) (stage 10's
// merge_weights), writing O and L.
#pragma once

#include <cstdint>
#include <vector>

#include "decode.hpp"
#include "io_count.hpp"
#include "paged_cache.hpp"

namespace inference {

struct DecodePlan {
  int splits = 1;           // the most parts a sequence's cache is cut into (Flash-Decoding's split-KV)
  bool gqa_packed = true;   // a group's G query heads share each K/V load; false: each head loads its own
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

// The bytes decode_counted moves, from the problem alone: the cache's K and V rows (each once, or G
// times unpacked), Q's rows (once a split), O, L, the partial records written and read back (S_b > 1),
// and the block table's entries (each split's, in whole 32-byte sectors, as are L's).
double decode_model_bytes(const DecodeShape& s, const DecodePlan& plan, int page);

}  // namespace inference
