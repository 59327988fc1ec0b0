// 09_flash_v3_fp8: FP8 attention on Hopper, a ladder of kernels (variants.cpp) beside stage 08's last
// rung on the same inputs. For each problem, rung and quantisation scheme (per tensor, per block, each
// with or without incoherent processing): the quantisation's time and bytes, and the FP8 attention's
// time, bytes (the model, the CPU count, the counters) and error (O and L against float64, within
// twice plain FP8's error). --accuracy prints the FA-3 paper's table instead: RMSE and largest error
// of O on N(0, 1) inputs and on its outlier inputs. docs/09_flash_v3_fp8.md explains.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "../06_flash_v2/algorithm.hpp"  // stage 08's rows: FA-2's model
#include "../08_flash_v3/variants.hpp"
#include "accuracy.hpp"
#include "algorithm.hpp"
#include "attention/problem.hpp"
#include "attention/problem_options.hpp"
#include "attention/reference.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "fp8.hpp"
#include "gpu.hpp"
#include "options.hpp"
#include "variants.hpp"
#if COURSE_HAS_CUDA
#include "attention/device_run.hpp"
#include "device_buffer.hpp"
#if COURSE_HAS_HOPPER
#include "../08_flash_v3/kernels.cuh"  // launch_fa3_with_options: tuned_lpt with --head-group
#include "device_fp8.hpp"
#endif
#endif

using namespace attention;
using namespace attention::fp8;
using course::Dtype;

namespace {

// Stage 08's last rung, and the same with FlashAttention-3's LPT order of causal tiles (the order of
// rungs 4-7), run beside on the same inputs as the 16-bit yardstick.
const std::string kStage08Rung = "tuned", kStage08Lpt = "tuned_lpt";
// The quantisation alone, for each scheme; quant_centred: with V centred (the wide rungs' inputs).
const std::string kQuant = "quant", kQuantCentred = "quant_centred";
// A device-to-device copy of Q, K and V: the memory's speed in the same run, the quantisation's yardstick.
const std::string kCopy = "copy";

std::string why_no_hopper() { return course::why_not_hopper(COURSE_HAS_HOPPER, "stage 09's kernels (FP8 wgmma)"); }

Scheme scheme_named(const std::string& name) {
  for (const Scheme& s : schemes())
    if (s.name() == name) return s;
  throw course::UsageError("no scheme '" + name + "' (per_tensor, per_block, per_tensor_hadamard, per_block_hadamard)");
}

#if COURSE_HAS_HOPPER
// The rung `v` on quantised inputs `in` (the scheme it takes, quantised on the device) into dev's O and L.
void launch_rung(const Fp8Variant& v, const Shape& s, Dtype t, const DeviceFp8& in, DeviceRun& dev,
                 const LaunchOptions& options) {
  course::require(v.launch != nullptr, "fp8 " + v.name + ": not in this build");
  v.launch(s, t, in, dev.o(), dev.L.get(), options);
}
#endif

// --accuracy: FA-3's table. For N(0, 1) inputs and its outlier inputs, the RMSE and the largest error of
// O against float64 of: 16-bit attention (stage 08's last rung on the GPU, else plain in the dtype on the
// CPU) and, for each scheme, the FP8 kernels of three numerics: key blocks of 128 (row_sum), of 256 (the
// wide kernel with the exponential unit, epilogue; d = 128, per tensor, V centred) and P̃ without the
// exponential unit (lin); each beside plain FP8 on the CPU (the scheme as the kernel quantises by).
int accuracy(const Shape& s, Dtype t, std::uint64_t seed, double fraction, double sigma, bool gpu) {
  std::printf("09_flash_v3_fp8 accuracy: %s %s, O against float64; inputs N(0,1), outliers: %.3g%% of entries "
              "from N(0,%g^2); seed %llu\n",
              s.text().c_str(), course::name(t), 100.0 * fraction, sigma, static_cast<unsigned long long>(seed));
  std::printf("%-8s %-34s %12s %12s %12s %12s\n", "inputs", "variant", "rmse (gpu)", "max (gpu)", "rmse (plain)",
              "max (plain)");
  for (double f : {0.0, fraction}) {
    const NormalInputs n = normal_inputs(s, t, seed, f, sigma);
    const auto ref = attention_f64(s, to_double(n.Q), to_double(n.K), to_double(n.V));
    const char* label = f > 0 ? "outliers" : "normal";
    auto line = [&](const std::string& variant, const Errors* g, const Errors& p) {
      char a[32] = "n/a", b[32] = "n/a";
      if (g) std::snprintf(a, sizeof a, "%.3e", g->rmse), std::snprintf(b, sizeof b, "%.3e", g->max_abs);
      std::printf("%-8s %-34s %12s %12s %12.3e %12.3e\n", label, variant.c_str(), a, b, p.rmse, p.max_abs);
    };
    const Errors plain16 = errors(plain_16bit(s, n.Q, n.K, n.V, t), ref);
    std::unique_ptr<Errors> g16;
    [[maybe_unused]] const Inputs in = to_inputs(n, t, seed);
#if COURSE_HAS_HOPPER
    if (gpu) {
      DeviceRun dev(s, t, in);
      dev.poison();
      v3_registry().find(kStage08Rung).launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get());
      g16 = std::make_unique<Errors>(errors(dev.O_values(t), ref));
    }
#endif
    line("16-bit (08 " + kStage08Rung + ")", g16.get(), plain16);
    for (const char* rung : {"row_sum", "epilogue", "lin"}) {
      const Fp8Variant& v = fp8_registry().find(rung);
      for (const Scheme& asked : schemes()) {
        if (!v.supports(t, s.d) || !v.takes(asked, s.d)) continue;
        const Scheme scheme = v.quantised_by(asked, s.d);
        const QuantizedInputs q = quantize_inputs(s, n.Q, n.K, n.V, scheme, seed);
        std::unique_ptr<Errors> g8;
#if COURSE_HAS_HOPPER
        if (gpu) {
          DeviceRun dev(s, t, in);
          Fp8Buffers b(s);
          dev.poison();
          launch_quantize(s, t, q.signs, dev.q(), dev.k(), dev.v(), b.view(scheme));
          check_quantized(s, b.view(scheme));
          launch_rung(v, s, t, b.view(scheme), dev, {});
          g8 = std::make_unique<Errors>(errors(dev.O_values(t), ref));
        }
#endif
        line(v.name + "." + asked.name(), g8.get(), errors(plain_fp8(s, q, t), ref));
      }
    }
  }
  if (!gpu) std::printf("gpu columns n/a: %s\n", why_no_hopper().empty() ? "no GPU" : why_no_hopper().c_str());
  return 0;
}

