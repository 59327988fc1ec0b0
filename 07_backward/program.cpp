// The backward stages' program (07_backward; 11_flash_v3_backward runs it with its own registry):
// for every run the model of its bytes, the CPU count, a check of dQ, dK and dV against float64, the
// median time of the backward pass (its forward, stage 06's or the program's, runs once before, untimed), the
// hardware counters and the peak device memory. Standard attention (cuBLAS, P kept from its own
// forward) is stage 07's baseline. --with-forward times the forward and the backward pass together
// (the paper's Fig. 2). docs/07_backward.md explains.
#include "program.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <optional>

#include "../06_flash_v2/variants.hpp"
#include "algorithm.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "attention/problem_options.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "reference.hpp"
#if COURSE_HAS_CUDA
#include "device_run.hpp"
#endif

using namespace attention;
using course::Dtype;

namespace {

// --dump: the inputs and each variant's gradients as raw float32, for scripts/peers/check_backward.py.
struct Dump {
  std::string dir;
  std::vector<std::string> variants;
  void write(const std::string& name, const std::vector<float>& x) const {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * sizeof(float)));
    course::require(bool(f), "--dump: cannot write " + dir + "/" + name);
  }
  void meta(const Shape& s, Dtype t) const {
    std::ofstream f(dir + "/meta.json");
    f << "{\"B\": " << s.B << ", \"H\": " << s.H << ", \"N\": " << s.N << ", \"d\": " << s.d
      << ", \"causal\": " << (s.causal ? 1 : 0) << ", \"dtype\": \"" << course::name(t) << "\", \"variants\": [";
    for (std::size_t i = 0; i < variants.size(); ++i) f << (i ? ", " : "") << '"' << variants[i] << '"';
    f << "]}\n";
    course::require(bool(f), "--dump: cannot write " + dir + "/meta.json");
  }
};

using Counted = std::pair<course::IoCount, course::Comparison>;

// The runs that share a CPU count: standard attention's, and FlashAttention's by blocks and dQ pass.
std::string count_key(const BwdVariant& v, const Shape& s) {
  if (v.standard) return "standard";
  const BackwardPlan plan = v.plan_for(s);
  return std::to_string(plan.kv.Br) + "x" + std::to_string(plan.kv.Bc) + "/" + std::to_string(plan.dq_shares) +
         (plan.deterministic ? " det" : "");
}

// The CPU counts the runs need (standard attention's in fp32 only, whose kernels are the course's),
// each with its gradients checked against float64: one thread each, since the counting view is
// sequential and the counts share nothing but the read-only inputs and the forward's O and L.
std::map<std::string, Counted> count_on_cpu(const Shape& s, Dtype t, const std::vector<const BwdVariant*>& runs,
                                            const BackwardInputs& in, const BackwardReference& ref,
                                            course::Bench& bench, const std::string& problem) {
  // O and L before the jobs: destroyed after them, so that no thread still reads them (a future's
  // destructor waits for its thread), even when something throws.
  std::vector<float> O, L;  // the CPU forward (stage 06), once, for FlashAttention's counts
  std::map<std::string, std::future<Counted>> jobs;
  std::string names;
  for (const BwdVariant* v : runs) {
    const std::string key = count_key(*v, s);
    if (jobs.count(key) || (v->standard && t != Dtype::fp32)) continue;
    if (!v->standard && O.empty()) {
      bench.progress(problem, "the forward on the CPU (stage 06), for the counts");
      O.assign(s.elements(), NAN), L.assign(std::size_t(s.heads()) * s.N, NAN);
      flash_v2_counted(s, t, Tiles{128, 64}, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), O.data(), L.data());
    }
    jobs[key] = std::async(std::launch::async, [&, v] {
      std::vector<float> dQ(s.elements(), NAN), dK(s.elements(), NAN), dV(s.elements(), NAN);
      const course::IoCount io =
          v->standard ? standard_backward_counted(s, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data(),
                                                  dQ.data(), dK.data(), dV.data())
                      : flash_backward_counted(s, t, v->plan_for(s), in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(),
                                               O.data(), in.dO.data(), L.data(), dQ.data(), dK.data(), dV.data());
      return Counted{io, ref.check_all(dQ.data(), dK.data(), dV.data())};
    });
    names += (names.empty() ? "" : ", ") + v->name;
  }
  if (!jobs.empty()) bench.progress(problem, "counting IO on the CPU: " + names + " (a thread each)");
  std::map<std::string, Counted> counted;
  for (auto& [key, job] : jobs) counted[key] = job.get();
  return counted;
}

// The forward of FlashAttention's variants: the program's, or stage 06's fastest for the dtype.
const ForwardVariant& forward_of(const BackwardProgram& program, Dtype t) {
  return program.forward ? *program.forward : v2_registry().find(t == Dtype::fp32 ? "flash_v2" : "tuned");
}

}  // namespace

