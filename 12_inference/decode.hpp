// Stage 12's decode step: B sequences, each with a cache of len_b tokens (this step's `rows` tokens
// already appended) of H_kv heads, and `rows` query rows of H_q heads. Query row r is the token at
// position len_b − rows + r and sees the cache's positions 0 .. len_b − rows + r: its own and the
// rows before it (rows > 1 is speculative decoding's causal block). Query head hq reads K/V head
// hq / G, G = H_q / H_kv (grouped-query attention; G = 1 is multi-head attention).
// Layouts (FlashAttention's kvcache API): Q and O are [B][rows][H_q][d], L is [B][H_q][rows].
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "hd.hpp"

namespace inference {

// Split-KV's cut of one sequence: a cache of ⌈length / page⌉ pages in `count` splits of whole pages,
// `pages_each` pages each (the last may have fewer, none is empty), at most `splits` of them. The
// launch (choosing the grid) and each block (finding its pages) compute it alike.
struct Splits {
  int count, pages_each;
};
COURSE_HD inline Splits split_cache(int length, int page, int splits) {
  const int pages = (length + page - 1) / page, wanted = splits < pages ? splits : pages;
  const int each = (pages + wanted - 1) / wanted;
  return {(pages + each - 1) / each, each};
}

struct DecodeShape {
  int heads_q = 32, heads_kv = 8, d = 128, rows = 1;
  std::vector<int> lengths;  // one a sequence: its cache's tokens, each >= rows

  int batch() const { return int(lengths.size()); }
  int group() const { return heads_q / heads_kv; }
  long long tokens() const;                                   // Σ len_b
  std::size_t q_elements() const { return std::size_t(batch()) * rows * heads_q * d; }
  std::size_t l_elements() const { return std::size_t(batch()) * heads_q * rows; }
  // Query row r of sequence b, head hq: where its d values start in Q (and O), and its L.
  std::size_t q_at(int b, int r, int hq) const { return ((std::size_t(b) * rows + r) * heads_q + hq) * d; }
  std::size_t l_at(int b, int hq, int r) const { return (std::size_t(b) * heads_q + hq) * rows + r; }
  // The last cache position row r of sequence b sees.
  int last_key(int b, int r) const { return lengths[std::size_t(b)] - rows + r; }
  // Throws course::UsageError with a clear message for a problem this stage does not take.
  void validate() const;
  std::string text() const;  // "B=2 Hq=32 Hkv=8 d=128 rows=1 len=1000..4096"
};

}  // namespace inference
