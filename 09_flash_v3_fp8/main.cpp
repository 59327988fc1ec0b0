// 09_flash_v3_fp8: FP8 attention on Hopper, beside stage 08's last rung on the same inputs. For
// each problem and scheme (per tensor, per block, each with or without incoherent processing): the
// quantisation's time and bytes, and the FP8 attention's time, bytes and error (O and L against
// float64, within twice plain FP8's error). --accuracy prints the FA-3 paper's table instead: RMSE
// and largest error of O on N(0, 1) inputs and on its outlier inputs. docs/09_flash_v3_fp8.md explains.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "../08_flash_v3/variants.hpp"
#include "accuracy.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "fp8.hpp"
#include "gpu.hpp"
#include "options.hpp"
// Declarations only (no CUDA types): the row names' kernel choices (fp8::Wide) in every build; the
// launchers and setters it declares are defined, and called below, only in a build with sm_90a kernels.
#include "kernels.cuh"
#if COURSE_HAS_CUDA
#include "attention/device_run.hpp"
#include "device_buffer.hpp"
#if COURSE_HAS_HOPPER
#include "device_fp8.hpp"
#include "../08_flash_v3/kernels.cuh"  // fa3_set_lpt_head_group
#endif
#endif

using namespace attention;
using namespace attention::fp8;
using course::Dtype;

