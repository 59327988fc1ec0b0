// 08_flash_v3: FlashAttention-3's forward on Hopper, a ladder of kernels in fp16 and bf16 beside
// stage 06's last rung on the same inputs. For every run: the model of its bytes, the CPU count
// (FA-2's algorithm at the rung's block sizes), a check of O and L against float64, the median
// time, the hardware counters and the peak device memory. docs/08_flash_v3.md explains.
#include <CLI/CLI.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "../06_flash_v2/algorithm.hpp"
#include "../06_flash_v2/variants.hpp"  // stage 06's last rung, run beside
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "attention/problem_options.hpp"
#include "options.hpp"
#include "variants.hpp"
#if COURSE_HAS_CUDA
#include "attention/device_run.hpp"
#endif

using namespace attention;
using course::Dtype;

namespace {

// Stage 06's rung appears in the table and the CSV under this name.
const std::string kStage06Row = std::string("06_") + kStage06Rung;

// Stage 06's rung and the ladder run by default; the ablations only when --variants names them.
std::vector<std::string> variant_names(bool with_ablations) {
  std::vector<std::string> names = {kStage06Row};
  for (const auto& v : v3_registry().rungs()) names.push_back(v.name);
  if (with_ablations)
    for (const auto& v : v3_registry().ablations()) names.push_back(v.name);
  return names;
}

const ForwardVariant& variant(const std::string& name) {
  return name == kStage06Row ? v2_registry().find(kStage06Rung) : v3_registry().find(name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"08_flash_v3: FlashAttention-3 forward on Hopper (fp16, bf16), with stage 06's last rung beside it"};
  course::CommonOptions options;
  ProblemOptions problem;
  problem.base.H = 2;
  course::add_common_options(app, options);
  add_problem_options(app, problem);
  const ForwardVariant& stage06 = v2_registry().find(kStage06Rung);
  const VariantInfo stage06_row{kStage06Row, stage06.dtypes, stage06.ds, "stage 06's last rung (FA-2 with mma.sync), the yardstick"};
  std::vector<const VariantInfo*> rungs, ablations;
  for (const auto& v : v3_registry().rungs()) rungs.push_back(&v);
  for (const auto& v : v3_registry().ablations()) ablations.push_back(&v);
  app.footer(variants_help(rungs, ablations, {&stage06_row}));
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("08_flash_v3", [&]() -> int {
    course::finish_common_options(options, variant_names(true));
    const std::vector<Shape> shapes = problem.shapes();
    const std::vector<Dtype> dtypes = problem.dtypes();
    course::Bench bench("08_flash_v3", options);
    if (bench.use_gpu()) {
      if (const std::string why = course::why_not_hopper(COURSE_HAS_HOPPER, "stage 08's kernels"); !why.empty())
        bench.disable_gpu(why);
    }
    std::vector<std::string> notes;
    const double count_limit = problem.count_limit;

    for (const Shape& s : shapes) {
      const int N = s.N;
      for (Dtype t : dtypes) {
        // --variants runs the named ones in the order given (so that rounds can alternate the
        // order); without it, stage 06's rung and the ladder in the chapter's order.
        const std::vector<std::string> runs = options.variants.empty() ? variant_names(false) : options.variants;
        if (runs.empty()) continue;

        course::require_fits(8.0 * double(s.elements()) * 4.0, 0.0, "the inputs of " + s.text());
        const std::string problem_text = s.text() + " " + course::name(t);
        bench.progress(problem_text, "inputs and the float64 reference");
        const Inputs in = make_inputs(s, t, options.seed, problem.q_scale);
        const Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
        const bool count = problem.counts(s);
        // The rungs that share a tiling make the same requests: one count (and its check) per tiling.
        std::map<std::tuple<int, int, bool>, std::pair<course::IoCount, course::Comparison>> counted;

        for (const std::string& name : runs) {
          const ForwardVariant& v = variant(name);
          const Tiles tiles = v.tiles(s);
          course::Row row = bench.row(name, s.text() + " Br=" + std::to_string(tiles.Br) + " Bc=" + std::to_string(tiles.Bc));
          row.dtype = course::name(t);
          row.size = N;
          row.flops = s.flops();
          row.io_model_bytes = flash_v2_model_bytes(s, t, tiles);
          const auto key = std::make_tuple(tiles.Br, tiles.Bc, tiles.from_end);
          if (count && !counted.count(key)) {
            bench.progress(problem_text, name + ": counting IO on the CPU");
            std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * N, NAN);
            const auto io = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
            counted[key] = {io, with_L(ref.check_O(O.data()), ref.check_L(L.data()))};
          }
          if (count) bench.record_counted(row, counted[key].first, counted[key].second);
#if COURSE_HAS_CUDA
          if (bench.use_gpu()) {
            try {
              course::require_fits(0.0, flash_v2_device_bytes(s, t), name + " " + s.text());
            } catch (const course::ResourceError& e) {
              row.device = course::device_label();
              notes.push_back(name + " " + problem_text + ": not run, out of device memory (" + e.what() + ")");
              bench.add(row);
              continue;
            }
            course::reset_device_peak();
            DeviceRun dev(s, t, in);
            const auto launch = [&] { v.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get()); };
            dev.poison();
            bench.measure_gpu(row, launch, [&] {
              const auto O = dev.O_values(t);
              return with_L(ref.check_O(O.data()), ref.check_L(dev.L.download().data()));
            });
          }
#endif
          bench.add(row);
        }
      }
    }
    notes.insert(notes.begin(),
                 {"model: the chapter's formula for bytes between the SMs and L2; counted: the CPU run "
                  "through the counting view (B*H*N*N*d <= " +
                      std::to_string(static_cast<long long>(count_limit)) + ", else n/a)",
                  kStage06Row + ": stage 06's last rung (FlashAttention-2 with mma.sync), on the same inputs",
                  "max rel err: O against float64 on the rounded inputs (every head if B*H*N <= 16384, else "
                  "three; every row up to N = 2048, else 513); the check fails on O or L; TFLOP/s from "
                  "4*B*H*N^2*d (halved when causal)"});
    char title[256];
    std::snprintf(title, sizeof title,
                  "08_flash_v3 on %s, Q, K, V uniform in [-1, 2) (Q times %g), seed %llu (repeat with --seed %llu)",
                  course::device_label().c_str(), double(problem.q_scale), static_cast<unsigned long long>(options.seed),
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
