// Stage 12 on the CPU: the paged cache's bookkeeping; the float64 reference against attention
// written out plainly over the gathered cache; split-KV decode (float, through the counting view)
// against the reference for page sizes, GQA ratios, speculative rows, ragged lengths and splits;
// its counted bytes against the model; bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "check.hpp"
#include "inputs.hpp"
#include "reference.hpp"

using namespace inference;
using course::Dtype;

namespace {

struct Problem {
  DecodeShape s;
  PagedCache cache;
  std::vector<float> Q;
  std::vector<std::uint16_t> Q_bits;
};

// A cache filled sequence by sequence in appends of ragged sizes (so that pages fill across
// appends), K and V uniform in [-1, 2), Q the same times q_scale.
Problem make_problem(const DecodeShape& s, Dtype t, int page, std::uint64_t seed, float q_scale = 1.0f) {
  int pages = 0;
  for (int len : s.lengths) pages += (len + page - 1) / page;
  Problem p{s, PagedCache(t, s.heads_kv, s.d, page, pages + 3, seed), {}, {}};
  for (int b = 0; b < s.batch(); ++b) {
    const int seq = p.cache.add_sequence(), len = s.lengths[std::size_t(b)];
    for (int done = 0, step = 1; done < len; step = step * 3 + 1) {
      const int n = std::min(step, len - done);
      const auto k = course::random_uniform(std::size_t(n) * s.heads_kv * s.d, seed + 17 * std::uint64_t(b) + std::uint64_t(done));
      const auto v = course::random_uniform(std::size_t(n) * s.heads_kv * s.d, seed + 991 + 17 * std::uint64_t(b) + std::uint64_t(done));
      p.cache.append(seq, k.data(), v.data(), n);
      done += n;
    }
  }
  p.Q = course::random_uniform(s.q_elements(), seed + 5);
  for (float& x : p.Q) x *= q_scale;
  p.Q_bits = course::round_in_place(t, p.Q);
  return p;
}

DecodeShape shape(int hq, int hkv, int d, int rows, std::vector<int> lengths) {
  DecodeShape s;
  s.heads_q = hq, s.heads_kv = hkv, s.d = d, s.rows = rows, s.lengths = std::move(lengths);
  return s;
}

}  // namespace

TEST_CASE("the paged cache: pages from a shuffled pool, tokens where the block table says, a full pool refused") {
  PagedCache c(Dtype::fp16, 2, 16, 4, 8, 7);
  const int a = c.add_sequence(), b = c.add_sequence();
  std::vector<float> k(10 * 2 * 16), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = float(i % 97) * 0.25f, v[i] = -float(i % 89) * 0.5f;
  c.append(a, k.data(), v.data(), 3);
  c.append(b, k.data(), v.data(), 5);
  c.append(a, k.data() + 3 * 32, v.data() + 3 * 32, 7);  // a: 10 tokens, 3 pages
  CHECK(c.length(a) == 10);
  CHECK(c.length(b) == 5);
  CHECK(c.table(a).size() == 3);
  CHECK(c.table(b).size() == 2);
  CHECK(c.pages_free() == 3);
  bool identity = true;
  for (std::size_t i = 0; i < c.table(a).size(); ++i) identity = identity && c.table(a)[i] == int(i);
  CHECK_FALSE(identity);
  for (int pos = 0; pos < 10; ++pos)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 16; ++e) {
        const std::size_t src = (std::size_t(pos) * 2 + h) * 16 + e;  // a's tokens are k's first 10
        CHECK(c.K()[c.at(a, pos, h) + std::size_t(e)] == course::round_to(Dtype::fp16, k[src]));
        CHECK(c.V()[c.at(a, pos, h) + std::size_t(e)] == course::round_to(Dtype::fp16, v[src]));
      }
  CHECK_THROWS_AS(c.at(a, 10, 0), course::UsageError);
  CHECK_THROWS_AS(c.append(b, k.data(), v.data(), 4 * 4), course::UsageError);  // 4 more pages, 3 free
  CHECK_THROWS_AS(PagedCache(Dtype::fp32, 2, 16, 4, 8, 1), course::UsageError);
}

