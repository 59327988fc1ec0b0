// 03_safe_softmax: the row softmax as passes over memory: naive (2 passes, overflows), safe
// (3 passes), and a device-to-device copy as the yardstick. docs/03_safe_softmax.md explains.
#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "softmax_bench.hpp"

int main(int argc, char** argv) {
  softmax::Program program{
      "03_safe_softmax",
      "03_safe_softmax: the row softmax in passes over memory, naive and safe, with their IO",
      {softmax::copy_variant(),
       {"naive", softmax::naive_model_bytes, softmax::naive_counted, COURSE_GPU(softmax::launch_naive)},
       {"safe", softmax::safe_model_bytes, softmax::safe_counted, COURSE_GPU(softmax::launch_safe)}}};
  return softmax::run(argc, argv, program);
}
