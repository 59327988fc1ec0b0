// Stage 12 on the GPU: each rung's decode against the float64 reference (fp16 and bf16, d = 64 and
// 128, GQA ratios 1-8, speculative rows, ragged lengths, pages smaller than a step and larger than a
// sequence, large logits; split-KV from one split to one a page, and the automatic count; GQA
// packing with a group's rows over one tile and across two), and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "check.hpp"
#include "device_buffer.hpp"
#include "algorithm.hpp"
#include "inputs.hpp"
#include "kernels.cuh"
#include "paged_cache.hpp"
#include "testing/sanitizer.hpp"
#include "reference.hpp"

using namespace inference;
using course::Dtype;

namespace {

struct Case {
  int hq, hkv, d, rows, page;
  std::vector<int> lengths;
};

enum class Rung { per_head, split_kv, gqa, persistent };
const char* name(Rung r) {
  return r == Rung::per_head ? "per_head" : r == Rung::split_kv ? "split_kv" : r == Rung::gqa ? "gqa" : "persistent";
}

// The error (relative to the largest |O|) of the same attention with P̃ = e^(s − m) rounded to the
// dtype before P̃·V, as the tensor-core rung does, the row sum l from the unrounded P̃: how far
// that rounding alone moves O from the reference. In float64, over the gathered cache.
double rounded_p_error(const DecodeShape& s, const std::vector<float>& Q, const PagedCache& cache, Dtype t,
                       const DecodeResult& ref, double scale_O) {
  double worst = 0;
  std::vector<double> sc, o(std::size_t(s.d));
  for (int b = 0; b < s.batch(); ++b)
    for (int hq = 0; hq < s.heads_q; ++hq)
      for (int r = 0; r < s.rows; ++r) {
        const int h = hq / s.group(), keys = s.last_key(b, r) + 1;
        sc.assign(std::size_t(keys), 0.0);
        double m = -INFINITY;
        for (int j = 0; j < keys; ++j) {
          double dot = 0;
          for (int e = 0; e < s.d; ++e) dot += double(Q[s.q_at(b, r, hq) + std::size_t(e)]) * cache.K()[cache.at(b, j, h) + std::size_t(e)];
          sc[std::size_t(j)] = dot / std::sqrt(double(s.d));
          m = std::max(m, sc[std::size_t(j)]);
        }
        double l = 0;
        std::fill(o.begin(), o.end(), 0.0);
        for (int j = 0; j < keys; ++j) {
          const double p = std::exp(sc[std::size_t(j)] - m), pr = course::round_to(t, float(p));
          l += p;
          for (int e = 0; e < s.d; ++e) o[std::size_t(e)] += pr * cache.V()[cache.at(b, j, h) + std::size_t(e)];
        }
        for (int e = 0; e < s.d; ++e)
          worst = std::max(worst, std::abs(o[std::size_t(e)] / l - ref.O[s.q_at(b, r, hq) + std::size_t(e)]) / scale_O);
      }
  return worst;
}

// The problem on the CPU (cache filled in ragged appends), its reference, the run on the GPU, and
// the errors of O (relative to the largest |O|) and of L. splits: split-KV's most parts (0: auto).
void check_case(const Case& c, Dtype t, float q_scale, Rung rung = Rung::per_head, int splits = 1) {
  DecodeShape s;
  s.heads_q = c.hq, s.heads_kv = c.hkv, s.d = c.d, s.rows = c.rows, s.lengths = c.lengths;
  if (course::testing::under_sanitizer())  // shorter caches (still across pages and splits) under the sanitizers
    for (int& len : s.lengths) len = std::min(len, std::max(c.rows, 300));
  int pages = 0, stride = 1;
  for (int len : s.lengths) pages += (len + c.page - 1) / c.page, stride = std::max(stride, (len + c.page - 1) / c.page);
  const std::uint64_t seed = course::fresh_seed();
  PagedCache cache(t, s.heads_kv, s.d, c.page, pages + 2, seed);
  for (int b = 0; b < s.batch(); ++b) {
    const int seq = cache.add_sequence(), len = s.lengths[std::size_t(b)];
    for (int done = 0, step = 2; done < len; step = step * 2 + 1) {
      const int n = std::min(step, len - done);
      const auto k = course::random_uniform(std::size_t(n) * s.heads_kv * s.d, seed + 31 * std::uint64_t(b) + std::uint64_t(done));
      const auto v = course::random_uniform(std::size_t(n) * s.heads_kv * s.d, seed + 7777 + 31 * std::uint64_t(b) + std::uint64_t(done));
      cache.append(seq, k.data(), v.data(), n);
      done += n;
    }
  }
  auto Q = course::random_uniform(s.q_elements(), seed + 3);
  for (float& x : Q) x *= q_scale;
  const auto Q_bits = course::round_in_place(t, Q);
  std::vector<int> table(std::size_t(s.batch()) * std::size_t(stride), -1);  // unused entries: never read
  for (int b = 0; b < s.batch(); ++b)
    std::copy(cache.table(b).begin(), cache.table(b).end(), table.begin() + std::ptrdiff_t(b) * stride);

  course::DeviceBuffer<std::uint16_t> K(cache.K_bits()), V(cache.V_bits()), dQ(Q_bits), O(s.q_elements());
  course::DeviceBuffer<int> T(table), N(s.lengths);
  course::DeviceBuffer<float> L(s.l_elements());
  O.upload(std::vector<std::uint16_t>(s.q_elements(), 0x7e00));  // NaN in fp16 (and a large bf16): unwritten fails
  L.upload(std::vector<float>(s.l_elements(), NAN));
  const DecodeArgs a{K.get(), V.get(), T.get(), stride, N.get(), c.page, dQ.get(), O.get(), L.get()};
  if (splits == 0)
    splits = rung == Rung::gqa          ? auto_splits_gqa(s)
             : rung == Rung::persistent ? auto_splits_persistent(s)
                                        : auto_splits_split_kv(s);
  course::DeviceBuffer<float> partial(std::max<std::size_t>(1, partial_floats(s, c.page, splits)));
  partial.upload(std::vector<float>(partial.size(), NAN));  // a record read before it is written fails
  if (rung == Rung::per_head) launch_decode_per_head(s, t, a);
  if (rung == Rung::split_kv) launch_decode_split_kv(s, t, a, {splits, partial.get()});
  if (rung == Rung::gqa) launch_decode_gqa(s, t, a, {splits, partial.get()});
  if (rung == Rung::persistent) launch_decode_persistent(s, t, a, {splits, partial.get()});
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto O_h = O.download();
  const auto L_h = L.download();
  const DecodeResult ref = decode_reference(s, Q, cache);
  double scale = 0, err_O = 0, err_L = 0;
  for (double x : ref.O) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < ref.O.size(); ++i) {
    const double e = std::abs(double(course::bits_to_float(t, O_h[i])) - ref.O[i]) / scale;
    err_O = std::isnan(e) ? INFINITY : std::max(err_O, e);
  }
  for (std::size_t i = 0; i < ref.L.size(); ++i) {
    const double e = std::abs(double(L_h[i]) - ref.L[i]) / (1.0 + std::abs(ref.L[i]));
    err_L = std::isnan(e) ? INFINITY : std::max(err_L, e);
  }
  CAPTURE(s.text());
  CAPTURE(c.page);
  CAPTURE(std::string(course::name(t)));
  CAPTURE(q_scale);
  CAPTURE(seed);
  CAPTURE(name(rung));
  CAPTURE(splits);
  // O: its own rounding to the dtype and float sums, and for the tensor-core rungs twice the error
  // that rounding P̃ to the dtype alone makes; L in float (exp2 and log in the kernel).
  const bool tensor_cores = rung == Rung::gqa || rung == Rung::persistent;
  const double p_rounding = tensor_cores ? rounded_p_error(s, Q, cache, t, ref, scale) : 0.0;
  CAPTURE(p_rounding);
  CHECK(err_O <= course::unit_roundoff(t) + 2 * p_rounding + 1e-4);
  CHECK(err_L <= 1e-5);
}

}  // namespace

