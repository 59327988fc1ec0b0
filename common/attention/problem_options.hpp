// The problem options every attention program shares (stages 05 onward): --batch, --tokens,
// --heads, --seq, --d, --causal, --dtype, --q-scale and --count-limit, and the sweep of shapes
// they give. Each program says which head dimensions and dtypes it takes.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "attention/shape.hpp"
#include "dtype.hpp"

namespace attention {

struct ProblemOptions {
  Shape base;                            // --batch, --heads, --d, --causal (N from --seq)
  std::vector<int> seq = {256, 1000};    // --seq: the sweep's sequence lengths
  int tokens = 0;                        // --tokens: B = tokens / N for each N (0: --batch)
  std::vector<std::string> dtype_names;  // --dtype
  bool dtype_given = false;              // whether --dtype was on the command line
  float q_scale = 1.0f;                  // --q-scale: Q multiplied by it
  double count_limit = double(1 << 28);  // --count-limit: count IO on the CPU up to this B·H·N²·d

  // The sweep: base with each N of --seq (B = tokens / N with --tokens). UsageError for a token
  // count that N does not divide, or a shape no variant takes (require_supported).
  std::vector<Shape> shapes() const;
  std::vector<course::Dtype> dtypes() const;
  // Whether the CPU count runs for `s` (B·H·N²·d at most --count-limit).
  bool counts(const Shape& s) const { return double(s.heads()) * s.N * double(s.N) * s.d <= count_limit; }
};

// What a program takes: its head dimensions and dtypes (the first dtypes are the default), and
// whether it has --tokens, --q-scale and --count-limit.
struct ProblemChoices {
  std::vector<int> ds = {64, 128};
  std::vector<std::string> dtypes = {"fp16", "bf16"};
  std::vector<std::string> default_dtypes = {};  // empty: all of dtypes
  bool tokens = true, q_scale = true, count_limit = true;
  std::string seq_help = "Sequence lengths N, comma-separated";
  std::string dtype_help = "";  // empty: "Element types to run, comma-separated (...)"
};

// Adds the options to `app`, reading into `o` (its defaults: the values `o` holds).
void add_problem_options(CLI::App& app, ProblemOptions& o, const ProblemChoices& choices = {});

}  // namespace attention
