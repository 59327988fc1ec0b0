// 10_ring_attention: one sequence across G GPUs. Each rank keeps its chunks of Q; the K/V shards go
// round the ring over NCCL, one hop a step, while each rank computes its queries against the shard in
// hand (stage 08's last rung) and merges the partial (O, L) by ⊕. Rows, for each problem:
//   single                 stage 08's last rung on the whole sequence on one GPU (the same total work)
//   ring, zigzag           the ring over NCCL on G GPUs (zigzag: 2 chunks a rank, r and 2G − 1 − r)
//   <layout>_compute       the same ring with nothing sent (each rank computes on the shard it holds)
//   <layout>_transfers     the same ring's transfers alone
//   <layout>_peer          the same ring, each shard pulled by cudaMemcpyPeerAsync (copy engines, no SMs)
//   <layout>_copies        G ranks on one GPU, device copies in place of NCCL (runs on any Hopper)
//   single_fb, <layout>_fb, <layout>_fb_copies   forward + backward (stage 07's fastest pass per pair)
// and a summary: each rank's time, the scaling against `single`, the share of the transfers hidden
// under the compute. docs/10_ring_attention.md explains.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "attention/problem.hpp"
#include "attention/reference.hpp"
#include "../07_backward/problem.hpp"
#include "../07_backward/reference.hpp"
#include "../08_flash_v3/variants.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "counters.hpp"
#include "dtype.hpp"
#include "gpu.hpp"
#include "attention/problem_options.hpp"
#include "options.hpp"
#include "ring.hpp"
#include "variants.hpp"
#if COURSE_HAS_HOPPER
#include "attention/device_run.hpp"
#include "../07_backward/kernels.cuh"
#include "engine.hpp"
#include "timer.hpp"
#endif

using namespace attention;
using course::Dtype;