TEST_CASE("per_head matches float64: fp16 and bf16, d = 64 and 128, GQA, speculative rows, ragged lengths") {
  const std::vector<Case> cases = {
      {4, 4, 64, 1, 16, {1, 16, 17, 300}},            // MHA; a one-token cache; a page's edge
      {8, 1, 128, 1, 64, {1000}},                      // GQA-8 (MQA), one sequence
      {8, 2, 128, 4, 16, {4, 5, 129, 700}},            // speculative rows; a cache of just the rows
      {32, 8, 128, 8, 256, {8, 255, 256, 257, 3000}},  // eight rows across a page's edge; long pages
      {6, 2, 64, 5, 2, {5, 6, 33}},                    // pages smaller than the step
  };
  for (const Case& c : cases)
    for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
      check_case(c, t, 1.0f);
      check_case(c, t, 30.0f);  // logits whose exp overflows a float
    }
}

TEST_CASE("split_kv, gqa and persistent match float64: one split to one a page, automatic, GQA over one tile and two") {
  const std::vector<Case> cases = {
      {4, 4, 64, 1, 16, {1, 16, 17, 300}},         // MHA; a one-token cache; a page's edge
      {8, 1, 128, 1, 64, {1000}},                   // GQA-8 (MQA), one sequence
      {32, 8, 128, 4, 16, {4, 5, 129, 2000}},       // 16 rows a group: one tile; speculative rows
      {64, 8, 128, 4, 32, {700, 33, 4}},            // 32 rows a group: two tiles; a cache of just the rows
      {20, 4, 64, 4, 8, {250, 77}},                 // 20 rows a group: a tile of 16 and one of 4, across heads
      {6, 2, 64, 5, 2, {5, 6, 33}},                 // pages smaller than the step; last splits of one token
  };
  for (const Case& c : cases)
    for (Dtype t : {Dtype::fp16, Dtype::bf16})
      for (Rung rung : {Rung::split_kv, Rung::gqa, Rung::persistent}) {  // persistent: up to 4,000 items
        if (rung == Rung::split_kv && c.rows > 8) continue;
        for (int splits : {1, 3, 1000, 0}) check_case(c, t, splits == 3 ? 30.0f : 1.0f, rung, splits);
      }
}

