#include "flash_bench.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>

#include "bench.hpp"
#include "check.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "options.hpp"
#include "reference.hpp"
#if COURSE_HAS_CUDA
#include "device_buffer.hpp"
#endif

namespace attention {

int run(int argc, char** argv, const Program& program) {
  CLI::App app{program.description};
  course::CommonOptions options;
  Shape base;
  base.H = 2;
  std::vector<int> seq = {256, 1000};
  std::vector<long long> sram;
  double count_limit = double(1 << 28);
  course::add_common_options(app, options);
  app.add_option("--batch", base.B, "Batch size B")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--heads", base.H, "Heads H")->check(course::whole_number(1))->capture_default_str();
  app.add_option("--seq", seq, "Sequence lengths N to sweep, comma-separated")
      ->delimiter(',')
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--d", base.d, "Head dimension d (32, 64 or 128)")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  app.add_flag("--causal", base.causal, "Causal mask: query i sees keys j <= i");
  app.add_option("--sram", sram,
                 "SRAM budgets M in floats for the tiled variants, comma-separated: Bc = ceil(M / 4d), "
                 "Br = min(Bc, d) (default: the largest the kernel is compiled for)")
      ->delimiter(',')
      ->check(course::whole_number(1));
  app.add_option("--count-limit", count_limit,
                 "Run the CPU counting versions only when B*H*N*N*d is at most this")
      ->check(course::number(0.0))
      ->capture_default_str();
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program(program.stage, [&]() -> int {
    course::finish_common_options(options, course::names_of(program.variants));
    require_supported(base);
    if (sram.empty()) sram = program.default_sram(base.d);
    course::Bench bench(program.stage, options);
    for (long long M : sram) program.check_sram(M, base.d, bench.use_gpu());  // now, not mid-run

    std::vector<std::string> notes;
    for (int N : seq) {
      Shape s = base;
      s.N = N;
      require_supported(s);
      const double bytes = 4.0 * double(s.elements());
      course::require_fits(6.0 * bytes, 0.0, "the inputs of " + s.text());
      bench.progress(s.text(), "inputs");
      const auto Q = course::random_uniform(s.elements(), options.seed);
      const auto K = course::random_uniform(s.elements(), options.seed + 1);
      const auto V = course::random_uniform(s.elements(), options.seed + 2);
      auto check = [&](const std::vector<float>& O) {
        return check_attention(s, Q.data(), K.data(), V.data(), O.data());
      };
      const bool count = double(s.heads()) * N * double(N) * s.d <= count_limit;

      for (const Variant& v : program.variants) {
        if (!course::selected(options, v.name)) continue;
        const std::vector<long long> budgets = v.tiled ? sram : std::vector<long long>{0};
        for (long long M : budgets) {
          const Blocks blocks = v.tiled ? flash_v1_blocks(M, s.d) : Blocks{0, 0};
          const std::string shape =
              s.text() + (v.tiled ? " M=" + std::to_string(M) + " Bc=" + std::to_string(blocks.Bc) +
                                        " Br=" + std::to_string(blocks.Br)
                                  : "");
          course::Row row = bench.row(v.name, shape);
          row.size = N;
          row.flops = s.flops();
          row.io_model_bytes = v.model(s, blocks);
          if (count && v.counted) {
            bench.progress(shape, v.name + ": counting IO on the CPU");
            std::vector<float> O(s.elements(), NAN);
            const auto io = v.counted(s, blocks, Q.data(), K.data(), V.data(), O.data());
            bench.record_counted(row, io, check(O));
          }
#if COURSE_HAS_CUDA
          if (bench.use_gpu() && v.gpu) {
            const double device = 4.0 * bytes + 4.0 * double(v.workspace_floats(s));
            try {
              course::require_fits(0.0, device, v.name + " " + s.text());
            } catch (const course::ResourceError& e) {
              row.device = course::device_label();
              notes.push_back(v.name + " " + shape + ": not run, out of device memory (" + e.what() + ")");
              bench.progress(shape, v.name + ": out of device memory");
              bench.add(row);
              continue;
            }
            course::reset_device_peak();
            course::DeviceBuffer<float> dQ(Q), dK(K), dV(V), dO(s.elements()),
                dW(std::max<std::size_t>(1, v.workspace_floats(s)));
            dO.poison();
            dW.poison();
            bench.measure_gpu(
                row, [&] { v.gpu(s, blocks, dQ.get(), dK.get(), dV.get(), dO.get(), dW.get()); },
                [&] { return check(dO.download()); });
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
                  "L2 r+w, DRAM r+w: measured by the GPU's counters; max rel err vs float64 on every "
                  "head if B*H*N <= 16384, else the first, middle and last (all rows up to N = 2048, "
                  "else 1025 of them); "
                  "TFLOP/s from 4·B·H·N²·d (halved when causal)"});
    return bench.finish(program.stage + " on " + course::device_label() +
                            ", fp32, Q, K, V uniform in [-1, 2), seed " +
                            std::to_string(options.seed) + " (repeat with --seed " +
                            std::to_string(options.seed) + ")",
                        notes);
  });
}

}  // namespace attention
