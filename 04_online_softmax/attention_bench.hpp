// Stage 04's second sweep: the single-query attention of attention_row, against the float64
// reference, with its model, count, time and counters, in the same table and CSV.
#pragma once

#include <CLI/CLI.hpp>

#include <vector>

#include "bench.hpp"
#include "options.hpp"

namespace softmax {

struct AttentionOptions {
  std::vector<int> keys = {1024, 4096};  // N
  int queries = 1024;                    // Nq
  int d = 64;
};

void add_attention_options(CLI::App& app, AttentionOptions& options);
void run_attention(course::Bench& bench, const course::CommonOptions& common,
                   const AttentionOptions& options, double count_limit);

}  // namespace softmax
