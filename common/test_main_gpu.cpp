// main() for GPU tests: runs the doctest cases when a CUDA device is usable; otherwise says why
// and exits with 77, which CTest reports as "skipped".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "gpu.hpp"

int main(int argc, char** argv) {
  if (!course::gpu().available) {
    std::printf("SKIP: %s\n", course::gpu().why_not.c_str());
    return 77;
  }
  std::printf("GPU tests on %s\n", course::gpu().name.c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
