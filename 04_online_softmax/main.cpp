// 04_online_softmax: the online softmax (2 passes), the on-chip softmax (1 read, 1 write), stage
// 03's safe softmax and a copy for comparison in the same run, and the single-query attention that
// carries the online state into attention. docs/04_online_softmax.md explains.
#include "../03_safe_softmax/kernels.cuh"
#include "algorithm.hpp"
#include "attention_bench.hpp"
#include "check.hpp"
#include "kernels.cuh"
#include "softmax_bench.hpp"

int main(int argc, char** argv) {
  using namespace softmax;
  AttentionOptions attention;
  Program program;
  program.stage = "04_online_softmax";
  program.description =
      "04_online_softmax: the online softmax in 2 passes, on chip in 1, and carried into attention";
  program.variants = {
      copy_variant(),
      {"safe", safe_model_bytes, safe_counted, COURSE_GPU(launch_safe)},
      {"online", online_model_bytes, online_counted, COURSE_GPU(launch_online)},
      {"on_chip", on_chip_model_bytes, on_chip_counted, COURSE_GPU(launch_on_chip), kOnChipMaxCols}};
  program.add_options = [&](CLI::App& app) { add_attention_options(app, attention); };
  program.after = [&](course::Bench& bench, const course::CommonOptions& options) {
    run_attention(bench, options, attention, double(1 << 26));
  };
  program.after_variants = {"attention_row"};
  return run(argc, argv, program);
}