TEST_CASE("the reference equals attention written out plainly over the gathered cache") {
  const DecodeShape s = shape(6, 2, 32, 3, {5, 40, 17});
  const Problem p = make_problem(s, Dtype::bf16, 8, course::fresh_seed(), 4.0f);
  const DecodeResult ref = decode_reference(s, p.Q, p.cache);
  for (int b = 0; b < s.batch(); ++b)
    for (int hq = 0; hq < s.heads_q; ++hq)
      for (int r = 0; r < s.rows; ++r) {
        const int h = hq / s.group(), keys = s.last_key(b, r) + 1;
        std::vector<double> sc(static_cast<std::size_t>(keys));
        double m = -INFINITY;
        for (int j = 0; j < keys; ++j) {
          double dot = 0;
          for (int e = 0; e < s.d; ++e) dot += double(p.Q[s.q_at(b, r, hq) + std::size_t(e)]) * p.cache.K()[p.cache.at(b, j, h) + std::size_t(e)];
          sc[std::size_t(j)] = dot / std::sqrt(double(s.d));
          m = std::max(m, sc[std::size_t(j)]);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        CHECK(ref.L[s.l_at(b, hq, r)] == doctest::Approx(m + std::log(l)).epsilon(1e-12));
        for (int e = 0; e < s.d; e += 7) {
          double o = 0;
          for (int j = 0; j < keys; ++j) o += sc[std::size_t(j)] * p.cache.V()[p.cache.at(b, j, h) + std::size_t(e)];
          CHECK(ref.O[s.q_at(b, r, hq) + std::size_t(e)] == doctest::Approx(o / l).epsilon(1e-12));
        }
      }
}

TEST_CASE("split-KV decode matches float64, and its counted bytes equal the model") {
  struct Case {
    int hq, hkv, d, rows, page;
    std::vector<int> lengths;
  };
  const std::vector<Case> cases = {
      {4, 4, 64, 1, 16, {1, 16, 17, 300}},        // MHA; a one-token cache; a page's edge
      {8, 1, 128, 1, 64, {1000}},                  // GQA-8 (MQA), one sequence
      {8, 2, 128, 4, 16, {4, 5, 129, 700}},        // GQA-4, speculative rows; a cache of just the rows
      {12, 3, 64, 8, 256, {8, 255, 256, 257, 900}},  // rows over a page boundary; long pages
      {6, 2, 32, 5, 2, {5, 6, 33}},                // pages smaller than the step's rows
  };
  for (const Case& c : cases)
    for (Dtype t : {Dtype::fp16, Dtype::bf16})
      for (int splits : {1, 2, 3, 8, 1000}) {
        const DecodeShape s = shape(c.hq, c.hkv, c.d, c.rows, c.lengths);
        const std::uint64_t seed = course::fresh_seed();
        const Problem p = make_problem(s, t, c.page, seed, splits == 3 ? 30.0f : 1.0f);  // large logits too
        CAPTURE(s.text());
        CAPTURE(c.page);
        CAPTURE(splits);
        CAPTURE(std::string(course::name(t)));
        CAPTURE(seed);
        const DecodeResult ref = decode_reference(s, p.Q, p.cache);
        double scale = 0;
        for (double x : ref.O) scale = std::max(scale, std::abs(x));
        // Packed in tiles of 16 rows (rung 3's), of 3 (tiles across heads), and a block a head.
        for (const DecodePlan plan : {DecodePlan{splits, true, 16}, DecodePlan{splits, true, 3}, DecodePlan{splits, false}}) {
          CAPTURE(plan.gqa_packed);
          CAPTURE(plan.tile_rows);
          const DecodeOutput out = decode_counted(s, plan, p.Q_bits, p.cache);
          double err_O = 0, err_L = 0;
          for (std::size_t i = 0; i < ref.O.size(); ++i)
            err_O = std::max(err_O, std::abs(double(course::bits_to_float(t, out.O[i])) - ref.O[i]) / scale);
          for (std::size_t i = 0; i < ref.L.size(); ++i)
            err_L = std::max(err_L, std::abs(double(out.L[i]) - ref.L[i]) / (1.0 + std::abs(ref.L[i])));
          // O: its own rounding to the dtype (half an ulp of the largest |O|) and float sums; L in float.
          CHECK(err_O <= course::unit_roundoff(t) + 1e-5);
          CHECK(err_L <= 1e-5);
          const course::IoCount model = decode_model(s, plan, c.page);
          CHECK(out.io.read_bytes == model.read_bytes);
          CHECK(out.io.write_bytes == model.write_bytes);
        }
      }
}

TEST_CASE("the model, worked out by hand: GQA packing, splits, the table and the lengths") {
  // H_q = 32, H_kv = 8 (G = 4), d = 128, one row, sequences of 4096 and 8192 tokens, pages of 64:
  // the block table is [2][128] ints; a block of 4 heads writes its 4 L's (16 bytes) in one sector.
  const DecodeShape s = shape(32, 8, 128, 1, {4096, 8192});
  const std::uint64_t cache = (4096 + 8192) * 8ull * 2 * 256;  // K and V rows of 256 bytes
  // Packed, no split: 8 blocks a sequence, each reading the length (a sector) and its sequence's whole
  // table (8 sectors, then 16), Q's 4 rows; O's rows and 8 sectors of L written.
  course::IoCount io = decode_model(s, {1, true}, 64);
  CHECK(io.read_bytes == cache + 2 * 32 * 256 + 2 * 8 * 32 + 8 * (8 + 16) * 32);
  CHECK(io.write_bytes == 2 * 32 * 256 + 2 * 8 * 32);
  // Unpacked: 32 blocks a sequence, one query head each: the cache 4 times, the table and the
  // length 32 times, L one sector a head.
  io = decode_model(s, {1, false}, 64);
  CHECK(io.read_bytes == 4 * cache + 2 * 32 * 256 + 2 * 32 * 32 + 32 * (8 + 16) * 32);
  CHECK(io.write_bytes == 2 * 32 * 256 + 2 * 32 * 32);
  // 16 splits: Q's rows 16 times, a length for each block and merge block, 16 table slices of one
  // sector each (4 entries, then 8), and the partial records (32 rows × 16 × 544 bytes a sequence)
  // written and read back.
  io = decode_model(s, {16, true}, 64);
  const std::uint64_t partials = 2 * 32 * 16 * 544ull;
  CHECK(io.read_bytes == cache + 16 * 2 * 32 * 256 + 2 * 8 * 17 * 32 + 2 * 8 * 16 * 32 + partials);
  CHECK(io.write_bytes == 2 * 32 * 256 + 2 * 8 * 32 + partials);
  CHECK(double(cache) > 0.97 * decode_model_bytes(s, {16, true}, 64));  // the cache is nearly all, split or not
  // GQA-8 with 4 speculative rows (32 rows a group) in tiles of 16: each K/V head's cache twice.
  const DecodeShape spec = shape(64, 8, 128, 4, {4096});
  io = decode_model(spec, {1, true, 16}, 64);
  CHECK(io.read_bytes == 2 * 4096 * 8ull * 2 * 256 + 64 * 4 * 256 + 16 * 32 + 16 * 8 * 32);
  CHECK(io.write_bytes == 64 * 4 * 256 + 16 * 2 * 32);  // 16 blocks' L: 16 floats, two sectors each
  CHECK(splits_of(4096, 64, 16).count == 16);
  CHECK(splits_of(4096, 64, 1000).count == 64);  // a split at least a page
  CHECK(splits_of(5 * 64, 64, 4).count == 3);    // pages of 2, 2, 1: none empty
}

TEST_CASE("bad input: clear errors") {
  DecodeShape s = shape(6, 4, 64, 1, {10});
  CHECK_THROWS_AS(s.validate(), course::UsageError);  // H_q not a multiple of H_kv
  s = shape(8, 4, 40, 1, {10});
  CHECK_THROWS_AS(s.validate(), course::UsageError);  // d not a multiple of 16
  s = shape(8, 4, 64, 4, {10, 3});
  CHECK_THROWS_AS(s.validate(), course::UsageError);  // a cache shorter than the step's rows
  s = shape(8, 4, 64, 1, {});
  CHECK_THROWS_AS(s.validate(), course::UsageError);  // no sequences
  const DecodeShape ok = shape(8, 4, 64, 1, {10});
  const Problem p = make_problem(ok, Dtype::fp16, 4, 3);
  CHECK_THROWS_AS(decode_counted(ok, {0, true}, p.Q_bits, p.cache), course::UsageError);
  CHECK_THROWS_AS(decode_model(ok, {0, true}, 4), course::UsageError);
  CHECK_THROWS_AS(decode_model(ok, {1, true}, 0), course::UsageError);  // pages of no tokens
  const DecodeShape other = shape(8, 4, 64, 1, {11});
  CHECK_THROWS_AS(decode_counted(other, {1, true}, p.Q_bits, p.cache), course::UsageError);  // lengths differ
}

TEST_CASE("bad input: a block table checked before a kernel trusts it") {
  // Two sequences of 10 and 3 tokens in pages of 4: 3 and 1 pages, rows of 3, a pool of 5 pages.
  const std::vector<int> lengths = {10, 3};
  std::vector<int> table = {4, 0, 2, 1, -7, -7};  // row 1 padded past its one page: never read
  CHECK_NOTHROW(check_block_table(table, 3, lengths, 4, 5));
  table[2] = 5;  // one past the pool
  CHECK_THROWS_WITH_AS(check_block_table(table, 3, lengths, 4, 5),
                       doctest::Contains("sequence 0, entry 2 names page 5"), course::UsageError);
  table[2] = 2, table[3] = -1;  // a negative page where sequence 1's one page should be
  CHECK_THROWS_WITH_AS(check_block_table(table, 3, lengths, 4, 5),
                       doctest::Contains("sequence 1, entry 0 names page -1"), course::UsageError);
  table[3] = 1;
  CHECK_THROWS_WITH_AS(check_block_table(table, 3, {13, 3}, 4, 5),  // 13 tokens need 4 pages, the row has 3
                       doctest::Contains("sequence 0 holds 13 tokens"), course::UsageError);
  CHECK_THROWS_AS(check_block_table(table, 2, lengths, 4, 5), course::UsageError);  // 6 entries, rows of 2
  CHECK_THROWS_AS(check_block_table(table, 3, lengths, 0, 5), course::UsageError);  // pages of no tokens
}
