// The program shared by the matmul stages (01 and 02): parse the options, make random inputs for
// each shape, and for each variant: count its IO on the CPU, run it on the GPU, check it against
// the float64 reference, time it, read its hardware counters, and report one row.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io_count.hpp"

namespace matmul {

using Launcher = std::function<void(const float* A, const float* B, float* C, int M, int N, int K)>;
using Counted = std::function<course::IoCount(const float* A, const float* B, float* C, int M,
                                              int N, int K)>;
using Model = std::function<double(int M, int N, int K)>;

struct Variant {
  std::string name;
  Model model;      // the chapter's formula for its bytes; empty if there is none (cuBLAS)
  Counted counted;  // the same algorithm on the CPU, through the counting view; may be empty
  Launcher gpu;     // the kernel; empty in a CPU-only build (COURSE_GPU)
};

struct Program {
  std::string stage;        // "01_naive_matmul"
  std::string description;  // for --help
  std::vector<int> default_sizes;
  std::vector<Variant> variants;
};

int run(int argc, char** argv, const Program& program);

}  // namespace matmul
