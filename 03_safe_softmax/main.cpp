// 03_safe_softmax: the row softmax as passes over memory: naive (2 passes, overflows), safe
// (3 passes), and a device-to-device copy as the yardstick. docs/03_safe_softmax.md explains.
#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "softmax_bench.hpp"

int main(int argc, char** argv) {
  using namespace softmax;
  Program program;
  program.stage = "03_safe_softmax";
  program.description =
      "03_safe_softmax: the row softmax in passes over memory, naive and safe, with their IO";
  program.variants = {copy_variant(),
                      {"naive", naive_model_bytes, naive_counted, COURSE_GPU(launch_naive)},
                      {"safe", safe_model_bytes, safe_counted, COURSE_GPU(launch_safe)}};
  return run(argc, argv, program);
}
