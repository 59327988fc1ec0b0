#include "attention/problem_options.hpp"

#include "check.hpp"
#include "options.hpp"

namespace attention {

std::vector<Shape> ProblemOptions::shapes() const {
  require_supported(base);
  std::vector<Shape> out;
  for (int N : seq) {
    Shape s = base;
    s.N = N;
    if (tokens > 0) {
      course::require(tokens % N == 0,
                      "--tokens " + std::to_string(tokens) + " is not a multiple of N = " + std::to_string(N));
      s.B = tokens / N;
    }
    require_supported(s);
    out.push_back(s);
  }
  return out;
}

std::vector<course::Dtype> ProblemOptions::dtypes() const {
  std::vector<course::Dtype> out;
  for (const auto& name : dtype_names) out.push_back(course::parse_dtype(name));
  return out;
}

void add_problem_options(CLI::App& app, ProblemOptions& o, const ProblemChoices& c) {
  std::string ds, dtypes;
  for (int d : c.ds) ds += (ds.empty() ? "" : ", ") + std::to_string(d);
  for (const auto& t : c.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + t;
  o.dtype_names = c.default_dtypes.empty() ? c.dtypes : c.default_dtypes;
  app.add_option("--batch", o.base.B, "Batch size B")->check(course::whole_number(1))->capture_default_str();
  if (c.tokens)
    app.add_option("--tokens", o.tokens,
                   "Tokens B*N: when given, B = tokens / N for each N (FA-2's benchmarks keep B*N fixed)")
        ->check(course::whole_number(1));
  app.add_option("--heads", o.base.H, "Heads H")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--seq", o.seq, c.seq_help)->delimiter(',')->check(course::whole_number(1))->capture_default_str();
  app.add_option("--d", o.base.d, "Head dimension d (" + ds + ")")->check(CLI::IsMember(c.ds))->capture_default_str();
  app.add_flag("--causal", o.base.causal, "Causal mask: query i sees keys j <= i");
  app.add_option_function<std::vector<std::string>>(
         "--dtype",
         [&o](const std::vector<std::string>& names) {
           o.dtype_names = names;
           o.dtype_given = true;
         },
         c.dtype_help.empty() ? "Element types to run, comma-separated (" + dtypes + ")" : c.dtype_help)
      ->delimiter(',')
      ->check(CLI::IsMember(c.dtypes))
      ->default_str([&] {
        std::string text;
        for (const auto& t : o.dtype_names) text += (text.empty() ? "" : ",") + t;
        return text;
      }());
  if (c.q_scale)
    app.add_option("--q-scale", o.q_scale, "Multiply Q by this (10-30 makes logits that overflow a naive exp)")
        ->check(course::number(0.0))
        ->capture_default_str();
  if (c.count_limit)
    app.add_option("--count-limit", o.count_limit, "Run the CPU count only when B*H*N*N*d is at most this")
        ->check(course::number(0.0))
        ->capture_default_str();
}

}  // namespace attention
