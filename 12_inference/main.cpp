// 12_inference: a decode step over a paged KV cache, the ladder of decode kernels beside a copy of
// the same bytes. For every run: the model of its bytes, the CPU count (split-KV decode through the
// counting view, for problems up to --count-limit), a check of O and L against float64, the median
// time and the hardware counters. docs/12_inference.md explains.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "attention/variants.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "options.hpp"
#include "reference.hpp"
#if COURSE_HAS_CUDA
#include <cuda_runtime.h>

#include "device_buffer.hpp"
#include "kernels.cuh"
#endif

using namespace inference;
using course::Dtype;

namespace {

// A rung of the decode ladder: its plan (the model and the CPU count) and its launcher.
struct DecodeVariant : attention::VariantInfo {
  bool packed;  // GQA packing (DecodePlan::gqa_packed, tiles of 16 rows)
  bool splits;  // takes --splits (split-KV); otherwise one split
#if COURSE_HAS_CUDA
  void (*launch)(const DecodeShape&, Dtype, const DecodeArgs&, const SplitArgs&);
  int (*auto_splits)(const DecodeShape&);
#endif
};

#if COURSE_HAS_CUDA
void per_head(const DecodeShape& s, Dtype t, const DecodeArgs& a, const SplitArgs&) { launch_decode_per_head(s, t, a); }
#define COURSE_LAUNCH(f, g) , f, g
#else
#define COURSE_LAUNCH(f, g)
#endif

const attention::Registry<DecodeVariant>& registry() {
  static const std::vector<Dtype> dt = {Dtype::fp16, Dtype::bf16};
  static const attention::Registry<DecodeVariant> r(
      "12_inference",
      {{{"per_head", dt, {64, 128}, "rung 1: a block a (sequence, query head), a loop over its cache"},
        false, false COURSE_LAUNCH(per_head, nullptr)},
       {{"split_kv", dt, {64, 128}, "rung 2: the cache split across blocks (Flash-Decoding), merged by ⊕"},
        false, true COURSE_LAUNCH(launch_decode_split_kv, auto_splits_split_kv)},
       {{"gqa", dt, {64, 128}, "rung 3: a block a split and 16 rows of a group on the tensor cores"},
        true, true COURSE_LAUNCH(launch_decode_gqa, auto_splits_gqa)},
       {{"persistent", dt, {64, 128}, "rung 4: one wave of blocks walks rung 3's items, one cp.async ring across them"},
        true, true COURSE_LAUNCH(launch_decode_persistent, auto_splits_persistent)}});
  return r;
}

const std::string kCopy = "copy";  // the yardstick: a device-to-device copy of the K pool

// Sequence b's length: the longest is `context`, the others shorter by equal steps down to a half
// (all `context` long when `equal`: the dense batch SDPA's peer takes).
std::vector<int> lengths_of(int batch, int context, int rows, bool equal) {
  std::vector<int> out;
  for (int b = 0; b < batch; ++b)
    out.push_back(equal ? context : std::max(rows, context - int((long long)b * context / (2 * batch))));
  return out;
}

// O and L against the reference, over the sequences it computed: O relative to the largest |O|.
course::Comparison check(const DecodeResult& ref, const std::vector<std::uint16_t>& O, const std::vector<float>& L,
                         Dtype t, double tolerance) {
  double scale = 0;
  for (double x : ref.O)
    if (!std::isnan(x)) scale = std::max(scale, std::abs(x));
  course::Comparison c;
  c.tolerance = tolerance;
  auto note = [&](double err, const char* what, std::size_t i) {
    c.max_rel_err = std::max(c.max_rel_err, std::isnan(err) ? INFINITY : err);
    ++c.checked;
    if (!(err <= tolerance)) {
      if (++c.bad <= 3) c.first_mismatches += std::string(c.first_mismatches.empty() ? "" : ", ") + what + "[" + std::to_string(i) + "]";
    }
  };
  for (std::size_t i = 0; i < ref.O.size(); ++i)
    if (!std::isnan(ref.O[i])) note(std::abs(double(course::bits_to_float(t, O[i])) - ref.O[i]) / scale, "O", i);
  for (std::size_t i = 0; i < ref.L.size(); ++i)
    if (!std::isnan(ref.L[i])) note(std::abs(double(L[i]) - ref.L[i]) / (1.0 + std::abs(ref.L[i])) > 1e-5 ? INFINITY : 0.0, "L", i);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"12_inference: decode over a paged KV cache, the ladder beside a copy of the same bytes (fp16, bf16)"};
  course::CommonOptions options;
  std::vector<int> batches = {1}, heads_qs = {32}, contexts = {8192};
  int heads_kv = 8, d = 128, rows = 1, page = 64;
  bool equal = false;
  std::vector<std::string> splits_text = {"auto"}, dtype_text = {"fp16"};
  double count_limit = double(1 << 28);
  course::add_common_options(app, options);
  app.add_option("--batch", batches, "sequences (several, comma-separated: a problem each)")->delimiter(',')->check(course::whole_number(1));
  app.add_option("--heads-q", heads_qs, "query heads H_q (several: a problem each)")->delimiter(',')->check(course::whole_number(1));
  app.add_option("--heads-kv", heads_kv, "K/V heads H_kv (H_q a multiple of it)")->check(course::whole_number(1));
  app.add_option("--d", d, "head dimension (64 or 128 on the GPU)")->check(course::whole_number(16));
  app.add_option("--rows", rows, "query rows a step (1; more for speculative decoding)")->check(course::whole_number(1));
  app.add_option("--page", page, "tokens a page")->check(course::whole_number(1));
  app.add_option("--context", contexts, "the longest sequence's tokens, the others shorter down to a half (several: a problem each)")
      ->delimiter(',')
      ->check(course::whole_number(1));
  app.add_flag("--equal", equal, "every sequence --context tokens long (the peer's dense batch)");
  app.add_option("--splits", splits_text, "split-KV's most parts a sequence for rungs 2-4: a number or auto (from the SM count; GPU only); several, a row each")
      ->delimiter(',');
  app.add_option("--dtype", dtype_text, "the cache's and Q's dtype: fp16, bf16 (several)")->delimiter(',')->check(CLI::IsMember({"fp16", "bf16"}));
  app.add_option("--count-limit", count_limit, "count IO on the CPU up to this Σlen·H_q·rows·d")->check(course::number(0));
  std::vector<const attention::VariantInfo*> rungs;
  for (const auto& v : registry().rungs()) rungs.push_back(&v);
  const attention::VariantInfo copy_row{kCopy, {Dtype::fp16, Dtype::bf16}, {64, 128}, "cudaMemcpyAsync of the K pool: the cache's bytes read and written, the yardstick"};
  app.footer(attention::variants_help(rungs, {}, {&copy_row}));
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("12_inference", [&]() -> int {
    std::vector<std::string> known = registry().names();
    known.push_back(kCopy);
    course::finish_common_options(options, known);
    std::vector<int> splits;  // 0: auto
    for (const std::string& x : splits_text) {
      if (x == "auto") {
        splits.push_back(0);
        continue;
      }
      std::size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(x, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      course::require(used == x.size() && n >= 1, "--splits takes whole numbers >= 1 or auto, not '" + x + "'");
      splits.push_back(n);
    }
    course::Bench bench("12_inference", options);
    std::vector<std::string> notes;
    const std::vector<std::string> runs = options.variants.empty() ? known : options.variants;

    for (int batch : batches)
      for (int context : contexts)
        for (const std::string& dt : dtype_text) {
          const Dtype t = dt == "bf16" ? Dtype::bf16 : Dtype::fp16;
          DecodeShape base;
          base.heads_kv = heads_kv, base.d = d, base.rows = rows, base.lengths = lengths_of(batch, context, rows, equal);
          base.heads_q = heads_kv;
          base.validate();
          // The cache, shared by every H_q: each sequence's tokens appended from a shuffled pool.
          int pages = 0;
          for (int len : base.lengths) pages += (len + page - 1) / page;
          const double pool_bytes = 2.0 * double(pages) * page * heads_kv * d * 2;
          course::require_fits(3.0 * pool_bytes, 0.0, "the cache of " + base.text());
          bench.progress(base.text() + " " + dt, "filling the paged cache");
          PagedCache cache(t, heads_kv, d, page, pages, options.seed);
          for (int b = 0; b < batch; ++b) {
            const int len = base.lengths[std::size_t(b)];
            const auto k = course::random_uniform(std::size_t(len) * heads_kv * d, options.seed + 10 + std::uint64_t(b));
            const auto v = course::random_uniform(std::size_t(len) * heads_kv * d, options.seed + 1000 + std::uint64_t(b));
            cache.append(cache.add_sequence(), k.data(), v.data(), len);
          }
          int stride = 1;
          for (int b = 0; b < batch; ++b) stride = std::max(stride, int(cache.table(b).size()));
          std::vector<int> table(std::size_t(batch) * stride, 0);
          for (int b = 0; b < batch; ++b) std::copy(cache.table(b).begin(), cache.table(b).end(), table.begin() + std::ptrdiff_t(b) * stride);
          check_block_table(table, stride, base.lengths, page, pages);
#if COURSE_HAS_CUDA
          std::optional<course::DeviceBuffer<std::uint16_t>> dK, dV;
          std::optional<course::DeviceBuffer<int>> dT, dN;
          if (bench.use_gpu()) {
            course::require_fits(0.0, 2.0 * pool_bytes, "the cache of " + base.text());
            dK.emplace(cache.K_bits()), dV.emplace(cache.V_bits()), dT.emplace(table), dN.emplace(base.lengths);
          }
#endif
          for (int heads_q : heads_qs) {
            DecodeShape s = base;
            s.heads_q = heads_q;
            s.validate();
            const std::string problem = s.text() + " page=" + std::to_string(page) + " " + dt;
            bench.progress(problem, "Q and the float64 reference");
            auto Q = course::random_uniform(s.q_elements(), options.seed + 1 + std::uint64_t(heads_q));
            const auto Q_bits = course::round_in_place(t, Q);
            const std::vector<int> checked = batch == 1 ? std::vector<int>{0} : std::vector<int>{0, batch - 1};
            const DecodeResult ref = decode_reference(s, Q, cache, &checked);
            const double work = double(s.tokens()) * s.heads_q * s.rows * s.d;
            // P̃ rounded to 16 bits for P̃·V (gqa) moves O by up to about the dtype's rounding.
            const double tolerance = 2 * course::unit_roundoff(t) + 1e-4;
#if COURSE_HAS_CUDA
            std::optional<course::DeviceBuffer<std::uint16_t>> dQ, dO;
            std::optional<course::DeviceBuffer<float>> dL;
            if (bench.use_gpu()) dQ.emplace(Q_bits), dO.emplace(s.q_elements()), dL.emplace(s.l_elements());
#endif
            for (const std::string& name : runs) {
              if (name == kCopy) {
                course::Row row = bench.row(kCopy, s.text() + " page=" + std::to_string(page));
                row.dtype = dt;
                row.size = context;
                row.io_model_bytes = 2.0 * double(cache.K_bits().size()) * 2;  // read and written
#if COURSE_HAS_CUDA
                if (bench.use_gpu()) {
                  course::DeviceBuffer<std::uint16_t> to(cache.K_bits().size());
                  const auto launch = [&] {
                    CUDA_CHECK(cudaMemcpyAsync(to.get(), dK->get(), cache.K_bits().size() * 2, cudaMemcpyDeviceToDevice));
                  };
                  bench.measure_gpu(row, launch, {});
                }
#endif
                bench.add(row);
                continue;
              }
              const DecodeVariant& v = registry().find(name);
              attention::require_supported(v, t, d);
              for (int S_asked : v.splits ? splits : std::vector<int>{1}) {
                int S = S_asked;
#if COURSE_HAS_CUDA
                if (S == 0 && bench.use_gpu()) S = v.auto_splits(s);
#endif
                if (S == 0) {
                  notes.push_back(name + " " + problem + ": splits=auto needs the GPU's SM count; not run");
                  continue;
                }
                const DecodePlan plan{S, v.packed, 16};
                const std::string text = problem.substr(0, problem.size() - dt.size() - 1) + " splits=" +
                                         std::to_string(S) + (S_asked == 0 ? "(auto)" : "");
                course::Row row = bench.row(name, text);
                row.dtype = dt;
                row.size = context;
                row.flops = 4.0 * double(s.heads_q) * s.rows * double(s.tokens()) * d;
                row.io_model_bytes = double(decode_model(s, plan, page).total());
                if (work <= count_limit) {
                  bench.progress(problem, name + ": counting IO on the CPU");
                  const DecodeOutput out = decode_counted(s, plan, Q_bits, cache);
                  bench.record_counted(row, out.io, check(ref, out.O, out.L, t, tolerance));
                }
#if COURSE_HAS_CUDA
                if (bench.use_gpu()) {
                  course::DeviceBuffer<float> partial(std::max<std::size_t>(1, partial_floats(s, page, S)));
                  const DecodeArgs a{dK->get(), dV->get(), dT->get(), stride, dN->get(), page, dQ->get(), dO->get(), dL->get()};
                  const auto launch = [&] { v.launch(s, t, a, {S, partial.get()}); };
                  dO->upload(std::vector<std::uint16_t>(s.q_elements(), 0x7e00));  // NaN: an unwritten O fails
                  dL->upload(std::vector<float>(s.l_elements(), NAN));
                  bench.measure_gpu(row, launch, [&] { return check(ref, dO->download(), dL->download(), t, tolerance); });
                }
#endif
                bench.add(row);
              }
            }
          }
        }
    notes.insert(notes.begin(),
                 {"model: decode_model's bytes (the cache, Q, O, L, the table, the lengths, the partials); counted: "
                  "the CPU run through the counting view (up to Σlen·H_q·rows·d = " +
                      std::to_string(static_cast<long long>(count_limit)) + ")",
                  "GB/s: the model's bytes over the median time; copy: cudaMemcpyAsync of the K pool (its bytes read "
                  "and written, the cache's size), the yardstick of a memory-bound kernel",
                  "max rel err: O against float64 (relative to the largest |O|) on the first and last sequence; the "
                  "check fails on O or L"});
    char title[256];
    std::snprintf(title, sizeof title, "12_inference on %s, K, V, Q uniform in [-1, 2), seed %llu (repeat with --seed %llu)",
                  course::device_label().c_str(), static_cast<unsigned long long>(options.seed),
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
