#include "paged_cache.hpp"

#include <algorithm>
#include <random>
#include <string>

#include "check.hpp"

namespace inference {

PagedCache::PagedCache(course::Dtype t, int heads_kv, int d, int page, int pages, std::uint64_t seed)
    : dtype_(t), heads_kv_(heads_kv), d_(d), page_(page), pages_(pages) {
  course::require(t == course::Dtype::fp16 || t == course::Dtype::bf16,
                  std::string("the paged cache holds fp16 or bf16, not ") + course::name(t));
  course::require(heads_kv >= 1 && d >= 1 && page >= 1 && pages >= 1,
                  "the paged cache needs H_kv, d, the page size and the page count all >= 1");
  const std::size_t n = std::size_t(pages) * page * heads_kv * d;
  K_.assign(n, 0.0f);
  V_.assign(n, 0.0f);
  Kb_.assign(n, 0);
  Vb_.assign(n, 0);
  free_.resize(std::size_t(pages));
  for (int p = 0; p < pages; ++p) free_[std::size_t(p)] = p;
  std::shuffle(free_.begin(), free_.end(), std::mt19937_64(seed));
}

int PagedCache::add_sequence() {
  tables_.emplace_back();
  lengths_.push_back(0);
  return int(tables_.size()) - 1;
}

std::size_t PagedCache::at(int seq, int pos, int h) const {
  const auto& t = table(seq);
  course::require(pos >= 0 && pos < length(seq) && h >= 0 && h < heads_kv_,
                  "paged cache: token " + std::to_string(pos) + ", head " + std::to_string(h) +
                      " outside sequence " + std::to_string(seq) + " (" + std::to_string(length(seq)) + " tokens)");
  const int p = t[std::size_t(pos / page_)], slot = pos % page_;
  return ((std::size_t(p) * page_ + slot) * heads_kv_ + h) * d_;
}

void PagedCache::append(int seq, const float* k, const float* v, int tokens) {
  course::require(seq >= 0 && seq < sequences(), "paged cache: no sequence " + std::to_string(seq));
  course::require(tokens >= 0, "paged cache: a negative token count");
  auto& t = tables_[std::size_t(seq)];
  int& len = lengths_[std::size_t(seq)];
  const int needed = (len + tokens + page_ - 1) / page_ - int(t.size());
  course::require(needed <= pages_free(), "paged cache: sequence " + std::to_string(seq) + " needs " +
                                              std::to_string(needed) + " more pages, the pool has " +
                                              std::to_string(pages_free()) + " left");
  for (int i = 0; i < needed; ++i) {
    t.push_back(free_.back());
    free_.pop_back();
  }
  const std::size_t row = std::size_t(heads_kv_) * d_;
  for (int i = 0; i < tokens; ++i) {
    ++len;  // at() checks against the length: the token exists once counted
    const std::size_t to = at(seq, len - 1, 0);
    for (std::size_t e = 0; e < row; ++e) {
      Kb_[to + e] = course::float_to_bits(dtype_, k[std::size_t(i) * row + e]);
      Vb_[to + e] = course::float_to_bits(dtype_, v[std::size_t(i) * row + e]);
      K_[to + e] = course::bits_to_float(dtype_, Kb_[to + e]);
      V_[to + e] = course::bits_to_float(dtype_, Vb_[to + e]);
    }
  }
}

void check_block_table(const std::vector<int>& table, int stride, const std::vector<int>& lengths, int page,
                       int pages) {
  course::require(page >= 1 && pages >= 1 && stride >= 1,
                  "block table: the page size, the pool's pages and the table's row must be >= 1");
  course::require(table.size() == lengths.size() * std::size_t(stride),
                  "block table: " + std::to_string(table.size()) + " entries for " + std::to_string(lengths.size()) +
                      " sequences of " + std::to_string(stride) + " a row");
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const long long used = (static_cast<long long>(lengths[b]) + page - 1) / page;
    course::require(lengths[b] >= 0 && used <= stride,
                    "block table: sequence " + std::to_string(b) + " holds " + std::to_string(lengths[b]) +
                        " tokens, " + std::to_string(used) + " pages of " + std::to_string(page) + ", its row " +
                        std::to_string(stride));
    for (long long i = 0; i < used; ++i) {
      const int p = table[b * std::size_t(stride) + std::size_t(i)];
      course::require(p >= 0 && p < pages, "block table: sequence " + std::to_string(b) + ", entry " +
                                               std::to_string(i) + " names page " + std::to_string(p) +
                                               ", outside the pool's 0.." + std::to_string(pages - 1));
    }
  }
}

}  // namespace inference
