#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "../04_online_softmax/online.hpp"
#include "check.hpp"

namespace inference {

namespace {

// The 32-byte sectors of n elements of `bytes` each from element `first` of an array starting on a
// sector: what one request of the counting view costs.
std::uint64_t sectors(std::size_t first, std::size_t n, std::size_t bytes) {
  return (((first + n) * bytes - 1) / course::kSectorBytes - first * bytes / course::kSectorBytes + 1) *
         course::kSectorBytes;
}

int pages_of(int length, int page) { return (length + page - 1) / page; }

int max_pages(const DecodeShape& s, int page) {
  int most = 0;
  for (int len : s.lengths) most = std::max(most, pages_of(len, page));
  return most;
}

void check_plan(const DecodePlan& plan, int page) {
  course::require(plan.splits >= 1, "decode: at least one split, not " + std::to_string(plan.splits));
  course::require(plan.tile_rows >= 1, "decode: a block takes at least one row, not " + std::to_string(plan.tile_rows));
  course::require(page >= 1, "decode: a page holds at least one token, not " + std::to_string(page));
}

// The blocks of one sequence (and split): runs of its rows in L's order j = hq·R + r, each within
// one K/V head's group: `first` = j of the block's first row, `rows` how many.
struct Block {
  int first, rows;
};
std::vector<Block> blocks_of(const DecodeShape& s, const DecodePlan& plan) {
  const int group_rows = s.group() * s.rows, each = plan.block_rows(s);
  std::vector<Block> out;
  for (int h = 0; h < s.heads_kv; ++h)
    for (int i = 0; i < group_rows; i += each) out.push_back({h * group_rows + i, std::min(each, group_rows - i)});
  return out;
}

}  // namespace

Splits splits_of(int length, int page, int splits) {
  course::require(page >= 1 && splits >= 1 && length >= 1, "splits_of: length, page and splits must be >= 1");
  return split_cache(length, page, splits);
}

int max_splits(const DecodeShape& s, int page, int splits) {
  int most = 1;
  for (int len : s.lengths) most = std::max(most, splits_of(len, page, splits).count);
  return most;
}

int choose_splits(const DecodeShape& s, int blocks_a_split, int resident) {
  s.validate();
  course::require(blocks_a_split >= 1 && resident >= 1, "choose_splits: blocks a split and resident blocks must be >= 1");
  const long long base = (long long)s.batch() * blocks_a_split;
  const int longest = *std::max_element(s.lengths.begin(), s.lengths.end());
  // At most one wave: a split more than fits leaves a second wave of a few blocks (measured on an
  // NVIDIA H200, split_kv at B = 1, H_q = 32, 32k tokens: 16 splits 0.445 ms, 17 splits 0.623 ms).
  const long long wave = std::max(1LL, resident / base), most = (longest + kMinSplitTokens - 1) / kMinSplitTokens;
  return int(std::max(1LL, std::min(wave, most)));
}

std::size_t partial_floats(const DecodeShape& s, int page, int splits) {
  s.validate();
  const int slots = max_splits(s, page, splits);
  return slots == 1 ? 0 : s.l_elements() * std::size_t(slots) * (std::size_t(s.d) + 8);
}

DecodeOutput decode_counted(const DecodeShape& s, const DecodePlan& plan, const std::vector<std::uint16_t>& Q_bits,
                            const PagedCache& cache) {
  s.validate();
  check_plan(plan, cache.page());
  course::require(cache.sequences() == s.batch() && cache.heads_kv() == s.heads_kv && cache.d() == s.d,
                  "decode: the cache holds " + std::to_string(cache.sequences()) + " sequences, H_kv = " +
                      std::to_string(cache.heads_kv()) + ", d = " + std::to_string(cache.d()) + "; the problem " +
                      s.text());
  course::require(Q_bits.size() == s.q_elements(), "decode: Q holds " + std::to_string(Q_bits.size()) +
                                                       " values, the problem " + std::to_string(s.q_elements()));
  const course::Dtype t = cache.dtype();
  const int d = s.d, page = cache.page(), R = s.rows, group_rows = s.group() * R;
  const std::size_t dn = static_cast<std::size_t>(d), record = dn + 8;
  DecodeOutput out{std::vector<std::uint16_t>(s.q_elements()), std::vector<float>(s.l_elements()), {}};

  // Global memory: the pools, Q, O, L, the lengths, the padded block table, the partial records.
  const int stride = max_pages(s, page), slots = max_splits(s, page, plan.splits);
  std::vector<int> table(std::size_t(s.batch()) * std::size_t(stride), 0), lengths(s.lengths);
  for (int b = 0; b < s.batch(); ++b) {
    course::require(cache.length(b) == s.lengths[std::size_t(b)],
                    "decode: sequence " + std::to_string(b) + " has " + std::to_string(cache.length(b)) +
                        " tokens in the cache, the problem says " + std::to_string(s.lengths[std::size_t(b)]));
    std::copy(cache.table(b).begin(), cache.table(b).end(), table.begin() + std::ptrdiff_t(b) * stride);
  }
  std::vector<float> partial(s.l_elements() * std::size_t(slots) * record, 0.0f);
  course::Hbm hbm;
  auto gK = hbm.wrap(cache.K_bits().data(), cache.K_bits().size());
  auto gV = hbm.wrap(cache.V_bits().data(), cache.V_bits().size());
  auto gQ = hbm.wrap(Q_bits.data(), Q_bits.size());
  auto gO = hbm.wrap(out.O.data(), out.O.size());
  auto gL = hbm.wrap(out.L.data(), out.L.size());
  auto gN = hbm.wrap(lengths.data(), lengths.size());
  auto gT = hbm.wrap(table.data(), table.size());
  auto gP = hbm.wrap(partial.data(), partial.size());
  // Row j of sequence b (j = hq·R + r): its L at l_at(b, 0, 0) + j, its record for a split.
  auto record_at = [&](std::size_t l, int split) { return (l * std::size_t(slots) + std::size_t(split)) * record; };

  const float scale = 1.0f / std::sqrt(float(d));
  const std::size_t most = std::size_t(plan.block_rows(s));
  std::vector<std::uint16_t> row(dn);
  std::vector<float> kf(dn), vf(dn), o(dn), rec(record), m(most), l(most), Ls(most);
  std::vector<std::vector<float>> q(most, std::vector<float>(dn)), acc(most, std::vector<float>(dn));
  auto load_row = [&](const course::GlobalArray<const std::uint16_t>& a, std::size_t at, std::vector<float>& to) {
    a.load(at, dn, row.data());
    for (std::size_t e = 0; e < dn; ++e) to[e] = course::bits_to_float(t, row[e]);
  };
  auto store_O = [&](std::size_t at, const std::vector<float>& x) {
    for (std::size_t e = 0; e < dn; ++e) row[e] = course::float_to_bits(t, x[e]);
    gO.store(at, dn, row.data());
  };

  for (int b = 0; b < s.batch(); ++b)
    for (const Block& blk : blocks_of(s, plan)) {
      const int h = blk.first / group_rows;  // the K/V head of the block's rows
      const std::size_t n = std::size_t(blk.rows), l0 = s.l_at(b, 0, 0) + std::size_t(blk.first);
      auto r_of = [&](std::size_t i) { return (blk.first + int(i)) % R; };
      auto hq_of = [&](std::size_t i) { return (blk.first + int(i)) / R; };
      // The launch knows the lengths (it chose the splits from them); each block reads its own.
      const Splits sp = splits_of(s.lengths[std::size_t(b)], page, plan.splits);
      int len = 0;
      for (int split = 0; split < sp.count; ++split) {
        // ---- one block: one split of K/V head h for the block's rows ----
        gN.load(std::size_t(b), 1, &len);
        const int p0 = split * sp.pages_each, p1 = std::min(p0 + sp.pages_each, pages_of(len, page));
        std::vector<int> entries(std::size_t(p1 - p0));
        gT.load(std::size_t(b) * std::size_t(stride) + std::size_t(p0), entries.size(), entries.data());
        for (std::size_t i = 0; i < n; ++i) {
          load_row(gQ, s.q_at(b, r_of(i), hq_of(i)), q[i]);
          m[i] = -INFINITY;
          l[i] = 0.0f;
          std::fill(acc[i].begin(), acc[i].end(), 0.0f);
        }
        for (int pos = p0 * page; pos < std::min(p1 * page, len); ++pos) {
          const std::size_t at =
              ((std::size_t(entries[std::size_t(pos / page - p0)]) * page + std::size_t(pos % page)) * s.heads_kv + h) * dn;
          load_row(gK, at, kf);
          load_row(gV, at, vf);
          for (std::size_t i = 0; i < n; ++i) {
            if (pos > s.last_key(b, r_of(i))) continue;  // the step's later rows
            float dot = 0.0f;
            for (std::size_t e = 0; e < dn; ++e) dot = std::fmaf(q[i][e], kf[e], dot);
            const float x = dot * scale, m_new = std::max(m[i], x);
            const float alpha = softmax::rescale(m[i], m_new), p = std::exp(x - m_new);
            l[i] = l[i] * alpha + p;
            for (std::size_t e = 0; e < dn; ++e) acc[i][e] = acc[i][e] * alpha + p * vf[e];
            m[i] = m_new;
          }
        }
        for (std::size_t i = 0; i < n; ++i) {  // o normalised, L; (0, −∞) for a row with no keys here
          const bool none = l[i] == 0.0f;
          for (std::size_t e = 0; e < dn; ++e) o[e] = none ? 0.0f : acc[i][e] / l[i];
          Ls[i] = none ? -INFINITY : m[i] + std::log(l[i]);
          if (sp.count == 1) {
            store_O(s.q_at(b, r_of(i), hq_of(i)), o);
          } else {
            std::copy(o.begin(), o.end(), rec.begin());
            std::fill(rec.begin() + std::ptrdiff_t(d), rec.end(), 0.0f);
            rec[dn] = Ls[i];
            gP.store(record_at(l0 + i, split), record, rec.data());
          }
        }
        if (sp.count == 1) gL.store(l0, n, Ls.data());  // the block's rows: contiguous in L
      }
      if (slots == 1) continue;
      // ---- the merge block of the same rows (launched when any sequence splits) ----
      gN.load(std::size_t(b), 1, &len);
      if (sp.count == 1) continue;  // its splits' block wrote O and L
      for (std::size_t i = 0; i < n; ++i) {
        float L = -INFINITY;
        std::fill(o.begin(), o.end(), 0.0f);
        for (int split = 0; split < sp.count; ++split) {
          gP.load(record_at(l0 + i, split), record, rec.data());
          const softmax::MergeWeights w = softmax::merge_weights(L, rec[dn]);
          for (std::size_t e = 0; e < dn; ++e) o[e] = w.w1 * o[e] + w.w2 * rec[e];
          L = w.L;
        }
        store_O(s.q_at(b, r_of(i), hq_of(i)), o);
        Ls[i] = L;
      }
      gL.store(l0, n, Ls.data());
    }
  out.io = hbm.count();
  return out;
}

course::IoCount decode_model(const DecodeShape& s, const DecodePlan& plan, int page) {
  s.validate();
  check_plan(plan, page);
  const std::vector<Block> blocks = blocks_of(s, plan);
  const int tiles_a_group = int(blocks.size()) / s.heads_kv;  // each reads its K/V head's cache
  const std::uint64_t row16 = 2 * std::uint64_t(s.d), record = 4 * (std::uint64_t(s.d) + 8);
  const std::size_t stride = std::size_t(max_pages(s, page));
  const int slots = max_splits(s, page, plan.splits);
  course::IoCount io;
  for (int b = 0; b < s.batch(); ++b) {
    const int len = s.lengths[std::size_t(b)], pages = pages_of(len, page);
    const Splits sp = splits_of(len, page, plan.splits);
    const std::uint64_t rows_q = std::uint64_t(s.heads_q) * std::uint64_t(s.rows), splits = std::uint64_t(sp.count);
    io.read_bytes += std::uint64_t(len) * std::uint64_t(s.heads_kv) * 2 * row16 * std::uint64_t(tiles_a_group);  // K, V
    io.read_bytes += splits * rows_q * row16;                                                                  // Q
    io.write_bytes += rows_q * row16;                                                                          // O
    const bool merge = sp.count > 1;
    // The lengths: one sector a block, the merge blocks' included (launched when any sequence splits).
    io.read_bytes += std::uint64_t(blocks.size()) * (splits + (slots > 1 ? 1 : 0)) * course::kSectorBytes;
    for (const Block& blk : blocks) {
      io.write_bytes += sectors(s.l_at(b, 0, 0) + std::size_t(blk.first), std::size_t(blk.rows), 4);  // L
      for (int split = 0; split < sp.count; ++split) {  // the block table
        const int p0 = split * sp.pages_each, p1 = std::min(p0 + sp.pages_each, pages);
        io.read_bytes += sectors(std::size_t(b) * stride + std::size_t(p0), std::size_t(p1 - p0), 4);
      }
    }
    if (merge) {  // the partial records, written by the splits, read by the merge
      io.write_bytes += rows_q * splits * record;
      io.read_bytes += rows_q * splits * record;
    }
  }
  return io;
}

}  // namespace inference
