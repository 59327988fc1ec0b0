#include "bench.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "counters.hpp"
#include "gpu.hpp"
#include "kernel_time.hpp"
#if COURSE_HAS_CUDA
#include "device_buffer.hpp"
#include "timer.hpp"
#endif

namespace course {

Bench::Bench(std::string stage, const CommonOptions& options)
    : stage_(std::move(stage)), options_(options), use_gpu_(gpu().available && !options.no_gpu) {}

void Bench::progress(const std::string& problem, const std::string& what) const {
  std::fprintf(stderr, "[%s] %s: %s\n", stage_.c_str(), problem.c_str(), what.c_str());
}

Row Bench::row(const std::string& variant, const std::string& shape) const {
  Row r;
  r.stage = stage_;
  r.variant = variant;
  r.device = "cpu";
  r.dtype = "fp32";
  r.shape = shape;
  return r;
}

void Bench::report_check(const Row& row, const char* where, const Comparison& check) {
  if (check.ok()) return;
  all_ok_ = false;
  std::cerr << where << " " << row.variant << " " << row.shape << ": " << check.summary() << "\n"
            << check.first_mismatches;
}

void Bench::record_counted(Row& row, const IoCount& io, const Comparison& check) {
  row.io_counted_bytes = double(io.total());
  row.max_rel_err = check.max_rel_err;
  report_check(row, "CPU", check);
}

void Bench::measure_gpu(Row& row, const std::function<void()>& launch,
                        const std::function<Comparison()>& check) {
#if COURSE_HAS_CUDA
  progress(row.shape, row.variant + ": GPU check");
  launch();
  if (check) {
    const Comparison result = check();
    row.max_rel_err = result.max_rel_err;
    report_check(row, "GPU", result);
  } else {
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  row.device = gpu().name;
  later_rounds_.clear();
  const int rounds = options_.rounds;
  for (int k = 1; k <= rounds; ++k) {
    progress(row.shape, row.variant + ": timing" +
                            (rounds > 1 ? " (round " + std::to_string(k) + " of " + std::to_string(rounds) + ")" : ""));
    const Timing t = time_gpu(launch, {options_.warmup, options_.reps});
    if (k == 1) {
      row.ms = t.median_ms;
      row.ms_min = t.min_ms;
      row.ms_max = t.max_ms;
      row.round = 1;
      if (options_.kernel_time) {
        progress(row.shape, row.variant + ": kernel time (CUPTI activity records)");
        const KernelTimeResult kt = measure_kernel_time(launch, options_.reps, options_.warmup);
        if (kt.time) {
          row.kernel_ms = kt.time->median_ms;
          if (kt.time->ops > 0) row.kernels = kt.time->ops;
          const int ops = kt.time->ops;
          std::string what = ops < 0 ? "a varying number of pieces of GPU work a call"
                                     : std::to_string(ops) + (ops == 1 ? " piece" : " pieces") + " of GPU work a call";
          for (size_t i = 0; i < kt.time->names.size(); ++i) what += (i ? ", " : ": ") + kt.time->names[i];
          char text[512];
          std::snprintf(text, sizeof text, "%-17s %-5s %-32s events %.4g ms, kernels %.4g ms (%+.1f%%), %s",
                        row.variant.c_str(), row.dtype.c_str(), row.shape.c_str(), t.median_ms, kt.time->median_ms,
                        100.0 * (kt.time->median_ms / t.median_ms - 1.0), what.c_str());
          kernel_lines_.push_back(text);
        } else {
          kernel_note_ = kt.why_not;
        }
      }
    } else {
      later_rounds_.push_back({k, t.median_ms, t.min_ms, t.max_ms});
    }
    between_rounds(row, k);
  }
  if (options_.sustain > 0) {
    progress(row.shape, row.variant + ": sustained calls");
    const Sustained s = time_sustained(launch, options_.sustain, [&](bool end) {
      if (end) std::printf("[sustain] end\n");
      else std::printf("[sustain] start %s | %s | %s\n", row.variant.c_str(), row.dtype.c_str(), row.shape.c_str());
      std::fflush(stdout);
    });
    std::printf("[sustain] result calls=%ld gpu_ms=%.4f ms_per_call=%.6f\n", s.calls, s.ms,
                s.ms / double(std::max(s.calls, 1L)));
    std::fflush(stdout);
  }
  progress(row.shape, row.variant + ": hardware counters");
  const CounterResult measured = measure_traffic(launch);
  if (measured.traffic) {
    row.dram_read_bytes = measured.traffic->dram_read_bytes;
    row.dram_write_bytes = measured.traffic->dram_write_bytes;
    row.l2_read_bytes = measured.traffic->l2_read_bytes;
    row.l2_write_bytes = measured.traffic->l2_write_bytes;
    for (const auto& [name, value] : measured.traffic->extra) {
      char text[256];
      std::snprintf(text, sizeof text, "%-17s %-24s %s = %.6g", row.variant.c_str(),
                    row.shape.c_str(), name.c_str(), value);
      extra_lines_.push_back(text);
    }
  } else {
    counters_note_ = measured.why_not;
  }
  row.peak_mem_bytes = double(device_bytes_peak());
#else
  (void)row, (void)launch, (void)check;
#endif
}

std::string run_between_rounds(const std::string& command, const Row& row, int round) {
  setenv("COURSE_STAGE", row.stage.c_str(), 1);
  setenv("COURSE_VARIANT", row.variant.c_str(), 1);
  setenv("COURSE_DTYPE", row.dtype.c_str(), 1);
  setenv("COURSE_SHAPE", row.shape.c_str(), 1);
  setenv("COURSE_ROUND", std::to_string(round).c_str(), 1);
  std::cout.flush();
  std::fflush(nullptr);
  const int status = std::system(command.c_str());
  if (status == 0) return "";
  if (status == -1) return "could not be started";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

void Bench::between_rounds(const Row& row, int round) {
  if (options_.between_rounds.empty() || !rounds_note_.empty()) return;
  const std::string how = run_between_rounds(options_.between_rounds, row, round);
  if (how.empty()) return;
  rounds_note_ = "--between-rounds '" + options_.between_rounds + "' failed (" + how + ") after round " +
                 std::to_string(round) + " of " + row.variant + " " + row.dtype + " " + row.shape +
                 "; not run again";
  std::cerr << rounds_note_ << "\n";
}

void Bench::add(Row row) {
  row.derive_rates();
  rows_.push_back(row);
  for (const Round& r : later_rounds_) {
    Row next = row;
    next.ms = r.median_ms;
    next.ms_min = r.min_ms;
    next.ms_max = r.max_ms;
    next.round = r.round;
    // Measured once, in the first round: not repeated in the rows of the others.
    next.max_rel_err.reset();
    next.kernel_ms.reset();
    next.kernels.reset();
    next.dram_read_bytes.reset();
    next.dram_write_bytes.reset();
    next.l2_read_bytes.reset();
    next.l2_write_bytes.reset();
    next.derive_rates();
    rows_.push_back(std::move(next));
  }
  later_rounds_.clear();
}

int Bench::finish(const std::string& title, std::vector<std::string> notes) {
  std::cout << title << "\n";
  if (!use_gpu_) {
    notes.push_back("GPU columns n/a: " + (options_.no_gpu           ? std::string("--no-gpu was given")
                                           : !gpu_unsuitable_.empty() ? gpu_unsuitable_
                                                                      : gpu().why_not));
  } else if (!counters_note_.empty()) {
    notes.push_back("measured IO n/a: " + counters_note_);
  }
  if (use_gpu_ && options_.rounds > 1)
    notes.push_back("--rounds " + std::to_string(options_.rounds) +
                    ": a row a round; the counters, the kernel time and the error are measured in the first");
  if (use_gpu_ && options_.kernel_time && !kernel_note_.empty()) notes.push_back("kernel time n/a: " + kernel_note_);
  if (!rounds_note_.empty()) notes.push_back(rounds_note_);
  print_table(std::cout, rows_, notes);
  if (!extra_lines_.empty()) {
    std::cout << "extra counters (--metrics):\n";
    for (const auto& line : extra_lines_) std::cout << "  " << line << "\n";
  }
  if (!kernel_lines_.empty()) {
    std::cout << "kernel time (--kernel-time: the GPU's own time of a call's kernels, memsets and copies, "
                 "summed, without the L2 flush before it; median of --reps, against the event time of "
                 "the same round):\n";
    for (const auto& line : kernel_lines_) std::cout << "  " << line << "\n";
  }
  if (!options_.csv.empty()) append_csv(options_.csv, rows_);
  if (!all_ok_) {
    std::cerr << stage_ << ": verification FAILED (see above)\n";
    return 1;
  }
  return 0;
}

}  // namespace course
