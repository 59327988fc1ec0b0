// 06_flash_v2: FlashAttention-2's forward, in fp32 on the CUDA cores and as a ladder of
// tensor-core kernels in fp16 and bf16, beside stage 05's FlashAttention-1 (fp32) on the same
// shapes. For every run: the model of its bytes, the CPU count, a check of O and L against
// float64, the median time, the hardware counters and the peak device memory.
// docs/06_flash_v2.md explains.
#include <CLI/CLI.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "../05_flash_v1/algorithm.hpp"
#include "algorithm.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "attention/problem_options.hpp"
#include "options.hpp"
#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "variants.hpp"
#if COURSE_HAS_CUDA
#include "../05_flash_v1/kernels.cuh"
#include "attention/device_run.hpp"
#endif

using namespace attention;
using course::Dtype;

namespace {

// flash_v1 is stage 05's kernel, run here for comparison at its largest compiled block.
constexpr const char* kFlashV1 = "flash_v1";

std::vector<std::string> variant_names() {
  std::vector<std::string> names = {kFlashV1};
  for (const auto& name : v2_registry().names()) names.push_back(name);
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"06_flash_v2: FlashAttention-2 forward, fp32 and tensor cores (fp16, bf16), "
               "with stage 05's FlashAttention-1 beside it"};
  course::CommonOptions options;
  ProblemOptions problem;
  problem.base.H = 2;
  course::add_common_options(app, options);
  ProblemChoices choices;
  choices.ds = {32, 64, 128};  // 32: fp32 only
  choices.dtypes = {"fp32", "fp16", "bf16"};
  add_problem_options(app, problem, choices);
  const VariantInfo v1_info{kFlashV1, {Dtype::fp32}, {32, 64, 128},
                            "stage 05's FlashAttention-1 (fp32) at its largest compiled block"};
  std::vector<const VariantInfo*> rungs;
  for (const auto& v : v2_registry().rungs()) rungs.push_back(&v);
  app.footer(variants_help(rungs, {}, {&v1_info}));
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("06_flash_v2", [&]() -> int {
    course::finish_common_options(options, variant_names());
    const std::vector<Shape> shapes = problem.shapes();
    std::vector<Takes> takes = {{v1_info.name, v1_info.dtypes, v1_info.ds}};
    for (const Takes& v : takes_of(v2_registry().rungs())) takes.push_back(v);
    const std::vector<Dtype> dtypes =
        dtypes_to_run(takes, options.variants, problem.dtypes(), problem.dtype_given, problem.base.d);
    course::Bench bench("06_flash_v2", options);
    std::vector<std::string> notes;
    const double count_limit = problem.count_limit;

    for (const Shape& s : shapes) {
      const int N = s.N;
      for (Dtype t : dtypes) {
        // The variants that run here: stage 05's flash_v1 (fp32), and stage 06's that take (t, d).
        std::vector<std::string> runs;
        if (t == Dtype::fp32 && course::selected(options, kFlashV1)) runs.push_back(kFlashV1);
        for (const auto& v : v2_registry().rungs())
          if (v.supports(t, s.d) && course::selected(options, v.name)) runs.push_back(v.name);
        if (runs.empty()) continue;

        const double bytes = double(s.elements()) * 4.0;
        course::require_fits(8.0 * bytes, 0.0, "the inputs of " + s.text());
        const std::string problem_text = s.text() + " " + course::name(t);
        const bool count = problem.counts(s);
        const bool checked = count || bench.use_gpu();  // else nothing is compared with the reference
        bench.progress(problem_text, checked ? "inputs and the float64 reference" : "inputs (nothing to check: no reference)");
        const Inputs in = make_inputs(s, t, options.seed, problem.q_scale);
        std::optional<Reference> ref;
        if (checked) ref.emplace(s, t, in.Q.data(), in.K.data(), in.V.data());
        // The rungs that share a tiling make the same requests and the same arithmetic on the CPU:
        // one count (and its check) per (Br, Bc).
        std::map<std::pair<int, int>, std::pair<course::IoCount, course::Comparison>> counted;

        for (const std::string& name : runs) {
          const bool v1 = name == kFlashV1;
          const Blocks b1 = v1 ? flash_v1_blocks(sram_floats(flash_v1_compiled(s.d).back(), s.d), s.d) : Blocks{};
          const Tiles tiles = v1 ? Tiles{b1.Br, b1.Bc} : v2_registry().find(name).tiles(s);
          course::Row row = bench.row(name, s.text() + " Br=" + std::to_string(tiles.Br) +
                                                " Bc=" + std::to_string(tiles.Bc));
          row.dtype = course::name(t);
          row.size = N;
          row.flops = s.flops();
          row.io_model_bytes = v1 ? flash_v1_model_bytes(s, b1) : flash_v2_model_bytes(s, t, tiles);
          const auto key = std::make_pair(v1 ? 0 : tiles.Br, tiles.Bc);
          if (count && !counted.count(key)) {
            bench.progress(problem_text, name + ": counting IO on the CPU");
            std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * N, NAN);
            if (v1) {
              std::vector<float> m(L.size());
              const auto io = flash_v1_counted(s, b1, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data(), m.data());
              counted[key] = {io, ref->check_O(O.data())};  // FA-1's l is not the logsumexp
            } else {
              const auto io = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
              counted[key] = {io, with_L(ref->check_O(O.data()), ref->check_L(L.data()))};
            }
          }
          if (count) bench.record_counted(row, counted[key].first, counted[key].second);
#if COURSE_HAS_CUDA
          if (bench.use_gpu()) {
            const double device = v1 ? flash_v1_device_bytes(s) : flash_v2_device_bytes(s, t);
            try {
              course::require_fits(0.0, device, name + " " + s.text());
            } catch (const course::ResourceError& e) {
              row.device = course::device_label();
              notes.push_back(name + " " + problem_text + ": not run, out of device memory (" + e.what() + ")");
              bench.add(row);
              continue;
            }
            course::reset_device_peak();
            DeviceRun dev(s, t, in, v1);
            std::function<void()> launch;
            if (v1) {
              launch = [&] {
                launch_flash_v1(s, b1, dev.Qf.get(), dev.Kf.get(), dev.Vf.get(), dev.Of.get(), dev.L.get(), dev.m.get());
              };
            } else {
              const ForwardVariant& v = v2_registry().find(name);
              launch = [&] { v.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get()); };
            }
            dev.poison();
            bench.measure_gpu(row, launch, [&] {
              const auto O = dev.O_values(t);
              if (v1) return ref->check_O(O.data());  // flash_v1's l is not L
              return with_L(ref->check_O(O.data()), ref->check_L(dev.L.download().data()));
            });
          }
#endif
          bench.add(row);
        }
      }
    }
    notes.insert(notes.begin(),
                 {"model: the chapter's formula for bytes between the SMs and L2; counted: the CPU "
                  "run through the counting view (B*H*N*N*d <= " +
                      std::to_string(static_cast<long long>(count_limit)) + ", else n/a)",
                  "flash_v1: stage 05's FlashAttention-1 at its largest compiled block (fp32)",
                  "max rel err: O against float64 on the rounded inputs (every head if B*H*N <= "
                  "16384, else three; every row up to N = 2048, else 513); the check fails on O or L; "
                  "TFLOP/s from 4*B*H*N^2*d (halved when causal)"});
    char title[256];
    std::snprintf(title, sizeof title,
                  "06_flash_v2 on %s, Q, K, V uniform in [-1, 2) (Q times %g), seed %llu (repeat with --seed %llu)",
                  course::device_label().c_str(), double(problem.q_scale), static_cast<unsigned long long>(options.seed),
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
