// main() for GPU tests: runs the doctest cases when a CUDA device is usable; otherwise says why
// and exits with 77, which CTest reports as "skipped". Built a second time with
// COURSE_TEST_NEEDS_HOPPER for stages whose kernels exist only for sm_90a (08, 09): those skip on
// any other GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "gpu.hpp"

int main(int argc, char** argv) {
  if (!course::gpu().available) {
    std::printf("SKIP: %s\n", course::gpu().why_not.c_str());
    return 77;
  }
#if COURSE_TEST_NEEDS_HOPPER
  if (course::gpu().cc_major != 9 || course::gpu().cc_minor != 0) {
    std::printf("SKIP: these kernels need a Hopper GPU (sm_90: H100, H200, GH200); this is %s (sm_%d%d)\n",
                course::gpu().name.c_str(), course::gpu().cc_major, course::gpu().cc_minor);
    return 77;
  }
#endif
  std::printf("GPU tests on %s\n", course::gpu().name.c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