TEST_CASE("split_kv, gqa and persistent: bad input gets a clear error before any launch") {
  DecodeShape s;
  s.heads_q = 8, s.heads_kv = 2, s.d = 128, s.rows = 1, s.lengths = {100};
  const DecodeArgs a{nullptr, nullptr, nullptr, 7, nullptr, 16, nullptr, nullptr, nullptr};
  for (auto launch : {launch_decode_split_kv, launch_decode_gqa, launch_decode_persistent}) {
    CHECK_THROWS_AS(launch(s, Dtype::fp32, a, {1, nullptr}), course::UsageError);
    CHECK_THROWS_AS(launch(s, Dtype::fp16, a, {-1, nullptr}), course::UsageError);
    CHECK_THROWS_AS(launch(s, Dtype::fp16, a, {4, nullptr}), course::UsageError);  // 4 splits, no records' buffer
    DecodeShape wide = s;
    wide.d = 96;
    CHECK_THROWS_AS(launch(wide, Dtype::bf16, a, {1, nullptr}), course::UsageError);
  }
  DecodeShape many = s;
  many.rows = 9;
  CHECK_THROWS_AS(launch_decode_split_kv(many, Dtype::fp16, a, {1, nullptr}), course::UsageError);
}

TEST_CASE("per_head: bad input gets a clear error before any launch") {
  DecodeShape s;
  s.heads_q = 8, s.heads_kv = 2, s.d = 128, s.rows = 1, s.lengths = {10};
  const DecodeArgs a{nullptr, nullptr, nullptr, 1, nullptr, 16, nullptr, nullptr, nullptr};
  CHECK_THROWS_AS(launch_decode_per_head(s, Dtype::fp32, a), course::UsageError);
  DecodeShape wide = s;
  wide.d = 96;
  CHECK_THROWS_AS(launch_decode_per_head(wide, Dtype::fp16, a), course::UsageError);
  DecodeShape many = s;
  many.rows = 9;
  CHECK_THROWS_AS(launch_decode_per_head(many, Dtype::bf16, a), course::UsageError);
  DecodeShape odd = s;
  odd.heads_kv = 3;
  CHECK_THROWS_AS(launch_decode_per_head(odd, Dtype::fp16, a), course::UsageError);
}