namespace {

constexpr const char* kStage08Rung = "tuned";
constexpr const char* kStage08LptRung = "tuned_lpt";  // its experiment with FlashAttention-3's LPT tile order
// Bytes between the SMs and L2 in the model (stage 06's, with 1-byte Q, K, V): per head Q once,
// K and V of every visited key block once per query block, O (2 bytes a value) and L once.
double attention_model_bytes(const Shape& s, const Tiles& t) {
  double keys = 0;
  for (int i = 0; i < query_blocks(s, t); ++i) keys += std::min(s.N, key_blocks(s, t, i) * t.Bc);
  return double(s.heads()) * (double(s.d) * (3.0 * s.N + 2.0 * keys) + 4.0 * s.N);
}
// The quantisation's bytes: each 16-bit input read once (per tensor: twice), the bytes written (V
// as Vᵀ, rows padded to 32 keys), 4 bytes a scale; centring V: V read once more, its blocks' column
// sums written and read, v̄ written and read by every block of V (quantize.cu).
double quantize_model_bytes(const Shape& s, Scheme scheme) {
  const double n = double(s.elements()), passes = scheme.granularity == Granularity::tensor ? 2.0 : 1.0;
  const double blocks = double(s.heads()) * ((s.N + kScaleRows - 1) / kScaleRows);
  const double centring = scheme.centre_v ? 2.0 * n + 4.0 * s.d * (3.0 * blocks + s.heads()) : 0.0;
  return 3.0 * 2.0 * n * passes + 2.0 * n + double(s.heads()) * s.d * padded_keys(s.N) + 3.0 * 4.0 * blocks + centring;
}

std::string why_no_hopper() {
  if (!COURSE_HAS_HOPPER) return "this build has no sm_90a kernels (they need nvcc 12 or newer)";
  const auto& g = course::gpu();
  if (!g.available) return g.why_not;
  if (g.cc_major != 9 || g.cc_minor != 0)
    return "stage 09's kernels need a Hopper GPU (sm_90: H100, H200, GH200) for FP8 wgmma; this is " + g.name +
           " (sm_" + std::to_string(g.cc_major) + std::to_string(g.cc_minor) + ")";
  return "";
}

Scheme scheme_named(const std::string& name) {
  for (const Scheme& s : schemes())
    for (const Scheme& form : {s, centred(s)})
      if (form.name() == name) return form;
  throw course::UsageError("no scheme '" + name +
                           "' (per_tensor, per_block, per_tensor_hadamard, per_block_hadamard, each + _centred)");
}

// --accuracy: FA-3's table. For N(0, 1) inputs and its outlier inputs, the RMSE and the largest
// error of O against float64 of: 16-bit attention (stage 08's last rung on the GPU, else plain in the
// dtype on the CPU) and each FP8 scheme (our kernel on the GPU, and plain FP8 on the CPU). The experiments' rows
// (_lin, _wide_*) have no GPU columns with --exp2-poly-every (poly_every > 0), which runs with the default kernel only.
int accuracy(const Shape& s, Dtype t, std::uint64_t seed, double fraction, double sigma, bool gpu, int poly_every) {
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
    line(std::string("16-bit (08 ") + kStage08Rung + ")", g16.get(), plain16);
    // An FP8 kernel's errors on these inputs (Wide::off: the default kernel; else a wide experiment); null without a GPU.
    auto gpu_fp8 = [&](const Scheme& scheme, const QuantizedInputs& q, fp8::Wide kernel, bool lin = false) {
      std::unique_ptr<Errors> g8;
#if COURSE_HAS_HOPPER
      const bool experiment = lin || kernel != fp8::Wide::off;
      if (gpu && !(experiment && poly_every > 0)) {
        struct Reset {  // the experiment's settings back to the default kernel's, also when the launch throws
          ~Reset() { fp8::set_lin_p(false), fp8::set_wide_key_blocks(fp8::Wide::off, Granularity::tensor); }
        } reset;
        DeviceRun dev(s, t, in);
        Fp8Buffers b(s);
        dev.poison();
        launch_quantize(s, t, scheme, q.signs, dev.q(), dev.k(), dev.v(), b.view());
        check_quantized(s, b.view());
        fp8::set_wide_key_blocks(kernel, Granularity::tensor);
        fp8::set_lin_p(lin);
        launch_attention(s, t, b.view(), dev.o(), dev.L.get());
        g8 = std::make_unique<Errors>(errors(dev.O_values(t), ref));
      }
#else
      (void)scheme, (void)q, (void)kernel, (void)lin, (void)poly_every;
#endif
      return g8;
    };
    // Each scheme by the default kernel, then (fp8_<scheme>_lin) with P̃'s bytes from fp16's bit pattern.
    for (const Scheme& scheme : schemes()) {
      const QuantizedInputs q = quantize_inputs(s, n.Q, n.K, n.V, scheme, seed);
      const Errors plain = errors(plain_fp8(s, q, t), ref);
      line("fp8_" + scheme.name(), gpu_fp8(scheme, q, fp8::Wide::off).get(), plain);
      line("fp8_" + scheme.name() + "_lin", gpu_fp8(scheme, q, fp8::Wide::off, true).get(), plain);
    }
    // The wide kernels (d = 128, V's descale per tensor and V centred): _wide_stsm, and _wide_lin, whose P̃ comes
    // from fp16 bit patterns instead of the exponential unit. Plain: plain FP8 of the same (centred) scheme.
    for (const Scheme& per_tensor : schemes()) {
      if (per_tensor.granularity != Granularity::tensor || s.d != 128) continue;
      const Scheme scheme = centred(per_tensor);
      const QuantizedInputs q = quantize_inputs(s, n.Q, n.K, n.V, scheme, seed);
      for (const auto& [kernel, tag] : {std::pair{fp8::Wide::overlap_stsm, "_wide_stsm"}, std::pair{fp8::Wide::overlap_lin, "_wide_lin"}})
        line("fp8_" + per_tensor.name() + tag, gpu_fp8(scheme, q, kernel).get(), errors(plain_fp8(s, q, t), ref));
    }
  }
  if (!gpu) std::printf("gpu columns n/a: %s\n", why_no_hopper().empty() ? "no GPU" : why_no_hopper().c_str());
  else if (poly_every > 0) std::printf("_lin and _wide_* rows: gpu columns n/a (--exp2-poly-every runs with the default kernel only)\n");
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
      line("fp8_" + scheme.name(), errors(plain_fp8(s, quantize_inputs(s, n.Q, n.K, n.V, scheme, seed), t), ref));
  }
  std::fclose(f);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"09_flash_v3_fp8: FP8 attention on Hopper (e4m3; per-tensor or per-block scales, incoherent processing)"};
  course::CommonOptions options;
  Shape base;
  base.H = 2;
  base.d = 128;
  std::vector<int> seq = {256, 1000};
  std::vector<std::string> dtype_names = {"fp16", "bf16"};
  std::vector<std::string> scheme_names;
  for (const Scheme& s : schemes()) scheme_names.push_back(s.name());
  int tokens = 0;
  double outliers = -1.0, sigma = 10.0;
  bool accuracy_table = false;
  std::string sweep_csv;
  std::vector<double> sigmas = {1, 2, 5, 10, 20, 50, 100};
  int poly_every = 0, head_group = 0;
  course::add_common_options(app, options);
  app.add_option("--batch", base.B, "Batch size B")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--tokens", tokens, "Tokens B*N: when given, B = tokens / N for each N")->check(course::whole_number(1));
  app.add_option("--heads", base.H, "Heads H")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--seq", seq, "Sequence lengths N, comma-separated")
      ->delimiter(',')
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--d", base.d, "Head dimension d (64 or 128)")->check(CLI::IsMember({64, 128}))->capture_default_str();
  app.add_flag("--causal", base.causal, "Causal mask: query i sees keys j <= i");
  app.add_option("--dtype", dtype_names, "The inputs' and O's types, comma-separated (fp16, bf16)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp16", "bf16"}))
      ->capture_default_str();
  app.add_option("--schemes", scheme_names, "Quantisation schemes, comma-separated")
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
  app.add_option("--exp2-poly-every", poly_every,
                 "Experiment: the FP8 kernel computes every k-th 8-key tile's exponentials by a polynomial on the FMA "
                 "pipe (4 or 8; 0: none); its rows are named fp8_<scheme>_poly<k>")
      ->check(CLI::IsMember({0, 4, 8}))
      ->capture_default_str();
  app.add_option("--head-group", head_group,
                 "Experiment, fp8_*_wide_ovl and _wide_mask, and stage 08's 08_tuned_lpt, causal: the tile order's "
                 "groups of heads, each group's heaviest tiles first (0: heads whose K and V take at most 16 MB; 1: "
                 "a head at a time); its rows are named <variant>_hg<G>")
      ->check(course::whole_number(0))
      ->capture_default_str();
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("09_flash_v3_fp8", [&]() -> int {
    std::vector<std::string> variants = {std::string("08_") + kStage08Rung};
    for (const auto& n : scheme_names) variants.push_back("quant_" + n), variants.push_back("fp8_" + n);
    // The stage's last rungs, per tensor: P̃ without the exponential unit on the default kernel (fp8_per_tensor_lin),
    // and at d = 128 the wide rung's last experiment with the exponential unit (_wide_stsm) and without it (_wide_lin).
    if (std::find(scheme_names.begin(), scheme_names.end(), "per_tensor") != scheme_names.end()) {
      variants.push_back("fp8_per_tensor_lin");
      if (base.d == 128) variants.push_back("fp8_per_tensor_wide_stsm"), variants.push_back("fp8_per_tensor_wide_lin");
    }
    // The ablations (run when named, not by default): fp8_<scheme>_preg and _psmem, P̃ as P̃·V's A operand
    // in registers or through shared memory at every d (the default: shared memory at d = 128 only);
    // fp8_<scheme>_fadd, the row sum by FADDs (the kernel before the tensor cores summed it);
    // fp8_<scheme>_acc2, _acc3 and _lazy3, the experiment: O accumulated on the tensor cores (no fresh
    // accumulator), 2 consumer warpgroups (d = 128 only) or 3, and 3 with the lazy rescale; these
    // quantise V centred, and quant_<scheme>_centred times that quantisation; fp8_<scheme>_wide, the
    // wide rung: key blocks of 256, O and l on the tensor cores with the lazy rescale (d = 128, the
    // per-tensor schemes; V centred); fp8_<scheme>_wide_opt, the experiment on it: the optimistic max
    // (the row max only when P̃ overflowed e4m3; --exp2-poly-every applies to it too);
    // fp8_<scheme>_wide_turns, that with the two warpgroups' softmaxes taking turns; fp8_<scheme>_wide_epi,
    // _wide_opt with v̄ read from shared memory by the epilogue; fp8_<scheme>_wide_ovl, that with a
    // tile's end under the next tile's first S; fp8_<scheme>_wide_mask, that with the causal
    // diagonal's mask not checking N; fp8_<scheme>_wide_dec, that with each tile's head and query block
    // from the producer; fp8_<scheme>_wide_qh, that with Q in two halves, one a warpgroup;
    // fp8_<scheme>_wide_diag, that with the causal diagonal's steps past a warp's rows skipped; and
    // fp8_<scheme>_wide_pfq, that with each tile's first Q half prefetched into L2; fp8_<scheme>_wide_lg2,
    // that with L by lg2.approx; fp8_<scheme>_wide_stsm, that with the epilogue's staging by stmatrix; and
    // fp8_<scheme>_wide_lin, that with P̃'s bytes from fp16's bit pattern instead of the exponential unit;
    // fp8_<scheme>_lin, the same on the default kernel (any d and scheme); fp8_<scheme>_lin_psmem, that with P̃
    // through shared memory at every d.
    std::vector<std::string> known = variants;
    known.push_back(std::string("08_") + kStage08LptRung);  // stage 08's experiment: causal tiles in the LPT order
    const char* const ablations[] = {"_fadd", "_preg", "_psmem", "_acc2", "_acc3", "_lazy3", "_lin", "_wide", "_wide_opt", "_wide_turns",
                                     "_wide_epi", "_wide_ovl", "_wide_mask", "_wide_dec", "_wide_qh", "_wide_diag",
                                     "_wide_pfq", "_wide_lg2", "_wide_stsm", "_wide_lin", "_lin_psmem"};
    for (const Scheme& s : schemes()) {
      for (const char* ablation : ablations) known.push_back("fp8_" + s.name() + ablation);
      known.push_back("quant_" + centred(s).name());
    }
    course::finish_common_options(options, known);
    require_supported(base);
    std::vector<Dtype> dtypes;
    for (const auto& name : dtype_names) dtypes.push_back(course::parse_dtype(name));
    course::Bench bench("09_flash_v3_fp8", options);
    if (bench.use_gpu())
      if (const std::string why = why_no_hopper(); !why.empty()) bench.disable_gpu(why);
#if COURSE_HAS_HOPPER
    fp8::set_exp2_poly_every(poly_every);
    fp8::set_head_group(head_group);
    fa3_set_lpt_head_group(head_group);
#endif
    if (!sweep_csv.empty()) {
      Shape s = base;
      s.N = seq.front();
      return outlier_sweep(s, dtypes.front(), options.seed, outliers > 0 ? outliers : 0.001, sigmas, sweep_csv);
    }
    if (accuracy_table) {
      Shape s = base;
      s.N = seq.front();
      return accuracy(s, dtypes.front(), options.seed, outliers > 0 ? outliers : 0.001, sigma, bench.use_gpu(), poly_every);
    }
    const std::vector<std::string> runs = options.variants.empty() ? variants : options.variants;
    std::vector<std::string> notes;
    for (int N : seq) {
      Shape s = base;
      s.N = N;
      if (tokens > 0) {
        course::require(tokens % N == 0, "--tokens " + std::to_string(tokens) + " is not a multiple of N = " + std::to_string(N));
        s.B = tokens / N;
      }
      require_supported(s);
      course::require(s.d == 64 || s.d == 128, "stage 09 runs d = 64 or 128, not d = " + std::to_string(s.d));
      for (Dtype t : dtypes) {
        course::require_fits(8.0 * double(s.elements()) * 4.0, 0.0, "the inputs of " + s.text());
        const std::string problem = s.text() + " " + course::name(t);
        bench.progress(problem, "inputs and the float64 reference");
        const Inputs in = outliers >= 0 ? to_inputs(normal_inputs(s, t, options.seed, outliers, sigma), t, options.seed)
                                        : make_inputs(s, t, options.seed);
        std::unique_ptr<Reference> ref16;
        std::map<std::string, QuantizedInputs> quantized;  // by scheme: for its quant_ and fp8_ rows
#if COURSE_HAS_HOPPER
        std::unique_ptr<DeviceRun> dev;
        if (bench.use_gpu()) dev = std::make_unique<DeviceRun>(s, t, in);
#endif
        for (const std::string& name : runs) {
          const bool fp8_row = name.rfind("fp8_", 0) == 0;
          auto ends = [&](const char* tail) {
            const size_t n = std::strlen(tail);
            return fp8_row && name.size() > n && name.compare(name.size() - n, n, tail) == 0;
          };
          [[maybe_unused]] const bool fadd = ends("_fadd"), preg = ends("_preg"), psmem = ends("_psmem");
          const int acc_wg = ends("_acc2") ? 2 : ends("_acc3") || ends("_lazy3") ? 3 : 0;
          const fp8::Wide wide_kernel = ends("_wide")        ? fp8::Wide::rung
                                        : ends("_wide_opt")   ? fp8::Wide::optimistic
                                        : ends("_wide_turns") ? fp8::Wide::turns
                                        : ends("_wide_epi")   ? fp8::Wide::vbar_smem
                                        : ends("_wide_ovl")   ? fp8::Wide::overlap
                                        : ends("_wide_mask")  ? fp8::Wide::overlap_mask
                                        : ends("_wide_dec")   ? fp8::Wide::overlap_decoded
                                        : ends("_wide_qh")    ? fp8::Wide::overlap_qhalves
                                        : ends("_wide_diag")  ? fp8::Wide::overlap_diagonal
                                        : ends("_wide_pfq")   ? fp8::Wide::overlap_q_prefetch
                                        : ends("_wide_lg2")   ? fp8::Wide::overlap_log2
                                        : ends("_wide_stsm")  ? fp8::Wide::overlap_stsm
                                        : ends("_wide_lin")   ? fp8::Wide::overlap_lin
                                                              : fp8::Wide::off;
          const bool wide = wide_kernel != fp8::Wide::off;
          // The default kernel, P̃ by fp16's bit pattern (_lin_psmem: with P̃ through shared memory at every d).
          [[maybe_unused]] const bool lin = (ends("_lin") && !wide) || ends("_lin_psmem");
          [[maybe_unused]] const bool wide_opt = wide_kernel == fp8::Wide::optimistic;
          size_t suffix = 0;
          for (const char* a : ablations)  // the longest tail it ends with ("_wide_lin", not "_lin")
            if (ends(a)) suffix = std::max(suffix, std::strlen(a));
          Tiles fp8_tiles = attention_tiles(s);  // the experiment O on the tensor cores: 64 rows a warpgroup
          if (acc_wg != 0) fp8_tiles.Br = 64 * acc_wg;
          if (wide) fp8_tiles.Bc = 256;
          std::string row_name = fp8_row && poly_every > 0 ? name + "_poly" + std::to_string(poly_every) : name;
          using W = fp8::Wide;
          const bool overlap = wide_kernel == W::overlap || wide_kernel == W::overlap_mask ||
                               wide_kernel == W::overlap_decoded || wide_kernel == W::overlap_qhalves ||
                               wide_kernel == W::overlap_diagonal || wide_kernel == W::overlap_q_prefetch ||
                               wide_kernel == W::overlap_log2 || wide_kernel == W::overlap_stsm ||
                               wide_kernel == W::overlap_lin;
          const bool lpt08 = name == std::string("08_") + kStage08LptRung;
          if ((overlap || lpt08) && head_group > 0) row_name += "_hg" + std::to_string(head_group);
          course::Row row = bench.row(row_name,
                                      s.text() + " Br=" + std::to_string(fp8_tiles.Br) + " Bc=" + std::to_string(fp8_tiles.Bc));
          row.dtype = course::name(t);
          row.size = N;
          if (name.rfind("08_", 0) == 0) {
            row.flops = s.flops();
            const std::string rung = name.substr(3);  // a named argument: GCC 13 warns of a dangling reference
            const ForwardVariant& v = v3_registry().find(rung);   // to a temporary string (the list is static; it is not)
            const Tiles tiles = v.tiles(s);
            row.shape = s.text() + " Br=" + std::to_string(tiles.Br) + " Bc=" + std::to_string(tiles.Bc);
            row.io_model_bytes = flash_v2_model_bytes(s, t, tiles);
#if COURSE_HAS_HOPPER
            if (bench.use_gpu()) {
              if (!ref16) ref16 = std::make_unique<Reference>(s, t, in.Q.data(), in.K.data(), in.V.data());
              dev->poison();
              bench.measure_gpu(row, [&] { v.launch(s, t, dev->q(), dev->k(), dev->v(), dev->o(), dev->L.get()); }, [&] {
                const auto O = dev->O_values(t);
                auto c = ref16->check_O(O.data());
                const auto L = ref16->check_L(dev->L.download().data());
                if (!L.ok()) c.bad += L.bad + 1, c.first_mismatches += "  L: " + L.summary() + "\n";
                return c;
              });
            }
#endif
            bench.add(row);
            continue;
          }
          const bool quant = name.rfind("quant_", 0) == 0;
          // O on the tensor cores takes V centred (fp8.hpp): its rows quantise so.
          Scheme scheme = scheme_named(name.substr(quant ? 6 : 4, name.size() - (quant ? 6 : 4) - suffix));
          if (acc_wg != 0 || wide) scheme.centre_v = true;
          if (!quantized.count(scheme.name())) {
            bench.progress(problem, scheme.name() + ": the CPU's quantisation");
            quantized.emplace(scheme.name(), quantize_inputs(s, in.Q, in.K, in.V, scheme, options.seed));
          }
          [[maybe_unused]] const QuantizedInputs& q = quantized.at(scheme.name());  // the GPU rows' inputs
          if (quant) row.io_model_bytes = quantize_model_bytes(s, scheme);
          else row.flops = s.flops(), row.io_model_bytes = attention_model_bytes(s, fp8_tiles);
#if COURSE_HAS_HOPPER
          if (bench.use_gpu()) {
            if ((fadd || preg || psmem || lin || acc_wg != 0 || (wide && !wide_opt)) && poly_every > 0) {
              notes.push_back(name + ": not run (--exp2-poly-every runs with the default kernel only)");
              bench.add(row);
              continue;
            }
            if (acc_wg == 2 && s.d != 128) {
              notes.push_back(name + " " + problem + ": not run (two warpgroups with O on the tensor cores: d = 128 only)");
              bench.add(row);
              continue;
            }
            fp8::set_row_sum_by_mma(!fadd);
            fp8::set_p_operand(preg ? fp8::POperand::registers : psmem ? fp8::POperand::shared : fp8::POperand::by_d);
            if (wide && (s.d != 128 || scheme.granularity != Granularity::tensor)) {
              notes.push_back(name + " " + problem + ": not run (key blocks of 256: d = 128 and V's descale per tensor only)");
              bench.add(row);
              continue;
            }
            fp8::set_o_on_tensor_cores(acc_wg, ends("_lazy3"));
            fp8::set_wide_key_blocks(wide_kernel, Granularity::tensor);
            fp8::set_lin_p(lin);
            try {
              course::require_fits(0.0, flash_v2_device_bytes(s, t) + Fp8Buffers::bytes(s), name + " " + s.text());
            } catch (const course::ResourceError& e) {
              row.device = course::device_label();
              notes.push_back(name + " " + problem + ": not run, out of device memory (" + e.what() + ")");
              bench.add(row);
              continue;
            }
            Fp8Buffers b(s);
            auto quantize = [&] { launch_quantize(s, t, scheme, q.signs, dev->q(), dev->k(), dev->v(), b.view()); };
            if (quant) {
              b.Q.poison();
              bench.measure_gpu(row, quantize, [&] {  // the CPU's bytes of Q and its v̄, exactly
                check_quantized(s, b.view());
                const auto bytes = b.Q.download();
                std::vector<double> want(q.Q.bytes.begin(), q.Q.bytes.end());
                std::vector<float> got(bytes.begin(), bytes.end());
                const auto mean = b.v_mean.download();
                want.insert(want.end(), q.v_mean.begin(), q.v_mean.end());
                got.insert(got.end(), mean.begin(), mean.end());
                return course::compare(got.data(), want.data(), got.size(), 0.0);
              });
            } else {
              quantize();
              check_quantized(s, b.view());
              bench.progress(problem, name + ": float64 and plain FP8 on the sampled rows");
              const Fp8Reference ref(s, t, in.Q, in.K, in.V, q);
              dev->poison();
              bench.measure_gpu(row, [&] { launch_attention(s, t, b.view(), dev->o(), dev->L.get()); }, [&] {
                const auto O = dev->O_values(t);
                auto c = ref.check_O(O.data());
                const auto L = ref.check_L(dev->L.download().data(),  // the lin rule's allowance, as the tests
                                           fp8::p_by_lin() ? std::log1p(kLinMaxRelError) : 0.0);
                if (!L.ok()) c.bad += L.bad + 1, c.first_mismatches += "  L: " + L.summary() + "\n";
                return c;
              });
            }
          }
#endif
          bench.add(row);
        }
      }
    }
    notes.insert(notes.begin(),
                 {std::string("08_") + kStage08Rung + ": stage 08's last rung (fp16/bf16) on the same inputs",
                  "quant_*: the quantisation kernels alone (Q, K, V to e4m3, V written as V^T); its check: the GPU's "
                  "bytes of Q (and v-bar, when centred) equal the CPU's; quant_*_centred: with V centred (V's column "
                  "means first, V - v-bar quantised)",
                  "fp8_*: the FP8 attention on the quantised inputs; max rel err: O against float64 on the 16-bit "
                  "inputs, held to twice plain FP8's error (and L likewise); counted IO: n/a (no CPU count for FP8)",
                  "model: bytes between the SMs and L2 (1-byte Q, K, V; O in the dtype; L)"});
    auto named = [&](const std::string& tail) {
      return std::any_of(runs.begin(), runs.end(), [&](const std::string& n) {
        return n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0;
      });
    };
    // Each ablation's or experiment's note, printed when one of its rows ran.
    const std::pair<std::vector<std::string>, const char*> ablation_notes[] = {
        {{"_fadd"},
         "fp8_*_fadd: the ablation: the softmax's row sums by FADDs instead of on the tensor cores with P*V "
         "(otherwise the default kernel, P~ through shared memory at d = 128 included)"},
        {{"_preg"},
         "fp8_*_preg: the ablation: P~ held in registers as P*V's A operand at every d (the kernel "
         "before P~ went through shared memory at d = 128)"},
        {{"_acc2", "_acc3", "_lazy3"},
         "fp8_*_acc2, _acc3, _lazy3: the experiment: O accumulated on the tensor cores across key blocks "
         "(FA-3's way; l by FADDs), 2 or 3 consumer warpgroups, _lazy3 with the lazy rescale; V centred "
         "by their quantisation (without it O drifts low on inputs whose mean is not 0)"},
        {{"_wide"},
         "fp8_*_wide: the wide rung: key blocks of 256 (FA-3's FP8 tiles are 128 x 224), O and the row sums "
         "accumulated on the tensor cores with the lazy rescale, two consumer warpgroups; d = 128 and the "
         "per-tensor schemes; V centred by their quantisation"},
        {{"_wide_opt"},
         "fp8_*_wide_opt: the experiment on the wide rung: the optimistic max (P~ with the running max "
         "first, the row max and P~ again only where some P~ overflowed e4m3; m kept 3 log2 units above "
         "the max); --exp2-poly-every applies to it"},
        {{"_wide_turns"},
         "fp8_*_wide_turns: the experiment _wide_opt with the two consumer warpgroups' softmaxes taking "
         "turns (named barriers), as their products do"},
        {{"_wide_epi"},
         "fp8_*_wide_epi: the experiment _wide_opt with the epilogue reading v-bar from shared memory "
         "(copied in with the tile's Q) instead of global memory"},
        {{"_wide_ovl"},
         "fp8_*_wide_ovl: the experiment _wide_epi with a tile's last P~*V and the next tile's first S "
         "in one turn, the epilogue running under that S (stage 08's tile_overlap)"},
        {{"_tuned_lpt"},
         "08_tuned_lpt: stage 08's experiment, its last rung with causal tiles in FlashAttention-3's LPT order "
         "(the order of the FP8 overlap kernels)"},
        {{"_wide_mask"},
         "fp8_*_wide_mask: the experiment _wide_ovl with the causal diagonal's mask comparing keys with "
         "the row only, not with N, where the block ends before N"},
        {{"_wide_dec"},
         "fp8_*_wide_dec: the experiment _wide_mask with each tile's head and query block decoded by the "
         "producer and passed on in shared memory"},
        {{"_wide_qh"},
         "fp8_*_wide_qh: the experiment _wide_dec with Q in two halves of 64 rows, each given back by its own "
         "consumer warpgroup and copied again as soon as it is"},
        {{"_wide_diag"},
         "fp8_*_wide_diag: the experiment _wide_qh with the causal diagonal's 32-key steps past a warp's rows "
         "left out of its softmax (no mask, max or exponentials; P~ zero there)"},
        {{"_wide_pfq"},
         "fp8_*_wide_pfq: the experiment _wide_diag with the first half of each tile's Q (the first warpgroup's "
         "rows) prefetched into L2 when the producer takes the tile"},
        {{"_wide_lg2"},
         "fp8_*_wide_lg2: the experiment _wide_pfq with L by lg2.approx (not a software log on one lane in "
         "four), stored after O's TMA store is issued"},
        {{"_wide_stsm"},
         "fp8_*_wide_stsm: the experiment _wide_lg2 with the epilogue's staging written by stmatrix (8 a lane, "
         "not 32 stores)"},
        {{"_lin", "_lin_psmem"},
         "fp8_*_lin, fp8_*_wide_lin: the experiment: P~'s e4m3 bytes from fp16's bit pattern (two FFMAs and a "
         "byte permutation a pair of scores) instead of the exponential unit; _lin on the default kernel (any d and "
         "scheme; _lin_psmem: P~ through shared memory at every d), _wide_lin on _wide_stsm"},
        {{"_psmem"},
         "fp8_*_psmem: the ablation: P~ through shared memory at every d (the default does so at d = 128 "
         "only)"},
    };
    for (const auto& [tails, note] : ablation_notes)
      if (std::any_of(tails.begin(), tails.end(), named)) notes.push_back(note);
    char title[256];
    std::snprintf(title, sizeof title, "09_flash_v3_fp8 on %s, %s, seed %llu", course::device_label().c_str(),
                  outliers >= 0 ? "inputs N(0,1) with outliers" : "Q, K, V uniform in [-1, 2)",
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
