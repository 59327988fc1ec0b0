// io_probe: does the "measured" IO column measure what we think it does?
//
// A copy kernel over B bytes must read B bytes and write B bytes, at both levels (SM<->L2 and
// L2<->DRAM; see common/counters.hpp for the counters). This program copies buffers from a quarter of the L2 up to many times its size and
// prints what the counters say, as multiples of B. Expected: L2 read = L2 write = 1.00 at every
// size; DRAM read = 1.00 at every size (the L2 is flushed first); DRAM write < 1 for buffers that
// fit in the L2 (dirty lines are still in the L2 when the range ends), approaching 1.00 as the
// buffer grows past it. scripts/gpu_session.sh compares the same kernel with Nsight Compute.
#include <cstdio>
#include <iostream>
#include <vector>

#include "check.hpp"
#include "counters.hpp"
#include "gpu.hpp"
#include "options.hpp"
#include "report.hpp"
#if COURSE_HAS_CUDA
#include "copy.cuh"
#include "device_buffer.hpp"
#include "inputs.hpp"
#include "timer.hpp"
#endif

int main(int argc, char** argv) {
  CLI::App app{"io_probe: check the measured IO against a copy kernel, and measure copy bandwidth"};
  course::CommonOptions options;
  std::vector<double> l2_multiples = {0.25, 1, 4, 20};
  add_common_options(app, options);
  app.add_option("--l2-multiples", l2_multiples, "Buffer sizes as multiples of the L2 size")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program("io_probe", [&]() -> int {
    course::finish_common_options(options, {"copy"});
#if COURSE_HAS_CUDA
    if (!course::gpu().available || options.no_gpu) {
      std::cout << "io_probe measures a GPU; none is used: "
                << (options.no_gpu ? "--no-gpu" : course::gpu().why_not) << "\n";
      return 0;
    }
    const auto& gpu = course::gpu();
    std::cout << "io_probe on " << gpu.name << " (L2 " << course::human_bytes(double(gpu.l2_bytes))
              << ")\n";
    std::vector<course::Row> rows;
    std::vector<std::string> notes;
    for (double multiple : l2_multiples) {
      const std::size_t n = static_cast<std::size_t>(multiple * double(gpu.l2_bytes) / 4.0);
      course::require(n >= 1, "buffer too small");
      const double bytes = 4.0 * double(n);
      course::require_fits(bytes, 2.0 * bytes, "a copy of " + course::human_bytes(bytes));
      const auto host = course::random_uniform(n, options.seed);
      course::DeviceBuffer<float> src(host), dst(n);
      dst.poison();
      course::launch_copy(src.get(), dst.get(), n);
      course::require(dst.download() == host, "the copy kernel produced a wrong result");

      course::Row row;
      row.stage = "io_probe";
      row.variant = "copy";
      row.device = gpu.name;
      row.dtype = "fp32";
      row.shape = "bytes=" + std::to_string(std::size_t(bytes));
      row.size = bytes;
      row.io_model_bytes = 2.0 * bytes;
      row.io_counted_bytes = 2.0 * bytes;
      row.peak_mem_bytes = 2.0 * bytes;
      row.max_rel_err = 0.0;
      const auto timing = course::time_gpu([&] { course::launch_copy(src.get(), dst.get(), n); },
                                           {options.warmup, options.reps});
      row.ms = timing.median_ms;
      row.derive_rates();
      const auto measured =
          course::measure_traffic([&] { course::launch_copy(src.get(), dst.get(), n); });
      if (measured.traffic) {
        const auto& t = *measured.traffic;
        row.dram_read_bytes = t.dram_read_bytes;
        row.dram_write_bytes = t.dram_write_bytes;
        row.l2_read_bytes = t.l2_read_bytes;
        row.l2_write_bytes = t.l2_write_bytes;
        std::printf("%8.2fx L2 (%10s): %8.1f GB/s | DRAM read %.3fx write %.3fx | L2 read %.3fx "
                    "write %.3fx\n",
                    multiple, course::human_bytes(bytes).c_str(), *row.gbps,
                    t.dram_read_bytes / bytes, t.dram_write_bytes / bytes, t.l2_read_bytes / bytes,
                    t.l2_write_bytes / bytes);
        for (const auto& [name, value] : t.extra) std::printf("           %s = %.6g\n", name.c_str(), value);
      } else {
        std::printf("%8.2fx L2 (%10s): %8.1f GB/s | counters n/a: %s\n", multiple,
                    course::human_bytes(bytes).c_str(), *row.gbps, measured.why_not.c_str());
        if (notes.empty()) notes.push_back("measured IO n/a: " + measured.why_not);
      }
      rows.push_back(row);
    }
    course::print_table(std::cout, rows, notes);
    if (!options.csv.empty()) course::append_csv(options.csv, rows);
    return 0;
#else
    std::cout << "io_probe measures a GPU: " << course::gpu().why_not << "\n";
    return 0;
#endif
  });
}
