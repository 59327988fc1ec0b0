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
#include "../06_flash_v2/problem.hpp"
#include "../06_flash_v2/reference.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "options.hpp"
#include "variants.hpp"
#if COURSE_HAS_CUDA
#include "../06_flash_v2/device_run.hpp"
#endif

using namespace attention;
using course::Dtype;

namespace {

// Stage 06's rung appears in the table and the CSV under this name.
const std::string kStage06Row = std::string("06_") + kStage06Rung;

// Stage 06's rung and the ladder run by default; the ablations only when --variants names them.
std::vector<std::string> variant_names(bool with_ablations) {
  std::vector<std::string> names = {kStage06Row};
  for (const auto& v : v3_variants()) names.push_back(v.name);
  if (with_ablations)
    for (const auto& v : v3_ablations()) names.push_back(v.name);
  return names;
}

const V2Variant& variant(const std::string& name) {
  return name == kStage06Row ? v2_variant(kStage06Rung) : v3_variant(name);
}

// Both checks in one: O's comparison, failing (with L's mismatches added) if L fails.
course::Comparison both(course::Comparison O, const course::Comparison& L) {
  if (!L.ok()) {
    O.bad += L.bad + (L.checked ? 0 : 1);
    O.first_mismatches += "  L: " + L.summary() + "\n" + L.first_mismatches;
  }
  return O;
}

// Why this build or this GPU cannot run stage 08's kernels, or "" when it can.
std::string why_no_hopper() {
  if (!COURSE_HAS_HOPPER) return "this build has no sm_90a kernels (they need nvcc 12 or newer)";
  const auto& g = course::gpu();
  if (g.cc_major != 9 || g.cc_minor != 0)
    return "stage 08's kernels need a Hopper GPU (sm_90: H100, H200, GH200); this is " + g.name + " (sm_" +
           std::to_string(g.cc_major) + std::to_string(g.cc_minor) + ")";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"08_flash_v3: FlashAttention-3 forward on Hopper (fp16, bf16), with stage 06's last rung beside it"};
  course::CommonOptions options;
  Shape base;
  base.H = 2;
  std::vector<int> seq = {256, 1000};
  std::vector<std::string> dtype_names = {"fp16", "bf16"};
  float q_scale = 1.0f;
  double count_limit = double(1 << 28);
  int tokens = 0;
  course::add_common_options(app, options);
  app.add_option("--batch", base.B, "Batch size B")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--tokens", tokens,
                 "Tokens B*N: when given, B = tokens / N for each N (FA-2's benchmarks keep B*N fixed)")
      ->check(course::whole_number(1));
  app.add_option("--heads", base.H, "Heads H")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--seq", seq, "Sequence lengths N, comma-separated")
      ->delimiter(',')
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--d", base.d, "Head dimension d (64 or 128)")->check(CLI::IsMember({64, 128}))->capture_default_str();
  app.add_flag("--causal", base.causal, "Causal mask: query i sees keys j <= i");
  app.add_option("--dtype", dtype_names, "Element types to run, comma-separated (fp16, bf16)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp16", "bf16"}))
      ->capture_default_str();
  app.add_option("--q-scale", q_scale, "Multiply Q by this (10-30 makes logits that overflow a naive exp)")
      ->check(course::number(0.0))
      ->capture_default_str();
  app.add_option("--count-limit", count_limit, "Run the CPU count only when B*H*N*N*d is at most this")
      ->check(course::number(0.0))
      ->capture_default_str();
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("08_flash_v3", [&]() -> int {
    course::finish_common_options(options, variant_names(true));
    require_supported(base);
    std::vector<Dtype> dtypes;
    for (const auto& name : dtype_names) dtypes.push_back(course::parse_dtype(name));
    course::Bench bench("08_flash_v3", options);
    if (bench.use_gpu()) {
      if (const std::string why = why_no_hopper(); !why.empty()) bench.disable_gpu(why);
    }
    std::vector<std::string> notes;

    for (int N : seq) {
      Shape s = base;
      s.N = N;
      if (tokens > 0) {
        course::require(tokens % N == 0,
                        "--tokens " + std::to_string(tokens) + " is not a multiple of N = " + std::to_string(N));
        s.B = tokens / N;
      }
      require_supported(s);
      for (Dtype t : dtypes) {
        // --variants runs the named ones in the order given (so that rounds can alternate the
        // order); without it, stage 06's rung and the ladder in the chapter's order.
        const std::vector<std::string> runs = options.variants.empty() ? variant_names(false) : options.variants;
        if (runs.empty()) continue;

        course::require_fits(8.0 * double(s.elements()) * 4.0, 0.0, "the inputs of " + s.text());
        const std::string problem = s.text() + " " + course::name(t);
        bench.progress(problem, "inputs and the float64 reference");
        const Inputs in = make_inputs(s, t, options.seed, q_scale);
        const Reference ref(s, t, in.Q.data(), in.K.data(), in.V.data());
        const bool count = double(s.heads()) * N * double(N) * s.d <= count_limit;
        // The rungs that share a tiling make the same requests: one count (and its check) per tiling.
        std::map<std::tuple<int, int, bool>, std::pair<course::IoCount, course::Comparison>> counted;

        for (const std::string& name : runs) {
          const V2Variant& v = variant(name);
          const Tiles tiles = v.tiles(s);
          course::Row row = bench.row(name, s.text() + " Br=" + std::to_string(tiles.Br) + " Bc=" + std::to_string(tiles.Bc));
          row.dtype = course::name(t);
          row.size = N;
          row.flops = s.flops();
          row.io_model_bytes = flash_v2_model_bytes(s, t, tiles);
          const auto key = std::make_tuple(tiles.Br, tiles.Bc, tiles.from_end);
          if (count && !counted.count(key)) {
            bench.progress(problem, name + ": counting IO on the CPU");
            std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * N, NAN);
            const auto io = flash_v2_counted(s, t, tiles, in.Q.data(), in.K.data(), in.V.data(), O.data(), L.data());
            counted[key] = {io, both(ref.check_O(O.data()), ref.check_L(L.data()))};
          }
          if (count) bench.record_counted(row, counted[key].first, counted[key].second);
#if COURSE_HAS_CUDA
          if (bench.use_gpu()) {
            try {
              course::require_fits(0.0, flash_v2_device_bytes(s, t), name + " " + s.text());
            } catch (const course::ResourceError& e) {
              row.device = course::device_label();
              notes.push_back(name + " " + problem + ": not run, out of device memory (" + e.what() + ")");
              bench.add(row);
              continue;
            }
            course::reset_device_peak();
            DeviceRun dev(s, t, in);
            const auto launch = [&] { v.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get()); };
            dev.poison();
            bench.measure_gpu(row, launch, [&] {
              const auto O = dev.O_values(t);
              return both(ref.check_O(O.data()), ref.check_L(dev.L.download().data()));
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
                  course::device_label().c_str(), double(q_scale), static_cast<unsigned long long>(options.seed),
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
