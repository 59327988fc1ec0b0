// The program shared by the attention stages (05, and 06 after it): for each shape, random Q, K, V,
// and for each variant (and each SRAM budget M, for the tiled ones) the model, the CPU count, a
// checked GPU run, the median time, the hardware counters and the peak device memory, in the
// course's table and CSV. A variant whose memory does not fit the GPU gets a row with no time and
// a note that says how much it needed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithm.hpp"
#include "io_count.hpp"

namespace attention {

struct Variant {
  std::string name;
  bool tiled = false;  // takes block sizes from M: one row per --sram value
  std::function<double(const Shape&, Blocks)> model;
  std::function<course::IoCount(const Shape&, Blocks, const float* Q, const float* K,
                                const float* V, float* O)>
      counted;
  // Device memory beyond Q, K, V and O (floats), and the launch, which gets that much workspace.
  std::function<std::size_t(const Shape&)> workspace_floats;
  std::function<void(const Shape&, Blocks, const float* Q, const float* K, const float* V,
                     float* O, float* workspace)>
      gpu;  // empty in a CPU-only build
};

struct Program {
  std::string stage, description;
  std::vector<Variant> variants;
  // The SRAM budgets M of the tiled variants when --sram is not given, for head dimension d.
  std::function<std::vector<long long>(int d)> default_sram;
  // Throws UsageError for an M the tiled variants cannot run (on_gpu: on the GPU), before any work.
  std::function<void(long long M, int d, bool on_gpu)> check_sram;
};

int run(int argc, char** argv, const Program& program);

}  // namespace attention
