// The program shared by the softmax stages (03 and 04): for each shape R × C, random logits, the
// float64 reference, and for each variant the counted IO, a checked GPU run, the median time and
// the hardware counters, in the course's table and CSV.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench.hpp"
#include "io_count.hpp"
#include "options.hpp"

namespace softmax {

// Y = f(X) for an R × C matrix, with workspace_floats(R, C) floats of device workspace.
using Launcher = std::function<void(const float* X, float* Y, float* workspace, int R, int C)>;
using Counted = std::function<course::IoCount(const float* X, float* Y, int R, int C)>;
using Model = std::function<double(int R, int C)>;

struct Variant {
  std::string name;
  Model model;
  Counted counted;
  Launcher gpu;       // empty in a CPU-only build (COURSE_GPU)
  int max_cols = 0;   // the longest row the variant handles (0: any)
  bool is_copy = false;  // the yardstick: its output is X itself, not the softmax
};

// The device-to-device copy of X into Y (common/copy.cu): 1 read + 1 write, the speed limit of any
// pass-based softmax and the yardstick its GB/s is compared with.
Variant copy_variant();

struct Program {
  std::string stage;
  std::string description;
  std::vector<Variant> variants;
  // Optional: more options, and more rows after the softmax sweep (stage 04's attention), whose
  // variants are named in after_variants.
  std::function<void(CLI::App&)> add_options;
  std::function<void(course::Bench&, const course::CommonOptions&)> after;
  std::vector<std::string> after_variants;
};

int run(int argc, char** argv, const Program& program);

}  // namespace softmax
