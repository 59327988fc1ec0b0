// 12_inference: a decode step over a paged KV cache. So far its CPU parts: the float64 reference and
// split-KV decode counted through the view of global memory, against the IO model (the kernels and
// their ladder come next: issue 60).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "check.hpp"
#include "inputs.hpp"
#include "reference.hpp"
#include "report.hpp"

using namespace inference;

int main(int argc, char** argv) {
  CLI::App app{"12_inference: decode over a paged KV cache (CPU: the reference, split-KV counted, the IO model)"};
  int batch = 2, heads_q = 8, heads_kv = 2, d = 128, rows = 1, page = 64, context = 1000;
  std::vector<int> splits = {1, 4};
  std::string dtype = "fp16", csv;
  app.add_option("--batch", batch, "sequences")->check(CLI::PositiveNumber);
  app.add_option("--heads-q", heads_q, "query heads H_q")->check(CLI::PositiveNumber);
  app.add_option("--heads-kv", heads_kv, "K/V heads H_kv (H_q a multiple of it)")->check(CLI::PositiveNumber);
  app.add_option("--d", d, "head dimension (a multiple of 16)")->check(CLI::PositiveNumber);
  app.add_option("--rows", rows, "query rows a step (1; more for speculative decoding)")->check(CLI::PositiveNumber);
  app.add_option("--page", page, "tokens a page")->check(CLI::PositiveNumber);
  app.add_option("--context", context, "the longest sequence's tokens (the others shorter, down to a half)")
      ->check(CLI::PositiveNumber);
  app.add_option("--splits", splits, "split-KV's most parts a sequence (several, comma-separated: a row each)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "the cache's and Q's dtype")->check(CLI::IsMember({"fp16", "bf16"}));
  app.add_option("--csv", csv, "append the rows to this CSV");
  CLI11_PARSE(app, argc, argv);

  return course::run_program("12_inference", [&]() -> int {
    const course::Dtype t = dtype == "bf16" ? course::Dtype::bf16 : course::Dtype::fp16;
    DecodeShape s;
    s.heads_q = heads_q, s.heads_kv = heads_kv, s.d = d, s.rows = rows;
    for (int b = 0; b < batch; ++b) s.lengths.push_back(std::max(rows, context - b * context / (2 * batch)));
    s.validate();
    if (!csv.empty()) course::check_csv_writable(csv);
    // The cache: each sequence's tokens appended page by page from a shuffled pool.
    int pages = 0;
    for (int len : s.lengths) pages += (len + page - 1) / page;
    const std::uint64_t seed = course::fresh_seed();
    PagedCache cache(t, heads_kv, d, page, pages, seed);
    for (int b = 0; b < batch; ++b) {
      const int len = s.lengths[std::size_t(b)];
      const auto k = course::random_uniform(std::size_t(len) * heads_kv * d, seed + 10 + std::uint64_t(b));
      const auto v = course::random_uniform(std::size_t(len) * heads_kv * d, seed + 1000 + std::uint64_t(b));
      cache.append(cache.add_sequence(), k.data(), v.data(), len);
    }
    auto Q = course::random_uniform(s.q_elements(), seed + 1);
    const auto Q_bits = course::round_in_place(t, Q);
    const DecodeResult ref = decode_reference(s, Q, cache);

    std::vector<course::Row> table;
    std::vector<std::string> failures;
    double scale = 0;
    for (double x : ref.O) scale = std::max(scale, std::abs(x));
    for (int S : splits)
      for (bool packed : {false, true}) {
        const DecodePlan plan{S, packed};
        const DecodeOutput out = decode_counted(s, plan, Q_bits, cache);
        const course::IoCount model = decode_model(s, plan, page);
        double err_O = 0, err_L = 0;
        for (std::size_t i = 0; i < ref.O.size(); ++i)
          err_O = std::max(err_O, std::abs(double(course::bits_to_float(t, out.O[i])) - ref.O[i]) / scale);
        for (std::size_t i = 0; i < ref.L.size(); ++i)
          err_L = std::max(err_L, std::abs(double(out.L[i]) - ref.L[i]) / (1.0 + std::abs(ref.L[i])));
        course::Row r;
        r.stage = "12_inference";
        r.variant = std::string("cpu_split_kv_") + (packed ? "gqa" : "per_head");
        r.device = "cpu";
        r.dtype = course::name(t);
        r.shape = s.text() + " page=" + std::to_string(page) + " splits=" + std::to_string(S);
        r.size = double(context);
        r.flops = 4.0 * double(s.heads_q) * s.rows * double(s.tokens()) * d;
        r.io_model_bytes = double(model.total());
        r.io_counted_bytes = double(out.io.total());
        r.max_rel_err = err_O;
        table.push_back(r);
        // O is held to its own rounding (half an ulp of the largest |O|) and float sums, L to float's.
        if (err_O > course::unit_roundoff(t) + 1e-5 || err_L > 1e-5)
          failures.push_back(r.variant + " " + r.shape + ": error O " + std::to_string(err_O) + ", L " + std::to_string(err_L));
        if (out.io.read_bytes != model.read_bytes || out.io.write_bytes != model.write_bytes)
          failures.push_back(r.variant + " " + r.shape + ": counted bytes differ from the model's");
      }
    course::print_table(std::cout, table,
                        {"CPU only so far: the model's bytes against the CPU count of split-KV decode, its error "
                         "against float64 (relative to the largest |O|); per_head: a block a query head, gqa: a "
                         "block a group of query heads, each K/V row loaded once for them"});
    if (!csv.empty()) course::append_csv(csv, table);
    for (const std::string& f : failures) std::cerr << "12_inference: FAILED: " << f << "\n";
    return failures.empty() ? 0 : 1;
  });
}