namespace {

// Stage 08's last rung, named: GCC 13 warns of a dangling reference when v3_variant gets a temporary.
const std::string kTuned = "tuned";

#if COURSE_HAS_HOPPER
// Each rank's timeline, the median of `reps` more calls of `call` (no L2 flush between them), as a
// line of the summary: span, the K/V passes' time and bandwidth, the time the compute waited and the
// share hidden; after a backward also the running dK, dV's passes and the last one home.
std::string timelines(ring::Engine& engine, const std::function<void()>& call, const std::string& label,
                      const ring::Split& split, const Shape& s, Dtype t, std::optional<double> single_ms,
                      std::optional<double> ring_ms, int reps) {
  std::vector<std::vector<ring::Engine::Timeline>> runs;
  for (int i = 0; i < reps; ++i) {
    call();
    runs.push_back(engine.timeline());
  }
  auto median = [&](int r, float ring::Engine::Timeline::*field) {
    std::vector<float> v;
    for (const auto& run : runs) v.push_back(run[std::size_t(r)].*field);
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0f : v[v.size() / 2];
  };
  using T = ring::Engine::Timeline;
  const int G = split.G();
  std::string line = label + ": ";
  char text[256];
  for (int r = 0; r < G; ++r) {
    const float span = median(r, &T::span_ms), moved = median(r, &T::transfers_ms), waited = median(r, &T::waited_ms);
    std::snprintf(text, sizeof text, "%srank %d %.3f ms (transfers %.3f ms, %.0f GB/s; waited %.3f ms: %.0f%% hidden)",
                  r ? "; " : "", r, span, moved,
                  moved > 0 ? 1e-6 * double(ring::shard_bytes(split, s, t)) * (G - 1) / moved : 0.0, waited,
                  moved > 0 ? 100.0 * (1.0 - waited / moved) : 0.0);
    line += text;
    if (const float sums = median(r, &T::sums_ms); sums > 0) {
      const double sums_bytes = double(ring::gradient_shard_bytes(split, s));  // a pass: dK, dV in float
      const float sums_waited = median(r, &T::sums_waited_ms), home = median(r, &T::home_ms);
      // The passes' time includes the wait of their kernels for SMs that the attention holds; the
      // last pass runs alone, so its bandwidth is the link's.
      std::snprintf(text, sizeof text, " (dK, dV passes %.3f ms; waited %.3f ms before the last; home %.3f ms, %.0f GB/s)",
                    sums, sums_waited, home, home > 0 ? 1e-6 * sums_bytes / home : 0.0);
      line += text;
    }
  }
  std::snprintf(text, sizeof text, "; enqueue %.3f ms", engine.enqueue_ms());
  line += text;
  if (single_ms && ring_ms) {
    std::snprintf(text, sizeof text, "; scaling %.1f%% of ideal (single / (G x ring))", 100.0 * *single_ms / (G * *ring_ms));
    line += text;
  }
  return line;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"10_ring_attention: one sequence across GPUs, K/V round a ring over NCCL, merged by ⊕"};
  course::CommonOptions options;
  ProblemOptions problem;
  problem.base.B = 1;
  problem.base.H = 4;
  problem.base.d = 128;
  problem.seq = {4096};
  std::vector<std::string> layout_names = {"ring", "zigzag"};
  int gpus = 0, virtual_ranks = 4;
  double timeout = 60.0;
  course::add_common_options(app, options);
  ProblemChoices choices;
  choices.default_dtypes = {"fp16"};
  choices.tokens = choices.q_scale = choices.count_limit = false;
  choices.seq_help = "Sequence lengths N (the whole sequence), comma-separated";
  choices.dtype_help = "Q, K, V and O's type, comma-separated (fp16, bf16)";
  add_problem_options(app, problem, choices);
  app.footer(ring_registry().help());
  app.add_option("--layouts", layout_names, "ring (a chunk a rank), zigzag (chunks r and 2G-1-r)")
      ->delimiter(',')
      ->check(CLI::IsMember({"ring", "zigzag"}))
      ->capture_default_str();
  app.add_option("--gpus", gpus, "Ranks over NCCL, one a GPU (default: every GPU, when there are 2 or more)")
      ->check(course::whole_number(1));
  app.add_option("--virtual-ranks", virtual_ranks, "Ranks of the *_copies rows, all on GPU 0")
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--timeout", timeout, "Seconds a checked forward may take before the ring is aborted")
      ->check(course::number(0.0))
      ->capture_default_str();
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("10_ring_attention", [&]() -> int {
    // By default: single, single_fb and the rows of the layouts --layouts names.
    std::vector<std::string> variants;
    for (const RingVariant& v : ring_registry().rungs())
      if (v.single || std::count(layout_names.begin(), layout_names.end(), v.layout())) variants.push_back(v.name);
    course::finish_common_options(options, ring_registry().names());
    // The hardware counters would read GPU 0 alone, over replays of a launch that drives every GPU:
    // the ring's IO here is the bytes it sends, in the model and counted.
    course::disable_counters("stage 10 drives several GPUs in one launch; the counters would read GPU 0 alone");
    const std::vector<Shape> shapes = problem.shapes();
    const std::vector<Dtype> dtypes = problem.dtypes();
    course::Bench bench("10_ring_attention", options);
    if (bench.use_gpu())
      if (const std::string why = course::why_not_hopper(COURSE_HAS_HOPPER, "stage 10 runs stage 08's kernel, which would");
          !why.empty())
        bench.disable_gpu(why);
    int G = gpus;
    std::vector<std::string> notes;
    [[maybe_unused]] bool nccl_runs = false;
#if COURSE_HAS_HOPPER
    const int have = bench.use_gpu() ? ring::gpu_count() : 0;
    if (G == 0) G = std::max(2, have);
    course::require(!bench.use_gpu() || gpus == 0 || gpus <= have,
                    "--gpus " + std::to_string(gpus) + ": this machine has " + std::to_string(have) + " GPU(s)");
    nccl_runs = bench.use_gpu() && ring::built_with_nccl() && have >= 2 && G >= 2;
    if (bench.use_gpu() && have >= 2) {  // every GPU's L2 cold before each timed run, not GPU 0's alone
      std::vector<int> devices;
      for (int d = 0; d < have; ++d) devices.push_back(d);
      course::flush_l2_also(devices);
    }
    if (bench.use_gpu() && !nccl_runs)
      notes.push_back(!ring::built_with_nccl() ? "ring/zigzag over NCCL: n/a, built without NCCL (set COURSE_NCCL_ROOT)"
                                               : "ring/zigzag over NCCL: n/a, this machine has " + std::to_string(have) +
                                                     " GPU (the *_copies rows run the ring on one)");
#else
    if (G == 0) G = 2;
#endif
    const std::vector<std::string> runs = options.variants.empty() ? variants : options.variants;
    std::vector<std::string> summary;
    for (const Shape& s : shapes)
      for (Dtype t : dtypes) {
        const int N = s.N;
        course::require(s.d == 64 || s.d == 128, "stage 10 runs d = 64 or 128, not d = " + std::to_string(s.d));
        const std::string problem_text = s.text() + " " + course::name(t);
        bench.progress(problem_text, "inputs and the float64 reference");
        const BackwardInputs bin = make_backward_inputs(s, t, options.seed);
        const Inputs& in = bin.fwd;
        std::optional<Reference> ref;
        [[maybe_unused]] auto reference = [&]() -> const Reference& {
          if (!ref) ref.emplace(s, t, in.Q.data(), in.K.data(), in.V.data());
          return *ref;
        };
        // The gradients' float64 reference costs O(N²·d) a head on the CPU: one head, up to N = 8192.
        [[maybe_unused]] const bool check_gradients = double(N) * N * s.d <= 8192.0 * 8192 * 128;
        // One per way of rounding dK, dV: the ring's layouts round each query chunk's share apart
        // (BackwardReference's partial groups, the split's chunk starts); the single GPU once.
        std::map<std::vector<int>, BackwardReference> brefs;
        [[maybe_unused]] auto gradients_ok = [&](const std::vector<int>& groups, const std::vector<std::uint16_t>& dQ,
                                const std::vector<std::uint16_t>& dK, const std::vector<std::uint16_t>& dV) {
          auto it = brefs.find(groups);
          if (it == brefs.end()) {
            bench.progress(problem_text, "the gradients' float64 reference (one head)");
            it = brefs.try_emplace(groups, s, t, in.Q.data(), in.K.data(), in.V.data(), bin.dO.data(), 1, groups).first;
          }
          bench.progress(problem_text, "the gradients against the reference");
          const auto q = course::to_floats(t, dQ), k = course::to_floats(t, dK), v = course::to_floats(t, dV);
          return it->second.check_all(q.data(), k.data(), v.data());
        };
        std::optional<double> single_ms, single_fb_ms;
        for (const std::string& name : runs) {
          const RingVariant& v = ring_registry().find(name);
          const bool is_single = v.single, fb = v.fb;
          const bool copies = !is_single && v.transport == ring::Transport::copies;
          const int ranks = is_single ? 1 : copies ? virtual_ranks : G;
          const ring::Split split(N, ranks, v.zigzag);  // throws when N does not split
          course::Row row = bench.row(name, s.text() + (is_single ? "" : " " + split.text()));
          row.dtype = course::name(t);
          row.size = N;
          if (v.part != ring::Part::transfers) row.flops = (fb ? 3.5 : 1.0) * s.flops();  // backward: 2.5 x forward
          if (!is_single) {
            row.io_model_bytes = double(ring::forward_bytes_sent(split, s, t) +
                                        (fb ? ring::backward_bytes_sent(split, s, t) : 0));  // a rank's sends
            if (!fb) {
              const ring::Traffic counted = ring::ring_traffic(split, s, t);
              row.io_counted_bytes = double(*std::max_element(counted.sent.begin(), counted.sent.end()));
            }
          }
#if COURSE_HAS_HOPPER
          const bool runs_here = bench.use_gpu() && (is_single || copies || (v.transport == ring::Transport::peer ? have >= G : nccl_runs));
          if (runs_here && is_single && fb) {
            // Stage 08's forward and stage 07's fastest backward (split at d = 128, wide at 64) on one GPU.
            DeviceRun dev(s, t, in);
            course::DeviceBuffer<std::uint16_t> dO(bin.dOh), dQ(s.elements()), dK(s.elements()), dV(s.elements());
            course::DeviceBuffer<float> D(std::size_t(s.heads()) * N), dQacc(s.elements());
            BackwardArgs a{};
            a.Q = dev.q(), a.K = dev.k(), a.V = dev.v(), a.O = dev.o(), a.dO = dO.get(), a.L = dev.L.get();
            a.D = D.get(), a.dQacc = dQacc.get(), a.dQ = dQ.get(), a.dK = dK.get(), a.dV = dV.get();
            const ForwardVariant& tuned = v3_registry().find(kTuned);
            dQ.poison(), dK.poison(), dV.poison();
            std::function<course::Comparison()> check;
            if (check_gradients) check = [&] { return gradients_ok({}, dQ.download(), dK.download(), dV.download()); };
            bench.measure_gpu(row, [&] {
              tuned.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get());
              launch_backward_preprocess(s, t, a);
              if (s.d == 128) launch_flash_backward_split(s, t, a);
              else launch_flash_backward_wide(s, t, a);
              launch_dq_convert(s, t, a);
            }, check);
            single_fb_ms = row.ms;
          } else if (runs_here && is_single) {
            DeviceRun dev(s, t, in);
            dev.poison();
            const ForwardVariant& tuned = v3_registry().find(kTuned);
            bench.measure_gpu(row, [&] { tuned.launch(s, t, dev.q(), dev.k(), dev.v(), dev.o(), dev.L.get()); }, [&] {
              const auto O = dev.O_values(t);
              auto c = reference().check_O(O.data());
              const auto L = reference().check_L(dev.L.download().data());
              if (!L.ok()) c.bad += L.bad + 1, c.first_mismatches += "  L: " + L.summary() + "\n";
              return c;
            });
            single_ms = row.ms;
          } else if (runs_here) {
            const ring::Transport transport = v.transport;
            const ring::Part part = v.part;
            ring::Engine engine(split, s, t, transport);
            engine.upload(in.Qh.data(), in.Kh.data(), in.Vh.data());
            engine.poison();
            if (fb) {
              engine.upload_dO(bin.dOh.data());
              std::function<course::Comparison()> check;
              if (check_gradients)
                check = [&] {
                  engine.wait(timeout);
                  bench.progress(problem_text, name + ": the ring finished; gradients gathered");
                  std::vector<std::uint16_t> dQ(s.elements()), dK(s.elements()), dV(s.elements());
                  engine.download_gradients(dQ.data(), dK.data(), dV.data());
                  return gradients_ok(split.starts(), dQ, dK, dV);
                };
              else {  // no check at this size; a ring that hangs still fails here
                engine.forward();
                engine.backward();
                engine.wait(timeout);
              }
              bench.measure_gpu(row, [&] { engine.forward(), engine.backward(); }, check);
              if (row.ms && !copies) {
                char text[200];
                std::snprintf(text, sizeof text, "%s %s %s: forward + backward %.3f ms", problem_text.c_str(), name.c_str(),
                              split.text().c_str(), *row.ms);
                std::string line = text;
                if (single_fb_ms) {
                  std::snprintf(text, sizeof text, ", scaling %.1f%% of ideal", 100.0 * *single_fb_ms / (ranks * *row.ms));
                  line += text;
                }
                summary.push_back(line);
                // The backward's own timeline: its K/V passes, and the running dK, dV's passes.
                summary.push_back(timelines(engine, [&] { engine.forward(), engine.backward(); },
                                            problem_text + " " + name + " " + split.text() + " backward", split, s, t,
                                            std::nullopt, std::nullopt, options.reps));
              }
              bench.add(row);
              continue;
            }
            if (part != ring::Part::all) {  // a part of the work, timed; no result to check
              engine.forward(part);
              engine.wait(timeout);  // a ring that hangs fails here, not in the timer
            }
            std::function<course::Comparison()> check;
            if (part == ring::Part::all)
              check = [&] {
                  engine.wait(timeout);
                  std::vector<std::uint16_t> O(s.elements());
                  std::vector<float> L(std::size_t(s.heads()) * N);
                  engine.download(O.data(), L.data());
                  const auto Of = course::to_floats(t, O);
                  auto c = reference().check_O(Of.data());
                  const auto Lc = reference().check_L(L.data());
                  if (!Lc.ok()) c.bad += Lc.bad + 1, c.first_mismatches += "  L: " + Lc.summary() + "\n";
                  return c;
                };
            bench.measure_gpu(row, [&] { engine.forward(part); }, check);
            if (part == ring::Part::all && transport != ring::Transport::copies)
              summary.push_back(timelines(engine, [&] { engine.forward(); }, problem_text + " " + name + " " + split.text(),
                                          split, s, t, single_ms, row.ms, options.reps));
          }
#endif
          bench.add(row);
        }
      }
    notes.insert(notes.begin(),
                 {"single: stage 08's last rung on the whole sequence, one GPU; ring/zigzag: over NCCL, one GPU a rank; "
                  "*_peer: the shards pulled by the copy engines (cudaMemcpyPeerAsync) instead of NCCL",
                  "*_compute: no transfers; *_transfers: the transfers alone; *_copies: the ranks on one GPU",
                  "*_fb: forward + backward (flops 3.5 x the forward's; gradients checked against float64 on one head "
                  "when N <= 8192, unchecked above), single_fb: stage 08's forward and stage 07's fastest backward on one GPU",
                  "model and counted IO: the bytes one rank sends over the forward (K and V of its chunks, padding rows "
                  "too, G - 1 times; *_fb: and the backward's, K and V again and dK, dV in float, G times); no hardware "
                  "counters (they would read GPU 0 alone)"});
    for (const auto& line : summary) notes.push_back(line);
    char title[256];
    std::snprintf(title, sizeof title, "10_ring_attention on %s, G = %d, seed %llu", course::device_label().c_str(), G,
                  static_cast<unsigned long long>(options.seed));
    return bench.finish(title, notes);
  });
}