namespace attention {

int run_backward_program(const BackwardProgram& program, int argc, char** argv) {
  const Registry<BwdVariant>& registry = program.registry;
  CLI::App app{program.stage + ": " + program.description};
  course::CommonOptions options;
  ProblemOptions problem;
  problem.base.H = 2;
  bool keys_almost_equal = false, unrounded_o = false;
  int check_heads = 3;
  std::string dump_dir;
  bool with_forward = false;
  course::add_common_options(app, options);
  ProblemChoices choices;
  choices.ds = {32, 64, 128};  // 32: fp32 only
  choices.dtypes = {"fp32", "fp16", "bf16"};
  add_problem_options(app, problem, choices);
  {
    std::vector<const VariantInfo*> rungs, ablations, beside;
    for (const auto& v : registry.rungs()) rungs.push_back(&v);
    for (const auto& v : registry.ablations()) ablations.push_back(&v);
    for (const auto& v : program.beside) beside.push_back(&v);
    app.footer(variants_help(rungs, ablations, beside));
  }
  app.add_option("--check-heads", check_heads,
                 "Heads the float64 reference computes when B*H*N > 16384 (first, middle, last)")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  app.add_flag("--keys-almost-equal", keys_almost_equal,
               "Chapter 07's input for the precision of D: K_j = k0 + delta_j (k0 the head's first key, delta "
               "uniform in +-0.1), every attention row nearly uniform");
  app.add_flag("--unrounded-o", unrounded_o,
               "D from O before its rounding to the dtype (the forward also writes O in fp32; fp16 and bf16, "
               "FlashAttention's variants; rows named <variant>_unrounded_o): chapter 07's precision of D");
  app.add_option("--dump", dump_dir,
                 "Write the inputs and every GPU variant's gradients to this (existing) directory as raw "
                 "float32, for scripts/peers/check_backward.py (one N and one dtype)");
  app.add_flag("--with-forward", with_forward,
               "Time the forward pass and the backward pass together (variants named <name>_fwdbwd): "
               "FlashAttention's with " +
                   (program.forward ? "the forward '" + program.forward->name + "'" : std::string("stage 06's fastest forward")) +
                   ", standard attention with its own");
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program(program.stage.c_str(), [&]() -> int {
    std::vector<std::string> known = course::names_of(registry.rungs());
    for (const auto* list : {&program.beside, &registry.ablations()})
      for (const auto& v : *list) known.push_back(v.name);
    course::finish_common_options(options, known);
    const std::vector<Shape> shapes = problem.shapes();
    course::require(dump_dir.empty() || (shapes.size() == 1 && problem.dtype_names.size() == 1),
                    "--dump takes one N (--seq) and one dtype (--dtype)");
    const std::vector<Dtype> dtypes = dtypes_to_run(takes_of(registry.rungs()), options.variants,
                                                    problem.dtypes(), problem.dtype_given, problem.base.d);
    const double count_limit = problem.count_limit;
    course::Bench bench(program.stage.c_str(), options);
    std::vector<std::string> notes;
    if (unrounded_o)
      notes.push_back("*_unrounded_o: D from O before its rounding (the forward also writes O in fp32, 4 bytes a value; "
                      "the preprocess reads those instead of O's 2); on the GPU only: the CPU columns (model, counted, "
                      "and the error of a CPU-only run) are those of D from the rounded O");

    for (const Shape& s : shapes) {
      const int N = s.N;
      for (Dtype t : dtypes) {
        std::vector<const BwdVariant*> runs;
        // The rungs and what runs beside them, unless --variants names others; ablations when named.
        for (const auto* list : {&registry.rungs(), &program.beside})
          for (const auto& v : *list)
            if (v.supports(t, s.d) && course::selected(options, v.name)) runs.push_back(&v);
        for (const auto& v : registry.ablations())
          if (v.supports(t, s.d) && !options.variants.empty() && course::selected(options, v.name)) runs.push_back(&v);
        if (runs.empty()) continue;
        course::require_fits(10.0 * double(s.elements()) * 4.0, 0.0, "the inputs of " + s.text());
        const std::string problem_text = s.text() + " " + course::name(t);
        // The CPU counts (standard attention's in fp32 only) and the GPU runs are what the float64
        // reference is for; without either it is not computed.
        bool count = problem.counts(s) && !with_forward;
        if (count) {
          bool any = false;
          for (const BwdVariant* v : runs) any = any || !v->standard || t == Dtype::fp32;
          count = any;
        }
        const bool checked = count || bench.use_gpu();
        bench.progress(problem_text, checked ? "inputs and the float64 reference" : "inputs (nothing to check: no reference)");
        BackwardInputs in = make_backward_inputs(s, t, options.seed, problem.q_scale);
        if (keys_almost_equal) make_keys_almost_equal(s, t, in.fwd);
        std::optional<BackwardReference> ref;
        if (checked) ref.emplace(s, t, in.fwd.Q.data(), in.fwd.K.data(), in.fwd.V.data(), in.dO.data(), check_heads);
        const std::map<std::string, Counted> counted =
            count ? count_on_cpu(s, t, runs, in, *ref, bench, problem_text) : std::map<std::string, Counted>{};
        Dump dump{dump_dir, {}};
        if (!dump_dir.empty()) {
          dump.write("Q.bin", in.fwd.Q), dump.write("K.bin", in.fwd.K), dump.write("V.bin", in.fwd.V);
          dump.write("dO.bin", in.dO);
        }

        for (const BwdVariant* v : runs) {
          const BackwardPlan plan = v->plan_for(s);
          std::string blocks = v->standard ? "" : " Br=" + std::to_string(plan.kv.Br) + " Bc=" + std::to_string(plan.kv.Bc);
          const bool from_unrounded = unrounded_o && !v->standard && t != Dtype::fp32;
          course::Row row = bench.row(v->name + (from_unrounded ? "_unrounded_o" : "") + (with_forward ? "_fwdbwd" : ""),
                                      s.text() + blocks);
          row.dtype = course::name(t);
          row.size = N;
          row.flops = backward_flops(s) + (with_forward ? s.flops() : 0.0);
          double model = v->standard ? standard_backward_model_bytes(s, t) : flash_backward_model_bytes(s, t, plan);
          if (with_forward) {
            const ForwardVariant& f = forward_of(program, t);
            model += v->standard ? standard_forward_model_bytes(s, t) : flash_v2_model_bytes(s, t, f.tiles(s));
          }
          row.io_model_bytes = model;
          if (const auto c = counted.find(count_key(*v, s)); c != counted.end())
            bench.record_counted(row, c->second.first, c->second.second);
#if COURSE_HAS_CUDA
          if (bench.use_gpu()) {
            const double device = v->standard ? standard_backward_device_bytes(s, t)
                                              : flash_backward_device_bytes(s, t, plan.deterministic) +
                                                    (from_unrounded ? 4.0 * double(s.elements()) : 0.0);  // O32
            try {
              course::require_fits(0.0, device, v->name + " " + s.text());
            } catch (const course::ResourceError& e) {
              row.device = course::device_label();
              notes.push_back(v->name + " " + problem_text + ": not run, out of device memory (" + e.what() + ")");
              bench.add(row);
              continue;
            }
            course::reset_device_peak();
            BackwardDeviceRun dev(s, t, in, *v);
            if (unrounded_o) dev.use_unrounded_o();
            dev.forward(s, program.forward);
            dev.poison();
            bench.measure_gpu(row, [&] {
              if (with_forward) dev.forward(s, program.forward);
              v->launch(s, t, dev.args());
            }, [&] {
              if (!dump_dir.empty()) {
                const std::string name = v->name + (from_unrounded ? "_unrounded_o" : "");
                dump.write(name + ".dQ.bin", dev.dQ()), dump.write(name + ".dK.bin", dev.dK());
                dump.write(name + ".dV.bin", dev.dV());
                dump.variants.push_back(name);
              }
              const std::size_t head = std::size_t(N) * s.d;
              const auto dQ = dev.heads(0, ref->heads(), head), dK = dev.heads(1, ref->heads(), head),
                         dV = dev.heads(2, ref->heads(), head);
              return ref->check_all_heads(dQ.data(), dK.data(), dV.data());
            });
          }
#endif
          bench.add(row);
        }
        if (!dump_dir.empty()) dump.meta(s, t);
      }
    }
    notes.insert(notes.begin(),
                 {"model: the chapter's formula for bytes between the SMs and L2 (the backward pass only: "
                  "preprocess, main pass(es), dQ; standard: each step's inputs and output once; with "
                  "--with-forward, the forward's too); counted: the CPU run through the counting view "
                  "(B*H*N*N*d <= " + std::to_string(static_cast<long long>(count_limit)) +
                      ", else n/a; standard attention: fp32 only, whose kernels are the course's; in "
                      "fp16/bf16 its products are cuBLAS's)",
                  "max rel err: the gradient (dQ, dK or dV) closest to its tolerance, against float64 on the "
                  "rounded inputs (fp32: the course's per-element error; fp16/bf16: max |x - ref| / rms(ref), "
                  "FlashAttention's measure, held to twice that of the backward computed plainly in the dtype; every head if B*H*N <= 16384, else " + std::to_string(check_heads) +
                      "); TFLOP/s from 2.5 * 4*B*H*N^2*d (3.5 * with --with-forward; halved when causal, even for "
                      "standard attention, which computes the whole square)"});
    char title[256];
    std::snprintf(title, sizeof title,
                  "%s on %s, Q, K, V, dO uniform in [-1, 2) (Q times %g%s), seed %llu (repeat with --seed %llu)",
                  program.stage.c_str(), course::device_label().c_str(), double(problem.q_scale), keys_almost_equal ? "; keys almost equal" : "",
                  static_cast<unsigned long long>(options.seed),
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}

}  // namespace attention
