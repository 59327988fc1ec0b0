// Split-KV decode (Flash-Decoding) on the CPU, through the counting view of global memory: the
// exact bytes of each plan, and the model that predicts them. Arithmetic in float, P kept in float
// (a kernel rounds P to 16 bits for its P·V, which its tests will allow for).
//
// The work is cut as a kernel's blocks would take it. Sequence b's cache of P_b = ⌈len_b / page⌉
// pages is cut into S_b splits of whole pages (at most `splits`, none empty). A block takes one
// split of one K/V head for some of the query rows that read it: when packed, up to tile_rows of
// the group's G·R rows (GQA packing: each K/V row loaded once for them; ⌈G·R / tile_rows⌉ blocks
// a group), else one query head's R rows (a block a query head, each loading the rows itself). It reads the sequence's length (cache_seqlens[b]), its
// block-table entries, its tokens' K and V rows and its query rows; for each row it runs the
// softmax over the keys the row sees (chapter 04's online recurrence) and writes the partial
// (o = Σ p·v / Σ p, L = log Σ e^s): straight into O and L when S_b = 1, else into a partial record of
// d + 8 floats (o, then L in the first of 8 more, so that a record is whole sectors). A merge block a
// group then reads the length, its rows' S_b records, and combines them by chapter 04's ⊕ on (o, L)
// (softmax::merge_weights), writing O and L.
// The block table is FlashAttention's: [B][max P_b] int32, padded; the lengths are [B] int32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "decode.hpp"
#include "io_count.hpp"
#include "paged_cache.hpp"

namespace inference {

struct DecodePlan {
  int splits = 1;          // the most parts a sequence's cache is cut into (Flash-Decoding's split-KV)
  bool gqa_packed = true;  // a block takes rows of a group's G query heads; false: one head's R rows
  int tile_rows = 16;      // packed: a block's most rows (the group's G·R rows in tiles of this many)
  // A block's rows: a run of the sequence's rows in L's order [H_q][R], all of one K/V head.
  int block_rows(const DecodeShape& s) const {
    return gqa_packed ? (s.group() * s.rows < tile_rows ? s.group() * s.rows : tile_rows) : s.rows;
  }
};

// Sequence b's splits (split_cache), with the arguments checked.
Splits splits_of(int length, int page, int splits);
// The most splits of any sequence: a split-KV grid's first dimension and the partial records' slots.
int max_splits(const DecodeShape& s, int page, int splits);
// The floats of the partial records a launch with this plan needs: for each row (B·H_q·R), one
// record of d + 8 floats for each of the most splits any sequence has; 0 when no sequence splits.
std::size_t partial_floats(const DecodeShape& s, int page, int splits);

// Split-KV's count for a launch: as many blocks as fit in one wave of `resident` blocks (an SM's blocks
// at once times the SMs) over the B sequences × `blocks_a_split` blocks of each split, but no
// split shorter than kMinSplitTokens of the longest sequence (below that the partials' bytes
// start to count: 1 KB a row a split against 512 bytes a token of K and V at d = 128).
constexpr int kMinSplitTokens = 256;
int choose_splits(const DecodeShape& s, int blocks_a_split, int resident);

struct DecodeOutput {
  std::vector<std::uint16_t> O;  // [B][rows][H_q][d], the cache's dtype
  std::vector<float> L;          // [B][H_q][rows]
  course::IoCount io;
};

DecodeOutput decode_counted(const DecodeShape& s, const DecodePlan& plan, const std::vector<std::uint16_t>& Q_bits,
                            const PagedCache& cache);

// The bytes decode_counted reads and writes, from the problem alone: the cache's K and V rows (once
// for each block of a group's rows: ⌈G·R / tile_rows⌉ times packed, G times unpacked), Q's rows (once a split), O, L, the partial records written and read back
// (S_b > 1), the lengths and each block's block-table entries (in whole 32-byte sectors, as L's
// writes are).
course::IoCount decode_model(const DecodeShape& s, const DecodePlan& plan, int page);
inline double decode_model_bytes(const DecodeShape& s, const DecodePlan& plan, int page) {
  return double(decode_model(s, plan, page).total());
}

}  // namespace inference