// --outlier-sweep FILE: the error of O against the outliers' size, for each variant, on the CPU
// (plain attention in the dtype, and plain FP8 for each scheme: the same rounding as the kernel,
// whose errors agree with it within 2 % in the accuracy table). For each σ: FA-3's inputs, N(0, 1)
// with the fraction of entries from N(0, σ²); RMSE and largest error against float64. Writes CSV.
int outlier_sweep(const Shape& s, Dtype t, std::uint64_t seed, double fraction, const std::vector<double>& sigmas,
                  const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  course::require(f != nullptr, "--outlier-sweep: cannot write " + path);
  std::fprintf(f, "sigma,fraction,variant,rmse,max_abs,ref_rms,shape,dtype,seed\n");
  std::printf("09_flash_v3_fp8 outlier sweep: %s %s, %.3g%% outliers, seed %llu (CPU: plain attention, plain FP8)\n",
              s.text().c_str(), course::name(t), 100.0 * fraction, static_cast<unsigned long long>(seed));
  for (double sigma : sigmas) {
    const NormalInputs n = normal_inputs(s, t, seed, fraction, sigma);
    const auto ref = attention_f64(s, to_double(n.Q), to_double(n.K), to_double(n.V));
    double sum = 0;  // O's own size: the outliers of V make it grow with sigma
    for (double x : ref) sum += x * x;
    const double ref_rms = std::sqrt(sum / double(ref.size()));
    auto line = [&](const std::string& variant, const Errors& e) {
      std::fprintf(f, "%g,%g,%s,%.6e,%.6e,%.6e,%s,%s,%llu\n", sigma, fraction, variant.c_str(), e.rmse, e.max_abs,
                   ref_rms, s.text().c_str(), course::name(t), static_cast<unsigned long long>(seed));
      std::printf("sigma %-6g %-24s rmse %.3e  max %.3e  (rms of O %.3e)\n", sigma, variant.c_str(), e.rmse,
                  e.max_abs, ref_rms);
    };
    line(course::name(t), errors(plain_16bit(s, n.Q, n.K, n.V, t), ref));
    for (const Scheme& scheme : schemes())
      line("fp8." + scheme.name(), errors(plain_fp8(s, quantize_inputs(s, n.Q, n.K, n.V, scheme, seed), t), ref));
  }
  std::fclose(f);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"09_flash_v3_fp8: FP8 attention on Hopper (e4m3; per-tensor or per-block scales, incoherent processing)"};
  course::CommonOptions options;
  ProblemOptions problem;
  problem.base.H = 2;
  problem.base.d = 128;
  // The CPU count of an FP8 row costs about as much as its float64 check: by default at N = 256 only.
  problem.count_limit = double(1 << 25);
  std::vector<std::string> scheme_names;
  for (const Scheme& s : schemes()) scheme_names.push_back(s.name());
  double outliers = -1.0, sigma = 10.0;
  bool accuracy_table = false;
  std::string sweep_csv;
  std::vector<double> sigmas = {1, 2, 5, 10, 20, 50, 100};
  int head_group = 0;
  course::add_common_options(app, options);
  ProblemChoices choices;
  choices.q_scale = false;
  choices.dtype_help = "The inputs' and O's types, comma-separated (fp16, bf16)";
  add_problem_options(app, problem, choices);
  app.add_option("--schemes", scheme_names, "Quantisation schemes, comma-separated (each FP8 row is a rung and a scheme)")
      ->delimiter(',')
      ->check(CLI::IsMember(scheme_names))
      ->capture_default_str();
  app.add_option("--outliers", outliers,
                 "Inputs N(0,1) with this fraction of entries from N(0, sigma^2) (FA-3: 0.001); default: stage 06's "
                 "uniform inputs")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--sigma", sigma, "The outliers' standard deviation")->check(course::number(0.0))->capture_default_str();
  app.add_flag("--accuracy", accuracy_table,
               "Print FA-3's accuracy table (N(0,1) and outlier inputs, RMSE and max error of O) for the first N and dtype");
  app.add_option("--outlier-sweep", sweep_csv,
                 "Write the CPU's error of O against the outliers' sigma (--sigmas), per scheme, to this CSV, and stop");
  app.add_option("--sigmas", sigmas, "The outliers' standard deviations of --outlier-sweep, comma-separated")
      ->delimiter(',')
      ->check(course::number(0.0))
      ->capture_default_str();
  app.add_option("--head-group", head_group,
                 "Rungs 4-7, causal: the LPT tile order's groups of heads, each group's heaviest tiles first (0: heads "
                 "whose K and V take at most 16 MB; 1: a head at a time); their rows are named <row>_hg<G>")
      ->check(course::whole_number(0))
      ->capture_default_str();
  const VariantInfo beside_info[] = {
      {"08_" + kStage08Rung, {Dtype::fp16, Dtype::bf16}, {64, 128}, "stage 08's last rung (16-bit), the yardstick"},
      {"08_" + kStage08Lpt, {Dtype::fp16, Dtype::bf16}, {64, 128}, "stage 08's with FA-3's LPT tile order (run when named)"},
      {kCopy, {Dtype::fp16, Dtype::bf16}, {64, 128}, "a device-to-device copy of Q, K, V: the memory's speed"},
      {kQuant, {Dtype::fp16, Dtype::bf16}, {64, 128}, "the quantisation alone, each scheme"},
      {kQuantCentred, {Dtype::fp16, Dtype::bf16}, {64, 128}, "the same with V centred (rungs 3-7's inputs; when named)"}};
  {
    std::vector<const VariantInfo*> rungs, ablations, beside;
    for (const auto& v : fp8_registry().rungs()) rungs.push_back(&v);
    for (const auto& v : fp8_registry().ablations()) ablations.push_back(&v);
    for (const auto& v : beside_info) beside.push_back(&v);
    app.footer(variants_help(rungs, ablations, beside) +
               "Rows: <rung>.<scheme>; rungs 3-7 at d = 128 run the per-tensor schemes, quantised with V centred.");
  }
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("09_flash_v3_fp8", [&]() -> int {
    std::vector<std::string> known;
    for (const auto& v : beside_info) known.push_back(v.name);
    for (const auto& name : fp8_registry().names()) known.push_back(name);
    course::finish_common_options(options, known);
    const std::vector<Shape> shapes = problem.shapes();
    const std::vector<Dtype> dtypes = problem.dtypes();
    std::vector<Scheme> chosen;
    for (const auto& n : scheme_names) chosen.push_back(scheme_named(n));
    // A rung named with --variants runs at this d, and (the wide ones at d = 128) some scheme asked for.
    for (const std::string& name : options.variants) {
      if (!fp8_registry().has(name)) continue;
      const Fp8Variant& v = fp8_registry().find(name);
      course::require(v.supports(dtypes.front(), problem.base.d),
                      "--variants " + name + " runs d = " + (v.ds.size() == 1 ? std::to_string(v.ds.front()) : "64 or 128") +
                          ", not --d " + std::to_string(problem.base.d));
      course::require(std::any_of(chosen.begin(), chosen.end(), [&](const Scheme& x) { return v.takes(x, problem.base.d); }),
                      "--variants " + name + " at d = " + std::to_string(problem.base.d) +
                          " takes the per-tensor schemes only (per_tensor, per_tensor_hadamard)");
    }
    course::Bench bench("09_flash_v3_fp8", options);
    if (bench.use_gpu())
      if (const std::string why = why_no_hopper(); !why.empty()) bench.disable_gpu(why);
    if (!sweep_csv.empty())
      return outlier_sweep(shapes.front(), dtypes.front(), options.seed, outliers > 0 ? outliers : 0.001, sigmas, sweep_csv);
    if (accuracy_table)
      return accuracy(shapes.front(), dtypes.front(), options.seed, outliers > 0 ? outliers : 0.001, sigma, bench.use_gpu());
    // By default: stage 08's last rung, the quantisation and every rung; --variants: those, in its order.
    std::vector<std::string> runs = {"08_" + kStage08Rung, kCopy, kQuant};
    for (const auto& name : fp8_registry().names(false)) runs.push_back(name);
    if (!options.variants.empty()) runs = options.variants;
    [[maybe_unused]] const LaunchOptions launch_options{0, head_group};
    std::vector<std::string> notes;
    bool skipped_per_block = false;  // a wide rung asked for a per-block scheme
    for (const Shape& s : shapes) {
      const int N = s.N;
      for (Dtype t : dtypes) {
        course::require_fits(8.0 * double(s.elements()) * 4.0, 0.0, "the inputs of " + s.text());
        const std::string problem_text = s.text() + " " + course::name(t);
        bench.progress(problem_text, "inputs and the float64 reference");
        const Inputs in = outliers >= 0 ? to_inputs(normal_inputs(s, t, options.seed, outliers, sigma), t, options.seed)
                                        : make_inputs(s, t, options.seed);
        std::unique_ptr<Reference> ref16;
        std::map<std::string, QuantizedInputs> quantized;  // by scheme (as quantised): for its quant and fp8 rows
        std::map<std::string, std::unique_ptr<Fp8Reference>> references;  // by scheme, as quantised
        // The rungs that share a tiling and a scheme make the same requests: one count (and check) each.
        std::map<std::string, std::pair<course::IoCount, course::Comparison>> counted;
        auto quantized_by = [&](const Scheme& scheme) -> const QuantizedInputs& {
          if (!quantized.count(scheme.name())) {
            bench.progress(problem_text, scheme.name() + ": the CPU's quantisation");
            quantized.emplace(scheme.name(), quantize_inputs(s, in.Q, in.K, in.V, scheme, options.seed));
          }
          return quantized.at(scheme.name());
        };
#if COURSE_HAS_HOPPER
        std::unique_ptr<DeviceRun> dev;
        if (bench.use_gpu()) dev = std::make_unique<DeviceRun>(s, t, in);
#endif
        [[maybe_unused]] auto out_of_memory = [&](const std::string& name, course::Row& row) {
          try {
            course::require_fits(0.0, fp8_device_bytes(s, t), name + " " + s.text());
            return false;
          } catch (const course::ResourceError& e) {
            row.device = course::device_label();
            notes.push_back(name + " " + problem_text + ": not run, out of device memory (" + e.what() + ")");
            bench.add(row);
            return true;
          }
        };
        for (const std::string& name : runs) {
          if (name.rfind("08_", 0) == 0) {  // stage 08's rung, 16-bit
            const std::string rung = name.substr(3);
            const ForwardVariant& v = v3_registry().find(rung);
            const Tiles tiles = v.tiles(s);
            // tuned_lpt takes --head-group, as rungs 4-7 do (causal: the order's groups of heads).
            const bool lpt = rung == kStage08Lpt, grouped = lpt && s.causal && head_group > 0;
            course::Row row = bench.row(name + (grouped ? "_hg" + std::to_string(head_group) : ""),
                                        s.text() + " Br=" + std::to_string(tiles.Br) + " Bc=" + std::to_string(tiles.Bc));
            row.dtype = course::name(t);
            row.size = N;
            row.flops = s.flops();
            row.io_model_bytes = flash_v2_model_bytes(s, t, tiles);
#if COURSE_HAS_HOPPER
            if (bench.use_gpu()) {
              if (!ref16) ref16 = std::make_unique<Reference>(s, t, in.Q.data(), in.K.data(), in.V.data());
              dev->poison();
              auto launch = [&] {
                if (lpt) launch_fa3_with_options(rung, s, t, dev->q(), dev->k(), dev->v(), dev->o(), dev->L.get(), {0, head_group});
                else v.launch(s, t, dev->q(), dev->k(), dev->v(), dev->o(), dev->L.get());
              };
              bench.measure_gpu(row, launch, [&] {
                const auto O = dev->O_values(t);
                return with_L(ref16->check_O(O.data()), ref16->check_L(dev->L.download().data()));
              });
            }
#endif
            bench.add(row);
            continue;
          }
          if (name == kCopy) {  // cudaMemcpyAsync of Q, K, V into one buffer: 3·n·e bytes read and written
            course::Row row = bench.row(name, s.text());
            row.dtype = course::name(t);
            row.size = N;
            const std::size_t bytes = s.elements() * course::bytes_of(t);
            row.io_model_bytes = 2.0 * 3.0 * double(bytes);
#if COURSE_HAS_HOPPER
            if (bench.use_gpu()) {
              course::DeviceBuffer<std::uint16_t> to(3 * s.elements());
              bench.measure_gpu(row, [&] {
                  for (int i = 0; i < 3; ++i)
                    CUDA_CHECK(cudaMemcpyAsync(to.get() + i * s.elements(), i == 0 ? dev->q() : i == 1 ? dev->k() : dev->v(),
                                               bytes, cudaMemcpyDeviceToDevice));
                }, [&] {  // the copy of V, exactly
                  const auto all = to.download();
                  std::vector<float> got(all.begin() + 2 * s.elements(), all.end());
                  std::vector<double> want(in.Vh.begin(), in.Vh.end());
                  return course::compare(got.data(), want.data(), got.size(), 0.0);
                });
            }
#endif
            bench.add(row);
            continue;
          }
          if (name == kQuant || name == kQuantCentred) {  // the quantisation alone, each scheme
            for (Scheme scheme : chosen) {
              scheme.centre_v = name == kQuantCentred;
              course::Row row = bench.row(name + "." + scheme.name(), s.text());
              row.dtype = course::name(t);
              row.size = N;
              row.io_model_bytes = quantize_model_bytes(s, scheme);
              [[maybe_unused]] const QuantizedInputs& q = quantized_by(scheme);
#if COURSE_HAS_HOPPER
              if (bench.use_gpu()) {
                if (out_of_memory(row.variant, row)) continue;
                Fp8Buffers b(s);
                b.Q.poison();
                bench.measure_gpu(row, [&] { launch_quantize(s, t, q.signs, dev->q(), dev->k(), dev->v(), b.view(scheme)); },
                                  [&] {  // the CPU's bytes of Q and its v̄, exactly
                                    check_quantized(s, b.view(scheme));
                                    const auto bytes = b.Q.download();
                                    std::vector<double> want(q.Q.bytes.begin(), q.Q.bytes.end());
                                    std::vector<float> got(bytes.begin(), bytes.end());
                                    const auto mean = b.v_mean.download();
                                    want.insert(want.end(), q.v_mean.begin(), q.v_mean.end());
                                    got.insert(got.end(), mean.begin(), mean.end());
                                    return course::compare(got.data(), want.data(), got.size(), 0.0);
                                  });
              }
#endif
              bench.add(row);
            }
            continue;
          }
          const Fp8Variant& v = fp8_registry().find(name);
          if (!v.supports(t, s.d)) {
            notes.push_back(name + " " + problem_text + ": not run (" + name + " runs d = " +
                            (v.ds.size() == 1 ? std::to_string(v.ds.front()) : "64 or 128") + ")");
            continue;
          }
          const Tiles tiles = v.tiles(s);
          for (const Scheme& asked : chosen) {
            std::string row_name = name + "." + asked.name();
            if (v.wide(s.d) && s.causal && head_group > 0 && name != "wide" && name != "wide_exact_max")
              row_name += "_hg" + std::to_string(head_group);
            if (!v.takes(asked, s.d)) {
              skipped_per_block = true;
              continue;
            }
            const Scheme scheme = v.quantised_by(asked, s.d);
            course::Row row = bench.row(row_name, s.text() + " Br=" + std::to_string(tiles.Br) + " Bc=" + std::to_string(tiles.Bc));
            row.dtype = course::name(t);
            row.size = N;
            row.flops = s.flops();
            row.io_model_bytes = fp8_model_bytes(s, t, tiles);
            const QuantizedInputs& q = quantized_by(scheme);
            auto reference = [&]() -> const Fp8Reference& {
              auto& r = references[scheme.name()];
              if (!r) {
                bench.progress(problem_text, scheme.name() + ": float64 and plain FP8 on the sampled rows");
                r = std::make_unique<Fp8Reference>(s, t, in.Q, in.K, in.V, q);
              }
              return *r;
            };
            if (problem.counts(s)) {
              const std::string key = std::to_string(tiles.Bc) + " " + scheme.name();
              if (!counted.count(key)) {
                bench.progress(problem_text, row_name + ": counting IO on the CPU");
                std::vector<float> O(s.elements(), NAN), L(std::size_t(s.heads()) * N, NAN);
                const course::IoCount io = fp8_counted(s, t, tiles, q, O.data(), L.data());
                counted[key] = {io, with_L(reference().check_O(O.data()), reference().check_L(L.data()))};
              }
              // The count is every rung's of this tiling; its check (the CPU twin's O and L, rung 2's numerics)
              // is the error column of rung 2's row only, and a failing twin fails the run.
              if (name == "row_sum") bench.record_counted(row, counted[key].first, counted[key].second);
              else row.io_counted_bytes = double(counted[key].first.total());
              course::require(counted[key].second.ok(), "the CPU twin of " + row_name + " " + problem_text +
                                                            " fails its check: " + counted[key].second.summary());
            }
#if COURSE_HAS_HOPPER
            if (bench.use_gpu()) {
              if (out_of_memory(row_name, row)) continue;
              Fp8Buffers b(s);
              launch_quantize(s, t, q.signs, dev->q(), dev->k(), dev->v(), b.view(scheme));
              check_quantized(s, b.view(scheme));
              const Fp8Reference& ref = reference();
              dev->poison();
              bench.measure_gpu(row, [&] { launch_rung(v, s, t, b.view(scheme), *dev, launch_options); }, [&] {
                const auto O = dev->O_values(t);
                // P̃ by the lin rule: L's bound widened by its allowance, as the tests do.
                return with_L(ref.check_O(O.data()),
                              ref.check_L(dev->L.download().data(), v.lin ? std::log1p(kLinMaxRelError) : 0.0));
              });
            }
#endif
            bench.add(row);
          }
        }
      }
    }
    notes.insert(notes.begin(),
                 {"08_" + kStage08Rung + ": stage 08's last rung (fp16/bf16) on the same inputs",
                  "quant.*: the quantisation kernels alone (Q, K, V to e4m3, V written as V^T); its check: the GPU's "
                  "bytes of Q (and v-bar, when centred) equal the CPU's; quant_centred.*: with V centred",
                  "<rung>.<scheme>: the FP8 attention on the quantised inputs (rungs 3-7 at d = 128: V centred); max rel "
                  "err: O against float64 on the 16-bit inputs, held to twice plain FP8's error (and L likewise)",
                  "model: bytes between the SMs and L2 (1-byte Q, K, V; O in the dtype; L); counted: the CPU run of the "
                  "same tiles through the counting view (B*H*N*N*d <= " +
                      std::to_string(static_cast<long long>(problem.count_limit)) +
                      ", else n/a); its O and L (rung 2's numerics) are checked, and are the max rel err of the "
                      "row_sum rows without a GPU"});
    if (skipped_per_block)
      notes.push_back("rungs 3-7 at d = 128 (key blocks of 256) run the per-tensor schemes only: their per-block rows are "
                      "not run");
    char title[256];
    std::snprintf(title, sizeof title, "09_flash_v3_fp8 on %s, %s, seed %llu", course::device_label().c_str(),
                  outliers >= 0 ? "inputs N(0,1) with outliers" : "Q, K, V uniform in [-1, 2)",
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
