// The options every stage program shares, parsed with CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace course {

struct CommonOptions {
  std::string csv;                    // --csv FILE: append the rows to FILE
  std::vector<std::string> variants;  // --variants a,b: run only these (default: all)
  int reps = 20;                      // --reps: timed runs (the median is reported)
  int warmup = 3;                     // --warmup: untimed runs first
  int rounds = 1;                     // --rounds: time each run this many times, a row each
  std::string between_rounds;         // --between-rounds CMD: run after each round (the peers' turn)
  bool kernel_time = false;           // --kernel-time: also the GPU's own time of a call (CUPTI)
  bool no_counters = false;           // --no-counters: skip the hardware-counter pass
  double sustain = 0.0;               // --sustain S: back-to-back calls for S seconds, with markers
  std::vector<std::string> metrics;   // --metrics a,b: extra counters to read and print
  bool no_gpu = false;                // --no-gpu: CPU parts only, even with a GPU present
  std::uint64_t seed = 0;             // --seed: inputs' seed (default: fresh, printed)
  bool seed_given = false;
};

void add_common_options(CLI::App& app, CommonOptions& options);

// Parses the command line. Returns -1 to go on; otherwise the exit code: 0 after --help, 2 after
// a malformed option (with CLI11's message).
int parse_options(CLI::App& app, int argc, char** argv);

// Validators with messages that say what is expected:
//   whole_number(min): an integer in [min, 2^31 - 1];  number(min): a finite number > min
//   (or >= min when min is 0).
CLI::Validator whole_number(int min);
CLI::Validator number(double min);
// seed_number(): a whole number from 0 to 2^64 - 1 (a seed); "-1" is refused, not wrapped around.
CLI::Validator seed_number();

// After parsing: validates the variant names against `known`, checks that --csv can be written,
// applies --no-counters and --metrics, picks the seed. Throws UsageError for bad values.
void finish_common_options(CommonOptions& options, const std::vector<std::string>& known);

// The .name of each element: a program's variants, as finish_common_options wants them.
template <class Variants>
std::vector<std::string> names_of(const Variants& variants) {
  std::vector<std::string> names;
  for (const auto& v : variants) names.push_back(v.name);
  return names;
}

bool selected(const CommonOptions& options, const std::string& variant);

}  // namespace course
