// The paged KV cache (vLLM's PagedAttention; FlashAttention's and FlashInfer's kvcache): K and V
// live in a pool of pages of `page` tokens, each page laid out [token][head][d] (k_cache:
// num_pages × page × H_kv × d, as FlashAttention's API takes it); a sequence's block table lists
// its pages in order, so its token p lies in page table[p / page], slot p % page. Pages are handed
// out from a free list in a shuffled order, as a server's allocator ends up after some traffic, so
// a block table of several pages is rarely the identity, and a kernel that ignores it fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtype.hpp"

namespace inference {

class PagedCache {
 public:
  // A pool of `pages` pages for H_kv heads of d values in dtype t (fp16 or bf16); `seed` orders
  // the free list.
  PagedCache(course::Dtype t, int heads_kv, int d, int page, int pages, std::uint64_t seed);

  int add_sequence();  // a new, empty sequence; its id
  // Appends `tokens` tokens to sequence `seq`: k and v hold [tokens][H_kv][d] values, stored
  // rounded to the dtype. Takes pages from the pool as the sequence crosses into new ones; throws
  // course::UsageError when the pool has none left.
  void append(int seq, const float* k, const float* v, int tokens);

  int sequences() const { return int(tables_.size()); }
  int length(int seq) const { return lengths_.at(std::size_t(seq)); }
  const std::vector<int>& table(int seq) const { return tables_.at(std::size_t(seq)); }
  // Element 0 of token `pos`, head h of sequence `seq`, in the K pool (and the V pool).
  std::size_t at(int seq, int pos, int h) const;

  course::Dtype dtype() const { return dtype_; }
  int heads_kv() const { return heads_kv_; }
  int d() const { return d_; }
  int page() const { return page_; }
  int pages() const { return pages_; }
  int pages_free() const { return int(free_.size()); }
  // The pools: values (rounded to the dtype) and their bits, pages × page × H_kv × d each.
  const std::vector<float>& K() const { return K_; }
  const std::vector<float>& V() const { return V_; }
  const std::vector<std::uint16_t>& K_bits() const { return Kb_; }
  const std::vector<std::uint16_t>& V_bits() const { return Vb_; }

 private:
  course::Dtype dtype_;
  int heads_kv_, d_, page_, pages_;
  std::vector<float> K_, V_;
  std::vector<std::uint16_t> Kb_, Vb_;
  std::vector<int> free_;  // taken from the back
  std::vector<std::vector<int>> tables_;
  std::vector<int> lengths_;
};

// A block table as the kernels take it (kernels.cuh: [B][stride] int32, FlashAttention's padded
// form, with the lengths beside it), checked against a pool of `pages` pages of `page` tokens: each
// sequence's ⌈length / page⌉ pages fit in its row, and each names a page of the pool. A kernel
// trusts the table (a bad entry would read outside the pool), so a table that did not come from
// PagedCache goes through this first. Throws course::UsageError naming the first bad entry.
void check_block_table(const std::vector<int>& table, int stride, const std::vector<int>& lengths, int page,
                       int pages);

}  // namespace inference
