#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../10_ring_attention/merge.hpp"
#include "check.hpp"

namespace inference {

namespace {

// The 32-byte sectors of n elements of `bytes` each from element `first` of an array starting on a
// sector (what one request of the counting view costs).
double sectors(std::size_t first, std::size_t n, std::size_t bytes) {
  return double(((first + n) * bytes - 1) / course::kSectorBytes - first * bytes / course::kSectorBytes + 1) *
         double(course::kSectorBytes);
}

// Where each sequence's block table starts in the tables laid end to end.
std::vector<std::size_t> table_offsets(const DecodeShape& s, int page) {
  std::vector<std::size_t> at(static_cast<std::size_t>(s.batch()) + 1, 0);
  for (int b = 0; b < s.batch(); ++b) at[std::size_t(b) + 1] = at[std::size_t(b)] + std::size_t((s.lengths[std::size_t(b)] + page - 1) / page);
  return at;
}

}  // namespace

Splits splits_of(int length, int page, int splits) {
  const int pages = (length + page - 1) / page, wanted = std::max(1, std::min(splits, pages));
  const int each = (pages + wanted - 1) / wanted;
  return {(pages + each - 1) / each, each};
}

DecodeOutput decode_counted(const DecodeShape& s, const DecodePlan& plan, const std::vector<std::uint16_t>& Q_bits,
                            const PagedCache& cache) {
  s.validate();
  course::require(plan.splits >= 1, "decode: at least one split");
  course::require(cache.sequences() == s.batch() && cache.heads_kv() == s.heads_kv && cache.d() == s.d,
                  "decode: the cache does not hold this problem's sequences and heads");
  course::require(Q_bits.size() == s.q_elements(), "decode: Q holds the wrong number of values");
  const course::Dtype t = cache.dtype();
  const int d = s.d, G = s.group(), page = cache.page();
  const std::size_t record = std::size_t(d) + 8;
  DecodeOutput out{std::vector<std::uint16_t>(s.q_elements()), std::vector<float>(s.l_elements()), {}};

  // Global memory: the pools, Q, O, L, the tables end to end, and the partial records.
  std::vector<int> tables;
  for (int b = 0; b < s.batch(); ++b) {
    course::require(cache.length(b) == s.lengths[std::size_t(b)], "decode: a length differs from the cache's");
    tables.insert(tables.end(), cache.table(b).begin(), cache.table(b).end());
  }
  const auto table_at = table_offsets(s, page);
  std::vector<float> partial(s.l_elements() * std::size_t(plan.splits) * record, 0.0f);
  course::Hbm hbm;
  auto gK = hbm.wrap(cache.K_bits().data(), cache.K_bits().size());
  auto gV = hbm.wrap(cache.V_bits().data(), cache.V_bits().size());
  auto gQ = hbm.wrap(Q_bits.data(), Q_bits.size());
  auto gO = hbm.wrap(out.O.data(), out.O.size());
  auto gL = hbm.wrap(out.L.data(), out.L.size());
  auto gT = hbm.wrap(tables.data(), tables.size());
  auto gP = hbm.wrap(partial.data(), partial.size());
  auto record_at = [&](int b, int hq, int r, int split) { return (s.l_at(b, hq, r) * std::size_t(plan.splits) + split) * record; };

  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<std::uint16_t> row(static_cast<std::size_t>(d));
  const std::size_t dn = static_cast<std::size_t>(d);
  std::vector<float> kf(dn), vf(dn), o(dn);
  std::vector<std::vector<float>> q(std::size_t(G * s.rows), std::vector<float>(std::size_t(d)));
  std::vector<std::vector<float>> acc(std::size_t(G * s.rows), std::vector<float>(std::size_t(d)));
  std::vector<float> m(static_cast<std::size_t>(G * s.rows)), l(std::size_t(G * s.rows)), Ls(std::size_t(G * s.rows));
  auto load_row = [&](const course::GlobalArray<const std::uint16_t>& a, std::size_t at, std::vector<float>& to) {
    a.load(at, std::size_t(d), row.data());
    for (int e = 0; e < d; ++e) to[std::size_t(e)] = course::bits_to_float(t, row[std::size_t(e)]);
  };
  auto store_O = [&](std::size_t at, const std::vector<float>& x) {
    for (int e = 0; e < d; ++e) row[std::size_t(e)] = course::float_to_bits(t, x[std::size_t(e)]);
    gO.store(at, std::size_t(d), row.data());
  };

  for (int b = 0; b < s.batch(); ++b) {
    const int len = s.lengths[std::size_t(b)];
    const Splits sp = splits_of(len, page, plan.splits);
    for (int h = 0; h < s.heads_kv; ++h) {
      for (int split = 0; split < sp.count; ++split) {
        // ---- one split of one K/V head: a CTA's work ----
        const int p0 = split * sp.pages_each, p1 = std::min((split + 1) * sp.pages_each, (len + page - 1) / page);
        std::vector<int> entries(static_cast<std::size_t>(p1 - p0));
        gT.load(table_at[std::size_t(b)] + std::size_t(p0), entries.size(), entries.data());
        for (int i = 0; i < G * s.rows; ++i) {
          load_row(gQ, s.q_at(b, i % s.rows, h * G + i / s.rows), q[std::size_t(i)]);
          m[std::size_t(i)] = -INFINITY;
          l[std::size_t(i)] = 0.0f;
          std::fill(acc[std::size_t(i)].begin(), acc[std::size_t(i)].end(), 0.0f);
        }
        const int key0 = p0 * page, key1 = std::min(p1 * page, len);
        for (int pos = key0; pos < key1; ++pos) {
          const std::size_t at = (std::size_t(entries[std::size_t(pos / page - p0)]) * page + pos % page) * s.heads_kv * d +
                                 std::size_t(h) * d;
          for (int loads = 0; loads < (plan.gqa_packed ? 1 : G); ++loads) {  // unpacked: each head's own copy
            load_row(gK, at, kf);
            load_row(gV, at, vf);
          }
          for (int i = 0; i < G * s.rows; ++i) {
            if (pos > s.last_key(b, i % s.rows)) continue;  // the step's later rows
            float dot = 0.0f;
            for (int e = 0; e < d; ++e) dot = std::fmaf(q[std::size_t(i)][std::size_t(e)], kf[std::size_t(e)], dot);
            const float x = dot * scale, m_new = std::max(m[std::size_t(i)], x);
            const float alpha = softmax::rescale(m[std::size_t(i)], m_new), p = std::exp(x - m_new);
            l[std::size_t(i)] = l[std::size_t(i)] * alpha + p;
            for (int e = 0; e < d; ++e)
              acc[std::size_t(i)][std::size_t(e)] = acc[std::size_t(i)][std::size_t(e)] * alpha + p * vf[std::size_t(e)];
            m[std::size_t(i)] = m_new;
          }
        }
        for (int i = 0; i < G * s.rows; ++i) {  // the partials: o normalised, L (−∞ for a row with no keys here)
          const bool none = l[std::size_t(i)] == 0.0f;
          for (int e = 0; e < d; ++e) o[std::size_t(e)] = none ? 0.0f : acc[std::size_t(i)][std::size_t(e)] / l[std::size_t(i)];
          Ls[std::size_t(i)] = none ? -INFINITY : m[std::size_t(i)] + std::log(l[std::size_t(i)]);
          const int r = i % s.rows, hq = h * G + i / s.rows;
          if (sp.count == 1) {
            store_O(s.q_at(b, r, hq), o);
          } else {
            std::vector<float> rec(record, 0.0f);
            std::copy(o.begin(), o.end(), rec.begin());
            rec[std::size_t(d)] = Ls[std::size_t(i)];
            gP.store(record_at(b, hq, r, split), record, rec.data());
          }
        }
        if (sp.count == 1) gL.store(s.l_at(b, h * G, 0), std::size_t(G * s.rows), Ls.data());  // [hq][r]: contiguous
      }
      if (sp.count == 1) continue;
      // ---- the merge of the group's rows: a CTA's work ----
      for (int i = 0; i < G * s.rows; ++i) {
        const int r = i % s.rows, hq = h * G + i / s.rows;
        std::vector<float> rec(record);
        float L = -INFINITY;
        std::fill(o.begin(), o.end(), 0.0f);
        for (int split = 0; split < sp.count; ++split) {
          gP.load(record_at(b, hq, r, split), record, rec.data());
          const ring::MergeWeights w = ring::merge_weights(L, rec[std::size_t(d)]);
          for (int e = 0; e < d; ++e) o[std::size_t(e)] = w.w1 * o[std::size_t(e)] + w.w2 * rec[std::size_t(e)];
          L = w.L;
        }
        store_O(s.q_at(b, r, hq), o);
        Ls[std::size_t(i)] = L;
      }
      gL.store(s.l_at(b, h * G, 0), std::size_t(G * s.rows), Ls.data());
    }
  }
  out.io = hbm.count();
  return out;
}

double decode_model_bytes(const DecodeShape& s, const DecodePlan& plan, int page) {
  s.validate();
  const int G = s.group();
  const double row16 = 2.0 * s.d, record = 4.0 * (s.d + 8);
  const auto table_at = table_offsets(s, page);
  double bytes = 0;
  for (int b = 0; b < s.batch(); ++b) {
    const int len = s.lengths[std::size_t(b)], pages = (len + page - 1) / page;
    const Splits sp = splits_of(len, page, plan.splits);
    bytes += double(len) * s.heads_kv * 2 * row16 * (plan.gqa_packed ? 1 : G);  // K and V
    bytes += double(sp.count) * s.heads_q * s.rows * row16;                       // Q, once a split
    bytes += double(s.heads_q) * s.rows * row16;                                   // O
    for (int h = 0; h < s.heads_kv; ++h) {
      bytes += sectors(s.l_at(b, h * G, 0), std::size_t(G * s.rows), 4);  // L, a group's rows at once
      for (int split = 0; split < sp.count; ++split) {                    // the block table
        const int p0 = split * sp.pages_each, p1 = std::min(p0 + sp.pages_each, pages);
        bytes += sectors(table_at[std::size_t(b)] + std::size_t(p0), std::size_t(p1 - p0), 4);
      }
    }
    if (sp.count > 1) bytes += 2.0 * s.heads_q * s.rows * sp.count * record;  // written, then read back
  }
  return bytes;
}

}  // namespace inference
